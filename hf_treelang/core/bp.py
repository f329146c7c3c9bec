"""Exact Belief Propagation BP_k on the filtered tree (paper Sec. 2.4 and App. B), batched in torch.

Factorisation of the filtered model of level k (k = 0: full hierarchy, k = ℓ: leaves independent given the root)::

    P(x) = p0[x0] * Π_{j < 2**k} P_k[x0, x_j, j] * Π_{nodes a of levels k..ℓ-1} M[a, left(a), right(a)]

Observed leaves pin their symbol; masked leaves are summed over. With ``E`` the leaf evidence (one-hot, or all
ones for a mask), one upward pass and one downward pass give every marginal exactly:

* upward, full part (levels ℓ-1 .. k): ``upward[a] ∝ Σ_bc M[a,b,c] left[b] right[c]``
* upward, filtered part: ``to_root_j[a] ∝ Σ_b P_k[a,b,j] upward_j[b]``; ``root[a] ∝ p0[a] Π_j to_root_j[a]``
* downward, filtered part: ``from_root_j[a] ∝ p0[a] Π_{j' != j} to_root_j'[a]``;
  ``downward_j[b] ∝ Σ_a P_k[a,b,j] from_root_j[a]``
* downward, full part: ``downward_left[b] ∝ Σ_ac M[a,b,c] downward[a] right[c]`` (and symmetrically)
* marginal of a node ∝ ``downward * upward``.

The normalised upward messages, ``upward[a] ∝ P_k(leaves under a | a)`` (the root's: ``∝ Π_j to_root_j``), are
returned by :meth:`BeliefPropagation.upward_messages` (the targets of the BP-message probes of App. F).

Messages are normalised at every node and the logarithms of the normalisers are accumulated per subtree, so
``log_likelihood = log P_k(observed leaves)`` is exact in nats at any depth (65 536 leaves included).

Range: a grammar with large σ has rules far below float32's smallest number (σ = 30 gives M entries of 4e-50), and a
message can hold probabilities whose ratio exceeds even float64's range (σ in the hundreds). Every sequence is run
first with the plain kernels above (normalised messages, one matrix product per update). A sequence where a term may
have been flushed to zero — some normaliser fell below ``q² tiny / eps`` of the dtype, or, with μ the smallest
positive entry of its messages, a product of two entries and a rule, at least ``μ² × (smallest rule)``, may have
fallen below ``q² tiny`` (a flushed term that carries a masked leaf's weight shifts the likelihood by a whole
factor) — is run again with the *log-domain* kernels: messages are logarithms and every update is a log-sum-exp over the non-zero
rules, ``log upward[a] = log Σ_{(a,b,c): M[a,b,c] > 0} exp(log M[a,b,c] + log left[b] + log right[c])``, each sum
shifted by its own largest term. Nothing is flushed there, in float32 too, so "probability zero" (``impossible``)
means that the grammar gives the evidence probability zero, never an underflow.

Memory: the plain updates hold q² numbers per node (the joint of two children), the log-domain ones one number per
non-zero rule. A pass holds at most :data:`WORKING_SET_BYTES` of them: the default ``batch_size`` is sized by it,
and a level whose nodes would exceed it (one sequence at q = 256, ℓ = 16) is processed in slices of nodes.

Trees of arity s and rules per level (:mod:`hf_treelang.core.grammar`): the same passes with s children per node and
the rules P_m of each node's level in place of M. With ``child_1 .. child_s`` the children's upward messages::

    upward[a]          ∝ Σ_{b_1..b_s} P_m[a,b_1..b_s] Π_i child_i[b_i]
    downward_child_i[b] ∝ Σ_{a, b_j (j != i), b_i = b} P_m[a,b_1..b_s] downward[a] Π_{j != i} child_j[b_j]

(the s = 2 case is the binary update above); the plain kernels form the q**s-entry outer product of the children per
node, or, for a level whose R non-zero rules are few (``R <= q**s / 4``, an RHM level has R = m q), sum over those
rules only (a gather per child and one scatter-add per update); the log-domain ones always sum over the non-zero rules.
The paper's grammars (s = 2, one shared M) always take the dense kernels. The fragility guards count s message
entries per product instead of two, and the level above the leaves is a table lookup for s = 2 only.

Dimension glossary: ``n`` batch, ``l`` depth (ℓ), ``k`` filter level, ``q`` symbols, ``s`` arity, level ``m`` has
``2**m`` nodes (``s**m`` at arity s), ``c`` a slice of nodes of one level, ``j`` a node of level k, ``R`` the non-zero
rules of M (of one level's P_m).
"""

from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass

import numpy as np
import torch

from .grammar import Grammar, check_path_matrices_size
from .params import check_filter_level, check_int

WORKING_SET_BYTES = 256 * 2**20  # the per-node temporaries of one pass; with its messages a pass stays under ~512 MiB
_LEAVES_PER_PASS = 1 << 17  # at small q, passes of about this many leaves are the fastest (cache)
_QQ_BUFFERS = 2  # q**s tensors (q x q at s = 2) alive at once per node in the plain kernels (outer product or joint)
_RULE_BUFFERS = 4  # R-sized tensors alive at once per node in the log-domain kernels (terms, index, shifted, exp)
_Q_BUFFERS = 12  # q-sized tensors per leaf in a pass: evidence, messages of every level, marginals
_SPARSE_RATIO = 4  # a level of an s-ary or per-level grammar with R * _SPARSE_RATIO <= q**s rules sums over its rules


@dataclass
class BPResult:
    """Output of :meth:`BeliefPropagation.infer` (torch tensors on the device of the input leaves).

    Attributes:
        root: (n, q) posterior of the root, P_k(x0 | observed leaves).
        log_likelihood: (n,) log P_k(observed leaves), in nats (``-inf`` where ``impossible``).
        impossible: (n,) bool, True where the evidence has probability zero under the grammar (marginals of
            those rows are uniform, never NaN).
        leaves: (n, s**ℓ, q) posterior of every leaf (observed leaves are one-hot); ``None`` if not computed.
        levels: ``levels[m]`` (n, s**m, q) posterior of the nodes of level m for m = 0 and k .. ℓ (``None`` for the
            levels 1 .. k-1 that the filtered model does not have); ``None`` if not computed.
        upward: ``upward[m]`` (n, s**m, q) normalised upward message of the nodes of level m, for the same levels as
            ``levels`` (see :meth:`BeliefPropagation.upward_messages`); ``None`` unless asked for (``keep_upward``).
    """

    root: torch.Tensor
    log_likelihood: torch.Tensor
    impossible: torch.Tensor
    leaves: torch.Tensor | None = None
    levels: list | None = None
    upward: list | None = None


