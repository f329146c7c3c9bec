"""``hf-treelang publish-dataset``: a Hub-ready repository of one config per (grammar seed, σ, k), each with its
grammar, that stock ``datasets`` loads without hf_treelang."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from hf_treelang import Grammar, dataset_params, grammar_from_dataset
from hf_treelang.data import dataset_metadata
from hf_treelang.cli import main as cli_main
from hf_treelang.data.publish import bp_accuracy, plan_configs, publish_dataset

SIZES = ["--num-train", "200", "--num-validation", "40", "--num-test", "300"]
GRID = ["--seeds", "0", "15", "--sigmas", "1.0", "--filter-levels", "2", "0"]
NAMES = ["seed0-sigma1.0-k2", "seed0-sigma1.0-k0", "seed15-sigma1.0-k2", "seed15-sigma1.0-k0"]

_LOAD_WITHOUT_HF_TREELANG = """
import json, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "hf_treelang":
            raise ImportError("hf_treelang is blocked in this test")
sys.meta_path.insert(0, Block())
import datasets
names = datasets.get_dataset_config_names(sys.argv[1])
ds = datasets.load_dataset(sys.argv[1], sys.argv[3], cache_dir=sys.argv[2])
assert "hf_treelang" not in sys.modules
print(json.dumps({"names": names, "sizes": [len(ds[s]) for s in ("train", "validation", "test")],
                  "config_name": ds["test"].info.config_name,
                  "input_ids": ds["test"][0]["input_ids"], "root": ds["test"][0]["root"]}))
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    out = tmp_path_factory.mktemp("pub") / "treelang-repo"
    assert cli_main(["publish-dataset", str(out), *GRID, *SIZES]) == 0
    return out


def _load(repo, name, cache):
    import datasets

    return datasets.load_dataset(str(repo), name, cache_dir=str(cache))


def test_repository_layout_has_one_folder_with_its_grammar_per_config(repo):
    files = sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file())
    per_config = ["grammar.json", "test-00000-of-00001.parquet", "train-00000-of-00001.parquet",
                  "validation-00000-of-00001.parquet"]
    assert files == sorted(["README.md", "generation.json", *(f"data/{n}/{f}" for n in NAMES for f in per_config)])
    for name in NAMES:
        seed = int(name.split("-")[0][len("seed"):])
        assert Grammar.load(repo / "data" / name / "grammar.json") == Grammar.random(4, 1.0, seed)


def test_stock_datasets_loads_a_config_of_a_multi_grammar_repository_without_hf_treelang(repo, tmp_path):
    import datasets

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", _LOAD_WITHOUT_HF_TREELANG, str(repo), str(tmp_path / "cache"), "seed15-sigma1.0-k2"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert sorted(loaded["names"]) == sorted(NAMES)
    assert loaded["sizes"] == [200, 40, 300] and loaded["config_name"] == "seed15-sigma1.0-k2"
    built = datasets.load_dataset("treelang", "seed15-sigma1.0-k2", split="test", cache_dir=str(tmp_path / "built"),
                                  num_train=0, num_validation=0, num_test=1)[0]
    assert (loaded["input_ids"], loaded["root"]) == (built["input_ids"], built["root"])


def test_published_rows_equal_the_builder_rows(repo, tmp_path):
    import datasets

    published = _load(repo, "seed15-sigma1.0-k0", tmp_path / "a")["test"]
    built = datasets.load_dataset("treelang", "seed15-sigma1.0-k0", split="test", cache_dir=str(tmp_path / "b"),
                                  num_train=200, num_validation=40, num_test=300)
    assert published.features == built.features
    assert published.data.table.equals(built.data.table)


def test_grammar_from_dataset_finds_the_grammar_of_each_config(repo, tmp_path):
    grammars = {}
    for name in ("seed0-sigma1.0-k2", "seed15-sigma1.0-k2"):
        ds = _load(repo, name, tmp_path / "cache")
        grammars[name] = grammar_from_dataset(ds, repository=repo)
        params = dataset_params(ds["test"], repository=str(repo))
        assert (params["seed"], params["sigma"], params["filter_level"], params["num_test"]) == (
            int(name[4:name.index("-")]), 1.0, 2, 300)
    assert grammars["seed0-sigma1.0-k2"] == Grammar.random(4, 1.0, 0)
    assert grammars["seed15-sigma1.0-k2"] == Grammar.random(4, 1.0, 15)
    assert grammars["seed0-sigma1.0-k2"] != grammars["seed15-sigma1.0-k2"]


