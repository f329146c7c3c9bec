"""The cache of ``hf-treelang reproduce --plan``: a plan computed once is printed again in a fraction of a second.

Computing a plan resolves every run of the preset (transformers' argument classes, hence torch) and measures this
CPU's training speed, seconds of work that give the same answer each time on one machine. The plan and its printed
lines are stored under a key of everything that produced them:

* the preset and the plan's folder (the runs' paths are in the plan);
* the package's code (a digest of every file of ``hf_treelang``), so that a change of a preset or of the step
  counting is never answered from an old plan;
* the machine (host name, CPU model, core count, visible GPUs) and the versions of the packages whose speed the
  estimate measures (torch, transformers, accelerate, datasets, numpy), and the Python version;
* which MLM checkpoints the fine-tuning runs start from already exist in the folder (their sizes are read from them).

A hit loads no torch. Standard library only. The folder is ``$HF_TREELANG_CACHE``, else ``$XDG_CACHE_HOME/hf_treelang``,
else ``~/.cache/hf_treelang``; deleting it is always safe.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Callable

from hf_treelang.jsonio import read_json_object, write_json_atomic

PLAN_FILE = "plan.json"
CACHE_ENV = "HF_TREELANG_CACHE"
PLANS_DIR = "plans"
MEASURED_PACKAGES = ("torch", "transformers", "accelerate", "datasets", "numpy")
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def cache_dir() -> Path:
    """The package's cache folder (see the module docstring)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hf_treelang"


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 of every source and data file of the package (path and bytes), in a fixed order."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE_ROOT.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(_PACKAGE_ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else the platform's processor)."""
    try:
        with open("/proc/cpuinfo") as handle:
            return next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def plan_key(preset: str, out) -> str:
    """The key of the plan of ``preset`` written to ``out`` on this machine with this code."""
    out = Path(out).resolve()
    checkpoints = sorted(str(path.parent.relative_to(out)) for path in out.glob("runs/*/config.json"))
    record = {
        "preset": preset,
        "out": str(out),
        "code": code_digest(),
        "machine": [socket.gethostname(), platform.machine(), cpu_model(), os.cpu_count(),
                    os.environ.get("CUDA_VISIBLE_DEVICES"),
                    sorted(name for name in _device_names() if name.startswith("nvidia"))],
        "versions": {package: _version(package) for package in MEASURED_PACKAGES},
        "python": sys.version,
        "checkpoints": checkpoints,
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _device_names() -> list:
    try:
        return os.listdir("/dev")
    except OSError:
        return []


def cached_plan(preset: str, out) -> dict | None:
    """The stored ``{"plan": ..., "lines": [...]}`` of this key, or None."""
    stored = read_json_object(cache_dir() / PLANS_DIR / f"{plan_key(preset, out)}.json")
    if not stored or not isinstance(stored.get("plan"), dict) or not isinstance(stored.get("lines"), list):
        return None
    return stored


def store_plan(preset: str, out, plan: dict, lines: list) -> None:
    """Keep ``plan`` and its printed ``lines`` for the next identical call (a cache that cannot be written is
    skipped: the plan was computed anyway)."""
    folder = cache_dir() / PLANS_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / f"{plan_key(preset, out)}.json", {"plan": plan, "lines": lines})
    except OSError:
        return


def write_plan_file(out, plan: dict, lines: list, log: Callable) -> dict:
    """Write ``OUT/plan.json`` and log the plan's ``lines``; returns the plan."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / PLAN_FILE, plan)
    for line in lines:
        log(line)
    log(f"wrote {out / PLAN_FILE}")
    return plan


def write_cached_plan(out, preset: str, *, log: Callable | None = None) -> dict | None:
    """``reproduce --plan`` answered from the cache (same preset, folder, code and machine), loading no torch;
    None when there is no such plan yet (then :func:`hf_treelang.reproduce.plan.write_plan` computes it)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        return None  # write_plan says what is wrong
    stored = cached_plan(preset, out)
    if stored is None:
        return None
    note = f"(the plan and this machine's measured speeds come from the cache in {cache_dir()})"
    return write_plan_file(out, stored["plan"], [*stored["lines"], note], log or (lambda line: None))
