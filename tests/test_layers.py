"""The layering of hf_treelang, read from the import graph (``ast``, no module is imported to build it).

Layers, lowest first (imports point down only)::

    core (numpy, torch)  <  models (transformers)  <  data, dataset_builder  <  train  <  sweep  <  analysis  <  reproduce

Every ``import x`` / ``from x import y`` of every file under ``hf_treelang/`` and ``dataset_builder/`` counts, relative
imports resolved to absolute names and imports inside functions included (a lazy import is still a dependency).
``dataset_builder/`` ships as ``hf_treelang.dataset_builder``. Each failure lists the offending (module, import) pairs.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = {"hf_treelang": ("hf_treelang",), "dataset_builder": ("hf_treelang", "dataset_builder")}
STDLIB = set(sys.stdlib_module_names)
SCRIPT_DIRS = ("training", "benchmarks")


@dataclass(frozen=True)
class Import:
    """One import statement's target: ``module`` (absolute) and, for ``from module import name``, the ``name``."""

    importer: str
    module: str
    name: str | None = None

    def __str__(self) -> str:
        return self.module if self.name is None else f"{self.module}:{self.name}"


def _module_names() -> dict:
    """{absolute module name: (path, is_package)} of every .py file under the source folders."""
    modules = {}
    for folder, prefix in SOURCE_DIRS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [*prefix, *path.relative_to(ROOT / folder).with_suffix("").parts]
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            modules[".".join(parts)] = (path, is_package)
    return modules


MODULES = _module_names()


def _imports_of(module: str, path: Path, is_package: bool) -> list:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in MODULES:  # `from package import submodule` imports the submodule
                    found.append(Import(module, submodule))
                else:
                    found.append(Import(module, target, alias.name))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append(Import(module, node.args[0].value))  # importlib.import_module("literal")
    return found


IMPORTS = [imp for module, (path, is_package) in MODULES.items() for imp in _imports_of(module, path, is_package)]


