"""The exact oracle for a task: BP_k's distribution of the predicted variable, and BP's accuracy (paper Sec. 2.4, 3).

The predicted variable is the root (root classification, Sec. 3.2) or the one masked leaf of each sequence (MLM,
Sec. 3.3). :func:`predicted_marginals` is the one place where BP's marginals of that variable are computed — for the
BP-KL training callback, the evaluation metric's references, calibration, the dataset card and the reproduction's
baselines alike; :func:`task_inputs` builds the model inputs, masked positions and labels of an evaluation set with the
fixed masks of :mod:`hf_treelang.core.masking`.

Dimension glossary: ``n`` sequences, ``l`` depth (ℓ), ``q`` symbols, ``k`` filter level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .bp import BeliefPropagation
from .masking import mask_evaluation_set

TASKS = ("root", "mlm")


@dataclass
class TaskInputs:
    """An evaluation set ready for a model and for BP.

    Attributes:
        inputs: (n, 2**ℓ) int64 model inputs (one leaf masked for MLM).
        positions: (n,) int64 masked positions (MLM) or ``None`` (root classification).
        labels: (n,) int64 the true value of the predicted variable (root, or masked leaf).
    """

    inputs: torch.Tensor
    positions: torch.Tensor | None
    labels: torch.Tensor

    def __len__(self) -> int:
        return self.inputs.shape[0]


def task_inputs(task: str, leaves, roots, *, mask_token_id: int, sampling_seed: int) -> TaskInputs:
    """The inputs, masked positions and labels of an evaluation set for ``task``.

    Args:
        task: ``"root"`` or ``"mlm"``.
        leaves: (n, 2**ℓ) the sequences; roots: (n,) their roots (used by the root task).
        mask_token_id: the mask id q.
        sampling_seed: the seed the set's trees were drawn with; it fixes the masked positions
            (:func:`hf_treelang.core.masking.evaluation_positions`).

    Example:
        >>> data = task_inputs("mlm", [[1, 1, 3, 0]], [3], mask_token_id=4, sampling_seed=0)
        >>> data.inputs.tolist(), data.positions.tolist(), data.labels.tolist()
        ([[1, 4, 3, 0]], [1], [1])
    """
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {TASKS}, got {task!r}")
    leaves = _as_tensor(leaves).to(torch.int64)  # (n, 2**l)
    if task == "root":
        return TaskInputs(leaves, None, _as_tensor(roots).to(torch.int64))
    masked, labels, positions = mask_evaluation_set(leaves, mask_token_id, sampling_seed)
    rows = torch.arange(leaves.shape[0])
    return TaskInputs(masked, positions, labels[rows, positions])  # labels: the masked symbol per row, (n,)


def predicted_marginals(bp: BeliefPropagation, inputs, positions=None) -> torch.Tensor:
    """BP_k's distribution of the predicted variable, (n, q) float64.

    Args:
        bp: the oracle BP_k (matched or mismatched to the data).
        inputs: (n, 2**ℓ) model inputs (masked leaves carry the mask id).
        positions: (n,) the masked leaf to predict per row, or ``None`` for the root.

    The masked-leaf case runs BP in passes of its default batch size (sized by q, see
    :meth:`~hf_treelang.core.bp.BeliefPropagation.default_batch_size`) and keeps only the predicted leaf of each
    row, so memory stays bounded at any n, depth and q.

    Example:
        >>> from hf_treelang.core.grammar import Grammar
        >>> bp = BeliefPropagation(Grammar.random(4, 1.0, 0), depth=2, filter_level=0)
        >>> predicted_marginals(bp, torch.tensor([[0, 1, 4, 3]]), torch.tensor([2])).shape
        torch.Size([1, 4])
    """
    if positions is None:
        return bp.root_marginals(inputs)  # (n, q)
    inputs = _as_tensor(inputs)  # (n, 2**l)
    positions = _as_tensor(positions)  # (n,)
    batch = bp.default_batch_size()
    parts = []
    for chunk, where in zip(torch.split(inputs, batch), torch.split(positions.to(torch.int64), batch)):
        leaves = bp.leaf_marginals(chunk)  # (b, 2**l, q)
        parts.append(leaves[torch.arange(leaves.shape[0], device=leaves.device), where.to(leaves.device)])  # (b, q)
    return torch.cat(parts) if parts else torch.empty(0, bp.num_symbols, dtype=bp.dtype)


def _as_tensor(values) -> torch.Tensor:
    """A tensor of ``values``; numpy arrays are made contiguous first (torch refuses negative strides)."""
    return values if isinstance(values, torch.Tensor) else torch.as_tensor(np.ascontiguousarray(values))


def bp_accuracy(bp: BeliefPropagation, data: TaskInputs) -> float:
    """The accuracy of BP_k's argmax on an evaluation set (the Bayes-optimal accuracy when BP_k is matched)."""
    marginals = predicted_marginals(bp, data.inputs, data.positions)  # (n, q)
    return float((marginals.argmax(-1).cpu() == data.labels).double().mean()) if len(data) else float("nan")


__all__ = ["TASKS", "TaskInputs", "bp_accuracy", "predicted_marginals", "task_inputs"]
