"""Whether a process that left a record (a run's identity, a staging folder's name) is still running. Standard
library only."""

from __future__ import annotations

import os
import socket
import threading
import time


def process_alive(host: str | None, pid, started: str | None = None) -> bool | None:
    """Whether process ``pid`` of ``host`` runs: True/False on this host, None (unknown) on another.

    ``started`` (:func:`process_start`, recorded when the process left its record): a process that runs under ``pid``
    but started at another time is another process (the pid was reused), so the recorded one is gone.
    """
    if host != socket.gethostname():
        return None
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, TypeError, ValueError, OverflowError):
        return False
    except PermissionError:
        pass
    if started is not None and process_start(int(pid)) not in (None, started):
        return False
    return not _zombie(int(pid))


def process_start(pid: int | None = None) -> str | None:
    """When process ``pid`` (default: this one) started, as a token that tells two processes of one pid apart: the
    start time in clock ticks after boot (``/proc/<pid>/stat``, field 22) with the boot's id; None where the platform
    has no ``/proc``."""
    pid = os.getpid() if pid is None else int(pid)
    try:
        with open(f"/proc/{pid}/stat") as handle:
            ticks = handle.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            boot = handle.read().strip()
    except OSError:
        boot = ""
    return f"{boot}:{ticks}"


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited but was not reaped yet (Linux: a killed driver's worker, reparented to an init that
    does not reap, stays a zombie); elsewhere False."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def owner_tag() -> str:
    """``<host>-<pid>`` of this process, for names of folders it stages (:func:`stale_owner` reads it back)."""
    return f"{socket.gethostname().replace('-', '_')}-{os.getpid()}"


def stale_owner(tag: str) -> bool:
    """Whether the process of an :func:`owner_tag` is gone (on this host; another host's is never stale here)."""
    host, _, pid = tag.rpartition("-")
    return process_alive(socket.gethostname() if host == socket.gethostname().replace("-", "_") else host,
                         pid) is False


def exit_with_parent(parent_pid: int, interval_s: float = 0.5) -> None:
    """Make this process exit as soon as process ``parent_pid`` (its parent) is gone: a daemon thread checks the
    parent every ``interval_s``. A worker whose driver was killed stops training at once, and its run folder is left
    as an interrupted run that the next sweep resumes, instead of a worker training on with nobody to report to and
    then blocking on a pipe that nobody reads. The initializer of the sweep's worker processes."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        os._exit(1)  # the parent is gone: nothing of this process's work can be reported any more

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
