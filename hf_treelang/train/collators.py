"""Batch collators for the two tasks of the paper (Sec. 3.2 root classification, Sec. 3.3 masked language modelling)
and for next-leaf prediction (the causal LM, :class:`NextLeafCollator`).

The library's ``DataCollatorForLanguageModeling`` needs a tokenizer and does BERT's 80/10/10 masking; the paper
masks exactly one leaf per sequence, at a uniformly random position (:mod:`hf_treelang.core.masking`), and always
replaces it by the mask token.

Glossary: ``b`` batch, ``l`` depth (ℓ), a sequence has ``2**l`` leaves with symbols in [0, q); the mask id is q.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import TrainerCallback

from hf_treelang.core.masking import TrainingMasking, mask_training_batch
from hf_treelang.core.oracle import next_leaf_inputs
from hf_treelang.models.modeling_treelang import check_input_ids, check_labels

EXAMPLE_INDEX = "example_index"  # the training set's row number, the key of an example's training masks


def _stack_integers(name: str, rows: list) -> torch.Tensor:
    """Stack a batch's rows into an int64 tensor; ragged or non-integer rows fail here, before the model sees them."""
    try:
        array = np.asarray(rows)
    except ValueError as error:  # ragged rows
        raise ValueError(f"{name} of a batch must all have the same length, got lengths "
                         f"{sorted({len(row) for row in rows})}") from error
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {array.dtype}")
    return torch.as_tensor(array.astype(np.int64))


def _stack_input_ids(features: list) -> torch.Tensor:
    return _stack_integers("input_ids", [f["input_ids"] for f in features])  # (b, 2**l)


@dataclass
class MaskedLeafCollator:
    """Collate ``{"input_ids": [2**ℓ ints]}`` examples for MLM with one masked leaf per sequence (the paper's setup).

    Args:
        mask_token_id: the mask id, q (``config.mask_token_id``).
        mask_rate: ``None`` (default) masks exactly one leaf per sequence at a uniformly random position; a float in
            (0, 1] masks every leaf independently with that probability, and one random leaf where none was drawn.
        seed: ``None`` (default) draws positions from torch's global generator; an int gives the collator its own
            generator, so the masks depend only on this seed and the order of the batches.
        masking: the whole training-mask rule instead of ``mask_rate``
            (:class:`~hf_treelang.core.masking.TrainingMasking`: block masks, a rate falling over the run).

    Training runs key the masks by example (what :func:`hf_treelang.train.loop.train` does): when the examples carry
    an ``example_index`` column, the masks of a batch are a function of (``seed``, :attr:`epoch`, the batch's
    example indices) alone, drawn from a generator seeded with their hash. Why: the Trainer collates batches ahead
    of the step that uses them (accelerate prefetches one), so a mask stream shared with dropout (torch's global
    generator) or a generator whose state is saved at a checkpoint is one batch ahead of the weights saved with it,
    and a run resumed from that checkpoint drew other masks than the uninterrupted run. Keyed masks need
    no state: a resumed run, which skips the trained batches without collating them, masks every later batch
    exactly as the uninterrupted run did. :class:`MaskEpochCallback` sets :attr:`epoch` at every epoch start.

    A falling rate (``masking.mask_rate_final``) needs each batch's optimiser step: :class:`MaskEpochCallback` sets
    :attr:`first_step` (the steps done when the epoch starts, the resumed ones included) and the collator counts the
    training batches it collates from there, ``gradient_accumulation_steps`` to a step. The count is that of the
    batches served in order, prefetched or not; a resumed run skips the trained batches without collating them, so
    the count starts where the uninterrupted run's stood (data-loading workers, which hold copies of the count, are
    refused with such a rule by :func:`hf_treelang.train.run.check_mask_options`).

    Example:
        >>> collate = MaskedLeafCollator(mask_token_id=4, seed=0)
        >>> batch = collate([{"input_ids": [0, 1, 2, 3]}])
        >>> batch["input_ids"].shape, int((batch["labels"] != -100).sum())
        (torch.Size([1, 4]), 1)
    """

    mask_token_id: int
    mask_rate: float | None = None
    seed: int | None = None
    epoch: int = 0  # the training epoch of the batches being collated (keyed masks), see MaskEpochCallback
    masking: TrainingMasking | None = None
    first_step: int = 0  # the optimiser steps done when the epoch started (a falling rate), see MaskEpochCallback
    gradient_accumulation_steps: int = 1
    _batches: int = field(default=0, init=False, repr=False)  # training batches collated since the epoch started
    _generator: torch.Generator | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        if isinstance(self.mask_token_id, bool) or not isinstance(self.mask_token_id, int) or self.mask_token_id < 1:
            raise ValueError(f"mask_token_id must be an int >= 1 (the number of symbols q), got {self.mask_token_id!r}")
        if self.masking is not None and self.mask_rate is not None:
            raise ValueError(f"give `mask_rate` ({self.mask_rate!r}) or `masking` (which holds its mask_rate), "
                             f"not both")
        if self.masking is None:
            self.masking = TrainingMasking(self.mask_rate)
        self.mask_rate = self.masking.mask_rate
        if self.seed is not None:
            self._generator = torch.Generator().manual_seed(int(self.seed))

    def __call__(self, features: list) -> dict:
        if "labels" in features[0]:
            # a fixed, already masked evaluation set: the Trainer uses one collator for training and evaluation
            return PremaskedCollator(num_symbols=self.mask_token_id)(features)
        input_ids = _stack_input_ids(features)  # (b, 2**l)
        check_input_ids(input_ids, self.mask_token_id, allow_mask=False)  # the leaves to mask are symbols in [0, q)
        b, n_leaves = input_ids.shape
        generator = self.keyed_generator(features) if EXAMPLE_INDEX in features[0] else self._generator
        step = self.first_step + self._batches // self.gradient_accumulation_steps
        self._batches += 1
        draws = self.masking.draw(b, n_leaves, generator, torch.full((b,), step, dtype=torch.int64))
        masked, labels = mask_training_batch(input_ids, self.mask_token_id, draws.positions, draws.draws,
                                             draws.blocks)  # (b, 2**l) each
        return {"input_ids": masked, "labels": labels}

    def start_epoch(self, epoch: int, first_step: int) -> None:
        """The batches collated next are epoch ``epoch``'s, from optimiser step ``first_step`` on."""
        self.epoch, self.first_step, self._batches = int(epoch), int(first_step), 0

    def keyed_generator(self, features: list) -> torch.Generator:
        """The generator of a batch's masks, seeded with a hash of (``seed``, ``epoch``, the example indices)."""
        if self.seed is None:
            raise ValueError(f"MaskedLeafCollator needs an int `seed` to key the masks of examples that carry "
                             f"{EXAMPLE_INDEX!r}, got seed=None")
        key = np.asarray([int(self.seed), int(self.epoch), *(int(f[EXAMPLE_INDEX]) for f in features)], dtype="<i8")
        digest = hashlib.blake2b(key.tobytes(), digest_size=8, person=b"treelang-masks").digest()
        return torch.Generator().manual_seed(int.from_bytes(digest, "little"))