def test_grammar_from_a_published_copy_needs_its_repository(repo, tmp_path):
    ds = _load(repo, "seed15-sigma1.0-k0", tmp_path / "cache")
    with pytest.raises(ValueError, match=r"config 'seed15-sigma1.0-k0'\) carries no hf-treelang metadata.*repository="):
        grammar_from_dataset(ds)
    other = tmp_path / "other"
    publish_dataset(other, ["k1"], num_train=5, num_validation=0, num_test=0)
    with pytest.raises(ValueError, match=r"config 'seed15-sigma1.0-k0' is not in repository .*\['k1'\]"):
        grammar_from_dataset(ds, repository=other)
    with pytest.raises(ValueError, match="has no generation.json"):
        grammar_from_dataset(ds, repository=tmp_path)


def test_a_hub_repository_id_is_read_through_hf_hub_download(repo, tmp_path, monkeypatch):
    import huggingface_hub

    requested = []

    def fake_download(repo_id, filename, repo_type):
        requested.append((repo_id, filename, repo_type))
        return str(repo / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    ds = _load(repo, "seed15-sigma1.0-k2", tmp_path / "cache")
    assert grammar_from_dataset(ds["test"], repository="someone/treelang") == Grammar.random(4, 1.0, 15)
    assert requested == [("someone/treelang", "generation.json", "dataset"),
                         ("someone/treelang", "data/seed15-sigma1.0-k2/grammar.json", "dataset")]


def test_card_has_yaml_configs_the_grammars_and_the_bp_accuracies(repo):
    from huggingface_hub import DatasetCard

    card = DatasetCard.load(repo / "README.md")
    configs = {c["config_name"]: c for c in card.data.configs}
    assert set(configs) == set(NAMES) and configs[NAMES[0]]["default"] is True
    assert sum(bool(c.get("default")) for c in configs.values()) == 1
    assert {f["split"] for f in configs["seed15-sigma1.0-k2"]["data_files"]} == {"train", "validation", "test"}
    assert {info["config_name"] for info in card.data.dataset_info} == set(NAMES)
    generation = json.loads((repo / "generation.json").read_text())["configs"]
    assert generation["seed15-sigma1.0-k2"]["params"]["filter_level"] == 2
    assert generation["seed15-sigma1.0-k2"]["params"]["seed"] == 15
    assert generation["seed15-sigma1.0-k2"]["grammar"] == "data/seed15-sigma1.0-k2/grammar.json"
    for name in NAMES:
        accuracy = generation[name]["bp_accuracy"]
        assert f"{accuracy['root']:.4f} | {accuracy['single_mask']:.4f} |" in card.text
    for seed in (0, 15):
        assert f"`Grammar.random(num_symbols=4, sigma=1.0, grammar_seed={seed})`" in card.text
    for section in ("## Summary", "## Usage", "## Generation", "## Limitations", "## Citation",
                    "garnierbrun2025hierarchical"):
        assert section in card.text


def test_the_paper_grid_is_twenty_configs_seed_major():
    names = [c.name for c in plan_configs(seeds=[0, 1, 15, 31], sigmas=[1.0], filter_levels=[0, 1, 2, 3, 4])]
    assert names == [f"seed{s}-sigma1.0-k{k}" for s in (0, 1, 15, 31) for k in range(5)]
    assert [c.name for c in plan_configs(depth=2)] == ["seed0-sigma1.0-depth2-k0", "seed0-sigma1.0-depth2-k1",
                                                       "seed0-sigma1.0-depth2-k2"]


def test_config_names_keep_their_order_and_spelling_and_short_names_take_a_single_seed_and_sigma():
    planned = plan_configs(["k2", "k0"], seeds=[15], sigmas=[0.5])
    assert [c.name for c in planned] == ["k2", "k0"]
    assert [(c.seed, c.sigma, c.filter_level) for c in planned] == [(15, 0.5, 2), (15, 0.5, 0)]
    planned = plan_configs(["seed1-sigma0.5-q3-k1", "k2"])
    assert [(c.name, c.seed, c.num_symbols) for c in planned] == [("seed1-sigma0.5-q3-k1", 1, 3), ("k2", 0, 4)]
    assert [c.seed for c in plan_configs(["k2"], seed=31)] == [31]  # the 0.1 keyword


def test_every_config_name_the_command_prints_loads_with_load_dataset(tmp_path, capsys):
    out = tmp_path / "repo"
    assert cli_main(["publish-dataset", str(out), "--configs", "k0", "k2", "--num-train", "20",
                     "--num-validation", "4", "--num-test", "6"]) == 0
    printed = [line.split(":")[0].strip() for line in capsys.readouterr().out.splitlines() if "BP root accuracy" in line]
    assert printed == ["k0", "k2"]
    for name in printed:
        loaded = _load(out, name, tmp_path / "cache")
        assert len(loaded["test"]) == 6 and set(loaded["test"]["filter_level"]) == {int(name[1:])}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seeds", "0", "15", "0"], r"`seeds` must not repeat a value .* \[0\] repeated"),
        (["--sigmas", "1", "0.5", "1.0"], r"`sigmas` must not repeat a value .* \[1.0\] repeated"),
        (["--filter-levels", "1", "1"], r"`filter_levels` must not repeat"),
        (["--filter-levels", "5"], r"`filter_levels` must be an integer in \[0, 4\], got 5"),
        (["--depth", "2", "--filter-levels", "3"], r"`filter_levels` must be an integer in \[0, 2\], got 3"),
        (["--seeds", "-1"], r"`seeds` must be an integer in \[0, 4294967295\], got -1"),
        (["--sigmas", "nan"], r"`sigmas` must be a real number in \[0, 1000\], got nan"),
        (["--sigmas", "1001"], r"`sigmas` must be a real number in \[0, 1000\], got 1001.0"),
        (["--configs", "k2", "--filter-levels", "1"], "not both"),
        (["--configs", "k2", "seed0-sigma1-k2"], r"\['k2', 'seed0-sigma1-k2'\] are all 'seed0-sigma1.0-k2'"),
        (["--configs", "k2", "--seeds", "0", "1"], r"`seeds` gives one value"),
        (["--configs", "seed1-sigma1.0-k2", "--seed", "2"], r"seed=2 contradicts the config name 'seed1-sigma1.0-k2'"),
        (["--configs", "k2", "k9"], "filter_level"),
        (["--configs", "bogus"], "unknown treelang config name 'bogus'"),
        (["--configs", "k2", "--num-test", "-3"], r"`num_test` must be an integer in \[0, 2147483647\], got -3"),
        (["--num-symbols", "1"], r"`num_symbols` must be an integer in \[2, 256\], got 1"),
        (["--configs", "rhm-v8-m4-s2-L3", "--depth", "4"], r"depth=4 contradicts the config name 'rhm-v8-m4-s2-L3' "
                                                           r"\(depth 3\)"),
        (["--configs", "k2", "rhm-v8-m4-s2-L3", "--num-symbols", "6"], r"num_symbols=6 contradicts the config name "
                                                                       r"'rhm-v8-m4-s2-L3' \(num_symbols 8\)"),
        (["--configs", "rhm-v8-m4-s2-L3", "--sigma", "0.5"], "sigma is not a parameter of the Random Hierarchy Model"),
        (["--configs", "rhm-v8-m9-s2-L3"], r"`num_rules` must be an integer in \[1, 8\]"),
    ],
)
def test_bad_arguments_are_refused_before_writing(tmp_path, capsys, args, message):
    import re

    out = tmp_path / "repo"
    assert cli_main(["publish-dataset", str(out), *args, "--num-train", "5"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("hf-treelang publish-dataset: error: ") and re.search(message, error), error
    assert list(tmp_path.iterdir()) == []


def test_bp_accuracies_are_bayes_optimal_values():
    from hf_treelang.dataset_builder import TreeLangBuilderConfig

    grammar = Grammar.random(4, 1.0, 0)
    full = bp_accuracy(TreeLangBuilderConfig(name="k0", num_test=400), grammar)
    filtered = bp_accuracy(TreeLangBuilderConfig(name="k4", num_test=400), grammar)
    assert full.root == 1.0  # non-overlapping rules: the full tree determines its root
    assert 0.25 < filtered.root < full.root
    assert 0.25 < filtered.single_mask < 1.0 and 0.25 < full.single_mask < 1.0


def test_failure_leaves_no_partial_output(tmp_path, monkeypatch):
    from hf_treelang.data import publish

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(publish, "bp_accuracy", broken)
    out = tmp_path / "repo"
    with pytest.raises(RuntimeError, match="disk on fire"):
        publish_dataset(out, ["k1"], num_train=10, num_validation=10, num_test=10)
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_overwrite_which_replaces_only_a_repository_it_wrote(tmp_path):
    out = tmp_path / "repo"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        publish_dataset(out, ["k3"], num_train=5, num_validation=5, num_test=5)
    with pytest.raises(ValueError, match=r"holds files that publish-dataset did not write \(keep.txt; no "):
        publish_dataset(out, ["k3"], overwrite=True, num_train=5, num_validation=5, num_test=5)
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    publish_dataset(out, ["k3"], overwrite=True, num_train=5, num_validation=5, num_test=5)  # an empty folder
    result = publish_dataset(out, ["seed0-sigma1.0-k3"], overwrite=True, num_train=5, num_validation=5, num_test=5)
    assert result.configs == ["seed0-sigma1.0-k3"] and not (out / "data" / "k3").exists()
    assert (out / "data/seed0-sigma1.0-k3/train-00000-of-00001.parquet").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]
    generation = json.loads((out / "generation.json").read_text())["configs"]
    assert np.isfinite(generation["seed0-sigma1.0-k3"]["bp_accuracy"]["root"])


def test_overwriting_the_current_folder_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("mine")
    assert cli_main(["publish-dataset", ".", "--configs", "k3", "--overwrite", "--num-train", "5"]) == 2
    assert "is the current folder or holds it" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_a_full_disk_while_publishing_says_what_was_written_and_what_is_needed(tmp_path, monkeypatch, capsys):
    import errno

    from hf_treelang.data import publish

    original = publish._write_split

    def fills_the_disk(config, grammar, split, data_dir):
        if config.filter_level == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(config, grammar, split, data_dir)

    monkeypatch.setattr(publish, "_write_split", fills_the_disk)
    out = tmp_path / "repo"
    assert cli_main(["publish-dataset", str(out), "--configs", "k0", "k2", "--num-train", "40"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar
    assert error.startswith("hf-treelang publish-dataset: error: ")
    assert "no space left on the disk" in error and "the repository needs about" in error and "free there" in error
    assert list(tmp_path.iterdir()) == []


def test_a_killed_publishs_staging_folder_is_cleaned_by_the_next_publish_and_a_live_ones_is_kept(tmp_path):
    import socket

    from hf_treelang.processes import owner_tag

    host = socket.gethostname().replace("-", "_")
    dead = tmp_path / f".out.tmp-{host}-{2**22 + 7}-abc"  # no such process
    alive = tmp_path / f".out.tmp-{owner_tag()}-def"  # this process: another publish under way
    for folder in (dead, alive):
        (folder / "data").mkdir(parents=True)
    publish_dataset(tmp_path / "out", ["k0"], num_train=8, num_validation=8, num_test=8, progress=False)
    assert not dead.exists() and alive.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out.tmp-")) == [alive.name]


# ---------------------------------------------------------------- Random Hierarchy Model configs (issue 35)

RHM_NAMES = ["rhm-v8-m4-s2-L3", "rhm-v8-m2-s2-L3-k1", "rhm-v6-n3-m4-s3-L2-seed5-k1", "seed15-sigma1.0-k2"]
RHM_SIZES = {"num_train": 30, "num_validation": 6, "num_test": 40}
PAPER_CARD_BODY_SHA256 = "ac5d52bbf3340c7f85b7e5639ec4f4fe18b5c697d40000d9f091cb38eae96088"  # paper configs' card, pinned


@pytest.fixture(scope="module")
def rhm_repo(tmp_path_factory):
    """A repository of three RHM configs (two grammars differing only in m) and one of the paper's, published by the
    command line without --num-symbols / --depth; returns (folder, the command's stdout)."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("pub-rhm") / "rhm-repo"
    stdout = io.StringIO()
    sizes = [f"--{key.replace('_', '-')}={value}" for key, value in RHM_SIZES.items()]
    with contextlib.redirect_stdout(stdout):
        assert cli_main(["publish-dataset", str(out), "--configs", *RHM_NAMES, *sizes]) == 0
    return out, stdout.getvalue()


def _rhm_grammar(params):
    return Grammar.random_hierarchy(num_symbols=params["num_symbols"], num_classes=params["num_classes"],
                                    num_rules=params["num_rules"], arity=params["arity"], depth=params["depth"],
                                    grammar_seed=params["seed"])


def test_rhm_configs_take_v_and_L_from_their_names_and_the_command_prints_each_with_its_bp_accuracies(rhm_repo):
    out, printed = rhm_repo
    generation = json.loads((out / "generation.json").read_text())["configs"]
    assert list(generation) == RHM_NAMES
    assert [(generation[name]["params"]["num_symbols"], generation[name]["params"]["depth"])
            for name in RHM_NAMES] == [(8, 3), (8, 3), (6, 2), (4, 4)]
    lines = printed.splitlines()
    assert lines[0] == f"wrote 4 configs (18 files) to {out}"
    assert lines[1:] == [f"  {name}: BP root accuracy {generation[name]['bp_accuracy']['root']:.4f}, single-mask "
                         f"{generation[name]['bp_accuracy']['single_mask']:.4f}" for name in RHM_NAMES]


def test_each_rhm_config_has_the_grammar_of_its_own_parameters(rhm_repo, tmp_path):
    out, _ = rhm_repo
    generation = json.loads((out / "generation.json").read_text())["configs"]
    grammars = {name: Grammar.load(out / "data" / name / "grammar.json") for name in RHM_NAMES[:3]}
    for name, grammar in grammars.items():
        expected = _rhm_grammar(generation[name]["params"])
        assert grammar == expected and grammar.params == expected.params
        assert len(grammar.level_rules) == expected.depth and np.array_equal(grammar.root_prior, expected.root_prior)
    assert grammars["rhm-v8-m4-s2-L3"] != grammars["rhm-v8-m2-s2-L3-k1"]  # same (v, s, L, seed), another m
    loaded = grammar_from_dataset(_load(out, "rhm-v6-n3-m4-s3-L2-seed5-k1", tmp_path), repository=out)
    assert loaded == grammars["rhm-v6-n3-m4-s3-L2-seed5-k1"] and loaded.arity == 3


@pytest.mark.parametrize("name", ["rhm-v8-m4-s2-L3", "rhm-v6-n3-m4-s3-L2-seed5-k1"])
def test_a_published_rhm_config_loads_offline_as_the_builder_makes_it_and_bp_on_its_grammar_gives_the_card(
        rhm_repo, tmp_path, name):
    import datasets
    import torch

    from hf_treelang import BeliefPropagation
    from hf_treelang.core.oracle import bp_accuracy as bp_accuracy_of
    from hf_treelang.core.oracle import task_inputs

    out, _ = rhm_repo
    published = _load(out, name, tmp_path / "a")
    built = datasets.load_dataset("treelang", name, cache_dir=str(tmp_path / "b"), **RHM_SIZES)
    for split in ("train", "validation", "test"):
        assert published[split].features == built[split].features
        assert published[split].data.table.equals(built[split].data.table)
    params = dataset_params(published, repository=out)
    grammar = grammar_from_dataset(published, repository=out)
    test = published["test"].with_format("numpy")
    leaves, roots = np.asarray(test["input_ids"]).astype(np.int64), np.asarray(test["root"])  # (40, s**L), (40,)
    bp = BeliefPropagation(grammar, params["depth"], params["filter_level"])
    root_accuracy = float((bp.root_marginals(torch.from_numpy(leaves)).argmax(1).numpy() == roots).mean())
    single_mask = bp_accuracy_of(bp, task_inputs("mlm", leaves, roots, mask_token_id=params["num_symbols"],
                                                 sampling_seed=dataset_metadata(published, out)["split_seeds"]["test"]))
    recorded = json.loads((out / "generation.json").read_text())["configs"][name]["bp_accuracy"]
    assert (root_accuracy, single_mask) == (recorded["root"], recorded["single_mask"])
    assert f"| `{name}` |" in (row := next(line for line in (out / "README.md").read_text().splitlines()
                                          if line.startswith(f"| `{name}` |")))
    assert row.endswith(f"| {root_accuracy:.4f} | {single_mask:.4f} |")


def test_the_card_of_rhm_and_paper_configs_describes_both_kinds(rhm_repo):
    from huggingface_hub import DatasetCard

    from hf_treelang.citation import BIBTEX, RANDOM_HIERARCHY_BIBTEX

    out, _ = rhm_repo
    card = DatasetCard.load(out / "README.md")
    assert "random-hierarchy-model" in card.data.tags
    assert {c["config_name"] for c in card.data.configs} == set(RHM_NAMES)
    text = card.text
    assert "| `rhm-v6-n3-m4-s3-L2-seed5-k1` | 6 | 3 | 4 | 3 | 2 | 5 | 1 | 30 | 6 | 40 |" in text  # v n m s L seed k
    assert "| `seed15-sigma1.0-k2` | 15 | 1.0 | 4 | 4 | 2 | 30 | 6 | 40 |" in text
    assert ("`Grammar.random_hierarchy(num_symbols=8, num_classes=8, num_rules=2, arity=2, depth=3, grammar_seed=0)`: "
            "`rhm-v8-m2-s2-L3-k1`") in text
    assert ("`Grammar.random_hierarchy(num_symbols=6, num_classes=3, num_rules=4, arity=3, depth=2, grammar_seed=5)`: "
            "`rhm-v6-n3-m4-s3-L2-seed5-k1`") in text
    assert "`Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=15)`: `seed15-sigma1.0-k2`" in text
    assert "This repository holds 4 config(s) of 4 grammar(s)." in text
    assert "`ancestors_level_m[i // s**(L - m)]`" in text and "i >> (ℓ - m)" not in text
    assert "`hf-treelang-grammar/2`" in text and "`level_rules[l][a][b_1]...[b_s]`" in text
    assert BIBTEX.strip() in text and RANDOM_HIERARCHY_BIBTEX.strip() in text


def test_the_card_of_rhm_configs_only_says_nothing_of_binary_log_normal_grammars():
    from hf_treelang.data.publish import BPAccuracy, _card

    configs = plan_configs(["rhm-v8-n4-m4-s3-L2", "rhm-v8-n4-m4-s3-L2-k2"], num_train=5, num_validation=0, num_test=8)
    card = _card(configs, {}, {c.name: BPAccuracy(1.0, 0.5, 8) for c in configs}, 26)
    body = card.split("\n---\n", 1)[1]
    assert body.startswith("\n# Random Hierarchy Model data (treelang)\n")
    assert "This repository holds 2 config(s) of 1 grammar(s)." in body
    assert "(here s = 3) have L levels of rules (here L = 2)" in body
    assert "(here v = 8)" in body and "(here m = 4)" in body and "(here n = 4)" in body
    for binary_only in ("binary tree", "2**ℓ", "2**m", "Grammar.random(", "M[a, b, c]", "σ", ">>",
                        "hf-treelang-grammar/1"):
        assert binary_only not in body, binary_only
    assert "Cagnetta" in body and "garnierbrun2025hierarchical" in body  # the RHM's paper, and filtering's


def test_a_card_of_the_papers_configs_only_keeps_its_bytes():
    import hashlib

    from hf_treelang.data.publish import BPAccuracy, _card

    configs = plan_configs(["seed1-sigma0.5-q3-depth3-k1", "k2", "seed0-sigma1.0-depth3-k0"], num_train=20,
                           num_validation=0, num_test=10)
    accuracies = {"seed1-sigma0.5-q3-depth3-k1": BPAccuracy(0.9, 0.7, 10), "k2": None,
                  "seed0-sigma1.0-depth3-k0": BPAccuracy(1.0, 0.625, 10)}
    body = _card(configs, {}, accuracies, 90).split("\n---\n", 1)[1]
    assert hashlib.sha256(body.encode()).hexdigest() == PAPER_CARD_BODY_SHA256


def test_rhm_parquet_shards_hold_a_fixed_number_of_leaves(tmp_path, monkeypatch):
    from hf_treelang.data import publish

    monkeypatch.setattr(publish, "_LEAVES_PER_FILE", 81)  # 9 sequences of 3**2 leaves per file
    out = tmp_path / "repo"
    publish_dataset(out, ["rhm-v6-n3-m4-s3-L2"], num_train=20, num_validation=0, num_test=0)
    shards = sorted(p.name for p in (out / "data" / "rhm-v6-n3-m4-s3-L2").glob("train-*.parquet"))
    assert shards == [f"train-0000{i}-of-00003.parquet" for i in range(3)]
    import datasets

    published = _load(out, "rhm-v6-n3-m4-s3-L2", tmp_path / "a")["train"]
    built = datasets.load_dataset("treelang", "rhm-v6-n3-m4-s3-L2", split="train", cache_dir=str(tmp_path / "b"),
                                  num_train=20, num_validation=0, num_test=0)
    assert published.data.table.equals(built.data.table)
