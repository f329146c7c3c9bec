"""The folders of training: where a run may write, what it may start or resume from, and when it is complete.

Three kinds of folder, told apart by the files in them:

* a **model folder** (``save_pretrained``, ``hf-treelang convert``, a Trainer ``checkpoint-N``): ``config.json``
  (``model_type`` ``"treelang"``) and the weights. :func:`read_model_config` checks one without loading it.
* a **resumable checkpoint** (``checkpoint-N``): a model folder plus every file a byte-identical resume reads
  (:data:`RESUME_FILES`); the Trainer writes ``trainer_state.json`` last, so a checkpoint killed while saving lacks it.
  :func:`check_resume_checkpoint` names what a folder lacks.
* a **run folder** (the ``output_dir`` of :func:`hf_treelang.train.loop.train`): ``run_config.json``
  (:data:`RUN_CONFIG`) is written first, once the inputs are checked and the data built, and ``run_complete.json``
  (:data:`RUN_COMPLETE`) last, atomically (written to a temporary file, then ``os.replace``), listing every file the
  run wrote. A folder with ``run_config.json`` and no ``run_complete.json`` is a run that was interrupted (or is still
  running): :func:`check_run_complete` refuses it and says what is missing, :func:`completed_run` reads the marker of
  a complete one. A model folder has no ``run_config.json``, so it loads as it is. ``run_complete.json`` is the one
  completion marker. A run trained with ``reuse`` (sweeps, ``reproduce``) also records its identity
  (``run_identity.json``, :data:`IDENTITY_FILE`, written before training, so the marker lists it):
  :func:`folder_state` compares a folder with a run's identity, :func:`finished_run` reads a finished one's summary.

A second run into a non-empty ``output_dir`` would mix its files with the first run's (old ``checkpoint-N`` folders
next to new ones): :func:`check_output_dir_free` refuses it unless the run resumes (``--resume_from_checkpoint``) or
replaces the previous run (``--overwrite_output_dir``, which :func:`clear_previous_run` implements: the previous run's
files go, anything else in the folder stays).

A file damaged after it was written (a copy cut short, a checkpoint's save killed half-way, a disk error) is named
before anything loads it (:class:`DamagedFile`, with what to do: resume from an earlier checkpoint, or train again):
:func:`check_run_complete` compares every file the package reads back that a complete run folder's marker lists
with the size recorded there (and the weights with their recorded sha256), and a ``checkpoint-N`` of the run with
what the marker lists of it when an analysis loads the checkpoint; :func:`check_resume_checkpoint` and
:func:`read_model_config` check each file's own format (:func:`file_damage`: JSON that parses, a safetensors file as
long as its header says, a torch archive with its end).

One process writes into a folder at a time: :func:`hf_treelang.train.loop.train` claims a run folder for the run's
duration (:mod:`hf_treelang.claims`: ``.owner.json`` naming the owner's host, pid and start time); the checks here
refuse a folder another live process holds, naming it, and leave the claim out of a folder's listing.

Every check here runs before any work, raises a ``ValueError`` naming the parameter, the value and what is allowed,
and creates nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import shutil
import struct
import tempfile
import socket
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from hf_treelang.claims import check_unclaimed, is_claim_file, owner
from hf_treelang.jsonio import TEMPORARY_SUFFIX, read_json_object, write_json_atomic

RUN_CONFIG = "run_config.json"  # written first: the folder is a run folder
RUN_COMPLETE = "run_complete.json"  # written last: the run folder is complete
IDENTITY_FILE = "run_identity.json"  # identity, arguments and the training process, written before training
ENSEMBLE_FILE = "ensemble.json"  # in a stacked ensemble's folder and in each of its checkpoints: the members
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
# a finished run's top-level files (beyond the marker): what an incomplete folder is reported to lack
RUN_FILES = ("config.json", "model.safetensors", "trainer_state.json", "grammar.json", RUN_CONFIG, "metrics.json",
             "eval_history.json", "README.md")
# what a byte-identical resume reads (besides config.json and the weights): the Trainer's state, optimiser, schedule
# and random generators (rng_state.pth, or rng_state_<rank>.pth per process of a data-parallel run)
RESUME_FILES = ("trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state.pth")
# what a run writes at the top of its output_dir, removed by --overwrite_output_dir (with the previous marker's list)
RUN_WRITES = RUN_FILES + (RUN_COMPLETE, "training_args.bin", "curves.png", "kl_curves.png",
                          "model.safetensors.index.json", "pytorch_model.bin", "eval_history.json.tmp")
RUN_WRITE_FOLDERS = ("tensorboard",)
# what a run has written before its Trainer starts: a folder holding only these is a run stopped before it trained
# (a logger that failed to start, an interrupt while the data were built), started again without --overwrite_output_dir
RUN_START_FILES = (RUN_CONFIG, IDENTITY_FILE)
CHECKPOINT_PREFIX = "checkpoint-"
# task -> the head class a model folder of that task is saved with (config.json's "architectures")
TASK_ARCHITECTURES = {"mlm": "TreeLangForMaskedLM", "root": "TreeLangForSequenceClassification",
                      "clm": "TreeLangForCausalLM"}

MODEL_FOLDER = "a TreeLang checkpoint folder written by save_pretrained (config.json with model_type 'treelang' + weights)"


# ---------------------------------------------------------------- where a run may write


def check_output_folder(name: str, path) -> Path:
    """``path`` as a folder that can be created or written into: not a file, not under a file, writable.

    Writable is tried, not read from the permission bits (which say yes to root under ``/proc`` or on a read-only
    mount): an empty folder is made in the nearest existing ancestor and removed at once; nothing else is created.
    Raises a ValueError naming ``name`` otherwise.
    """
    if path is None or str(path) == "":
        raise ValueError(f"`{name}` must be a folder path, got {path!r}")
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"`{name}` must be a folder (existing or to create), got {str(folder)!r}, which is a file")
    existing = folder
    while not existing.exists():  # the nearest existing ancestor decides whether the folder can be created
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing != folder and not existing.is_dir():
        raise ValueError(f"`{name}` must be a folder path, got {str(folder)!r}: {str(existing)!r} is a file")
    if not os.access(existing, os.W_OK | os.X_OK) or not _can_create_in(existing):
        raise ValueError(f"`{name}` must be a folder this process can write, got {str(folder)!r}: "
                         f"{str(existing)!r} is not writable")
    return folder


def _can_create_in(folder: Path) -> bool:
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".hf-treelang-write-test-", dir=folder))
    except OSError:
        return False
    return True


@contextlib.contextmanager
def disk_full_named(output_dir, model) -> None:
    """A full disk while a run writes (a checkpoint, the final model) becomes one ``OSError`` saying how much one
    checkpoint of ``model`` takes and how much is free, instead of a traceback from deep inside ``torch.save``."""
    try:
        yield
    except Exception as error:
        if not is_disk_full(error):
            raise
        parameters = sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())
        folder = Path(output_dir)
        existing = next((path for path in (folder, *folder.parents) if path.exists()), Path("/"))
        free = shutil.disk_usage(existing).free
        raise OSError(errno.ENOSPC, f"output_dir: no space left on the disk of {str(folder)!r}: a checkpoint of this "
                      f"model takes about {_mebibytes(3 * parameters)} (the weights and the optimiser's two moments), "
                      f"{_mebibytes(free)} are free there; free some space, or keep fewer checkpoints "
                      "(--num_checkpoints, --save_total_limit)") from None


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` reports a full disk: ``OSError`` ``ENOSPC``, or a library's own error carrying it (safetensors
    raises ``SafetensorError: ... No space left on device (os error 28)``)."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return True
    return f"(os error {errno.ENOSPC})" in str(error) or os.strerror(errno.ENOSPC) in str(error)


def _mebibytes(size: float) -> str:
    return f"{size / 2**20:.1f} MiB"


def _entries(folder: Path) -> list:
    """The names in ``folder`` but its owner's claim (:mod:`hf_treelang.claims`)."""
    return sorted(entry.name for entry in folder.iterdir() if not is_claim_file(entry.name)) if folder.is_dir() else []


