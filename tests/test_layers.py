"""The layering of hf_treelang, read from the import graph (``ast``, no module is imported to build it).

Layers, lowest first (imports point down only)::

    core (numpy, torch)  <  models (transformers)  <  data, dataset_builder  <  train  <  sweep  <  analysis  <  reproduce
    <  cli (imported by nothing)

Every ``import x`` / ``from x import y`` of every file under ``hf_treelang/`` and ``dataset_builder/`` counts, relative
imports resolved to absolute names and imports inside functions included (a lazy import is still a dependency).
``dataset_builder/`` ships as ``hf_treelang.dataset_builder``. Each failure lists the offending (module, import) pairs.

Beyond the layers: the graph of the package's modules has no cycle, and an import of the package's own modules inside
a function says why it is there (``# lazy: <reason>`` on its line or the line above).
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
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
    # where the statement is and how it is written; not part of the identity the tests compare
    line: int = field(default=0, compare=False)
    in_function: bool = field(default=False, compare=False)
    lazy_reason: bool = field(default=False, compare=False)  # a `# lazy: ...` comment covers it (_lazy_reasoned)

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


LAZY_REASON = re.compile(r"#\s*lazy:\s*\S")


def _function_nodes(tree: ast.AST) -> set:
    """The ids of every node inside a function (or lambda) body: imports there run on call, not on import."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside |= {id(child) for child in ast.walk(node) if child is not node}
    return inside


def _lazy_reasoned(tree: ast.AST, lines: list) -> set:
    """The ids of the import statements that a ``# lazy: <reason>`` comment covers.

    The comment covers the statement on whose lines it stands, or, on a line of its own, the statement below it and
    the import statements that directly follow that one in the same block (a function's import head, blank lines
    allowed).
    """
    covered = set()
    for node in ast.walk(tree):
        for block in (getattr(node, name, None) for name in ("body", "orelse", "finalbody")):
            if not isinstance(block, list):
                continue
            run_reason = False  # a comment line above the current run of import statements gives a reason
            for statement in block:
                if not isinstance(statement, (ast.Import, ast.ImportFrom)):
                    run_reason = False
                    continue
                above = lines[statement.lineno - 2].strip() if statement.lineno >= 2 else ""
                run_reason = run_reason or (above.startswith("#") and bool(LAZY_REASON.search(above)))
                own = any(LAZY_REASON.search(line) for line in lines[statement.lineno - 1: statement.end_lineno])
                if own or run_reason:
                    covered.add(id(statement))
    return covered


def _imports_of(module: str, path: Path, is_package: bool) -> list:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, str(path))
    lines = source.splitlines()
    in_function = _function_nodes(tree)
    reasoned = _lazy_reasoned(tree, lines)
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        where = {"line": getattr(node, "lineno", 0), "in_function": id(node) in in_function,
                 "lazy_reason": id(node) in reasoned}
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, **where) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in MODULES:  # `from package import submodule` imports the submodule
                    found.append(Import(module, submodule, **where))
                else:
                    found.append(Import(module, target, alias.name, **where))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append(Import(module, node.args[0].value, **where))  # importlib.import_module("literal")
    return found


IMPORTS = [imp for module, (path, is_package) in MODULES.items() for imp in _imports_of(module, path, is_package)]


