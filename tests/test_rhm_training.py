"""Training and analyses on Random Hierarchy Model data (issue 35): the scripts' ``--num_rules`` / ``--num_classes`` /
``--arity`` flags, the BP-KL callback against every BP_k, the run folder (grammar.json, identity, AutoModel), the
analyses on s-ary runs or their one-line refusals, and bad input refused before anything is written."""

import json
import math
import re

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification

from hf_treelang import Grammar, sample_trees
from hf_treelang.analysis.checkpoint import load_checkpoint
from hf_treelang.analysis.dynamics import learning_dynamics
from hf_treelang.analysis.probing import probe_targets
from hf_treelang.citation import BIBTEX, RANDOM_HIERARCHY_BIBTEX
from hf_treelang.cli import main as cli
from hf_treelang.train.callbacks import reference_count
from hf_treelang.train.loop import main, train
from hf_treelang.train.run import resolve, runs_from_command_line

# v = 4 symbols, m = 2 rules per symbol, depth L = 2: 4 leaves at s = 2, 9 at s = 3; a 2-layer 16-wide model.
SIZES = ["--num_symbols", "4", "--depth", "2", "--hidden_size", "16", "--num_hidden_layers", "2",
         "--intermediate_size", "16", "--num_train", "64", "--num_eval", "16", "--num_test", "16",
         "--per_device_train_batch_size", "16", "--num_train_epochs", "1", "--num_evaluations", "2",
         "--num_checkpoints", "2", "--disable_tqdm", "true", "--report_to", "none", "--cpu_threads", "1",
         "--use_dataset_builder", "false"]
TINY = SIZES + ["--num_rules", "2"]
AUTO_CLASSES = {"root": AutoModelForSequenceClassification, "mlm": AutoModelForMaskedLM, "clm": AutoModelForCausalLM}


