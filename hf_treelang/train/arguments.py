"""Arguments of the training scripts (``training/run_root.py``, ``run_mlm.py``, ``run_finetune.py``,
``run_clm.py``).

Three ``HfArgumentParser`` dataclasses: :class:`DataArguments` (the data: grammar seed, σ, q, or a grammar file; ℓ,
k_train, sizes, k_test sets, mask rate), :class:`ModelArguments` (the architecture, or a checkpoint to start from) and
:class:`TreeLangTrainingArguments` (``transformers.TrainingArguments`` with the paper's optimiser as defaults: Adam
β = (0.9, 0.999), ε = 1e-8, no weight decay, learning rate 1e-4 constant without warm-up, batch 32).

:func:`parse_arguments` reads the command line or one JSON file, then applies ``--preset`` (``"laptop"``: the run
each script does with no arguments, sized by experiment to show the paper's findings on a 2-core CPU; ``"smoke"``:
that run cut to a two-minute first run; ``"paper"``: the authors' settings) to every field the user did not set.
The dataclasses' own defaults are the paper's model and optimiser, for code that builds them directly.
"""

from __future__ import annotations

import hashlib
import functools
import json
import os
import sys
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path

from transformers import HfArgumentParser, TrainingArguments
from transformers.trainer_utils import SchedulerType
from transformers.training_args import OptimizerNames

from hf_treelang.core.grammar import Grammar, check_hierarchy_params
from hf_treelang.core.masking import TrainingMasking, check_block_masking, check_mask_rate
from hf_treelang.core.params import (
    LIMITS,
    MAX_SIGMA,
    MAX_SIZE,
    check_int,
    check_param,
    check_real,
    check_sigma,
    warn_renamed,
)
from hf_treelang.help_format import HelpFormatter, brief_help
from hf_treelang.models.architectures import TREELANG, patch_config
from hf_treelang.models.configuration_treelang import TreeLangConfig

from . import laptop_settings as laptop
from . import paper_settings as paper
from .folders import check_output_folder
from .honoured import check_honoured
from .optimizers import CUSTOM_OPTIMIZERS

# The architecture fields of TreeLangConfig (everything but the data's sizes and metadata): ModelArguments has one
# flag per field, and model_kwargs reads them back, so no hand-kept list can drop one.
RENAMED_ARGUMENTS = {"vocab_size": "num_symbols"}  # renamed in 0.2; the old names work for one release
DATA_CONFIG_FIELDS = ("vocab_size", "depth", "filter_level", "sigma", "grammar_seed", "arity", "num_classes")
TASK_CONFIG_FIELDS = ("is_causal", "bos_token_id")  # set by the task's model class and q, not run arguments
ARCHITECTURE_FIELDS = tuple(name for name in TreeLangConfig.__annotations__
                            if name not in DATA_CONFIG_FIELDS + TASK_CONFIG_FIELDS)
# The flags that choose another architecture (transformers' example scripts' names); at their defaults a run is the
# TreeLang encoder's, and its identity is what it was before they existed.
OTHER_ARCHITECTURE_FIELDS = {"model_type": TREELANG, "config_overrides": None, "config_name": None,
                             "trust_remote_code": False}
# The training-mask options of issue 33's search (DataArguments): at None a run masks as before they existed, and its
# identity is what it was.
MASK_OPTION_FIELDS = ("mask_rate_final", "block_mask_fraction", "block_mask_sizes")
# The Random Hierarchy Model's parameters (DataArguments): None for the paper's grammar, whose identity they leave as
# it was; an RHM run has them all (DataArguments.complete_hierarchy).
HIERARCHY_FIELDS = ("num_rules", "num_classes", "arity")
DEFAULT_BLOCK_MASK_SIZES = (2, 4, 8)  # blocks of the nodes 1, 2 and 3 levels above the leaves
# The σ curriculum of issue 33's search (DataArguments, hf_treelang.train.data.SigmaCurriculum): at None a run trains
# on its own training set throughout, and its identity is what it was.
CURRICULUM_FIELDS = ("sigma_curriculum_start", "sigma_curriculum_epochs")
# A grammar file (DataArguments.grammar_file) gives the grammar: the flags that choose a generated one (and the σ
# curriculum, which redraws it at a larger σ) are refused with it; the flags it fixes are refused when they differ
# from the file's (GRAMMAR_FILE_FIXED: an RHM's m and n, the arity, the depth of rules given per level).
GRAMMAR_FILE_REFUSED = ("grammar_seed", "sigma", "num_symbols", *CURRICULUM_FIELDS)
GRAMMAR_FILE_FIXED = ("num_rules", "num_classes", "arity", "depth")

TASKS = ("root", "mlm", "finetune", "clm")
TRAIN_ENGINES = ("device", "dataloader")
STEP_MODES = ("auto", "eager", "cuda_graph")
ENSEMBLE_MODES = ("auto", "stacked", "sequential")
# torch's Adam(W), foreach with capturable=True or fused (one kernel for every tensor): its update can be captured
CAPTURABLE_OPTIMIZERS = ("adamw_torch", "adamw_torch_fused")
COMPILE_MODES_WITH_GRAPHS = ("reduce-overhead", "max-autotune")  # torch.compile modes that use CUDA graphs
WARMUP_STABLE_DECAY = "warmup_stable_decay"  # transformers' get_wsd_schedule (Hägele et al. 2024)
WSD_SHAPES = ("linear", "cosine", "1-sqrt")  # its warmup_type and decay_type
WSD_KWARGS = ("num_decay_steps", "num_stable_steps", "warmup_type", "decay_type", "min_lr_ratio", "num_cycles")

# Settings per task and preset, for every field the user did not set. "laptop" (the default) is the run each script
# does with no arguments on a 2-core CPU in <= 15 minutes (:mod:`hf_treelang.train.laptop_settings`, found by the
# search in training/README.md, "The laptop preset"; reproduce --preset quick trains the same runs); "paper" is the
# authors' scripts (:mod:`hf_treelang.train.paper_settings`, sources in training/README.md,
# "Paper vs code"), the paper's model and optimiser included, so that it stays exact whatever the laptop preset says;
# "smoke" (root, MLM, next-leaf) is the laptop run cut to a two-minute first run.
PAPER_MODEL = paper.MODEL
PAPER_OPTIMISER = paper.OPTIMISER
PRESETS = {
    "root": {
        "laptop": laptop.ROOT,
        "smoke": laptop.SMOKE_ROOT,
        "paper": {**PAPER_MODEL, **PAPER_OPTIMISER, "num_train": paper.ROOT_TRAIN, "num_eval": paper.NUM_VALIDATION,
                  "num_test": paper.NUM_TEST, "num_train_epochs": float(paper.ROOT_EPOCHS),
                  "num_evaluations": paper.NUM_EVALUATIONS,
                  "checkpoint_epochs": list(paper.ROOT_CHECKPOINT_EPOCHS)},
    },
    "mlm": {
        "laptop": laptop.MLM,
        "laptop_long": laptop.MLM_LONG,
        "smoke": laptop.SMOKE_MLM,
        "paper": {**PAPER_MODEL, **PAPER_OPTIMISER, "num_train": paper.MLM_TRAIN, "num_eval": paper.NUM_VALIDATION,
                  "num_test": paper.NUM_TEST, "num_train_epochs": float(paper.MLM_EPOCHS),
                  "num_evaluations": paper.NUM_EVALUATIONS,
                  "checkpoint_epochs": list(paper.MLM_CHECKPOINT_EPOCHS)},
    },
    # Next-leaf prediction (the causal LM) is not a task of the paper. "paper" is a choice, stated as one: the paper's
    # model and optimiser on the paper's MLM data and schedule (P = 2**18, 2000 epochs, the MLM checkpoint epochs), so
    # that the two self-supervised objectives are compared on the same data at the same number of steps.
    "clm": {
        "laptop": laptop.CLM,
        "smoke": laptop.SMOKE_CLM,
        "paper": {**PAPER_MODEL, **PAPER_OPTIMISER, "num_train": paper.MLM_TRAIN, "num_eval": paper.NUM_VALIDATION,
                  "num_test": paper.NUM_TEST, "num_train_epochs": float(paper.MLM_EPOCHS),
                  "num_evaluations": paper.NUM_EVALUATIONS,
                  "checkpoint_epochs": list(paper.MLM_CHECKPOINT_EPOCHS)},
    },
    "finetune": {
        "laptop": laptop.FINETUNE,
        "paper": {**PAPER_OPTIMISER, "num_train": 2**12, "num_eval": paper.NUM_VALIDATION, "num_test": paper.NUM_TEST,
                  "num_train_epochs": float(paper.FINETUNE_EPOCHS), "num_evaluations": paper.NUM_EVALUATIONS,
                  "checkpoint_epochs": list(paper.ROOT_CHECKPOINT_EPOCHS)},
    },
}
# A preset's field that is part of another: left unset when the user gives the other (a --mask_rate given alone is a
# constant rate, not the preset's schedule from it).
PRESET_PARTS = {"mask_rate_final": "mask_rate"}
PRESET_ALIASES = {"default": "laptop"}  # the laptop preset's name before 0.3


