"""How every ``--help`` of the package reads: :class:`HelpFormatter`, each option's help ending with its default;
:func:`brief_help`, a ``--help`` that lists the options a reader needs first and ``--help-all`` that lists them all.

Its own module, standard library only, because two parsers at different layers share it: the ``hf-treelang``
sub-commands (:mod:`hf_treelang.cli`, the top layer) and the training scripts' ``HfArgumentParser``
(:mod:`hf_treelang.train.arguments`). The training layer may not import the command line (nothing does), and the
command line must not load the training layer's torch to show its help, so the formatter lives below both.
"""

from __future__ import annotations

import argparse

__all__ = ["HELP_ALL", "HelpFormatter", "brief_help"]

HELP_ALL = "--help-all"  # the flag that lists every option of a parser whose --help lists some (brief_help)


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


class _FullHelp(argparse.Action):
    """``--help-all``: print the help of every option, then exit (as ``--help`` does)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None,
                 formatter_class=HelpFormatter):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)
        self.formatter_class = formatter_class

    def __call__(self, parser, namespace, values, option_string=None):
        parser.formatter_class = self.formatter_class
        parser.print_help()
        parser.exit()


def brief_help(parser: argparse.ArgumentParser, shown, *, hidden: str) -> argparse.ArgumentParser:
    """Make ``parser``'s ``--help`` list only the options whose ``dest`` is in ``shown`` (and the help flags), and
    add ``--help-all``, which lists every option; every option is parsed as before. ``hidden`` says in words what
    ``--help`` leaves out. Returns ``parser``."""
    shown = set(shown) | {"help"}
    full = parser.formatter_class

    def listed(actions) -> list:
        return [action for action in actions if action.dest in shown or HELP_ALL in action.option_strings]

    class BriefFormatter(full):
        def add_usage(self, usage, actions, groups, prefix=None):
            super().add_usage(usage, listed(actions), [], prefix)

        def add_arguments(self, actions):
            super().add_arguments(listed(actions))

    parser.add_argument(HELP_ALL, action=_FullHelp, formatter_class=full,
                        help=f"list every flag, {hidden} too (each is accepted either way), and exit")
    parser.formatter_class = BriefFormatter
    note = f"--help lists the flags used most; {hidden} are accepted too: {HELP_ALL} lists them."
    parser.epilog = f"{parser.epilog}\n\n{note}" if parser.epilog else note
    return parser
