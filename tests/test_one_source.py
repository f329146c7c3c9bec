"""One source for each idea: the masked positions, the training data, the split streams, BP's marginals of the
predicted variable, and the architecture fields.

* masked positions: every evaluation set is masked at ``evaluation_positions(its split seed, n, ℓ)``, so the dataset
  card, the BP-KL callback and the model card report BP's single-mask accuracy on identical inputs: equal numbers;
* training data: ``load_run_data`` gives the same bytes through ``load_dataset("treelang", ...)`` as through
  ``sample_trees`` on the split seeds;
* split streams: the k_test sets and the train/validation splits never share draws;
* BP marginals of the predicted variable: ``core.oracle.predicted_marginals`` (checked against enumeration), which
  the callback's targets are;
* architecture: ``TreeLangConfig``'s fields, read back by ``ModelArguments`` and ``train.run.resolve``.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import re

import datasets
import numpy as np
import pytest
import torch
from transformers import PreTrainedConfig

import hf_treelang  # noqa: F401  (registers load_dataset("treelang"))
from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.masking import IGNORE_INDEX, evaluation_positions
from hf_treelang.core.oracle import predicted_marginals, task_inputs
from hf_treelang.core.sampling import split_seed
from hf_treelang.data import publish
from hf_treelang.models.configuration_treelang import TreeLangConfig
from hf_treelang.models.modeling_treelang import TreeLangForMaskedLM
from hf_treelang.train import folders, loop
from hf_treelang.train import run as run_module
from hf_treelang.train.arguments import (
    ARCHITECTURE_FIELDS,
    TASK_CONFIG_FIELDS,
    DataArguments,
    ModelArguments,
    TreeLangTrainingArguments,
)
from hf_treelang.train.callbacks import BPKLCallback
from hf_treelang.train.data import load_run_data, to_datasets
from hf_treelang.train.outputs import render_model_card

from enumeration import EnumeratedModel

TINY_MODEL = dict(hidden_size=8, num_hidden_layers=1, intermediate_size=8)


@pytest.fixture
def datasets_cache(tmp_path, monkeypatch):
    """A fresh HF_DATASETS_CACHE (datasets reads the variable at import, so its config value is patched)."""
    cache = tmp_path / "datasets_cache"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    return cache


def _data_args(**overrides) -> DataArguments:
    values = dict(grammar_seed=0, sigma=1.0, num_symbols=4, depth=4, k_train=2, num_train=64, num_eval=32,
                  num_test=200, k_test=[0, 2])
    values.update(overrides)
    args = DataArguments(**values)
    args.validate()
    return args


def _card_row(card: str, k_test: int) -> tuple:
    """(model accuracy, BP accuracy) strings of the k_test row of the model card's accuracy table."""
    match = re.search(rf"^\| {k_test} \| (\S+) \| (\S+) \|$", card, flags=re.MULTILINE)
    assert match, card
    return match.group(1), match.group(2)


# ---------------------------------------------------------------- one masked-position stream


def test_dataset_card_callback_and_model_card_report_the_same_bp_single_mask_accuracy(datasets_cache, tmp_path):
    # The dataset card's number: the test split of config k2, masked at its evaluation positions.
    sizes = dict(num_train=64, num_validation=32, num_test=200, cache_dir=str(tmp_path / "card_cache"))
    dataset = datasets.load_dataset("treelang", "k2", **sizes)
    builder = datasets.load_dataset_builder("treelang", "k2", **sizes)
    card_accuracy = publish.bp_accuracy(builder.config, builder.config.grammar()).single_mask

    # The callback's number: the same split read by a training run (through the dataset builder).
    data_args = _data_args(use_dataset_builder=True)
    data = load_run_data(data_args)
    np.testing.assert_array_equal(dataset["test"].with_format("numpy")["input_ids"], data.tests[2].leaves)
    callback = BPKLCallback(data.grammar, data_args.depth, data_args.k_train, "mlm", data.validation, data.tests)
    assert callback.prepare().bp_accuracy[2] == card_accuracy

    # The model card's number: the callback's compute() output, as loop.train passes it to the card.
    torch.manual_seed(0)
    model = TreeLangForMaskedLM(TreeLangConfig.from_data(num_symbols=4, depth=4, filter_level=2, **TINY_MODEL))
    final = callback.compute(model)
    assert final["eval_bp_acc_ktest2"] == card_accuracy
    training_args = TreeLangTrainingArguments(output_dir=str(tmp_path / "run"), report_to="none")
    card = render_model_card("mlm", data_args, ModelArguments(**TINY_MODEL), training_args, final, 1.0, 0)
    model_accuracy, bp_accuracy = _card_row(card, 2)
    assert bp_accuracy == f"{card_accuracy:.4f}"
    assert float(bp_accuracy) == card_accuracy  # 200 test sequences: a multiple of 0.005, exact at 4 decimals
    assert float(model_accuracy) == pytest.approx(final["eval_acc_ktest2"], abs=5e-5)