def _from_preset(name: str) -> str:
    """The end of a help text for a field the presets set: ``(default: from --preset; laptop: <value>)``."""
    return f"(default: from --preset; laptop: {PRESETS['root']['laptop'][name]})"


DEFAULT_OUTPUT_DIRS = {"root": "outputs/run_root", "mlm": "outputs/run_mlm", "finetune": "outputs/run_finetune",
                       "clm": "outputs/run_clm"}
# presets whose runs write next to, not into, the default folder (a smoke run never blocks or replaces a long run's)
PRESET_OUTPUT_SUFFIXES = {"smoke": "_smoke"}


def default_output_dir(task: str, preset: str) -> str:
    """The folder a run of ``task`` with ``preset`` writes to when ``--output_dir`` is not given:
    ``outputs/run_<task>``, ``outputs/run_<task>_smoke`` for the smoke preset."""
    return DEFAULT_OUTPUT_DIRS[task] + PRESET_OUTPUT_SUFFIXES.get(preset, "")


@dataclass
class DataArguments:
    """The data: grammar (seed, σ, q, or a Random Hierarchy Model's m, n, s with ``num_rules``), tree (ℓ), training
    filter level and the held-out sets."""

    grammar_seed: int = field(
        default=0,
        metadata={"help": "The grammar M is drawn from (grammar_seed, num_symbols, sigma); every split's sampling "
                  "seed is derived from it (load_dataset('treelang', ..., seed=grammar_seed)). The model's seed "
                  "is --seed."},
    )
    sigma: float = field(default=1.0, metadata={"help": "σ in [0, 1000], the grammar's spread parameter (App. A)."})
    num_symbols: int = field(
        default=4,
        metadata={"help": "q in [2, 256], the number of symbols (the mask id is q); --vocab_size is its former name.",
                  "aliases": ["--vocab_size"]},
    )
    depth: int = field(default=4, metadata={"help": "ℓ in [1, 16], the tree depth; sequences have 2**depth leaves "
                                                    "(arity**depth <= 65 536 for a Random Hierarchy Model)."})
    num_rules: int | None = field(
        default=None,
        metadata={"help": "m: train on a Random Hierarchy Model (Cagnetta et al., PRX 2024; the dataset configs "
                  "'rhm-v<v>[-n<n>]-m<m>-s<s>-L<L>[-seed<seed>]') whose every symbol rewrites into one of m "
                  "s-tuples, in [1, num_symbols**(arity-1)]; --num_symbols is v, --depth L, --grammar_seed its "
                  "seed; --sigma is not used (default: none, the paper's grammar)."},
    )
    num_classes: int | None = field(
        default=None,
        metadata={"help": "n: a Random Hierarchy Model's root classes 0 .. n-1, in [1, num_symbols] (default: "
                  "num_symbols, as the dataset configs); needs --num_rules."},
    )
    arity: int | None = field(
        default=None,
        metadata={"help": "s: a Random Hierarchy Model's children per node, in [2, 16]; sequences have "
                  "arity**depth leaves (default: 2); needs --num_rules."},
    )
    grammar_file: str | None = field(
        default=None,
        metadata={"help": "Train on the grammar in this JSON file (the format Grammar.save writes: any q and arity, "
                  "one rule tensor M or rules per level, e.g. a hand-made M or a saved Random Hierarchy Model) instead "
                  "of a generated one: the data are sampled from it directly with hf_treelang.sample_trees (split "
                  "seeds derived from its content; no dataset builder), the BP-KL callback runs BP on it and the run "
                  "folder's grammar.json is it. q, the arity and (for rules per level) the depth are the file's; "
                  "--grammar_seed, --sigma, --num_symbols and the σ curriculum are refused with it, --num_rules, "
                  "--num_classes, --arity and --depth when they differ from the file's (default: none, a generated "
                  "grammar)."},
    )
    k_train: int = field(default=0, metadata={"help": "Filter level k in [0, depth] of the training data."})
    num_train: int | None = field(
        default=None, metadata={"help": "P, the number of training sequences (default: from --preset)."}
    )
    num_eval: int | None = field(
        default=None,
        metadata={"help": "Held-out k_train sequences for the Trainer's evaluation and the in-sample BP-KL curves "
                  "(default: from --preset)."},
    )
    num_test: int | None = field(
        default=None, metadata={"help": "Test sequences per k_test set (default: from --preset)."}
    )
    k_test: list[int] | None = field(
        default=None,
        metadata={"help": "Filter levels of the out-of-sample test sets, each in [0, depth] (default: 0..depth)."},
    )
    mask_rate: float | None = field(
        default=None,
        metadata={"help": "MLM only: 0 (or None) masks one leaf per sequence at a random position (the paper, and "
                  "--preset paper); a rate in (0, 1] masks each leaf independently with that probability (a row "
                  "with none drawn masks its random leaf). Default: from --preset."},
    )
    mask_rate_final: float | None = field(
        default=None,
        metadata={"help": "MLM only: the Bernoulli mask rate the schedule reaches after the run's S optimiser steps, "
                  "in [0, 1]: the rate at step s (0-based) is mask_rate + (mask_rate_final - mask_rate) * s / S, so the "
                  "last step draws one step short of it. Needs a --mask_rate in (0, 1]. "
                  "Default: from --preset (laptop: 0.15, when --mask_rate is not given; laptop_long, paper: none); a "
                  "--mask_rate given alone is constant."},
    )
    block_mask_fraction: float | None = field(
        default=None,
        metadata={"help": "MLM only: the fraction in [0, 1] of training rows masked by one whole aligned block of "
                  "leaves (the leaves under one node of the tree) instead of --mask_rate's masking; evaluation still "
                  "masks one leaf per sequence (default: 0, no block masks)."},
    )
    block_mask_sizes: list[int] | None = field(
        default=None,
        metadata={"help": "MLM only: the sizes of --block_mask_fraction's blocks, one drawn uniformly per row, each "
                  "a power of 2 in [1, 2**depth] (default: 2 4 8, those <= 2**depth)."},
    )
    sigma_curriculum_start: float | None = field(
        default=None,
        metadata={"help": "σ curriculum: the σ of the first training epoch, in (--sigma, 1000]. The first "
                  "--sigma_curriculum_epochs E epochs train on P fresh draws of the same grammar seed at a larger σ "
                  "(the same rules, sharper), σ falling linearly from this value at epoch 0 to --sigma at epoch E; "
                  "later epochs train on the run's training set; evaluation is at --sigma only. Device engine "
                  "only (default: no curriculum)."},
    )
    sigma_curriculum_epochs: int | None = field(
        default=None,
        metadata={"help": "σ curriculum: how many leading epochs E train on the sharper draws, an integer in "
                  "[1, epochs - 1] (needs --sigma_curriculum_start)."},
    )
    use_dataset_builder: bool = field(
        default=True,
        metadata={"help": "Build the data with load_dataset('treelang', 'k<k>') (True) or directly with "
                  "hf_treelang.sample_trees (False)."},
    )

    @property
    def is_random_hierarchy(self) -> bool:
        """Whether the data are a Random Hierarchy Model's (``num_rules`` given), not the paper's grammar."""
        return self.num_rules is not None

    @property
    def sequence_arity(self) -> int:
        """s, the children of every node (2 for the paper's grammar): sequences have s**depth leaves."""
        return 2 if self.arity is None else self.arity

    @property
    def num_leaves(self) -> int:
        """The leaves of a sequence, s**depth (the model's positions)."""
        return self.sequence_arity**self.depth

    def file_grammar(self) -> Grammar | None:
        """The grammar of ``grammar_file`` (None without one), read once: the data, the BP oracle, the run folder's
        grammar.json and the run's identity all use this one reading (:func:`read_grammar_file`: a file that is
        missing, unreadable or not a grammar is a one-line ValueError naming ``grammar_file``)."""
        if self.grammar_file is None:
            return None
        cached = self.__dict__.get("_file_grammar")
        if cached is None or cached[0] != self.grammar_file:
            cached = (self.grammar_file, read_grammar_file(self.grammar_file))
            self.__dict__["_file_grammar"] = cached  # not a field: asdict, == and the identity's fields ignore it
        return cached[1]

    def complete_hierarchy(self) -> None:
        """Give a Random Hierarchy Model's unset parameters their defaults (n = v, s = 2), as its dataset configs do,
        so that one model has one set of arguments (and one identity); a paper's-grammar run is left as it is."""
        if self.is_random_hierarchy:
            if self.num_classes is None:
                self.num_classes = self.num_symbols
            if self.arity is None:
                self.arity = 2

    def training_masking(self, total_steps: int | None = None) -> TrainingMasking:
        """The run's training-mask rule (:class:`~hf_treelang.core.masking.TrainingMasking`) over ``total_steps``
        optimiser steps."""
        fraction, sizes = check_block_masking(self.block_mask_fraction or 0.0, self.block_sizes(), self.depth)
        return TrainingMasking(self.mask_rate, self.mask_rate_final, fraction, sizes,
                               total_steps if self.mask_rate_final is not None else None)

    def block_sizes(self) -> list:
        """The block sizes given, or :data:`DEFAULT_BLOCK_MASK_SIZES` up to 2**depth."""
        if self.block_mask_sizes is not None:
            return list(self.block_mask_sizes)
        return [size for size in DEFAULT_BLOCK_MASK_SIZES if size <= self.num_leaves]

    def mask_options_given(self) -> list:
        """The names of the training-mask options set (``mask_rate`` included), for the tasks that mask nothing."""
        return [name for name in ("mask_rate", *MASK_OPTION_FIELDS) if getattr(self, name) is not None]

    def test_levels(self) -> list:
        """The k_test sets to evaluate on (all of 0..ℓ when not given)."""
        return list(range(self.depth + 1)) if self.k_test is None else [int(k) for k in self.k_test]

    def validate(self) -> None:
        """Raise a ValueError/TypeError naming the field if any value is out of range (the limits of core.params)."""
        check_param("num_symbols", self.num_symbols)
        check_param("depth", self.depth)
        if self.grammar_file is not None:
            self.check_grammar_file()
        else:
            check_sigma(self.sigma)
            self.check_grammar()
            check_param("grammar_seed", self.grammar_seed)
        check_int("k_train", self.k_train, 0, self.depth)
        for k in self.test_levels():
            check_int("k_test", k, 0, self.depth)
        if len(set(self.test_levels())) != len(self.test_levels()):
            raise ValueError(f"`k_test` must not repeat a level, got {self.k_test!r}")
        for name in ("num_train", "num_eval", "num_test"):
            check_int(name, getattr(self, name), 1, MAX_SIZE)
        check_mask_rate(self.mask_rate)
        if self.sequence_arity != 2 and self.block_mask_fraction:
            raise ValueError(f"`block_mask_fraction` masks aligned blocks of 2**m leaves, the nodes of a binary tree; "
                             f"this Random Hierarchy Model has arity {self.arity}: leave it unset, got "
                             f"{self.block_mask_fraction!r}")
        self.training_masking()
        self.check_sigma_curriculum()

    def check_sigma_curriculum(self) -> None:
        """The σ curriculum's flags come together, its first σ above the run's and within the grammar's limit; the
        number of its epochs is bounded by the run's (:func:`hf_treelang.train.run.check_sigma_curriculum`)."""
        start, epochs = self.sigma_curriculum_start, self.sigma_curriculum_epochs
        if start is None and epochs is None:
            return
        if start is None or epochs is None:
            given, missing = (("sigma_curriculum_start", "sigma_curriculum_epochs") if epochs is None else
                              ("sigma_curriculum_epochs", "sigma_curriculum_start"))
            raise ValueError(f"`{given}` needs `{missing}` (the σ curriculum takes both), got "
                             f"{given}={getattr(self, given)!r} alone")
        if self.is_random_hierarchy:
            raise ValueError(f"`sigma_curriculum_start` sharpens the paper's grammar (its rule logits are σ·z); a "
                             f"Random Hierarchy Model (--num_rules) has uniform rules: leave it unset, got {start!r}")
        allowed = f"a real number in ({float(self.sigma):g}, {MAX_SIGMA:g}] (above --sigma, within σ's limit)"
        try:
            check_real("sigma_curriculum_start", start, 0.0, MAX_SIGMA)
        except (TypeError, ValueError):
            raise ValueError(f"`sigma_curriculum_start` must be {allowed}, got {start!r}") from None
        if not float(start) > float(self.sigma):
            raise ValueError(f"`sigma_curriculum_start` must be {allowed}, got {start!r}")
        check_int("sigma_curriculum_epochs", epochs, 1)

    def check_grammar_file(self) -> None:
        """A ``grammar_file`` run's data arguments agree with its grammar (:func:`apply_grammar_file` sets them so):
        q and the arity are the file's, the depth fits its rules, the root classes (``num_classes``, None for the q
        symbols) hold every root it can draw, and nothing of a generated grammar is set."""
        grammar = self.file_grammar()
        where = f"`grammar_file` {self.grammar_file!r}"
        if self.num_symbols != grammar.num_symbols:
            raise ValueError(f"`num_symbols` must be the grammar's q = {grammar.num_symbols} ({where}), got "
                             f"{self.num_symbols!r}")
        if self.sequence_arity != grammar.arity:
            raise ValueError(f"`arity` must be the grammar's s = {grammar.arity} ({where}), got {self.arity!r}")
        try:
            grammar.check_depth(self.depth)
        except ValueError as error:
            raise ValueError(f"{error} ({where})") from None
        classes = file_root_classes(grammar)
        if self.num_classes is not None and not (isinstance(self.num_classes, int) and classes <= self.num_classes
                                                  <= grammar.num_symbols):
            raise ValueError(f"`num_classes` must be an integer in [{classes}, {grammar.num_symbols}] (the grammar's "
                             f"roots are 0 .. {classes - 1}, {where}), got {self.num_classes!r}")
        given = [name for name in ("sigma", "grammar_seed", "num_rules", *CURRICULUM_FIELDS)
                 if getattr(self, name) is not None]
        if given:
            raise ValueError(f"`{given[0]}` is a parameter of a generated grammar; {where} gives the grammar: leave "
                             f"it unset, got {given[0]} = {getattr(self, given[0])!r}")
        if self.use_dataset_builder:
            raise ValueError(f"`use_dataset_builder` builds the treelang dataset configs, which name generated "
                             f"grammars; {where} is sampled directly: set it to False, got True")

    def check_grammar(self) -> None:
        """A Random Hierarchy Model's (v, n, m, s, L) in their ranges (:func:`~hf_treelang.core.grammar.
        check_hierarchy_params`, the dataset configs' check: m·v <= v**s, n <= v, s**L <= 65 536 positions), σ left
        at its default; without ``num_rules``, no RHM parameter."""
        if not self.is_random_hierarchy:
            for name in ("num_classes", "arity"):
                if getattr(self, name) is not None:
                    raise ValueError(f"`{name}` is a parameter of a Random Hierarchy Model: give --num_rules (m) too, "
                                     f"got {name} = {getattr(self, name)!r} without it")
            return
        check_hierarchy_params(self.num_symbols, self.num_symbols if self.num_classes is None else self.num_classes,
                               self.num_rules, self.sequence_arity, self.depth)
        if self.sigma != 1.0:
            raise ValueError(f"`sigma` is not a parameter of a Random Hierarchy Model (its rules are uniform): leave "
                             f"it unset, got {self.sigma!r}")


