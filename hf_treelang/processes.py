"""Whether a process that left a record (a run's identity, a staging folder's name) is still running. Standard
library only."""

from __future__ import annotations

import os
import socket


def process_alive(host: str | None, pid) -> bool | None:
    """Whether process ``pid`` of ``host`` runs: True/False on this host, None (unknown) on another."""
    if host != socket.gethostname():
        return None
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, TypeError, ValueError):
        return False
    except PermissionError:
        return True
    return True


def owner_tag() -> str:
    """``<host>-<pid>`` of this process, for names of folders it stages (:func:`stale_owner` reads it back)."""
    return f"{socket.gethostname().replace('-', '_')}-{os.getpid()}"


def stale_owner(tag: str) -> bool:
    """Whether the process of an :func:`owner_tag` is gone (on this host; another host's is never stale here)."""
    host, _, pid = tag.rpartition("-")
    return process_alive(socket.gethostname() if host == socket.gethostname().replace("-", "_") else host,
                         pid) is False
