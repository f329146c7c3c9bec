"""How long a reproduction took, and on what: ``OUT/timing.json`` (one record per call of ``reproduce``).

A reproduction may take several calls (an interrupted one resumes, a rerun skips finished steps): each call appends
its wall time, how it ended, the digest of its preset's values, the steps it ran and the runs it trained (an
interrupted call too). The report's ``findings.json`` carries their total as ``wall_time_s`` (every call in OUT,
and apart the calls made with the preset's present values), the main root run's own training time as
``root_run_s`` (a yardstick of the machine: the same run on another machine scales the whole preset's time) and the
machine. Standard library only.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import platform
import signal
import threading
from pathlib import Path

from hf_treelang.jsonio import read_json_object, write_json_atomic

from .plan_cache import cpu_model

TIMING_FILE = "timing.json"
ROOT_RUN = "runs/root/metrics.json"  # the main root run's summary: its train_runtime_s


def machine() -> dict:
    """The machine a reproduction ran on: CPU model, cores, platform, and the GPU where torch sees one."""
    description = {"cpu": cpu_model(), "cores": os.cpu_count(), "platform": platform.platform()}
    try:
        import torch

        if torch.cuda.is_available():
            description["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return description


def preset_digest(preset: dict) -> str:
    """sha256 of a preset's values (``dataclasses.asdict``): the calls of one reproduction share it."""
    return hashlib.sha256(json.dumps(preset, sort_keys=True, default=str).encode()).hexdigest()


def record_call(out, seconds: float, *, preset: dict, status: str, steps_ran: list, trained_runs: int) -> dict:
    """Append one call of ``reproduce`` to ``OUT/timing.json`` (``status``: ``"finished"``, or how it ended);
    returns the file's content."""
    path = Path(out) / TIMING_FILE
    record = read_json_object(path) or {}
    calls = list(record.get("calls") or [])
    calls.append({"finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "seconds": float(seconds), "status": status, "preset": preset_digest(preset),
                  "steps_ran": list(steps_ran), "trained_runs": int(trained_runs), "machine": machine()})
    record = {"calls": calls}
    write_json_atomic(path, record, indent=2)
    return record


class Terminated(KeyboardInterrupt):
    """A SIGTERM (``kill``, a job scheduler, a closing terminal) received by ``reproduce``: handled as Ctrl-C is, so
    the call is recorded and the workers are stopped; a job started in the background ignores Ctrl-C."""


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Within the block, a SIGTERM raises :class:`Terminated` in the main thread instead of ending the process
    without running ``finally`` blocks; elsewhere than in the main thread, the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise Terminated("SIGTERM")

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def timing_summary(out, preset: dict | None = None) -> dict:
    """``wall_time_s`` (the wall times of every call recorded in ``out``, summed: a call reuses the finished runs of
    the calls before it, whatever the preset's values were then, so their time is part of the result; the time of
    runs that changed values made train again is counted too, an upper bound), ``calls`` (how many), with
    ``preset``: ``wall_time_s_these_values`` and ``calls_these_values`` (the calls made with exactly these values),
    ``root_run_s`` (the main root run's training time, ``runs/root``: one thread, beside the preset's other runs when
    it trains them side by side) and ``machine`` (the last call's); empty when no call was recorded."""
    calls = (read_json_object(Path(out) / TIMING_FILE) or {}).get("calls") or []
    if not calls:
        return {}
    root = read_json_object(Path(out) / ROOT_RUN) or {}

    def seconds(some: list) -> float:
        return sum(float(call.get("seconds", 0.0)) for call in some)

    summary = {"wall_time_s": seconds(calls), "calls": len(calls)}
    if preset is not None:
        digest = preset_digest(preset)
        same = [call for call in calls if call.get("preset") == digest]
        summary.update(wall_time_s_these_values=seconds(same), calls_these_values=len(same))
    return {**summary, "root_run_s": root.get("train_runtime_s"), "machine": calls[-1].get("machine")}


__all__ = ["TIMING_FILE", "Terminated", "machine", "record_call", "sigterm_as_interrupt", "timing_summary"]