def read_grammar_file(path) -> Grammar:
    """The grammar in ``path`` (the JSON :meth:`Grammar.save` writes), or a one-line ValueError naming
    ``grammar_file`` and the file: missing, a folder, unreadable, not JSON or not a valid grammar."""
    shown = repr(os.fspath(path))
    if not os.path.exists(path):
        raise ValueError(f"`grammar_file` {shown} does not exist")
    if os.path.isdir(path):
        raise ValueError(f"`grammar_file` {shown} is a folder; give the JSON file Grammar.save writes (e.g. a run "
                         f"folder's grammar.json)")
    try:
        return Grammar.load(path)
    except OSError as error:
        raise ValueError(f"`grammar_file` {shown} cannot be read: {error.strerror or error}") from None
    except (ValueError, TypeError) as error:
        raise ValueError(f"`grammar_file`: {error}") from None


def grammar_content_hash(grammar: Grammar) -> str:
    """sha256 (hex) of a grammar's canonical JSON (:meth:`Grammar.to_dict`, keys sorted, floats as Python writes
    them: bit-exact): equal for equal grammars whatever the file's name, folder or layout."""
    text = json.dumps(grammar.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def file_root_classes(grammar: Grammar) -> int:
    """n, the root classes ``0 .. n-1`` a root head needs for ``grammar``: one past the last symbol its root prior
    can draw (an RHM's n; q for a prior on every symbol)."""
    return int(grammar.root_prior.nonzero()[0].max()) + 1


def apply_grammar_file(data_args: DataArguments, explicit: set) -> None:
    """Give a ``grammar_file`` run the data arguments of its grammar, or refuse, in one line naming every flag
    at fault, the flags that choose a generated grammar (:data:`GRAMMAR_FILE_REFUSED`) and those of
    :data:`GRAMMAR_FILE_FIXED` given with another value than the file's.

    q and the arity are the file's, the depth too for rules given per level, ``num_classes`` the root classes its
    prior can draw (None when it can draw every symbol); σ, the grammar seed and an RHM's m are None (the grammar
    is the file's, not drawn); the data are sampled directly (``use_dataset_builder`` False).
    """
    if data_args.grammar_file is None:
        return
    grammar = data_args.file_grammar()
    classes = file_root_classes(grammar)
    rules = grammar.params.get("num_rules") if grammar.params.get("ensemble") == "random_hierarchy" else None
    fixed = {"num_rules": rules, "num_classes": classes, "arity": grammar.arity, "depth": grammar.depth}
    generated = [f"--{name} {getattr(data_args, name)}" for name in GRAMMAR_FILE_REFUSED if name in explicit]
    differ = [f"--{name} {getattr(data_args, name)} (the file's: {fixed[name]})" for name in GRAMMAR_FILE_FIXED
              if name in explicit and getattr(data_args, name) != fixed[name]
              and not (name == "depth" and fixed[name] is None)]  # one shared M: any depth
    reasons = [f"{', '.join(generated)} (a generated grammar's)"] if generated else []
    if "use_dataset_builder" in explicit and data_args.use_dataset_builder:
        reasons.append("--use_dataset_builder true (a grammar file is sampled directly)")
    reasons += [", ".join(differ)] if differ else []
    if reasons:
        raise ValueError(f"`grammar_file` {data_args.grammar_file!r} gives the grammar (q = {grammar.num_symbols}, "
                         f"arity {grammar.arity}): leave out {'; '.join(reasons)}")
    data_args.num_symbols, data_args.arity = grammar.num_symbols, grammar.arity
    if grammar.depth is not None:
        data_args.depth = grammar.depth
    data_args.num_classes = classes if classes < grammar.num_symbols else None
    data_args.sigma = data_args.grammar_seed = data_args.num_rules = None
    data_args.use_dataset_builder = False


@dataclass
class ModelArguments:
    """The transformer (paper Sec. 3.1 / App. C) or the checkpoint to start from."""

    hidden_size: int = field(
        default=PAPER_MODEL["hidden_size"],
        metadata={"help": f"Token dimension d (paper: 128). {_from_preset('hidden_size')}"},
    )
    num_hidden_layers: int | None = field(
        default=None, metadata={"help": "Number of encoder blocks n_L (default: the depth ℓ, as the paper)."}
    )
    num_attention_heads: int = field(default=1, metadata={"help": "Attention heads per layer (paper: 1)."})
    intermediate_size: int = field(
        default=PAPER_MODEL["intermediate_size"],
        metadata={"help": f"Feed-forward size d' (paper: 2048). {_from_preset('intermediate_size')}"},
    )
    hidden_dropout_prob: float = field(
        default=0.1,
        metadata={"help": "Dropout in the blocks (paper: 0.1, torch.nn.TransformerEncoderLayer's default). "
                  f"{_from_preset('hidden_dropout_prob')}"},
    )
    attention_probs_dropout_prob: float = field(
        default=0.1,
        metadata={"help": f"Dropout on attention weights (paper: 0.1). {_from_preset('attention_probs_dropout_prob')}"}
    )
    hidden_act: str = field(default="relu", metadata={"help": "Feed-forward activation: 'relu' (paper) or 'gelu'."})
    layer_norm_eps: float = field(default=1e-5, metadata={"help": "Epsilon of the layer norms (PyTorch's 1e-5)."})
    classifier_pooling: str = field(
        default="concat",
        metadata={"help": "Root readout input: 'concat' (the paper: all final tokens) or 'mean'."},
    )
    classifier_hidden_size: int = field(
        default=0,
        metadata={"help": "Finetuning: hidden units H of the new root readout; 0 (default) is Sec. 3.2's linear "
                  "readout, H >= 1 the authors' fine-tuning head d*2**depth -> H -> q with a ReLU (their Fig. 1f "
                  f"code: H = {paper.FINETUNE_HIDDEN}). Saved in config.json: from_pretrained rebuilds the head."},
    )
    initializer: str = field(
        default="torch",
        metadata={"help": "Initialisation: 'torch' (PyTorch's defaults, each encoder block drawn on its own), "
                  "'torch_cloned_layers' (the paper's code: PyTorch's defaults with all blocks starting as copies of "
                  "one layer, as nn.TransformerEncoder(layer, n_L) builds them, drawn in the authors' order so that "
                  "one seed gives their initial weights) or 'xavier' (App. D's text) (default: from --preset; "
                  "laptop root: torch_cloned_layers, laptop MLM and causal: torch; paper: torch_cloned_layers)."},
    )
    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Finetuning: the MLM checkpoint to start from (default for run_finetune.py: "
                  "outputs/run_mlm, the output of run_mlm.py with no arguments)."},
    )
    freeze_encoder: bool = field(
        default=False,
        metadata={"help": "Finetuning: train only the root readout; the frozen encoder runs in eval mode (no dropout), "
                  "as the authors' freeze_encoder_weights (Fig. 1f)."},
    )
    model_type: str = field(
        default=TREELANG,
        metadata={"help": "The architecture: 'treelang' (the paper's encoder, sized by the flags above) or any model "
                  "type of transformers (bert, roberta, modernbert, distilbert, gpt2, llama, mamba, ...) or one "
                  "registered with AutoConfig.register, built with AutoModelFor<task>.from_config after its config "
                  "is fitted to the TreeLang vocabulary (hf_treelang.models.architectures); size it with "
                  "--config_overrides."},
    )
    config_overrides: str | None = field(
        default=None,
        metadata={"help": "With another --model_type: 'field=value,...' set on its config, e.g. "
                  "'hidden_size=64,num_hidden_layers=4,num_attention_heads=1,intermediate_size=256' (as "
                  "transformers' run_mlm.py)."},
    )
    config_name: str | None = field(
        default=None,
        metadata={"help": "With another --model_type: a local config.json (or its folder) to start from instead of "
                  "the type's defaults; its values are kept, --config_overrides applied on top."},
    )
    trust_remote_code: bool = field(
        default=False,
        metadata={"help": "Run the code a --config_name file's auto_map names (a model defined in that folder); "
                  "without it such a file is refused: a config file is read as data."},
    )

    def __post_init__(self):
        # a --config_name file names its architecture: the run records it (run_config.json, the card, compare)
        if self.config_name is not None and self.model_type == TREELANG:
            named = config_file_model_type(self.config_name)
            if named is not None and named != TREELANG:
                self.model_type = named

    @property
    def is_treelang(self) -> bool:
        """Whether the model is the TreeLang encoder (else an architecture of transformers, patched)."""
        return self.model_type == TREELANG and self.config_name is None

    def patched_config(self, data_args: DataArguments, task: str):
        """The :class:`~hf_treelang.models.architectures.PatchedConfig` of another architecture for ``task``
        (``"mlm"``, ``"clm"`` or ``"root"``) on ``data_args``' data."""
        return patch_config(None if self.config_name is not None and self.model_type == TREELANG else
                            self.model_type, task, data_args.num_symbols, data_args.depth,
                            config_overrides=self.config_overrides, config_name=self.config_name,
                            trust_remote_code=self.trust_remote_code)

    def model_kwargs(self, depth: int) -> dict:
        """Architecture keyword arguments for ``TreeLangConfig.from_data``: every field of ARCHITECTURE_FIELDS."""
        kwargs = {name: getattr(self, name) for name in ARCHITECTURE_FIELDS}
        if kwargs["num_hidden_layers"] is None:
            kwargs["num_hidden_layers"] = depth
        return kwargs

    def config(self, data_args: DataArguments) -> TreeLangConfig:
        """The ``TreeLangConfig`` of a model trained from scratch on ``data_args``' data (its checks run here)."""
        return TreeLangConfig.from_data(
            num_symbols=data_args.num_symbols,
            depth=data_args.depth,
            filter_level=data_args.k_train,
            # an RHM has no σ, nor has a grammar file
            sigma=None if data_args.is_random_hierarchy or data_args.sigma is None else float(data_args.sigma),
            grammar_seed=data_args.grammar_seed,
            arity=data_args.sequence_arity,
            num_classes=data_args.num_classes,  # an RHM's n root classes: the root head's outputs
            **self.model_kwargs(data_args.depth),
        )


