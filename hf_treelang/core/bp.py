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

Messages are normalised at every node and the logarithms of the normalisers are accumulated per subtree, so
``log_likelihood = log P_k(observed leaves)`` is exact in nats at any depth (65 536 leaves included).

Dimension glossary: ``n`` batch, ``l`` depth (ℓ), ``k`` filter level, ``q`` symbols, level ``m`` has ``2**m``
nodes, ``j`` a node of level k.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .grammar import Grammar
from .params import check_filter_level, check_int, check_param


@dataclass
class BPResult:
    """Output of :meth:`BeliefPropagation.infer` (torch tensors on the device of the input leaves).

    Attributes:
        root: (n, q) posterior of the root, P_k(x0 | observed leaves).
        log_likelihood: (n,) log P_k(observed leaves), in nats (``-inf`` where ``impossible``).
        impossible: (n,) bool, True where the evidence has probability zero under the grammar (marginals of
            those rows are uniform, never NaN).
        leaves: (n, 2**ℓ, q) posterior of every leaf (observed leaves are one-hot); ``None`` if not computed.
        levels: ``levels[m]`` (n, 2**m, q) posterior of the nodes of level m for m = 0 and k .. ℓ (``None`` for the
            levels 1 .. k-1 that the filtered model does not have); ``None`` if not computed.
    """

    root: torch.Tensor
    log_likelihood: torch.Tensor
    impossible: torch.Tensor
    leaves: torch.Tensor | None = None
    levels: list | None = None


