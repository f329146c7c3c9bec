"""The treelang ``datasets`` builder: name resolution, configs, columns, determinism, independence, bad input."""

import os
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest

import hf_treelang
from hf_treelang import BeliefPropagation, Grammar, ancestor_labels, grammar_from_dataset, sample_trees
from hf_treelang.dataset_builder import TreeLangBuilderConfig, split_seed

SMALL = dict(num_train=300, num_validation=50, num_test=60)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    return str(tmp_path / "cache")


def load(cache, name="k2", **kwargs):
    return datasets.load_dataset("treelang", name, cache_dir=cache, **{**SMALL, **kwargs})


def test_load_k2_from_a_directory_with_unrelated_data_and_a_treelang_folder(tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "treelang").mkdir(parents=True)
    (work / "treelang" / "train.csv").write_text("a,b\n1,2\n")
    (work / "train.csv").write_text("text,label\nhello,1\n")
    (work / "data.jsonl").write_text('{"x": 1}\n')
    monkeypatch.chdir(work)
    ds = datasets.load_dataset("treelang", "k2", cache_dir=str(tmp_path / "cache"), **SMALL)
    assert set(ds) == {"train", "validation", "test"}
    assert [len(ds[s]) for s in ("train", "validation", "test")] == [300, 50, 60]
    assert ds["train"].column_names == ["input_ids", "root", "filter_level", "ancestors_level_2", "ancestors_level_3"]


def test_load_works_in_a_fresh_interpreter_offline(tmp_path):
    code = (
        "import hf_treelang, datasets, sys; "
        f"ds = datasets.load_dataset('treelang', 'k1', split='test', cache_dir={str(tmp_path)!r}, num_train=10, "
        "num_validation=10, num_test=20); assert len(ds) == 20 and ds[0]['filter_level'] == 1"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, env=env, timeout=120)


def test_rows_equal_sample_trees_of_the_split_seed(cache):
    ds = load(cache, "k2")
    config = TreeLangBuilderConfig(name="k2", **SMALL)
    grammar = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)
    for split in ("train", "test"):
        trees = sample_trees(grammar, len(ds[split]), 4, 2, split_seed(config, split))
        table = ds[split].with_format("numpy")[:]
        np.testing.assert_array_equal(table["input_ids"], trees.leaves)
        np.testing.assert_array_equal(table["root"], trees.roots)
        np.testing.assert_array_equal(table["ancestors_level_2"], trees.levels[2])
        np.testing.assert_array_equal(table["ancestors_level_3"], trees.levels[3])


def test_ancestor_columns_are_the_drawn_levels_of_each_k(cache):
    for k, expected in [(0, [1, 2, 3]), (3, [3]), (4, [])]:
        ds = load(cache, f"k{k}", num_validation=0, num_test=0)["train"]
        assert [c for c in ds.column_names if c.startswith("ancestors")] == [f"ancestors_level_{m}" for m in expected]
        assert set(ds["filter_level"]) == {k}


def test_full_tree_levels_are_consistent_with_the_grammar_support(cache):
    ds = load(cache, "k0", num_validation=0, num_test=0)["train"].with_format("numpy")[:]
    M = Grammar.random(4, 1.0, 0).M
    parent, leaves = ds["ancestors_level_3"], ds["input_ids"]  # (n, 8), (n, 16)
    assert np.all(M[parent, leaves[:, 0::2], leaves[:, 1::2]] > 0)
    labels = ancestor_labels(ds["ancestors_level_1"], depth=4)  # (n, 16)
    np.testing.assert_array_equal(labels[:, :8], np.repeat(ds["ancestors_level_1"][:, :1], 8, axis=1))


def test_features_and_metadata_suffice_to_run_bp(cache):
    ds = load(cache, "k2")
    features = ds["test"].features
    assert features["root"].num_classes == 4 and features["input_ids"].length == 16
    grammar = grammar_from_dataset(ds)
    assert grammar == Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)
    params = hf_treelang.dataset_params(ds["test"])
    assert params == {**SMALL, "filter_level": 2, "depth": 4, "num_symbols": 4, "sigma": 1.0, "seed": 0}
    test = ds["test"].with_format("numpy")[:]
    root = BeliefPropagation(grammar, params["depth"], params["filter_level"]).root_marginals(test["input_ids"])
    assert (root.argmax(-1).numpy() == test["root"]).mean() > 0.5  # BP_2 root accuracy is ~0.73 for this grammar