@dataclass
class TreeLangTrainingArguments(TrainingArguments):
    """``TrainingArguments`` with the paper's defaults, plus the preset and the log-spaced schedule.

    Only the fields the chosen ``--train_engine`` honours may leave their defaults
    (:data:`hf_treelang.train.honoured.HONOURED_FIELDS`): any other one is refused by :meth:`validate`, naming the
    field and the engine, rather than silently ignored."""

    output_dir: str | None = field(
        default=None, metadata={"help": "Output folder (default: outputs/run_<task>; outputs/run_<task>_smoke with "
                                         "--preset smoke)."}
    )
    preset: str = field(
        default="laptop",
        metadata={"help": "Settings for every field left unset: 'laptop' (the run found to show the paper's findings "
                  "on a 2-core CPU in <= 15 minutes: d = 64, d' = 256, no dropout, Adam 1e-3, P = 2**17) or 'paper' "
                  "(the authors' scripts: the paper's model, Adam 1e-4, P = 2**17 root / 2**18 MLM, 10**4 test "
                  "sequences, the paper's epochs; for run_clm.py, a task the paper has not, a choice: the paper's "
                  "model and optimiser on its MLM data and epochs); run_mlm.py also has 'laptop_long' (the laptop "
                  "run for 40 epochs, under an hour: it gets closer to BP_0); run_root.py, run_mlm.py and "
                  "run_clm.py also have 'smoke' (the laptop run cut to P = 2**13 and 4 epochs, 1,024 steps, with 4 "
                  "evaluations, on one thread: the first run, within two minutes on a 2-core CPU, written to "
                  "outputs/run_<task>_smoke); 'default' is the laptop preset's former name."},
    )
    per_device_train_batch_size: int = field(
        default=32, metadata={"help": f"Batch size (paper: 32). {_from_preset('per_device_train_batch_size')}"}
    )
    per_device_eval_batch_size: int = field(default=512, metadata={"help": "Batch size of evaluation passes."})
    num_train_epochs: float = field(default=None, metadata={"help": "Epochs (default: from --preset)."})
    learning_rate: float = field(
        default=1e-4, metadata={"help": f"Adam learning rate (paper: 1e-4). {_from_preset('learning_rate')}"}
    )
    lr_scheduler_type: str = field(
        default="constant",
        metadata={"help": f"Schedule (paper: constant, no warm-up). {_from_preset('lr_scheduler_type')}"},
    )
    optim: str = field(default="adamw_torch", metadata={
        "help": "Optimiser; AdamW with weight_decay=0 is Adam. adamw_torch_fused: the same update as one fused kernel "
                "(fewer kernels per step on a GPU; it rounds differently). Besides transformers' choices: 'muon' "
                "(torch.optim.Muon on the encoder blocks' matrices, the attention in-projection split into query, "
                "key and value, AdamW for the rest, one rate for both), 'ademamix' (AdEMAMix, Pagliardini et al. "
                "2025: β3 = 0.9999, α = 5, warmed up over the run) and 'grokfast_adamw' (Grokfast-EMA, Lee et al. "
                "2024: α = 0.98, λ = 2, before AdamW); hf_treelang.train.optimizers."})
    qk_learning_rate_multiplier: float = field(
        default=1.0,
        metadata={"help": "The learning rate of the attention's query and key weights (the in-projection's first "
                  "two thirds of rows) relative to --learning_rate, > 0 (default: 1, the same rate)."},
    )
    weight_decay: float = field(default=0.0, metadata={"help": "Weight decay (paper: none)."})
    adam_beta1: float = field(default=0.9, metadata={"help": "Adam β1 (paper: PyTorch default 0.9)."})
    adam_beta2: float = field(default=0.999, metadata={"help": "Adam β2 (paper: PyTorch default 0.999)."})
    adam_epsilon: float = field(default=1e-8, metadata={"help": "Adam ε (paper: PyTorch default 1e-8)."})
    seed: int = field(default=0, metadata={"help": "Seed of the model initialisation, data order and masks."})
    ddp_find_unused_parameters: bool | None = field(
        default=False, metadata={"help": "Data-parallel runs: search every step for parameters the loss does not "
                                         "use (a walk of the graph). Every parameter of the TreeLang models takes "
                                         "part in each step, so the default skips it; true for a model that has "
                                         "unused ones."})
    report_to: None | str | list[str] = field(
        default="tensorboard", metadata={"help": "Loggers: 'tensorboard' (default) or 'none'."}
    )
    logging_steps: float = field(default=100, metadata={"help": "Log the training loss every this many steps."})
    save_strategy: str = field(
        default="no", metadata={"help": "Checkpoints are log-spaced (num_checkpoints); set 'steps' for regular ones."}
    )
    num_evaluations: int | None = field(
        default=None,
        metadata={"help": "Evaluations (with the BP-KL callback) at log-spaced steps, plus step 0 (default: from "
                  "--preset; 0 disables evaluation)."},
    )
    num_checkpoints: int = field(default=6, metadata={"help": "Checkpoints at log-spaced steps (last included)."})
    early_stopping_patience: int | None = field(
        default=None,
        metadata={"help": "The validation stopping rule (hf_treelang.train.stopping): check the accuracy on the "
                  "num_eval validation sequences (held out from the training distribution; never a test set) every "
                  "--early_stopping_eval_steps steps and stop once this many checks in a row did not improve on the "
                  "best by more than --early_stopping_threshold; num_train_epochs / max_steps is then the longest "
                  "the run may train (default: none, train to the end)."},
    )
    early_stopping_threshold: float = field(
        default=0.0,
        metadata={"help": "δ of the validation stopping rule: a check improves when its accuracy exceeds the best so "
                  "far by more than δ (default 0)."},
    )
    early_stopping_eval_steps: int | None = field(
        default=None,
        metadata={"help": "Optimizer steps between the checks of the validation stopping rule (default: one "
                  "epoch)."},
    )
    early_stopping_min_steps: int = field(
        default=0,
        metadata={"help": "The floor of the validation stopping rule: no check before this step stops the run, so "
                  "that the plateau before learning is not taken for the end of learning (default 0: none)."},
    )
    resume_checkpoint_steps: int = field(
        default=0,
        metadata={"help": "Also checkpoint every this many steps only to resume from: the newest such checkpoint is "
                  "kept until the run ends, then removed (a stopped run loses at most this many steps; the result "
                  "and the finished folder are the same; 0, the default: none)."},
    )
    cpu_threads: int | None = field(
        default=None, metadata={"help": "torch.set_num_threads for this process (default: torch's choice)."}
    )
    max_grad_norm: float = field(
        default=0.0,
        metadata={"help": "Gradient clipping threshold; 0 (default) does not clip, as the paper and the authors' code "
                  "(transformers still logs the unclipped grad_norm)."},
    )
    checkpoint_epochs: list[int] | None = field(
        default=None,
        metadata={"help": "Also evaluate and save a checkpoint at the end of these epochs, each in [1, "
                  "num_train_epochs] (--preset paper: the authors' checkpoint epochs; default: none)."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Replace the previous run's files in a non-empty --output_dir (checkpoints, weights, "
                  "metrics, TensorBoard logs; other files stay). Without it (or --resume_from_checkpoint) a "
                  "non-empty --output_dir is refused, so that two runs never mix their files."},
    )
    remove_unused_columns: bool = field(
        default=False,
        metadata={"help": "Keep every column of the training data (False, required for MLM: the collator keys each "
                  "example's masks by its example_index column)."},
    )
    dataloader_drop_last: bool = field(default=False, metadata={"help": "Drop the last incomplete batch."})
    dataloader_pin_memory: bool = field(default=False, metadata={"help": "Pin memory (only useful on GPUs)."})
    train_engine: str = field(
        default="device",
        metadata={"help": "'device' (default): the training set lives on the device and is shuffled and masked there "
                  "from seeded generators, with a lean Trainer step (hf_treelang.train.trainer); 'dataloader': the "
                  "stock Trainer path (a DataLoader and the masking collator)."},
    )
    step_mode: str = field(
        default="auto",
        metadata={"help": "With --train_engine device: 'auto' (the whole step as one CUDA graph on a GPU in one "
                  "process with Adam and without fp16, else eager, logging why), 'eager' or 'cuda_graph' (which "
                  "also captures a --torch_compile model)."},
    )
    def __post_init__(self):
        # placeholders until apply_preset fills the sizes the user left unset
        if self.num_train_epochs is None:
            self.num_train_epochs = 1.0
        if self.num_evaluations is None:
            self.num_evaluations = 0
        custom = self.optim if self.optim in CUSTOM_OPTIMIZERS else None
        known = {str(name.value) for name in OptimizerNames}
        if custom is None and str(getattr(self.optim, "value", self.optim)) not in known:
            raise ValueError(f"`optim` must be one of {CUSTOM_OPTIMIZERS} (hf_treelang.train.optimizers) or of "
                             f"transformers' {sorted(known)}, got {self.optim!r}")
        if custom is not None:  # not an OptimizerNames member: transformers checks a stand-in, the run keeps its name
            self.optim = "adamw_torch"
        super().__post_init__()
        if custom is not None:
            self.optim = custom

    def validate(self) -> None:
        """Raise a ValueError/TypeError naming the field, its value and the allowed range for any bad value.

        Checks values only; the folders (output, checkpoint to resume) are checked by
        :func:`hf_treelang.train.loop.validate_arguments` through :mod:`hf_treelang.train.folders`.
        """
        check_output_folder("output_dir", self.output_dir)
        for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
            check_int(name, getattr(self, name), 1, MAX_SIZE)
        if self.max_steps != -1:  # -1: train for num_train_epochs
            check_int("max_steps", self.max_steps, 1, MAX_SIZE)
        check_real("num_train_epochs", self.num_train_epochs, 0.0)
        for name in ("learning_rate", "weight_decay", "adam_epsilon", "max_grad_norm"):
            check_real(name, getattr(self, name), 0.0)
        for name in ("adam_beta1", "adam_beta2"):
            if check_real(name, getattr(self, name), 0.0, 1.0) == 1.0:  # Adam divides by 1 - β^t
                raise ValueError(f"`{name}` must be a real number in [0, 1), got 1.0")
        smoothing = check_real("label_smoothing_factor", self.label_smoothing_factor, 0.0)
        if smoothing >= 1.0:  # at 1 the target is the uniform distribution: the labels are gone
            raise ValueError(f"`label_smoothing_factor` must be a real number in [0, 1), got {smoothing!r}")
        check_param("seed", self.seed)
        multiplier = self.qk_learning_rate_multiplier
        if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) or not multiplier > 0 \
                or multiplier == float("inf"):
            raise ValueError(f"`qk_learning_rate_multiplier` must be a finite real number > 0, got {multiplier!r}")
        if self.qk_learning_rate_multiplier != 1 and self.optim_name not in ("adamw_torch", *CUSTOM_OPTIMIZERS):
            raise ValueError(f"`qk_learning_rate_multiplier` {self.qk_learning_rate_multiplier} needs --optim "
                             f"adamw_torch or one of {CUSTOM_OPTIMIZERS} (hf_treelang.train.optimizers), got "
                             f"{self.optim_name!r}")
        if self.cpu_threads is not None:
            check_int("cpu_threads", self.cpu_threads, 1)
        check_int("dataloader_num_workers", self.dataloader_num_workers, 0)
        check_int("num_evaluations", self.num_evaluations, 0, MAX_SIZE)
        check_int("num_checkpoints", self.num_checkpoints, 0, MAX_SIZE)
        check_int("resume_checkpoint_steps", self.resume_checkpoint_steps, 0, MAX_SIZE)
        self.check_stopping_rule()
        if self.max_steps <= 0 and self.num_train_epochs == 0:
            raise ValueError("`num_train_epochs` must be a real number > 0 (or `max_steps` > 0), got 0.0")
        if self.fp16 and self.device.type != "cuda":  # transformers accepts it there and trains in fp32
            raise ValueError(f"`fp16` needs a CUDA GPU (its autocast and gradient scaler); this run trains on "
                             f"{self.device.type!r}, where it would train in fp32 unannounced: leave it off, or "
                             f"autocast in bfloat16 with {self.bf16_flags()}")
        self.check_engine()

    def bf16_flags(self) -> str:
        """The flags that train this run with bfloat16 autocast on this machine: ``--bf16 true``, with ``--use_cpu
        true`` where transformers accepts bf16 only on the CPU (no bf16 GPU and the CPU not asked for)."""
        from transformers.utils import is_torch_bf16_gpu_available, is_torch_xla_available

        if self.use_cpu or is_torch_bf16_gpu_available() or is_torch_xla_available():
            return "--bf16 true"
        return "--bf16 true --use_cpu true"

    def check_stopping_rule(self) -> None:
        """The validation stopping rule's arguments: each must be set with ``early_stopping_patience``."""
        if self.early_stopping_patience is None:
            for name, default in (("early_stopping_threshold", 0.0), ("early_stopping_eval_steps", None),
                                  ("early_stopping_min_steps", 0)):
                if getattr(self, name) != default:
                    raise ValueError(f"`{name}` {getattr(self, name)!r} needs --early_stopping_patience (the "
                                     "validation stopping rule is off without it)")
            return
        check_int("early_stopping_patience", self.early_stopping_patience, 1, MAX_SIZE)
        check_real("early_stopping_threshold", self.early_stopping_threshold, 0.0, 1.0)
        if self.early_stopping_eval_steps is not None:
            check_int("early_stopping_eval_steps", self.early_stopping_eval_steps, 1, MAX_SIZE)
        check_int("early_stopping_min_steps", self.early_stopping_min_steps, 0, MAX_SIZE)

    def check_schedule(self, steps: int) -> None:
        """The learning-rate schedule's arguments against the run's ``steps`` optimiser steps: with
        ``warmup_stable_decay`` (a warm-up, a constant rate, then a decay over ``num_decay_steps``), its
        ``lr_scheduler_kwargs`` must name ``num_decay_steps`` and fit warm-up and decay into the run."""
        if str(getattr(self.lr_scheduler_type, "value", self.lr_scheduler_type)) != WARMUP_STABLE_DECAY:
            self.check_scheduler_builds(steps)
            return
        kwargs = dict(self.lr_scheduler_kwargs or {})
        unknown = sorted(set(kwargs) - set(WSD_KWARGS))
        if unknown:
            raise ValueError(f"`lr_scheduler_kwargs` of {WARMUP_STABLE_DECAY!r} take {WSD_KWARGS}, got {unknown[0]!r}")
        if "num_decay_steps" not in kwargs:
            raise ValueError(f"`lr_scheduler_kwargs` must give num_decay_steps (an integer in [0, {steps}], the "
                             f"steps of the final decay) with --lr_scheduler_type {WARMUP_STABLE_DECAY}, got "
                             f"{kwargs!r}")
        warmup = self.get_warmup_steps(steps)
        check_int("num_decay_steps", kwargs["num_decay_steps"], 0, max(steps - warmup, 0))
        if kwargs.get("num_stable_steps") is not None:
            check_int("num_stable_steps", kwargs["num_stable_steps"], 0, steps)
        for name in ("warmup_type", "decay_type"):
            check_choice(name, kwargs.get(name, "linear"), WSD_SHAPES)
        check_real("min_lr_ratio", kwargs.get("min_lr_ratio", 0.0), 0.0, 1.0)
        check_real("num_cycles", kwargs.get("num_cycles", 0.5), 0.0)

    def check_scheduler_builds(self, steps: int) -> None:
        """Build the schedule as the Trainer will (transformers' ``get_scheduler`` on a stand-in optimizer), so that
        a type that needs ``lr_scheduler_kwargs`` it was not given (``cosine_with_min_lr`` needs ``min_lr`` or
        ``min_lr_rate``) or one it does not take is refused in one line before any work."""
        import torch
        from transformers import get_scheduler

        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=float(self.learning_rate) or 1.0)
        try:
            get_scheduler(self.lr_scheduler_type, optimizer, num_warmup_steps=self.get_warmup_steps(steps),
                          num_training_steps=steps, scheduler_specific_kwargs=dict(self.lr_scheduler_kwargs or {}))
        except (ValueError, TypeError, KeyError) as error:
            kind = str(getattr(self.lr_scheduler_type, "value", self.lr_scheduler_type))
            raise ValueError(f"`lr_scheduler_type` {kind!r} with `lr_scheduler_kwargs` "
                             f"{dict(self.lr_scheduler_kwargs or {})!r} cannot be built: "
                             f"{str(error).splitlines()[0]}") from None

    def check_engine(self) -> None:
        """The training engine's choices (:mod:`hf_treelang.train.trainer`), each error naming the argument."""
        check_choice("train_engine", self.train_engine, TRAIN_ENGINES)
        check_choice("step_mode", self.step_mode, STEP_MODES)
        check_honoured(self)  # every field the engine would ignore (gradient accumulation on the device): default
        if self.train_engine == "dataloader":
            if self.step_mode == "cuda_graph":
                raise ValueError("`step_mode` 'cuda_graph' needs --train_engine device, got --train_engine dataloader")
            return
        if self.step_mode == "cuda_graph":
            obstacles = self.cuda_graph_obstacles(requested=True)
            if obstacles:
                raise ValueError("`step_mode` 'cuda_graph' is not possible here: " + "; ".join(obstacles)
                                 + " (use --step_mode auto or eager)")

    @property
    def optim_name(self) -> str:
        """``optim`` as its string (the Trainer turns it into an ``OptimizerNames`` member)."""
        return str(getattr(self.optim, "value", self.optim))

    def cuda_graph_obstacles(self, requested: bool = False) -> list:
        """What keeps this run from capturing its step as one CUDA graph (empty when nothing does); ``--step_mode
        auto`` trains eagerly then, ``cuda_graph`` (``requested``) is refused before any work. Every built-in
        learning-rate schedule runs inside the graph (the rate is a device tensor the scheduler writes).

        A compiled model (``--torch_compile``) is captured only when asked for with ``--step_mode cuda_graph``: the
        graph then replays inductor's fused kernels (fewer per step). Compile modes that make CUDA graphs of their
        own (``reduce-overhead``, ``max-autotune``) cannot be captured a second time."""
        obstacles = []
        if self.device.type != "cuda":
            obstacles.append(f"the model runs on {self.device.type!r}, not on a CUDA GPU")
        if self.world_size > 1:
            obstacles.append(f"{self.world_size} processes (CUDA graphs here are for one process)")
        if self.n_gpu > 1:
            obstacles.append(f"{self.n_gpu} GPUs in one process (DataParallel is not captured)")
        if self.fp16:
            obstacles.append("fp16 (its gradient scaler syncs with the host)")
        optim = self.optim_name
        if optim not in CAPTURABLE_OPTIMIZERS:
            obstacles.append(f"optim {optim!r} (only {', '.join(CAPTURABLE_OPTIMIZERS)} steps inside a graph)")
        elif self.qk_learning_rate_multiplier != 1:
            obstacles.append(f"qk_learning_rate_multiplier {self.qk_learning_rate_multiplier} (its row blocks are "
                             "fed their gradients on the host)")
        if self.gradient_accumulation_steps != 1:
            obstacles.append(f"gradient_accumulation_steps {self.gradient_accumulation_steps}")
        if getattr(self, "gradient_checkpointing", False) or getattr(self, "activation_checkpointing", False):
            obstacles.append("gradient checkpointing (its recomputation is not captured)")
        compile_mode = self.torch_compile_mode or os.environ.get("ACCELERATE_DYNAMO_MODE")  # accelerate's fallback
        if self.torch_compile and compile_mode in COMPILE_MODES_WITH_GRAPHS:
            obstacles.append(f"torch_compile_mode {compile_mode!r} (inductor's own CUDA graphs are not captured a "
                             "second time; use 'default' or 'max-autotune-no-cudagraphs')")
        elif self.torch_compile and self.torch_compile_backend == "cudagraphs":
            obstacles.append("torch_compile_backend 'cudagraphs' (its own CUDA graphs are not captured a second time)")
        elif self.torch_compile and not requested:
            obstacles.append("torch_compile (a compiled step is captured only with --step_mode cuda_graph)")
        return obstacles


