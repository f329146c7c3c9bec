"""The exact oracle for a task: BP_k's distribution of the predicted variable, and BP's accuracy (paper Sec. 2.4, 3).

The predicted variable is the root (root classification, Sec. 3.2) or the one masked leaf of each sequence (MLM,
Sec. 3.3). :func:`predicted_marginals` is the one place where BP's marginals of that variable are computed — for the
BP-KL training callback, the evaluation metric's references, calibration, the dataset card and the reproduction's
baselines alike; :func:`task_inputs` builds the model inputs, masked positions and labels of an evaluation set with the
fixed masks of :mod:`hf_treelang.core.masking`.

Next-leaf prediction (:data:`NEXT_LEAF_TASK`, the causal LM; not a task of the paper) predicts every leaf from the
leaves before it: the input is ``[BOS, x_0 .. x_{L-2}]`` (:func:`next_leaf_inputs`, BOS = q), the labels are the
leaves themselves, and the oracle is BP_k's next-leaf distribution of every prefix
(:func:`hf_treelang.core.next_leaf.next_leaf_distributions`), (n, 2**ℓ, q) instead of (n, q):
:func:`bp_distributions` gives either, and :func:`next_leaf_loss` the exact loss of the matched oracle,
−log P_k(x) / 2**ℓ nats per leaf averaged over the sequences.

Dimension glossary: ``n`` sequences, ``l`` depth (ℓ), ``q`` symbols, ``k`` filter level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .bp import BeliefPropagation
from .masking import mask_evaluation_set
from .next_leaf import next_leaf_distributions

TASKS = ("root", "mlm")  # one predicted variable per sequence (calibration, the dataset card)
NEXT_LEAF_TASK = "clm"  # every leaf predicted from the leaves before it (the causal LM)


@dataclass
class TaskInputs:
    """An evaluation set ready for a model and for BP.

    Attributes:
        inputs: (n, 2**ℓ) int64 model inputs (one leaf masked for MLM; ``[BOS, x_0 .. x_{L-2}]`` for next-leaf
            prediction).
        positions: (n,) int64 masked positions (MLM) or ``None`` (root classification, next-leaf prediction).
        labels: (n,) int64 the true value of the predicted variable (root, or masked leaf); (n, 2**ℓ) the leaves for
            next-leaf prediction (label i is the leaf predicted at position i).
        leaves: (n, 2**ℓ) the sequences whose every leaf is predicted (next-leaf prediction), else ``None``.
    """

    inputs: torch.Tensor
    positions: torch.Tensor | None
    labels: torch.Tensor
    leaves: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.inputs.shape[0]


def task_inputs(task: str, leaves, roots, *, mask_token_id: int, sampling_seed: int) -> TaskInputs:
    """The inputs, masked positions and labels of an evaluation set for ``task``.

    Args:
        task: ``"root"``, ``"mlm"`` or ``"clm"`` (next-leaf prediction, :data:`NEXT_LEAF_TASK`).
        leaves: (n, 2**ℓ) the sequences; roots: (n,) their roots (used by the root task).
        mask_token_id: the mask id q (also the causal model's BOS id).
        sampling_seed: the seed the set's trees were drawn with; it fixes the masked positions
            (:func:`hf_treelang.core.masking.evaluation_positions`).

    Example:
        >>> data = task_inputs("mlm", [[1, 1, 3, 0]], [3], mask_token_id=4, sampling_seed=0)
        >>> data.inputs.tolist(), data.positions.tolist(), data.labels.tolist()
        ([[1, 4, 3, 0]], [1], [1])
    """
    if task not in TASKS + (NEXT_LEAF_TASK,):
        raise ValueError(f"`task` must be one of {TASKS + (NEXT_LEAF_TASK,)}, got {task!r}")
    leaves = _as_tensor(leaves).to(torch.int64)  # (n, 2**l)
    if task == NEXT_LEAF_TASK:
        return TaskInputs(next_leaf_inputs(leaves, mask_token_id), None, leaves, leaves)
    if task == "root":
        return TaskInputs(leaves, None, _as_tensor(roots).to(torch.int64))
    masked, labels, positions = mask_evaluation_set(leaves, mask_token_id, sampling_seed)
    rows = torch.arange(leaves.shape[0])
    return TaskInputs(masked, positions, labels[rows, positions])  # labels: the masked symbol per row, (n,)


def next_leaf_inputs(leaves, bos_token_id: int) -> torch.Tensor:
    """The causal model's input of whole sequences: ``[BOS, x_0 .. x_{L-2}]``, (n, 2**ℓ) int64; position i sees BOS
    and the leaves before leaf i, which is its label (the one home of this shift: collator, device stream, oracle).

    Example:
        >>> next_leaf_inputs([[2, 0, 1, 1]], bos_token_id=3).tolist()
        [[3, 2, 0, 1]]
    """
    leaves = _as_tensor(leaves).to(torch.int64)  # (n, L)
    bos = torch.full_like(leaves[:, :1], int(bos_token_id))  # (n, 1)
    return torch.cat([bos, leaves[:, :-1]], dim=1)  # (n, L)


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


def bp_distributions(bp: BeliefPropagation, data: TaskInputs) -> torch.Tensor:
    """BP_k's distribution of what ``data``'s task predicts: (n, q) float64 (:func:`predicted_marginals`), or
    (n, 2**ℓ, q) for next-leaf prediction, row i = P_k(x_i | x_<i) (:func:`next_leaf_distributions`)."""
    if data.leaves is not None:
        return next_leaf_distributions(bp, data.leaves).probabilities  # (n, L, q)
    return predicted_marginals(bp, data.inputs, data.positions)  # (n, q)


def next_leaf_loss(bp: BeliefPropagation, leaves) -> float:
    """Mean over the sequences of −log P_k(x) / 2**ℓ, in nats per leaf: the cross-entropy per leaf of BP_k's
    next-leaf predictions on ``leaves`` (n, 2**ℓ) (the chain rule); for the matched k, the exact entropy rate of those
    sequences, the least loss a causal model can reach on them on average.

    Example:
        >>> from hf_treelang.core.grammar import Grammar
        >>> bp = BeliefPropagation(Grammar.random(4, 1.0, 0), depth=2, filter_level=0)
        >>> leaves = torch.tensor([[0, 3, 1, 1]])
        >>> abs(next_leaf_loss(bp, leaves) + float(bp.log_likelihood(leaves)[0]) / 4) < 1e-12
        True
    """
    leaves = _as_tensor(leaves)  # (n, L)
    if leaves.shape[0] == 0:
        return float("nan")
    log_likelihood = next_leaf_distributions(bp, leaves).log_likelihood  # (n,)
    return float(-log_likelihood.mean() / leaves.shape[1])


def bp_accuracy(bp: BeliefPropagation, data: TaskInputs, rows: torch.Tensor | None = None) -> float:
    """The accuracy of BP_k's argmax on an evaluation set (the Bayes-optimal accuracy when BP_k is matched); for
    next-leaf prediction over every leaf of every sequence. ``rows`` (n,) bool restricts it to those rows (where
    BP_k is defined, :func:`bp_defined`); NaN when no row is left."""
    distributions = bp_distributions(bp, data)  # (n, q) or (n, L, q)
    correct = distributions.argmax(-1).cpu() == data.labels  # (n,) or (n, L)
    if rows is not None:
        correct = correct[rows.cpu()]
    return float(correct.double().mean()) if correct.numel() else float("nan")


def bp_defined(bp: BeliefPropagation, data: TaskInputs) -> torch.Tensor:
    """(n,) bool: the rows of ``data`` whose evidence BP_k gives a positive probability, where its prediction is
    defined — the (masked) leaves for the root and MLM tasks, the whole sequence for next-leaf prediction (a row of
    probability zero is left out whole, although its positions before the first impossible leaf are defined).

    Under the paper's grammars every sequence is possible at every k; under a Random Hierarchy Model, whose rules use
    m·v of the v**s tuples, a sequence drawn at filter level k is mostly impossible under BP_k' for k' < k (its
    level-k nodes need not be the children of any level-(k-1) symbols). ``bp`` must flag such rows
    (``on_impossible="flag"``) rather than raise."""
    evidence = data.leaves if data.leaves is not None else data.inputs  # (n, L)
    if len(evidence) == 0:
        return torch.zeros(0, dtype=torch.bool)
    return torch.isfinite(bp.log_likelihood(evidence)).cpu()  # (n,)


__all__ = ["NEXT_LEAF_TASK", "TASKS", "TaskInputs", "bp_accuracy", "bp_defined", "bp_distributions",
           "next_leaf_inputs", "next_leaf_loss", "predicted_marginals", "task_inputs"]
