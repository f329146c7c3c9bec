"""How every ``--help`` of the package reads: :class:`HelpFormatter`, each option's help ending with its default.

Its own module, standard library only, because two parsers at different layers share it: the ``hf-treelang``
sub-commands (:mod:`hf_treelang.cli`, the top layer) and the training scripts' ``HfArgumentParser``
(:mod:`hf_treelang.train.arguments`). The training layer may not import the command line (nothing does), and the
command line must not load the training layer's torch to show its help, so the formatter lives below both.
"""

from __future__ import annotations

import argparse

__all__ = ["HelpFormatter"]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default: argparse's ``(default: X)``, or the text's own ``(default: ...)``.

    A default of ``None`` means "decided at run time", which only words can say: such options (and list defaults,
    which argparse would print as a Python list) write their ``(default: ...)`` by hand, and nothing is appended to
    a help text that already has one. Positionals, required options and flags have no default to show.
    """

    def _get_help_string(self, action):
        text = action.help or ""
        if "(default" in text or not action.option_strings or action.required or action.nargs == 0:
            return text
        if action.default is None or action.default is argparse.SUPPRESS:
            return text
        return text + " (default: %(default)s)"