def empty_folder(folder) -> None:
    """Remove everything in ``folder`` but the claim of the process that owns it (a run trained again from scratch)."""
    for entry in Path(folder).iterdir():
        if is_claim_file(entry.name):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _shown(names: list, limit: int = 6) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_output_dir_free(output_dir, *, overwrite: bool, resume) -> None:
    """Refuse a non-empty ``output_dir`` unless the run resumes from a checkpoint or overwrites the previous run (a
    folder holding only what a run writes before it trains, :data:`RUN_START_FILES`, is free: that run is started
    again); and refuse resuming into a folder that holds another complete run (``resume``: the checkpoint, or a
    bool); and refuse a folder another live process owns, naming it (:class:`hf_treelang.claims.FolderTaken`)."""
    folder = Path(output_dir)
    check_unclaimed(folder, "output_dir")
    entries = _entries(folder)
    if resume not in (None, False, True) and (folder / RUN_COMPLETE).is_file() and not overwrite:
        inside = Path(resume).resolve().is_relative_to(folder.resolve())
        if not inside:
            raise ValueError(
                f"`output_dir` {str(folder)!r} holds a complete run and `resume_from_checkpoint` {str(resume)!r} is "
                "not one of its checkpoints: resuming would overwrite that run; choose another --output_dir")
    if entries and not (overwrite or resume) and not set(entries) <= set(RUN_START_FILES):
        saved = last_checkpoint(folder)
        resume_hint = (f", --resume_from_checkpoint {str(saved)!r} to continue it" if saved is not None else
                       " (it holds no checkpoint to resume from)" if is_run_folder(folder) else "")
        raise ValueError(
            f"`output_dir` {str(folder)!r} is not empty ({_shown(entries)}): a new run would mix its files with "
            f"those; pass --overwrite_output_dir true to replace the previous run's files{resume_hint}, or another "
            "--output_dir"
        )


