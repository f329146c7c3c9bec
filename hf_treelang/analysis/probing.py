"""Ancestor probes on frozen hidden states (paper Fig. 3b, App. E.6-E.7).

For every (encoder layer, ancestor level) pair a readout is trained to predict, from the hidden state of leaf i
alone, the symbol of its ancestor at level m::

    label(i, m) = levels[m][i >> (ℓ - m)]        (level 0 is the root, level ℓ the leaf itself)

(``i // s**(ℓ - m)`` for trees of arity s, a Random Hierarchy Model's; the message probes, which read a node's one
sibling subtree, are for binary trees and refuse any other arity in one line).

The readout is position independent: one network for all positions of a layer, by default the two-layer readout of
App. E.6 (64 hidden ReLU units; ``probe_hidden=0`` gives a linear readout, the one of the authors' notebook for the
k_train probes of App. E.7, right). Layer 0 is the input embedding, layer j the output of encoder block j. The
encoder is frozen and in eval mode: hidden states are computed once, without masks. All probes are trained at once,
as one batched network with independent weights per (layer, level); since the loss is the sum of the probes' losses
and Adam acts per parameter, this is exactly independent training on the same mini-batches. Variant
``positions="ends"`` (App. E.7, left) trains on the first and last positions only and tests on all of them.

The protocol is App. E.6 and the authors' notebook (``notebooks/ancestor_inference.ipynb``): Adam at learning rate
1e-4, batches of 32 sequences, 100 epochs on 2^14 labelled sequences, and for each probe the epoch of best accuracy
on 10^4 validation sequences (epoch 0, before training, included). The notebook reports that best validation accuracy
(:attr:`ProbeResult.validation_accuracy`); since it is chosen on the same sequences, the headline number here
(:attr:`ProbeResult.accuracy`) is the best-epoch probe's accuracy on separate held-out test sequences, next to the
last epoch's (:attr:`ProbeResult.final_accuracy`). As a reference, the exact BP posterior of each ancestor given the
whole sequence gives the best accuracy any readout could reach.

BP-message probes (:func:`probe_messages`, ``hf-treelang probe --target messages``, App. F): the same protocol with
q-vector targets, the exact upward messages of the leaf's level-m ancestor and of its level-m complementary subtree
(:func:`message_targets`), a softmax readout trained by KL to them, reported as test KL next to the KL of the mean
message.

Any architecture (a run of ``--model_type bert|gpt2|mamba|...``): its layers are the tuple of hidden states its
forward returns with ``output_hidden_states=True``, the embedding first; an architecture that returns none is refused
in one line before any probe trains.

Dimension glossary: ``n`` sequences, ``L = 2**ℓ`` positions, ``P`` probed layers, ``V`` ancestor levels, ``H`` probe
hidden units, ``d`` model hidden size, ``q`` symbols, ``T`` tokens in a batch, ``E`` epochs.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.oracle import NEXT_LEAF_TASK
from hf_treelang.core.resources import (DEFAULT_MAX_HOURS, check_max_hours, check_memory, check_time, model_sizes,
                                        probe_bytes)
from hf_treelang.core.sampling import sample_trees
from hf_treelang.data.metadata import ancestor_labels
from hf_treelang.plotting import level_color, pyplot, save_figure
from hf_treelang.progress import format_duration
from hf_treelang.train import paper_settings as paper

from .activations import batches, check_outputs, run_with_cache
from .checkpoint import Checkpoint, as_checkpoint, task_of
from .io import check_positive, cli_error, prepare_output, write_json

POSITION_MODES = ("all", "ends")
PROGRESS_EVERY_S = 30.0  # off a terminal, a line over the probe epochs at most this often (and after the first, last)
PROBE_TARGETS = ("ancestors", "messages")  # what `hf-treelang probe --target` probes: probe or probe_messages


@dataclass
class ProbeResult:
    """Accuracy of every (layer, ancestor level) probe; (P, V) arrays have rows ``layers`` and columns ``levels``.

    Attributes:
        accuracy: (P, V) held-out test accuracy (all positions) of each probe at its best validation epoch.
        final_accuracy: (P, V) held-out test accuracy of each probe after the last epoch.
        validation_accuracy: (P, V) best validation accuracy over the epochs (the number of the authors' notebook).
        best_epoch: (P, V) the epoch of that best validation accuracy (0 = before training).
        validation_history: (E + 1, P, V) validation accuracy before training and after every epoch.
        train_accuracy: (P, V) accuracy on the training sequences after the last epoch (the trained positions only).
        layers: probed layers (0 = the input embedding, j = encoder block j).
        levels: ancestor levels m (0 = the root).
        bp_accuracy: (V,) accuracy of the exact BP posterior of the ancestor given the whole sequence (test set).
        chance: (V,) accuracy of always predicting the most frequent training label.
        positions: ``"all"`` or ``"ends"`` (trained on the first and last positions only).
        checkpoint, depth, model_filter_level, data_filter_level, num_train, num_validation, num_test, epochs,
        batch_size, learning_rate, probe_hidden: the setting (``probe_hidden`` 0: a linear readout).
    """

    accuracy: np.ndarray
    final_accuracy: np.ndarray
    validation_accuracy: np.ndarray
    best_epoch: np.ndarray
    validation_history: np.ndarray
    train_accuracy: np.ndarray
    layers: list
    levels: list
    bp_accuracy: np.ndarray
    chance: np.ndarray
    positions: str
    checkpoint: str
    depth: int
    model_filter_level: int
    data_filter_level: int
    num_train: int
    num_validation: int
    num_test: int
    epochs: int
    batch_size: int
    learning_rate: float
    probe_hidden: int

    def to_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint,
            "positions": self.positions,
            "depth": self.depth,
            "model_filter_level": self.model_filter_level,
            "data_filter_level": self.data_filter_level,
            "num_train": self.num_train,
            "num_validation": self.num_validation,
            "num_test": self.num_test,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "probe_hidden": self.probe_hidden,
            "layers": self.layers,
            "levels": self.levels,
            "accuracy": self.accuracy,
            "final_accuracy": self.final_accuracy,
            "validation_accuracy": self.validation_accuracy,
            "best_epoch": self.best_epoch,
            "validation_history": self.validation_history,
            "train_accuracy": self.train_accuracy,
            "bp_accuracy": self.bp_accuracy,
            "chance": self.chance,
        }


def check_levels(levels, depth: int, data_filter_level: int) -> list:
    """Validate ancestor levels against the depth and the levels that data of filter level k have."""
    available = [m for m in range(depth + 1) if m == 0 or m >= data_filter_level]
    if levels is None:
        return [m for m in available if m < depth]
    levels = [int(m) for m in levels]
    if not levels:
        raise ValueError(f"levels must name at least one ancestor level in {available}, got none")
    for m in levels:
        if m < 0 or m > depth:
            raise ValueError(f"levels: ancestor level {m} is outside [0, depth={depth}] for this checkpoint")
        if m not in available:
            raise ValueError(
                f"levels: data of filter level k={data_filter_level} have no level {m} (levels 1..{data_filter_level - 1}"
                f" are filtered out); available levels: {available}. Probe on unfiltered data with data_filter_level=0"
            )
    if len(set(levels)) != len(levels):
        raise ValueError(f"levels must not repeat, got {levels}")
    return levels


def check_layers(layers, num_layers: int) -> list:
    """Validate probed layers against the checkpoint's ``num_layers`` encoder blocks (0 = the embedding)."""
    if layers is None:
        return list(range(num_layers + 1))
    layers = [int(j) for j in layers]
    if not layers:
        raise ValueError(f"layers must name at least one layer in [0, {num_layers}], got none")
    for j in layers:
        if not 0 <= j <= num_layers:
            raise ValueError(f"layers: layer {j} is outside [0, {num_layers}] (0 = the embedding, {num_layers} = the "
                             "last encoder block) for this checkpoint")
    if len(set(layers)) != len(layers):
        raise ValueError(f"layers must not repeat, got {layers}")
    return layers


def probe_targets(trees, levels: list, arity: int = 2) -> np.ndarray:
    """(n, L, V) ancestor symbols of every leaf for each probed level (``hf_treelang.data.ancestor_labels``: leaf i's
    level-m ancestor is node i // s**(ℓ - m) of level m, for trees of arity s)."""
    return np.stack([ancestor_labels(trees.levels[m], trees.depth, arity) for m in levels], -1)


HIDDEN_STATES_BATCH = 512  # sequences per forward pass when the hidden states are collected


def hidden_states(ckpt, input_ids: np.ndarray, *, batch_size: int = HIDDEN_STATES_BATCH) -> torch.Tensor:
    """(n, P, L, d) float32 hidden states of every layer (embedding first) of the frozen encoder."""
    return run_with_cache(ckpt, input_ids, logits=False, hidden_states=True, batch_size=batch_size).hidden_states


class _BatchedProbes(torch.nn.Module):
    """P x V independent readouts d -> H -> q (``H = 0``: linear d -> q), nn.Linear's default initialisation.

    With hidden units, the first layers of one encoder layer share one matmul.
    """

    def __init__(self, num_layers: int, num_levels: int, hidden_size: int, probe_hidden: int, num_symbols: int,
                 generator: torch.Generator):
        super().__init__()
        P, V, H, d, q = num_layers, num_levels, probe_hidden, hidden_size, num_symbols

        def uniform(shape, fan_in):  # nn.Linear's default initialisation
            bound = 1.0 / math.sqrt(fan_in)
            return torch.nn.Parameter((torch.rand(shape, generator=generator) * 2 - 1) * bound)

        self.V, self.H, self.q = V, H, q
        if H:
            self.w1 = uniform((P, d, V * H), d)
            self.b1 = uniform((P, 1, V * H), d)
            self.w2 = uniform((P, V, H, q), H)
            self.b2 = uniform((P, 1, V, q), H)
        else:
            self.w2 = uniform((P, d, V * q), d)
            self.b2 = uniform((P, 1, V * q), d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (P, T, d) -> logits (P, T, V, q)."""
        P, T, _ = x.shape
        if not self.H:
            return torch.baddbmm(self.b2, x, self.w2).view(P, T, self.V, self.q)  # (P, T, V, q)
        h = torch.relu(torch.baddbmm(self.b1, x, self.w1)).view(P, T, self.V, self.H)  # (P, T, V, H)
        return torch.einsum("ptvh,pvhc->ptvc", h, self.w2) + self.b2  # (P, T, V, q)

    def _level_views(self, parameter: torch.Tensor) -> torch.Tensor:
        """``parameter`` viewed with the level axis second: (P, V, ...)."""
        P, V = parameter.shape[0], self.V
        if parameter.dim() == 4 and parameter.shape[1] == V:  # w2 (P, V, H, q)
            return parameter
        if parameter.dim() == 4:  # b2 (P, 1, V, q)
            return parameter.transpose(1, 2)
        rows = parameter.shape[1]  # w1 (P, d, V*H), b1 (P, 1, V*H), linear w2 (P, d, V*q), b2 (P, 1, V*q)
        return parameter.view(P, rows, V, -1).transpose(1, 2)  # (P, V, rows, H or q)

    @torch.no_grad()
    def copy_where(self, other: "_BatchedProbes", improved: torch.Tensor) -> None:
        """Copy the weights of the probes where ``improved`` (P, V) is True from ``other`` (same shapes)."""
        for name, parameter in self.named_parameters():
            mine, theirs = self._level_views(parameter), self._level_views(getattr(other, name))  # (P, V, ...)
            mask = improved.view(*improved.shape, *([1] * (mine.dim() - 2))).to(mine.device)
            mine.copy_(torch.where(mask, theirs, mine))


def _select(states: torch.Tensor, labels: torch.Tensor, positions: torch.Tensor):
    """Tokens of the given positions: states (b, P, L, d) -> (P, b*|pos|, d); labels (b, L, V, ...) ->
    (b*|pos|, V, ...) (symbols, or q-vectors for the message probes)."""
    x = states[:, :, positions].permute(1, 0, 2, 3).reshape(states.shape[1], -1, states.shape[-1])
    return x, labels[:, positions].reshape(-1, *labels.shape[2:])


def _hits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(P, T, V) 1 where the probe's most probable symbol is the label: logits (P, T, V, q), labels (T, V)."""
    return (logits.argmax(-1) == labels[None]).double()


def _kl(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(P, T, V) KL(target ‖ softmax(logits)) in nats: logits (P, T, V, q), target (T, V, q) probabilities."""
    # KL = Σ_s t[s] (log t[s] - log p[s]), with 0 log 0 = 0
    log_p = torch.log_softmax(logits.float(), -1)  # (P, T, V, q)
    return (torch.special.xlogy(target, target)[None] - target[None] * log_p).sum(-1)


@torch.no_grad()
def _mean_score(score, probes, states, labels, positions, batch_size, device) -> np.ndarray:
    """(P, V) mean over the tokens of ``score`` (:func:`_hits` or :func:`_kl`) of every probe on ``states``
    (n, P, L, d) at ``positions``."""
    total = None
    count = 0
    for part in batches(states.shape[0], batch_size):
        x, y = _select(states[part], labels[part], positions)
        x, y = x.to(device), y.to(device)
        summed = score(probes(x), y).sum(1).double().cpu()  # (P, V)
        total = summed if total is None else total + summed
        count += y.shape[0]
    return (total / count).numpy()


def _accuracy(probes, states, labels, positions, batch_size, device) -> np.ndarray:
    """(P, V) accuracy of every probe on ``states`` (n, P, L, d) at ``positions``."""
    return _mean_score(_hits, probes, states, labels, positions, batch_size, device)


@dataclass
class ProbeEstimate:
    """The estimated time of one :func:`probe` call: its work counted, each kind of unit timed on a few of them.

    An estimate, not a measurement of the call: the forward pass of a few sequences through the frozen encoder, a few
    optimisation steps of the batched probes and one evaluation pass are timed, then scaled to the call's counts
    (sequences; epochs × steps per epoch; evaluated tokens). Data sampling and BP are not counted.

    Attributes:
        seconds: the total.
        hidden_states: seconds of the encoder's forward passes over every sequence.
        training: seconds of the ``steps`` optimisation steps of the probes.
        evaluation: seconds of the validation passes (before training and after every epoch) and the test passes.
        steps: the optimisation steps counted.
        threads: torch CPU threads while measuring.
        epochs: the epochs counted; ``seconds_per_epoch``: what one more epoch adds (its steps and validation pass),
            so that :meth:`seconds_for` gives the estimate at another number of epochs.
    """

    seconds: float
    hidden_states: float
    training: float
    evaluation: float
    steps: int
    threads: int
    epochs: int = 0
    seconds_per_epoch: float = 0.0  # the training steps and the validation pass of one epoch

    def seconds_for(self, epochs: int) -> float:
        """The estimate of the same call with ``epochs`` epochs."""
        return self.seconds + (epochs - self.epochs) * self.seconds_per_epoch

    def describe(self) -> str:
        return (f"estimated time: about {format_duration(self.seconds)} (an estimate from a few timed steps: hidden "
                f"states {format_duration(self.hidden_states)}, {self.steps} probe steps "
                f"{format_duration(self.training)}, evaluation {format_duration(self.evaluation)}; {self.threads} "
                "torch thread(s))")


def _timed(function, repeats: int = 1) -> float:
    """Seconds per call of ``function`` over ``repeats`` calls, after one call to warm up."""
    function()
    start = time.perf_counter()
    for _ in range(repeats):
        function()
    return (time.perf_counter() - start) / repeats


def estimate_probe(ckpt, leaves: np.ndarray, *, layers: list, num_levels: int, train_positions: int, num_train: int,
                   num_validation: int, num_test: int, epochs: int, batch_size: int, probe_hidden: int,
                   measure_steps: int = 3, sample_size: int = 128) -> ProbeEstimate:
    """:class:`ProbeEstimate` of :func:`probe` on ``leaves`` (n, L): the counts of the call times the time of a few
    units measured here (``sample_size`` sequences through the encoder, ``measure_steps`` probe steps on random
    hidden states of the right shape, one evaluation pass); nothing of the call itself is consumed."""
    n, length = leaves.shape
    sample = leaves[: min(n, sample_size)]
    states = None

    def forward():
        nonlocal states
        states = hidden_states(ckpt, sample)[:, layers]  # (m, P, L, d)

    per_sequence = _timed(forward) / sample.shape[0]
    num_layers, width, device = len(layers), states.shape[-1], ckpt.device
    probes = _BatchedProbes(num_layers, num_levels, width, probe_hidden, ckpt.num_symbols,
                            torch.Generator().manual_seed(0)).to(device)
    optimizer = torch.optim.Adam(probes.parameters(), lr=1e-4)
    tokens = batch_size * train_positions
    x = torch.randn(num_layers, tokens, width, device=device)  # (P, T, d)
    y = torch.randint(ckpt.num_symbols, (num_layers, tokens, num_levels), device=device)  # (P, T, V)

    def step():
        logits = probes(x)  # (P, T, V, q)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    per_step = _timed(step, measure_steps)
    eval_tokens = min(4096, max(tokens, length))
    x_eval = torch.randn(num_layers, eval_tokens, width, device=device)  # (P, T, d)

    @torch.no_grad()
    def evaluate():
        probes(x_eval).argmax(-1)

    per_token = _timed(evaluate) / eval_tokens
    steps = epochs * math.ceil(num_train / batch_size)
    evaluated = ((epochs + 1) * num_validation + 2 * num_test) * length + num_train * train_positions
    parts = {"hidden_states": per_sequence * n, "training": per_step * steps, "evaluation": per_token * evaluated}
    per_epoch = per_step * math.ceil(num_train / batch_size) + per_token * num_validation * length
    return ProbeEstimate(seconds=sum(parts.values()), steps=steps, threads=torch.get_num_threads(), epochs=epochs,
                         seconds_per_epoch=per_epoch, **parts)


@dataclass
class _ProbeData:
    """What both kinds of probes train on: the checked setting, the sampled trees and their frozen hidden states."""

    ckpt: object
    data_filter_level: int
    levels: list
    layers: list
    trees: object
    states: torch.Tensor  # (n, P, L, d)
    train: slice
    validation: slice
    test: slice
    train_positions: torch.Tensor
    all_positions: torch.Tensor


def _check_training(num_train, num_validation, num_test, epochs, batch_size, probe_hidden, learning_rate) -> tuple:
    """The probes' training arguments checked (ValueError naming the parameter)."""
    checked = tuple(check_positive(name, value) for name, value in (
        ("num_train", num_train), ("num_validation", num_validation), ("num_test", num_test), ("epochs", epochs),
        ("batch_size", batch_size)))
    probe_hidden = check_positive("probe_hidden", probe_hidden, low=0)
    if not (isinstance(learning_rate, (int, float)) and math.isfinite(learning_rate) and learning_rate > 0):
        raise ValueError(f"learning_rate must be a finite number > 0, got {learning_rate!r}")
    return (*checked, probe_hidden, float(learning_rate))


def probe_checkpoint(checkpoint, device="cpu") -> Checkpoint:
    """The checkpoint to probe, loaded: an MLM, a root classifier or a bare encoder. A causal run is refused before
    its weights are read: the probes read an encoder's hidden states of a whole sequence, and a causal model's are of
    ``[BOS, x_0 .. x_{T-2}]``, each position seeing only the leaves before it."""
    task = checkpoint.task if isinstance(checkpoint, Checkpoint) else task_of(checkpoint)
    if task == NEXT_LEAF_TASK:
        raise ValueError(f"checkpoint {str(getattr(checkpoint, 'path', checkpoint))!r} is a causal language model "
                         "(next-leaf prediction, run_clm.py); probes need an MLM (run_mlm.py) or a "
                         "root-classification (run_root.py) run, whose encoder reads the whole sequence")
    return as_checkpoint(checkpoint, device=device)


def _prepare(checkpoint, *, levels, layers, data_filter_level, positions, num_train, num_validation, num_test, seed,
             device, estimate: Callable | None, messages: bool = False, log: Callable | None = None) -> _ProbeData:
    """Load and check, refuse what exceeds the machine's memory, sample the trees, and collect the hidden states
    (``estimate(ckpt, leaves, layers, levels)``, if given, is called before the hidden states are computed; ``log``,
    if given, gets a line when they start and when they are done)."""
    ckpt = probe_checkpoint(checkpoint, device=device)
    if messages and ckpt.arity != 2:
        raise ValueError(f"checkpoint {ckpt.describe()} has trees of arity {ckpt.arity}: the message probes read App. "
                         f"F's pair of a leaf's ancestor and its one complementary (sibling) subtree, which a binary "
                         f"tree has; probe the ancestors (--target ancestors)")
    depth = ckpt.depth
    k_data = ckpt.filter_level if data_filter_level is None else int(data_filter_level)
    if not 0 <= k_data <= depth:
        raise ValueError(f"data_filter_level must be in [0, depth={depth}], got {k_data}")
    levels = check_levels(levels, depth, k_data)
    # the layers are the hidden-state tuple the model returns (output_hidden_states=True), the embedding first
    layers = check_layers(layers, ckpt.num_layers if ckpt.is_treelang else check_outputs(ckpt, hidden_states=True))
    if positions not in POSITION_MODES:
        raise ValueError(f"positions must be one of {POSITION_MODES}, got {positions!r}")
    check_memory({"--num-train": num_train, "--num-validation": num_validation, "--num-test": num_test},
                 lambda sizes: probe_bytes(sum(sizes.values()), HIDDEN_STATES_BATCH, len(layers), len(levels),
                                           messages, model_sizes(ckpt.config, depth, ckpt.num_symbols)),
                 what=f"the hidden states of {ckpt.num_layers + 1} layers at depth {depth}")
    n = num_train + num_validation + num_test
    trees = sample_trees(ckpt.grammar, n, depth, k_data, seed)
    if estimate is not None:
        estimate(ckpt, trees.leaves, layers, levels)
    if log is not None:
        log(f"hidden states of {n} sequences through the encoder ({len(layers)} layers kept) ...")
    start = time.perf_counter()
    states = hidden_states(ckpt, trees.leaves)[:, layers]  # (n, P, L, d)
    if log is not None:
        log(f"hidden states done in {format_duration(time.perf_counter() - start)}")
    length = trees.leaves.shape[1]
    all_positions = torch.arange(length)
    return _ProbeData(
        ckpt=ckpt, data_filter_level=k_data, levels=levels, layers=layers, trees=trees, states=states,
        train=slice(0, num_train), validation=slice(num_train, num_train + num_validation),
        test=slice(num_train + num_validation, n), all_positions=all_positions,
        train_positions=all_positions if positions == "all" else torch.tensor(sorted({0, length - 1})))


@dataclass
class _Fit:
    """The outcome of :func:`_fit`: (P, V) scores per probe (V: the columns of the labels)."""

    best: _BatchedProbes  # each probe's weights at its best validation epoch
    last: _BatchedProbes
    best_validation: np.ndarray  # (P, V)
    best_epoch: np.ndarray  # (P, V)
    history: np.ndarray  # (E + 1, P, V)


def _fit(data: _ProbeData, labels: torch.Tensor, *, loss: Callable, score: Callable, higher_is_better: bool,
         epochs: int, batch_size: int, learning_rate: float, probe_hidden: int, seed: int, progress: bool,
         log: Callable | None = None) -> _Fit:
    """Train one batched readout per (layer, label column) on ``labels`` (n, L, V) or (n, L, V, q); each probe's
    best epoch (0 = before training) is chosen by ``score`` on the validation sequences.

    ``progress``: a bar over the epochs (a terminal); else ``log``, if given, gets a line after the first epoch, then
    at most every :data:`PROGRESS_EVERY_S` seconds and after the last, with the time left at the epochs' mean pace.

    ``loss(logits (P, T, V, q), labels (T, V, ...))`` is the sum over the P*V probes of each one's mean loss over the
    tokens (independent training, see the module docstring); ``score`` gives (P, T, V) per-token scores.
    """
    states, device = data.states, data.ckpt.device
    num_layers, num_columns = states.shape[1], labels.shape[2]
    num_train = data.train.stop - data.train.start
    generator = torch.Generator().manual_seed(seed)
    probes = _BatchedProbes(num_layers, num_columns, states.shape[-1], probe_hidden, data.ckpt.num_symbols, generator)
    probes.to(device)
    best = copy.deepcopy(probes)
    optimizer = torch.optim.Adam(probes.parameters(), lr=learning_rate)
    train_states, train_labels = states[data.train], labels[data.train]
    eval_batch = max(batch_size, 1024)

    def validation_score() -> np.ndarray:
        return _mean_score(score, probes, states[data.validation], labels[data.validation], data.all_positions,
                           eval_batch, device)

    history = [validation_score()]  # (P, V) per epoch, epoch 0 first
    best_score = history[0].copy()
    best_epoch = np.zeros_like(best_score, dtype=np.int64)
    start = last_line = time.perf_counter()
    for epoch in tqdm(range(1, epochs + 1), desc="probe epochs", disable=not progress, leave=False):
        order = torch.randperm(num_train, generator=generator)
        for part in batches(num_train, batch_size):
            rows = order[part]
            x, y = _select(train_states[rows], train_labels[rows], data.train_positions)
            x, y = x.to(device), y.to(device)
            value = loss(probes(x), y)  # probes(x): (P, T, V, q)
            optimizer.zero_grad(set_to_none=True)
            value.backward()
            optimizer.step()
        history.append(validation_score())
        # ties keep the earlier epoch
        improved = history[-1] > best_score if higher_is_better else history[-1] < best_score  # (P, V)
        if improved.any():
            best.copy_where(probes, torch.as_tensor(improved))
            best_score = np.where(improved, history[-1], best_score)
            best_epoch = np.where(improved, epoch, best_epoch)
        now = time.perf_counter()
        if log is not None and not progress and (epoch in (1, epochs) or now - last_line >= PROGRESS_EVERY_S):
            left = (now - start) / epoch * (epochs - epoch)
            log(f"probe epoch {epoch}/{epochs}: {format_duration(now - start)} so far, about {format_duration(left)} "
                "left")
            last_line = now
    return _Fit(best=best, last=probes, best_validation=best_score, best_epoch=best_epoch, history=np.stack(history))


def probe(
    checkpoint,
    *,
    levels=None,
    layers=None,
    data_filter_level: int | None = None,
    positions: str = "all",
    num_train: int = paper.PROBE_TRAIN,
    num_validation: int = paper.PROBE_VALIDATION,
    num_test: int = 2**12,
    epochs: int = paper.PROBE_EPOCHS,
    batch_size: int = paper.PROBE_BATCH_SIZE,
    learning_rate: float = paper.PROBE_LEARNING_RATE,
    probe_hidden: int = paper.PROBE_HIDDEN,
    seed: int = 20_240_603,
    device="cpu",
    progress: bool = True,
    log: Callable | None = None,
    max_hours: float = DEFAULT_MAX_HOURS,
) -> ProbeResult:
    """Train the ancestor probes of every (layer, level) on a frozen checkpoint; best-epoch and final accuracy.

    The defaults are App. E.6 and the authors' notebook (see the module docstring).

    Args:
        checkpoint: a TreeLang checkpoint folder of any task (MLM in the paper) or a loaded checkpoint.
        levels: ancestor levels m to probe (0 = root); default: every level < ℓ that the data have.
        layers: hidden-state layers to probe (0 = the embedding, n_L = the complete encoding); default: all.
        data_filter_level: filter level k of the probing data; default the checkpoint's k_train (in-sample). Use 0
            to probe a filtered model on the full hierarchy (App. E.7, right).
        positions: ``"all"`` trains on every position (Fig. 3b), ``"ends"`` on the first and last only (App. E.7).
        num_train: labelled training sequences (2^14 in the paper).
        num_validation: sequences on which each probe's best epoch is chosen (10^4 in the notebook).
        num_test: further held-out sequences on which the accuracies are reported.
        epochs: passes over the training sequences (100 in the paper).
        batch_size: sequences per optimisation step (32).
        learning_rate: Adam learning rate (1e-4).
        probe_hidden: H, hidden units of each readout (64 in App. E.6); 0 for a linear readout.
        seed: seed of the data, the initialisation and the batch order.
        progress: show a progress bar over epochs (on a terminal; :mod:`hf_treelang.cli` turns it off elsewhere).
        log: called with one line, the estimated time (:class:`ProbeEstimate`), before the work starts, then with
            the hidden states' start and end and, without ``progress``, periodic lines over the epochs (:func:`_fit`);
            None (the default) skips the estimate and its measurement.
        max_hours: with ``log``, a call estimated to take longer is refused before the work starts (a ValueError
            naming ``--epochs`` and the most epochs within the bound). Before any sampling, a call whose estimated
            peak memory (:func:`hf_treelang.core.resources.probe_bytes`) exceeds the machine's is refused too.
    """
    num_train, num_validation, num_test, epochs, batch_size, probe_hidden, learning_rate = _check_training(
        num_train, num_validation, num_test, epochs, batch_size, probe_hidden, learning_rate)
    max_hours = check_max_hours(max_hours)

    def estimate(ckpt, leaves, layers, levels):
        length = leaves.shape[1]
        found = estimate_probe(ckpt, leaves, layers=layers, num_levels=len(levels),
                               train_positions=length if positions == "all" else min(2, length), num_train=num_train,
                               num_validation=num_validation, num_test=num_test, epochs=epochs, batch_size=batch_size,
                               probe_hidden=probe_hidden)
        log(found.describe())
        check_time("--epochs", epochs, found.seconds_for, bound_hours=max_hours, bound_flag="--max-hours")

    data = _prepare(checkpoint, levels=levels, layers=layers, data_filter_level=data_filter_level,
                    positions=positions, num_train=num_train, num_validation=num_validation, num_test=num_test,
                    seed=seed, device=device, estimate=None if log is None else estimate, messages=False, log=log)
    ckpt, levels, trees, depth, k_data = data.ckpt, data.levels, data.trees, data.ckpt.depth, data.data_filter_level
    labels = torch.as_tensor(probe_targets(trees, levels, ckpt.arity))  # (n, L, V)
    weight = data.states.shape[1] * len(levels)  # sum, not mean, of the P*V probe losses: independent training

    def loss(logits, y):  # logits (P, T, V, q), y (T, V)
        target = y[None].expand(logits.shape[0], -1, -1)  # (P, T, V)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1)) * weight

    fit = _fit(data, labels, loss=loss, score=_hits, higher_is_better=True, epochs=epochs, batch_size=batch_size,
               learning_rate=learning_rate, probe_hidden=probe_hidden, seed=seed, progress=progress, log=log)
    eval_batch, states, test = max(batch_size, 1024), data.states, data.test
    test_states, test_labels = states[test], labels[test]
    final_accuracy = _accuracy(fit.last, test_states, test_labels, data.all_positions, eval_batch, ckpt.device)
    best_test_accuracy = _accuracy(fit.best, test_states, test_labels, data.all_positions, eval_batch, ckpt.device)
    train_accuracy = _accuracy(fit.last, states[data.train], labels[data.train], data.train_positions, eval_batch,
                               ckpt.device)

    bp_levels = BeliefPropagation(ckpt.grammar, depth, k_data).level_marginals(trees.leaves[test])
    test_trees_levels = test_labels.numpy()  # (n_test, L, V)
    index = np.arange(trees.leaves.shape[1])  # (L,): leaf i's level-m ancestor is node i // s**(l - m)
    bp_accuracy = np.array([
        float((bp_levels[m].argmax(-1).numpy()[:, index // ckpt.arity ** (depth - m)]
               == test_trees_levels[..., v]).mean())
        for v, m in enumerate(levels)
    ])
    train_flat = labels[data.train].reshape(-1, len(levels)).numpy()
    test_flat = test_trees_levels.reshape(-1, len(levels))
    chance = np.array([
        float((test_flat[:, v] == np.bincount(train_flat[:, v], minlength=ckpt.num_symbols).argmax()).mean())
        for v in range(len(levels))
    ])
    return ProbeResult(
        accuracy=best_test_accuracy,
        final_accuracy=final_accuracy,
        validation_accuracy=fit.best_validation,
        best_epoch=fit.best_epoch,
        validation_history=fit.history,  # (E + 1, P, V)
        train_accuracy=train_accuracy,
        layers=data.layers,
        levels=levels,
        bp_accuracy=bp_accuracy,
        chance=chance,
        positions=positions,
        checkpoint=str(ckpt.path),
        depth=depth,
        model_filter_level=ckpt.filter_level,
        data_filter_level=k_data,
        num_train=num_train,
        num_validation=num_validation,
        num_test=num_test,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        probe_hidden=probe_hidden,
    )


def plot_probes(result: ProbeResult):
    """Heat-map of accuracy vs (layer, ancestor level) and the paper's curves: accuracy vs level, one per layer."""
    plt = pyplot()
    fig, (heat, lines) = plt.subplots(1, 2, figsize=(10, 3.8))
    image = heat.imshow(result.accuracy, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for (i, j), value in np.ndenumerate(result.accuracy):
        heat.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8,
                  color="white" if value < 0.6 else "black")
    heat.set_xticks(range(len(result.levels)), [str(m) for m in result.levels])
    heat.set_yticks(range(len(result.layers)), ["emb." if j == 0 else str(j) for j in result.layers])
    heat.set_xlabel("ancestor level (0 = root)")
    heat.set_ylabel("encoder layer")
    fig.colorbar(image, ax=heat, label="held-out accuracy")
    colors = plt.get_cmap("viridis")
    for row, layer in enumerate(result.layers):
        color = colors(row / max(1, len(result.layers) - 1))
        lines.plot(result.levels, result.accuracy[row], marker="o", mfc="none", color=color,
                   label="embedding" if layer == 0 else f"layer {layer}")
        lines.plot(result.levels, result.final_accuracy[row], ls=":", lw=0.8, color=color)
    lines.plot(result.levels, result.bp_accuracy, ls="--", color="black", label="BP (whole sequence)")
    lines.plot(result.levels, result.chance, ls=":", color="grey", label="most frequent symbol")
    lines.set_xticks(result.levels)
    lines.set_xlabel("ancestor level (0 = root)")
    lines.set_ylabel("held-out accuracy")
    lines.set_ylim(0, 1.02)
    lines.legend(fontsize=7)
    where = "all positions" if result.positions == "all" else "first and last positions only"
    readout = "linear" if result.probe_hidden == 0 else f"{result.probe_hidden}-unit"
    fig.suptitle(f"Ancestor probes ({readout} readout trained on {where}; ℓ={result.depth}, "
                 f"k_train={result.model_filter_level}, k_data={result.data_filter_level}, {result.num_train} "
                 f"sequences, best of {result.epochs} epochs on {result.num_validation} validation sequences; "
                 "dotted: last epoch)", fontsize=8)
    fig.tight_layout()
    return fig


def write_outputs(result: ProbeResult, out_dir, *, name: str | None = None) -> dict:
    """Write probe[_ends].png and probe[_ends].json into ``out_dir``."""
    out = prepare_output(out_dir)
    name = name or ("probe" if result.positions == "all" else "probe_ends")
    paths = {"figure": save_figure(plot_probes(result), out / f"{name}.png")}
    paths["json"] = write_json(out / f"{name}.json", result.to_dict())
    return paths


MESSAGE_TARGETS = ("ancestor", "complement")


@dataclass
class MessageProbeResult:
    """KL of the BP-message probes of every (target, layer, level) (App. F): (2, P, V) arrays have the targets
    :data:`MESSAGE_TARGETS` first, then rows ``layers`` and columns ``levels``; NaN where a target does not exist
    (the complement of level 0: the root has no sibling).

    The two targets of leaf i at level m (:func:`message_targets`) are the normalised upward messages
    (:meth:`~hf_treelang.core.bp.BeliefPropagation.upward_messages`) of BP_k with k = ``data_filter_level``:
    ``"ancestor"``, that of leaf i's level-m ancestor, and ``"complement"``, that of its level-m complementary
    subtree, the sibling of that ancestor.

    Attributes:
        kl: (2, P, V) held-out test KL(exact message ‖ probe) in nats, mean over tokens, at the best validation epoch.
        final_kl: (2, P, V) the same after the last epoch.
        validation_kl: (2, P, V) the best (lowest) validation KL over the epochs.
        best_epoch: (2, P, V) the epoch of that validation KL (0 = before training; -1 where no target).
        validation_history: (E + 1, 2, P, V) validation KL before training and after every epoch.
        train_kl: (2, P, V) KL on the training sequences after the last epoch (the trained positions only).
        baseline_kl: (2, V) test KL of the mean training message (what a probe that ignores the hidden state reaches).
        targets: :data:`MESSAGE_TARGETS`.
        layers, levels, positions, checkpoint, depth, model_filter_level, data_filter_level, num_train,
        num_validation, num_test, epochs, batch_size, learning_rate, probe_hidden: as in :class:`ProbeResult`.
    """

    kl: np.ndarray
    final_kl: np.ndarray
    validation_kl: np.ndarray
    best_epoch: np.ndarray
    validation_history: np.ndarray
    train_kl: np.ndarray
    baseline_kl: np.ndarray
    targets: list
    layers: list
    levels: list
    positions: str
    checkpoint: str
    depth: int
    model_filter_level: int
    data_filter_level: int
    num_train: int
    num_validation: int
    num_test: int
    epochs: int
    batch_size: int
    learning_rate: float
    probe_hidden: int

    def to_dict(self) -> dict:
        setting = ("checkpoint", "positions", "depth", "model_filter_level", "data_filter_level", "num_train",
                   "num_validation", "num_test", "epochs", "batch_size", "learning_rate", "probe_hidden", "targets",
                   "layers", "levels", "kl", "final_kl", "validation_kl", "best_epoch", "validation_history",
                   "train_kl", "baseline_kl")
        return {"target": "messages", **{name: getattr(self, name) for name in setting}}


def message_targets(upward: list, levels: list, depth: int) -> np.ndarray:
    """(n, L, 2, V, q) the exact messages each leaf's probes predict, from the upward messages ``upward[m]``
    (n, 2**m, q) of :meth:`~hf_treelang.core.bp.BeliefPropagation.upward_messages`.

    For leaf i and level m, with ``a = i >> (ℓ - m)`` the index of its level-m ancestor::

        [:, i, 0, v] = upward[m][:, a]        the ancestor's message,   P(leaves under a | a)
        [:, i, 1, v] = upward[m][:, a ^ 1]    the complementary subtree's message (m >= 1): the other level-m
                                              subtree under the leaf's level-(m-1) ancestor (App. F, Fig. 13)

    The complement of level 0 does not exist and is NaN. At level m = k of filtered data the level-(m-1) parent is
    filtered out; ``a ^ 1`` is still the sibling in the tree's indexing (the node the full tree would pair with a).
    """
    index = np.arange(1 << depth)
    parts = []
    for m in levels:
        messages = np.asarray(upward[m], dtype=np.float64)  # (n, 2**m, q)
        ancestor = index >> (depth - m)
        complement = messages[:, ancestor ^ 1] if m > 0 else np.full_like(messages[:, ancestor], np.nan)
        parts.append(np.stack([messages[:, ancestor], complement], 2))  # (n, L, 2, q)
    return np.stack(parts, 3)  # (n, L, 2, V, q)


def probe_messages(
    checkpoint,
    *,
    levels=None,
    layers=None,
    data_filter_level: int | None = None,
    positions: str = "all",
    num_train: int = paper.PROBE_TRAIN,
    num_validation: int = paper.PROBE_VALIDATION,
    num_test: int = 2**12,
    epochs: int = paper.PROBE_EPOCHS,
    batch_size: int = paper.PROBE_BATCH_SIZE,
    learning_rate: float = paper.PROBE_LEARNING_RATE,
    probe_hidden: int = paper.PROBE_HIDDEN,
    seed: int = 20_240_603,
    device="cpu",
    progress: bool = True,
    log: Callable | None = None,
    max_hours: float = DEFAULT_MAX_HOURS,
) -> MessageProbeResult:
    """Probe the BP messages App. F says the network carries, per (layer, level m): from the hidden state of leaf i,
    the upward message of its level-m ancestor and that of its level-m complementary subtree
    (:func:`message_targets`).

    The protocol is that of :func:`probe` (same data, readout, optimiser, epochs and best-epoch choice), with the
    readout's softmax trained by KL(exact message ‖ softmax) instead of cross-entropy to a symbol, and the best
    epoch the one of lowest validation KL. The messages are BP_k's for k = ``data_filter_level`` on the fully
    observed sequences. The arguments are those of :func:`probe`.
    """
    num_train, num_validation, num_test, epochs, batch_size, probe_hidden, learning_rate = _check_training(
        num_train, num_validation, num_test, epochs, batch_size, probe_hidden, learning_rate)
    max_hours = check_max_hours(max_hours)

    def estimate(ckpt, leaves, layers, levels):
        length = leaves.shape[1]
        found = estimate_probe(ckpt, leaves, layers=layers, num_levels=2 * len(levels),
                               train_positions=length if positions == "all" else min(2, length), num_train=num_train,
                               num_validation=num_validation, num_test=num_test, epochs=epochs, batch_size=batch_size,
                               probe_hidden=probe_hidden)
        log(found.describe())
        check_time("--epochs", epochs, found.seconds_for, bound_hours=max_hours, bound_flag="--max-hours")

    data = _prepare(checkpoint, levels=levels, layers=layers, data_filter_level=data_filter_level,
                    positions=positions, num_train=num_train, num_validation=num_validation, num_test=num_test,
                    seed=seed, device=device, estimate=None if log is None else estimate, messages=True, log=log)
    ckpt, levels, depth, k_data = data.ckpt, data.levels, data.ckpt.depth, data.data_filter_level
    upward = BeliefPropagation(ckpt.grammar, depth, k_data).upward_messages(data.trees.leaves)
    targets = message_targets(upward, levels, depth)  # (n, L, 2, V, q)
    n, length, _, num_levels, q = targets.shape
    # One probe per existing (target, level): the columns of the batched readout.
    columns = [(t, v) for t in range(len(MESSAGE_TARGETS)) for v in range(num_levels) if t == 0 or levels[v] > 0]
    t_index, v_index = (list(axis) for axis in zip(*columns))
    labels = torch.as_tensor(targets[:, :, t_index, v_index], dtype=torch.float32)  # (n, L, C, q)

    def loss(logits, y):  # logits (P, T, C, q), y (T, C, q): the sum over probes of each one's mean KL
        return _kl(logits, y).mean(1).sum()

    fit = _fit(data, labels, loss=loss, score=_kl, higher_is_better=False, epochs=epochs, batch_size=batch_size,
               learning_rate=learning_rate, probe_hidden=probe_hidden, seed=seed, progress=progress, log=log)
    eval_batch, states, test, dev = max(batch_size, 1024), data.states, data.test, ckpt.device
    test_kl = lambda probes: _mean_score(_kl, probes, states[test], labels[test], data.all_positions,  # noqa: E731
                                         eval_batch, dev)
    best_kl, final_kl = test_kl(fit.best), test_kl(fit.last)
    train_kl = _mean_score(_kl, fit.last, states[data.train], labels[data.train], data.train_positions, eval_batch,
                           dev)
    # Baseline: the mean training message of each column (over the trained positions), scored on the test tokens.
    mean_message = labels[data.train][:, data.train_positions].double().mean((0, 1))  # (C, q)
    test_targets = labels[test].double()  # (n_test, L, C, q)
    baseline = (torch.special.xlogy(test_targets, test_targets)
                - torch.special.xlogy(test_targets, mean_message)).sum(-1).mean((0, 1)).numpy()  # (C,)

    def by_target(values: np.ndarray, fill=np.nan) -> np.ndarray:
        """(..., C) per column -> (..., 2, V), ``fill`` where no column."""
        out = np.full((*values.shape[:-1], len(MESSAGE_TARGETS), num_levels), fill, dtype=values.dtype)
        out[..., t_index, v_index] = values
        return out

    def layers_last(values: np.ndarray, fill=np.nan) -> np.ndarray:
        """(..., P, C) -> (..., 2, P, V)."""
        return np.moveaxis(by_target(values, fill), -3, -2)

    return MessageProbeResult(
        kl=layers_last(best_kl),
        final_kl=layers_last(final_kl),
        validation_kl=layers_last(fit.best_validation),
        best_epoch=layers_last(fit.best_epoch, fill=-1),
        validation_history=layers_last(fit.history),  # (E + 1, 2, P, V)
        train_kl=layers_last(train_kl),
        baseline_kl=by_target(baseline),
        targets=list(MESSAGE_TARGETS),
        layers=data.layers,
        levels=levels,
        positions=positions,
        checkpoint=str(ckpt.path),
        depth=depth,
        model_filter_level=ckpt.filter_level,
        data_filter_level=k_data,
        num_train=num_train,
        num_validation=num_validation,
        num_test=num_test,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        probe_hidden=probe_hidden,
    )


def plot_message_probes(result: MessageProbeResult):
    """One heat map per target: test KL to the exact message vs (layer, level), the mean message's KL under each
    level; one colour scale, 0 to the largest baseline."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(result.targets), figsize=(5 * len(result.targets), 3.8), squeeze=False)
    finite = result.baseline_kl[np.isfinite(result.baseline_kl)]
    top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    titles = {"ancestor": "upward message of the level-m ancestor",
              "complement": "upward message of the level-m complementary subtree"}
    for t, (heat, target) in enumerate(zip(axes[0], result.targets)):
        values = result.kl[t]  # (P, V)
        image = heat.imshow(values, cmap="viridis_r", vmin=0.0, vmax=top, aspect="auto")
        for (i, j), value in np.ndenumerate(values):
            if np.isfinite(value):
                heat.text(j, i, f"{value:.3f}", ha="center", va="center", fontsize=8,
                          color="white" if value > 0.6 * top else "black")
        ticks = [f"{m}\n(mean {b:.2f})" if np.isfinite(b) else f"{m}\n(none)"
                 for m, b in zip(result.levels, result.baseline_kl[t])]
        heat.set_xticks(range(len(result.levels)), ticks, fontsize=7)
        heat.set_yticks(range(len(result.layers)), ["emb." if j == 0 else str(j) for j in result.layers])
        heat.set_xlabel("level m (0 = root); KL of the mean message in brackets")
        heat.set_ylabel("encoder layer")
        heat.set_title(titles.get(target, target), fontsize=9)
        fig.colorbar(image, ax=heat, label="held-out KL(exact ‖ probe), nats")
    where = "all positions" if result.positions == "all" else "first and last positions only"
    readout = "linear" if result.probe_hidden == 0 else f"{result.probe_hidden}-unit"
    fig.suptitle(f"BP-message probes ({readout} readout trained on {where}; ℓ={result.depth}, "
                 f"k_train={result.model_filter_level}, messages of BP_k with k={result.data_filter_level}, "
                 f"{result.num_train} sequences, best of {result.epochs} epochs)", fontsize=8)
    fig.tight_layout()
    return fig


def write_message_outputs(result: MessageProbeResult, out_dir, *, name: str | None = None) -> dict:
    """Write probe_messages[_ends].png and probe_messages[_ends].json into ``out_dir``."""
    out = prepare_output(out_dir)
    name = name or ("probe_messages" if result.positions == "all" else "probe_messages_ends")
    paths = {"figure": save_figure(plot_message_probes(result), out / f"{name}.png")}
    paths["json"] = write_json(out / f"{name}.json", result.to_dict())
    return paths


@dataclass
class FilteredProbeResult:
    """App. E.7 (right): probes of the complete encoding of MLM models trained on k_train = 0, 1, ..., on k = 0 data.

    Attributes:
        models: one :class:`ProbeResult` per model, each of its last layer only (``layers == [n_L]``), in the order
            of the checkpoints; all on the same sequences.
    """

    models: list

    @property
    def filter_levels(self) -> list:
        return [r.model_filter_level for r in self.models]

    def to_dict(self) -> dict:
        return {"filter_levels": self.filter_levels, "models": [r.to_dict() for r in self.models]}


def probe_filtered_models(checkpoints, **kwargs) -> FilteredProbeResult:
    """:func:`probe` of the last layer of each checkpoint on full-hierarchy data (k = 0), the same sequences for all.

    Every checkpoint is loaded and checked before any probe trains. ``kwargs`` go to :func:`probe` (its
    ``layers`` and ``data_filter_level`` are fixed here). The authors' notebook uses a linear readout for this
    figure (``probe_hidden=0``).
    """
    if not checkpoints:
        raise ValueError("checkpoints must name at least one TreeLang checkpoint folder, got none")
    for name in ("layers", "data_filter_level"):
        if name in kwargs:
            raise ValueError(f"{name} is fixed by probe_filtered_models (the last layer, k = 0 data)")
    loaded = [probe_checkpoint(c, device=kwargs.get("device", "cpu")) for c in checkpoints]
    same_grammar = all(np.array_equal(c.grammar.M, loaded[0].grammar.M) for c in loaded)
    if len({(c.depth, c.num_symbols) for c in loaded}) != 1 or not same_grammar:
        raise ValueError("checkpoints must share one grammar, q and depth ℓ (one reproduction), got "
                         + ", ".join(c.describe() for c in loaded))
    return FilteredProbeResult(models=[probe(c, layers=[c.num_layers], data_filter_level=0, **kwargs)
                                       for c in loaded])


def plot_filtered_probes(result: FilteredProbeResult):
    """Accuracy vs ancestor level, one curve per k_train (the paper's colours), BP on the same data dashed."""
    plt = pyplot()
    first = result.models[0]
    fig, ax = plt.subplots(figsize=(4.6, 3.6))
    for r in result.models:
        ax.plot(r.levels, r.accuracy[0], marker="o", mfc="none", color=level_color(r.model_filter_level, r.depth),
                label=f"$k_{{train}}$={r.model_filter_level}")
    ax.plot(first.levels, first.bp_accuracy, ls="--", color="grey", label="BP (whole sequence)")
    ax.set_xticks(first.levels)
    ax.set_xlabel("ancestor level (0 = root)")
    ax.set_ylabel("held-out accuracy ($k_{test}$=0)")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7)
    readout = "linear" if first.probe_hidden == 0 else f"{first.probe_hidden}-unit"
    ax.set_title(f"Probes of the complete encoding ({readout} readout, {first.num_train} sequences)", fontsize=8)
    fig.tight_layout()
    return fig


def write_filtered_outputs(result: FilteredProbeResult, out_dir, *, name: str = "probe_filtered") -> dict:
    """Write ``<name>.png`` and ``<name>.json`` into ``out_dir``."""
    out = prepare_output(out_dir)
    paths = {"figure": save_figure(plot_filtered_probes(result), out / f"{name}.png")}
    paths["json"] = write_json(out / f"{name}.json", result.to_dict())
    return paths


def run(args) -> int:
    """``hf-treelang probe`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    target = getattr(args, "target", "ancestors")
    try:
        if target not in PROBE_TARGETS:
            raise ValueError(f"target must be one of {PROBE_TARGETS}, got {target!r}")
        if args.threads is not None:
            torch.set_num_threads(check_positive("threads", args.threads))
        result = (probe if target == "ancestors" else probe_messages)(
            args.checkpoint, levels=args.levels, layers=args.layers, data_filter_level=args.data_filter_level,
            positions=args.positions, num_train=args.num_train, num_validation=args.num_validation,
            num_test=args.num_test, epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate,
            probe_hidden=args.probe_hidden, seed=args.seed, device=args.device,
            progress=not args.no_progress,  # hf_treelang.cli: bars only on a terminal
            log=lambda line: print(line, flush=True), max_hours=getattr(args, "max_hours", DEFAULT_MAX_HOURS))
    except (ValueError, TypeError) as error:
        return cli_error("probe", error)
    if target == "messages":
        paths = write_message_outputs(result, args.out)
        print("held-out KL(exact message ‖ probe) in nats at the best validation epoch (last epoch in brackets); "
              "rows: layers, columns: levels " + str(result.levels))
        for t, name in enumerate(result.targets):
            print(f"  {name} message:")
            for layer, row, final in zip(result.layers, result.kl[t], result.final_kl[t]):
                print(f"    layer {layer}: " + "  ".join(f"{a:.4f} ({b:.4f})" if np.isfinite(a) else "none"
                                                          for a, b in zip(row, final)))
            print("    mean message: "
                  + "  ".join(f"{b:.4f}" if np.isfinite(b) else "none" for b in result.baseline_kl[t]))
        print(f"wrote {paths['figure']} and {paths['json']}")
        return 0
    paths = write_outputs(result, args.out)
    print("held-out accuracy at the best validation epoch (last epoch in brackets); rows: layers, columns: ancestor "
          "levels " + str(result.levels))
    for layer, row, final in zip(result.layers, result.accuracy, result.final_accuracy):
        print(f"  layer {layer}: " + "  ".join(f"{a:.3f} ({b:.3f})" for a, b in zip(row, final)))
    print("  BP:      " + "  ".join(f"{a:.3f}" for a in result.bp_accuracy))
    print(f"wrote {paths['figure']} and {paths['json']}")
    return 0
