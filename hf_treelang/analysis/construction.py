"""``hf-treelang construct``: App. F's BP transformer of a grammar, written as a folder every analysis reads — the
positive control of the analyses (on a model that *is* BP_0, the KL to BP_0 is 0, the closest BP_k is 0, the
attention is App. F's template layer by layer, and the probes find each message at the layer that writes it).

The folder holds the weights and config (:mod:`hf_treelang.models.modeling_bp_transformer`), ``grammar.json``, the
tokenizer, a ``run_config.json`` naming its data (q, ℓ, k_train = 0, σ, grammar seed) and the completion marker, so
``hf-treelang attention | probe | calibrate OUT`` treat it as a finished run of another architecture.
"""

from __future__ import annotations

import json
from pathlib import Path

from hf_treelang.core.grammar import Grammar
from hf_treelang.models.bp_transformer import TASK_CLASSES, build_bp_transformer
from hf_treelang.models.tokenization_treelang import save_tokenizer
from hf_treelang.train.folders import write_run_complete

from .io import check_output_dir, cli_error, prepare_output


def write_bp_transformer(out, grammar: Grammar, depth: int, task: str = "mlm", beta: float = 40.0) -> Path:
    """Save the construction of ``grammar`` at depth ℓ for ``task`` (``"mlm"`` or ``"root"``) into ``out`` as a
    finished run (module docstring); returns the folder."""
    model = build_bp_transformer(grammar, depth, task=task, beta=beta)
    check_output_dir(out)
    out = prepare_output(out)
    model.save_pretrained(out)
    grammar.save(out / "grammar.json")
    save_tokenizer(out, grammar.num_symbols)
    config = model.config
    data = {"num_symbols": config.num_symbols, "depth": config.depth, "k_train": 0, "sigma": config.sigma,
            "grammar_seed": config.grammar_seed}
    (out / "run_config.json").write_text(json.dumps(
        {"task": task, "data_args": data, "model_args": {"model_type": config.model_type}, "training_args": {},
         "command": f"hf-treelang construct {out} --task {task} --num-symbols {config.num_symbols} --depth "
                    f"{config.depth} --sigma {config.sigma:g} --grammar-seed {config.grammar_seed}"}, indent=1))
    write_run_complete(out, task=task, global_step=0)
    return out


def run(args) -> int:
    """``hf-treelang construct`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    try:
        if args.task not in TASK_CLASSES:
            raise ValueError(f"--task must be one of {tuple(TASK_CLASSES)}, got {args.task!r}")
        grammar = Grammar.random(args.num_symbols, args.sigma, args.grammar_seed)
        out = write_bp_transformer(args.out, grammar, args.depth, task=args.task, beta=args.beta)
    except (ValueError, TypeError) as error:
        return cli_error("construct", error)
    print(f"wrote the BP_0 construction ({args.task}, q={args.num_symbols}, depth {args.depth}, {args.depth} "
          f"attention layers) to {out}")
    return 0


__all__ = ["run", "write_bp_transformer"]
