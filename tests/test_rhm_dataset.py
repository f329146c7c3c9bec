"""Random Hierarchy Model datasets (issue 35): ``load_dataset("treelang", "rhm-v8-m4-s2-L3")`` and its relatives —
names, keywords, shapes, the grammar read back from the data, BP on it, and one-line errors."""

import numpy as np
import pytest

from hf_treelang import BeliefPropagation, Grammar, ancestor_labels, grammar_from_dataset, sample_trees
from hf_treelang.data import dataset_params

datasets = pytest.importorskip("datasets")

SIZES = {"num_train": 48, "num_validation": 8, "num_test": 8}


def load(name, tmp_path, **keywords):
    return datasets.load_dataset("treelang", name, cache_dir=str(tmp_path), **(SIZES | keywords))


def test_rhm_config_builds_the_rhm_and_bp_recovers_every_root(tmp_path):
    dataset = load("rhm-v8-m4-s2-L3", tmp_path)
    train = dataset["train"].with_format("numpy")
    assert train.info.config_name == "rhm-v8-m4-s2-L3"
    assert train.features["input_ids"].length == 8 and train.features["root"].num_classes == 8
    assert [name for name in train.column_names if name.startswith("ancestors")] == ["ancestors_level_1",
                                                                                     "ancestors_level_2"]
    grammar = grammar_from_dataset(dataset)
    assert grammar == Grammar.random_hierarchy(num_symbols=8, num_classes=8, num_rules=4, arity=2, depth=3)
    params = dataset_params(dataset)
    assert (params["ensemble"], params["num_rules"], params["arity"], params["filter_level"]) == ("random_hierarchy",
                                                                                                 4, 2, 0)
    leaves = np.asarray(train["input_ids"]).astype(np.int64)  # (48, 8)
    root = BeliefPropagation(grammar, 3, 0).root_marginals(leaves)  # non-overlapping rules: the root is certain
    np.testing.assert_array_equal(root.argmax(1).numpy(), np.asarray(train["root"]))
    np.testing.assert_allclose(root.max(1).values.numpy(), 1.0, atol=1e-12)


def test_s_ary_config_with_fewer_classes_and_filtering(tmp_path):
    dataset = load("rhm-v6-n3-m4-s3-L2", tmp_path, filter_level=1, seed=5)
    train = dataset["train"].with_format("numpy")
    assert train.info.config_name == "rhm-v6-n3-m4-s3-L2-seed5-k1"  # keywords completed the name
    assert train.features["input_ids"].length == 9 and train.features["root"].num_classes == 3
    assert train.features["ancestors_level_1"].length == 3
    roots, leaves = np.asarray(train["root"]), np.asarray(train["input_ids"]).astype(np.int64)
    assert roots.max() < 3
    grammar = grammar_from_dataset(dataset)
    expected = sample_trees(grammar, 48, 2, 1, sampling_seed=0)  # the same sampler, another stream
    assert expected.leaves.shape == leaves.shape
    assert not BeliefPropagation(grammar, 2, 1, on_impossible="flag").infer(leaves).impossible.any()
    labels = ancestor_labels(train["ancestors_level_1"], depth=2, arity=3)  # (48, 9)
    np.testing.assert_array_equal(labels[:, 3:6], np.repeat(np.asarray(train["ancestors_level_1"])[:, 1:2], 3, 1))


def test_the_same_config_gives_the_same_bytes_and_other_splits_other_draws(tmp_path):
    first = load("rhm-v8-m4-s2-L3-k1", tmp_path / "a")["train"].with_format("numpy")
    again = load("rhm-v8-m4-s2-L3", tmp_path / "b", filter_level=1)["train"].with_format("numpy")
    np.testing.assert_array_equal(np.asarray(first["input_ids"]), np.asarray(again["input_ids"]))
    test = load("rhm-v8-m4-s2-L3-k1", tmp_path / "a")["test"].with_format("numpy")
    assert not np.array_equal(np.asarray(first["input_ids"])[:8], np.asarray(test["input_ids"]))


@pytest.mark.parametrize(
    "name,keywords,match",
    [
        ("rhm-v8-m9-s2-L3", {}, r"`num_rules` must be an integer in \[1, 8\] with num_symbols = 8 and arity = 2"),
        ("rhm-v8-n9-m4-s2-L3", {}, r"`num_classes` must be an integer in \[1, 8\], got 9"),
        ("rhm-v8-m4-s1-L3", {}, r"`arity` must be an integer in \[2, 16\], got 1"),
        ("rhm-v8-m4-s2-L3-k4", {}, r"`filter_level` must be an integer in \[0, 3\], got 4"),
        ("rhm-v8-m4-s2-L3", {"sigma": 1.0}, "sigma is not a parameter of the Random Hierarchy Model"),
        ("rhm-v8-m4-s2-L3", {"depth": 4}, r"depth=4 contradicts the config name 'rhm-v8-m4-s2-L3' \(depth 3\)"),
        ("k2", {"num_rules": 3}, "num_rules is a parameter of the Random Hierarchy Model configs only"),
        ("rhm-v8-s2-L3", {}, "unknown treelang config name 'rhm-v8-s2-L3'"),
    ],
)
def test_impossible_rhm_configs_are_refused_in_one_line(tmp_path, name, keywords, match):
    with pytest.raises(ValueError, match=match) as error:
        load(name, tmp_path, **keywords)
    assert "\n" not in str(error.value)
    assert not any(tmp_path.rglob("*.arrow"))  # nothing written


# ---------------------------------------------------------------- the TreeLang model on sequences of s**L tokens


def test_the_model_takes_sequences_of_arity_to_the_depth_tokens(tmp_path):
    import torch
    from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification

    from hf_treelang.models.configuration_treelang import TreeLangConfig

    config = TreeLangConfig.from_data(num_symbols=6, depth=2, arity=3, hidden_size=8, num_hidden_layers=2,
                                      intermediate_size=16)
    assert config.sequence_length == config.max_position_embeddings == 9
    leaves = torch.from_numpy(sample_trees(Grammar.random_hierarchy(6, 3, 4, 3, 2), 2, 2).leaves)  # (2, 9)
    assert AutoModelForMaskedLM.from_config(config)(input_ids=leaves).logits.shape == (2, 9, 8)  # the 6 symbols, then [MASK] and [PAD]
    classifier = AutoModelForSequenceClassification.from_config(config)
    assert classifier(input_ids=leaves).logits.shape == (2, 6)
    classifier.save_pretrained(tmp_path)
    assert AutoModelForSequenceClassification.from_pretrained(tmp_path).config.arity == 3
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch, arity\*\*depth\) = \(batch, 9\), got"):
        classifier(input_ids=leaves[:, :8])
    assert TreeLangConfig().sequence_length == 16  # the paper's binary trees: unchanged


@pytest.mark.parametrize(
    "keywords,match",
    [
        ({"arity": 1}, r"`arity` must be an integer in \[2, 16\], got 1"),
        ({"arity": 3, "depth": 11}, r"`depth` must be an integer in \[1, 10\] with arity = 3: sequences of "
                                    r"arity\*\*depth = 177147 tokens exceed the 65536 positions"),
        ({"arity": 3, "depth": 2, "max_position_embeddings": 16}, r"max_position_embeddings must equal 3\*\*depth = 9"),
    ],
)
def test_a_sequence_length_the_positions_cannot_hold_is_refused_in_one_line(keywords, match):
    from hf_treelang.models.configuration_treelang import TreeLangConfig

    with pytest.raises(ValueError, match=match) as error:
        TreeLangConfig(**keywords)
    assert "\n" not in str(error.value)