def test_every_evaluation_set_is_masked_at_the_evaluation_positions_of_its_split_seed():
    data_args = _data_args(use_dataset_builder=False, k_test=[0, 2, 4])
    data = load_run_data(data_args)
    targets = BPKLCallback(data.grammar, 4, 2, "mlm", data.validation, data.tests).prepare()

    def seed(level, split):
        return split_seed(0, 4, 1.0, 4, level, split)

    expected = evaluation_positions(seed(2, "validation"), 32, 4)
    np.testing.assert_array_equal(targets.in_sample.positions.numpy(), expected)
    for k in (0, 2, 4):
        np.testing.assert_array_equal(targets.tests[k].positions.numpy(), evaluation_positions(seed(k, "test"), 200, 4))
        rows = np.arange(200)
        assert (targets.tests[k].inputs.numpy()[rows, targets.tests[k].positions.numpy()] == 4).all()
    # The Trainer's MLM validation set is premasked at the same positions.
    _, validation = to_datasets("mlm", data, mask_token_id=4)
    labels = np.asarray(validation["labels"])
    assert ((labels != IGNORE_INDEX).sum(1) == 1).all()
    np.testing.assert_array_equal((labels != IGNORE_INDEX).argmax(1), expected)
    np.testing.assert_array_equal(np.asarray(validation["input_ids"]), targets.in_sample.inputs.numpy())


# ---------------------------------------------------------------- one data path


def test_load_run_data_gives_the_same_bytes_with_and_without_the_dataset_builder(datasets_cache):
    with_builder = load_run_data(_data_args(use_dataset_builder=True, k_test=[0, 2, 4]))
    without = load_run_data(_data_args(use_dataset_builder=False, k_test=[0, 2, 4]))
    assert any(datasets_cache.iterdir()), "the builder path must have gone through load_dataset"
    assert with_builder.grammar == without.grammar
    pairs = [("train", with_builder.train, without.train), ("validation", with_builder.validation, without.validation)]
    pairs += [(f"test k={k}", with_builder.tests[k], without.tests[k]) for k in (0, 2, 4)]
    for name, a, b in pairs:
        assert a.leaves.dtype == b.leaves.dtype == np.int64, name
        assert a.leaves.tobytes() == b.leaves.tobytes(), name
        assert a.roots.tobytes() == b.roots.tobytes(), name
        assert a.sampling_seed == b.sampling_seed, name


# ---------------------------------------------------------------- the split streams


def test_the_k_test_sets_and_the_training_splits_never_share_draws():
    # q = 4 with a uniform root prior: independent sets agree on about 1/4 of the roots; shared draws on all.
    n = 2000
    data = load_run_data(_data_args(use_dataset_builder=False, k_train=1, num_train=n, num_eval=n, num_test=n,
                                    k_test=[0, 1, 2, 3, 4]))
    sets = {f"k_test={k}": s for k, s in data.tests.items()}
    sets.update(train=data.train, validation=data.validation)
    seeds = [s.sampling_seed for s in sets.values()]
    assert len(set(seeds)) == len(seeds), "every set has its own split seed"
    for (name_a, a), (name_b, b) in itertools.combinations(sets.items(), 2):
        same_roots = float((a.roots == b.roots).mean())
        same_rows = float((a.leaves == b.leaves).all(1).mean())
        assert same_roots < 0.6, (name_a, name_b, same_roots)
        assert same_rows < 0.6, (name_a, name_b, same_rows)


# ---------------------------------------------------------------- one function for BP's marginals


@pytest.mark.parametrize("num_symbols, depth, filter_level", [(3, 2, 0), (3, 2, 1), (3, 2, 2), (2, 3, 1)])
def test_predicted_marginals_equal_enumeration_for_the_root_and_a_masked_leaf(num_symbols, depth, filter_level):
    grammar = Grammar.random(num_symbols=num_symbols, sigma=1.0, grammar_seed=3)
    enumerated = EnumeratedModel(grammar, depth, filter_level)
    bp = BeliefPropagation(grammar, depth, filter_level)
    rng = np.random.default_rng(0)
    support = enumerated.leaves[enumerated.prob > 0]
    leaves = support[rng.choice(len(support), size=6)]  # (6, 2**l), possible sequences
    positions = rng.integers(0, 2**depth, size=6)
    masked = leaves.copy()
    masked[np.arange(6), positions] = num_symbols
    root = predicted_marginals(bp, torch.as_tensor(leaves))
    leaf = predicted_marginals(bp, torch.as_tensor(masked), torch.as_tensor(positions))
    for i in range(6):
        _, exact_root = enumerated.posterior(leaves[i], num_symbols)
        _, exact_leaf = enumerated.posterior(masked[i], num_symbols)
        np.testing.assert_allclose(root[i].numpy(), exact_root[0][0], rtol=0, atol=1e-12)
        np.testing.assert_allclose(leaf[i].numpy(), exact_leaf[depth][positions[i]], rtol=0, atol=1e-12)