def test_grammar_depends_only_on_seed_q_sigma(cache):
    k0, k3 = grammar_from_dataset(load(cache, "k0", depth=5)), grammar_from_dataset(load(cache, "k3", num_train=7))
    assert k0 == k3
    assert grammar_from_dataset(load(cache, "k0", sigma=0.5)) != k0


def test_overrides_reach_any_combination(cache):
    ds = load(cache, "k2", seed=15, sigma=0.5, num_symbols=8, depth=6)
    assert ds["train"].features["input_ids"].length == 64 and ds["train"].features["root"].num_classes == 8
    assert np.max(ds["train"].with_format("numpy")["input_ids"]) < 8
    assert grammar_from_dataset(ds) == Grammar.random(num_symbols=8, sigma=0.5, grammar_seed=15)
    assert load(cache, "k6", depth=6, num_validation=0)["train"][0]["filter_level"] == 6


def test_splits_use_independent_streams_and_ignore_the_other_sizes():
    config = TreeLangBuilderConfig(name="k2")
    seeds = {split_seed(config, s) for s in ("train", "validation", "test")}
    seeds |= {split_seed(TreeLangBuilderConfig(name=f"k{k}"), "train") for k in (0, 1, 3)}
    assert len(seeds) == 6
    assert split_seed(TreeLangBuilderConfig(name="k2", num_train=5, num_test=9), "test") == split_seed(config, "test")


def test_same_config_same_bytes_and_fingerprint_for_any_num_proc(tmp_path):
    kwargs = dict(num_train=2**16 + 123, num_validation=5, num_test=5, depth=4)  # several chunks
    one = datasets.load_dataset("treelang", "k1", cache_dir=str(tmp_path / "a"), **kwargs)["train"]
    two = datasets.load_dataset("treelang", "k1", cache_dir=str(tmp_path / "b"), num_proc=2, **kwargs)["train"]
    assert one._fingerprint == two._fingerprint
    assert one.data.table.equals(two.data.table)


def test_different_configs_never_share_a_cache_entry(cache):
    names = set()
    for kwargs in [{}, {"seed": 1}, {"sigma": 2.0}, {"num_symbols": 5}, {"depth": 5}, {"num_train": 301},
                   {"num_validation": 51}, {"num_test": 61}]:
        builder = datasets.load_dataset_builder("treelang", "k2", cache_dir=cache, **{**SMALL, **kwargs})
        names.add(builder.cache_dir)
    names.add(datasets.load_dataset_builder("treelang", "k3", cache_dir=cache, **SMALL).cache_dir)
    assert len(names) == 9
    same = [datasets.load_dataset_builder("treelang", "k2", cache_dir=cache, **{**SMALL, **kw}).cache_dir
            for kw in ({}, {"seed": 0, "sigma": 1.0, "filter_level": 2})]
    assert same[0] == same[1]


