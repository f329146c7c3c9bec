"""What keeps the package's heavy imports cheap: module attributes resolved on first access (PEP 562), so that a
light module can name heavy objects, and :func:`heavy_imports`, the import of torch, transformers and datasets without
the cyclic garbage collector's passes.

Usage in a module::

    __getattr__, __dir__ = lazy_attributes(__name__, {"Name": "package.heavy_module", ...})
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys


def lazy_attributes(module_name: str, table: dict):
    """``(__getattr__, __dir__)`` for module ``module_name``: ``table`` maps a public name to the module defining it."""

    def __getattr__(name: str):
        source = table.get(name)
        if source is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        setattr(sys.modules[module_name], name, value)  # later accesses skip this function
        return value

    def __dir__() -> list:
        return sorted(set(vars(sys.modules[module_name])) | set(table))

    return __getattr__, __dir__


@contextlib.contextmanager
def heavy_imports():
    """Import torch, transformers and datasets (thousands of modules) inside this block without cyclic garbage
    collection, then move what they left to the collector's permanent generation (:func:`gc.freeze`).

    Why: the imports leave hundreds of thousands of tracked objects, none of them garbage, and each allocation burst
    triggers a collection that walks them again — a large share of a short run's start-up; the same walk repeats in every
    later full collection and at interpreter exit. Module-level objects live as long as the process, so freezing them
    changes what is collected in no way; the collector is on again (if it was) when the block ends, and an error
    inside the block re-enables it too. ``benchmarks/bench_startup.py`` measures the effect.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
    gc.freeze()