def clear_previous_run(output_dir) -> list:
    """Remove what the previous run wrote into ``output_dir`` (``--overwrite_output_dir``); returns the removed paths.

    The previous run's files are those written since it started (``run_config.json``, or a stacked ensemble's
    ``ensemble.json``, written first, dates the start): the files its ``run_complete.json`` lists, or, for a run cut
    short, the files under the names a run writes (:data:`RUN_WRITES`, :data:`RUN_WRITE_FOLDERS`, ``checkpoint-*``).
    A file older than the run (the user's, another run's checkpoint) or added after it completed (not listed) stays,
    and so does a folder that still holds one.
    """
    folder = Path(output_dir)
    config = folder / RUN_CONFIG if (folder / RUN_CONFIG).is_file() else folder / ENSEMBLE_FILE
    if not folder.is_dir() or not config.is_file():
        return []  # not a run's (or a stacked ensemble's) folder: nothing of a run's to remove
    start = config.stat().st_mtime
    marker = read_json_object(folder / RUN_COMPLETE)
    if marker is not None and isinstance(marker.get("files"), dict):
        candidates = [folder / name for name in marker["files"]] + [folder / RUN_COMPLETE]
    else:
        candidates = []
        for entry in folder.iterdir():
            ours = (entry.name in RUN_WRITES or entry.name in RUN_WRITE_FOLDERS
                    or (entry.is_dir() and entry.name.startswith(CHECKPOINT_PREFIX)))
            if ours:
                candidates += [p for p in entry.rglob("*") if p.is_file()] if entry.is_dir() else [entry]
    removed = []
    for path in candidates:
        if path.is_file() and not path.is_symlink() and (path.stat().st_mtime >= start or path == config):
            path.unlink()
            removed.append(path.relative_to(folder).as_posix())
    for path in sorted({p.parent for p in candidates}, key=lambda p: len(p.parts), reverse=True):
        while path != folder and path.is_dir() and not any(path.iterdir()):
            path.rmdir()  # the folders the run's files were in, once empty
            path = path.parent
    return removed


# ---------------------------------------------------------------- what a run starts or resumes from


# the files the package reads back, by suffix: their sizes and formats are checked before a load (README.md and the
# figures are for people, who may edit or redraw them)
READ_BACK_SUFFIXES = (".json", ".safetensors", ".bin", ".pt", ".pth")
ZIP_MAGIC = b"PK\x03\x04"  # torch.save's archive format (since torch 1.6)
PICKLE_PROTOCOL = b"\x80"  # the first byte of a pickle of protocol 2+: torch.save's legacy format


def _all_zero(path: Path) -> bool:
    with open(path, "rb") as handle:
        return all(not any(chunk) for chunk in iter(lambda: handle.read(1 << 20), b""))


class DamagedFile(ValueError):
    """A file of a run folder or a checkpoint is damaged: one line naming it and what to do."""


