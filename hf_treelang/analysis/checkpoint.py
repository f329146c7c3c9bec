"""A trained TreeLang checkpoint loaded for analysis, with clear errors for a folder that is not one.

Dimension glossary: ``n`` sequences, ``L = 2**ℓ`` positions, ``q`` symbols, ``d`` hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from hf_treelang import models
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.oracle import NEXT_LEAF_TASK
from hf_treelang.models.loading import load_pretrained
from hf_treelang.train.folders import TASK_ARCHITECTURES, check_run_complete, read_model_config

from .io import check_device

TASK_DESCRIPTIONS = {"mlm": "masked language modelling", "root": "root classification",
                     NEXT_LEAF_TASK: "next-leaf prediction"}


@dataclass
class Checkpoint:
    """A TreeLang checkpoint loaded for analysis (eval mode, on ``device``).

    Attributes:
        path: the folder it was loaded from.
        model: the loaded model (a task head, or the bare encoder when the folder holds one).
        task: ``"mlm"``, ``"root"``, ``"clm"`` (the causal LM) or ``None`` for a bare encoder.
        grammar: the grammar the checkpoint's data were drawn from (rebuilt from its config).
    """

    path: Path
    model: torch.nn.Module
    task: str | None
    grammar: Grammar

    @property
    def config(self):
        return self.model.config

    @property
    def depth(self) -> int:
        """ℓ: sequences have 2**depth leaves."""
        return int(self.config.depth)

    @property
    def filter_level(self) -> int:
        """k_train: the filter level of the data the checkpoint was trained on."""
        return int(self.config.filter_level)

    @property
    def num_symbols(self) -> int:
        """q: the number of symbols (the model's vocabulary is q + 1 with the mask)."""
        return int(self.config.num_symbols)

    @property
    def mask_token_id(self) -> int:
        return int(self.config.mask_token_id)

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def describe(self) -> str:
        task = TASK_DESCRIPTIONS.get(self.task, "bare encoder")
        return f"{self.path} ({task}, q={self.num_symbols}, depth={self.depth}, k_train={self.filter_level})"


def read_checkpoint_config(path) -> tuple[Path, dict]:
    """Validate a checkpoint folder without loading it; returns (path, config.json as a dict).

    A model folder (``save_pretrained``, ``hf-treelang convert``, a ``checkpoint-N``) is read as it is; a training
    run's output folder must be complete (``run_complete.json``, :mod:`hf_treelang.train.folders`): a run killed
    before it wrote everything is refused, naming what it lacks.
    """
    folder, config = read_model_config("checkpoint", path)
    check_run_complete(folder, "checkpoint")
    return folder, config


def checkpoint_task(config: dict) -> str | None:
    """The task of a checkpoint from its config's ``architectures`` ("mlm", "root" or None for a bare encoder)."""
    architectures = config.get("architectures") or []
    for task, name in TASK_ARCHITECTURES.items():
        if name in architectures:
            return task
    return None


def load_checkpoint(path, *, task: str | None = None, device: str | torch.device = "cpu") -> Checkpoint:
    """Load a TreeLang checkpoint for analysis, checking that it is of the expected task before anything is written.

    Args:
        path: the checkpoint folder.
        task: ``"mlm"`` or ``"root"`` to require that head; ``None`` accepts any TreeLang checkpoint.
        device: where to put the model.
    """
    if task is not None and task not in TASK_ARCHITECTURES:
        raise ValueError(f"task must be one of {sorted(TASK_ARCHITECTURES)} or None, got {task!r}")
    device = check_device(device)
    folder, config = read_checkpoint_config(path)
    found = checkpoint_task(config)
    if task is not None and found != task:
        have = TASK_DESCRIPTIONS.get(found, "a bare encoder without a task head")
        raise ValueError(
            f"checkpoint {str(folder)!r} holds {have} ({config.get('architectures')}); this analysis needs a "
            f"{TASK_DESCRIPTIONS[task]} checkpoint ({TASK_ARCHITECTURES[task]})"
        )
    class_name = TASK_ARCHITECTURES[found] if found is not None else "TreeLangModel"
    model = load_pretrained(getattr(models, class_name), folder)
    model.to(device).eval()
    return Checkpoint(path=folder, model=model, task=found, grammar=_grammar_of(folder, model.config))


def load_causal_checkpoint(path, *, device: str | torch.device = "cpu", needed_by: str = "this analysis"
                           ) -> Checkpoint:
    """Load a causal-LM checkpoint (TreeLangForCausalLM; a run or model folder) for analysis: task ``"clm"``.

    Any other checkpoint is refused before its weights are read, with one line naming what it holds and what
    ``needed_by`` (e.g. ``"generate"``) needs.
    """
    folder, config = read_checkpoint_config(path)
    found = checkpoint_task(config)
    if found != NEXT_LEAF_TASK:
        have = TASK_DESCRIPTIONS.get(found, "a bare encoder without a task head")
        raise ValueError(f"checkpoint {str(folder)!r} holds {have} ({config.get('architectures')}); {needed_by} "
                         f"needs a {TASK_ARCHITECTURES[NEXT_LEAF_TASK]} run ({TASK_DESCRIPTIONS[NEXT_LEAF_TASK]})")
    return load_checkpoint(folder, task=NEXT_LEAF_TASK, device=device)


def _grammar_of(folder: Path, config) -> Grammar:
    """The grammar saved next to the weights (training writes grammar.json), else the one the config names."""
    q = int(config.num_symbols)
    saved = folder / "grammar.json"
    if saved.is_file():
        grammar = Grammar.load(saved)
        if grammar.num_symbols != q:
            raise ValueError(f"checkpoint {str(folder)!r}: grammar.json has q={grammar.num_symbols} symbols but the "
                             f"model was built for q={q}")
        for name, cast in (("sigma", float), ("grammar_seed", int)):
            saved_value, model_value = grammar.params.get(name), getattr(config, name, None)
            if saved_value is not None and model_value is not None and cast(saved_value) != cast(model_value):
                raise ValueError(f"checkpoint {str(folder)!r}: grammar.json has {name}={saved_value} but the model "
                                 f"was trained on {name}={model_value} (config.json): the two files are of different "
                                 "runs")
        return grammar
    return Grammar.random(num_symbols=q, sigma=float(config.sigma), grammar_seed=int(config.grammar_seed))


def as_checkpoint(checkpoint, *, task: str | None = None, device="cpu") -> Checkpoint:
    """Accept a :class:`Checkpoint` or a folder path."""
    if isinstance(checkpoint, Checkpoint):
        if task is not None and checkpoint.task != task:
            raise ValueError(
                f"checkpoint {checkpoint.describe()} is not a {TASK_DESCRIPTIONS[task]} checkpoint "
                f"({TASK_ARCHITECTURES[task]})"
            )
        return checkpoint
    return load_checkpoint(checkpoint, task=task, device=device)
