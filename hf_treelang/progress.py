"""Progress bars only on a terminal: one rule for every entry point of the package (the ``hf-treelang`` commands, the
training scripts, a sweep's worker processes); and how a console line writes a duration (:func:`format_duration`).

A progress bar redraws itself with ``\\r`` and terminal escape codes; in a file or a pipe those become garbage
between the lines. :func:`quiet_progress_bars_off_terminal` turns off the bars of the libraries the package drives
(``datasets``: "Generating train split"; ``transformers``: "Writing model shards", "Loading weights";
``huggingface_hub``: uploads and downloads) when their stream is not a terminal, and the entry points turn off the
package's own (``--no-progress``). Standard library only, so that a command can decide before it loads torch.
"""

from __future__ import annotations

import os
import sys

# The libraries' own switches: (the variable each reads when it is imported, so that a later import or a process
# started from this one follows it; the function that switches it once imported). transformers reads
# huggingface_hub's variable.
LIBRARY_SWITCHES = {
    "huggingface_hub": ("HF_HUB_DISABLE_PROGRESS_BARS", "huggingface_hub.utils", "disable_progress_bars"),
    "datasets": ("HF_DATASETS_DISABLE_PROGRESS_BARS", "datasets", "disable_progress_bars"),
    "transformers": ("HF_HUB_DISABLE_PROGRESS_BARS", "transformers.utils.logging", "disable_progress_bar"),
}
USER_KEEPS_BARS = ("0", "false", "no", "off")  # a variable set to one of these: the user asked for the bars


def is_terminal(stream=None) -> bool:
    """Whether ``stream`` (default ``sys.stderr``, where tqdm draws) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def quiet_progress_bars_off_terminal(stream=None, *, force: bool = False) -> bool:
    """Turn off the progress bars of ``huggingface_hub``, ``datasets`` and ``transformers`` when ``stream`` (default
    ``sys.stderr``) is not a terminal, or always with ``force`` (a command's ``--no-progress``); returns whether it
    did. A variable the user set (``HF_HUB_DISABLE_PROGRESS_BARS=0``) is left as it is. The scripts and the command
    line call it; a library caller keeps its own settings."""
    if not force and is_terminal(stream):
        return False
    import importlib

    for package, (variable, module, function) in LIBRARY_SWITCHES.items():
        if os.environ.get(variable, "1").strip().lower() in USER_KEEPS_BARS:
            continue
        os.environ[variable] = "1"
        if package in sys.modules:  # imported already: it read its variable then
            getattr(importlib.import_module(module), function)()
    return True


def format_duration(seconds: float | None) -> str:
    """A duration for a console line: ``30 s``, ``12 min``, ``2.0 h``, ``3.1 days``; ``n/a`` for None."""
    if seconds is None:
        return "n/a"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


__all__ = ["LIBRARY_SWITCHES", "format_duration", "USER_KEEPS_BARS", "is_terminal", "quiet_progress_bars_off_terminal"]
