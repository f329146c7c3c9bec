"""The ``>>>`` examples of every docstring of hf_treelang (and its dataset builder) run and print what they show.

Each module's examples run with :mod:`doctest` (ELLIPSIS and NORMALIZE_WHITESPACE), in a copy of the module's
globals. Examples that would need the network belong in a ``::`` code block, not after ``>>>``; a module listed in
``NEEDS_NETWORK`` is skipped with its reason.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = {"hf_treelang": ("hf_treelang",), "dataset_builder": ("hf_treelang", "dataset_builder")}
NEEDS_NETWORK: dict = {}  # module name -> why its examples need the network (none today)
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules() -> list:
    names = []
    for folder, prefix in SOURCE_DIRS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [*prefix, *path.relative_to(ROOT / folder).with_suffix("").parts]
            if parts[-1] == "__main__":
                continue  # runs the command on import
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = _modules()


def _doctests(name: str) -> list:
    module = importlib.import_module(name)
    return [test for test in doctest.DocTestFinder(exclude_empty=True).find(module, name) if test.examples]


@pytest.fixture
def offline_caches(tmp_path, monkeypatch):
    """Caches that the examples may write (the evaluate metric's lock and Arrow files) go to tmp_path."""
    import datasets.config
    import evaluate.config

    monkeypatch.setattr(evaluate.config, "HF_METRICS_CACHE", str(tmp_path / "metrics"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")


@pytest.mark.parametrize("name", MODULES)
def test_the_docstring_examples_of_the_module_run(name, offline_caches):
    if name in NEEDS_NETWORK:
        pytest.skip(NEEDS_NETWORK[name])
    report = []
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    for test in _doctests(name):
        runner.run(test, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(report)


def test_the_core_and_the_metric_show_examples():
    # The modules a reader starts from carry examples, so the test above checks something there.
    for name in ("hf_treelang.core.bp", "hf_treelang.core.grammar", "hf_treelang.core.masking",
                 "hf_treelang.core.metrics", "hf_treelang.core.oracle", "hf_treelang.core.sampling",
                 "hf_treelang.evaluation"):
        assert sum(len(test.examples) for test in _doctests(name)) >= 2, name
    assert "hf_treelang.dataset_builder.treelang" in MODULES