def file_damage(path, recorded_size: int | None = None) -> str | None:
    """What is wrong with a file that a run or a checkpoint holds, or None when nothing is seen.

    Checked without loading: the size ``recorded_size`` (``run_complete.json``'s), then the format — a ``.json``
    file parses; a ``.safetensors`` file is exactly as long as its header says (8 bytes of header length, the
    header, then the tensors' bytes up to the largest end offset); a ``.pt`` / ``.pth`` / ``.bin`` file is a torch
    archive (a zip) that still has its central directory, which is written last, so a truncated one lacks it, or a
    legacy pickle; anything else (a file zero-filled at its size, as a power loss leaves one) is damaged.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError:
        return "missing"
    if recorded_size is not None and size != recorded_size:
        return f"{size} bytes where {RUN_COMPLETE} recorded {recorded_size}: cut short or rewritten"
    try:
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".safetensors":
            return _safetensors_damage(path, size)
        elif path.suffix in (".pt", ".pth", ".bin"):
            with open(path, "rb") as handle:
                head = handle.read(4)
                if head == ZIP_MAGIC:
                    with zipfile.ZipFile(handle):
                        pass
                elif head[:1] != PICKLE_PROTOCOL:  # neither torch's archive nor a legacy pickle (zero-filled...)
                    what = "all zero bytes" if size and _all_zero(path) else f"starts with {head!r}"
                    return f"{size} bytes, not a torch archive ({what}): overwritten or never written out"
    except (ValueError, UnicodeDecodeError) as error:
        return f"not valid JSON: {error}"
    except zipfile.BadZipFile:
        return f"{size} bytes, an incomplete torch archive: cut short"
    except OSError as error:
        return f"unreadable: {error.strerror or error}"
    return None


def _safetensors_damage(path: Path, size: int) -> str | None:
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            return f"{size} bytes, shorter than a safetensors header: cut short"
        (length,) = struct.unpack("<Q", prefix)
        if 8 + length > size:
            return f"{size} bytes, shorter than its own header ({8 + length} bytes): cut short"
        try:
            header = json.loads(handle.read(length))
            end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"),
                      default=0)
        except (ValueError, UnicodeDecodeError, TypeError, KeyError, IndexError):
            return "its safetensors header is not valid"
    if 8 + length + end != size:
        return f"{size} bytes where its header describes {8 + length + end}: " + (
            "cut short" if size < 8 + length + end else "bytes appended")
    return None


def _weights_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _checkpoint_problem(folder: Path, stacked: bool = False) -> str | None:
    """What keeps a ``checkpoint-N`` folder from resuming (files it lacks, or a damaged one), or None; ``stacked``: a
    stacked ensemble's checkpoint, whose record is ``ensemble.json`` in place of a model's ``config.json``."""
    missing = [f for f in (ENSEMBLE_FILE if stacked else "config.json",) if not (folder / f).is_file()]
    if not any((folder / weights).is_file() for weights in WEIGHT_FILES):
        missing.append(f"weights ({' or '.join(WEIGHT_FILES)})")
    for required in RESUME_FILES:
        if required == "rng_state.pth":
            if not (folder / required).is_file() and not any(folder.glob("rng_state_*.pth")):
                missing.append(required)
        elif not (folder / required).is_file():
            missing.append(required)
    if missing:
        return f"is incomplete (a save interrupted?): it lacks {', '.join(missing)}"
    for path in sorted(folder.iterdir()):
        damage = file_damage(path) if path.is_file() and path.suffix in READ_BACK_SUFFIXES else None
        if damage is not None:
            return f"is damaged: {path.name} is {damage}"
    return None


def _earlier_checkpoint(run_folder: Path, before: int | None = None) -> Path | None:
    """The resumable ``checkpoint-<step>`` of ``run_folder`` of the highest step (below ``before``), or None."""
    for step, path in reversed(checkpoints(run_folder)):
        if (before is None or step < before) and _checkpoint_problem(path) is None:
            return path
    return None


def repair_advice(folder) -> str:
    """What to do about a damaged or missing file of ``folder``: resume from the latest intact checkpoint (of a run
    folder; of the run a ``checkpoint-N`` belongs to, an earlier one), or train again. A damaged checkpoint of a
    finished run needs no resume: the advice says so, and how to remove it (the run stays finished without it)."""
    folder = Path(folder)
    step = folder.name[len(CHECKPOINT_PREFIX):]
    if folder.name.startswith(CHECKPOINT_PREFIX) and step.isdigit():
        run = folder.parent
        earlier = _earlier_checkpoint(run, before=int(step))
        resume = None if earlier is None else f"--resume_from_checkpoint {str(earlier)!r}"
        if completed_run(run) is not None:
            return (f"its run {str(run)!r} is finished and its final model intact, so nothing needs resuming: "
                    f"remove the damaged checkpoint (rm -r {str(folder)!r}; or hf-treelang prune {str(run)!r}, which "
                    "removes every checkpoint) or restore it from a copy; the run stays finished without it, and an "
                    "analysis of the run's checkpoints (hf-treelang attention --template) reads the others"
                    + ("" if resume is None else f"; to train again from an earlier step, {resume}"))
        if resume is not None:
            return f"resume from an earlier checkpoint: {resume}"
        return "no earlier checkpoint of this run is intact: train it again with --overwrite_output_dir true"
    if is_run_folder(folder):
        latest = _earlier_checkpoint(folder)
        if latest is not None:
            return f"resume it with --resume_from_checkpoint {str(latest)!r}"
        return "train it again with --overwrite_output_dir true"
    return "save or copy the model again (save_pretrained, hf-treelang convert)"



def read_model_config(name: str, path, model_type: str = "treelang") -> tuple[Path, dict]:
    """Check that ``path`` is a model folder of ``model_type`` (default: a TreeLang model) without loading it;
    returns (folder, config.json as a dict).

    The errors name ``name`` (the parameter that gave the folder) and say what the folder lacks.
    """
    if path is None or str(path) == "":
        raise ValueError(f"`{name}` must be {MODEL_FOLDER}, got {path!r}")
    folder = Path(path)
    if not folder.exists():
        raise ValueError(f"`{name}` {str(folder)!r} does not exist; expected {MODEL_FOLDER}")
    if not folder.is_dir():
        raise ValueError(f"`{name}` {str(folder)!r} is a file, not a folder; expected {MODEL_FOLDER}")
    config_file = folder / "config.json"
    if not config_file.is_file():
        contents = "it is empty" if not any(folder.iterdir()) else "it has no config.json"
        raise ValueError(f"`{name}` {str(folder)!r}: {contents}; expected {MODEL_FOLDER}")
    try:
        config = json.loads(config_file.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"`{name}` {str(folder)!r}: config.json is not valid JSON ({error}); expected "
                         f"{MODEL_FOLDER}") from None
    if not isinstance(config, dict):
        raise ValueError(f"`{name}` {str(folder)!r}: config.json holds a {type(config).__name__}, not a JSON "
                         f"object; expected {MODEL_FOLDER}")
    if config.get("model_type") != model_type:
        expected = MODEL_FOLDER if model_type == "treelang" else f"a {model_type} model folder"
        raise ValueError(f"`{name}` {str(folder)!r} has model_type {config.get('model_type')!r}; expected "
                         f"{expected}")
    if not any((folder / weights).is_file() for weights in WEIGHT_FILES):
        raise ValueError(f"`{name}` {str(folder)!r} has a config.json but no weights (expected one of "
                         f"{', '.join(WEIGHT_FILES)}); expected {MODEL_FOLDER}")
    for weights in WEIGHT_FILES:
        damage = file_damage(folder / weights) if (folder / weights).is_file() else None
        if damage is not None:
            raise DamagedFile(f"`{name}` {str(folder)!r}: {weights} is damaged ({damage}); {repair_advice(folder)}")
    return folder, config


def checkpoint_shapes(folder) -> dict | None:
    """``{name: shape}`` of the tensors in a checkpoint's ``model.safetensors``, from its header (nothing is loaded);
    None for a checkpoint without one."""
    path = Path(folder) / "model.safetensors"
    if not path.is_file():
        return None
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    return {name: tuple(entry["shape"]) for name, entry in header.items() if name != "__metadata__"}


def check_checkpoint_fits(model, folder) -> None:
    """Refuse, in one line before any work, a checkpoint whose weights do not fit ``model`` (another architecture or
    size than the run resuming it: other ``--config_overrides``, say): the first tensor missing, unexpected or of
    another shape is named."""
    saved = checkpoint_shapes(folder)
    if saved is None:
        return
    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    tied = {name for name in expected if name not in saved and any(
        expected[name] == shape and name.split(".")[-1] == other.split(".")[-1] for other, shape in saved.items())}
    for name in sorted(expected):
        if name in saved and saved[name] != expected[name]:
            raise ValueError(f"`resume_from_checkpoint` {str(folder)!r} does not fit this run's model: {name} is "
                             f"{list(saved[name])} there and {list(expected[name])} here (another architecture or "
                             f"size: resume with the arguments the checkpoint was trained with)")
    unexpected = sorted(set(saved) - set(expected))
    missing = sorted(set(expected) - set(saved) - tied)
    if unexpected and missing:
        raise ValueError(f"`resume_from_checkpoint` {str(folder)!r} does not fit this run's model: it holds "
                         f"{unexpected[0]} and lacks {missing[0]} (another architecture: resume with the arguments "
                         "the checkpoint was trained with)")


def check_resume_checkpoint(path, model_type: str = "treelang") -> tuple[Path, dict]:
    """Check that ``path`` is a complete Trainer checkpoint (:data:`RESUME_FILES`) of a ``model_type`` model, every
    file intact (:func:`file_damage`); returns (folder, config). A damaged one is refused naming the file and the
    checkpoint to resume from instead (:func:`repair_advice`)."""
    name = "resume_from_checkpoint"
    expected = f"a checkpoint-N folder written by the Trainer (config.json, weights, {', '.join(RESUME_FILES)})"
    folder = Path(path)
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is a file, not a folder"
        raise ValueError(f"`{name}` {str(folder)!r} {what}; expected {expected}")
    if not any(folder.iterdir()):
        raise ValueError(f"`{name}` {str(folder)!r} is empty; expected {expected}")
    problem = _checkpoint_problem(folder)
    if problem is not None:
        raise DamagedFile(f"`{name}` {str(folder)!r} {problem}; {repair_advice(folder)} (expected {expected})")
    return read_model_config(name, folder, model_type)


# ---------------------------------------------------------------- when a run is complete


def _files_under(folder: Path) -> dict:
    """{relative posix path: size in bytes} of every file under ``folder``, but its marker and temporary files."""
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path != folder / RUN_COMPLETE and not path.name.endswith(TEMPORARY_SUFFIX) \
                and not is_claim_file(path.name):
            files[path.relative_to(folder).as_posix()] = path.stat().st_size
    return files


def write_run_complete(output_dir, **summary) -> Path:
    """Write ``run_complete.json`` last, atomically: ``summary``, every file the run folder holds with its size, and
    the sha256 of the weights, the run's and each ``checkpoint-N``'s (``digests``), which :func:`check_run_complete`
    compares before a load."""
    folder = Path(output_dir)
    files = _files_under(folder)
    digests = {relative: _weights_digest(folder / relative) for relative in files
               if Path(relative).name in WEIGHT_FILES and (relative in WEIGHT_FILES or _in_checkpoint(relative))}
    return write_json_atomic(folder / RUN_COMPLETE, {**summary, "files": files, "digests": digests})


def start_run_folder(task: str, data_args, model_args, training_args, command: str | None = None) -> Path:
    """Make ``training_args.output_dir`` the folder of a starting run: the previous run's files removed with
    ``--overwrite_output_dir`` (:func:`clear_previous_run`), its completion marker gone, then ``run_config.json`` (the
    task, every argument and ``command``, the command that trains the run alone) written first: the folder is now a
    run folder, complete once ``run_complete.json`` is."""
    folder = Path(training_args.output_dir)
    if training_args.overwrite_output_dir:
        clear_previous_run(folder)
    folder.mkdir(parents=True, exist_ok=True)
    mark_run_started(folder)
    if training_args.resume_from_checkpoint is not None and (folder / RUN_CONFIG).is_file():
        return folder  # a resumed run keeps its run_config.json, which dates its start (clear_previous_run)
    run_config = {"task": task, "data_args": dataclasses.asdict(data_args), "model_args": dataclasses.asdict(model_args),
                  "training_args": json.loads(training_args.to_json_string())}
    if command is not None:
        run_config["command"] = command
    write_json_atomic(folder / RUN_CONFIG, run_config)
    return folder


def check_prunable(output_dir, name: str = "run") -> Path:
    """Refuse a folder that :func:`prune_checkpoints` must not touch: not a run folder, held by a live process, not
    a complete run (:func:`check_run_complete`), or with a checkpoint it could not remove whole (a symbolic link to a
    folder elsewhere, or a folder this process cannot write), so that a refusal changes nothing. Returns the
    folder."""
    folder = Path(output_dir)
    if not is_run_folder(folder):
        raise ValueError(f"`{name}` {str(folder)!r} is not a training run folder (it has no {RUN_CONFIG})")
    check_unclaimed(folder, name)
    check_run_complete(folder, name)
    for _, path in checkpoints(folder):
        problem = _unremovable(path)
        if problem is not None:
            raise ValueError(f"`{name}` {str(folder)!r}: {path.name} {problem}; nothing was pruned")
    return folder


def _unremovable(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` (a ``checkpoint-N`` entry of a run folder) cannot be removed as the run's own folder, or
    None."""
    if checkpoint.is_symlink():
        return (f"is a symbolic link to {os.readlink(checkpoint)!r}, not a folder of the run: prune removes only the "
                "run's own checkpoint folders; replace the link by the folder it points to, or remove the link")
    for directory in (checkpoint.parent, checkpoint, *(path for path in checkpoint.rglob("*")
                                                       if path.is_dir() and not path.is_symlink())):
        if not os.access(directory, os.W_OK | os.X_OK):
            return f"cannot be removed: {str(directory)!r} is not writable by this process"
    return None


