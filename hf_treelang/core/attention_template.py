"""The attention pattern of the paper's transformer construction of BP (App. F), and a model map's similarity to it.

App. F builds BP for the masked-leaf task with n_L = ℓ single-head layers whose attention reads positions only. The
token of leaf i carries its root-to-leaf path ``p_i ∈ {±1}^ℓ`` (turn 1 at the root, turn ℓ into the leaf), and the
query-key product of transformer layer ``m + 1`` (m = 0 … ℓ − 1) is non-zero only on that path block::

    W_Q^T W_K |path block = β · diag(1, …, 1, −1, 0, …, 0)      (ℓ − m − 1 ones, one −β, m zeros; β ≫ 1)

so the score of (i, j) is β (Σ_{t ≤ ℓ−m−1} p_i,t p_j,t − p_i,ℓ−m p_j,ℓ−m), largest when j takes i's first ℓ − m − 1
turns and the other turn at ``ℓ − m``, whatever its last m turns. (The paper writes the ones as ``β 1``; read as the
all-ones matrix the score would not depend on i's path, so the block is the diagonal, as its text explains.) As
β → ∞ the softmax is uniform on those leaves: **layer m + 1 makes leaf i attend uniformly to the 2**m leaves of the
subtree complementary to its own height-m subtree**, i.e. the other child of i's ancestor at tree level ℓ − m − 1
(root = level 0). Layer 1 attends to the sibling leaf, layer ℓ to the other half of the sequence.

Convention (the one of :func:`template_attention`): ``layer`` t = m + 1 in 1 … ℓ is the transformer layer, counted
from the embedding as the model's layers are; its template joins the leaves whose deepest common ancestor is at tree
level ``ℓ − t`` (the "tree level" of template t; level ℓ − t is also the BP_k whose colour draws it, k = ℓ − t).
With leaves numbered 0 … 2**ℓ − 1 left to right (the path's turns are the bits of the index, the root's turn the
most significant), j is in i's template-t set iff ``j >> (t−1) == (i >> (t−1)) ^ 1``.

Similarity of a model's map A to template T: 1 − mean over rows i of TV(A_i, T_i), with the total-variation distance
TV(a, b) = ½ Σ_j |a_j − b_j| in [0, 1]; 1 for the template itself, 0 for a row that puts no weight on the template's
leaves. The uniform map has similarity 2**(t−1) / 2**ℓ to template t (½ to template ℓ), a baseline to read it against.

Dimension glossary: ``l`` depth (ℓ), ``L = 2**l`` leaves (positions), ``t`` template layer in 1 … l, ``m = t − 1``
the height of the attended subtree (``2**m`` leaves).
"""

from __future__ import annotations

import numpy as np

from .params import check_int, check_param

ROW_SUM_TOLERANCE = 1e-3  # |Σ_j A[i, j] − 1| allowed in a map handed to template_similarity (averaged float32 maps)


def _check_layer(layer, depth: int) -> int:
    return check_int("layer", layer, 1, depth)


def template_attention(depth: int, layer: int) -> np.ndarray:
    """App. F's attention of transformer layer ``layer`` (β → ∞) on a tree of depth ``depth``.

    Args:
        depth: ℓ; sequences have 2**depth leaves.
        layer: t in 1 … depth (App. F's layer m + 1): leaf i attends uniformly to the 2**(t−1) leaves of the other
            child of its ancestor at tree level depth − t (layer 1: the sibling leaf; layer depth: the other half).

    Returns:
        (L, L) float64 row-stochastic matrix, ``A[i, j]`` = how much leaf i attends to leaf j.

    Example (ℓ = 2; layer 1: the sibling leaf, layer 2: each half attends to the other):

    >>> template_attention(2, 1)
    array([[0., 1., 0., 0.],
           [1., 0., 0., 0.],
           [0., 0., 0., 1.],
           [0., 0., 1., 0.]])
    >>> template_attention(2, 2)
    array([[0. , 0. , 0.5, 0.5],
           [0. , 0. , 0.5, 0.5],
           [0.5, 0.5, 0. , 0. ],
           [0.5, 0.5, 0. , 0. ]])
    """
    depth = check_param("depth", depth)
    layer = _check_layer(layer, depth)
    m = layer - 1  # height of the attended subtree
    index = np.arange(2**depth)  # (L,)
    # j is attended by i iff their height-m subtrees are the two children of one node
    attended = (index[None, :] >> m) == ((index[:, None] >> m) ^ 1)  # (L, L)
    return attended / float(2**m)  # (L, L), each row has 2**m entries 2**-m


def uniform_similarity(depth: int, layer: int) -> float:
    """:func:`template_similarity` of the uniform map (every row 1/L) to template ``layer``: 2**(t−1) / 2**ℓ (its
    2**(t−1) leaves get 1/L each instead of 2**-(t−1)), the value of a layer that attends to nothing in particular."""
    depth = check_param("depth", depth)
    return 2 ** (_check_layer(layer, depth) - 1) / 2**depth


def template_similarity(attention, depth: int) -> np.ndarray:
    """1 − mean over rows of the total-variation distance between ``attention`` and each App. F template.

    Args:
        attention: (..., L, L) attention maps (rows: the attending position, each a distribution over the L leaves),
            e.g. (layers, L, L) for every layer of a model with its heads averaged; numpy or torch.
        depth: ℓ, with L = 2**depth.

    Returns:
        (..., depth) float64: entry ``[..., t − 1]`` is the similarity to :func:`template_attention` (depth, t), in
        [0, 1] (1: the template itself).
    """
    depth = check_param("depth", depth)
    maps = np.asarray(attention.detach().cpu() if hasattr(attention, "detach") else attention, dtype=np.float64)
    num_leaves = 2**depth
    if maps.ndim < 2 or maps.shape[-2:] != (num_leaves, num_leaves):
        raise ValueError(f"`attention` must have shape (..., {num_leaves}, {num_leaves}) for depth {depth}, got "
                         f"{maps.shape}")
    if not np.all(np.isfinite(maps)) or np.any(maps < 0):
        raise ValueError("`attention` must hold finite non-negative weights, got negative or non-finite entries")
    row_sums = maps.sum(-1).ravel()  # (rows,)
    worst = row_sums[np.argmax(np.abs(row_sums - 1.0))] if row_sums.size else 1.0
    if abs(worst - 1.0) > ROW_SUM_TOLERANCE:
        raise ValueError(f"`attention` rows must sum to 1 (within {ROW_SUM_TOLERANCE:g}), got a row summing to "
                         f"{worst:.6g}")
    templates = np.stack([template_attention(depth, t) for t in range(1, depth + 1)])  # (l, L, L)
    # TV[..., t, i] = ½ Σ_j |A[..., i, j] − T_t[i, j]|
    distance = 0.5 * np.abs(maps[..., None, :, :] - templates).sum(-1)  # (..., l, L)
    return 1.0 - distance.mean(-1)  # (..., l)
