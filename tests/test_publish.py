"""``hf-treelang publish-dataset``: a Hub-ready repository that stock ``datasets`` loads without hf_treelang."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from hf_treelang import Grammar
from hf_treelang.cli import main as cli_main
from hf_treelang.data.publish import bp_accuracy, publish_dataset

SIZES = ["--num-train", "200", "--num-validation", "40", "--num-test", "300"]

_LOAD_WITHOUT_HF_TREELANG = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "hf_treelang":
            raise ImportError("hf_treelang is blocked in this test")
sys.meta_path.insert(0, Block())
import datasets
ds = datasets.load_dataset(sys.argv[1], "k2", cache_dir=sys.argv[2])
assert "hf_treelang" not in sys.modules
print(len(ds["train"]), len(ds["validation"]), len(ds["test"]), ds["test"][0]["input_ids"], ds["test"][0]["root"])
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    out = tmp_path_factory.mktemp("pub") / "treelang-repo"
    assert cli_main(["publish-dataset", str(out), "--configs", "k2", "k0", *SIZES]) == 0
    return out


def test_repository_layout(repo):
    files = sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file())
    assert files == [
        "README.md", "data/k0/test-00000-of-00001.parquet", "data/k0/train-00000-of-00001.parquet",
        "data/k0/validation-00000-of-00001.parquet", "data/k2/test-00000-of-00001.parquet",
        "data/k2/train-00000-of-00001.parquet", "data/k2/validation-00000-of-00001.parquet",
        "generation.json", "grammar.json",
    ]
    assert Grammar.load(repo / "grammar.json") == Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)


def test_stock_datasets_loads_k2_without_hf_treelang(repo, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", _LOAD_WITHOUT_HF_TREELANG, str(repo), str(tmp_path / "cache")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[:3] == ["200", "40", "300"]


def test_published_rows_equal_the_builder_rows(repo, tmp_path):
    import datasets

    published = datasets.load_dataset(str(repo), "k0", split="test", cache_dir=str(tmp_path / "a"))
    built = datasets.load_dataset("treelang", "k0", split="test", cache_dir=str(tmp_path / "b"),
                                  num_train=200, num_validation=40, num_test=300)
    assert published.features == built.features
    assert published.data.table.equals(built.data.table)


def test_card_has_yaml_configs_and_the_bp_accuracies(repo):
    from huggingface_hub import DatasetCard

    card = DatasetCard.load(repo / "README.md")
    configs = {c["config_name"]: c for c in card.data.configs}
    assert set(configs) == {"k0", "k2"} and configs["k2"]["default"] is True
    assert {f["split"] for f in configs["k2"]["data_files"]} == {"train", "validation", "test"}
    assert {info["config_name"] for info in card.data.dataset_info} == {"k0", "k2"}
    generation = json.loads((repo / "generation.json").read_text())["configs"]
    assert generation["k2"]["params"]["filter_level"] == 2
    for name in ("k0", "k2"):
        accuracy = generation[name]["bp_accuracy"]
        assert f"{accuracy['root']:.4f} | {accuracy['single_mask']:.4f}" in card.text
    for section in ("## Summary", "## Generation", "## Citation", "garnierbrun2025hierarchical"):
        assert section in card.text


def test_bp_accuracies_are_bayes_optimal_values():
    from hf_treelang.dataset_builder import TreeLangBuilderConfig

    grammar = Grammar.random(4, 1.0, 0)
    full = bp_accuracy(TreeLangBuilderConfig(name="k0", num_test=400), grammar)
    filtered = bp_accuracy(TreeLangBuilderConfig(name="k4", num_test=400), grammar)
    assert full.root == 1.0  # non-overlapping rules: the full tree determines its root
    assert 0.25 < filtered.root < full.root
    assert 0.25 < filtered.single_mask < 1.0 and 0.25 < full.single_mask < 1.0


def test_failure_leaves_no_partial_output(tmp_path, monkeypatch):
    import hf_treelang.data.publish as publish

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(publish, "bp_accuracy", broken)
    out = tmp_path / "repo"
    with pytest.raises(RuntimeError, match="disk on fire"):
        publish_dataset(out, ["k1"], num_train=10, num_validation=10, num_test=10)
    assert list(tmp_path.iterdir()) == []


def test_bad_configs_are_refused_before_writing(tmp_path, capsys):
    out = tmp_path / "repo"
    assert cli_main(["publish-dataset", str(out), "--configs", "k2", "k9"]) == 2
    assert "filter_level" in capsys.readouterr().err
    assert cli_main(["publish-dataset", str(out), "--configs", "k2", "--num-test", "-3"]) == 2
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_overwrite(tmp_path):
    out = tmp_path / "repo"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        publish_dataset(out, ["k3"], num_train=5, num_validation=5, num_test=5)
    publish_dataset(out, ["k3"], overwrite=True, num_train=5, num_validation=5, num_test=5)
    assert not (out / "keep.txt").exists() and (out / "data/k3/train-00000-of-00001.parquet").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]
    assert np.isfinite(json.loads((out / "generation.json").read_text())["configs"]["k3"]["bp_accuracy"]["root"])
