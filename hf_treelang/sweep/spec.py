"""A sweep as data: ``{"task": ..., "base": {<run arguments>}, "grid": {<argument>: [values, ...]}}``.

The SPEC is JSON (or YAML, ``.yaml`` / ``.yml``). ``base`` holds run arguments as in the training scripts' JSON file
(``hf_treelang.train.arguments``: ``depth``, ``k_train``, ``num_train``, ``hidden_size``, ``learning_rate``,
``seed``, ...); ``grid`` gives a list of values to each swept argument. The runs are the grid's product, in the order
the axes are written, each with a folder named after its grid point::

    {"task": "root", "base": {"depth": 2, "num_train": 256}, "grid": {"k_train": [0, 2], "seed": [0, 1]}}
    -> k_train=0,seed=0   k_train=0,seed=1   k_train=2,seed=0   k_train=2,seed=1

An axis whose values are objects is *linked*: each object sets several run arguments together, e.g. an architecture
with its sizes, ``"grid": {"architecture": [{"model_type": "bert", "config_overrides": "hidden_size=64"},
{"model_type": "gpt2", "config_overrides": "n_embd=64"}], "seed": [0, 1, 2]}`` (folders ``architecture=bert,seed=0``,
...).

This module checks the SPEC's shape only (standard library); the run arguments are checked by
:func:`hf_treelang.train.run.check_arguments` and resolved by :func:`~hf_treelang.train.run.resolve`.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path

SPEC_KEYS = ("task", "base", "grid")
SPEC_TASKS = ("root", "mlm", "finetune", "clm")  # hf_treelang.train.arguments.TASKS (tests check they stay equal)
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]")


@dataclass(frozen=True)
class SweepSpec:
    """A validated SPEC.

    Attributes:
        task: ``"root"``, ``"mlm"``, ``"finetune"`` or ``"clm"``.
        base: run arguments shared by every run.
        grid: ``{argument: [values]}``: one run per element of the product, axes in their written order.
    """

    task: str
    base: dict
    grid: dict

    def points(self) -> list:
        """The grid points in order: one ``{axis: value}`` per run."""
        axes = list(self.grid)
        return [dict(zip(axes, values)) for values in itertools.product(*(self.grid[a] for a in axes))]

    def to_dict(self) -> dict:
        return {"task": self.task, "base": self.base, "grid": self.grid}

    @staticmethod
    def arguments(point: dict) -> dict:
        """The run arguments of a grid point: an axis of objects (a linked axis) sets each object's arguments
        together, any other axis sets its own name."""
        out = {}
        for axis, value in point.items():
            out.update(value if isinstance(value, dict) else {axis: value})
        return out


def point_name(point: dict) -> str:
    """A run's folder name from its grid point: ``k_train=0,seed=1`` (characters outside ``[A-Za-z0-9._=,+-]``
    become ``_``)."""
    parts = []
    for axis, value in point.items():
        if isinstance(value, dict):  # a linked axis: named by its model_type where it has one
            value = value.get("model_type", json.dumps(value, sort_keys=True, separators=(",", ":")))
        shown = json.dumps(value, separators=(",", ":")) if not isinstance(value, str) else value
        parts.append(f"{axis}={shown}")
    return _UNSAFE.sub("_", ",".join(parts)) or "run"


def _read(path: Path) -> object:
    if not path.is_file():
        raise ValueError(f"SPEC {str(path)!r} is not a file")
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ValueError(f"SPEC {str(path)!r} is not valid YAML: {error}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"SPEC {str(path)!r} is not valid JSON: {error}") from None


def load_spec(source) -> SweepSpec:
    """A :class:`SweepSpec` from a path (``.json``, ``.yaml``, ``.yml``), a dict or a SweepSpec.

    Raises a ValueError/TypeError naming the key for: a missing or unknown top-level key, an unknown task, a
    ``base`` or ``grid`` that is not an object, an empty grid, an axis without values or with a repeated value, and
    an axis also set in ``base``. Unknown argument names are left to :func:`~hf_treelang.sweep.runner.spec_runs`.
    """
    if isinstance(source, SweepSpec):
        return source
    data = source if isinstance(source, dict) else _read(Path(source))
    if not isinstance(data, dict):
        raise TypeError(f"SPEC must be a JSON object with keys {list(SPEC_KEYS)}, got {type(data).__name__}")
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"SPEC has unknown keys {unknown}; allowed: {list(SPEC_KEYS)}")
    missing = [key for key in ("task", "grid") if key not in data]
    if missing:
        raise ValueError(f"SPEC lacks {missing}: give `task` (one of {SPEC_TASKS}) and a non-empty `grid`")
    task, base, grid = data["task"], data.get("base", {}), data["grid"]
    if task not in SPEC_TASKS:
        raise ValueError(f"SPEC `task` must be one of {SPEC_TASKS}, got {task!r}")
    if not isinstance(base, dict):
        raise TypeError(f"SPEC `base` must be an object of run arguments, got {type(base).__name__}")
    if not isinstance(grid, dict):
        raise TypeError(f"SPEC `grid` must be an object {{argument: [values]}}, got {type(grid).__name__}")
    if not grid:
        raise ValueError("SPEC `grid` is empty: give at least one axis, e.g. {\"seed\": [0, 1]}")
    for axis, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"SPEC grid axis `{axis}` must be a non-empty list of values, got {values!r}")
        seen = [json.dumps(v, sort_keys=True) for v in values]
        if len(set(seen)) != len(seen):
            raise ValueError(f"SPEC grid axis `{axis}` repeats a value: {values!r}")
        if axis in base:
            raise ValueError(f"SPEC sets `{axis}` both in `base` and as a grid axis; keep one")
        linked = [isinstance(v, dict) for v in values]
        if any(linked) and not all(linked):
            raise ValueError(f"SPEC grid axis `{axis}` mixes objects and single values: a linked axis gives an "
                             f"object of run arguments for every value")
        for value in values if all(linked) else ():
            if not value:
                raise ValueError(f"SPEC grid axis `{axis}` has an empty object: give the arguments it sets")
            both = sorted(set(value) & (set(base) | set(grid) - {axis}))
            if both:
                raise ValueError(f"SPEC grid axis `{axis}` sets `{both[0]}`, which base or another axis sets too")
    return SweepSpec(task=task, base=dict(base), grid={axis: list(values) for axis, values in grid.items()})


__all__ = ["SPEC_KEYS", "SPEC_TASKS", "SweepSpec", "load_spec", "point_name"]
