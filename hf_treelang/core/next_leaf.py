"""Exact next-leaf distributions of BP_k: P_k(x_i | x_0 .. x_{i-1}) for every prefix of every sequence, and the
chain-rule log-likelihood (the oracle of left-to-right, autoregressive prediction of the leaves).

Definition. For a sequence x = (x_0 .. x_{L-1}), L = 2**ℓ, and the filtered model of level k (its factorisation is
in :mod:`hf_treelang.core.bp`), row i of the result is::

    P_k(x_i = s | x_<i) = P_k(x_0 .. x_{i-1}, x_i = s) / P_k(x_0 .. x_{i-1}),        i = 0 .. L-1

(row 0: the marginal of the first leaf): the posterior of leaf i when the leaves < i are observed and the leaves >= i
are masked. The chain rule gives ``log P_k(x) = Σ_i log P_k(x_i | x_<i)``.

Shared messages. On the path from the root to leaf i, every sibling subtree lies either wholly left of leaf i (all its
leaves observed) or wholly right of it (all masked), and a fully masked subtree sends the upward message 1
(Σ_bc M[a,b,c] = 1 at every node). So the downward message into a node v, ∝ P_k(leaves left of v's subtree, x_v = a),
is the same for every prefix that ends inside v's subtree: each node needs one downward message, made from its
parent's, and the downward message into leaf i, normalised, is row i::

    downward_left[b]  ∝ Σ_ac M[a,b,c] downward[a] · 1                 (right sibling: leaves > i, masked)
    downward_right[c] ∝ Σ_ab M[a,b,c] downward[a] upward_left[b]      (left sibling: leaves < i, observed)

with ``upward`` the upward messages of the observed sequence. The filtered part (the root talks to the 2**k nodes of
level k through the path matrices P_k, see :mod:`hf_treelang.core.bp`) works the same way, level-k nodes right of
node j being masked (to_root = 1)::

    to_root_j[a]   ∝ Σ_b P_k[a,b,j] upward_j[b]
    from_root_j[a] ∝ p0[a] Π_{j' < j} to_root_j'[a]                    (a prefix product over the level-k nodes)
    downward_j[b]  ∝ Σ_a P_k[a,b,j] from_root_j[a]

One upward pass of the observed sequence and one downward pass give all L conditionals of a sequence: the cost of one
BP run, O(n 2**ℓ q³), instead of L runs (O(n 4**ℓ q³)).

Worked example, ℓ = 2, k = 0: root r, level-1 nodes u (leaves 0, 1) and v (leaves 2, 3), M_L[a,b] = Σ_c M[a,b,c]::

    downward_u[b] ∝ Σ_a p0[a] M_L[a,b]                     (v masked)
    downward_v[c] ∝ Σ_ab p0[a] M[a,b,c] M[b,x0,x1]         (u observed: upward_u[b] ∝ M[b,x0,x1])
    row 0: P(x0 = s)              ∝ Σ_b downward_u[b] M_L[b,s]
    row 1: P(x1 = s | x0)         ∝ Σ_b downward_u[b] M[b,x0,s]
    row 2: P(x2 = s | x0, x1)     ∝ Σ_c downward_v[c] M_L[c,s]
    row 3: P(x3 = s | x0, x1, x2) ∝ Σ_c downward_v[c] M[c,x2,s]

Six downward messages (u, v and the four leaves) serve the four prefixes; rows 0 and 1 share downward_u. At k = ℓ = 2
the leaves hang from the root directly: row i ∝ Σ_a p0[a] Π_{j<i} P_2[a,x_j,j] P_2[a,s,i].

Masked input leaves (the BP's ``mask_id``) are allowed: they are summed over in every prefix, so row i is
P_k(x_i | the observed leaves < i), and the chain rule skips them (their term is 0); the sum is then
log P_k(observed leaves), which :meth:`BeliefPropagation.log_likelihood` also gives.

Numerics: the message updates are BP's own kernels (:mod:`hf_treelang.core.bp`, one home per formula), in the BP's
``dtype`` and on the device of the leaves; first the plain ones (normalised messages, one matrix product per update).
A conditional can be far smaller than the normalisers that BP watches, and a term flushed to zero that would not
matter to a marginal can matter to log P_k(x_i | x_<i), so the guard here is stricter: with μ the smallest positive
entry of any message of a sequence and r the smallest rule (of M, of P_k, or of the leaf-pair table, at least
min M / q), every product the kernels form is at least μ² r. A sequence where μ² r < q² tiny of the dtype (or where a
BP normaliser fell below q² tiny / eps) is run again with BP's log-domain kernels, which flush nothing. Every
probability and every log-conditional is then exact to rounding relative to itself, at any σ; at the paper's σ = 1
the sequences stay on the plain kernels.

Impossible prefixes: where a sequence has probability zero under P_k (``impossible``), ``log_likelihood`` is -inf and
so is ``log_conditionals`` at every observed leaf from the first leaf of probability zero on; the rows that condition
on a prefix of probability zero (undefined) are uniform, never NaN. The BP's ``on_impossible`` decides between raising
a ValueError (``"raise"``, its default) and returning such sequences flagged (``"flag"``).

Trees of arity s (and rules per level): the same, child i of a node receiving its parent's downward message, the
rules of the parent's level, the upward messages of its observed siblings before it and 1 from those after it
(masked)::

    downward_child_i[b] ∝ Σ_{a, b_<i, b_>i} P_m[a, b_<i, b, b_>i] downward[a] Π_{j<i} upward_j[b_j]

Dimension glossary: ``n`` batch, ``l`` depth (ℓ), ``k`` filter level, ``q`` symbols, ``s`` arity, level ``m`` has
``2**m`` nodes (``s**m`` at arity s), ``j`` a node of level k, ``L = 2**l`` leaves (``s**l``; prefix lengths 0 ..
L-1).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .bp import (
    WORKING_SET_BYTES,
    BeliefPropagation,
    _by_node_slices,
    _children,
    _LogKernels,
    _PlainKernels,
    _SmallestEntry,
)
from .params import check_int


@dataclass
class NextLeafResult:
    """Output of :func:`next_leaf_distributions` (torch tensors in the BP's dtype, on the device of the leaves).

    Attributes:
        probabilities: (n, s**ℓ, q) row i is P_k(x_i | x_<i), the distribution of leaf i given the observed leaves
            0 .. i-1 (row 0: the first leaf's marginal); uniform where the prefix has probability zero.
        log_conditionals: (n, s**ℓ) log P_k(x_i | x_<i) of the observed symbol x_i, in nats; 0 at masked leaves,
            -inf at the observed leaves from the first leaf of probability zero on.
        log_likelihood: (n,) Σ_i log_conditionals = log P_k(observed leaves), in nats (-inf where ``impossible``).
        impossible: (n,) bool, True where the sequence has probability zero under P_k.
    """

    probabilities: torch.Tensor
    log_conditionals: torch.Tensor
    log_likelihood: torch.Tensor
    impossible: torch.Tensor

    def __len__(self) -> int:
        return self.probabilities.shape[0]


def next_leaf_distributions(bp: BeliefPropagation, leaves, *, batch_size: int | None = None) -> NextLeafResult:
    """P_k(x_i | x_<i) for every prefix length i = 0 .. s**ℓ - 1 of every sequence, and log P_k(x) by the chain rule.

    Args:
        bp: the oracle BP_k (grammar, depth ℓ, assumed filter level k; matched or mismatched to the data's level).
            Its ``dtype`` is the precision of the results, its ``mask_id`` marks unobserved leaves and its
            ``on_impossible`` says whether a sequence of probability zero raises or is flagged.
        leaves: integer array or tensor (n, s**ℓ) of symbols in [0, q) (or ``bp.mask_id``, summed over); n = 0
            gives empty results.
        batch_size: sequences per internal pass (memory only; the results do not depend on it), an integer >= 1.
            Default: :meth:`BeliefPropagation.default_batch_size`.

    Returns:
        A :class:`NextLeafResult`.

    Example:
        >>> from hf_treelang.core.grammar import Grammar
        >>> bp = BeliefPropagation(Grammar.random(4, 1.0, 0), depth=2, filter_level=0)
        >>> leaves = torch.tensor([[0, 3, 1, 1]])
        >>> result = next_leaf_distributions(bp, leaves)
        >>> result.probabilities.shape  # row i: P_k(x_i | x_0 .. x_{i-1})
        torch.Size([1, 4, 4])
        >>> bool(torch.allclose(result.log_likelihood, bp.log_likelihood(leaves)))  # the chain rule
        True
    """
    if not isinstance(bp, BeliefPropagation):
        raise TypeError(f"`bp` must be a hf_treelang BeliefPropagation, got {type(bp).__name__}")
    ids = bp._validate(leaves)  # (n, L): masks mapped to q
    batch_size = bp.default_batch_size() if batch_size is None else check_int("batch_size", batch_size, 1)
    n, length, q = ids.shape[0], ids.shape[1], bp.num_symbols
    probabilities = torch.empty(n, length, q, dtype=bp.dtype, device=ids.device)  # (n, L, q)
    log_conditionals = torch.empty(n, length, dtype=bp.dtype, device=ids.device)  # (n, L)
    for start in range(0, n, batch_size):
        rows = slice(start, start + batch_size)
        probabilities[rows], log_conditionals[rows] = _next_leaf_exact(bp, ids[rows])
    log_likelihood = log_conditionals.sum(1)  # (n,)
    impossible = ~torch.isfinite(log_likelihood)  # (n,)
    if bool(impossible.any()):
        if bp.on_impossible == "raise":
            row = int(torch.nonzero(impossible)[0])
            position = int(torch.nonzero(~torch.isfinite(log_conditionals[row]))[0])
            raise ValueError(
                f"leaves: {int(impossible.sum())} sequence(s) have probability zero under the grammar (first row "
                f"{row}, whose leaf {position} is impossible given the leaves before it); build the "
                "BeliefPropagation with on_impossible='flag' to get them flagged instead"
            )
        # A prefix of probability zero leaves its row undefined (a zero message): uniform, as BP's marginals.
        undefined = probabilities.sum(-1, keepdim=True) == 0  # (n, L, 1)
        probabilities = torch.where(undefined, torch.full_like(probabilities[:1, :1], 1.0 / q), probabilities)
    return NextLeafResult(probabilities, log_conditionals, log_likelihood, impossible)


def _next_leaf_exact(bp: BeliefPropagation, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(probabilities (n, L, q), log_conditionals (n, L)) of validated ids: the plain kernels, then the log-domain
    ones on the rows that the plain ones mark fragile (their q² or R-sized temporaries are bounded by node slices)."""
    probabilities, log_conditionals, fragile = _next_leaf(bp, ids, log_domain=False)
    rows = torch.nonzero(fragile).flatten()
    if rows.numel():
        probabilities[rows], log_conditionals[rows], _ = _next_leaf(bp, ids[rows], log_domain=True)
    return probabilities, log_conditionals


def _next_leaf(bp: BeliefPropagation, ids: torch.Tensor, log_domain: bool):
    """The next-leaf messages of the module docstring on validated ids (n, L) whose masks are mapped to q.

    Returns (probabilities (n, L, q), log_conditionals (n, L), fragile (n,)): ``fragile`` marks the rows where the
    plain kernels may have flushed a product to zero (always False for the log-domain kernels).
    """
    tables = bp._grammar_tensors(ids.device, bp.dtype)
    n, k, l, q, s = ids.shape[0], bp.filter_level, bp.depth, bp.num_symbols, bp.arity
    kernels = (_LogKernels if log_domain else _PlainKernels)(tables, n, ids.device)
    node_slice = max(1, WORKING_SET_BYTES // (max(n, 1) * kernels.bytes_per_node))
    smallest = _SmallestEntry(n, tables, enabled=not log_domain)

    # Upward pass of the observed sequence, levels ℓ .. k (only ratios matter here: the normalisers are dropped).
    upward = [None] * (l + 1)
    upward[l] = kernels.evidence(ids)  # (n, s**l, q): one-hot, or ones for a masked leaf
    first = l - 1
    if k < l and s == 2:
        # upward[a] ∝ M[a, left, right], a masked child summed out: a table lookup
        upward[l - 1] = smallest.note(kernels.pair(ids[:, 0::2] * (q + 1) + ids[:, 1::2])[0])  # (n, 2**(l-1), q)
        first = l - 2
    for m in range(first, k - 1, -1):
        # upward[a] ∝ Σ_bc M[a,b,c] left[b] right[c]   (s children: Σ P_m[a,b_1..b_s] Π_i child_i[b_i])
        update = functools.partial(kernels.upward, m)
        message = _by_node_slices(update, node_slice, *_children(upward[m + 1], s))[0]
        upward[m] = smallest.note(message)  # (n, s**m, q)

    # Filtered part. to_root_j[a] ∝ Σ_b P_k[a,b,j] upward_j[b]   (logarithms, each normalised)
    log_to_root = smallest.note_log(kernels.to_root(upward[k])[0])  # (n, s**k, q)
    # from_root_j[a] ∝ p0[a] Π_{j' < j} to_root_j'[a]: the level-k nodes right of j are masked (to_root = 1)
    log_from_root = tables.log_prior + _exclusive_prefix_sum(log_to_root)  # (n, s**k, q)
    smallest.note_log(log_from_root - torch.logsumexp(log_from_root, -1, keepdim=True))
    # downward_j[b] ∝ Σ_a P_k[a,b,j] from_root_j[a]
    down = smallest.note(kernels.from_root(log_from_root))  # (n, s**k, q) normalised

    # Full part, levels k .. ℓ-1: each node passes one downward message to each child.
    for m in range(k, l):
        observed = _children(upward[m + 1], s)  # s x (n, s**m, q): child i's leaves are observed for children > i
        # downward_left[b]  ∝ Σ_ac M[a,b,c] downward[a] · 1                 (s = 2; s children: see the docstring)
        # downward_right[c] ∝ Σ_ab M[a,b,c] downward[a] upward_left[b]
        update = functools.partial(kernels.prefix_downward, m)
        to_children = _by_node_slices(update, node_slice, down, *observed)  # s x (n, s**m, q)
        down = kernels.normalise(torch.stack(to_children, 2).reshape(n, s ** (m + 1), q))  # (n, s**(m+1), q)
        smallest.note(down)

    probabilities = kernels.probabilities(down)  # (n, L, q): row i = P_k(x_i | x_<i)
    observed = ids < q  # (n, L)
    chosen = down.gather(-1, torch.where(observed, ids, 0)[..., None])[..., 0]  # (n, L): the observed symbol's entry
    log_conditionals = chosen if log_domain else torch.log(chosen)
    log_conditionals = torch.where(observed, log_conditionals, 0.0)  # (n, L): a masked leaf adds nothing
    return probabilities, log_conditionals, kernels.fragile | smallest.fragile()


def _exclusive_prefix_sum(values: torch.Tensor) -> torch.Tensor:
    """out[:, j] = Σ_{j' < j} values[:, j'] along axis 1 (0 for j = 0), exact with -inf entries (no subtraction)."""
    return torch.cat([torch.zeros_like(values[:, :1]), torch.cumsum(values, 1)[:, :-1]], 1)


__all__ = ["NextLeafResult", "next_leaf_distributions"]