def _in(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _top(module: str) -> str:
    return module.split(".")[0]


def _report(offending: list) -> str:
    return "\n".join(f"  {imp.importer} -> {imp}" for imp in sorted(offending, key=str))


def _check(offending: list, rule: str) -> None:
    if offending:  # the message alone: the list is the whole story
        pytest.fail(f"{rule}; offending (module -> import) pairs:\n{_report(offending)}", pytrace=False)


def test_the_import_graph_covers_every_layer():
    layers = ["hf_treelang.core", "hf_treelang.models", "hf_treelang.data", "hf_treelang.dataset_builder",
              "hf_treelang.train", "hf_treelang.sweep", "hf_treelang.analysis", "hf_treelang.reproduce"]
    for layer in layers:
        assert any(_in(imp.importer, layer) for imp in IMPORTS), f"no import found in {layer}: is the parser broken?"
    assert "hf_treelang.dataset_builder.treelang" in MODULES
    lazy = Import("hf_treelang.cli", "hf_treelang.analysis.io", "check_device")
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
    standalone = ("hf_treelang.models.configuration_treelang", "hf_treelang.models.modeling_treelang",
                  "hf_treelang.models.special_logits")
    offending = [
        imp for imp in IMPORTS
        if imp.importer in standalone
        and not (_top(imp.module) in STDLIB or _top(imp.module) in ("torch", "transformers") or imp.module in standalone)
    ]
    _check(offending, "configuration_treelang.py / modeling_treelang.py / special_logits.py are loaded with "
                      "trust_remote_code where "
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
    from hf_treelang.core.params import LIMITS, MAX_LEAVES
    from hf_treelang.models import configuration_treelang

    assert configuration_treelang.MAX_NUM_SYMBOLS == LIMITS["num_symbols"].high
    assert configuration_treelang.MAX_DEPTH == LIMITS["depth"].high
    assert configuration_treelang.MAX_SIGMA == LIMITS["sigma"].high
    assert configuration_treelang.MAX_GRAMMAR_SEED == LIMITS["grammar_seed"].high
    assert configuration_treelang.MAX_ARITY == LIMITS["arity"].high
    assert configuration_treelang.MAX_LEAVES == MAX_LEAVES


def _where(imp: Import) -> str:
    """``hf_treelang/x/y.py:LINE``, the file and line of an import, for the failure messages."""
    return f"{MODULES[imp.importer][0].relative_to(ROOT).as_posix()}:{imp.line}"


def test_the_parser_tells_function_level_imports_and_their_reasons():
    lazy = IMPORTS[IMPORTS.index(Import("hf_treelang.cli", "hf_treelang.analysis.io", "check_device"))]
    assert lazy.in_function and lazy.lazy_reason
    top = IMPORTS[IMPORTS.index(Import("hf_treelang.cli", "hf_treelang.help_format", "HelpFormatter"))]
    assert not top.in_function and not top.lazy_reason


def test_a_lazy_comment_above_covers_the_run_of_imports_below_it():
    source = """
def f():
    from a import b  # lazy: trailing
    from a import c

    # lazy: above a run
    import d

    from e import f
    x = 1
    import g
"""
    tree = ast.parse(source)
    reasoned = _lazy_reasoned(tree, source.splitlines())
    names = {node.names[0].name for node in ast.walk(tree) if id(node) in reasoned}
    assert names == {"b", "d", "f"}


def test_the_command_line_is_the_top_layer_that_nothing_imports():
    offending = [imp for imp in IMPORTS if _in(imp.module, "hf_treelang.cli") and imp.importer != "hf_treelang.cli"]
    _check(offending, "hf_treelang.cli is the top layer: no module of the package imports it (what lower modules "
                      "share with it lives below, e.g. hf_treelang.help_format)")


def test_the_help_formatter_imports_only_the_standard_library():
    offending = [imp for imp in IMPORTS if imp.importer == "hf_treelang.help_format" and _top(imp.module) not in STDLIB]
    _check(offending, "hf_treelang.help_format is shared by the command line and the training scripts' parser: "
                      "standard library only")


def _own_module(imp: Import) -> str | None:
    """The module of the package an import loads: the longest known module name that ``imp.module`` starts with.

    ``from package import name`` (name not a submodule) is an edge to the package's ``__init__``; ``import
    hf_treelang`` and ``from hf_treelang import register`` are edges to ``hf_treelang`` itself.
    """
    parts = imp.module.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in MODULES:
            return candidate
    return None


def _import_graph() -> dict:
    """{module: {imported module of the package: [the imports that make the edge]}}, self-imports left out."""
    graph = {module: {} for module in MODULES}
    for imp in IMPORTS:
        target = _own_module(imp)
        if target is not None and target != imp.importer:
            graph[imp.importer].setdefault(target, []).append(imp)
    return graph


def _strongly_connected_components(graph: dict) -> list:
    """Tarjan's algorithm over sorted nodes and edges (deterministic); the components of more than one module."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(node: str) -> None:  # recursion depth <= number of modules (~100)
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def _shortest_cycle(graph: dict, start: str, members: set) -> list:
    """The shortest path ``start -> ... -> start`` inside one component (breadth first, sorted edges)."""
    previous, frontier = {start: None}, [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph[node]):
                if successor == start:
                    path = [node]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if successor in members and successor not in previous:
                    previous[successor] = node
                    following.append(successor)
        frontier = following
    raise AssertionError(f"{start} is in a component but on no cycle")  # cannot happen for a component of size > 1


def _describe_cycle(graph: dict, cycle: list) -> str:
    chain = " -> ".join(cycle)
    edges = []
    for importer, imported in zip(cycle, cycle[1:]):
        imports = graph[importer][imported]
        kind = "in a function" if all(imp.in_function for imp in imports) else "at module level"
        lines = sorted({_where(imp) for imp in imports}, key=_line_key)
        edges.append(f"      {importer} -> {imported}: {', '.join(lines)} ({kind})")
    return "\n".join([f"  {chain}", *edges])


def test_the_import_graph_of_the_package_has_no_cycle():
    graph = _import_graph()
    cycles = []
    for component in _strongly_connected_components(graph):
        cycle = _shortest_cycle(graph, component[0], set(component))
        cycles.append(_describe_cycle(graph, cycle))
        cycles.append(f"    (the circle holds {len(component)} modules: {', '.join(component)})")
    if cycles:
        pytest.fail("import cycles between modules of hf_treelang (lazy imports count: move the shared part below "
                    "both, or turn the dependency around); one cycle per circle:\n" + "\n".join(cycles), pytrace=False)


def test_the_cycle_finder_reports_a_readable_chain():
    graph = {"a": {"b": []}, "b": {"c": []}, "c": {"a": [], "d": []}, "d": {}}
    assert _strongly_connected_components(graph) == [["a", "b", "c"]]
    assert _shortest_cycle(graph, "a", {"a", "b", "c"}) == ["a", "b", "c", "a"]


def _line_key(where: str) -> tuple:
    path, _, line = where.rpartition(":")
    return path, int(line)


def test_every_function_level_import_of_the_package_says_why_it_is_lazy():
    statements = {}  # (file:line, importer) -> the targets of that one statement
    for imp in IMPORTS:
        if imp.in_function and not imp.lazy_reason and _own_module(imp) is not None:
            statements.setdefault((_where(imp), imp.importer), []).append(str(imp))
    offending = [f"  {where}: {importer} -> {', '.join(targets)}"
                 for (where, importer), targets in sorted(statements.items(), key=lambda item: _line_key(item[0][0]))]
    if offending:
        pytest.fail("an import of the package's own modules inside a function must buy import time or break a "
                    "load-order need, and say which in a `# lazy: <reason>` comment on its line or the line above; "
                    "otherwise import it at module level. Imports without a reason:\n" + "\n".join(offending),
                    pytrace=False)
