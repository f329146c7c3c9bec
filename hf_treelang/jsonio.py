"""JSON files of the package: written whole or not at all, read back as None when missing or cut short.

Every file the package writes and later reads to decide something (a run's completion marker and identity, a
sweep's records, the evaluation history) goes through here, so that a crash mid-write never leaves a half-written
file that reads as valid: :func:`write_json_atomic` writes a temporary file beside the target and renames it over
the target (``os.replace``, atomic on one file system). Standard library only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TEMPORARY_SUFFIX = ".tmp"  # the half-written file of write_json_atomic; readers of a folder skip it


def dumps(data, *, indent: int | None = 1) -> str:
    """Canonical text of ``data``: sorted keys, ``str`` for what JSON lacks (paths, enums), a final newline."""
    return json.dumps(data, indent=indent, sort_keys=True, default=str) + "\n"


def write_json_atomic(path, data, *, indent: int | None = 1) -> Path:
    """Write ``data`` to ``path`` as :func:`dumps` does, atomically: readers see the old file or the new one."""
    path = Path(path)
    temporary = path.with_name(path.name + TEMPORARY_SUFFIX)
    temporary.write_text(dumps(data, indent=indent))
    os.replace(temporary, path)
    return path


def read_json(path):
    """The JSON value in ``path``, or None when the file is missing, unreadable or not valid JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def read_json_object(path) -> dict | None:
    """:func:`read_json` when the file holds a JSON object, else None."""
    value = read_json(path)
    return value if isinstance(value, dict) else None


def append_jsonl(path, record) -> None:
    """Append ``record`` as one line of ``path`` (JSON lines; a line cut short by a crash is skipped on reading)."""
    with open(path, "a") as handle:
        handle.write(dumps(record, indent=None))


def read_jsonl(path) -> list:
    """The records of a JSON-lines file (none when it is missing), skipping lines that are not valid JSON."""
    path = Path(path)
    records = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def write_jsonl_atomic(path, records) -> Path:
    """Replace ``path`` with ``records``, one per line, atomically."""
    path = Path(path)
    temporary = path.with_name(path.name + TEMPORARY_SUFFIX)
    temporary.write_text("".join(dumps(record, indent=None) for record in records))
    os.replace(temporary, path)
    return path
