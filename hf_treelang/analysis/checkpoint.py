"""A trained checkpoint loaded for analysis, with clear errors for a folder that is not one.

Two kinds load:

* a TreeLang checkpoint (``config.json`` with model_type ``"treelang"``): a run, model or ``checkpoint-N`` folder;
  its config carries q, ℓ and k_train, and its logits score the q symbols (a language model's also the special
  ids, far below every symbol);
* a run of another architecture (``run_mlm.py`` / ``run_clm.py`` / ``run_root.py --model_type bert|gpt2|mamba|...``),
  or a ``checkpoint-N`` folder of one: its config is the architecture's own (no ``depth``), so the setting comes from
  the run's ``run_config.json`` (the task, and q, ℓ, k_train, σ and the grammar seed of its data arguments; for a
  ``checkpoint-N`` the run folder's), the ids from :class:`hf_treelang.core.vocabulary.Vocabulary` and the model
  from ``AutoModelFor{MaskedLM, CausalLM, SequenceClassification}.from_pretrained`` with the eager attention
  implementation (the one that returns attention maps, ``output_attentions=True``; every analysis then reads the
  same numbers). Its logits cover ``q + 2`` ids: the analyses read the q symbols' logits renormalised and report the
  probability left on the special ids (:func:`hf_treelang.train.callbacks.symbol_log_probabilities`).

Dimension glossary: ``n`` sequences, ``L = 2**ℓ`` positions, ``q`` symbols, ``d`` hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from hf_treelang import models
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.oracle import NEXT_LEAF_TASK
from hf_treelang.core.vocabulary import Vocabulary
from hf_treelang.jsonio import read_json_object
from hf_treelang.models.architectures import TASK_HEADS, TREELANG, register_pooled_root_classifiers
from hf_treelang.models.loading import load_pretrained
from hf_treelang.train.folders import (
    CHECKPOINT_PREFIX,
    MODEL_FOLDER,
    RUN_CONFIG,
    TASK_ARCHITECTURES,
    check_run_complete,
    read_model_config,
)

from .io import check_device

TASK_DESCRIPTIONS = {"mlm": "masked language modelling", "root": "root classification",
                     NEXT_LEAF_TASK: "next-leaf prediction"}


# the head class names of another architecture's config ("architectures"), by task, when run_config.json has none
_HEAD_SUFFIXES = {"mlm": ("ForMaskedLM",), NEXT_LEAF_TASK: ("ForCausalLM", "LMHeadModel"),
                  "root": ("ForSequenceClassification", "ForRootClassification")}


@dataclass(frozen=True)
class RunSetting:
    """The data setting of a run of another architecture, from its ``run_config.json`` (its config has no ``depth``).

    Attributes:
        num_symbols: q.
        depth: ℓ.
        filter_level: k_train.
        sigma: σ of the grammar, and grammar_seed: its seed (the grammar when the folder has no grammar.json); None
            where the data arguments name none (a grammar given as an array; an RHM has no σ).
        run_config: the path it was read from.
    """

    num_symbols: int
    depth: int
    filter_level: int
    sigma: float | None
    grammar_seed: int | None
    run_config: Path


@dataclass
class Checkpoint:
    """A checkpoint loaded for analysis (eval mode, on ``device``): a TreeLang model, or a run of another
    architecture (module docstring).

    Attributes:
        path: the folder it was loaded from.
        model: the loaded model (a task head, or the bare encoder when the folder holds one).
        task: ``"mlm"``, ``"root"``, ``"clm"`` (the causal LM) or ``None`` for a bare encoder.
        grammar: the grammar the checkpoint's data were drawn from (rebuilt from its config).
        setting: q, ℓ and k_train of a run of another architecture (from its run_config.json); ``None`` for a
            TreeLang checkpoint, whose config carries them.
    """

    path: Path
    model: torch.nn.Module
    task: str | None
    grammar: Grammar
    setting: RunSetting | None = None

    @property
    def config(self):
        return self.model.config

    @property
    def is_treelang(self) -> bool:
        """Whether the model is TreeLang's own (its config carries q, ℓ and k_train), not another architecture."""
        return self.setting is None

    @property
    def model_type(self) -> str:
        """The architecture: ``"treelang"``, ``"bert"``, ``"gpt2"``, ``"mamba"``, ..."""
        return str(self.config.model_type)

    @property
    def depth(self) -> int:
        """ℓ: sequences have 2**depth leaves (arity**depth for a tree of arity s)."""
        return int(self.config.depth) if self.setting is None else self.setting.depth

    @property
    def arity(self) -> int:
        """s, the children of every node of the data's trees (2 for the paper's grammars; the grammar's)."""
        return self.grammar.arity

    @property
    def num_leaves(self) -> int:
        """L = s**ℓ, the leaves of a sequence (the model's positions)."""
        return self.arity**self.depth

    @property
    def filter_level(self) -> int:
        """k_train: the filter level of the data the checkpoint was trained on."""
        return int(self.config.filter_level) if self.setting is None else self.setting.filter_level

    @property
    def num_symbols(self) -> int:
        """q: the number of symbols (the model's vocabulary is q + 1 with the mask; q + 2 for another architecture)."""
        return int(self.config.num_symbols) if self.setting is None else self.setting.num_symbols

    @property
    def mask_token_id(self) -> int:
        if self.setting is None:
            return int(self.config.mask_token_id)
        return Vocabulary(self.setting.num_symbols).mask_token_id

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def describe(self) -> str:
        task = TASK_DESCRIPTIONS.get(self.task, "bare encoder")
        if self.setting is not None:
            task = f"{self.model_type} {task}"
        return f"{self.path} ({task}, q={self.num_symbols}, depth={self.depth}, k_train={self.filter_level})"


