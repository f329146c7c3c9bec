"""Output files of the analyses: a validated output folder, deterministic JSON, argument checks, CLI errors."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from hf_treelang.jsonio import write_json_atomic

import numpy as np

from hf_treelang.core.params import check_int
from hf_treelang.train.folders import check_output_folder


def check_positive(name: str, value, low: int = 1) -> int:
    """``value`` as an int >= ``low`` (the wording of :func:`hf_treelang.core.params.check_int`)."""
    return check_int(name, value, low)


def check_output_dir(out_dir, name: str = "out") -> Path:
    """``out_dir`` as a folder that can be created or written into (not a file, not under a file, writable).

    Creates nothing: the commands call it before computing anything, :func:`prepare_output` before writing.
    """
    return check_output_folder(name, out_dir)


def prepare_output(out_dir) -> Path:
    """Create the output folder (after all inputs have been validated)."""
    path = check_output_dir(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


DEVICES = "'cpu', 'cuda', 'cuda:<index>' or 'mps'"


def check_device(device):
    """``device`` as a ``torch.device`` that this machine has; a ValueError naming it and what is available otherwise.

    Examples: ``"cpu"``; ``"cuda"`` / ``"cuda:1"`` with at least 1 / 2 CUDA devices; ``"mps"`` on Apple silicon.
    """
    import torch

    if isinstance(device, torch.device):
        parsed = device
    else:
        try:
            parsed = torch.device(device)
        except (RuntimeError, TypeError, ValueError):
            raise ValueError(f"`device` must be one of {DEVICES}, got {device!r}") from None
    if parsed.type == "cpu":
        return parsed
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"`device` {device!r} needs a CUDA GPU, but this machine has none (torch "
                             f"{torch.__version__}); use --device cpu")
        if parsed.index is not None and parsed.index >= count:
            raise ValueError(f"`device` must be 'cpu' or 'cuda:<index>' with index in [0, {count - 1}] (this machine "
                             f"has {count} CUDA device{'s' if count > 1 else ''}), got {device!r}")
        return parsed
    if parsed.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"`device` {device!r} needs Apple's MPS backend, which this machine lacks; use --device "
                             "cpu")
        return parsed
    raise ValueError(f"`device` must be one of {DEVICES}, got {device!r}")


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
    return write_json_atomic(path, _jsonable(data), indent=2)


def cli_error(command: str, error: Exception) -> int:
    """Report a bad-input error of a sub-command on stderr; returns the exit status 2."""
    sys.stderr.write(f"hf-treelang {command}: error: {error}\n")
    return 2