def config_file_model_type(path) -> str | None:
    """The ``model_type`` a config file (a config.json or its folder's) names, None when it cannot be read (the
    run's checks then say why)."""
    candidates = [Path(path), Path(path) / "config.json"]
    found = next((candidate for candidate in candidates if candidate.is_file()), None)
    if found is None:
        return None
    try:
        value = json.loads(found.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    named = value.get("model_type") if isinstance(value, dict) else None
    return named if isinstance(named, str) and named else None


def check_choice(name: str, value, choices: tuple) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}, got {value!r}")


@dataclass
class EnsembleArguments:
    """The scripts' ensemble flags: which single runs to train together (not part of any run's arguments).

    ``--ensemble_seeds S… --ensemble_k_train K…`` expands the command line's run into one run per (S, K), written to
    ``OUTPUT_DIR/members/seed{S}-k{K}/`` (:func:`hf_treelang.train.run.ensemble_runs`).
    """

    ensemble_seeds: list[int] | None = field(
        default=None,
        metadata={"help": "Train an ensemble: the model seeds S of its members, which are every (S, K) with K in "
                  "--ensemble_k_train; member (S, K) is the run --seed S --k_train K and is written to "
                  "OUTPUT_DIR/members/seed{S}-k{K}/ (default: a single run, or [--seed] with --ensemble_k_train)."},
    )
    ensemble_k_train: list[int] | None = field(
        default=None,
        metadata={"help": "Ensemble: the k_train of its members, each in [0, depth] (default: [--k_train])."},
    )
    ensemble_mode: str = field(
        default="auto",
        metadata={"help": "Ensemble: 'stacked' (one batched model, one kernel per layer for all members), "
                  "'sequential' (one member after another) or 'auto' (stacked on a GPU, and on the CPU for small "
                  "models; hf_treelang.train.loop.choose_ensemble_mode)."},
    )

    # the ensemble's own folder and the checkpoint it resumes from: the command line's --output_dir and
    # --resume_from_checkpoint, which its member runs do not carry (set by hf_treelang.train.run)
    output_dir: str | None = field(default=None, init=False)
    resume_from_checkpoint: str | None = field(default=None, init=False)

    @property
    def requested(self) -> bool:
        """Whether the command line asks for an ensemble."""
        return bool(self.ensemble_seeds or self.ensemble_k_train)

    def validate(self, depth: int) -> None:
        """Each value in range and no value repeated, the errors naming the flag."""
        check_choice("ensemble_mode", self.ensemble_mode, ENSEMBLE_MODES)
        for name, high in (("ensemble_seeds", LIMITS["seed"].high), ("ensemble_k_train", depth)):
            values = list(getattr(self, name) or [])
            for value in values:
                check_int(name, value, 0, high)
            if len(set(values)) != len(values):
                raise ValueError(f"`{name}` repeats a value (got {values}): a repeated (seed, k_train) member would "
                                 "train the same run twice")