def _normalise_with_log(message: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (message / Σ message, log Σ message) over the last axis; a zero message stays zero (log -inf)."""
    total = message.sum(-1, keepdim=True)
    return message / torch.where(total > 0, total, 1.0), torch.log(total.squeeze(-1))


def _normalise(message: torch.Tensor) -> torch.Tensor:
    """message / Σ message over the last axis; a zero message stays zero."""
    total = message.sum(-1, keepdim=True)
    return message / torch.where(total > 0, total, 1.0)


class BeliefPropagation:
    """The exact oracle BP_k for a grammar, a depth ℓ and an assumed filter level k.

    The assumed ``filter_level`` need not be the level the data were drawn with: applying BP_k to data of another
    level is the mismatched inference of the paper's Fig. 2.

    Args:
        grammar: the grammar M and root prior p0.
        depth: ℓ, sequences have 2**depth leaves.
        filter_level: k in [0, depth], the model BP assumes.
        mask_id: the id of an unobserved leaf (default q, the model's mask token); must not be a symbol in [0, q).
        dtype: float64 (default, exact to ~1e-15) or float32.
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
        self.depth = check_param("depth", depth)
        self.filter_level = check_filter_level(filter_level, self.depth)
        q = grammar.num_symbols
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

    def _grammar_tensors(self, device: torch.device) -> "_GrammarTensors":
        if device not in self._tables:
            self._tables[device] = _GrammarTensors(self.grammar, self.filter_level, self.dtype, device)
        return self._tables[device]

    def _validate(self, leaves) -> torch.Tensor:
        if isinstance(leaves, np.ndarray):
            if leaves.dtype.kind not in "iu":
                raise TypeError(f"leaves must hold integers, got dtype {leaves.dtype}")
            leaves = torch.from_numpy(leaves.astype(np.int64, copy=False))
        elif isinstance(leaves, torch.Tensor):
            if leaves.dtype.is_floating_point or leaves.dtype.is_complex or leaves.dtype == torch.bool:
                raise TypeError(f"leaves must hold integers, got dtype {leaves.dtype}")
            leaves = leaves.long()
        else:
            raise TypeError(f"leaves must be a numpy array or a torch tensor, got {type(leaves).__name__}")
        length = 1 << self.depth
        if leaves.ndim != 2 or leaves.shape[1] != length:
            raise ValueError(f"leaves must have shape (n, 2**depth) = (n, {length}), got {tuple(leaves.shape)}")
        q = self.num_symbols
        is_mask = leaves == self.mask_id
        bad = ~is_mask & ((leaves < 0) | (leaves >= q))
        if bool(bad.any()):
            value = int(leaves[bad][0])
            raise ValueError(f"leaves must be symbols in [0, {q - 1}] or the mask id {self.mask_id}, got {value}")
        return torch.where(is_mask, torch.full_like(leaves, q), leaves)  # mask -> row q of the evidence table

    def infer(self, leaves, *, downward: bool = True, batch_size: int | None = None) -> BPResult:
        """Run BP_k on a batch of sequences.

        Args:
            leaves: integer array or tensor (n, 2**ℓ) of symbols in [0, q) or ``mask_id``, any number of masks.
            downward: also run the downward pass (leaf and level marginals); the root and the likelihood need
                only the upward pass.
            batch_size: sequences per internal pass (memory and cache use only; results do not depend on it).
                Default: about 2**17 leaves per pass.

        Returns:
            A :class:`BPResult`.
        """
        ids = self._validate(leaves)  # (n, 2**l)
        if batch_size is None:
            batch_size = max(1, (1 << 17) >> self.depth)
        batch_size = check_int("batch_size", batch_size, 1)
        parts = [self._infer(chunk, downward) for chunk in torch.split(ids, batch_size)] or [self._infer(ids, downward)]
        if len(parts) == 1:
            result = parts[0]
        else:
            cat = lambda name: torch.cat([getattr(p, name) for p in parts])  # noqa: E731
            result = BPResult(root=cat("root"), log_likelihood=cat("log_likelihood"), impossible=cat("impossible"))
            if downward:
                result.levels = [
                    None if parts[0].levels[m] is None else torch.cat([p.levels[m] for p in parts])
                    for m in range(self.depth + 1)
                ]
                result.leaves = result.levels[self.depth]
        if bool(result.impossible.any()) and self.on_impossible == "raise":
            rows = torch.nonzero(result.impossible).flatten().tolist()
            raise ValueError(
                f"leaves: {len(rows)} sequence(s) have probability zero under the grammar (first row {rows[0]}); "
                "pass on_impossible='flag' to get them flagged instead"
            )
        return result

    def _infer(self, ids: torch.Tensor, downward: bool) -> BPResult:
        """BP on validated ids (n, 2**ℓ) whose masks are mapped to q."""
        tables = self._grammar_tensors(ids.device)
        n, k, l, q = ids.shape[0], self.filter_level, self.depth, self.num_symbols

        # Upward pass through the full part of the tree, levels ℓ-1 .. k.
        upward = [None] * (l + 1)
        if downward or k == l:
            upward[l] = tables.evidence[ids]  # (n, 2**l, q)
        if k < l:
            # The level above the leaves is a lookup: upward[a] ∝ M[a, left, right], a masked child summed out.
            pair = ids[:, 0::2] * (q + 1) + ids[:, 1::2]  # (n, 2**(l-1))
            upward[l - 1] = tables.pair_message[pair]  # (n, 2**(l-1), q)
            log_scale = tables.pair_log_norm[pair]  # (n, 2**(l-1)): log normalisers per subtree
        else:
            log_scale = torch.zeros(n, 1 << l, dtype=self.dtype, device=ids.device)
        for m in range(l - 2, k - 1, -1):
            left, right = upward[m + 1][:, 0::2], upward[m + 1][:, 1::2]  # (n, 2**m, q)
            # upward[a] ∝ Σ_bc M[a,b,c] left[b] right[c]
            outer = (left[..., :, None] * right[..., None, :]).reshape(n, 1 << m, q * q)  # (n, 2**m, q*q)
            message, log_norm = _normalise_with_log(outer @ tables.M_flat_t)  # (n, 2**m, q)
            upward[m] = message
            log_scale = log_scale[:, 0::2] + log_scale[:, 1::2] + log_norm

        # Filtered part: every level-k node talks to the root through its path factor P_k.
        # to_root[j, a] ∝ Σ_b P_k[a,b,j] upward_k[j, b]
        to_root, log_norm = _normalise_with_log(torch.einsum("jab,njb->nja", tables.paths, upward[k]))  # (n, 2**k, q)
        log_scale = log_scale + log_norm
        log_to_root = torch.log(to_root)  # (n, 2**k, q), entries <= 0
        log_root = tables.log_prior + log_to_root.sum(1)  # (n, q)
        log_likelihood = torch.logsumexp(log_root, -1) + log_scale.sum(1)  # (n,)
        impossible = ~torch.isfinite(log_likelihood)
        any_impossible = bool(impossible.any())
        if any_impossible:
            log_root = torch.where(impossible[:, None], torch.zeros_like(log_root), log_root)
            log_to_root = torch.where(impossible[:, None, None], torch.zeros_like(log_to_root), log_to_root)
        root = torch.softmax(log_root, -1)  # (n, q)
        result = BPResult(root=root, log_likelihood=log_likelihood, impossible=impossible)
        if not downward:
            return result

        # Downward, filtered part: from_root[j, a] ∝ p0[a] Π_{j' != j} to_root[j', a], as exclusive sums of logs
        # (exact even when some to_root entries are zero).
        from_root = torch.softmax(tables.log_prior + _exclusive_sum(log_to_root), -1)  # (n, 2**k, q)
        # downward_k[j, b] ∝ Σ_a P_k[a,b,j] from_root[j, a]
        downward = _normalise(torch.einsum("jab,nja->njb", tables.paths, from_root))  # (n, 2**k, q)

        levels = [None] * (l + 1)
        levels[0] = root[:, None, :]
        if k > 0:
            levels[k] = _normalise(downward * upward[k])
        for m in range(k, l):
            # joint[b, c] = Σ_a downward[a] M[a,b,c], shared by both children:
            # downward_left[b] ∝ Σ_c joint[b,c] right[c];  downward_right[c] ∝ Σ_b joint[b,c] left[b]
            joint = (downward @ tables.M_flat).reshape(n, 1 << m, q, q)  # (n, 2**m, q, q)
            downward = torch.empty(n, 2 << m, q, dtype=self.dtype, device=ids.device)  # (n, 2**(m+1), q)
            if m + 1 < l:
                left, right = upward[m + 1][:, 0::2], upward[m + 1][:, 1::2]  # (n, 2**m, q)
                downward[:, 0::2] = _normalise((joint * right[..., None, :]).sum(-1))
                downward[:, 1::2] = _normalise((joint * left[..., :, None]).sum(-2))
                levels[m + 1] = _normalise(downward * upward[m + 1])
            else:
                # Children are leaves, whose evidence is one-hot (a lookup in joint) or, if masked, all ones (a sum).
                left_ids, right_ids = ids[:, 0::2], ids[:, 1::2]  # (n, 2**m)
                picked = torch.gather(joint, 3, right_ids.clamp(max=q - 1)[..., None, None].expand(-1, -1, q, 1))
                summed = joint.sum(-1)  # (n, 2**m, q)
                downward[:, 0::2] = _normalise(torch.where((right_ids == q)[..., None], summed, picked[..., 0]))
                picked = torch.gather(joint, 2, left_ids.clamp(max=q - 1)[..., None, None].expand(-1, -1, 1, q))
                summed = joint.sum(-2)  # (n, 2**m, q)
                downward[:, 1::2] = _normalise(torch.where((left_ids == q)[..., None], summed, picked[..., 0, :]))
                # An observed leaf's posterior is its one-hot evidence, a masked leaf's its downward message.
                levels[l] = torch.where((ids == q)[..., None], downward, upward[l])
        if any_impossible:
            uniform = torch.full_like(root[0], 1.0 / q)
            levels = [None if lv is None else torch.where(impossible[:, None, None], uniform, lv) for lv in levels]
        result.levels = levels
        result.leaves = levels[l]
        return result

    def root_marginals(self, leaves) -> torch.Tensor:
        """P_k(root | observed leaves), (n, q)."""
        return self.infer(leaves, downward=False).root

    def log_likelihood(self, leaves) -> torch.Tensor:
        """log P_k(observed leaves) in nats, (n,)."""
        return self.infer(leaves, downward=False).log_likelihood

    def leaf_marginals(self, leaves) -> torch.Tensor:
        """P_k(leaf i | observed leaves) for every leaf, (n, 2**ℓ, q); observed leaves are one-hot."""
        return self.infer(leaves).leaves

    def level_marginals(self, leaves) -> list:
        """Posterior of every node of every level the model has: list over m of (n, 2**m, q) or ``None``."""
        return self.infer(leaves).levels


def _exclusive_sum(values: torch.Tensor) -> torch.Tensor:
    """out[:, j] = Σ_{j' != j} values[:, j'] along axis 1, exact with -inf entries (no -inf - -inf)."""
    prefix = torch.cumsum(values, 1)
    suffix = torch.flip(torch.cumsum(torch.flip(values, [1]), 1), [1])
    zeros = torch.zeros_like(values[:, :1])
    return torch.cat([zeros, prefix[:, :-1]], 1) + torch.cat([suffix[:, 1:], zeros], 1)


class _GrammarTensors:
    """The grammar as tensors on one device and dtype, in the layouts the message updates use."""

    def __init__(self, grammar: Grammar, filter_level: int, dtype: torch.dtype, device: torch.device):
        q = grammar.num_symbols
        as_tensor = lambda a: torch.tensor(np.array(a), dtype=dtype, device=device)  # noqa: E731
        self.M_flat = as_tensor(grammar.M.reshape(q, q * q))  # (q, q*q): [a, (b, c)]
        self.M_flat_t = self.M_flat.T.contiguous()  # (q*q, q)
        self.paths = as_tensor(grammar.path_matrices(filter_level).transpose(2, 0, 1))  # (2**k, q, q): [j, a, b]
        self.log_prior = torch.log(as_tensor(grammar.root_prior))  # (q,)
        self.evidence = torch.cat([torch.eye(q), torch.ones(1, q)]).to(device=device, dtype=dtype)  # (q+1, q)
        # Upward message of a parent from its two leaf children, id q meaning "masked" (summed over).
        with_masks = np.concatenate([grammar.M, grammar.M.sum(1, keepdims=True)], 1)  # (q, q+1, q)
        with_masks = np.concatenate([with_masks, with_masks.sum(2, keepdims=True)], 2)  # (q, q+1, q+1)
        pair = as_tensor(with_masks.transpose(1, 2, 0).reshape((q + 1) ** 2, q))  # ((q+1)**2, q)
        self.pair_message, self.pair_log_norm = _normalise_with_log(pair)
