"""Trainer callbacks: the network against the exact BP oracle during training (paper Fig. 1c/1d, 2b, 3a, App. E.4).

* :class:`BPKLCallback` — at every evaluation, on fixed held-out inputs whose BP targets are computed once in
  ``on_train_begin``: mean D_KL(BP_k || model) for every k in 0..ℓ on in-sample inputs (``eval_kl_bp_k{k}``) with
  its standard error over the sequences (``eval_kl_se_bp_k{k}``: what tells two KL curves apart from sampling), the
  paired standard error of each level's KL less the closest level's over the same sequences
  (``eval_kl_gap_se_bp_k{k}``, 0 for the closest BP_k: whether the closest BP is closer than sampling can tell; the
  per-level errors cannot say it, the levels' means being over the same sequences), argmax
  agreement and Spearman correlation with every BP_k (``eval_match_bp_k{k}``, ``eval_spearman_bp_k{k}``, and the
  matched BP_{k_train} as ``eval_match_bp`` / ``eval_spearman_bp``), and for every k_test set the network's accuracy
  and the matched BP_{k_train} accuracy on the same inputs (``eval_acc_ktest{k}``, ``eval_bp_acc_ktest{k}``).
  BP's reference accuracy comes from at least ``reference_size`` sequences per k_test (2,000 in a training run,
  :data:`REFERENCE_SIZE`): the first ``max(n_test, reference_size)`` trees of the test set's own split stream, of
  which the run's test set is the prefix, so that BP's number is not the noisy estimate a 256-sequence test set
  gives (±0.03); the network's accuracy stays on the run's test set. Next-leaf prediction (task ``"clm"``, the
  causal LM) predicts every leaf of a sequence from the leaves before it: the same keys average over the sequences
  *and* their 2**ℓ positions (BP_k's targets are its next-leaf distributions,
  :func:`hf_treelang.core.oracle.bp_distributions`), and ``eval_excess_loss`` is the model's cross-entropy per leaf
  on the in-sample sequences minus their exact loss under the matched BP_{k_train}, −log P(x) / 2**ℓ averaged over
  them (:func:`hf_treelang.core.oracle.next_leaf_loss`): 0 for the exact model. A causal run also logs the KL to the
  matched BP_{k_train} per position, ``eval_kl_position{i}`` for i = 0 .. 2**ℓ − 1 = the mean over the in-sample
  sequences of D_KL(BP_{k_train}(x_i | x_<i) ‖ model), from the same arrays as ``eval_kl_bp_k{k_train}`` (which is
  their mean over positions); ``hf-treelang dynamics`` draws them as a heat map over training.
  For a grammar other than the paper's (a Random Hierarchy Model, whose rules use few of the tuples, or a grammar
  file's whose rules leave a pair of children without a parent, :func:`may_give_probability_zero`), BP_k can give
  an input of another filter level probability zero: its comparisons are means over the inputs where it is defined,
  and ``eval_impossible_bp_k{k}`` is the fraction it leaves out; BP_{k_train}'s accuracy on a k_test set likewise,
  with ``eval_bp_impossible_ktest{k}`` (:func:`hf_treelang.core.oracle.bp_defined`).
* :class:`LogSpacedScheduleCallback` — evaluations and checkpoints at log-spaced steps (the paper's log time axis).
* :class:`ResumeCheckpointCallback` — a checkpoint every N steps only to resume from, the newest one kept until the end.
* :class:`MetricsHistoryCallback` — the evaluation history as a JSON file, rewritten at every evaluation.
* :class:`ConsoleCallback` — one line per evaluation on the console (:func:`evaluation_line`) instead of the
  Trainer's raw dicts, and a progress bar only when the output is a terminal.

Why ``trainer.log``: in transformers 5, ``Trainer.evaluate`` appends its metrics to ``state.log_history`` and calls
``on_log`` (TensorBoard, JSON) *before* ``on_evaluate``, so keys a callback adds to ``metrics`` in ``on_evaluate``
reach neither. :class:`BPKLCallback` therefore logs its keys itself through ``Trainer.log`` (bound with
:meth:`BPKLCallback.attach`), which appends them to ``state.log_history`` (hence ``trainer_state.json`` and resumed
runs) and dispatches them to every ``on_log`` (hence TensorBoard); it also adds them to the ``metrics`` dict that
``Trainer.evaluate`` returns.

Glossary: ``n`` inputs, ``l`` depth (ℓ), ``q`` symbols, ``k`` filter level.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.metrics import accuracy, compare_with_bp, kl_divergence, log_probabilities
from hf_treelang.core.noise import mean_error
from hf_treelang.core.oracle import (
    NEXT_LEAF_TASK,
    TASKS,
    TaskInputs,
    bp_accuracy,
    bp_defined,
    bp_distributions,
    next_leaf_loss,
    task_inputs,
)
from hf_treelang.core.params import MAX_SIZE, check_int
from hf_treelang.core.sampling import sample_trees
from hf_treelang.jsonio import read_json_object, write_json_atomic
from hf_treelang.models.architectures import slow_path
from hf_treelang.progress import format_duration, is_terminal

from .contention import contention_line, cpu_share

SPECIAL_MASS_KEY = "mass_on_special_tokens"  # the mean probability the model puts outside the q symbols
IMPOSSIBLE_KEY = "impossible_bp_k"  # a grammar other than the paper's: eval_impossible_bp_k{k}, the in-sample rows
# BP_k gives probability zero (left out of its KL, agreement and Spearman means)
KL_POSITION_KEY = "kl_position"  # next-leaf prediction: eval_kl_position{i}, the KL to BP_{k_train} at position i
KL_GAP_SE_KEY = "kl_gap_se_bp_k"  # eval_kl_gap_se_bp_k{k}: the paired standard error of KL(BP_k) - KL(closest BP)
REFERENCE_SIZE = 2000  # sequences per k_test behind BP's reference accuracy in a training run (s.e. <= 0.011)
MAX_REFERENCE_LEAVES = 1 << 24  # a deeper tree gets fewer reference sequences: n * 2**depth <= 2**24 (128 MiB)
SLOW_PATH_STEPS = 3  # the steps a model on a slow path is timed over before the console says what the run takes


@dataclass
class BPTargets:
    """Fixed held-out inputs of :class:`BPKLCallback` and their BP targets (computed once).

    Attributes:
        in_sample: the in-sample inputs (the training distribution, one masked leaf for MLM).
        marginals: ``marginals[k]`` (n, q) float64, BP_k's distribution of the predicted variable, k = 0..ℓ;
            (n, 2**ℓ, q) BP_k's next-leaf distributions for next-leaf prediction.
        tests: ``tests[k_test]`` the inputs, masked positions and labels of the k_test set (the network's).
        bp_accuracy: ``bp_accuracy[k_test]`` accuracy of the matched BP_{k_train} on the k_test reference set.
        reference_sizes: ``reference_sizes[k_test]`` the sequences of that reference set (``len(tests[k_test])``
            when no larger reference was asked for).
        defined, bp_impossible: for a grammar other than the paper's (a Random Hierarchy Model), whose BP_k may give
            a sequence of another filter level probability zero: the in-sample rows where each BP_k is defined (its
            comparisons are means over them) and the fraction of each k_test reference set where BP_{k_train} is not
            (its accuracy is over the others); empty for the paper's grammars, where every sequence is possible.
    """

    in_sample: TaskInputs
    marginals: dict
    tests: dict = field(default_factory=dict)
    bp_accuracy: dict = field(default_factory=dict)
    reference_sizes: dict = field(default_factory=dict)
    exact_loss: float | None = None  # next-leaf prediction: -log P_{k_train}(x) / 2**l, mean over the in-sample set
    defined: dict = field(default_factory=dict)  # {k: (n,) bool} in-sample rows where BP_k is defined (see below)
    bp_impossible: dict = field(default_factory=dict)  # {k_test: fraction of its reference set BP_{k_train} excludes}


def may_give_probability_zero(grammar: Grammar) -> bool:
    """Whether BP_k of ``grammar`` may meet a sequence it gives probability zero, whose rows its comparisons then
    leave out (:attr:`BPTargets.defined`): every grammar but the paper's family, a binary one with one shared M in
    which every child pair (b, c) has a parent and every symbol can be the root."""
    if not grammar.is_shared_binary:
        return True
    return bool((grammar.M.sum(0) == 0).any() or (grammar.root_prior == 0).any())  # (q, q) pairs, (q,) roots


def symbol_log_probabilities(logits: torch.Tensor, num_symbols: int, num_classes: int | None = None) -> tuple:
    """(log-probabilities over the q symbols, the mean probability outside them) of ``logits`` (..., V), V >= q.

    The first q ids are the symbols (:class:`hf_treelang.core.vocabulary.Vocabulary`); an architecture of
    transformers also scores its special ids. The symbols' logits are renormalised among themselves, which is the
    model's distribution conditioned on predicting a symbol, and the probability the model put on the other ids,
    averaged over the predictions, is returned beside it so that nothing is renormalised away silently (0.0 when
    V = q). A root head of ``num_classes`` n < q outputs (a Random Hierarchy Model's classes, the symbols
    0 .. n-1; ``TreeLangConfig.num_classes``) scores those alone (V = n): the other q − n symbols get probability 0.

    Example:
        >>> log_p, mass = symbol_log_probabilities(torch.log(torch.tensor([[0.3, 0.5, 0.2]])), num_symbols=2)
        >>> [round(v, 3) for v in log_p.exp()[0].tolist()], round(mass, 3)
        ([0.375, 0.625], 0.2)
    """
    logits = logits.to(torch.float64)
    if num_classes is not None and num_classes < num_symbols:
        if logits.shape[-1] != num_classes:
            raise ValueError(f"the root head's logits cover {logits.shape[-1]} ids, not its num_classes = {num_classes}")
        rest = torch.full((*logits.shape[:-1], num_symbols - num_classes), -torch.inf, dtype=torch.float64,
                          device=logits.device)
        logits = torch.cat([logits, rest], -1)  # (..., q): the symbols that are no class get probability 0
    if logits.shape[-1] < num_symbols:
        raise ValueError(f"the model's logits cover {logits.shape[-1]} ids, fewer than the q = {num_symbols} symbols")
    symbols = log_probabilities(logits[..., :num_symbols], from_logits=True)  # (..., q)
    if logits.shape[-1] == num_symbols:
        return symbols, 0.0
    inside = torch.logsumexp(logits[..., :num_symbols], -1) - torch.logsumexp(logits, -1)  # (...,) log P(symbol)
    return symbols, float((-torch.expm1(inside)).mean()) if inside.numel() else 0.0


def reference_count(num_test: int, depth: int, reference_size: int | None, arity: int = 2) -> int:
    """Sequences behind BP's reference accuracy for a test set of ``num_test``: ``max(num_test, reference_size)``,
    the extra sequences capped at 2**24 leaves of s**depth each (a deep tree gets fewer); ``num_test`` when
    ``reference_size`` is None.

    Example:
        >>> reference_count(256, depth=4, reference_size=2000), reference_count(10_000, 4, 2000)
        (2000, 10000)
    """
    if reference_size is None:
        return num_test
    return max(num_test, min(reference_size, max(1, MAX_REFERENCE_LEAVES // arity**depth)))


def _evaluation_set(value, default_seed: int) -> tuple:
    """(leaves, roots, sampling_seed) from an EvaluationSet, a (leaves, roots[, seed]) tuple or bare leaves."""
    if hasattr(value, "leaves"):
        return value.leaves, value.roots, value.sampling_seed
    if isinstance(value, tuple):
        leaves, roots, *seed = value
        return leaves, roots, seed[0] if seed else default_seed
    return value, None, default_seed


def _gap_standard_errors(per_level: dict, means: dict, prefix: str) -> dict:
    """``{prefix}kl_gap_se_bp_k{k}`` for every level of ``per_level`` (k -> (n,) per-sequence KL to BP_k, all over
    the same sequences): the standard error of the mean of KL_k - KL_c per sequence, c the level of smallest mean KL
    in ``means`` (the closest BP; 0 for it). The levels' means are over the same sequences, so this paired error,
    not the levels' own errors combined, says whether the closest BP is closer than another by more than sampling."""
    if len(per_level) < 2:
        return {}
    closest = min(sorted(means), key=lambda k: means[k] if math.isfinite(means[k]) else math.inf)
    out = {}
    for k, per_sequence in per_level.items():
        gap = per_sequence - per_level[closest]  # (n,)
        out[f"{prefix}{KL_GAP_SE_KEY}{k}"] = mean_error(gap)
    return out


class BPKLCallback(TrainerCallback):
    """Compare the network with the exact BP_k oracles at every evaluation.

    Args:
        grammar: the grammar of the data.
        depth: ℓ.
        k_train: the filter level of the training data (the matched BP).
        task: ``"root"`` (root classification: the prediction is the root), ``"mlm"`` (one masked leaf) or ``"clm"``
            (next-leaf prediction: every leaf from the leaves before it).
        in_sample: held-out sequences drawn like the training data (k = k_train), on which the KL curves are
            computed: an :class:`hf_treelang.train.data.EvaluationSet` or the leaves (n, 2**ℓ).
        test_sets: ``{k_test: EvaluationSet}`` (or ``(leaves, roots[, sampling_seed])``) held-out sets of every
            filter level; the roots are only used by the root task (the MLM label is the masked leaf).
        seed: the sampling seed of sets given as bare arrays (set k_test gets ``seed + 1 + k_test``); an
            EvaluationSet's masks come from its own sampling seed (:mod:`hf_treelang.core.masking`).
        batch_size: inputs per forward pass of the network.
        reference_size: at least this many sequences per k_test behind BP_{k_train}'s reference accuracy: the first
            ``max(n_test, reference_size)`` trees ``sample_trees(grammar, ·, depth, k_test, sampling_seed)`` of the
            set's split stream (its masks from the same seed), whose prefix the test set is when it was drawn from
            that stream; capped at 2**24 leaves. ``None`` (default): BP on the test sets themselves. Training runs
            pass :data:`REFERENCE_SIZE`.

    Use :meth:`attach` to add the callback to a ``Trainer`` (it needs ``Trainer.log``, see the module docstring).
    """

    def __init__(
        self,
        grammar: Grammar,
        depth: int,
        k_train: int,
        task: str,
        in_sample,
        test_sets: dict | None = None,
        *,
        seed: int = 0,
        batch_size: int = 1024,
        reference_size: int | None = None,
    ):
        if not isinstance(grammar, Grammar):
            raise TypeError(f"grammar must be a hf_treelang.Grammar, got {type(grammar).__name__}")
        if task not in TASKS + (NEXT_LEAF_TASK,):
            raise ValueError(f"task must be one of {TASKS + (NEXT_LEAF_TASK,)}, got {task!r}")
        self.grammar = grammar
        self.depth = grammar.check_depth(depth)  # per-level rules (a Random Hierarchy Model) fix it
        self.k_train = check_int("k_train", k_train, 0, self.depth)
        self.task = task
        self.seed = check_int("seed", seed, 0)
        self.in_sample = _evaluation_set(in_sample, self.seed)
        self.test_sets = {}
        for k_test, value in (test_sets or {}).items():
            check_int("k_test", k_test, 0, self.depth)
            self.test_sets[int(k_test)] = _evaluation_set(value, self.seed + 1 + int(k_test))
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.reference_size = None if reference_size is None else check_int("reference_size", reference_size, 1,
                                                                            MAX_SIZE)
        self.targets: BPTargets | None = None
        self.trainer = None
        self.special_mass = 0.0  # of the last model_log_probabilities call: the mean probability off the symbols

    def attach(self, trainer) -> "BPKLCallback":
        """Add this callback to ``trainer`` and log through ``trainer.log``; returns self."""
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    def prepare(self) -> BPTargets:
        """Fix the masked positions (MLM) and compute every BP target once; idempotent."""
        if self.targets is not None:
            return self.targets
        q = self.grammar.num_symbols
        flag = may_give_probability_zero(self.grammar)  # BP_k may be undefined on some rows (BPTargets.defined)
        bps = {k: BeliefPropagation(self.grammar, self.depth, k, on_impossible="flag" if flag else "raise")
               for k in range(self.depth + 1)}
        leaves, roots, seed = self.in_sample
        if roots is None:
            roots = np.zeros(len(leaves), dtype=np.int64)  # the in-sample KL curves need no labels
        in_sample = task_inputs(self.task, leaves, roots, mask_token_id=q, sampling_seed=seed)
        marginals = {k: bp_distributions(bp, in_sample) for k, bp in bps.items()}  # (n, q) or (n, s**l, q)
        targets = BPTargets(in_sample=in_sample, marginals=marginals)
        if flag:
            targets.defined = {k: bp_defined(bp, in_sample) for k, bp in bps.items()}  # (n,) each
        if self.task == NEXT_LEAF_TASK:
            targets.exact_loss = next_leaf_loss(bps[self.k_train], in_sample.leaves)
        for k_test, (leaves, roots, seed) in self.test_sets.items():
            data = task_inputs(self.task, leaves, roots, mask_token_id=q, sampling_seed=seed)
            targets.tests[k_test] = data
            reference = self.reference(k_test, data, seed)
            rows = bp_defined(bps[self.k_train], reference) if flag else None  # (n,)
            targets.bp_accuracy[k_test] = bp_accuracy(bps[self.k_train], reference, rows)
            if flag:
                targets.bp_impossible[k_test] = float((~rows).double().mean()) if len(rows) else 0.0
            targets.reference_sizes[k_test] = len(reference)
        self.targets = targets
        return targets

    def reference(self, k_test: int, data: TaskInputs, sampling_seed: int) -> TaskInputs:
        """BP's reference inputs for the k_test set ``data``: the set itself, or the first
        :func:`reference_count` trees of its split stream (masked at that stream's evaluation positions)."""
        n = reference_count(len(data), self.depth, self.reference_size, self.grammar.arity)
        if n == len(data):
            return data
        trees = sample_trees(self.grammar, n, self.depth, k_test, sampling_seed)  # leaves (n, 2**l)
        return task_inputs(self.task, trees.leaves, trees.roots, mask_token_id=self.grammar.num_symbols,
                           sampling_seed=sampling_seed)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        config = getattr(model, "config", None)
        if config is not None:
            if getattr(config, "depth", self.depth) != self.depth:
                raise ValueError(f"model depth ({config.depth}) must equal the data depth ℓ={self.depth}")
            if getattr(config, "arity", self.grammar.arity) != self.grammar.arity:
                raise ValueError(f"model arity ({config.arity}) must equal the grammar's s={self.grammar.arity}")
            if getattr(config, "num_symbols", self.grammar.num_symbols) != self.grammar.num_symbols:
                raise ValueError(
                    f"model num_symbols ({config.num_symbols}) must equal the data's q={self.grammar.num_symbols}"
                )
        self.prepare()

    @torch.no_grad()
    def model_log_probabilities(self, model, inputs: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        """(n, q) float64 log-probabilities of the network for the predicted variable, (n, 2**ℓ, q) for every next
        leaf (eval mode, batched), over the q symbols: a model whose logits cover more ids (an architecture of
        transformers, with the special ids q, q + 1) is renormalised over the symbols' logits, and the mass it put
        elsewhere is :attr:`special_mass` of the last call (see :func:`symbol_log_probabilities`)."""
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        chunks = []
        try:
            for start in range(0, inputs.shape[0], self.batch_size):
                batch = inputs[start : start + self.batch_size].to(device)  # (b, 2**l)
                logits = model(input_ids=batch).logits  # (b, q) or (b, 2**l, q)
                if positions is not None:
                    rows = torch.arange(batch.shape[0], device=device)
                    logits = logits[rows, positions[start : start + self.batch_size].to(device)]  # (b, q)
                chunks.append(logits.detach().to("cpu", torch.float64))
        finally:
            model.train(was_training)
        config = getattr(model, "config", None)
        classes = getattr(config, "num_classes", None) if self.task == "root" else None  # an RHM's n root outputs
        log_model, self.special_mass = symbol_log_probabilities(torch.cat(chunks), self.grammar.num_symbols, classes)
        return log_model

    def compute(self, model, prefix: str = "eval_") -> dict:
        """Every comparison with BP for the current ``model``: a flat dict of floats (keys in the module docstring)."""
        targets = self.prepare()
        out = {}
        in_sample = targets.in_sample
        log_model = self.model_log_probabilities(model, in_sample.inputs, in_sample.positions)  # (n, [2**l,] q)
        out[f"{prefix}{SPECIAL_MASS_KEY}"] = self.special_mass
        if targets.exact_loss is not None:
            # the model's cross-entropy per leaf on the in-sample sequences, less their exact one under BP_{k_train}
            log_true = log_model.gather(-1, in_sample.labels.unsqueeze(-1).to(log_model.device))  # (n, 2**l, 1)
            out[f"{prefix}excess_loss"] = float(-log_true.mean()) - targets.exact_loss
        q = log_model.shape[-1]
        if self.task == NEXT_LEAF_TASK:
            # which positions are learned first: the matched BP's KL per position, a mean over the sequences only
            n, num_leaves = log_model.shape[:2]
            matched = targets.marginals[self.k_train].reshape(-1, q)  # (n * 2**l, q)
            per_position = kl_divergence(matched, log_model.reshape(-1, q)).reshape(n, num_leaves).mean(0)  # (2**l,)
            for i, value in enumerate(per_position.tolist()):
                out[f"{prefix}{KL_POSITION_KEY}{i}"] = value
        per_level = {}  # k -> (n,) the per-sequence KL of the BP_k defined on every in-sample row
        for k, marginals in targets.marginals.items():
            rows = targets.defined.get(k)  # (n,) bool, or None: BP_k is defined on every row
            if rows is not None:
                out[f"{prefix}{IMPOSSIBLE_KEY}{k}"] = float((~rows).double().mean())
                if not bool(rows.any()):  # BP_k gives every in-sample row probability zero: nothing to compare
                    continue
                mine, marginals = log_model[rows], marginals[rows]
            else:
                mine = log_model
            result = compare_with_bp(mine.reshape(-1, q), marginals.reshape(-1, q))  # one row per prediction
            out[f"{prefix}kl_bp_k{k}"] = result["kl"]
            # the sampling error of that mean over the sequences (a causal run's positions are averaged per sequence)
            per_sequence = kl_divergence(marginals.reshape(-1, q), mine.reshape(-1, q)).reshape(
                mine.shape[0], -1).mean(-1)  # (n,)
            out[f"{prefix}kl_se_bp_k{k}"] = mean_error(per_sequence)
            if rows is None or bool(rows.all()):
                per_level[k] = per_sequence
            out[f"{prefix}match_bp_k{k}"] = result["argmax_agreement"]
            out[f"{prefix}spearman_bp_k{k}"] = result["spearman"]
            if k == self.k_train:
                out[f"{prefix}match_bp"] = result["argmax_agreement"]
                out[f"{prefix}spearman_bp"] = result["spearman"]
        out.update(_gap_standard_errors(per_level, {k: out[f"{prefix}kl_bp_k{k}"] for k in per_level}, prefix))
        for k_test, data in targets.tests.items():
            log_test = self.model_log_probabilities(model, data.inputs, data.positions)  # (n, [2**l,] q)
            out[f"{prefix}acc_ktest{k_test}"] = accuracy(log_test.reshape(-1, log_test.shape[-1]),
                                                         data.labels.reshape(-1))
            if not math.isnan(targets.bp_accuracy[k_test]):  # NaN: BP_{k_train} is defined on none of its rows
                out[f"{prefix}bp_acc_ktest{k_test}"] = targets.bp_accuracy[k_test]
            if k_test in targets.bp_impossible:
                out[f"{prefix}bp_impossible_ktest{k_test}"] = targets.bp_impossible[k_test]
        return out

    def on_evaluate(self, args, state, control, model=None, metrics=None, **kwargs):
        if model is None:
            return
        values = self.compute(model)
        if metrics is not None:
            metrics.update(values)
        if self.trainer is not None:
            self.trainer.log(dict(values))
        else:
            state.log_history.append({**values, "step": state.global_step})


def log_spaced_steps(max_steps: int, count: int) -> list:
    """``count`` (or fewer, after rounding) distinct steps spaced evenly in log between 1 and ``max_steps``."""
    max_steps = check_int("max_steps", max_steps, 1)
    count = check_int("count", count, 1)
    steps = np.unique(np.round(np.logspace(0.0, math.log10(max_steps), count)).astype(np.int64))
    return sorted({int(s) for s in steps if 1 <= s <= max_steps} | {max_steps})


class LogSpacedScheduleCallback(TrainerCallback):
    """Evaluate at ``num_evaluations`` and checkpoint at ``num_checkpoints`` log-spaced steps up to ``max_steps``.

    The steps are fixed from ``state.max_steps`` in ``on_train_begin``, so a resumed run keeps the same schedule.
    The last step is always evaluated and checkpointed; 0 disables either.
    """

    def __init__(self, num_evaluations: int = 25, num_checkpoints: int = 6):
        self.num_evaluations = check_int("num_evaluations", num_evaluations, 0)
        self.num_checkpoints = check_int("num_checkpoints", num_checkpoints, 0)
        self.eval_steps: set = set()
        self.save_steps: set = set()

    def on_train_begin(self, args, state, control, **kwargs):
        max_steps = max(int(state.max_steps), 1)
        self.eval_steps = set(log_spaced_steps(max_steps, self.num_evaluations)) if self.num_evaluations else set()
        self.save_steps = set(log_spaced_steps(max_steps, self.num_checkpoints)) if self.num_checkpoints else set()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.eval_steps:
            control.should_evaluate = True
            control.should_log = True
        if state.global_step in self.save_steps:
            control.should_save = True
        return control


RESUME_MARKER = "resume_only.json"  # in a checkpoint-N saved only to resume from (ResumeCheckpointCallback)


class ResumeCheckpointCallback(TrainerCallback):
    """Also save a checkpoint every ``every`` steps, only to resume from: a run stopped between its log-spaced
    checkpoints loses at most ``every`` steps.

    Such a checkpoint (one no other schedule asked for) holds :data:`RESUME_MARKER`; each new save removes the older
    marked ones, and the end of training removes the last, so a finished run folder holds the checkpoints of its
    schedule only and the analyses see the same folders whatever ``every`` was. With ``every`` 0 it saves nothing and
    only cleans (a run resumed from such a checkpoint without the option). ``mirrors`` are folders that receive a
    copy of every checkpoint (an ensemble's member folders), cleaned alike. Must follow the other schedule callbacks:
    a step one of them saves keeps its checkpoint.
    """

    def __init__(self, every: int, mirrors=()):
        self.every = check_int("resume_checkpoint_steps", every, 0)
        self.mirrors = [os.fspath(folder) for folder in mirrors]
        self.pending: set = set()

    def _folders(self, args) -> list:
        return [args.output_dir, *self.mirrors]

    def on_step_end(self, args, state, control, **kwargs):
        if self.every and state.global_step % self.every == 0 and not control.should_save \
                and state.global_step < state.max_steps:
            control.should_save = True
            self.pending.add(state.global_step)
        return control

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            name = f"checkpoint-{state.global_step}"
            if state.global_step in self.pending:
                for folder in self._folders(args):
                    if os.path.isdir(os.path.join(folder, name)):
                        write_json_atomic(os.path.join(folder, name, RESUME_MARKER), {"step": state.global_step})
            self._remove_marked(args, keep=name)
        self.pending.discard(state.global_step)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self._remove_marked(args, keep=None)
        return control

    def _remove_marked(self, args, keep: str | None) -> None:
        for folder in self._folders(args):
            if not os.path.isdir(folder):
                continue
            for name in os.listdir(folder):
                path = os.path.join(folder, name)
                if name.startswith("checkpoint-") and name != keep and os.path.isfile(os.path.join(path,
                                                                                                  RESUME_MARKER)):
                    shutil.rmtree(path, ignore_errors=True)


def evaluation_history(log_history: list) -> list:
    """The evaluation entries of ``log_history`` merged per step: one dict per evaluated step, sorted by step."""
    merged: dict = {}
    for entry in log_history:
        if any(key.startswith("eval_") for key in entry):
            merged.setdefault(int(entry.get("step", 0)), {}).update(entry)
    return [merged[step] for step in sorted(merged)]


def read_history(path) -> list:
    """The evaluations of a history file of :func:`write_history` (one dict per evaluated step, by step); an empty
    list when the file is absent or holds no history."""
    record = read_json_object(path)
    history = (record or {}).get("history")
    return list(history) if isinstance(history, list) else []


def write_history(path, log_history: list) -> None:
    """Rewrite ``path`` atomically as ``{"history": [...]}``: the evaluations of ``log_history``, one per step."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_json_atomic(path, {"history": evaluation_history(log_history)})


class MetricsHistoryCallback(TrainerCallback):
    """Rewrite ``path`` (:func:`write_history`) after every evaluation log of the main process."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)

    def write(self, state) -> None:
        if state.is_world_process_zero:
            write_history(self.path, state.log_history)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and any(key.startswith("eval_") for key in logs):
            self.write(state)

    def on_train_end(self, args, state, control, **kwargs):
        self.write(state)


# ---------------------------------------------------------------- the console

def _levels(metrics: dict, prefix: str) -> list:
    """The sorted levels k of the keys ``<prefix><k>`` of ``metrics``."""
    return sorted(int(key[len(prefix):]) for key in metrics if key.startswith(prefix) and key[len(prefix):].isdigit())


def _number(value, digits: int = 3) -> str:
    """A short console number: ``n/a`` for None/NaN, ``1.2e-04`` below 10**-digits, else ``digits`` decimals."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    value = float(value)
    return f"{value:.{digits}f}" if value == 0 or abs(value) >= 10**-digits else f"{value:.1e}"


def _level_range(levels: list) -> str:
    """``0..4`` for consecutive levels, ``0,2,4`` otherwise."""
    if len(levels) > 1 and levels == list(range(levels[0], levels[-1] + 1)):
        return f"{levels[0]}..{levels[-1]}"
    return ",".join(map(str, levels))


def evaluation_line(metrics: dict, step: int, k_train: int | None = None) -> str:
    """One console line for one evaluation, from the merged metrics of the Trainer and :class:`BPKLCallback` (a
    causal run's adds ``excess loss`` after the loss).

    Example:
        >>> evaluation_line({"eval_loss": 0.41, "eval_kl_bp_k0": 0.31, "eval_kl_bp_k1": 0.05,
        ...                  "eval_acc_ktest0": 0.81, "eval_bp_acc_ktest0": 0.84}, step=1200, k_train=0)
        'step 1200 · loss 0.410 · closest BP_1 · KL BP_0..1 0.310 0.050 · acc k_test 0 (model/BP_0) 0.810/0.840'
    """
    parts = [f"step {step}"]
    if "eval_loss" in metrics:
        parts.append(f"loss {_number(metrics['eval_loss'])}")
    if "eval_excess_loss" in metrics:  # next-leaf prediction: the loss above the exact entropy per leaf
        parts.append(f"excess loss {_number(metrics['eval_excess_loss'])}")
    kl_levels = _levels(metrics, "eval_kl_bp_k")
    if kl_levels:
        kl = {k: float(metrics[f"eval_kl_bp_k{k}"]) for k in kl_levels}
        # the closest among the BP_k defined on every in-sample input (their KLs are means over the same inputs)
        finite = {k: v for k, v in kl.items()
                  if math.isfinite(v) and not metrics.get(f"eval_{IMPOSSIBLE_KEY}{k}", 0) > 0}
        if finite:
            parts.append(f"closest BP_{min(finite, key=finite.get)}")
        parts.append(f"KL BP_{_level_range(kl_levels)} " + " ".join(_number(kl[k]) for k in kl_levels))
    acc_levels = _levels(metrics, "eval_acc_ktest")
    if acc_levels:
        bp = "BP" if k_train is None else f"BP_{k_train}"
        pairs = [f"{_number(metrics[f'eval_acc_ktest{k}'])}/{_number(metrics.get(f'eval_bp_acc_ktest{k}'))}"
                 for k in acc_levels]
        parts.append(f"acc k_test {_level_range(acc_levels)} (model/{bp}) " + " ".join(pairs))
    elif "eval_accuracy" in metrics:
        parts.append(f"accuracy {_number(metrics['eval_accuracy'])}")
    return " · ".join(parts)


class ConsoleCallback(ProgressCallback):
    """What a training run shows on the console: one line per evaluation (:func:`evaluation_line`), one short line
    per training-loss log, and a progress bar only when stderr is a terminal (no ``\\r`` escapes in a log file).

    At the start of a CPU run, one line when other work shares the cores (:mod:`hf_treelang.train.contention`,
    measured in a fraction of a second), and for a model on transformers' slow reference path
    (:func:`hf_treelang.models.architectures.slow_path`) one line saying so, then the time its first
    :data:`SLOW_PATH_STEPS` steps took and what the run's steps take at that rate. The last line says the training
    steps' time apart from the evaluations' and the checkpoints' (``phase_seconds``).

    It replaces the Trainer's ``PrinterCallback`` / ``ProgressCallback``, which print every log as a raw dict (two
    dicts of ~30 keys per evaluation here: the Trainer's and the BP-KL callback's). Add it with :meth:`attach`
    *after* :class:`BPKLCallback`, so that the BP-KL keys are in the metrics when its ``on_evaluate`` runs.

    Args:
        k_train: the matched BP's level, named in the line (``model/BP_<k_train>``).
        progress_bar: show a tqdm bar; ``None`` (default): when ``args.disable_tqdm`` is false and stderr is a TTY.
        stream: where the lines go (default: ``sys.stdout`` at the time of writing).
        measure_cpu: measure at the start of a CPU run whether other work shares its cores (default: True).
    """

    def __init__(self, k_train: int | None = None, *, progress_bar: bool | None = None, stream=None,
                 measure_cpu: bool = True):
        super().__init__()
        self.k_train = None if k_train is None else check_int("k_train", k_train, 0)
        self.progress_bar = progress_bar
        self.stream = stream
        self.measure_cpu = measure_cpu
        self.pending: dict = {}
        self._bar = False
        # seconds since on_train_begin spent in evaluations and in saving checkpoints, and how many of each
        self.phase_seconds = {"evaluation": 0.0, "checkpoint": 0.0}
        self.phase_counts = {"evaluation": 0, "checkpoint": 0}
        self._mark = None  # when the last step, evaluation or save ended
        self._step_began = None
        self._slow = None  # a model on the slow path: {"model_type", "steps", "seconds"} of its first steps

    def attach(self, trainer) -> "ConsoleCallback":
        """Replace ``trainer``'s printing and progress callbacks by this one; returns self."""
        handler = trainer.callback_handler
        for callback in list(handler.callbacks):
            if isinstance(callback, (PrinterCallback, ProgressCallback)) or \
                    type(callback).__name__ == "NotebookProgressCallback":
                handler.remove_callback(callback)
        trainer.add_callback(self)
        return self

    def write(self, line: str) -> None:
        stream = self.stream or sys.stdout
        if self.training_bar is not None:
            self.training_bar.write(line, file=stream)  # clears and redraws the bar around the line
        else:
            stream.write(line + "\n")
            stream.flush()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._bar = self.progress_bar if self.progress_bar is not None else \
            (not args.disable_tqdm and is_terminal())
        self.current_step = 0
        if state.is_world_process_zero:
            self._announce_start(args, model)
        if self._bar:
            super().on_train_begin(args, state, control, model=model, **kwargs)
        self._mark = time.perf_counter()

    def _announce_start(self, args, model) -> None:
        """The lines before the first step: the cores shared with other work, a slow path."""
        if self.measure_cpu and args.device.type == "cpu":
            threads = torch.get_num_threads()
            line = contention_line(cpu_share(threads), threads)
            if line is not None:
                self.write(line)
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        reason = slow_path(model_type, args.device)
        if reason is not None:
            self._slow = {"model_type": model_type, "steps": 0, "seconds": 0.0}
            self.write(f"{reason}; the time of its first {SLOW_PATH_STEPS} steps follows")

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_began = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        slow = self._slow
        if slow is not None and self._step_began is not None and slow["steps"] < SLOW_PATH_STEPS:
            slow["steps"] += 1
            slow["seconds"] += now - self._step_began
            if slow["steps"] == SLOW_PATH_STEPS and state.is_world_process_zero:
                per_step = slow["seconds"] / slow["steps"]
                self.write(f"{slow['model_type']}: {per_step:.2f} s per step over the first {slow['steps']} steps; "
                           f"its {state.max_steps} steps take about {format_duration(per_step * state.max_steps)} "
                           "(evaluations not counted)")
        self._mark = now
        if self.training_bar is not None:
            super().on_step_end(args, state, control, **kwargs)

    def _phase_ended(self, phase: str) -> None:
        """An evaluation or a save ended: the time since the last step, evaluation or save was spent in it."""
        now = time.perf_counter()
        if self._mark is not None:
            self.phase_seconds[phase] += now - self._mark
            self.phase_counts[phase] += 1
        self._mark = now

    def on_save(self, args, state, control, **kwargs):
        self._phase_ended("checkpoint")

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
        if self._bar:
            super().on_prediction_step(args, state, control, eval_dataloader=eval_dataloader, **kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if any(key.startswith("eval_") for key in logs):
            self.pending.update(logs)  # printed as one line in on_evaluate
        elif "loss" in logs:
            epoch = f" · epoch {logs['epoch']:.2f}" if isinstance(logs.get("epoch"), (int, float)) else ""
            self.write(f"step {state.global_step}{epoch} · train loss {_number(logs['loss'], 4)}")
        elif "train_runtime" in logs:
            self.write(f"trained {state.global_step} steps in {format_duration(logs['train_runtime'])} "
                       f"({self.phases_text(logs['train_runtime'])}) · mean train loss "
                       f"{_number(logs.get('train_loss'), 4)}")

    def phases_text(self, runtime: float) -> str:
        """``runtime`` (the Trainer's ``train_runtime``) split into training steps, evaluations and checkpoints."""
        evaluation, checkpoint = self.phase_seconds["evaluation"], self.phase_seconds["checkpoint"]
        parts = [f"{format_duration(max(runtime - evaluation - checkpoint, 0.0))} training steps"]
        for phase, seconds in (("evaluation", evaluation), ("checkpoint", checkpoint)):
            count = self.phase_counts[phase]
            if count:
                parts.append(f"{format_duration(seconds)} in {count} {phase}{'s' if count > 1 else ''}")
        return ", ".join(parts)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self._phase_ended("evaluation")
        super().on_evaluate(args, state, control, metrics=metrics, **kwargs)  # closes the evaluation bar
        if state.is_world_process_zero:
            self.write(evaluation_line({**self.pending, **(metrics or {})}, state.global_step, self.k_train))
        self.pending = {}

    def on_train_end(self, args, state, control, **kwargs):
        if self.training_bar is not None:
            super().on_train_end(args, state, control, **kwargs)