NONE_VALUE = "none"  # `--flag none` gives an optional number or list field no value (the preset's is not used)


@functools.lru_cache(maxsize=1)
def nullable_fields() -> frozenset:
    """The fields of the run dataclasses that may be None and hold numbers or lists (not text, where "none" is a
    value of its own: ``--report_to none``)."""
    names = set()
    for cls in (DataArguments, ModelArguments, TreeLangTrainingArguments):
        for name, hint in typing.get_type_hints(cls).items():
            options = typing.get_args(hint)
            if type(None) in options and str not in options:
                names.add(name)
    return frozenset(names)


def _none_flags(argv: list) -> tuple:
    """(``argv`` without the ``--flag none`` pairs of :func:`nullable_fields`, the names they give None)."""
    nullable, kept, nones = nullable_fields(), [], set()
    index = 0
    while index < len(argv):
        token = argv[index]
        name = token[2:].replace("-", "_") if token.startswith("--") and "=" not in token else None
        if name in nullable and index + 1 < len(argv) and argv[index + 1] == NONE_VALUE and (
                index + 2 == len(argv) or argv[index + 2].startswith("--")):
            nones.add(name)
            index += 2
            continue
        kept.append(token)
        index += 1
    return kept, nones


def _explicit_keys(argv: list) -> set:
    keys = set()
    for token in argv:
        if token.startswith("--"):
            keys.add(token[2:].split("=", 1)[0].replace("-", "_"))
    return keys