class MaskEpochCallback(TrainerCallback):
    """Set the epoch of a :class:`MaskedLeafCollator` at the start of every epoch (its keyed masks depend on it).

    ``state.epoch`` is the whole number of finished epochs at the start of an epoch, and ``e + f`` (f < 1) when a run
    resumes in the middle of epoch e, so its integer part is the epoch about to run; ``state.global_step`` is the
    step the epoch's first collated batch trains (a falling mask rate's key).
    """

    def __init__(self, collator: MaskedLeafCollator):
        self.collator = collator

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.collator.gradient_accumulation_steps = int(getattr(args, "gradient_accumulation_steps", 1))
        self.collator.start_epoch(int(state.epoch or 0), int(state.global_step or 0))


@dataclass
class RootClassificationCollator:
    """Collate ``{"input_ids": [...], "root": int}`` examples into ``input_ids`` (b, 2**ℓ) and ``labels`` (b,).

    With ``num_symbols`` (q) the leaves are checked to lie in [0, q) and the roots in [0, q), so bad data fails
    here with a clear error (the model checks values itself only in eager mode on CPU).
    """

    label_column: str = "labels"
    num_symbols: int | None = None

    def __call__(self, features: list) -> dict:
        input_ids = _stack_input_ids(features)  # (b, 2**l)
        labels = _stack_integers("labels", [f[self.label_column] for f in features])  # (b,)
        if self.num_symbols is not None:
            check_input_ids(input_ids, self.num_symbols, allow_mask=False)
            check_labels(labels, self.num_symbols, (input_ids.shape[0],))
        return {"input_ids": input_ids, "labels": labels}


@dataclass
class PremaskedCollator:
    """Collate examples that already carry ``input_ids`` and ``labels`` (a fixed MLM evaluation set).

    With ``num_symbols`` (q) the ids are checked to lie in [0, q] and the labels in [0, q) or -100.
    """

    num_symbols: int | None = None

    def __call__(self, features: list) -> dict:
        input_ids = _stack_input_ids(features)  # (b, 2**l)
        labels = _stack_integers("labels", [f["labels"] for f in features])  # (b, 2**l)
        if self.num_symbols is not None:
            check_input_ids(input_ids, self.num_symbols)
            check_labels(labels, self.num_symbols, tuple(input_ids.shape), allow_ignored=True)
        return {"input_ids": input_ids, "labels": labels}


@dataclass
class NextLeafCollator:
    """Collate ``{"input_ids": [2**ℓ leaves]}`` examples for next-leaf prediction: ``input_ids`` (b, 2**ℓ)
    ``[BOS, x_0 .. x_{L-2}]`` with BOS = q (:func:`hf_treelang.core.oracle.next_leaf_inputs`) and ``labels`` (b, 2**ℓ)
    the leaves, unshifted (position i predicts leaf i). Nothing is random: training and evaluation batches alike.

    Example:
        >>> batch = NextLeafCollator(num_symbols=3)([{"input_ids": [2, 0, 1, 1]}])
        >>> batch["input_ids"].tolist(), batch["labels"].tolist()
        ([[3, 2, 0, 1]], [[2, 0, 1, 1]])
    """

    num_symbols: int

    def __call__(self, features: list) -> dict:
        leaves = _stack_input_ids(features)  # (b, 2**l)
        check_input_ids(leaves, self.num_symbols, allow_mask=False)  # the leaves: symbols in [0, q)
        return {"input_ids": next_leaf_inputs(leaves, self.num_symbols), "labels": leaves}