def read_checkpoint_config(path) -> tuple[Path, dict]:
    """Validate a checkpoint folder without loading it; returns (path, config.json as a dict).

    A model folder (``save_pretrained``, ``hf-treelang convert``) is read as it is; a training run's output folder
    must be complete (``run_complete.json``, :mod:`hf_treelang.train.folders`): a run killed before it wrote
    everything is refused, naming what it lacks; a ``checkpoint-N`` of a finished run must match what the run
    recorded of it (a file changed since is refused, naming it and what to do).
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


def task_of(path) -> str | None:
    """The task of a checkpoint folder of any architecture, read without loading its weights (``"mlm"``, ``"root"``,
    ``"clm"``, or None for a bare TreeLang encoder)."""
    other = _other_architecture(path)
    if other is not None:
        return other[2]
    return checkpoint_task(read_checkpoint_config(path)[1])


def load_checkpoint(path, *, task: str | None = None, device: str | torch.device = "cpu") -> Checkpoint:
    """Load a checkpoint for analysis, checking that it is of the expected task before anything is written.

    A TreeLang model folder loads as its config says; a run of another architecture (or a ``checkpoint-N`` of one)
    as its run_config.json says (module docstring).

    Args:
        path: the checkpoint folder.
        task: ``"mlm"``, ``"root"`` or ``"clm"`` to require that head; ``None`` accepts any checkpoint.
        device: where to put the model.
    """
    if task is not None and task not in TASK_ARCHITECTURES:
        raise ValueError(f"task must be one of {sorted(TASK_ARCHITECTURES)} or None, got {task!r}")
    device = check_device(device)
    other = _other_architecture(path)
    if other is not None:
        return _load_other_architecture(*other, task=task, device=device)
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
    """Load a causal-LM checkpoint (TreeLangForCausalLM, a run or model folder; or a causal run of another
    architecture, ``run_clm.py --model_type``) for analysis: task ``"clm"``.

    Any other checkpoint is refused before its weights are read, with one line naming what it holds and what
    ``needed_by`` (e.g. ``"generate"``) needs.
    """
    other = _other_architecture(path)
    if other is not None:
        folder, config, found = other[0], other[1], other[2]
        if found != NEXT_LEAF_TASK:
            raise ValueError(f"checkpoint {str(folder)!r} holds a {config.get('model_type')} "
                             f"{TASK_DESCRIPTIONS.get(found, found)} model ({config.get('architectures')}); "
                             f"{needed_by} needs a causal-LM run ({TASK_DESCRIPTIONS[NEXT_LEAF_TASK]}, run_clm.py)")
        return load_checkpoint(folder, task=NEXT_LEAF_TASK, device=device)
    folder, config = read_checkpoint_config(path)
    found = checkpoint_task(config)
    if found != NEXT_LEAF_TASK:
        have = TASK_DESCRIPTIONS.get(found, "a bare encoder without a task head")
        raise ValueError(f"checkpoint {str(folder)!r} holds {have} ({config.get('architectures')}); {needed_by} "
                         f"needs a {TASK_ARCHITECTURES[NEXT_LEAF_TASK]} run ({TASK_DESCRIPTIONS[NEXT_LEAF_TASK]})")
    return load_checkpoint(folder, task=NEXT_LEAF_TASK, device=device)


def _other_architecture(path) -> tuple | None:
    """(folder, config, task, setting) of a run (or ``checkpoint-N``) of an architecture other than TreeLang, checked
    without loading it; ``None`` for anything else, which the TreeLang path reads (and refuses with its own errors).

    A folder of another model type without a run_config.json beside it is refused: its config alone does not say the
    data (q, ℓ, k_train) it was trained on.
    """
    if path is None or str(path) == "":
        return None
    folder = Path(path)
    declared = read_json_object(folder / "config.json") if (folder / "config.json").is_file() else None
    if declared is None or declared.get("model_type") in (None, TREELANG):
        return None
    model_type = str(declared["model_type"])
    run_folder = folder
    if not (folder / RUN_CONFIG).is_file() and folder.name.startswith(CHECKPOINT_PREFIX):
        run_folder = folder.parent  # a checkpoint-N of a run: the run folder says what data it saw
    if not (run_folder / RUN_CONFIG).is_file():
        raise ValueError(f"checkpoint {str(folder)!r} has model_type {model_type!r} but no {RUN_CONFIG} (nor, for a "
                         f"{CHECKPOINT_PREFIX}N folder, in its run folder); expected {MODEL_FOLDER}, or a run folder of "
                         "another architecture written by the training scripts (run_mlm.py, run_clm.py or run_root.py "
                         "with --model_type), whose run_config.json gives q, the depth and k_train")
    folder, config = read_model_config("checkpoint", folder, model_type=model_type)
    for checked in dict.fromkeys((run_folder, folder)):  # the run, then a checkpoint-N against its record
        check_run_complete(checked, "checkpoint")
    run_config = read_json_object(run_folder / RUN_CONFIG)
    if run_config is None:
        raise ValueError(f"checkpoint {str(folder)!r}: {str(run_folder / RUN_CONFIG)!r} is not a JSON object")
    setting = _run_setting(run_folder / RUN_CONFIG, run_config)
    return folder, config, _task_of(folder, config, run_config), setting


def _run_setting(path: Path, run_config: dict) -> RunSetting:
    """q, ℓ, k_train, σ and the grammar seed of a run's data arguments, each checked to be present (σ and the seed
    may be absent: a grammar that has none, whose grammar.json the folder holds)."""
    data = run_config.get("data_args")
    data = data if isinstance(data, dict) else {}
    values = {}
    for name, key, cast in (("num_symbols", "num_symbols", int), ("depth", "depth", int),
                            ("filter_level", "k_train", int), ("sigma", "sigma", float),
                            ("grammar_seed", "grammar_seed", int)):
        value = data.get(key)
        if value is None and key in ("sigma", "grammar_seed"):
            values[name] = None
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{str(path)!r}: data_args.{key} must be a number, got {value!r}")
        values[name] = cast(value)
    return RunSetting(run_config=path, **values)


def _task_of(folder: Path, config: dict, run_config: dict) -> str:
    """The task of a run of another architecture: run_config.json's ``task``, else its head class's name."""
    task = run_config.get("task")
    if task in TASK_HEADS:
        return task
    for task, suffixes in _HEAD_SUFFIXES.items():
        if any(str(name).endswith(suffixes) for name in config.get("architectures") or []):
            return task
    raise ValueError(f"checkpoint {str(folder)!r}: neither run_config.json's task ({run_config.get('task')!r}) nor "
                     f"config.json's architectures ({config.get('architectures')}) name a task of {sorted(TASK_HEADS)}")


def _load_other_architecture(folder: Path, config: dict, found: str, setting: RunSetting, *, task: str | None,
                             device: torch.device) -> Checkpoint:
    """Load a run of another architecture with its task's Auto class (eager attention), after the task check."""
    if task is not None and found != task:
        raise ValueError(
            f"checkpoint {str(folder)!r} holds a {config.get('model_type')} {TASK_DESCRIPTIONS[found]} model "
            f"({config.get('architectures')}); this analysis needs a {TASK_DESCRIPTIONS[task]} checkpoint")
    grammar = _grammar_of_run(folder, setting)
    if found == "root":
        register_pooled_root_classifiers()  # Mamba, RWKV, ...: their root head is hf_treelang's own
    model = load_pretrained(TASK_HEADS[found], folder, attn_implementation="eager")
    model.to(device).eval()
    return Checkpoint(path=folder, model=model, task=found, grammar=grammar, setting=setting)