def prune_checkpoints(output_dir, name: str = "run") -> tuple[list, int]:
    """Remove the ``checkpoint-<step>`` folders of a finished run, which a resume and the attention template
    dynamics read: what a shared or published run folder need not carry (they are most of its bytes). The run stays
    complete for every analysis and sweep (the template dynamics then read its final model alone):
    ``run_complete.json`` is rewritten first, listing the files that remain and the checkpoints removed
    (``pruned``), so an interrupted prune leaves a complete folder with a few unlisted files that a second call
    removes. Refuses a folder that is not a complete run (:func:`check_run_complete`) or that a live process holds.

    Returns the names of the checkpoints removed and the bytes they held."""
    folder = check_prunable(output_dir, name)
    found = [path for _, path in checkpoints(folder)]
    if not found:
        return [], 0
    document = read_json_object(folder / RUN_COMPLETE) or {}
    names = [path.name for path in found]
    removed_bytes = sum(f.stat().st_size for path in found for f in path.rglob("*") if f.is_file())
    kept = {relative: size for relative, size in document.get("files", {}).items()
            if relative.split("/", 1)[0] not in names}
    digests = {relative: digest for relative, digest in (document.get("digests") or {}).items()
               if relative.split("/", 1)[0] not in names}
    write_json_atomic(folder / RUN_COMPLETE, {**document, "files": kept, "digests": digests,
                                              "pruned": sorted(set(document.get("pruned") or []) | set(names))})
    for path in found:
        shutil.rmtree(path)
    return names, removed_bytes


