"""One writer per folder: the claim a process holds on a run folder, a sweep folder or a reproduction folder.

A process claims a folder before it writes into it (:func:`claim_folder`): it creates ``<folder>/.owner.json``
(:data:`CLAIM_FILE`) atomically — written beside it, then hard-linked into place, which fails when the file exists, so
of two processes exactly one succeeds, on a local disk as on NFS — naming its host, pid and start time (like the
sweep's "being trained by process N" record). Another process that finds the claim is refused in one line naming the
owner (:class:`FolderTaken`, a ``ValueError``: the command-line tools exit with status 2). The claim is removed when
the owner is done, also when it fails; a folder the claim created and that stayed empty goes with it. Claims nest
within one process (a reproduction claims its folder, then its sweep engine claims it again).

A claim whose owner is dead is stale and is taken over (:func:`owner` decides; the stale file is removed under a
short-lived guard, ``.owner.json.takeover``, so that of two processes taking it over one wins):

* **on the same host** the owner is dead when its pid runs no process, or runs one that started at another time (the
  pid was reused: :func:`hf_treelang.processes.process_start`); this is decided at once;
* **on another host** (a file system shared by SLURM nodes) its pid says nothing here. The owner refreshes the claim's
  modification time every :data:`HEARTBEAT_S` seconds (a daemon thread), and a claim not refreshed for
  :data:`STALE_AFTER_S` seconds is stale. So a job killed on another node (``scancel``, a node failure) frees its
  folder after at most that long; the nodes' clocks must agree to well within it; an owner stopped for longer (a
  suspended job) loses its claim.

The processes of one data-parallel job (``torchrun``, ``accelerate launch``: ``RANK`` set) write one folder
together: its rank 0 claims it for all of them (:func:`leads`), the other ranks neither claim nor check.

Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import threading
import time
from pathlib import Path

from hf_treelang.jsonio import dumps, read_json_object
from hf_treelang.processes import process_alive, process_start

CLAIM_FILE = ".owner.json"
TAKEOVER_SUFFIX = ".takeover"  # the guard held while a stale claim is removed
HEARTBEAT_S = 60.0  # an owner refreshes its claim's modification time this often
STALE_AFTER_S = 600.0  # a claim of another host not refreshed for this long is stale (ten heartbeats)
GUARD_STALE_S = 60.0  # a takeover guard is held for milliseconds: one older than this was left by a killed process
UNREADABLE_STALE_S = 5.0  # a claim is written whole in milliseconds: one still unreadable after this is garbage

_held: dict = {}  # resolved folder -> nesting depth of the claims this process holds
_lock = threading.Lock()


def is_claim_file(name: str) -> bool:
    """Whether ``name`` is the claim, its takeover guard or a claim being written: left out of a folder's listing."""
    return name.startswith(CLAIM_FILE)


class FolderTaken(ValueError):
    """Another process owns the folder, or wrote into it after this process checked it: one line naming it."""


def leads() -> bool:
    """Whether this process claims folders for its job: True but in ranks > 0 of a ``torch.distributed`` job
    (``RANK``), whose folders rank 0 owns."""
    rank = os.environ.get("RANK", "0")
    return not (rank.isdigit() and int(rank) > 0)


def claim_record(pid: int | None = None) -> dict:
    """What a claim names: this host, ``pid`` (default: this process), its start time and the time of the claim."""
    pid = os.getpid() if pid is None else int(pid)
    return {"host": socket.gethostname(), "pid": pid, "started": process_start(pid), "claimed_at": time.time()}


def owner(folder) -> dict | None:
    """The claim on ``folder`` of another live process (its record, ``age_s`` added), or None: unclaimed, claimed by
    this process, or stale (see the module docstring)."""
    path = Path(folder) / CLAIM_FILE
    record, age = _read(path)
    if record is None and age is None:
        return None
    if record is not None and _ours(record):
        return None
    return None if _stale(record, age) else {**(record or {}), "age_s": age}


def describe(record: dict) -> str:
    """``process 123 on node7 (claimed 2026-11-26 15:20:51)``."""
    when = record.get("claimed_at")
    stamp = time.strftime(" (claimed %Y-%m-%d %H:%M:%S)", time.localtime(when)) if isinstance(when, (int, float)) \
        else ""
    return f"process {record.get('pid', '?')} on {record.get('host', '?')}{stamp}"


def check_unclaimed(folder, name: str) -> None:
    """Raise :class:`FolderTaken` naming the owner when another live process holds ``folder``; creates nothing."""
    found = owner(folder) if leads() else None
    if found is not None:
        raise FolderTaken(_taken_message(folder, name, found))