def _grammar_of_run(folder: Path, setting: RunSetting) -> Grammar:
    """The grammar.json of the folder or of its run, checked against the run's data arguments; else the grammar
    those arguments name."""
    for saved in (folder / "grammar.json", setting.run_config.parent / "grammar.json"):
        if saved.is_file():
            grammar = Grammar.load(saved)
            if grammar.num_symbols != setting.num_symbols:
                raise ValueError(f"checkpoint {str(folder)!r}: {str(saved)!r} has q={grammar.num_symbols} symbols but "
                                 f"the run was trained on q={setting.num_symbols} ({str(setting.run_config)!r})")
            for name, cast in (("sigma", float), ("grammar_seed", int)):
                saved_value = grammar.params.get(name)
                if saved_value is not None and getattr(setting, name) is not None \
                        and cast(saved_value) != getattr(setting, name):
                    raise ValueError(f"checkpoint {str(folder)!r}: {str(saved)!r} has {name}={saved_value} but the run "
                                     f"was trained on {name}={getattr(setting, name)} ({str(setting.run_config)!r})")
            return grammar
    data = (read_json_object(setting.run_config) or {}).get("data_args") or {}
    if data.get("num_rules") is not None:  # a Random Hierarchy Model: its data arguments do not name Grammar.random
        raise ValueError(f"checkpoint {str(folder)!r} has no grammar.json (nor its run folder): the grammar of its "
                         "Random Hierarchy Model cannot be rebuilt from the paper's parameters; copy the run's "
                         "grammar.json next to its weights")
    if setting.sigma is None or setting.grammar_seed is None:
        raise ValueError(f"checkpoint {str(folder)!r} has no grammar.json (nor its run folder), and its data arguments "
                         f"({str(setting.run_config)!r}) name no σ and seed to rebuild it; copy the run's "
                         "grammar.json next to its weights")
    return Grammar.random(num_symbols=setting.num_symbols, sigma=setting.sigma, grammar_seed=setting.grammar_seed)