def mark_run_started(output_dir) -> None:
    """A run (re)starts in ``output_dir``: a previous ``run_complete.json`` no longer describes the folder."""
    marker = Path(output_dir) / RUN_COMPLETE
    if marker.is_file():
        marker.unlink()


def is_run_folder(path) -> bool:
    """Whether ``path`` is the output folder of a training run (it has ``run_config.json``)."""
    return (Path(path) / RUN_CONFIG).is_file()


def check_run_complete(path, name: str = "run") -> None:
    """Refuse a run folder that is not complete, naming what is missing, and a damaged ``checkpoint-N`` of a finished
    run; any other model folder (no run_config.json) passes.

    A complete run folder has ``run_complete.json`` (written last) and every file it lists, each file the package
    reads back (:data:`READ_BACK_SUFFIXES`) of the size recorded there, in its format, and the weights of the
    recorded sha256 (:func:`file_damage`); a damaged one is :class:`DamagedFile` naming it and what to do
    (:func:`repair_advice`). Every analysis, fine-tuning and runner loads a run through here. The run's
    ``checkpoint-N`` folders are not required of it, so a removed or damaged checkpoint leaves the run finished. A
    ``checkpoint-N`` itself, which analyses read (the template dynamics, or one passed by name), is checked against its
    finished run's record the same way when it loads; a checkpoint the record does not list (of a run still training)
    has its format checked only (:func:`read_model_config`), as a resume's is (:func:`check_resume_checkpoint`).
    """
    folder = Path(path)
    if not is_run_folder(folder):
        if _is_checkpoint_name(folder.name) and is_run_folder(folder.parent) \
                and (folder.parent / RUN_COMPLETE).is_file():
            _check_recorded(folder.parent, name, checkpoint=folder.name)
        return
    marker = folder / RUN_COMPLETE
    if not marker.is_file():
        missing = [RUN_COMPLETE] + [f for f in RUN_FILES if not (folder / f).is_file()]
        raise ValueError(
            f"`{name}` {str(folder)!r} is an incomplete training run: it lacks {', '.join(missing)} (training writes "
            f"{RUN_COMPLETE} last, so the run was interrupted or is still running); {repair_advice(folder)}"
        )
    _check_recorded(folder, name)