def _in(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _top(module: str) -> str:
    return module.split(".")[0]


def _report(offending: list) -> str:
    return "\n".join(f"  {imp.importer} -> {imp}" for imp in sorted(offending, key=str))


def _check(offending: list, rule: str) -> None:
    assert not offending, f"{rule}; offending (module -> import) pairs:\n{_report(offending)}"


def test_the_import_graph_covers_every_layer():
    layers = ["hf_treelang.core", "hf_treelang.models", "hf_treelang.data", "hf_treelang.dataset_builder",
              "hf_treelang.train", "hf_treelang.sweep", "hf_treelang.analysis", "hf_treelang.reproduce"]
    for layer in layers:
        assert any(_in(imp.importer, layer) for imp in IMPORTS), f"no import found in {layer}: is the parser broken?"
    assert "hf_treelang.dataset_builder.treelang" in MODULES
    lazy = Import("hf_treelang.data.publish", "hf_treelang.dataset_builder.treelang", "TreeLangBuilderConfig")
    assert lazy in IMPORTS, "imports inside functions must be collected"
    relative = Import("hf_treelang.core.bp", "hf_treelang.core.grammar", "Grammar")
    assert relative in IMPORTS, "relative imports must be resolved to absolute names"


def test_core_imports_only_the_standard_library_numpy_torch_and_core():
    offending = [
        imp for imp in IMPORTS
        if _in(imp.importer, "hf_treelang.core")
        and not (_top(imp.module) in STDLIB or _top(imp.module) in ("numpy", "torch") or _in(imp.module, "hf_treelang.core"))
    ]
    _check(offending, "hf_treelang.core must import only the standard library, numpy, torch and hf_treelang.core")


def test_models_import_nothing_of_the_layers_above():
    above = ("hf_treelang.data", "hf_treelang.dataset_builder", "hf_treelang.train", "hf_treelang.sweep",
             "hf_treelang.analysis", "hf_treelang.reproduce", "hf_treelang.evaluation")
    offending = [imp for imp in IMPORTS if _in(imp.importer, "hf_treelang.models") and _in(imp.module, *above)]
    _check(offending, "hf_treelang.models must not import data/train/analysis/reproduce/evaluation")


def test_the_files_copied_next_to_checkpoints_import_only_stdlib_torch_transformers_and_each_other():
    standalone = ("hf_treelang.models.configuration_treelang", "hf_treelang.models.modeling_treelang")
    offending = [
        imp for imp in IMPORTS
        if imp.importer in standalone
        and not (_top(imp.module) in STDLIB or _top(imp.module) in ("torch", "transformers") or imp.module in standalone)
    ]
    _check(offending, "configuration_treelang.py / modeling_treelang.py are loaded with trust_remote_code where "
                      "hf_treelang is not installed: standard library, torch, transformers and each other only")


@pytest.mark.parametrize(
    "layer, forbidden",
    [
        (("hf_treelang.data", "hf_treelang.dataset_builder"),
         ("hf_treelang.train", "hf_treelang.sweep", "hf_treelang.analysis", "hf_treelang.reproduce")),
        (("hf_treelang.train",), ("hf_treelang.sweep", "hf_treelang.analysis", "hf_treelang.reproduce")),
        (("hf_treelang.sweep",), ("hf_treelang.analysis", "hf_treelang.reproduce")),
        (("hf_treelang.analysis",), ("hf_treelang.reproduce",)),
    ],
    ids=["data", "train", "sweep", "analysis"],
)
def test_a_layer_imports_nothing_of_the_layers_above(layer, forbidden):
    offending = [imp for imp in IMPORTS if _in(imp.importer, *layer) and _in(imp.module, *forbidden)]
    _check(offending, f"{' and '.join(layer)} must not import {', '.join(forbidden)}")


def _package_of(module: str) -> str:
    return module if MODULES.get(module, (None, False))[1] else module.rpartition(".")[0]


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))  # dunders are public


def test_no_module_imports_a_private_module_of_another_package():
    offending = []
    for imp in IMPORTS:
        parts = imp.module.split(".")
        private = [i for i, part in enumerate(parts) if _private(part)]
        if private:
            # the package that owns the first private component; importing it from inside that package is fine
            owner = ".".join(parts[: private[0]])
            if not _in(_package_of(imp.importer), owner) or not owner:
                offending.append(imp)
    _check(offending, "a private module (a path component starting with '_') may only be imported from its package")


def test_no_module_imports_a_private_name_from_a_module_of_another_package():
    offending = [
        imp for imp in IMPORTS
        if imp.name is not None and _private(imp.name) and _package_of(imp.module) != _package_of(imp.importer)
    ]
    _check(offending, "`from x import _name` is only allowed within x's package: make the name public")


def _script_modules() -> set:
    names = set(SCRIPT_DIRS)
    for folder in SCRIPT_DIRS:
        names |= {path.stem for path in (ROOT / folder).glob("*.py")}
    return names


def test_nothing_imports_the_training_scripts_or_the_benchmarks():
    scripts = _script_modules()
    assert {"run_mlm", "bench_core"} <= scripts
    offending = [imp for imp in IMPORTS if _top(imp.module) in scripts]
    _check(offending, "the package must not import training/*.py or benchmarks/*.py (they are not shipped)")


def test_the_limits_restated_in_the_model_config_equal_the_core_table():
    from hf_treelang.core.params import LIMITS
    from hf_treelang.models import configuration_treelang

    assert configuration_treelang.MAX_NUM_SYMBOLS == LIMITS["num_symbols"].high
    assert configuration_treelang.MAX_DEPTH == LIMITS["depth"].high
    assert configuration_treelang.MAX_SIGMA == LIMITS["sigma"].high
    assert configuration_treelang.MAX_GRAMMAR_SEED == LIMITS["grammar_seed"].high
