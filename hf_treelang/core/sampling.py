"""Vectorised, seed-reproducible sampling of filtered hierarchical trees (paper Sec. 2.2).

The filtered model of level k draws, for each tree:

1. the root ``x0 ~ p0``;
2. the 2**k nodes of level k independently given the root, node j from ``P_k[x0, :, j]`` (paper eq. 1);
3. the full branching process below level k: every node ``a`` of level m >= k emits its child pair
   ``(b, c) ~ M[a]``, the left child at position 2i and the right child at 2i + 1 of level m + 1.

k = 0 is the full hierarchy; k = ℓ draws the leaves independently given the root. A grammar of arity s (see
:mod:`hf_treelang.core.grammar`) works the same way: level m has s**m nodes, node i of level m emits the s-tuple of
nodes s i .. s i + s - 1 of level m + 1 from the rules P_m of its level (one shared M, or one tensor per level).

Randomness: sample i always consumes the same ``1 + 2**ℓ`` uniforms (column 0 the root, columns ``1 .. 2**k``
level k, columns ``1 + 2**m .. 2**(m+1)`` the child pairs of level m), read from a counter-based stream that
is keyed by ``(sampling_seed, i // block_rows(ℓ))``, ``block_rows(ℓ) = max(1, 2**16 // 2**ℓ)``. A sample's symbols
are therefore a function of (grammar, depth, k, sampling_seed, i) alone: the same bytes whatever ``chunk_size``,
``start`` or process split is used. At arity s the same layout reads ``1 + s**k + (s**ℓ - s**k) / (s - 1)`` uniforms
(column 0 the root, then the s**k nodes of level k, then the s**m tuples of each level m = k .. ℓ-1 in order) and
``block_rows = max(1, 2**16 // s**ℓ)``; for s = 2 this is the binary layout above.

Worked example (q = 4, ℓ = 2, k = 0): root 3 -> level 1 ``[0, 2]`` -> leaves ``[1, 1, 3, 0]``, stored as
``roots[i] = 3``, ``levels[1][i] = [0, 2]``, ``leaves[i] = levels[2][i] = [1, 1, 3, 0]``.

Dimension glossary: ``n`` samples, ``l`` depth (ℓ), ``k`` filter level, ``q`` symbols, ``s`` arity, ``K`` outcomes
of one categorical table, level ``m`` has ``2**m`` nodes (``s**m`` at arity s).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from .grammar import Grammar, check_hierarchy_params
from .params import check_depth, check_filter_level, check_int, check_param, check_sigma, renamed_arguments

BLOCK_DRAWS = 1 << 16  # about this many uniforms per random stream; fixed forever: it is part of what a seed means
_TREE_STREAM, _UNIFORM_STREAM = 0x7EE, 0x0F0  # stream tags: trees and uniform sequences never share draws
_MAX_TABLE_ENTRIES = 1 << 27
_TARGET_CHUNK_DRAWS = 1 << 17  # uniforms per internal chunk: keeps the working set in cache
SPLITS = ("train", "validation", "test")
_SPLIT_TAGS = {"train": 1, "validation": 2, "test": 3}
_DATA_STREAM_TAG = 0x7E11A6  # separates the split seeds from any other use of the grammar seed
_HIERARCHY_STREAM_TAG = 0x7E11A7  # the split seeds of Random Hierarchy Model datasets, apart from the paper's


@dataclass(frozen=True)
class TreeSample:
    """Trees drawn by :func:`sample_trees`.

    Attributes:
        roots: (n,) the root symbols x0.
        leaves: (n, s**depth) the sequences, left to right (s = 2 for the paper's grammars).
        levels: ``levels[m]`` is (n, s**m), the symbols of level m (``levels[0]`` the roots, ``levels[depth]`` the
            leaves); the levels 1 .. k-1 that the filtered model never draws are ``None``.
        depth: ℓ.
        filter_level: k.
    """

    roots: np.ndarray
    leaves: np.ndarray
    levels: list
    depth: int
    filter_level: int

    def __len__(self) -> int:
        return self.roots.shape[0]


class AliasTables:
    """Walker/Vose alias tables for T categorical distributions, each drawn from one uniform.

    Tables are stored over each distribution's support only (padded to the largest support), so that the
    paper's sparse grammars (q allowed child pairs out of q**2) build and draw from tables of q entries.
    """

    def __init__(self, probs: np.ndarray):
        probs = np.asarray(probs, dtype=np.float64)  # (T, K)
        T = probs.shape[0]
        if probs.size > _MAX_TABLE_ENTRIES:
            raise ValueError(f"sampling tables of {probs.shape} entries exceed the limit of {_MAX_TABLE_ENTRIES}")
        support = probs > 0
        K = max(1, int(support.sum(1).max()))
        # outcome[t, s]: the s-th outcome of table t's support (padding slots have probability 0)
        order = np.argsort(~support, axis=1, kind="stable")[:, :K]  # (T, K)
        outcome = order
        scaled = np.take_along_axis(probs, order, 1)  # (T, K)
        scaled = scaled / scaled.sum(1, keepdims=True) * K  # mean 1 per table
        prob = np.ones((T, K))
        alias = np.tile(np.arange(K), (T, 1))
        done = np.zeros((T, K), dtype=bool)
        rows = np.arange(T)
        for _ in range(K - 1):
            # Each round settles, in every table, its smallest open entry `low` (< 1) against its largest `high`.
            masked = np.where(done, np.inf, scaled)
            low = masked.argmin(1)
            open_low = masked[rows, low] < 1.0
            masked_high = np.where(done, -np.inf, scaled)
            masked_high[rows, low] = -np.inf
            high = masked_high.argmax(1)
            active = open_low & np.isfinite(masked_high[rows, high])
            if not active.any():
                break
            r, lo, hi = rows[active], low[active], high[active]
            prob[r, lo] = scaled[r, lo]
            alias[r, lo] = hi
            done[r, lo] = True
            scaled[r, hi] -= 1.0 - scaled[r, lo]
        self.num_slots = K
        self.prob = prob.reshape(-1)  # (T * K,)
        self.keep = outcome.reshape(-1)  # (T * K,): the outcome of slot s when the coin keeps it
        self.alias = np.take_along_axis(outcome, alias, 1).reshape(-1)  # (T * K,): the outcome otherwise

    def draw(self, table: np.ndarray, uniform: np.ndarray) -> np.ndarray:
        """Outcomes (same shape as ``table``) of the tables ``table`` for uniforms in [0, 1)."""
        K = self.num_slots
        scaled = uniform * K
        slot = np.minimum(scaled.astype(np.int64), K - 1)  # uniform bucket; the fraction is the alias coin
        flat = table * K + slot
        return np.where(scaled - slot < self.prob[flat], self.keep[flat], self.alias[flat])


class _TreeSampler:
    """Alias tables for one (grammar, depth, filter level); cached so repeated calls pay the set-up once."""

    def __init__(self, grammar: Grammar, depth: int, filter_level: int):
        q, s = grammar.num_symbols, grammar.arity
        self.q, self.s, self.depth, self.filter_level = q, s, depth, filter_level
        self.root = AliasTables(grammar.root_prior[None, :])  # 1 table over q
        paths = grammar.path_matrices(filter_level)  # (q, q, s**k): [root, node, j]
        self.level = AliasTables(paths.transpose(0, 2, 1).reshape(-1, q))  # table root * s**k + j, over q
        if grammar.level_rules is None:  # one table set serves every level
            shared = AliasTables(grammar.M.reshape(q, q**s))  # table parent, over the q**s child tuples
            self.branch = [shared] * depth
        else:
            self.branch = [None] * filter_level + [
                AliasTables(grammar.rules(m).reshape(q, q**s)) for m in range(filter_level, depth)
            ]

    def width(self) -> int:
        """Uniforms per sample: the root, the s**k level-k nodes, one per node of levels k .. ℓ-1."""
        s, k, l = self.s, self.filter_level, self.depth
        return 1 + s**k + (s**l - s**k) // (s - 1)

    def sample(self, uniforms: np.ndarray) -> list:
        """Levels (list of (c, s**m) int64 or None) from uniforms (c, width())."""
        c = uniforms.shape[0]
        l, k, q, s = self.depth, self.filter_level, self.q, self.s
        levels = [None] * (l + 1)
        roots = self.root.draw(np.zeros(c, dtype=np.int64), uniforms[:, 0])  # (c,)
        levels[0] = roots[:, None]
        if k > 0:
            table = roots[:, None] * s**k + np.arange(s**k)  # (c, s**k)
            levels[k] = self.level.draw(table, uniforms[:, 1 : 1 + s**k])
        column = 1 + s**k  # the first uniform of level k's tuples
        for m in range(k, l):
            tuples = self.branch[m].draw(levels[m], uniforms[:, column : column + s**m])  # (c, s**m)
            column += s**m
            children = np.empty((c, s ** (m + 1)), dtype=np.int64)  # (c, s**(m+1))
            if s == 2:
                children[:, 0::2], children[:, 1::2] = np.divmod(tuples, q)
            else:  # the tuple's digits in base q, the first child most significant
                for d in range(s - 1, -1, -1):
                    tuples, children[:, d::s] = np.divmod(tuples, q)
            levels[m + 1] = children
        return levels


_SAMPLER_CACHE: dict = {}


def _tree_sampler(grammar: Grammar, depth: int, filter_level: int) -> _TreeSampler:
    key = (hash(grammar), depth, filter_level)
    if key not in _SAMPLER_CACHE:
        if len(_SAMPLER_CACHE) > 32:
            _SAMPLER_CACHE.clear()
        _SAMPLER_CACHE[key] = _TreeSampler(grammar, depth, filter_level)
    return _SAMPLER_CACHE[key]


def block_rows(depth: int, arity: int = 2) -> int:
    """Samples that share one random stream at this depth (about BLOCK_DRAWS uniforms per stream, s**ℓ per sample)."""
    return max(1, BLOCK_DRAWS // arity**depth)


def _uniforms(seed: int, stream: int, depth: int, width: int, lo: int, hi: int, arity: int = 2) -> np.ndarray:
    """The (hi - lo, width) uniforms of samples lo .. hi-1.

    Sample i reads row ``i % B`` of the Philox stream keyed by (seed, stream tag, i // B), ``B = block_rows(depth,
    arity)``; rows are drawn in order, so only the rows up to the last one needed are generated.
    """
    rows = block_rows(depth, arity)
    parts = []
    for block in range(lo // rows, (hi - 1) // rows + 1):
        first, last = max(lo, block * rows) - block * rows, min(hi, (block + 1) * rows) - block * rows
        generator = np.random.Generator(np.random.Philox(np.random.SeedSequence([seed, stream, block])))
        parts.append(generator.random((last, width))[first:])
    return np.concatenate(parts)


def _chunks(start: int, n: int, chunk_size: int):
    """Yield (lo, hi) sample ranges of at most chunk_size samples covering [start, start + n)."""
    for lo in range(start, start + n, chunk_size):
        yield lo, min(start + n, lo + chunk_size)


def _check_common(n, depth, seed, start, chunk_size, arity=2, grammar=None):
    n = check_param("num_sequences", n, as_name="n")
    depth = check_depth(depth, arity) if grammar is None else grammar.check_depth(depth)
    seed = check_param("sampling_seed", seed)
    start = check_int("start", start, 0)
    if chunk_size is None:
        chunk_size = max(block_rows(depth, arity), _TARGET_CHUNK_DRAWS // arity**depth)
    chunk_size = check_int("chunk_size", chunk_size, 1)
    return n, depth, seed, start, chunk_size


@renamed_arguments(seed="sampling_seed")
def sample_trees(
    grammar: Grammar,
    n: int,
    depth: int,
    filter_level: int = 0,
    sampling_seed: int = 0,
    *,
    start: int = 0,
    chunk_size: int | None = None,
) -> TreeSample:
    """Draw ``n`` trees of the filtered hierarchical model.

    Args:
        grammar: the grammar (M, or rules per level, of arity s) and root prior p0.
        n: the number of trees (>= 0).
        depth: ℓ, the tree depth; sequences have s**depth leaves (2**depth for the paper's grammars), in [1, 16]
            with at most 65 536 leaves; for a grammar with rules per level, its number of levels.
        filter_level: k in [0, depth]; 0 is the full hierarchy, ``depth`` independent leaves given the root.
        sampling_seed: the seed of the tree stream, in [0, 2**63 - 1]; independent of the grammar's seed.
        start: index of the first tree: ``sample_trees(..., n=a+b)`` equals ``sample_trees(..., n=a)`` followed by
            ``sample_trees(..., n=b, start=a)``, which is how shards are generated in parallel.
        chunk_size: trees per internal batch (memory only: it never changes the result).

    Returns:
        A :class:`TreeSample` with ``roots`` (n,), ``leaves`` (n, s**depth) and ``levels`` (int64).

    Example:
        >>> grammar = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)
        >>> trees = sample_trees(grammar, n=3, depth=2, filter_level=0, sampling_seed=0)
        >>> trees.leaves.shape, trees.roots.shape, trees.levels[1].shape
        ((3, 4), (3,), (3, 2))
    """
    if not isinstance(grammar, Grammar):
        raise TypeError(f"grammar must be a hf_treelang.Grammar, got {type(grammar).__name__}")
    s = grammar.arity
    n, depth, seed, start, chunk_size = _check_common(n, depth, sampling_seed, start, chunk_size, s, grammar)
    k = check_filter_level(filter_level, depth)
    sampler = _tree_sampler(grammar, depth, k)
    width = sampler.width()
    levels = [None if 0 < m < k else np.empty((n, s**m), dtype=np.int64) for m in range(depth + 1)]
    for lo, hi in _chunks(start, n, chunk_size):
        uniforms = _uniforms(seed, _TREE_STREAM, depth, width, lo, hi, s)  # (hi - lo, width): 1 + 2**l at s = 2
        for out, level in zip(levels, sampler.sample(uniforms)):
            if out is not None:
                out[lo - start : hi - start] = level
    return TreeSample(roots=levels[0][:, 0], leaves=levels[depth], levels=levels, depth=depth, filter_level=k)


@renamed_arguments(vocab_size="num_symbols", seed="sampling_seed")
def uniform_sequences(
    num_symbols: int, n: int, depth: int, sampling_seed: int = 0, *, start: int = 0, chunk_size: int | None = None,
    arity: int = 2,
) -> np.ndarray:
    """``n`` sequences of arity**depth (2**depth by default) i.i.d. uniform symbols in [0, num_symbols): the
    out-of-sample inputs of Fig. 1b.

    Returns an int64 array (n, s**depth); deterministic in (q, s, depth, sampling_seed, index) like
    :func:`sample_trees`.

    Example:
        >>> uniform_sequences(num_symbols=4, n=2, depth=2, sampling_seed=0).shape
        (2, 4)
    """
    q = check_param("num_symbols", num_symbols)
    s = check_param("arity", arity)
    n, depth, seed, start, chunk_size = _check_common(n, depth, sampling_seed, start, chunk_size, s)
    width = s**depth
    out = np.empty((n, width), dtype=np.int64)
    for lo, hi in _chunks(start, n, chunk_size):
        uniforms = _uniforms(seed, _UNIFORM_STREAM, depth, width, lo, hi, s)  # (hi - lo, s**l)
        out[lo - start : hi - start] = np.minimum((uniforms * q).astype(np.int64), q - 1)
    return out


def split_seed(grammar_seed: int, num_symbols: int, sigma: float, depth: int, filter_level: int, split: str) -> int:
    """The sampling seed of one split of a dataset: SeedSequence over (grammar seed, q, σ bits, ℓ, k, split), 63 bits.

    This is the stream of every training, validation and test set hf-treelang builds (``load_dataset("treelang", ...)``
    and the training scripts alike): splits and filter levels never share draws, and the seed does not depend on the
    split sizes, so enlarging the training set never changes the test set.

    Example:
        >>> split_seed(0, 4, 1.0, 4, 0, "test") != split_seed(0, 4, 1.0, 4, 1, "test")
        True
    """
    if split not in _SPLIT_TAGS:
        raise ValueError(f"`split` must be one of {list(_SPLIT_TAGS)}, got {split!r}")
    grammar_seed = check_param("grammar_seed", grammar_seed)
    num_symbols = check_param("num_symbols", num_symbols)
    sigma = check_sigma(sigma)
    depth = check_param("depth", depth)
    filter_level = check_filter_level(filter_level, depth)
    sigma_bits = struct.unpack("<Q", struct.pack("<d", sigma))[0]
    entropy = [_DATA_STREAM_TAG, grammar_seed, num_symbols, sigma_bits, depth, filter_level, _SPLIT_TAGS[split]]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0]) >> 1


def hierarchy_split_seed(
    grammar_seed: int, num_symbols: int, num_classes: int, num_rules: int, arity: int, depth: int, filter_level: int,
    split: str,
) -> int:
    """The sampling seed of one split of a Random Hierarchy Model dataset (:meth:`Grammar.random_hierarchy`):
    SeedSequence over (its own tag, grammar seed, v, n, m, s, L, k, split), 63 bits; as :func:`split_seed` for the
    paper's grammars, and never equal to one of theirs (a different tag).

    Example:
        >>> hierarchy_split_seed(0, 8, 8, 4, 2, 3, 0, "test") != hierarchy_split_seed(0, 8, 8, 4, 2, 3, 0, "train")
        True
    """
    if split not in _SPLIT_TAGS:
        raise ValueError(f"`split` must be one of {list(_SPLIT_TAGS)}, got {split!r}")
    grammar_seed = check_param("grammar_seed", grammar_seed)
    v, n, m, s, L = check_hierarchy_params(num_symbols, num_classes, num_rules, arity, depth)
    filter_level = check_filter_level(filter_level, L)
    entropy = [_HIERARCHY_STREAM_TAG, grammar_seed, v, n, m, s, L, filter_level, _SPLIT_TAGS[split]]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0]) >> 1