def rhm_run(task, output_dir, *extra):
    (run,), _ = runs_from_command_line(task, TINY + ["--output_dir", str(output_dir), *extra])
    return run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny run per (task, arity), trained on first use."""
    cache = {}

    def get(task, arity):
        if (task, arity) not in cache:
            out = tmp_path_factory.mktemp(f"rhm-{task}-s{arity}")
            extra = ["--arity", str(arity), "--k_test", "0"] + (["--num_classes", "2"] if arity == 3 else [])
            cache[task, arity] = train(rhm_run(task, out, *extra)), out
        return cache[task, arity]

    return get


@pytest.mark.parametrize("arity", [2, 3])
@pytest.mark.parametrize("task", ["root", "mlm", "clm"])
def test_each_script_trains_an_rhm_with_finite_kl_to_every_bp_k(trained, task, arity):
    result, out = trained(task, arity)
    for k in range(3):  # BP_0 .. BP_L
        assert math.isfinite(result.final_metrics[f"eval_kl_bp_k{k}"])
        assert result.final_metrics[f"eval_impossible_bp_k{k}"] == 0.0  # k_train = 0: every BP_k is defined
    num_classes = 2 if arity == 3 else 4
    assert Grammar.load(out / "grammar.json") == Grammar.random_hierarchy(
        num_symbols=4, num_classes=num_classes, num_rules=2, arity=arity, depth=2, grammar_seed=0)
    model = AUTO_CLASSES[task].from_pretrained(out)
    assert model.config.arity == arity and model.config.sequence_length == arity**2
    leaves = torch.as_tensor(sample_trees(Grammar.load(out / "grammar.json"), 3, 2, 0, 1).leaves)  # (3, s**2)
    inputs = torch.cat([torch.full_like(leaves[:, :1], 4), leaves[:, :-1]], 1) if task == "clm" else leaves
    assert model(input_ids=inputs).logits.shape[:2] == ((3, num_classes) if task == "root" else (3, arity**2))
    if task == "root":  # the root head scores the n classes
        assert model.config.num_labels == len(model.config.id2label) == num_classes


def test_the_run_identity_names_every_parameter_of_the_rhm(trained):
    _, out = trained("root", 3)
    data = json.loads((out / "run_identity.json").read_text())["config"]["data_args"]
    assert [data[name] for name in ("num_rules", "num_classes", "arity", "num_symbols", "depth")] == [2, 2, 3, 4, 2]
    base = {"num_symbols": 4, "num_rules": 2, "depth": 2, "arity": 3}
    identities = {resolve("root", {**base, **change}, "/tmp/x").identity
                  for change in ({}, {"num_rules": 3}, {"num_classes": 2}, {"arity": 2}, {"grammar_seed": 1})}
    assert len(identities) == 5
    assert resolve("root", {**base, "num_classes": 4}, "/tmp/x").identity == resolve("root", base, "/tmp/x").identity


def test_a_paper_run_keeps_its_identity_beside_the_rhm_of_its_sizes():
    sizes = {"depth": 2, "num_symbols": 3, "num_train": 96, "num_eval": 20, "num_test": 16}
    run = resolve("root", sizes, "/tmp/x")
    assert not {"num_rules", "num_classes", "arity"} & set(run.config["data_args"])
    assert run.identity == "b7550273a616cb0afc5cbda7edea685ca178f5d2e6c970432ec6b45d176f0b71"  # before RHM runs
    assert resolve("root", {**sizes, "num_rules": 3}, "/tmp/x").identity != run.identity


def test_filtered_rhm_data_leave_the_undefined_bp_k_out_of_the_comparison(tmp_path):
    # at k_train = 1 the level-1 nodes are drawn independently: many pairs are no symbol's rule, so BP_0 gives their
    # sequences probability zero; its KL is the mean over the others and the fraction left out is logged
    result = train(rhm_run("root", tmp_path / "k1", "--k_train", "1", "--num_eval", "64", "--k_test", "1", "2"))
    final = result.final_metrics
    assert 0.0 < final["eval_impossible_bp_k0"] < 1.0 and math.isfinite(final["eval_kl_bp_k0"])
    assert final["eval_impossible_bp_k1"] == final["eval_impossible_bp_k2"] == 0.0
    assert 0.0 < final["eval_bp_impossible_ktest2"] <= 1.0 and final["eval_bp_impossible_ktest1"] == 0.0
    summary = learning_dynamics(tmp_path / "k1").to_dict()  # hf-treelang dynamics's numbers, without the figure
    assert 0 not in summary["closest_bp"] and summary["impossible_bp"]["k0"][-1] > 0
    assert summary["bp_impossible_ktest"]["k2"] == final["eval_bp_impossible_ktest2"]


def _dynamics(summary):
    assert summary["closest_bp"] and "impossible_bp" in summary  # an RHM run logs the fractions (0 at k_train = 0)


def _calibration(summary):
    assert summary["sets"]["in_sample"]["bp_accuracy"] == 1.0 and summary["sets"]["uniform"]["num_sequences"] == 32


def _attention(summary):
    assert summary["models"][0]["arity"] == 3 and len(summary["models"][0]["maps"][0][0]) == 9  # (L, L) maps, L = 9


def _probe(summary):
    assert summary["bp_accuracy"] == [1.0, 1.0]  # the RHM's rules do not overlap: BP knows every ancestor


@pytest.mark.parametrize("task, command, check", [
    ("mlm", ["dynamics"], _dynamics),
    ("root", ["calibration", "--num-samples", "32"], _calibration),
    ("mlm", ["attention", "--num-samples", "8"], _attention),
    ("mlm", ["probe", "--num-train", "32", "--num-validation", "8", "--num-test", "8", "--epochs", "1"], _probe),
])
def test_the_analyses_run_on_an_s_ary_run(trained, tmp_path, task, command, check):
    _, run = trained(task, 3)
    assert cli([command[0], str(run), *command[1:], "--out", str(tmp_path)]) == 0
    check(json.loads((tmp_path / f"{command[0]}.json").read_text()))


@pytest.mark.parametrize("command, message", [
    (["attention", "{run}", "--template", "--num-samples", "8"], "App. F's templates"),
    (["probe", "{run}", "--target", "messages", "--num-train", "32", "--num-validation", "8", "--num-test", "8"],
     "message probes"),
])
def test_binary_only_analyses_refuse_an_s_ary_run_in_one_line(trained, tmp_path, capsys, command, message):
    _, run = trained("mlm", 3)
    capsys.readouterr()  # what training the fixture wrote
    out = tmp_path / "never"
    assert cli([part.format(run=run) for part in command] + ["--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1 and "arity 3" in error
    assert not out.exists()


def test_a_checkpoint_reads_its_runs_grammar_not_the_papers(trained):
    _, out = trained("mlm", 2)  # arity 2: its config alone would name the paper's grammar Grammar.random(4, 1.0, 0)
    checkpoint = sorted(out.glob("checkpoint-*"))[0]
    assert load_checkpoint(checkpoint).grammar == Grammar.load(out / "grammar.json")
    (out / "grammar.json").rename(out / "grammar.moved")
    try:
        with pytest.raises(ValueError, match="no grammar.json .* Random Hierarchy Model"):
            load_checkpoint(checkpoint)
    finally:
        (out / "grammar.moved").rename(out / "grammar.json")


def test_probe_targets_are_the_ancestors_of_an_s_ary_tree():
    trees = sample_trees(Grammar.random_hierarchy(num_symbols=4, num_classes=2, num_rules=2, arity=3, depth=2), 5, 2,
                         0, 3)
    targets = probe_targets(trees, [0, 1], arity=3)  # (5, 9, 2)
    leaf = np.arange(9)
    np.testing.assert_array_equal(targets[..., 0], trees.levels[0][:, leaf // 9])
    np.testing.assert_array_equal(targets[..., 1], trees.levels[1][:, leaf // 3])


def test_bp_reference_sets_are_capped_by_the_leaves_of_an_s_ary_tree():
    assert reference_count(256, depth=10, reference_size=2000, arity=3) == 2**24 // 3**10  # 284 sequences of 59 049


@pytest.mark.parametrize("extra, message", [
    (["--arity", "1"], r"`arity` must be an integer in \[2, 16\], got 1"),
    (["--num_rules", "5"], r"`num_rules` must be an integer in \[1, 4\] with num_symbols = 4 and arity = 2"),
    (["--num_classes", "5"], r"`num_classes` must be an integer in \[1, 4\], got 5"),
    (["--arity", "3", "--depth", "11"], r"`depth` must be an integer in \[1, 10\] with arity = 3 .*65536"),
    (["--sigma", "0.5"], "`sigma` is not a parameter of a Random Hierarchy Model"),
    (["--arity", "3", "--block_mask_fraction", "0.5"], "`block_mask_fraction` masks aligned blocks of 2\\*\\*m"),
])
def test_bad_rhm_input_exits_2_in_one_line_before_writing_anything(tmp_path, capsys, extra, message):
    out = tmp_path / "never"
    task = "mlm" if "--block_mask_fraction" in extra else "root"
    assert main(task, TINY + ["--output_dir", str(out), *extra], as_script=True) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert re.search(message, error), error
    assert not out.exists()


def test_rhm_parameters_without_num_rules_are_refused(tmp_path, capsys):
    out = tmp_path / "never"
    assert main("root", SIZES + ["--arity", "3", "--output_dir", str(out)], as_script=True) == 2
    assert "`arity` is a parameter of a Random Hierarchy Model: give --num_rules" in capsys.readouterr().err
    assert not out.exists()


def test_another_architecture_is_refused_on_an_s_ary_rhm(tmp_path, capsys):
    out = tmp_path / "never"
    argv = ["--num_symbols", "4", "--num_rules", "2", "--depth", "2", "--arity", "3", "--model_type", "bert",
            "--output_dir", str(out)]
    assert main("root", argv, as_script=True) == 2
    assert "--model_type 'bert' is fitted to sequences of 2**depth leaves" in capsys.readouterr().err
    assert not out.exists()


def test_the_builder_and_the_sampler_give_an_rhm_run_the_same_data(tmp_path, monkeypatch):
    import dataclasses

    from hf_treelang.train.arguments import DataArguments
    from hf_treelang.train.data import load_run_data

    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path))  # the builder's Arrow files go here
    built = DataArguments(num_symbols=4, num_rules=2, num_classes=2, arity=3, depth=2, num_train=40, num_eval=8,
                          num_test=8, k_train=1)
    drawn = load_run_data(dataclasses.replace(built, use_dataset_builder=False))
    built = load_run_data(built)
    assert built.train.leaves.shape == (40, 9) and built.grammar == drawn.grammar
    for first, second in [(built.train, drawn.train), (built.validation, drawn.validation),
                          *((built.tests[k], drawn.tests[k]) for k in range(3))]:
        np.testing.assert_array_equal(first.leaves, second.leaves)
        np.testing.assert_array_equal(first.roots, second.roots)
        assert first.sampling_seed == second.sampling_seed


def test_the_model_card_names_the_rhm_and_keeps_a_paper_runs_card():
    from pathlib import Path

    from hf_treelang.train.outputs import MODEL_CARD_TEMPLATE, render_model_card

    template = Path(__file__).resolve().parents[1] / "model_cards" / "treelang_model_card.md"  # this checkout's
    paper = resolve("mlm", {"depth": 2, "num_symbols": 3}, "/tmp/x")
    cards = [render_model_card("mlm", paper.data_args, paper.model_args, paper.training_args, {}, 1.0, 4, path)
             for path in (template, MODEL_CARD_TEMPLATE)]
    assert cards[0] == cards[1]  # the paper's card, byte for byte (MODEL_CARD_TEMPLATE may be the installed one)
    rhm = resolve("mlm", {"depth": 2, "num_symbols": 4, "num_rules": 2, "arity": 3, "num_classes": 2}, "/tmp/x")
    card = render_model_card("mlm", rhm.data_args, rhm.model_args, rhm.training_args, {}, 1.0, 4, template)
    assert "config `rhm-v4-n2-m2-s3-L2`" in card and "3^2 symbols" in card and "σ" not in card
    assert BIBTEX in card and RANDOM_HIERARCHY_BIBTEX in card  # the data's model is cited beside the paper
    assert RANDOM_HIERARCHY_BIBTEX not in cards[0]


def test_finetuning_an_rhm_mlm_needs_its_root_classes(trained, tmp_path, capsys):
    _, mlm = trained("mlm", 3)  # n = 2 root classes
    capsys.readouterr()  # what training the fixture wrote
    out = tmp_path / "never"
    argv = TINY + ["--arity", "3", "--model_name_or_path", str(mlm), "--output_dir", str(out)]
    assert main("finetune", argv, as_script=True) == 2  # the data's n defaults to v = 4
    error = capsys.readouterr().err
    assert "was trained with num_classes=2; the data has num_classes=4" in error and error.count("\n") == 1
    assert not out.exists()
    assert train(rhm_run("finetune", tmp_path / "ft", "--arity", "3", "--num_classes", "2", "--model_name_or_path",
                         str(mlm))).final_metrics["eval_kl_bp_k0"] < math.inf
    assert AutoModelForSequenceClassification.from_pretrained(tmp_path / "ft").classifier.out_features == 2
