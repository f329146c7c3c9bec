"""Module attributes resolved on first access (PEP 562), so that a light module can name heavy objects.

Usage in a module::

    __getattr__, __dir__ = lazy_attributes(__name__, {"Name": "package.heavy_module", ...})
"""

from __future__ import annotations

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