def apply_preset(task: str, data_args: DataArguments, model_args: ModelArguments,
                 training_args: TreeLangTrainingArguments, explicit: set):
    """Fill every field the user did not set from ``PRESETS[task][training_args.preset]``.

    The model's fields are the preset's for a model trained from scratch; a fine-tuning run's architecture comes from
    its checkpoint (``--model_name_or_path``).
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    training_args.preset = PRESET_ALIASES.get(training_args.preset, training_args.preset)
    if training_args.preset not in PRESETS[task]:
        raise ValueError(f"`preset` must be one of {sorted(PRESETS[task])}, got {training_args.preset!r}")
    for key, value in PRESETS[task][training_args.preset].items():
        if key in explicit or PRESET_PARTS.get(key) in explicit:
            continue
        if hasattr(data_args, key):
            if getattr(data_args, key) is None:
                setattr(data_args, key, value)
        elif hasattr(model_args, key):
            setattr(model_args, key, value)
        elif key == "lr_scheduler_type":  # TrainingArguments.__post_init__ turned the user's into the enum
            training_args.lr_scheduler_type = SchedulerType(value)
        else:
            setattr(training_args, key, value)


class ArgumentParser(HfArgumentParser):
    """``HfArgumentParser`` whose errors (an unknown flag, a value of the wrong type) are a ``ValueError`` with
    argparse's one-line message, reported like every other bad argument, not a usage block of every flag."""

    def error(self, message: str):
        raise ValueError(f"{message} (see --help for the flags and their types)")


