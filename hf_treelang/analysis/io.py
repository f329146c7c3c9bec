"""Output files of the analyses: a validated output folder, deterministic JSON, argument checks, CLI errors."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from hf_treelang.core.params import check_int


def check_positive(name: str, value, low: int = 1) -> int:
    """``value`` as an int >= ``low`` (the wording of :func:`hf_treelang.core.params.check_int`)."""
    return check_int(name, value, low)


def prepare_output(out_dir) -> Path:
    """Create the output folder (after all inputs have been validated)."""
    if out_dir is None or str(out_dir) == "":
        raise ValueError(f"out_dir must be a folder path, got {out_dir!r}")
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise ValueError(f"out_dir {str(path)!r} exists and is not a folder")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(path, data) -> Path:
    """Write JSON deterministically (sorted keys; NaN/inf as null)."""
    path = Path(path)
    path.write_text(json.dumps(_jsonable(data), indent=2, sort_keys=True) + "\n")
    return path


def cli_error(command: str, error: Exception) -> int:
    """Report a bad-input error of a sub-command on stderr; returns the exit status 2."""
    sys.stderr.write(f"hf-treelang {command}: error: {error}\n")
    return 2
