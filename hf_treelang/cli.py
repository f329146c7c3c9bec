"""The ``hf-treelang`` command: one sub-command per task, each implemented in the package module named below."""

from __future__ import annotations

import importlib
import sys

# sub-command -> (module, function taking the remaining argv, one-line help)
COMMANDS = {
    "convert": ("hf_treelang.convert", "main", "turn a state dict of the paper's code into a TreeLang checkpoint"),
    "publish-dataset": ("hf_treelang.publish", "main", "write a Hub-ready dataset repository (Parquet + card)"),
    "calibration": ("hf_treelang.analysis.calibration", "main", "model vs BP probabilities (Fig. 1b)"),
    "attention": ("hf_treelang.analysis.attention", "main", "average attention maps per layer (Fig. 4)"),
    "probe": ("hf_treelang.analysis.probing", "main", "ancestor probes per (layer, level) (Fig. 3b)"),
    "dynamics": ("hf_treelang.analysis.dynamics", "main", "KL-to-BP_k and k_test curves of a run (Fig. 1c/d, 2b, 3a)"),
    "sample-complexity": ("hf_treelang.analysis.sample_complexity", "main", "accuracy vs P, three arms (Fig. 1f)"),
    "reproduce": ("hf_treelang.reproduce", "main", "data, BP, training and every analysis, with report.md"),
}


def _usage() -> str:
    lines = ["usage: hf-treelang COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<18} {help_}" for name, (_, _, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(_usage() + "\n")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        sys.stderr.write(f"hf-treelang: unknown command {name!r}\n\n{_usage()}\n")
        return 2
    module, function, _ = COMMANDS[name]
    return getattr(importlib.import_module(module), function)(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
