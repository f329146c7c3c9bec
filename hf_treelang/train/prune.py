"""``hf-treelang prune RUN...``: a finished run folder without its checkpoints (read by a resume and by the attention
template dynamics, nothing else), ready to share.

Every folder is checked (a complete run, held by no live process) before any is touched; the pruning itself is
:func:`hf_treelang.train.folders.prune_checkpoints`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .folders import check_prunable, prune_checkpoints


def _mebibytes(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def run(args) -> int:
    """``hf-treelang prune`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    folders = [Path(path) for path in args.runs]
    try:
        for folder in folders:
            check_prunable(folder, "run")
    except (ValueError, OSError) as error:
        sys.stderr.write(f"hf-treelang prune: error: {error}\n")
        return 2
    for folder in folders:
        names, size = prune_checkpoints(folder)
        left = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
        what = f"removed {len(names)} checkpoint(s), {_mebibytes(size)}" if names else "no checkpoint to remove"
        print(f"{folder}: {what}; {_mebibytes(left)} left")
    return 0
