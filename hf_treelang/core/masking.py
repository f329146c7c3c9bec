"""The masked positions of the paper's MLM task: one leaf per sequence, at a uniformly random position (Sec. 3.3).

Two streams, one home:

* :func:`evaluation_positions` — the *fixed* masked positions of an evaluation set, a function of the set's sampling
  seed alone: ``positions[i]`` depends only on (``sampling_seed``, i). Every consumer of a held-out split (the
  dataset card's BP single-mask accuracy, the BP-KL callback, the model card, the analyses) masks the same leaves of
  the same split, so their accuracies are computed on identical inputs.
* :func:`training_positions` — fresh positions for every training batch, from a torch generator (the Trainer seeds
  and checkpoints torch's global one).

:func:`mask_single_leaf` applies positions to a batch (the mask id is q) and gives the MLM labels;
:func:`mask_training_batch` adds the optional ``mask_rate`` rule (:func:`check_mask_rate`) and whole-block masks,
used by the collator and the device data stream alike. :class:`TrainingMasking` is a run's training-mask rule (the
rate, its linear fall over the run's steps, the fraction of rows masked by one aligned block of leaves) and
:meth:`TrainingMasking.draw` the one place its random draws are made, from the generator each engine keys.

Worked example (ℓ = 2, q = 4, mask id 4): leaves ``[1, 1, 3, 0]``, position 2 -> input ``[1, 1, 4, 0]``,
labels ``[-100, -100, 3, -100]``.

Dimension glossary: ``n`` sequences, ``b`` batch, ``l`` depth (ℓ), a sequence has ``2**l`` leaves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .params import MAX_LEAVES, check_depth, check_int, check_param, check_real

MASK_STREAM_TAG = 0x3A5C  # the evaluation positions' stream: never shared with the tree or uniform streams
IGNORE_INDEX = -100  # label of an unmasked position (transformers' convention)


def evaluation_positions(sampling_seed: int, n: int, depth: int, arity: int = 2) -> np.ndarray:
    """The fixed masked position of each of the ``n`` sequences of an evaluation set, (n,) int64 in [0, s**depth).

    Args:
        sampling_seed: the sampling seed of the set's trees (for a dataset split, its split seed).
        n: the number of sequences.
        depth: ℓ.
        arity: s, the children of every node (2 for the paper's trees): sequences have s**depth leaves.

    Example:
        >>> evaluation_positions(sampling_seed=0, n=3, depth=4).tolist()
        [5, 11, 2]
    """
    arity = check_param("arity", arity)
    return _positions(sampling_seed, n, arity ** check_depth(depth, arity))


def _positions(sampling_seed: int, n: int, num_leaves: int) -> np.ndarray:
    """(n,) positions in [0, num_leaves) from the evaluation stream of ``sampling_seed``."""
    seed = check_param("sampling_seed", sampling_seed)
    n = check_param("num_sequences", n, as_name="n")
    generator = np.random.Generator(np.random.Philox(np.random.SeedSequence([seed, MASK_STREAM_TAG])))
    return generator.integers(0, num_leaves, size=n, dtype=np.int64)  # (n,)


def training_positions(batch_size: int, num_leaves: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Fresh uniformly random masked positions for a training batch, (b,) int64 in [0, num_leaves)."""
    return torch.randint(0, num_leaves, (batch_size,), generator=generator)  # (b,)


def mask_single_leaf(input_ids, mask_token_id: int, positions) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace leaf ``positions[i]`` of row i by the mask id; labels hold its symbol there and -100 elsewhere.

    Args:
        input_ids: (b, 2**ℓ) integer symbols (tensor or array).
        mask_token_id: the mask id q.
        positions: (b,) masked position per row.

    Returns:
        ``(masked_input_ids, labels)``, both (b, 2**ℓ) int64 tensors.

    Example (the module's worked example):
        >>> masked, labels = mask_single_leaf([[1, 1, 3, 0]], mask_token_id=4, positions=[2])
        >>> masked.tolist(), labels.tolist()
        ([[1, 1, 4, 0]], [[-100, -100, 3, -100]])
    """
    input_ids = torch.as_tensor(input_ids, dtype=torch.int64)
    positions = torch.as_tensor(positions, dtype=torch.int64, device=input_ids.device)
    rows = torch.arange(input_ids.shape[0], device=input_ids.device)
    masked = input_ids.clone()
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels[rows, positions] = input_ids[rows, positions]
    masked[rows, positions] = mask_token_id
    return masked, labels


def check_mask_rate(mask_rate) -> float | None:
    """``mask_rate``: None (one masked leaf per sequence, the paper) or a real number in [0, 1]; returns it as a
    float, or None for 0 — the rule of :func:`mask_training_batch` at rate 0 masks no drawn leaf and falls back on
    the single random one, so 0 names the paper's masking where None cannot be written (a command line, a preset)."""
    if mask_rate is None:
        return None
    check_real("mask_rate", mask_rate, 0.0, 1.0)
    return None if mask_rate == 0 else float(mask_rate)


def mask_training_batch(input_ids: torch.Tensor, mask_token_id: int, positions: torch.Tensor,
                        draws: torch.Tensor | None = None,
                        blocks: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask a training batch: leaf ``positions[i]`` of row i, or, with ``mask_rate``, the leaves its draws chose, or
    the row's whole block of leaves.

    Args:
        input_ids: (b, 2**ℓ) symbols.
        mask_token_id: the mask id q.
        positions: (b,) the single random leaf of each row (:func:`training_positions`).
        draws: None (the paper: one masked leaf) or (b, 2**ℓ) bool Bernoulli(``mask_rate``) draws; rows where the
            draw masked something use it instead of the single random leaf.
        blocks: None or (b, 2**ℓ) bool, one aligned block of leaves in the rows that take one
            (:meth:`TrainingMasking.draw`), no leaf elsewhere; such a row masks its block and nothing else.

    Returns:
        ``(masked_input_ids, labels)``, both (b, 2**ℓ) int64, labels -100 off the masked leaves.
    """
    masked, labels = mask_single_leaf(input_ids, mask_token_id, positions)  # (b, 2**l) each
    if draws is None and blocks is None:
        return masked, labels
    input_ids = torch.as_tensor(input_ids, dtype=torch.int64)
    chosen = labels != IGNORE_INDEX  # (b, 2**l)
    if draws is not None:
        chosen = torch.where(draws.any(-1, keepdim=True), draws, chosen)
    if blocks is not None:
        chosen = torch.where(blocks.any(-1, keepdim=True), blocks, chosen)
    masked = torch.where(chosen, torch.full_like(input_ids, mask_token_id), input_ids)
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    return masked, labels


def check_block_masking(fraction, sizes, depth: int) -> tuple[float, tuple]:
    """``fraction`` in [0, 1] of the training rows masked by one aligned block, of a size drawn from ``sizes``: each
    a power of 2 in [1, 2**depth] (an aligned block of 2**m leaves is the leaves of one node m levels above them).
    ``sizes`` is used and checked only when ``fraction`` > 0; returns ``(fraction, sizes)`` as a float and a tuple
    of ints (empty at fraction 0)."""
    fraction = float(check_real("block_mask_fraction", fraction, 0.0, 1.0))
    if fraction == 0:
        return 0.0, ()
    sizes = list(sizes or ())
    if not sizes:
        raise ValueError(f"`block_mask_sizes` must name at least one block size when block_mask_fraction = "
                         f"{fraction} > 0, got {sizes!r}")
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1 or size > 1 << depth \
                or size & (size - 1):
            raise ValueError(f"`block_mask_sizes` must hold powers of 2 in [1, 2**depth] = [1, {1 << depth}], "
                             f"got {size!r}")
    return fraction, tuple(int(size) for size in sizes)


@dataclass(frozen=True)
class TrainingDraws:
    """A batch's random mask draws: ``positions`` (b,), ``draws`` (b, 2**ℓ) bool or None, ``blocks`` (b, 2**ℓ) bool
    or None — the arguments of :func:`mask_training_batch`."""

    positions: torch.Tensor
    draws: torch.Tensor | None = None
    blocks: torch.Tensor | None = None


@dataclass(frozen=True)
class TrainingMasking:
    """A run's training-mask rule; its defaults are the paper's one masked leaf per sequence.

    Attributes:
        mask_rate: None (one random leaf per row) or the rate of the Bernoulli draw of every leaf (a row with none
            drawn masks its random leaf), in (0, 1] (:func:`check_mask_rate`).
        mask_rate_final: None (the rate is constant) or the rate the linear schedule reaches at step S, in [0, 1]:
            the rate at optimiser step s (0-based) of S is ``mask_rate + (mask_rate_final - mask_rate) * s / S``,
            so the run's last step, s = S − 1, draws at ``mask_rate + (mask_rate_final - mask_rate) * (S − 1) / S``
            (0.14 for S = 10 falling from 0.5 to 0.1): one step short of ``mask_rate_final`` (a falling rate: many
            masked leaves early, few late, after Ankner et al. 2023). Needs ``mask_rate``.
        block_fraction: the probability that a row is masked by one whole aligned block of leaves instead (the
            leaves under one node of the tree, whose siblings would otherwise give most of their information).
        block_sizes: the block sizes, one drawn uniformly per row; powers of 2 up to 2**ℓ.
        total_steps: S, the run's optimiser steps (needed with ``mask_rate_final``).

    Draw order from the batch's generator: the single positions (b,), the rate's uniforms (b, 2**ℓ) with a
    ``mask_rate``, then with ``block_fraction`` > 0 the rows' block choice (b,), size index (b,) and anchor leaf
    (b,). A rule at its defaults draws what the paper's masking always drew, so its batches are unchanged.
    """

    mask_rate: float | None = None
    mask_rate_final: float | None = None
    block_fraction: float = 0.0
    block_sizes: tuple = ()
    total_steps: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "mask_rate", check_mask_rate(self.mask_rate))
        if self.mask_rate_final is not None:
            check_real("mask_rate_final", self.mask_rate_final, 0.0, 1.0)
            if self.mask_rate is None:
                raise ValueError(f"`mask_rate_final` = {self.mask_rate_final} needs a `mask_rate` in (0, 1] to fall "
                                 f"from, got mask_rate = None (one leaf per sequence)")
            if self.total_steps is not None:
                check_int("total_steps", self.total_steps, 1)

    @property
    def scheduled(self) -> bool:
        """Whether the rate changes over the run (the draws then depend on each row's step)."""
        return self.mask_rate_final is not None and self.mask_rate_final != self.mask_rate

    def rates(self, steps: torch.Tensor) -> torch.Tensor:
        """The Bernoulli rate of each row, (b, 1) float64, from its optimiser step (b,) (0-based)."""
        if self.total_steps is None:
            raise ValueError("`total_steps` (the run's optimiser steps) is needed for a `mask_rate_final` schedule, "
                             "got None")
        progress = steps.to(torch.float64).clamp(0, self.total_steps) / self.total_steps  # (b,)
        return (self.mask_rate + (self.mask_rate_final - self.mask_rate) * progress).unsqueeze(-1)  # (b, 1)

    def draw(self, batch_size: int, num_leaves: int, generator: torch.Generator | None = None,
             steps: torch.Tensor | None = None) -> TrainingDraws:
        """The random draws of ``batch_size`` rows of ``num_leaves`` leaves (the row's steps (b,) with a schedule)."""
        positions = training_positions(batch_size, num_leaves, generator)  # (b,)
        draws = blocks = None
        if self.mask_rate is not None:
            uniforms = torch.rand((batch_size, num_leaves), generator=generator)  # (b, 2**l)
            if self.scheduled:
                if steps is None:
                    raise ValueError("a `mask_rate_final` schedule needs each row's optimiser step, got steps=None")
                draws = uniforms < self.rates(torch.as_tensor(steps))
            else:
                draws = uniforms < self.mask_rate
        if self.block_fraction > 0:
            chosen = torch.rand((batch_size,), generator=generator) < self.block_fraction  # (b,)
            index = torch.randint(0, len(self.block_sizes), (batch_size,), generator=generator)  # (b,)
            anchor = torch.randint(0, num_leaves, (batch_size,), generator=generator)  # (b,)
            size = torch.as_tensor(self.block_sizes, dtype=torch.int64)[index]  # (b,)
            start = (anchor - anchor % size).unsqueeze(-1)  # (b, 1): the aligned block holding the anchor leaf
            leaf = torch.arange(num_leaves)  # (2**l,)
            blocks = (leaf >= start) & (leaf < start + size.unsqueeze(-1)) & chosen.unsqueeze(-1)  # (b, 2**l)
        return TrainingDraws(positions, draws, blocks)


def mask_evaluation_set(leaves, mask_token_id: int, sampling_seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An evaluation set with its fixed masks: ``(masked inputs, labels, positions)``, int64 tensors of shapes
    (n, 2**ℓ), (n, 2**ℓ) (the masked symbol, -100 elsewhere) and (n,); any s**ℓ leaves (an s-ary tree's) alike,
    the positions depending only on the number of leaves."""
    leaves = torch.as_tensor(np.asarray(leaves), dtype=torch.int64)  # (n, s**l)
    n, length = leaves.shape
    if not 2 <= length <= MAX_LEAVES:
        raise ValueError(f"`leaves` must have s**depth columns (s >= 2, depth >= 1; at most {MAX_LEAVES}), got {length}")
    positions = torch.from_numpy(_positions(sampling_seed, n, length))  # (n,)
    masked, labels = mask_single_leaf(leaves, mask_token_id, positions)
    return masked, labels, positions


__all__ = [
    "IGNORE_INDEX",
    "MASK_STREAM_TAG",
    "TrainingDraws",
    "TrainingMasking",
    "check_block_masking",
    "check_mask_rate",
    "evaluation_positions",
    "mask_evaluation_set",
    "mask_single_leaf",
    "mask_training_batch",
    "training_positions",
]