@pytest.mark.parametrize(
    "name, kwargs, match",
    [
        ("k9", {}, "filter_level"),
        ("k3", {"depth": 2}, "filter_level"),
        ("x2", {}, "config name"),
        ("seed1-k2", {}, r"unknown treelang config name 'seed1-k2': a config name is 'seed<grammar seed>-sigma<σ>"),
        ("seed1-sigma1.0-k2", {"sigma": 0.5}, r"sigma=0.5 contradicts the config name 'seed1-sigma1.0-k2' \(sigma 1.0\)"),
        ("seed1-sigma1e4-k2", {}, r"config name 'seed1-sigma1e4-k2': `sigma` must be a real number in \[0, 1000\]"),
        ("seed4294967296-sigma1.0-k2", {}, r"`seed` must be an integer in \[0, 4294967295\], got 4294967296"),
        ("seed0-sigma1.0-depth3-k4", {}, r"filter_level \(k\) must be in \[0, depth=3\], got 4"),
        ("k2", {"colour": "red"}, "unknown treelang keyword"),
        ("k2", {"num_train": -1}, "num_train"),
        ("k2", {"num_symbols": 1}, r"`num_symbols` must be an integer in \[2, 256\], got 1"),
        ("k2", {"depth": 17}, r"`depth` must be an integer in \[1, 16\], got 17"),
        ("k2", {"sigma": -0.5}, "sigma"),
        ("k2", {"filter_level": 3}, "contradicts"),
        (None, {}, "config name is missing"),
    ],
)
def test_bad_input_raises_before_any_file_is_written(tmp_path, name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        datasets.load_dataset("treelang", name, cache_dir=str(tmp_path / "cache"), **kwargs)
    assert not (tmp_path / "cache").exists()


def test_failed_build_leaves_no_cache_that_a_later_call_returns(cache, monkeypatch):
    from hf_treelang.dataset_builder import treelang

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(treelang, "generate_table", broken)
    with pytest.raises(datasets.exceptions.DatasetGenerationError):
        load(cache, "k2")
    monkeypatch.undo()
    builder = datasets.load_dataset_builder("treelang", "k2", cache_dir=cache, **SMALL)
    assert not Path(builder.cache_dir).exists()
    assert not Path(builder.cache_dir + ".incomplete").exists()
    assert len(load(cache, "k2")["train"]) == 300


def test_data_files_are_refused():
    with pytest.raises(ValueError, match="generates its data"):
        datasets.load_dataset("treelang", "k2", data_files={"train": "x.csv"})


def test_hook_fails_loudly_when_datasets_internals_change():
    import types

    from hf_treelang.data.registration import _check_internals

    with pytest.raises(RuntimeError, match="dataset_module_factory"):
        _check_internals(types.SimpleNamespace(load_dataset_builder=datasets.load.load_dataset_builder))
    _check_internals(datasets.load)  # the installed version passes


def test_vocab_size_keyword_still_works_with_a_future_warning(cache):
    with pytest.warns(FutureWarning, match="`vocab_size` is renamed `num_symbols`"):
        old = datasets.load_dataset_builder("treelang", "k2", cache_dir=cache, **{**SMALL, "vocab_size": 5})
    new = datasets.load_dataset_builder("treelang", "k2", cache_dir=cache, **{**SMALL, "num_symbols": 5})
    assert old.cache_dir == new.cache_dir


def test_config_names_list_the_short_names_and_the_paper_grid():
    names = datasets.get_dataset_config_names("treelang")
    grid = [f"seed{seed}-sigma1.0-k{k}" for seed in (0, 1, 15, 31) for k in range(5)]
    assert names == [f"k{k}" for k in range(5)] + grid


@pytest.mark.parametrize(
    "seed, sigma, k, q, depth, name",
    [
        (15, 1, 2, 4, 4, "seed15-sigma1.0-k2"),
        (0, 0.5, 3, 8, 6, "seed0-sigma0.5-q8-depth6-k3"),
        (31, 0.1, 0, 4, 5, "seed31-sigma0.1-depth5-k0"),
        (7, 1e-5, 1, 3, 4, "seed7-sigma1e-05-q3-k1"),
        (2**32 - 1, 1000.0, 4, 256, 4, "seed4294967295-sigma1000.0-q256-k4"),
    ],
)
def test_config_name_carries_every_generating_parameter_and_reads_back_exactly(seed, sigma, k, q, depth, name):
    from hf_treelang.dataset_builder.treelang import config_name, parse_config_name

    assert config_name(seed, sigma, k, num_symbols=q, depth=depth) == name
    named = parse_config_name(name)
    assert (named.seed, named.sigma, named.filter_level) == (seed, float(sigma), k)
    assert named.num_symbols == (None if q == 4 else q) and named.depth == (None if depth == 4 else depth)
    config = TreeLangBuilderConfig(name=name)
    assert (config.seed, config.sigma, config.num_symbols, config.depth, config.filter_level) == (seed, sigma, q, depth, k)
    assert config.name == name


def test_every_spelling_of_a_config_is_one_config_with_one_cache_entry(cache):
    spellings = [
        ("seed15-sigma0.5-k2", {}),
        ("seed015-sigma0.50-k2", {}),
        ("k2", {"seed": 15, "sigma": 0.5}),
        ("seed15-sigma0.5-k2", {"seed": 15, "sigma": 0.5, "filter_level": 2, "num_symbols": 4, "depth": 4}),
        (None, {"filter_level": 2, "seed": 15, "sigma": 0.5}),
    ]
    builders = [datasets.load_dataset_builder("treelang", name, cache_dir=cache, **{**SMALL, **kw}) for name, kw in spellings]
    assert {b.config.name for b in builders} == {"seed15-sigma0.5-k2"}
    assert len({b.cache_dir for b in builders}) == 1
    assert datasets.load_dataset_builder("treelang", "seed15-sigma0.5-k3", cache_dir=cache, **SMALL).cache_dir != builders[0].cache_dir


def test_k2_keeps_its_meaning_grammar_seed_0_and_sigma_1(cache):
    short = load(cache, "k2", num_validation=0, num_test=0)["train"]
    full = load(cache, "seed0-sigma1.0-k2", num_validation=0, num_test=0)["train"]
    assert short.info.config_name == full.info.config_name == "seed0-sigma1.0-k2"
    assert short.data.table.equals(full.data.table)
    assert grammar_from_dataset(short) == Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)