@pytest.mark.parametrize("task", ["root", "mlm"])
def test_the_callback_targets_are_predicted_marginals_of_every_bp_k(task):
    depth, q = 3, 3
    data_args = _data_args(num_symbols=q, depth=depth, k_train=1, num_eval=40, num_test=30, k_test=[0],
                           use_dataset_builder=False)
    data = load_run_data(data_args)
    targets = BPKLCallback(data.grammar, depth, 1, task, data.validation, data.tests).prepare()
    expected_inputs = task_inputs(task, data.validation.leaves, data.validation.roots, mask_token_id=q,
                                  sampling_seed=data.validation.sampling_seed)
    assert torch.equal(targets.in_sample.inputs, expected_inputs.inputs)
    assert set(targets.marginals) == set(range(depth + 1))
    for k in range(depth + 1):
        expected = predicted_marginals(BeliefPropagation(data.grammar, depth, k), expected_inputs.inputs,
                                       expected_inputs.positions)
        assert torch.equal(targets.marginals[k], expected), k


# ---------------------------------------------------------------- architecture fields


def _data_metadata_fields() -> set:
    """The config fields ``TreeLangConfig.from_data`` takes from the data (q given as num_symbols -> vocab_size)."""
    parameters = inspect.signature(TreeLangConfig.from_data).parameters
    names = {name for name, p in parameters.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    return {"vocab_size" if name == "num_symbols" else name for name in names}


def test_architecture_fields_are_every_config_field_that_is_not_data_metadata():
    config_fields = set(TreeLangConfig().to_dict()) - set(PreTrainedConfig().to_dict())
    data_fields = _data_metadata_fields()
    assert data_fields == {"vocab_size", "depth", "filter_level", "sigma", "grammar_seed", "arity", "num_classes"}
    assert set(ARCHITECTURE_FIELDS) == config_fields - data_fields - set(TASK_CONFIG_FIELDS)
    assert set(TASK_CONFIG_FIELDS) == {"is_causal", "bos_token_id"}  # each head sets one, q the other: no arguments
    assert {"hidden_act", "layer_norm_eps", "initializer", "classifier_pooling"} <= set(ARCHITECTURE_FIELDS)


def test_model_arguments_have_a_field_for_each_architecture_field_with_the_config_default():
    fields = {f.name: f for f in dataclasses.fields(ModelArguments)}
    defaults = TreeLangConfig()
    missing = [name for name in ARCHITECTURE_FIELDS if name not in fields]
    assert not missing, missing
    for name in ARCHITECTURE_FIELDS:
        if name == "num_hidden_layers":
            assert fields[name].default is None  # None: the depth ℓ, as the paper
        else:
            assert fields[name].default == getattr(defaults, name), name
    kwargs = ModelArguments(hidden_act="gelu", layer_norm_eps=1e-6).model_kwargs(depth=3)
    assert set(kwargs) == set(ARCHITECTURE_FIELDS) and kwargs["num_hidden_layers"] == 3
    assert ModelArguments(**{k: v for k, v in kwargs.items()}).model_kwargs(depth=5) == kwargs  # round trip


def _resolved(tmp_path, **model_kwargs):
    arguments = {"depth": 2, "num_symbols": 3, "num_train": 8, "num_eval": 8, "num_test": 8, "k_test": [0],
                 "use_dataset_builder": False, "disable_tqdm": True, **model_kwargs}
    return run_module.resolve("mlm", arguments, tmp_path / "run")


def test_a_resolved_run_passes_every_architecture_field_to_the_model(tmp_path, monkeypatch):
    captured = {}

    def fake_train(run, cache=None, callbacks=()):
        captured.update(run=run, model_args=run.model_args)
        (run.output_dir / folders.RUN_CONFIG).write_text("{}")  # the loop's complete run folder
        folders.write_run_complete(run.output_dir, task=run.task, global_step=0)
        return loop.TrainingResult(str(run.output_dir), {}, [], 0.0, 0)

    monkeypatch.setattr(loop, "_train", fake_train)
    (tmp_path / "run").mkdir()
    loop.train(_resolved(tmp_path, hidden_act="gelu", layer_norm_eps=1e-6, classifier_pooling="mean",
                         initializer="xavier", **TINY_MODEL), reuse=True)
    model_args = captured["model_args"]
    assert (model_args.hidden_act, model_args.layer_norm_eps) == ("gelu", 1e-6)
    config = loop.build_model(captured["run"]).config
    assert (config.hidden_act, config.layer_norm_eps, config.classifier_pooling, config.initializer) == (
        "gelu", 1e-6, "mean", "xavier")
    assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (8, 1, 8)


def test_an_unknown_run_argument_is_refused_naming_it(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("an invalid run must be refused before training")

    monkeypatch.setattr(loop, "_train", fail)
    with pytest.raises(ValueError, match=r"`hidden_activation` is not a run argument .*did you mean `hidden_act`"):
        _resolved(tmp_path, hidden_activation="gelu")
