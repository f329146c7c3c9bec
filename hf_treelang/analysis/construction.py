"""``hf-treelang construct``: App. F's BP transformer of a grammar, written as a folder every analysis reads — the
positive control of the analyses (on a model that *is* BP_0, the KL to BP_0 is 0, the closest BP_k is 0, the
attention is App. F's template layer by layer, and the probes find each message at the layer that writes it).

The folder holds the weights and config (:mod:`hf_treelang.models.modeling_bp_transformer`), ``grammar.json``, the
tokenizer, a ``run_config.json`` naming its data (q, ℓ, k_train = 0, and the parameters the grammar was drawn with:
σ and seed for the paper's grammars, the RHM's own for a Random Hierarchy Model, none for a grammar given as an array)
and the completion marker, so ``hf-treelang attention | probe | calibrate OUT`` treat it as a finished run of another
architecture. ``run_config.json``'s ``command`` rebuilds the same folder; a grammar that no command builds has none.

The folder must be new or empty: a training run, or any folder with other files (a user's own ``config.json``), is
refused before anything is written; ``--overwrite`` (``overwrite=True``) replaces an earlier construction, and only
that.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from hf_treelang.core.grammar import Grammar
from hf_treelang.jsonio import read_json_object, write_json_atomic
from hf_treelang.models.bp_transformer import TASK_CLASSES, build_bp_transformer
from hf_treelang.models.configuration_bp_transformer import check_construction
from hf_treelang.models.tokenization_treelang import save_tokenizer
from hf_treelang.train.folders import RUN_COMPLETE, RUN_CONFIG, is_run_folder, mark_run_started, write_run_complete

from .io import check_output_dir, cli_error, prepare_output

WRITTEN_BY = "hf-treelang construct"  # run_config.json's "written_by" in a folder this module wrote
HIERARCHY_PARAMS = ("num_classes", "num_rules", "arity", "grammar_seed")  # an RHM's data arguments, as training's


def _shown(names: list, limit: int = 5) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _files(folder: Path) -> list:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file() or path.is_symlink())


def check_construction_output(out, overwrite: bool = False) -> Path:
    """``out`` as a folder :func:`write_bp_transformer` may write: new or empty, or, with ``overwrite``, an earlier
    construction holding nothing else. Anything else — a training run, a folder with other files — is refused in one
    line naming it; nothing is created."""
    folder = check_output_dir(out)
    present = sorted(entry.name for entry in folder.iterdir()) if folder.is_dir() else []
    if not present:
        return folder
    run_config = read_json_object(folder / RUN_CONFIG)
    if run_config is None or run_config.get("written_by") != WRITTEN_BY:
        what = "holds a training run (it has run_config.json)" if is_run_folder(folder) else \
            f"is not empty ({_shown(present)})"
        raise ValueError(f"`out` {str(folder)!r} {what}: construct writes a new or empty folder and replaces only an "
                         "earlier construction (--overwrite); choose another folder")
    if not overwrite:
        raise ValueError(f"`out` {str(folder)!r} holds an earlier construction: pass --overwrite to replace it, or "
                         "choose another folder")
    listed = (read_json_object(folder / RUN_COMPLETE) or {}).get("files")
    if not isinstance(listed, dict):
        raise ValueError(f"`out` {str(folder)!r} holds an unfinished construction (no {RUN_COMPLETE}): remove the "
                         "folder, or choose another")
    others = [name for name in _files(folder) if name not in listed and name != RUN_COMPLETE]
    if others:
        raise ValueError(f"`out` {str(folder)!r} holds an earlier construction and other files ({_shown(others)}), "
                         "which --overwrite would mix with the new one: move them, or choose another folder")
    return folder


def grammar_data_args(grammar: Grammar) -> dict:
    """The parameters ``grammar`` was drawn with, as run_config.json's data arguments name them: ``sigma`` and
    ``grammar_seed`` of the paper's grammars, the RHM's own for a Random Hierarchy Model, none for a grammar given
    as an array."""
    params = grammar.params
    if params.get("ensemble") == "random_hierarchy":
        return {name: params[name] for name in HIERARCHY_PARAMS if name in params}
    return {name: params[name] for name in ("sigma", "grammar_seed") if params.get(name) is not None}


def construct_command(out, grammar: Grammar, depth: int, task: str, beta: float) -> str | None:
    """The ``hf-treelang construct`` command that writes this folder again, or None for a grammar that the command
    does not build (one given as an array, a Random Hierarchy Model, or one whose recorded σ and seed draw another)."""
    params = grammar.params
    sigma, seed = params.get("sigma"), params.get("grammar_seed")
    if params.get("ensemble") is not None or sigma is None or seed is None:
        return None
    try:
        same = Grammar.random(grammar.num_symbols, sigma, seed) == grammar
    except (TypeError, ValueError):
        return None
    if not same:
        return None
    return shlex.join(["hf-treelang", "construct", str(out), "--task", task, "--num-symbols",
                       str(grammar.num_symbols), "--depth", str(depth), "--sigma", repr(float(sigma)),
                       "--grammar-seed", str(int(seed)), "--beta", repr(float(beta))])


def write_bp_transformer(out, grammar: Grammar, depth: int, task: str = "mlm", beta: float = 40.0,
                         overwrite: bool = False) -> Path:
    """Save the construction of ``grammar`` at depth ℓ for ``task`` (``"mlm"`` or ``"root"``) into ``out`` as a
    finished run (module docstring); returns the folder. ``out`` must be new or empty, or an earlier construction
    with ``overwrite`` (:func:`check_construction_output`); everything is checked before anything is written."""
    model = build_bp_transformer(grammar, depth, task=task, beta=beta)
    folder = check_construction_output(out, overwrite)
    if folder.is_dir():  # an earlier construction: incomplete from now on, its files replaced
        mark_run_started(folder)
        for name in _files(folder):
            (folder / name).unlink()
    out = prepare_output(folder)
    model.save_pretrained(out)
    grammar.save(out / "grammar.json")
    save_tokenizer(out, grammar.num_symbols)
    config = model.config
    run_config = {"task": task, "written_by": WRITTEN_BY,
                  "data_args": {"num_symbols": config.num_symbols, "depth": config.depth, "k_train": 0,
                                **grammar_data_args(grammar)},
                  "model_args": {"model_type": config.model_type}, "training_args": {}}
    command = construct_command(out, grammar, config.depth, task, config.beta)
    if command is not None:
        run_config["command"] = command
    write_json_atomic(out / RUN_CONFIG, run_config)
    write_run_complete(out, task=task, global_step=0)
    return out


def run(args) -> int:
    """``hf-treelang construct`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    try:
        if args.task not in TASK_CLASSES:
            raise ValueError(f"--task must be one of {tuple(TASK_CLASSES)}, got {args.task!r}")
        check_construction(args.num_symbols, args.depth, args.beta)
        check_construction_output(args.out, args.overwrite)
        grammar = Grammar.random(args.num_symbols, args.sigma, args.grammar_seed)
        out = write_bp_transformer(args.out, grammar, args.depth, task=args.task, beta=args.beta,
                                   overwrite=args.overwrite)
    except (ValueError, TypeError) as error:
        return cli_error("construct", error)
    print(f"wrote the BP_0 construction ({args.task}, q={args.num_symbols}, depth {args.depth}, {args.depth} "
          f"attention layers, β = {args.beta:g}) to {out}")
    return 0


__all__ = ["WRITTEN_BY", "check_construction_output", "construct_command", "grammar_data_args", "run",
           "write_bp_transformer"]