def test_a_named_grammar_is_the_grammar_of_the_data(cache):
    ds = load(cache, "seed15-sigma0.5-q5-depth3-k1", num_validation=0, num_test=0)["train"]
    assert grammar_from_dataset(ds) == Grammar.random(num_symbols=5, sigma=0.5, grammar_seed=15)
    assert ds.features["input_ids"].length == 8 and ds.features["root"].num_classes == 5
    assert hf_treelang.dataset_params(ds) == {"filter_level": 1, "depth": 3, "num_symbols": 5, "sigma": 0.5, "seed": 15,
                                              "num_train": 300, "num_validation": 0, "num_test": 0}


@pytest.mark.parametrize("keyword, value", [("seed", 1), ("sigma", 2.0), ("num_symbols", 8), ("depth", 5),
                                            ("filter_level", 1)])
def test_a_keyword_that_disagrees_with_the_name_is_an_error(tmp_path, keyword, value):
    with pytest.raises(ValueError, match=f"{keyword}={value!r} contradicts the config name 'seed0-sigma1.0-q4-depth4-k2'"):
        datasets.load_dataset("treelang", "seed0-sigma1.0-q4-depth4-k2", cache_dir=str(tmp_path / "cache"),
                              **{keyword: value})
    assert not (tmp_path / "cache").exists()


def test_progress_label_names_the_config_of_each_test_split(cache, monkeypatch):
    labels = []
    original = datasets.builder.hf_tqdm

    def recording_tqdm(*args, **kwargs):
        labels.append(kwargs.get("desc"))
        return original(*args, **kwargs)

    monkeypatch.setattr(datasets.builder, "hf_tqdm", recording_tqdm)
    for k in (1, 3):
        load(cache, f"k{k}", num_train=0, num_validation=0, num_test=5)
    assert labels == ["Generating test split of treelang seed0-sigma1.0-k1",
                      "Generating test split of treelang seed0-sigma1.0-k3"]
    assert datasets.builder.hf_tqdm is recording_tqdm  # put back after each split


def test_a_run_reads_its_splits_column_wise_never_row_by_row(monkeypatch):
    """A run's splits come out of the Arrow table as whole columns: datasets' per-row formatter (a Python loop over
    2**17 rows, seconds) must not run, and the bytes equal the sampler's."""
    from datasets import formatting

    from hf_treelang.train.arguments import DataArguments
    from hf_treelang.train.data import load_run_data, read_columns

    def row_by_row(*args, **kwargs):
        raise AssertionError("a split was read row by row")

    for formatter in (formatting.NumpyFormatter, formatting.PythonFormatter):
        monkeypatch.setattr(formatter, "format_row", row_by_row)
        monkeypatch.setattr(formatter, "format_column", row_by_row)
    arguments = dict(depth=3, num_symbols=3, k_train=1, num_train=200, num_eval=16, num_test=8, k_test=[0, 3])
    built = load_run_data(DataArguments(**arguments, use_dataset_builder=True))
    sampled = load_run_data(DataArguments(**arguments, use_dataset_builder=False))
    for ours, reference in [(built.train, sampled.train), (built.validation, sampled.validation),
                            *[(built.tests[k], sampled.tests[k]) for k in (0, 3)]]:
        assert ours.leaves.dtype == np.int64 and ours.leaves.shape == reference.leaves.shape
        assert np.array_equal(ours.leaves, reference.leaves) and np.array_equal(ours.roots, reference.roots)
    monkeypatch.undo()
    split = datasets.load_dataset("treelang", "seed0-sigma1.0-q3-depth3-k1", num_train=200, num_validation=16,
                                  num_test=8)["train"]
    view = split.select([5, 3, 1])  # an indices mapping: the rows of the view, not of the table
    leaves, roots = read_columns(view, 8)
    assert np.array_equal(leaves, np.asarray(view.with_format("numpy")["input_ids"], dtype=np.int64))
    assert np.array_equal(roots, np.asarray(view.with_format("numpy")["root"], dtype=np.int64))
