"""Batch collators for the two tasks of the paper (Sec. 3.2 root classification, Sec. 3.3 masked language modelling).

The library's ``DataCollatorForLanguageModeling`` needs a tokenizer and does BERT's 80/10/10 masking; the paper
masks exactly one leaf per sequence, at a uniformly random position (:mod:`hf_treelang.core.masking`), and always
replaces it by the mask token.

Glossary: ``b`` batch, ``l`` depth (ℓ), a sequence has ``2**l`` leaves with symbols in [0, q); the mask id is q.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from hf_treelang.core.masking import mask_single_leaf, training_positions


def _stack_input_ids(features: list) -> torch.Tensor:
    return torch.as_tensor(np.asarray([f["input_ids"] for f in features], dtype=np.int64))  # (b, 2**l)


@dataclass
class MaskedLeafCollator:
    """Collate ``{"input_ids": [2**ℓ ints]}`` examples for MLM with one masked leaf per sequence (the paper's setup).

    Args:
        mask_token_id: the mask id, q (``config.mask_token_id``).
        mask_rate: ``None`` (default) masks exactly one leaf per sequence at a uniformly random position; a float in
            (0, 1] masks every leaf independently with that probability, and one random leaf where none was drawn.
        seed: ``None`` (default) draws positions from torch's global generator, which ``Trainer`` seeds with
            ``TrainingArguments.seed`` and restores when resuming from a checkpoint; an int gives the collator its
            own generator, so the masks depend only on this seed and the order of the batches.

    Example:
        >>> collate = MaskedLeafCollator(mask_token_id=4, seed=0)
        >>> batch = collate([{"input_ids": [0, 1, 2, 3]}])
        >>> batch["input_ids"].shape, int((batch["labels"] != -100).sum())
        (torch.Size([1, 4]), 1)
    """

    mask_token_id: int
    mask_rate: float | None = None
    seed: int | None = None
    _generator: torch.Generator | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        if isinstance(self.mask_token_id, bool) or not isinstance(self.mask_token_id, int) or self.mask_token_id < 1:
            raise ValueError(f"mask_token_id must be an int >= 1 (the number of symbols q), got {self.mask_token_id!r}")
        if self.mask_rate is not None and not 0.0 < float(self.mask_rate) <= 1.0:
            raise ValueError(f"mask_rate must be None (one masked leaf) or in (0, 1], got {self.mask_rate!r}")
        if self.seed is not None:
            self._generator = torch.Generator().manual_seed(int(self.seed))

    def __call__(self, features: list) -> dict:
        if "labels" in features[0]:
            # a fixed, already masked evaluation set: the Trainer uses one collator for training and evaluation
            return PremaskedCollator()(features)
        input_ids = _stack_input_ids(features)  # (b, 2**l)
        b, n_leaves = input_ids.shape
        positions = training_positions(b, n_leaves, self._generator)  # (b,)
        masked, labels = mask_single_leaf(input_ids, self.mask_token_id, positions)
        if self.mask_rate is not None:
            extra = torch.rand((b, n_leaves), generator=self._generator) < float(self.mask_rate)  # (b, 2**l)
            has_any = extra.any(-1)  # (b,)
            # rows where the Bernoulli draw masked something use it instead of the single random leaf
            chosen = torch.where(has_any.unsqueeze(-1), extra, labels != -100)  # (b, 2**l)
            masked = torch.where(chosen, torch.full_like(input_ids, self.mask_token_id), input_ids)
            labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
        return {"input_ids": masked, "labels": labels}


@dataclass
class RootClassificationCollator:
    """Collate ``{"input_ids": [...], "root": int}`` examples into ``input_ids`` (b, 2**ℓ) and ``labels`` (b,)."""

    label_column: str = "labels"

    def __call__(self, features: list) -> dict:
        input_ids = _stack_input_ids(features)  # (b, 2**l)
        labels = torch.as_tensor([int(f[self.label_column]) for f in features], dtype=torch.int64)  # (b,)
        return {"input_ids": input_ids, "labels": labels}


@dataclass
class PremaskedCollator:
    """Collate examples that already carry ``input_ids`` and ``labels`` (a fixed MLM evaluation set)."""

    def __call__(self, features: list) -> dict:
        return {
            "input_ids": _stack_input_ids(features),
            "labels": torch.as_tensor(np.asarray([f["labels"] for f in features], dtype=np.int64)),
        }