# The transformers flags a script's --help lists beside the package's own (the data, model and ensemble arguments and
# the fields TreeLangTrainingArguments declares): the ones used most. --help-all lists every flag; each is accepted.
COMMON_TRAINING_FLAGS = ("max_steps", "warmup_steps", "lr_scheduler_kwargs", "label_smoothing_factor", "bf16", "tf32",
                         "torch_compile", "use_cpu", "resume_from_checkpoint", "disable_tqdm", "run_name",
                         "save_total_limit", "push_to_hub", "hub_model_id")
# The flags of some tasks only, by task: the --help of another task's script leaves them out.
TASK_ONLY_FLAGS = {**dict.fromkeys(("mask_rate", *MASK_OPTION_FIELDS), ("mlm",)),
                   **dict.fromkeys(("model_name_or_path", "freeze_encoder", "classifier_hidden_size"), ("finetune",)),
                   **dict.fromkeys(("ensemble_seeds", "ensemble_k_train", "ensemble_mode"), ("root", "mlm"))}


def help_flags(task: str) -> set:
    """The fields whose flags ``--help`` of ``task``'s script lists: the package's own and
    :data:`COMMON_TRAINING_FLAGS`, less the other tasks' (:data:`TASK_ONLY_FLAGS`)."""
    names = {f.name for cls in (DataArguments, ModelArguments, EnsembleArguments) for f in fields(cls) if f.init}
    names |= set(vars(TreeLangTrainingArguments)["__annotations__"]) | set(COMMON_TRAINING_FLAGS)
    return {name for name in names if task in TASK_ONLY_FLAGS.get(name, (task,))}


def parser(task: str | None = None) -> HfArgumentParser:
    """The scripts' parser: the three run dataclasses and :class:`EnsembleArguments`; with ``task``, its ``--help``
    lists :func:`help_flags` and ``--help-all`` every flag (:func:`hf_treelang.help_format.brief_help`)."""
    built = ArgumentParser((DataArguments, ModelArguments, TreeLangTrainingArguments, EnsembleArguments),
                           formatter_class=HelpFormatter, allow_abbrev=False)  # no prefix of a flag is a flag
    if task is None:
        return built
    return brief_help(built, help_flags(task), hidden="the other fields of transformers' TrainingArguments")


def _renamed(values: dict, where: str) -> dict:
    """``values`` with the former names of :data:`RENAMED_ARGUMENTS` replaced (a warning each; both is an error)."""
    values = dict(values)
    for old, new in RENAMED_ARGUMENTS.items():
        if old in values and new in values:
            raise ValueError(f"{where}: {old!r} is the former name of {new!r}: give {new!r} only")
        if old in values:
            warn_renamed(old, new, where)
            values[new] = values.pop(old)
    return values


def read_argument_file(path: str) -> dict:
    """The JSON object of a scripts' argument file, or a ValueError naming the file."""
    if not os.path.isfile(path):
        raise ValueError(f"argument file {path!r} does not exist")
    try:
        with open(path) as handle:
            values = json.load(handle)
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"argument file {path!r} is not valid JSON: {error}") from None
    if not isinstance(values, dict):
        raise ValueError(f"argument file {path!r} must hold a JSON object of argument names and values "
                         f"(like {{\"depth\": 4}}), got a {type(values).__name__}")
    return values


def parse_values(task: str, values: dict, where: str = "run arguments") -> tuple:
    """Parse a dict of the scripts' argument names (``HfArgumentParser.parse_dict``) and apply the preset.

    Returns:
        ``(data_args, model_args, training_args, ensemble_args, explicit)`` (``explicit``: the names given); nothing is
        validated yet.
    """
    values = _renamed(values, where)
    try:
        parsed = parser().parse_dict(values)
    except (ValueError, TypeError) as error:
        raise type(error)(f"{where}: {error}") from None
    return _finish(task, *parsed, explicit=set(values))


def parse_command_line(task: str, argv: list | None = None) -> tuple:
    """Parse ``argv`` (default ``sys.argv[1:]``): flags, or one ``.json`` file of argument names and values.

    Returns:
        ``(data_args, model_args, training_args, ensemble_args, explicit)`` with the preset applied (``explicit``: the
        names given); not validated yet.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 1 and argv[0].endswith(".json"):
        return parse_values(task, read_argument_file(argv[0]), f"argument file {argv[0]!r}")
    explicit = _explicit_keys(argv)
    for old, new in RENAMED_ARGUMENTS.items():
        if old in explicit and new in explicit:
            raise ValueError(f"--{old} is the former name of --{new}: pass --{new} only")
        if old in explicit:
            warn_renamed(f"--{old}", f"--{new}", "the training scripts")
            explicit = (explicit - {old}) | {new}
    argv, nones = _none_flags(argv)
    parsed = parser(task).parse_args_into_dataclasses(args=argv)
    for name in nones:  # `--flag none`: no value, given (so the preset does not fill it)
        setattr(next(arguments for arguments in parsed if hasattr(arguments, name)), name, None)
    return _finish(task, *parsed, explicit=explicit)


def _finish(task: str, data_args, model_args, training_args, ensemble_args, *, explicit: set) -> tuple:
    apply_preset(task, data_args, model_args, training_args, explicit)
    if "output_dir" not in explicit:
        training_args.output_dir = default_output_dir(task, training_args.preset)
    apply_grammar_file(data_args, explicit)
    data_args.complete_hierarchy()
    data_args.mask_rate = check_mask_rate(data_args.mask_rate)  # 0 is the paper's single leaf: None
    if data_args.block_mask_fraction == 0:  # no block masks, as None
        data_args.block_mask_fraction = None
    if task == "finetune" and model_args.model_name_or_path is None:
        model_args.model_name_or_path = DEFAULT_OUTPUT_DIRS["mlm"]
    check_architecture_flags(model_args, ensemble_args, explicit)
    return data_args, model_args, training_args, ensemble_args, frozenset(explicit)


def check_architecture_flags(model_args: ModelArguments, ensemble_args, explicit: set) -> None:
    """The TreeLang encoder is sized by its own flags, another architecture by ``--config_overrides``: a flag of the
    one given for the other is refused, as is a stacked ensemble of another architecture."""
    if not model_args.is_treelang:
        given = sorted(set(explicit) & set(ARCHITECTURE_FIELDS))
        if given:
            raise ValueError(f"--{given[0]} sizes the TreeLang encoder; a {model_args.model_type!r} model takes "
                             f"its sizes from --config_overrides (e.g. 'hidden_size=64,num_hidden_layers=4')")
        if ensemble_args is not None and ensemble_args.requested:
            raise ValueError(f"--ensemble_seeds / --ensemble_k_train stack TreeLang encoders into one model; a "
                             f"{model_args.model_type!r} model trains one run per process: run its seeds as a "
                             f"sweep (hf-treelang sweep) or one by one")
    elif model_args.config_overrides is not None:
        raise ValueError(f"--config_overrides {model_args.config_overrides!r} sets fields of another architecture "
                         f"(--model_type); the TreeLang encoder is sized by its own flags (--hidden_size, ...)")


__all__ = [
    "DataArguments",
    "ModelArguments",
    "TreeLangTrainingArguments",
    "PRESETS",
    "apply_grammar_file",
    "apply_preset",
    "EnsembleArguments",
    "grammar_content_hash",
    "read_grammar_file",
    "parse_command_line",
    "parse_values",
]