def _grammar_of(folder: Path, config) -> Grammar:
    """The grammar saved next to the weights (training writes grammar.json) or, for a ``checkpoint-N`` folder, in its
    run folder; else the one the config names — the paper's grammar, which a model of another arity or a run of a
    Random Hierarchy Model cannot have been trained on (refused in one line rather than compared with the wrong BP).
    """
    q = int(config.num_symbols)
    saved = folder / "grammar.json"
    if not saved.is_file() and folder.name.startswith(CHECKPOINT_PREFIX):
        saved = folder.parent / "grammar.json"  # the run's (a checkpoint-N folder holds none of its own)
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
        arity = int(getattr(config, "arity", 2))
        if grammar.arity != arity or grammar.depth not in (None, int(config.depth)):
            raise ValueError(f"checkpoint {str(folder)!r}: {str(saved)!r} has arity {grammar.arity} and depth "
                             f"{grammar.depth} but the model was built for arity {arity} and depth {config.depth}")
        return grammar
    run_folder = folder.parent if folder.name.startswith(CHECKPOINT_PREFIX) else folder
    run_config = read_json_object(run_folder / RUN_CONFIG) if (run_folder / RUN_CONFIG).is_file() else None
    hierarchy = ((run_config or {}).get("data_args") or {}).get("num_rules") is not None
    unnamed = getattr(config, "sigma", 1.0) is None or getattr(config, "grammar_seed", 0) is None  # no σ or seed
    if int(getattr(config, "arity", 2)) != 2 or hierarchy or unnamed:
        raise ValueError(f"checkpoint {str(folder)!r} has no grammar.json (nor its run folder): its grammar (arity "
                         f"{getattr(config, 'arity', 2)}{', a Random Hierarchy Model' if hierarchy else ''}) cannot be "
                         "rebuilt from config.json, which names only the paper's grammars; copy the run's grammar.json "
                         "next to its weights")
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
