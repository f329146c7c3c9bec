"""Whether other work shares this machine's CPU cores with a run: measured, in a fraction of a second.

On a few shared cores a small model's step is bound by waiting: torch's threads wait for each other at every
operation, and a thread the system lends to another process stalls the rest, so two threads beside a busy process
can take many times longer per step than one. :func:`cpu_share` times a short matrix product on the run's threads and
returns the CPU time they got over the wall time of as many cores (an idle machine gives close to 1; one busy process
beside two threads on two cores, close to 0.5). Below :data:`BUSY_SHARE` the cores are shared, and
:func:`contention_line` says so at the start of a run, with ``--cpu_threads 1`` where the run has more than one
thread. The sweep's estimate reads the same share from its own measurement (:mod:`hf_treelang.sweep.estimate`).
"""

from __future__ import annotations

import os
import time

# below this share of its threads' wall time in CPU time, a measurement shared its cores with other work
BUSY_SHARE = 0.8
PROBE_SECONDS = 0.2  # the matrix products of :func:`cpu_share`, about this long
PROBE_SIZE = 256  # n of the n x n float32 products: long enough per call for every thread to take part


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the platform says; else every core)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def share_of(cpu_seconds: float, wall_seconds: float, threads: int) -> float:
    """The CPU time ``cpu_seconds`` a process's ``threads`` got over ``wall_seconds`` of as many cores (at most the
    usable cores: more threads than cores share them anyway)."""
    cores = min(max(int(threads), 1), usable_cores())
    return cpu_seconds / max(wall_seconds * cores, 1e-9)


def cpu_share(threads: int | None = None, seconds: float = PROBE_SECONDS) -> float:
    """The share of ``threads`` cores (default: torch's threads now) that this process gets, from matrix products
    on those threads for about ``seconds``: :func:`share_of` their CPU time and wall time."""
    import torch

    previous = torch.get_num_threads()
    threads = int(threads or previous)
    torch.set_num_threads(threads)
    try:
        generator = torch.Generator().manual_seed(0)
        a = torch.randn(PROBE_SIZE, PROBE_SIZE, generator=generator)  # (n, n)
        b = torch.randn(PROBE_SIZE, PROBE_SIZE, generator=generator)  # (n, n)
        a @ b  # the threads start
        wall, cpu = time.perf_counter(), time.process_time()
        while time.perf_counter() - wall < seconds:
            a @ b
        return share_of(time.process_time() - cpu, time.perf_counter() - wall, threads)
    finally:
        torch.set_num_threads(previous)


def contention_line(share: float, threads: int) -> str | None:
    """What a run says at its start when its ``threads`` got ``share`` of their cores (:func:`cpu_share`): None on
    cores of its own (``share`` >= :data:`BUSY_SHARE`)."""
    if share >= BUSY_SHARE:
        return None
    cores = usable_cores()
    if threads > 1:
        return (f"other work shares this machine's {cores} CPU cores: this run's {threads} torch threads got "
                f"{share:.0%} of them in a short test; --cpu_threads 1 avoids the oversubscription, which can make "
                "each step many times slower")
    return (f"other work shares this machine's {cores} CPU cores: this run's torch thread got {share:.0%} of a core "
            "in a short test, so its steps run slower than on an idle machine")


__all__ = ["BUSY_SHARE", "contention_line", "cpu_share", "share_of", "usable_cores"]