class BeliefPropagation:
    """The exact oracle BP_k for a grammar, a depth ℓ and an assumed filter level k.

    The assumed ``filter_level`` need not be the level the data were drawn with: applying BP_k to data of another
    level is the mismatched inference of the paper's Fig. 2.

    Args:
        grammar: the grammar (M, or rules per level, of arity s) and root prior p0.
        depth: ℓ, sequences have s**depth leaves (2**depth for the paper's grammars); for rules per level, their
            number of levels.
        filter_level: k in [0, depth], the model BP assumes.
        mask_id: the id of an unobserved leaf (default q, the model's mask token); must not be a symbol in [0, q).
        dtype: float64 (default, exact to ~1e-15) or float32 (to ~1e-6), at any σ: rules below the dtype's range
            (σ = 30 has rules of 4e-50) are handled in the log domain, see the module docstring.
        on_impossible: ``"raise"`` (default) raises a ValueError on evidence of probability zero; ``"flag"``
            returns uniform marginals, ``log_likelihood = -inf`` and ``impossible = True`` for those rows.

    Example:
        >>> bp = BeliefPropagation(Grammar.random(4, 1.0, 0), depth=4, filter_level=0)
        >>> bp.root_marginals(torch.tensor([[0] * 16])).shape
        torch.Size([1, 4])
    """

    def __init__(
        self,
        grammar: Grammar,
        depth: int,
        filter_level: int = 0,
        *,
        mask_id: int | None = None,
        dtype: torch.dtype = torch.float64,
        on_impossible: str = "raise",
    ):
        if not isinstance(grammar, Grammar):
            raise TypeError(f"grammar must be a hf_treelang.Grammar, got {type(grammar).__name__}")
        self.grammar = grammar
        self.depth = grammar.check_depth(depth)
        self.filter_level = check_filter_level(filter_level, self.depth)
        q, self.arity = grammar.num_symbols, grammar.arity
        # P_k is built on the first call: refuse it now if too large
        check_path_matrices_size(q, self.filter_level, self.arity)
        self.mask_id = q if mask_id is None else check_int("mask_id", mask_id, -(2**31), 2**31 - 1)
        if 0 <= self.mask_id < q:
            raise ValueError(f"mask_id must not be a symbol in [0, {q - 1}], got {self.mask_id}")
        if dtype not in (torch.float64, torch.float32):
            raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
        self.dtype = dtype
        if on_impossible not in ("raise", "flag"):
            raise ValueError(f"on_impossible must be 'raise' or 'flag', got {on_impossible!r}")
        self.on_impossible = on_impossible
        self._tables: dict = {}

    @property
    def num_symbols(self) -> int:
        """q, the number of symbols."""
        return self.grammar.num_symbols

    def default_batch_size(self) -> int:
        """Sequences per pass when ``infer`` is given no ``batch_size``: the pass's working set (q² numbers per node,
        q**s at arity s, and its messages) stays under :data:`WORKING_SET_BYTES`, and a pass holds at most 2**17
        leaves."""
        q, s, length = self.num_symbols, self.arity, self.arity**self.depth
        itemsize = torch.finfo(self.dtype).bits // 8
        # The largest level holds s**(ℓ-1) nodes, each with _QQ_BUFFERS q**s tensors; every leaf carries q-vectors.
        per_sequence = itemsize * (length // s * q**s * _QQ_BUFFERS + length * q * _Q_BUFFERS)
        return max(1, min(_LEAVES_PER_PASS // length, WORKING_SET_BYTES // per_sequence))

    def _grammar_tensors(self, device: torch.device, dtype: torch.dtype) -> "_GrammarTensors":
        key = (device, dtype)
        if key not in self._tables:
            self._tables[key] = _GrammarTensors(self.grammar, self.depth, self.filter_level, dtype, device)
        return self._tables[key]

    def _validate(self, leaves) -> torch.Tensor:
        if isinstance(leaves, np.ndarray):
            if leaves.dtype.kind not in "iu":
                raise TypeError(f"leaves must hold integers, got dtype {leaves.dtype}")
            # torch.from_numpy refuses negative strides (x[:, ::-1]) and warns on read-only arrays: copy those.
            leaves = np.ascontiguousarray(leaves, dtype=np.int64)
            leaves = torch.from_numpy(leaves if leaves.flags.writeable else leaves.copy())
        elif isinstance(leaves, torch.Tensor):
            if leaves.dtype.is_floating_point or leaves.dtype.is_complex or leaves.dtype == torch.bool:
                raise TypeError(f"leaves must hold integers, got dtype {leaves.dtype}")
            leaves = leaves.long()
        else:
            raise TypeError(f"leaves must be a numpy array or a torch tensor, got {type(leaves).__name__}")
        length = self.arity**self.depth
        if leaves.ndim != 2 or leaves.shape[1] != length:
            raise ValueError(
                f"leaves must have shape (n, {self.arity}**depth) = (n, {length}), got {tuple(leaves.shape)}"
            )
        q = self.num_symbols
        is_mask = leaves == self.mask_id
        bad = ~is_mask & ((leaves < 0) | (leaves >= q))
        if bool(bad.any()):
            value = int(leaves[bad][0])
            raise ValueError(f"leaves must be symbols in [0, {q - 1}] or the mask id {self.mask_id}, got {value}")
        return torch.where(is_mask, torch.full_like(leaves, q), leaves)  # mask -> row q of the evidence table

    def infer(self, leaves, *, downward: bool = True, keep_upward: bool = False,
              batch_size: int | None = None) -> BPResult:
        """Run BP_k on a batch of sequences.

        Args:
            leaves: integer array or tensor (n, s**ℓ) of symbols in [0, q) or ``mask_id``, any number of masks;
                n = 0 gives results with no rows.
            downward: also run the downward pass (leaf and level marginals); the root and the likelihood need
                only the upward pass.
            keep_upward: also return every level's upward messages (:attr:`BPResult.upward`).
            batch_size: sequences per internal pass (memory and cache use only; results do not depend on it).
                Default: :meth:`default_batch_size`, sized by the pass's working set (q² numbers per node).

        Returns:
            A :class:`BPResult`.
        """
        ids = self._validate(leaves)  # (n, 2**l)
        batch_size = self.default_batch_size() if batch_size is None else check_int("batch_size", batch_size, 1)
        n = ids.shape[0]
        if n == 0:  # empty results of the right shapes, from one all-masked row
            masked = ids.new_full((1, ids.shape[1]), self.num_symbols)  # (1, 2**l)
            return _empty_like_rows(self._infer_exact(masked, downward, keep_upward), 0)
        if n <= batch_size:
            result = self._infer_exact(ids, downward, keep_upward)
        else:
            # The outputs are allocated once and filled pass by pass (no concatenation holding them twice).
            result = None
            for start in range(0, n, batch_size):
                part = self._infer_exact(ids[start : start + batch_size], downward, keep_upward)
                if result is None:
                    result = _empty_like_rows(part, n)
                _assign_rows(result, slice(start, start + batch_size), part)
        if bool(result.impossible.any()) and self.on_impossible == "raise":
            rows = torch.nonzero(result.impossible).flatten().tolist()
            raise ValueError(
                f"leaves: {len(rows)} sequence(s) have probability zero under the grammar (first row {rows[0]}); "
                "pass on_impossible='flag' to get them flagged instead"
            )
        return result

    def _infer_exact(self, ids: torch.Tensor, downward: bool, keep_upward: bool = False) -> BPResult:
        """BP on validated ids: the plain kernels, then the log-domain ones on the rows the plain ones mark fragile
        (in passes whose per-node working set fits :data:`WORKING_SET_BYTES`)."""
        result, fragile = self._infer(ids, downward, log_domain=False, keep_upward=keep_upward)
        rows = torch.nonzero(fragile).flatten()
        if rows.numel():
            tables = self._grammar_tensors(ids.device, self.dtype)
            q, largest_level = self.num_symbols, self.arity ** max(self.depth - 1, 0)
            per_node = max(tables.num_log_rules() * largest_level, q * q * self.arity**self.filter_level)
            per_sequence = per_node * _RULE_BUFFERS * tables.itemsize
            for part in torch.split(rows, max(1, WORKING_SET_BYTES // per_sequence)):
                again = self._infer(ids[part], downward, log_domain=True, keep_upward=keep_upward)[0]
                _assign_rows(result, part, again)
        return result

    def _infer(self, ids: torch.Tensor, downward: bool, log_domain: bool, keep_upward: bool = False):
        """BP on validated ids (n, 2**ℓ) whose masks are mapped to q, with the plain or the log-domain kernels.

        Returns (BPResult, fragile): ``fragile`` (n,) marks the rows where a normaliser fell below the dtype's
        ``q² tiny / eps`` (plain kernels only; always False for the log-domain ones).
        """
        tables = self._grammar_tensors(ids.device, self.dtype)
        n, k, l, q, s = ids.shape[0], self.filter_level, self.depth, self.num_symbols, self.arity
        kernels = (_LogKernels if log_domain else _PlainKernels)(tables, n, ids.device)
        node_slice = max(1, WORKING_SET_BYTES // (max(n, 1) * kernels.bytes_per_node))
        smallest = _SmallestEntry(n, tables, enabled=not log_domain)  # a product flushed below tiny: fragile

        # Upward pass through the full part of the tree, levels ℓ-1 .. k.
        upward = [None] * (l + 1)
        if downward or keep_upward or k == l or (s > 2 and k < l):
            upward[l] = kernels.evidence(ids)  # (n, s**l, q)
        if k < l and s == 2:
            # The level above the leaves is a lookup: upward[a] ∝ M[a, left, right], a masked child summed out.
            pair = ids[:, 0::2] * (q + 1) + ids[:, 1::2]  # (n, 2**(l-1))
            upward[l - 1], log_scale = kernels.pair(pair)  # (n, 2**(l-1), q), (n, 2**(l-1)): log normalisers
            smallest.note(upward[l - 1])
        elif k < l:
            # upward[a] ∝ Σ P_{ℓ-1}[a,b_1..b_s] Π_i evidence_i[b_i]: the rules of the observed children
            update = functools.partial(kernels.upward, l - 1)
            upward[l - 1], log_scale = _by_node_slices(update, node_slice, *_children(upward[l], s))
            smallest.note(upward[l - 1])  # (n, s**(l-1), q), (n, s**(l-1))
        else:
            log_scale = torch.zeros(n, s**l, dtype=self.dtype, device=ids.device)
        for m in range(l - 2, k - 1, -1):
            children = upward[m + 1]  # (n, s**(m+1), q)
            update = functools.partial(kernels.upward, m)
            message, log_norm = _by_node_slices(update, node_slice, *_children(children, s))
            upward[m] = smallest.note(message)  # (n, s**m, q)
            if s == 2:
                log_scale = log_scale[:, 0::2] + log_scale[:, 1::2] + log_norm  # per subtree
            else:
                log_scale = log_scale.unflatten(1, (-1, s)).sum(2) + log_norm  # per subtree

        # Filtered part: every level-k node talks to the root through its path factor P_k.
        log_to_root, log_norm = kernels.to_root(upward[k])  # (n, 2**k, q) normalised, entries <= 0; (n, 2**k)
        smallest.note_log(log_to_root)
        log_scale = log_scale + log_norm
        log_root = tables.log_prior + log_to_root.sum(1)  # (n, q): a product of normalised messages
        log_total = torch.logsumexp(log_root, -1)  # (n,)
        kernels.watch_log(log_total)
        log_likelihood = log_total + log_scale.sum(1)  # (n,)
        impossible = ~torch.isfinite(log_likelihood)
        any_impossible = bool(impossible.any())
        if any_impossible:
            log_root = torch.where(impossible[:, None], torch.zeros_like(log_root), log_root)
            log_to_root = torch.where(impossible[:, None, None], torch.zeros_like(log_to_root), log_to_root)
        root = torch.softmax(log_root, -1)  # (n, q)
        result = BPResult(root=root, log_likelihood=log_likelihood, impossible=impossible)
        if keep_upward:
            result.upward = self._upward_probabilities(kernels, upward, log_to_root, impossible)
        if not downward:
            return result, kernels.fragile | smallest.fragile()

        # Downward, filtered part: from_root[j, a] ∝ p0[a] Π_{j' != j} to_root[j', a], as exclusive sums of logs
        # (exact even when some to_root entries are zero).
        down = smallest.note(kernels.from_root(tables.log_prior + _exclusive_sum(log_to_root)))  # (n, 2**k, q)

        levels = [None] * (l + 1)
        levels[0] = root[:, None, :]
        if 0 < k < l:
            levels[k] = kernels.marginal(down, upward[k])
        for m in range(k, l):
            children = upward[m + 1]  # (n, s**(m+1), q); the leaf evidence when m + 1 = ℓ
            update = functools.partial(kernels.downward, m)
            to_children = _by_node_slices(update, node_slice, down, *_children(children, s))  # s x (n, s**m, q)
            down = kernels.normalise(torch.stack(to_children, 2).reshape(n, s ** (m + 1), q))  # (n, s**(m+1), q)
            smallest.note(down)
            if m + 1 < l:
                levels[m + 1] = kernels.marginal(down, children)
        # An observed leaf's posterior is its one-hot evidence, a masked leaf's its downward message.
        levels[l] = torch.where((ids == q)[..., None], kernels.probabilities(down), tables.evidence[ids])
        if any_impossible:
            uniform = torch.full_like(root[0], 1.0 / q)
            levels = [None if lv is None else torch.where(impossible[:, None, None], uniform, lv) for lv in levels]
        result.levels = levels
        result.leaves = levels[l]
        return result, kernels.fragile | smallest.fragile()

    def _upward_probabilities(self, kernels, upward: list, log_to_root: torch.Tensor, impossible: torch.Tensor):
        """The upward messages of one pass as probabilities: levels k..ℓ as computed, the root's from the level-k
        nodes' messages to it, uniform on ``impossible`` rows (as the marginals)."""
        q = self.num_symbols
        messages = [None if m is None else kernels.probabilities(m) for m in upward]  # (n, 2**m, q) for m >= k
        messages[-1] = messages[-1] / messages[-1].sum(-1, keepdim=True)  # the evidence of a masked leaf: uniform
        # upward[root][a] ∝ Π_j to_root_j[a] = P_k(leaves | root = a), to_root_j[a] ∝ Σ_b P_k[a,b,j] upward_j[b]
        messages[0] = _softmax(log_to_root.sum(1))[:, None, :]  # (n, 1, q); = upward[0] itself when k = 0
        if bool(impossible.any()):
            uniform = torch.full_like(messages[0][0, 0], 1.0 / q)
            messages = [None if m is None else torch.where(impossible[:, None, None], uniform, m) for m in messages]
        return messages

    def upward_messages(self, leaves, *, batch_size: int | None = None) -> list:
        """The normalised upward message of every node of every level the filtered model has.

        The upward message of node a is its likelihood of the evidence below it::

            upward[m][:, a, s] ∝ P_k(leaves under node a | node a = s)        (normalised over s)

        computed by the upward pass of :meth:`infer`. Level ℓ gives the leaf evidence (one-hot, uniform for a mask);
        levels k..ℓ-1 the messages of the full part of the tree; level 0 the root's, ``P_k(leaves | root)``, which in
        the filtered model (k > 0) collects the level-k messages through the path factors P_k (the root prior is
        *not* included: that would be the root's posterior, :attr:`BPResult.root`). The levels 1..k-1 that the
        filtered model does not have are ``None``. Rows of probability zero under the grammar follow
        ``on_impossible`` (uniform messages when flagged).

        Args:
            leaves: integer array or tensor (n, s**ℓ) of symbols in [0, q) or ``mask_id``.
            batch_size: sequences per internal pass (as in :meth:`infer`).

        Returns:
            A list over m = 0..ℓ of (n, s**m, q) tensors in the dtype of this oracle, or ``None``.
        """
        return self.infer(leaves, downward=False, keep_upward=True, batch_size=batch_size).upward

    def root_marginals(self, leaves) -> torch.Tensor:
        """P_k(root | observed leaves), (n, q)."""
        return self.infer(leaves, downward=False).root

    def log_likelihood(self, leaves) -> torch.Tensor:
        """log P_k(observed leaves) in nats, (n,)."""
        return self.infer(leaves, downward=False).log_likelihood

    def leaf_marginals(self, leaves) -> torch.Tensor:
        """P_k(leaf i | observed leaves) for every leaf, (n, s**ℓ, q); observed leaves are one-hot."""
        return self.infer(leaves).leaves

    def level_marginals(self, leaves) -> list:
        """Posterior of every node of every level the model has: list over m of (n, s**m, q) or ``None``."""
        return self.infer(leaves).levels


class _PlainKernels:
    """The message updates of the module docstring on normalised messages, one matrix product each (the fast path).

    Every normaliser below ``q² tiny / eps`` of the dtype marks its row in ``fragile``: a term flushed to zero
    (below ``tiny``) can matter only where the sum it belonged to is that small, so only those rows are computed
    again with :class:`_LogKernels`.
    """

    def __init__(self, tables: "_GrammarTensors", n: int, device: torch.device):
        self.tables = tables
        info, q, s = torch.finfo(tables.dtype), tables.num_symbols, tables.arity
        self.threshold = q**s * info.tiny / info.eps  # q² tiny / eps at s = 2
        self.bytes_per_node = tables.plain_entries_per_node() * tables.itemsize
        self.fragile = torch.zeros(n, dtype=torch.bool, device=device)  # (n,)

    def _watch(self, total: torch.Tensor) -> None:
        self.fragile |= (total < self.threshold).flatten(1).any(1)

    def watch_log(self, log_total: torch.Tensor) -> None:
        """Mark the rows where a product of normalised messages, of total exp(log_total) (n, ...), is that small."""
        self.fragile |= (log_total < math.log(self.threshold)).reshape(log_total.shape[0], -1).any(1)

    def evidence(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tables.evidence[ids]  # (n, 2**l, q): one-hot, or ones for a mask

    def pair(self, pair: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tables.pair_message[pair], self.tables.pair_log_norm[pair]

    def normalise(self, message: torch.Tensor) -> torch.Tensor:
        """message / Σ message over the last axis (a zero message stays zero)."""
        total = message.sum(-1, keepdim=True)
        self._watch(total)
        return message / torch.where(total > 0, total, 1.0)

    def _normalise_with_log(self, message: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        total = message.sum(-1)
        self._watch(total)
        return message / torch.where(total > 0, total, 1.0)[..., None], torch.log(total)

    def upward(self, level: int, *children: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(upward (n, c, q) normalised, log of its normaliser (n, c)) of c parents of ``level`` from their s children
        (each (n, c, q), first child first)."""
        # upward[a] ∝ Σ_bc M[a,b,c] left[b] right[c]   (s = 2; at arity s, Σ_b P_m[a,b_1..b_s] Π_i child_i[b_i])
        sparse = self.tables.sparse_rules[level]
        if sparse is not None:  # the same sum over the R non-zero rules (a, b_1..b_s) only
            terms = sparse.M
            for child, index in zip(children, sparse.children):
                terms = terms * torch.index_select(child, -1, index)  # (n, c, R)
            return self._normalise_with_log(_scatter_sum(terms, sparse.parent, self.tables.num_symbols))
        outer = _outer(children)  # (n, c, q**s)
        return self._normalise_with_log(outer @ self.tables.rules_flat_t[level])

    def to_root(self, upward: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log to_root (n, 2**k, q) normalised, log normalisers (n, 2**k)) from the level-k upward messages."""
        # to_root[j, a] ∝ Σ_b P_k[a,b,j] upward[j, b]
        to_root, log_norm = self._normalise_with_log(torch.einsum("jab,njb->nja", self.tables.paths, upward))
        return torch.log(to_root), log_norm

    def from_root(self, log_from_root: torch.Tensor) -> torch.Tensor:
        """The downward messages (n, 2**k, q) of the level-k nodes, normalised, from log from_root (n, 2**k, q)."""
        self.watch_log(torch.logsumexp(log_from_root, -1))  # from_root, too, is a product of normalised messages
        # downward[j, b] ∝ Σ_a P_k[a,b,j] from_root[j, a]
        return self.normalise(torch.einsum("jab,nja->njb", self.tables.paths, torch.softmax(log_from_root, -1)))

    def downward(self, level: int, down: torch.Tensor, *children: torch.Tensor):
        """(to_child_1 .. to_child_s), each (n, c, q) unnormalised, from c parents' downward messages and their
        children's upward ones; for s = 2 (to_left, to_right)."""
        q, s = self.tables.num_symbols, len(children)
        sparse = self.tables.sparse_rules[level]
        if sparse is not None:  # over the R non-zero rules: child i's message scatters Π_{j != i} child_j into b_i
            from_parent = sparse.M * torch.index_select(down, -1, sparse.parent)  # (n, c, R)
            from_children = [torch.index_select(child, -1, index) for child, index in zip(children, sparse.children)]
            out = []
            for i in range(s):
                terms = from_parent
                for j, term in enumerate(from_children):
                    if j != i:
                        terms = terms * term
                out.append(_scatter_sum(terms, sparse.children[i], q))
            return tuple(out)
        joint = down @ self.tables.rules_flat[level]  # (n, c, q**s): joint[b_1..b_s] = Σ_a down[a] P_m[a,b_1..b_s]
        if s == 2:
            left, right = children
            joint = joint.unflatten(-1, (q, q))  # (n, c, q, q)
            # downward_left[b] ∝ Σ_c joint[b,c] right[c];  downward_right[c] ∝ Σ_b left[b] joint[b,c]
            return (joint @ right[..., None])[..., 0], (left[..., None, :] @ joint)[..., 0, :]
        out = []
        for i in range(s):
            # downward_i[b] ∝ Σ joint[b_<i, b, b_>i] Π_{j<i} child_j[b_j] Π_{j>i} child_j[b_j]
            before = _outer(children[:i], down)  # (n, c, q**i)
            after = _outer(children[i + 1 :], down)  # (n, c, q**(s-1-i))
            block = joint.unflatten(-1, (q**i, q, q ** (s - 1 - i)))  # (n, c, q**i, q, q**(s-1-i))
            out.append(torch.einsum("ncx,ncxby,ncy->ncb", before, block, after))
        return tuple(out)

    def prefix_downward(self, level: int, down: torch.Tensor, *observed: torch.Tensor):
        """(to_child_1 .. to_child_s) of the next-leaf oracle: child i's message with the children before it observed
        (``observed``, their upward messages) and those after it masked (upward message 1)."""
        if len(observed) == 2:
            return self.downward(level, down, observed[0], observed[1].new_ones(()).expand_as(observed[1]))
        q, s = self.tables.num_symbols, len(observed)
        sparse = self.tables.sparse_rules[level]
        if sparse is not None:  # over the R non-zero rules, the observed children's factors accumulated left to right
            terms = sparse.M * torch.index_select(down, -1, sparse.parent)  # (n, c, R)
            out = []
            for i, index in enumerate(sparse.children):
                out.append(_scatter_sum(terms, index, q))
                if i < s - 1:
                    terms = terms * torch.index_select(observed[i], -1, index)  # (n, c, R)
            return tuple(out)
        rest = down @ self.tables.rules_flat[level]  # (n, c, q**s): Σ_a down[a] P_m[a,b_1..b_s]
        out = []
        for i in range(s):
            block = rest.unflatten(-1, (q, q ** (s - 1 - i)))  # (n, c, q, q**(s-1-i)): [b_i, b_>i]
            out.append(block.sum(-1))  # downward_i[b] ∝ Σ_{b_>i} rest[b, b_>i]   (children after i masked)
            if i < s - 1:
                rest = (observed[i][..., None, :] @ block)[..., 0, :]  # rest'[b_>i] = Σ_b observed_i[b] rest[b, b_>i]
        return tuple(out)

    def marginal(self, down: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """Posterior of nodes ∝ downward * upward, (n, c, q)."""
        return self.normalise(down * up)

    @staticmethod
    def probabilities(message: torch.Tensor) -> torch.Tensor:
        return message


class _LogKernels:
    """The same updates on the logarithms of the messages, summing over the non-zero rules only (log-sum-exp per
    parent, or per child symbol on the way down). Nothing is ever flushed to zero, in float32 too: these kernels are
    exact at any σ. They cost exp and log on each of the R non-zero rules per node (R = q² for the paper's grammars,
    q³ for a dense tensor), so they run only on the rows that the plain kernels mark fragile."""

    def __init__(self, tables: "_GrammarTensors", n: int, device: torch.device):
        self.tables = tables
        self.bytes_per_node = tables.num_log_rules() * _RULE_BUFFERS * tables.itemsize
        q = tables.num_symbols
        self.path_slice = max(1, WORKING_SET_BYTES // (max(n, 1) * q * q * _RULE_BUFFERS * tables.itemsize))
        self.fragile = torch.zeros(n, dtype=torch.bool, device=device)  # (n,) nothing is fragile here

    def watch_log(self, log_total: torch.Tensor) -> None:
        pass

    def evidence(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tables.log.evidence[ids]  # (n, s**l, q): 0 or -inf

    def pair(self, pair: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tables.log.pair_message[pair], self.tables.pair_log_norm[pair]

    @staticmethod
    def _normalise_with_log(log_message: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_norm = torch.logsumexp(log_message, -1)  # (n, c), -inf for a zero message
        return log_message - torch.where(torch.isfinite(log_norm), log_norm, 0.0)[..., None], log_norm

    def normalise(self, log_message: torch.Tensor) -> torch.Tensor:
        return self._normalise_with_log(log_message)[0]

    def upward(self, level: int, *children: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # log upward[a] = log Σ_{rules (a,b,c)} exp(log M[a,b,c] + log left[b] + log right[c])   (s children likewise)
        r = self.tables.log_rules(level)
        terms = r.log_M
        for child, index in zip(children, r.children):
            terms = terms + child[..., index]  # (n, c, R)
        return self._normalise_with_log(_segment_logsumexp(terms, r.parent, self.tables.num_symbols))

    def _over_paths(self, update, messages: torch.Tensor) -> torch.Tensor:
        """update(log P_k of nodes j, their messages) on slices of level-k nodes: the (n, j, q, q) terms stay bounded."""
        size, log_paths = self.path_slice, self.tables.log.paths  # (s**k, q, q)
        parts = [update(log_paths[j : j + size], messages[:, j : j + size]) for j in range(0, messages.shape[1], size)]
        return torch.cat(parts, 1)  # (n, 2**k, q)

    def to_root(self, upward: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # log to_root[j, a] = log Σ_b exp(log P_k[a,b,j] + log upward[j, b])
        update = lambda log_paths, up: torch.logsumexp(log_paths + up[..., None, :], -1)  # noqa: E731
        return self._normalise_with_log(self._over_paths(update, upward))

    def from_root(self, log_from_root: torch.Tensor) -> torch.Tensor:
        # log downward[j, b] = log Σ_a exp(log P_k[a,b,j] + log from_root[j, a])
        update = lambda log_paths, from_root: torch.logsumexp(log_paths + from_root[..., :, None], -2)  # noqa: E731
        return self.normalise(self._over_paths(update, log_from_root))

    def downward(self, level: int, down: torch.Tensor, *children: torch.Tensor):
        # log downward_left[b] = log Σ_{rules (a,b,c)} exp(log down[a] + log M[a,b,c] + log right[c]), and symmetrically
        # (s children: child i's message sums over the rules with every other child's upward message)
        r, q = self.tables.log_rules(level), self.tables.num_symbols
        from_parent = r.log_M + down[..., r.parent]  # (n, c, R)
        if len(children) == 2:
            left, right = children
            return (_segment_logsumexp(from_parent + right[..., r.children[1]], r.children[0], q),
                    _segment_logsumexp(from_parent + left[..., r.children[0]], r.children[1], q))
        from_children = [child[..., index] for child, index in zip(children, r.children)]  # s x (n, c, R)
        out = []
        for i in range(len(children)):
            terms = from_parent
            for j, term in enumerate(from_children):
                if j != i:
                    terms = terms + term
            out.append(_segment_logsumexp(terms, r.children[i], q))
        return tuple(out)

    def prefix_downward(self, level: int, down: torch.Tensor, *observed: torch.Tensor):
        """As :meth:`_PlainKernels.prefix_downward`: child i sums over the rules with the children before it observed
        and those after it masked (log 1 = 0)."""
        if len(observed) == 2:
            return self.downward(level, down, observed[0], observed[1].new_zeros(()).expand_as(observed[1]))
        r, q = self.tables.log_rules(level), self.tables.num_symbols
        terms = r.log_M + down[..., r.parent]  # (n, c, R)
        out = []
        for i, index in enumerate(r.children):
            out.append(_segment_logsumexp(terms, index, q))
            if i < len(observed) - 1:
                terms = terms + observed[i][..., index]  # (n, c, R)
        return tuple(out)

    @staticmethod
    def marginal(down: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return _softmax(down + up)

    @staticmethod
    def probabilities(log_message: torch.Tensor) -> torch.Tensor:
        return torch.exp(log_message)


class _SmallestEntry:
    """The plain kernels' guard: per row, the log of the smallest positive entry μ of every normalised message.

    Every product the plain kernels form is of at most two message entries and one rule (of M, P_k or the leaf-pair
    table) — s entries at arity s — so where ``μ² · smallest rule >= q² tiny`` (``μ**s · smallest rule >= q**s tiny``)
    no product fell below the dtype's smallest normal number:
    nothing was flushed and every entry, the smallest probabilities included, is exact to rounding. The other rows
    are ``fragile``.
    A log-domain pass (``enabled=False``) tracks nothing.
    """

    def __init__(self, n: int, tables, enabled: bool):
        self.enabled = enabled
        self.log_smallest = torch.zeros(n, dtype=tables.dtype, device=tables.device)  # (n,): log μ
        self.log_bound = -math.inf  # log(q² tiny / smallest rule); nothing is fragile when disabled
        self.arity = tables.arity  # s message entries per product
        if enabled:
            info = torch.finfo(tables.dtype)
            q = tables.num_symbols
            self.log_bound = math.log(q**tables.arity * info.tiny) - _log_smallest_rule(tables)

    def note(self, message: torch.Tensor) -> torch.Tensor:
        """Take the positive entries of ``message`` (n, nodes, q) into μ; returns ``message``."""
        if self.enabled:
            positive = torch.where(message > 0, message, 1.0)
            self.log_smallest = torch.minimum(self.log_smallest, torch.log(positive.flatten(1).amin(1)))
        return message

    def note_log(self, log_message: torch.Tensor) -> torch.Tensor:
        """Take the finite entries of ``log_message`` (n, nodes, q), logarithms of a normalised message, into μ."""
        if self.enabled:
            finite = torch.where(torch.isfinite(log_message), log_message, 0.0)
            self.log_smallest = torch.minimum(self.log_smallest, finite.flatten(1).amin(1))
        return log_message

    def fragile(self) -> torch.Tensor:
        """(n,) bool: the rows where a product of two message entries and a rule may have been flushed."""
        return self.arity * self.log_smallest < self.log_bound


_SMALLEST_RULE = weakref.WeakKeyDictionary()  # the grammar tensors of a BeliefPropagation -> their smallest rule


def _log_smallest_rule(tables) -> float:
    """log of the smallest positive factor a message is multiplied by: an entry of M (of any level's rules), of P_k, or
    of the pair table (whose entries, ratios of M's, are at least min M / q), from the float64 grammar."""
    if tables not in _SMALLEST_RULE:
        distinct = {id(array): array for array in tables._rules if array is not None}.values()
        rules = min((array[array > 0].min() for array in distinct), default=math.inf)  # none at k = ℓ (per level)
        _SMALLEST_RULE[tables] = math.log(min(rules / tables.num_symbols, tables._paths[tables._paths > 0].min()))
    return _SMALLEST_RULE[tables]


def _segment_logsumexp(values: torch.Tensor, segment: torch.Tensor, size: int) -> torch.Tensor:
    """out[..., i] = log Σ_{r: segment[r] = i} exp(values[..., r]), each segment shifted by its own maximum (-inf for
    an empty segment). values (..., R), segment (R,) in [0, size) -> (..., size)."""
    index = segment.expand(values.shape)
    empty = values.new_full((*values.shape[:-1], size), float("-inf"))
    top = empty.scatter_reduce(-1, index, values, "amax")  # (..., size)
    top = torch.where(torch.isfinite(top), top, 0.0)
    total = torch.zeros_like(top).scatter_add_(-1, index, torch.exp(values - top.gather(-1, index)))
    return torch.log(total) + top


def _finite_max(values: torch.Tensor) -> torch.Tensor:
    """The maximum over the last axis, 0 where every entry is -inf (so that subtracting it never makes NaN)."""
    top = values.amax(-1)
    return torch.where(torch.isfinite(top), top, 0.0)


def _softmax(logits: torch.Tensor) -> torch.Tensor:
    """softmax over the last axis; a row of -inf gives zeros instead of NaN."""
    values = torch.exp(logits - _finite_max(logits)[..., None])
    total = values.sum(-1, keepdim=True)
    return values / torch.where(total > 0, total, 1.0)


def _scatter_sum(values: torch.Tensor, segment: torch.Tensor, size: int) -> torch.Tensor:
    """out[..., i] = Σ_{r: segment[r] = i} values[..., r]; values (..., R), segment (R,) in [0, size) -> (..., size)."""
    return values.new_zeros(*values.shape[:-1], size).index_add_(-1, segment, values)


def _children(level: torch.Tensor, s: int) -> list:
    """The s children of each node of the level above, (n, s**(m+1), q) -> s x (n, s**m, q), first child first."""
    return [level[:, i::s] for i in range(s)]


def _outer(messages, like: torch.Tensor | None = None) -> torch.Tensor:
    """The outer product of messages, each (n, c, q), flattened to (n, c, q**len) with the first one most significant;
    no message gives ones (n, c, 1) shaped like ``like``."""
    if not messages:
        return like.new_ones(*like.shape[:-1], 1)
    outer = messages[0]
    for message in messages[1:]:
        outer = (outer[..., :, None] * message[..., None, :]).flatten(-2)  # (n, c, q**(i+1))
    return outer


def _by_node_slices(kernel, size: int, *messages: torch.Tensor):
    """``kernel(*messages)`` on slices of at most ``size`` nodes (axis 1), concatenated: a level's q² temporaries
    stay bounded however many nodes it has."""
    nodes = messages[0].shape[1]
    if nodes <= size:
        return kernel(*messages)
    parts = [kernel(*(x[:, start : start + size] for x in messages)) for start in range(0, nodes, size)]
    return tuple(torch.cat(slices, 1) for slices in zip(*parts))


def _exclusive_sum(values: torch.Tensor) -> torch.Tensor:
    """out[:, j] = Σ_{j' != j} values[:, j'] along axis 1, exact with -inf entries (no -inf - -inf)."""
    prefix = torch.cumsum(values, 1)
    suffix = torch.flip(torch.cumsum(torch.flip(values, [1]), 1), [1])
    zeros = torch.zeros_like(values[:, :1])
    return torch.cat([zeros, prefix[:, :-1]], 1) + torch.cat([suffix[:, 1:], zeros], 1)


def _empty_like_rows(part: BPResult, n: int) -> BPResult:
    """An uninitialised BPResult of n rows with the shapes, dtypes and device of ``part``."""
    empty = lambda t: None if t is None else t.new_empty((n, *t.shape[1:]))  # noqa: E731
    result = BPResult(root=empty(part.root), log_likelihood=empty(part.log_likelihood), impossible=empty(part.impossible))
    if part.levels is not None:
        result.levels = [empty(level) for level in part.levels]
        result.leaves = result.levels[-1]
    if part.upward is not None:
        result.upward = [empty(level) for level in part.upward]
    return result


def _assign_rows(result: BPResult, rows, part: BPResult) -> None:
    """result[rows] = part (a slice or an index tensor of rows), cast to result's dtypes."""
    result.root[rows] = part.root.to(result.root.dtype)
    result.log_likelihood[rows] = part.log_likelihood.to(result.log_likelihood.dtype)
    result.impossible[rows] = part.impossible
    for mine, theirs in ((result.levels, part.levels), (result.upward, part.upward)):
        if mine is not None:
            for level, values in zip(mine, theirs):
                if level is not None:
                    level[rows] = values.to(level.dtype)


class _GrammarTensors:
    """The grammar as tensors on one device and dtype, in the layouts the message updates use.

    Everything is computed in float64 and cast last, so that a rule of probability 4e-50 still normalises (and
    gives its logarithm) exactly in a float32 pass. The rules of level m are ``rules_flat[m]`` (q, q**s) and
    ``rules_flat_t[m]`` (q**s, q), for the levels k .. ℓ-1 that BP_k uses (one tensor shared by all of them when the
    grammar has one M).
    """

    def __init__(self, grammar: Grammar, depth: int, filter_level: int, dtype: torch.dtype, device: torch.device):
        q, s = grammar.num_symbols, grammar.arity
        self.num_symbols, self.arity, self.dtype, self.device = q, s, dtype, device
        self.itemsize = torch.finfo(dtype).bits // 8
        self._grammar = grammar
        cast = self.cast
        self._paths = paths = grammar.path_matrices(filter_level).transpose(2, 0, 1)  # (s**k, q, q): [j, a, b]
        levels = range(filter_level, depth)
        if grammar.level_rules is None:
            self._rules = [grammar.M] * depth
            shared = cast(grammar.M.reshape(q, q**s))  # (q, q**s): [a, (b_1..b_s)]
            self.rules_flat = [shared] * depth
            self.rules_flat_t = [shared.T.contiguous()] * depth  # (q**s, q)
        else:
            self._rules = [grammar.rules(m) if m in levels else None for m in range(depth)]
            self.rules_flat = [None if T is None else cast(T.reshape(q, q**s)) for T in self._rules]
            self.rules_flat_t = [None if T is None else T.T.contiguous() for T in self.rules_flat]
        # Levels with few rules sum over them in the plain kernels too (never the paper's grammars: dense kernels).
        self.sparse_rules = [None] * depth
        if not grammar.is_shared_binary:
            for m in levels:
                if np.count_nonzero(self._rules[m]) * _SPARSE_RATIO <= q**s:
                    self.sparse_rules[m] = _LogRules(self, self._rules[m])
        self.paths = cast(paths)  # (s**k, q, q)
        self.log_prior = cast(_log(grammar.root_prior))  # (q,)
        self.evidence = torch.cat([torch.eye(q), torch.ones(1, q)]).to(device=device, dtype=dtype)  # (q+1, q)
        if s == 2 and filter_level < depth:
            # Upward message of a parent from its two leaf children, id q meaning "masked" (summed over).
            M = self._rules[depth - 1]  # (q, q, q): the rules of the level above the leaves
            with_masks = np.concatenate([M, M.sum(1, keepdims=True)], 1)  # (q, q+1, q)
            with_masks = np.concatenate([with_masks, with_masks.sum(2, keepdims=True)], 2)  # (q, q+1, q+1)
            self._pair = with_masks.transpose(1, 2, 0).reshape((q + 1) ** 2, q)  # ((q+1)**2, q)
            total = self._pair.sum(1, keepdims=True)  # ((q+1)**2, 1)
            self.pair_message = cast(self._pair / np.where(total > 0, total, 1.0))  # ((q+1)**2, q)
            self.pair_log_norm = cast(_log(total[:, 0]))  # ((q+1)**2,)
        self._log_rules: dict = {}
        self._log_tables = None
        self._num_log_rules = None

    def cast(self, array: np.ndarray) -> torch.Tensor:
        return torch.tensor(np.ascontiguousarray(array), dtype=self.dtype, device=self.device)

    def log_rules(self, level: int) -> "_LogRules":
        """The non-zero rules of one level for :class:`_LogKernels`, built on first use (one for a shared M)."""
        key = id(self._rules[level])
        if key not in self._log_rules:
            self._log_rules[key] = _LogRules(self, self._rules[level])
        return self._log_rules[key]

    def plain_entries_per_node(self) -> int:
        """Numbers the plain kernels hold per node: _QQ_BUFFERS q**s-entry tensors, or (s + 1) R-entry ones on a level
        that sums over its R rules."""
        dense = self.num_symbols**self.arity * _QQ_BUFFERS
        return max([dense] + [(self.arity + 1) * r.num_rules for r in self.sparse_rules if r is not None])

    def num_log_rules(self) -> int:
        """R, the most non-zero rules of any level BP_k uses (counted without building the log-domain tables)."""
        if self._num_log_rules is None:
            distinct = {id(T): T for T in self._rules if T is not None}.values()
            self._num_log_rules = max((int(np.count_nonzero(T)) for T in distinct), default=1)
        return self._num_log_rules

    @property
    def log(self) -> "_LogTables":
        """The level-independent tables of :class:`_LogKernels`, built on first use."""
        if self._log_tables is None:
            self._log_tables = _LogTables(self)
        return self._log_tables


class _LogTables:
    """log P_k (s**k, q, q), the log evidence (q+1, q) and, at s = 2, the log pair table of the level above the
    leaves, for :class:`_LogKernels`."""

    def __init__(self, tables: _GrammarTensors):
        self.paths = tables.cast(_log(tables._paths))  # (s**k, q, q): [j, a, b]
        self.evidence = torch.log(tables.evidence)  # (q+1, q): 0 or -inf
        if hasattr(tables, "_pair"):
            pair = tables._pair  # ((q+1)**2, q): sums of rules, never flushed in float64
            log_total = _log(pair.sum(1, keepdims=True))  # ((q+1)**2, 1)
            log_pair = _log(pair) - np.where(np.isfinite(log_total), log_total, 0.0)
            self.pair_message = tables.cast(log_pair)  # ((q+1)**2, q), normalised (or all -inf)


class _LogRules:
    """One level's non-zero rules (a, b_1 .. b_s) for :class:`_LogKernels` (and the sparse plain kernels): ``parent``
    and ``children[i]`` (R,) index tensors, ``M`` (R,) their probabilities and ``log_M`` (R,) their logarithms."""

    def __init__(self, tables: _GrammarTensors, rules: np.ndarray):
        parent, *children = np.nonzero(rules)  # (R,) each
        self.num_rules = parent.size  # R >= q: every P_m[a] sums to one
        as_index = lambda a: torch.as_tensor(a, dtype=torch.int64, device=tables.device)  # noqa: E731
        self.parent, self.children = as_index(parent), [as_index(c) for c in children]  # (R,), s x (R,)
        self.M = tables.cast(rules[(parent, *children)])  # (R,)
        self.log_M = tables.cast(np.log(rules[(parent, *children)]))  # (R,)


def _log(array: np.ndarray) -> np.ndarray:
    """np.log with log 0 = -inf and no warning."""
    with np.errstate(divide="ignore"):
        return np.log(array)