def _check_recorded(run: Path, name: str, checkpoint: str | None = None) -> None:
    """Compare the files that the ``run_complete.json`` of the run folder ``run`` lists with that record: the run's
    own (``checkpoint`` None; its checkpoints' are left out), or those of its ``checkpoint-N`` folder named
    ``checkpoint``. The errors name that folder and the file in it."""
    folder = run if checkpoint is None else run / checkpoint
    try:
        document = json.loads((run / RUN_COMPLETE).read_text())
        listed, digests = document.get("files", {}), document.get("digests") or {}
        sizes = {str(f): (None if isinstance(size, bool) or not isinstance(size, int) else size)
                 for f, size in listed.items()}
    except (ValueError, AttributeError) as error:
        raise ValueError(f"`{name}` {str(folder)!r}: {RUN_COMPLETE}{'' if checkpoint is None else ' of its run'} is "
                         f"not a valid marker ({error}); {repair_advice(folder)}") from None
    if checkpoint is None:
        sizes = {relative: size for relative, size in sizes.items() if not _in_checkpoint(relative)}
    else:
        sizes = {relative: size for relative, size in sizes.items() if relative.startswith(checkpoint + "/")}
    missing = [(run / f).relative_to(folder).as_posix() for f in sizes if not (run / f).is_file()]
    if missing:
        raise ValueError(f"`{name}` {str(folder)!r}: files listed in {RUN_COMPLETE} are missing: {_shown(missing)}"
                         + ("" if checkpoint is None else f"; {repair_advice(folder)}"))
    for relative, size in sizes.items():
        if Path(relative).suffix in READ_BACK_SUFFIXES:
            damage = file_damage(run / relative, size)
            if damage is None and relative in digests and _weights_digest(run / relative) != digests[relative]:
                damage = f"its content differs from the sha256 {RUN_COMPLETE} recorded"
            if damage is not None:
                raise DamagedFile(f"`{name}` {str(folder)!r}: {(run / relative).relative_to(folder).as_posix()} is "
                                  f"damaged ({damage}); {repair_advice(folder)}")


def _is_checkpoint_name(name: str) -> bool:
    """Whether ``name`` is a ``checkpoint-<step>`` folder's."""
    return name.startswith(CHECKPOINT_PREFIX) and name[len(CHECKPOINT_PREFIX):].isdigit()


def _in_checkpoint(relative: str) -> bool:
    """Whether the run-relative path ``relative`` lies in a ``checkpoint-<step>`` folder of the run."""
    top, _, rest = relative.partition("/")
    return bool(rest) and _is_checkpoint_name(top)


def completed_run(path) -> dict | None:
    """The ``run_complete.json`` of a complete run folder (see :func:`check_run_complete`), or None: not a run folder,
    interrupted, still running, or a listed file missing."""
    folder = Path(path)
    if not is_run_folder(folder) or not (folder / RUN_COMPLETE).is_file():
        return None
    try:
        check_run_complete(folder)
    except (OSError, ValueError):
        return None
    return read_json_object(folder / RUN_COMPLETE)


# ---------------------------------------------------------------- a run's identity in its folder


def checkpoints(output_dir) -> list:
    """Every ``checkpoint-<step>`` folder of ``output_dir`` as ``[(step, path)]`` in step order (complete or not)."""
    found = []
    for path in Path(output_dir).glob(CHECKPOINT_PREFIX + "*"):
        step = path.name[len(CHECKPOINT_PREFIX):]
        if path.is_dir() and step.isdigit():
            found.append((int(step), path))
    return sorted(found)


def last_checkpoint(output_dir) -> Path | None:
    """The complete ``checkpoint-<step>`` folder of the highest step (a save cut short or a damaged file is passed
    over), or None. Any architecture's: the checkpoint is read as a model of the ``model_type`` its ``config.json``
    names (whether its weights fit the run is checked when it resumes, :func:`check_checkpoint_fits`)."""
    for _, path in reversed(checkpoints(output_dir)):
        if _checkpoint_problem(path) is not None:
            continue
        config = read_json_object(path / "config.json") or {}
        model_type = config.get("model_type")
        if not isinstance(model_type, str) or not model_type:
            continue
        try:
            read_model_config("resume_from_checkpoint", path, model_type)
        except ValueError:
            continue
        return path
    return None


def last_ensemble_checkpoint(ensemble_dir) -> Path | None:
    """The complete ``checkpoint-<step>`` folder of the highest step of a stacked ensemble's folder (a save cut
    short or a damaged file is passed over), or None."""
    for _, path in reversed(checkpoints(ensemble_dir)):
        if _checkpoint_problem(path, stacked=True) is None:
            return path
    return None


def read_identity(output_dir) -> dict | None:
    """The ``run_identity.json`` of a run folder (:func:`write_identity`'s record), or None."""
    return read_json_object(Path(output_dir) / IDENTITY_FILE)


def write_identity(output_dir, identity: str, task: str, arguments: dict, config: dict, *,
                   resumed_from: str | None = None) -> dict:
    """Record that this process trains the run ``identity`` in ``output_dir`` (whose previous completion marker no
    longer describes it); returns the record."""
    folder = Path(output_dir)
    record = {"identity": identity, "task": task, "arguments": arguments, "config": config,
              "host": socket.gethostname(), "pid": os.getpid(), "started": time.time(), "resumed_from": resumed_from}
    folder.mkdir(parents=True, exist_ok=True)
    mark_run_started(folder)
    write_json_atomic(folder / IDENTITY_FILE, record)
    return record