@contextlib.contextmanager
def claim_folder(folder, name: str):
    """Hold ``folder`` (created if missing) for this process for the duration; :class:`FolderTaken` naming the owner
    when another live process holds it. ``name`` is the parameter that gave the folder (``output_dir``, ``OUT``)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"`{name}` {str(folder)!r} exists and is not a folder")
    if not leads():  # a rank > 0 of a data-parallel job: rank 0 holds the folder for the job
        yield folder
        return
    key = str(folder.resolve())
    with _lock:
        nested = key in _held
        _held[key] = _held.get(key, 0) + 1
    if nested:
        try:
            yield folder
        finally:
            with _lock:
                _held[key] -= 1
        return
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    try:
        _acquire(folder, name)
        threading.Thread(target=_heartbeat, args=(folder / CLAIM_FILE, stop), name="folder-claim-heartbeat",
                         daemon=True).start()
        yield folder
    finally:
        with _lock:
            del _held[key]
        stop.set()
        _release(folder / CLAIM_FILE)
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty: a claim that wrote nothing leaves nothing


def _acquire(folder: Path, name: str, attempts: int = 5) -> None:
    path = folder / CLAIM_FILE
    for _ in range(attempts):
        if _create(path):
            return
        record, age, raw = _read_with_bytes(path)
        if record is None and age is None:
            continue  # released meanwhile
        if record is not None and _ours(record):
            return  # already this process's
        if not _stale(record, age):
            raise FolderTaken(_taken_message(folder, name, {**(record or {}), "age_s": age}))
        _take_over(path, raw)
    raise FolderTaken(f"`{name}` {str(folder)!r}: could not claim it ({CLAIM_FILE} keeps changing: another process "
                      "is claiming it at the same time); try again")


def _create(path: Path) -> bool:
    """Create the claim file with this process's record, atomically; False when it exists."""
    temporary = path.with_name(f"{path.name}.{socket.gethostname()}-{os.getpid()}-{threading.get_ident()}.new")
    temporary.write_text(dumps(claim_record()))
    try:
        os.link(temporary, path)  # atomic, and fails when the claim exists (also over NFS)
        return True
    except FileExistsError:
        return False
    except OSError as error:  # a file system without hard links: O_EXCL, then the record
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        try:
            handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(handle, "w") as stream:
            stream.write(temporary.read_text())
        return True
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink()


def _read(path: Path) -> tuple:
    """(the claim's record or None when unreadable or not a claim's record, its age in seconds by modification
    time); (None, None) when there is no claim. A claim that is a folder is refused in one line (nobody's claim can
    be one, and removing a folder is not the claim's business)."""
    record, age, _ = _read_with_bytes(path)
    return record, age


def _read_with_bytes(path: Path) -> tuple:
    """:func:`_read` and the bytes the record was read from (None when there is no claim)."""
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None, None, None
    if path.is_dir():
        raise FolderTaken(f"{str(path)!r} is a folder, not a claim: remove it (it is no process's claim) and run "
                          "again")
    raw = _content(path)
    if raw is None:
        return None, None, None
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        record = None
    return (record if _valid(record) else None), age, raw


def _valid(record) -> bool:
    """Whether a claim's record names a process: a host and a pid > 1 (0, -1 and 1, which os.kill takes for the
    process group, every process and init, name no owner)."""
    if not isinstance(record, dict) or not isinstance(record.get("host"), str):
        return False
    pid = record.get("pid")
    return isinstance(pid, int) and not isinstance(pid, bool) and pid > 1


def _ours(record: dict) -> bool:
    return (record.get("host") == socket.gethostname() and record.get("pid") == os.getpid()
            and record.get("started") == process_start())


def _stale(record: dict | None, age: float) -> bool:
    """Whether a claim's owner is dead: by its pid and start time on this host, by its heartbeat on another."""
    if record is None:  # unreadable or no process named: garbage once it has had time to be written whole
        return age > UNREADABLE_STALE_S
    alive = process_alive(record.get("host"), record.get("pid"), record.get("started"))
    if alive and record.get("started") is None and process_start() is not None:
        alive = None  # this host tells processes apart by start time; a claim without one cannot be checked
    return alive is False or (alive is None and age > STALE_AFTER_S)


def _content(path: Path) -> bytes | None:
    """The claim file's bytes (None: gone), what a takeover compares to know it removes the claim it judged."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _take_over(path: Path, stale: bytes | None) -> None:
    """Remove the stale claim whose bytes are ``stale`` unless another process replaced it meanwhile (under the
    takeover guard)."""
    guard = path.with_name(path.name + TAKEOVER_SUFFIX)
    try:
        os.close(os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        with contextlib.suppress(OSError):
            if time.time() - guard.stat().st_mtime > GUARD_STALE_S:
                guard.unlink()  # left by a process killed while taking over
        time.sleep(0.05)
        return
    try:
        if stale is not None and _content(path) == stale:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    finally:
        with contextlib.suppress(OSError):
            guard.unlink()


def _heartbeat(path: Path, stop: threading.Event) -> None:
    """Refresh the claim's modification time every :data:`HEARTBEAT_S` until ``stop`` (another host's view of
    whether the owner lives)."""
    while not stop.wait(HEARTBEAT_S):
        try:
            os.utime(path)
        except OSError:
            return


def _release(path: Path) -> None:
    record = read_json_object(path)
    if record is not None and _ours(record):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _taken_message(folder, name: str, record: dict) -> str:
    if not _valid({key: value for key, value in record.items() if key != "age_s"}):
        return (f"`{name}` {str(folder)!r} holds an unreadable claim ({Path(folder) / CLAIM_FILE}, written "
                f"{record.get('age_s', 0):.0f} s ago, names no process): it is taken over once it is "
                f"{UNREADABLE_STALE_S:g} s old; run again")
    other_host = record.get("host") not in (None, socket.gethostname())
    unchecked = not other_host and record.get("started") is None and process_start() is not None
    rule = (f"it counts as gone once its claim goes {STALE_AFTER_S / 60:g} minutes without a heartbeat"
            if other_host or unchecked else "a claim of a dead process is taken over at once")
    return (f"`{name}` {str(folder)!r} is in use by {describe(record)}: one writer per folder; wait for it to finish, "
            f"stop it, or choose another folder ({rule}; {Path(folder) / CLAIM_FILE} names the owner)")


__all__ = ["CLAIM_FILE", "FolderTaken", "HEARTBEAT_S", "STALE_AFTER_S", "check_unclaimed", "claim_folder",
           "claim_record", "describe", "is_claim_file", "leads", "owner"]