def forget_identity(output_dir) -> None:
    """A run not trained by the runner starts in ``output_dir``: the folder's identity record no longer describes
    it, so that no runner takes the new run for the recorded one."""
    record = Path(output_dir) / IDENTITY_FILE
    if record.is_file():
        record.unlink()


def record_failure(output_dir, record: dict, error: BaseException) -> None:
    """Add ``error`` to a run's identity record: the run failed (``hf-treelang sweep --status`` says so)."""
    write_json_atomic(Path(output_dir) / IDENTITY_FILE, {**record, "error": f"{type(error).__name__}: {error}"})


def finished_run(output_dir, identity: str | None = None) -> dict | None:
    """The summary of a finished run, or None when the folder holds none (of ``identity``, if given).

    Finished means complete — ``run_complete.json`` (:func:`completed_run`) — with ``run_identity.json`` among the
    files that marker lists: the identity was recorded before the run that completed, not after it.

    Returns:
        ``accuracy`` and ``bp_accuracy`` (the model's and the matched BP's accuracy on the first k_test set),
        ``final`` (every numeric final metric: ``eval_kl_bp_k*``, ``eval_acc_ktest*``, ...), ``global_step``,
        ``train_runtime_s`` (from ``metrics.json``), ``identity``, ``task``, ``resumed_from``, ``output_dir``,
        ``early_stopping`` (the validation stopping rule's record, None for a run without it).
    """
    folder = Path(output_dir)
    record = read_identity(folder)
    if record is None or (identity is not None and record.get("identity") != identity):
        return None
    marker = completed_run(folder)
    if marker is None or IDENTITY_FILE not in (marker.get("files") or {}):
        return None
    metrics = read_json_object(folder / "metrics.json") or {}
    final = {key: value for key, value in (metrics.get("final") or {}).items() if isinstance(value, (int, float))}
    k = ((record.get("config") or {}).get("data_args", {}).get("k_test") or [0])[0]
    return {
        "accuracy": final.get(f"eval_acc_ktest{k}"),
        "bp_accuracy": final.get(f"eval_bp_acc_ktest{k}"),
        "final": final,
        "output_dir": str(folder),
        "global_step": int(metrics.get("global_step", marker.get("global_step", 0))),
        "train_runtime_s": float(metrics.get("train_runtime_s", 0.0)),
        "identity": record.get("identity"),
        "task": record.get("task"),
        "resumed_from": record.get("resumed_from"),
        "early_stopping": metrics.get("early_stopping"),
    }


@dataclass
class FolderState:
    """What a run folder holds for a given identity.

    ``status``: ``"done"`` (complete, same identity: ``result`` is its summary, :func:`finished_run`), ``"resume"``
    (same identity, not complete; ``checkpoint`` to resume from, or None to start over), ``"running"`` (another live
    process owns the folder, :mod:`hf_treelang.claims`; ``record`` names it), ``"stale"`` (trained under another
    identity, or by no runner), ``"new"`` (missing or empty). ``record``: the folder's ``run_identity.json``.
    """

    status: str
    result: dict | None = None
    checkpoint: Path | None = None
    record: dict | None = None


def folder_state(output_dir, identity: str) -> FolderState:
    """Read a run folder against ``identity``; raise if it holds files that no training run wrote."""
    folder = Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"output_dir {str(folder)!r} exists and is not a folder")
    taken = owner(folder) if folder.is_dir() else None
    if taken is not None:
        return FolderState("running", record={**(read_identity(folder) or {}), **taken})
    if not _entries(folder):
        return FolderState("new")
    record = read_identity(folder)
    if record is None:
        if is_run_folder(folder):
            return FolderState("stale")  # a training run of no known identity (a script's, or an older version's)
        raise ValueError(f"output_dir {str(folder)!r} holds files that no training run wrote (no {IDENTITY_FILE}); "
                         "move them away or choose another folder")
    if record.get("identity") != identity:
        return FolderState("stale", record=record)
    result = finished_run(folder, identity)
    if result is not None:
        return FolderState("done", result=result, record=record)
    return FolderState("resume", checkpoint=last_checkpoint(folder), record=record)


__all__ = [
    "CHECKPOINT_PREFIX",
    "DamagedFile",
    "ENSEMBLE_FILE",
    "IDENTITY_FILE",
    "FolderState",
    "MODEL_FOLDER",
    "RESUME_FILES",
    "RUN_COMPLETE",
    "RUN_CONFIG",
    "RUN_FILES",
    "RUN_START_FILES",
    "TASK_ARCHITECTURES",
    "WEIGHT_FILES",
    "check_output_dir_free",
    "check_prunable",
    "prune_checkpoints",
    "check_output_folder",
    "check_checkpoint_fits",
    "check_resume_checkpoint",
    "check_run_complete",
    "clear_previous_run",
    "completed_run",
    "empty_folder",
    "file_damage",
    "finished_run",
    "folder_state",
    "forget_identity",
    "is_run_folder",
    "last_checkpoint",
    "last_ensemble_checkpoint",
    "read_identity",
    "record_failure",
    "repair_advice",
    "write_identity",
    "mark_run_started",
    "start_run_folder",
    "read_model_config",
    "write_run_complete",
]
