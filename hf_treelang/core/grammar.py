"""The random grammar M of the filtered hierarchical model (paper Sec. 2.1, 2.2 and App. A).

A grammar is a transition tensor ``M[a, b, c] = P(left child = b, right child = c | parent = a)`` and a
root prior ``p0``. The paper's ensemble draws log-normal, non-overlapping rules::

    h[a, b, c] = sigma * xi[a, b, c]   if (b, c) in O_a,   -inf otherwise
    M[a]       = softmax over the q**2 pairs of h[a]

where the sets ``O_a`` partition the q**2 child pairs into q sets of q pairs.

Filtering at level k replaces the first k generations by independent draws of the 2**k level-k nodes from
the root, through the path matrices (paper eq. 1)::

    P_k[a, b, j] = P(node j of level k = b | root = a) = (M_{s1} ... M_{sk})[a, b]

where s1 ... sk are the k bits of j, most significant first, bit 0 -> M_L = M.sum(2), bit 1 -> M_R = M.sum(1).

Tree grammars of any arity s (children per node) and per-level rules: the same object holds the production tensors
``P_l[a, b_1, ..., b_s] = P(children of a level-l node = (b_1 .. b_s) | parent = a)`` (shape (q,)*(s+1)), either one
tensor ``M`` shared by every level or one tensor per level l = 0 .. L-1 (``level_rules``, which fixes the depth L).
The paper's grammar is the case s = 2 with one shared M, its file format and bytes unchanged. The Random Hierarchy
Model (Cagnetta et al., PRX 2024; :meth:`Grammar.random_hierarchy`) is the case of per-level rules where each of the q
symbols of a level rewrites, uniformly, into one of m distinct s-tuples that no other symbol of that level uses.
Filtering is defined the same way at any s: node j of level k (digits of j in base s, most significant first, give
its path) is drawn from ``P_k[a, :, j] = (C_0[d_1] ... C_{k-1}[d_k])[a, :]``, with ``C_l[d][a, b]`` the marginal of
child d of a level-l node.

Dimension glossary: ``q`` symbols (num_symbols), ``s`` arity, ``k`` filter level, level ``m`` has ``s**m`` nodes.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field

import numpy as np

from .params import (
    check_depth,
    check_filter_level,
    check_int,
    check_param,
    check_sigma,
    renamed_arguments,
    warn_renamed,
)

GRAMMAR_FILE_FORMAT = "hf-treelang-grammar/1"  # binary grammars with one shared M (the paper's), unchanged since 0.1
TREE_GRAMMAR_FILE_FORMAT = "hf-treelang-grammar/2"  # any arity s, one shared tensor or one per level
MAX_RULE_TENSOR_BYTES = 2**30  # one production tensor holds q**(s+1) float64 numbers: at most 1 GiB
_ROW_SUM_TOLERANCE = 1e-9
MAX_PATH_MATRICES_BYTES = 2**30  # P_k holds q² 2**k float64 numbers: at most 1 GiB (q = 256: k <= 11)
_RENAMED_PARAMS = {"vocab_size": "num_symbols", "seed": "grammar_seed"}  # files written before 0.2


@dataclass(frozen=True, eq=False)
class Grammar:
    """A tree grammar: production tensors of arity s and a root prior ``root_prior`` (p0, shape (q,)), float64.

    Args:
        M: the production tensor shared by every level, ``M[a, b_1, .., b_s] = P(children = (b_1 .. b_s) | parent =
            a)``, shape (q,)*(s+1) with s >= 2 (the paper's ``M[a, b, c] = P(left=b, right=c | parent=a)`` is s = 2);
            non-negative, finite, every ``M[a]`` sums to 1. ``None`` when ``level_rules`` is given.
        root_prior: the root distribution p0 (q,); uniform when ``None``, as in the paper.
        params: the ensemble parameters the grammar was drawn with (``num_symbols``, ``sigma``, ``grammar_seed``),
            if any.
        level_rules: instead of ``M``, one production tensor per level, ``level_rules[l]`` (q,)*(s+1) the rules P_l of
            the nodes of level l (l = 0 .. L-1, the root at level 0); the grammar then has a fixed depth ℓ = L.

    Example:
        >>> g = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)   # the grammar of the paper's figures
        >>> g.M.shape, g.num_symbols, g.arity
        ((4, 4, 4), 4, 2)
        >>> rhm = Grammar.random_hierarchy(num_symbols=8, num_classes=2, num_rules=4, arity=2, depth=3)
        >>> rhm.arity, rhm.depth, rhm.rules(1).shape
        (2, 3, (8, 8, 8))
    """

    M: np.ndarray | None = None
    root_prior: np.ndarray | None = None
    params: dict = field(default_factory=dict)
    level_rules: tuple | None = None

    def __post_init__(self):
        if (self.M is None) == (self.level_rules is None):
            raise ValueError("a Grammar takes exactly one of `M` (rules shared by every level) and `level_rules`")
        if self.M is not None:
            M = _checked_rules(self.M, "M")
            tensors = (M,)
        else:
            if isinstance(self.level_rules, (str, bytes)) or not hasattr(self.level_rules, "__len__"):
                raise TypeError(f"level_rules must be a sequence of arrays, got {type(self.level_rules).__name__}")
            if len(self.level_rules) < 1:
                raise ValueError("level_rules must hold at least one level, got 0")
            tensors = tuple(_checked_rules(T, f"level_rules[{l}]") for l, T in enumerate(self.level_rules))
            for l, T in enumerate(tensors[1:], 1):
                if T.shape != tensors[0].shape:
                    raise ValueError(
                        f"level_rules[{l}] must have shape {tensors[0].shape} like level_rules[0], got {T.shape}"
                    )
            check_depth(len(tensors), tensors[0].ndim - 1)
            M = None
        q = tensors[0].shape[0]
        if self.root_prior is None:
            prior = np.full(q, 1.0 / q)
        else:
            prior = np.array(np.asarray(self.root_prior), dtype=np.float64)
            if prior.shape != (q,):
                raise ValueError(f"root_prior must have shape ({q},), got {prior.shape}")
            if not np.all(np.isfinite(prior)) or np.any(prior < 0):
                raise ValueError("root_prior must be finite and non-negative")
            if abs(prior.sum() - 1) > _ROW_SUM_TOLERANCE:
                raise ValueError(f"root_prior must sum to 1 within {_ROW_SUM_TOLERANCE}, got {prior.sum()!r}")
        prior.setflags(write=False)
        object.__setattr__(self, "M", M)
        object.__setattr__(self, "level_rules", None if M is not None else tensors)
        object.__setattr__(self, "root_prior", prior)
        object.__setattr__(self, "params", dict(self.params))

    @classmethod
    @renamed_arguments(vocab_size="num_symbols", seed="grammar_seed")
    def random(cls, num_symbols: int = 4, sigma: float = 1.0, grammar_seed: int = 0) -> "Grammar":
        """Draw the paper's log-normal non-overlapping grammar (App. A), bit-identical to the paper's code.

        Args:
            num_symbols: q, the number of symbols, in [2, 256].
            sigma: σ, the standard deviation of the logits of the allowed rules, in [0, 1000].
            grammar_seed: the seed of the paper's data-generation script (0 for its figures), in [0, 2**32 - 1].
        """
        q = check_param("num_symbols", num_symbols)
        sigma = check_sigma(sigma)
        seed = check_param("grammar_seed", grammar_seed)
        rng = np.random.RandomState(seed)  # the legacy stream of the paper's np.random.seed(seed)
        perm = rng.permutation(q * q)
        z = rng.randn(q * q)
        weights = np.full((q, q * q), -np.inf)  # the logits, made weights in place: q = 256 holds one 128 MiB array
        for a in range(q):
            weights[a, perm[a * q : (a + 1) * q]] = sigma * z[a * q : (a + 1) * q]
        weights -= weights.max(axis=1, keepdims=True)
        np.exp(weights, out=weights)
        weights /= weights.sum(axis=1, keepdims=True)
        return cls(weights.reshape(q, q, q), params={"num_symbols": q, "sigma": sigma, "grammar_seed": seed})

    @classmethod
    def random_hierarchy(
        cls,
        num_symbols: int = 8,
        num_classes: int = 2,
        num_rules: int = 2,
        arity: int = 2,
        depth: int = 3,
        grammar_seed: int = 0,
    ) -> "Grammar":
        """Draw a Random Hierarchy Model (Cagnetta, Petrini, Tomasini, Favero & Wyart, PRX 2024).

        Every level l = 0 .. L-1 has its own rules: each of the v symbols rewrites into one of m distinct s-tuples of
        the next level's v symbols, uniformly (probability 1/m each), and no tuple belongs to two symbols of the same
        level. The root is one of the n classes ``0 .. n-1``, uniformly. The tuples are those of the RHM's reference
        code (pcsl-epfl/hierarchy-learning, ``sample_rules(v, n, m, s, L, seed)``), bit for bit: Python's
        ``random.Random(grammar_seed)`` samples n·m tuple indices for the root's classes, then v·m for each level
        below, a tuple's index being its digits in base v (first child most significant). The level-0 rules of the
        v − n symbols the root never takes (which the reference code does not draw) are the m·(v − n) smallest
        tuple indices that the classes do not use, so that every level is a complete, non-overlapping rule set.

        Args:
            num_symbols: v, the symbols of every level, in [2, 256].
            num_classes: n, the root's classes, in [1, v].
            num_rules: m, the rules of each symbol, in [1, v**(s-1)] (m·v distinct s-tuples out of v**s).
            arity: s, the children of each node, in [2, 16]; sequences have s**depth leaves.
            depth: L, the levels of rules (sequences of s**L leaves, at most 65 536).
            grammar_seed: the seed of the rules, in [0, 2**32 - 1].

        Example:
            >>> g = Grammar.random_hierarchy(num_symbols=4, num_classes=2, num_rules=2, arity=2, depth=2)
            >>> [int(t) for t in np.flatnonzero(g.rules(1)[0])]     # the 2 tuples (b, c) of symbol 0, as b * v + c
            [8, 15]
            >>> g.root_prior.tolist()
            [0.5, 0.5, 0.0, 0.0]
        """
        v, n, m, s, L = check_hierarchy_params(num_symbols, num_classes, num_rules, arity, depth)
        seed = check_param("grammar_seed", grammar_seed)
        stream = random.Random(seed)  # the reference code's random.seed(seed); a private generator here
        chosen = [stream.sample(range(v**s), n * m)] + [stream.sample(range(v**s), v * m) for _ in range(1, L)]
        if n < v:  # complete level 0 with the smallest unused tuples (the rows of symbols the root never takes)
            used = set(chosen[0])
            chosen[0] += [t for t in range(v**s) if t not in used][: (v - n) * m]
        tensors = []
        for indices in chosen:
            table = np.zeros((v, v**s))  # (v, v**s): [parent, tuple]
            table[np.repeat(np.arange(v), m), indices] = 1.0 / m
            tensors.append(table.reshape((v,) * (s + 1)))
        prior = np.zeros(v)
        prior[:n] = 1.0 / n
        params = {"ensemble": "random_hierarchy", "num_symbols": v, "num_classes": n, "num_rules": m, "arity": s,
                  "depth": L, "grammar_seed": seed}
        return cls(root_prior=prior, params=params, level_rules=tensors)

    @property
    def num_symbols(self) -> int:
        """q, the number of symbols."""
        return self.rules(0).shape[0]

    @property
    def arity(self) -> int:
        """s, the children of every node (2 for the paper's grammars)."""
        return self.rules(0).ndim - 1

    @property
    def depth(self) -> int | None:
        """ℓ fixed by per-level rules (their number L); ``None`` when one tensor M serves every level (any depth)."""
        return None if self.level_rules is None else len(self.level_rules)

    @property
    def is_shared_binary(self) -> bool:
        """True for the paper's family: arity 2 and one tensor M shared by every level."""
        return self.M is not None and self.M.ndim == 3

    def require_shared_binary(self, what: str) -> None:
        """Raise a one-line ValueError where ``what`` exists only for the paper's family (s = 2, one shared M)."""
        if not self.is_shared_binary:
            rules = "one shared tensor" if self.level_rules is None else f"rules per level (L = {self.depth})"
            raise ValueError(
                f"{what} needs a binary grammar with one shared tensor M (the paper's family); this grammar has "
                f"arity {self.arity} and {rules}"
            )

    def rules(self, level: int) -> np.ndarray:
        """P_l, the production tensor of the nodes of level l (q,)*(s+1): M for a shared grammar, else
        ``level_rules[l]`` with l in [0, L-1]."""
        if self.level_rules is None:
            check_int("level", level, 0)
            return self.M
        return self.level_rules[check_int("level", level, 0, len(self.level_rules) - 1)]

    def check_depth(self, depth) -> int:
        """ℓ checked for this grammar: in [1, 16] with at most 65 536 leaves (s**ℓ), and equal to L for per-level
        rules."""
        depth = check_depth(depth, self.arity)
        if self.level_rules is not None and depth != len(self.level_rules):
            raise ValueError(
                f"`depth` must be {len(self.level_rules)} for this grammar (its rules are given per level), got {depth}"
            )
        return depth

    @property
    def vocab_size(self) -> int:
        """Deprecated name of :attr:`num_symbols` (q)."""
        warn_renamed("vocab_size", "num_symbols", "Grammar")
        return self.num_symbols

    @property
    def M_left(self) -> np.ndarray:
        """M_L[a, b] = Σ_c M[a, b, c], the left-child transition matrix (q, q) (binary, shared M only)."""
        self.require_shared_binary("M_left")
        return self.M.sum(2)

    @property
    def M_right(self) -> np.ndarray:
        """M_R[a, c] = Σ_b M[a, b, c], the right-child transition matrix (q, q) (binary, shared M only)."""
        self.require_shared_binary("M_right")
        return self.M.sum(1)

    def child_marginals(self, level: int = 0) -> np.ndarray:
        """C_l[a, b, d] = P(child d = b | parent = a) of a level-l node, shape (q, q, s) (the d-th child's marginal of
        P_l; for the paper's grammar ``[M_L, M_R]``)."""
        P = self.rules(level)  # (q,)*(s+1)
        s = P.ndim - 1
        if s == 2:
            return np.stack([P.sum(2), P.sum(1)], axis=-1)  # (q, q, 2)
        return np.stack([P.sum(axis=tuple(1 + e for e in range(s) if e != d)) for d in range(s)], axis=-1)

    def path_matrices(self, filter_level: int) -> np.ndarray:
        """P_k[a, b, j] = P(node j of level k = b | root = a), shape (q, q, s**k) (paper eq. 1).

        Node j's path from the root is read from the k digits of j in base s, most significant first (0 = the first
        child, for s = 2 the left one); step l of the path uses the rules of level l.

        Example:
            >>> paths = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0).path_matrices(2)
            >>> paths.shape, bool(np.allclose(paths.sum(1), 1.0))
            ((4, 4, 4), True)
        """
        k = check_filter_level(filter_level, 30 if self.level_rules is None else len(self.level_rules))
        q = self.num_symbols
        check_path_matrices_size(q, k, self.arity)
        paths = np.eye(q)[:, :, None]  # (q, q, 1)
        for level in range(k):
            steps = self.child_marginals(level)  # (q, q, s): digit d -> C_l[d]
            # paths'[a, c, s j + d] = Σ_b paths[a, b, j] steps[b, c, d]
            paths = np.einsum("abj,bcs->acjs", paths, steps).reshape(q, q, -1)
        return paths

    def to_dict(self) -> dict:
        """A JSON-ready description whose floats round-trip bit-exactly (Python's float repr).

        The paper's grammars (s = 2, one shared M) keep the format ``hf-treelang-grammar/1``; any other arity or
        per-level rules write ``hf-treelang-grammar/2``, with ``arity`` and either ``M`` or ``level_rules``.
        """
        if self.is_shared_binary:
            return {
                "format": GRAMMAR_FILE_FORMAT,
                "num_symbols": self.num_symbols,
                "params": self.params,
                "root_prior": self.root_prior.tolist(),
                "M": self.M.tolist(),
            }
        data = {
            "format": TREE_GRAMMAR_FILE_FORMAT,
            "num_symbols": self.num_symbols,
            "arity": self.arity,
            "params": self.params,
            "root_prior": self.root_prior.tolist(),
        }
        if self.level_rules is None:
            data["M"] = self.M.tolist()
        else:
            data["level_rules"] = [T.tolist() for T in self.level_rules]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Grammar":
        """Inverse of :meth:`to_dict`; a malformed description raises a ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a grammar description must be a JSON object, got {type(data).__name__}")
        if data.get("format") not in (GRAMMAR_FILE_FORMAT, TREE_GRAMMAR_FILE_FORMAT):
            raise ValueError(
                f"not a grammar description: format must be {GRAMMAR_FILE_FORMAT!r} or {TREE_GRAMMAR_FILE_FORMAT!r}, "
                f"got {data.get('format')!r}"
            )
        rules_key = "level_rules" if data["format"] == TREE_GRAMMAR_FILE_FORMAT and "level_rules" in data else "M"
        missing = [key for key in (rules_key, "root_prior") if key not in data]
        if missing:
            raise ValueError(f"grammar description lacks the key(s) {missing}; it has {sorted(data)}")
        params = data.get("params", {})
        if not isinstance(params, dict):
            raise ValueError(f"grammar description: params must be an object, got {type(params).__name__}")
        arrays = {}
        for key in (rules_key, "root_prior"):
            try:
                if key == "level_rules":
                    if not isinstance(data[key], list):
                        raise TypeError(f"a list of levels is expected, got {type(data[key]).__name__}")
                    arrays[key] = [np.array(T, dtype=np.float64) for T in data[key]]
                else:
                    arrays[key] = np.array(data[key], dtype=np.float64)
            except (TypeError, ValueError) as error:  # ragged lists, strings
                raise ValueError(f"grammar description: {key} is not an array of numbers ({error})") from None
        params = {_RENAMED_PARAMS.get(k, k): v for k, v in params.items()}
        if rules_key == "M":
            grammar = cls(arrays["M"], arrays["root_prior"], params)
        else:
            grammar = cls(root_prior=arrays["root_prior"], params=params, level_rules=arrays["level_rules"])
        if "num_symbols" in data and data["num_symbols"] != grammar.num_symbols:
            raise ValueError(
                f"grammar description: num_symbols is {data['num_symbols']!r} but M has {grammar.num_symbols} symbols"
            )
        if "arity" in data and data["arity"] != grammar.arity:
            raise ValueError(f"grammar description: arity is {data['arity']!r} but the rules have arity {grammar.arity}")
        return grammar

    def save(self, path: str | os.PathLike) -> None:
        """Write the grammar as human-readable JSON (bit-exact round trip with :meth:`load`)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Grammar":
        """Read a grammar written by :meth:`save`; a file that is not one raises a ValueError naming the file."""
        with open(path, "rb") as f:
            raw = f.read()
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise ValueError(f"grammar file {os.fspath(path)!r} is not UTF-8 text ({error.reason})") from None
        except json.JSONDecodeError as error:
            raise ValueError(
                f"grammar file {os.fspath(path)!r} is not valid JSON: {error.msg} at line {error.lineno}, column "
                f"{error.colno}"
            ) from None
        try:
            return cls.from_dict(data)
        except (ValueError, TypeError) as error:
            raise ValueError(f"grammar file {os.fspath(path)!r}: {error}") from None

    def _tensors(self) -> tuple:
        return (self.M,) if self.level_rules is None else self.level_rules

    def __eq__(self, other) -> bool:
        if not isinstance(other, Grammar):
            return NotImplemented
        mine, theirs = self._tensors(), other._tensors()
        return (
            (self.level_rules is None) == (other.level_rules is None)
            and len(mine) == len(theirs)
            and all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(mine, theirs))
            and np.array_equal(self.root_prior, other.root_prior)
        )

    def __hash__(self) -> int:
        if self.level_rules is None:
            return hash((self.M.tobytes(), self.root_prior.tobytes()))
        return hash((self.level_rules[0].shape, *(T.tobytes() for T in self.level_rules), self.root_prior.tobytes()))

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params.items()) or f"num_symbols={self.num_symbols}"
        return f"Grammar({params})"


def check_hierarchy_params(num_symbols, num_classes, num_rules, arity, depth) -> tuple:
    """(v, n, m, s, L) of a Random Hierarchy Model checked, or a one-line error naming the first parameter out of its
    range (s >= 2; v in [2, 256]; L with s**L <= 65 536; n in [1, v]; m in [1, v**(s-1)], i.e. m·v <= v**s)."""
    s = check_param("arity", arity)
    v = check_param("num_symbols", num_symbols)
    L = check_depth(depth, s)
    check_rule_tensor_size(v, s)
    n = check_int("num_classes", num_classes, 1, v)
    largest = v ** (s - 1)
    if isinstance(num_rules, bool) or not isinstance(num_rules, (int, np.integer)) or not 1 <= num_rules <= largest:
        raise ValueError(
            f"`num_rules` must be an integer in [1, {largest}] with num_symbols = {v} and arity = {s} (m·v "
            f"distinct {s}-tuples out of v**s = {v**s}), got {num_rules!r}"
        )
    return v, n, int(num_rules), s, L


def _checked_rules(tensor, name: str) -> np.ndarray:
    """A production tensor (q,)*(s+1) as a read-only float64 array, or a ValueError naming ``name`` and the fault."""
    T = np.asarray(tensor)
    if T.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be a real array, got dtype {T.dtype}")
    if T.ndim < 3 or len(set(T.shape)) != 1:
        raise ValueError(f"{name} must have shape (q, q, q) or (q,)*(s+1) for arity s >= 2, got {T.shape}")
    check_param("arity", T.ndim - 1, as_name=f"arity (s, the axes of {name} minus one)")
    q = check_param("num_symbols", T.shape[0], as_name=f"num_symbols (q, the size of {name})")
    check_rule_tensor_size(q, T.ndim - 1)
    T = np.array(T, dtype=np.float64)
    if not np.all(np.isfinite(T)):
        raise ValueError(f"{name} must be finite, got NaN or infinite entries")
    if np.any(T < 0):
        raise ValueError(f"{name} must be non-negative, got a minimum of {T.min()}")
    row_sums = T.reshape(q, -1).sum(1)
    bad = np.flatnonzero(np.abs(row_sums - 1) > _ROW_SUM_TOLERANCE)
    if bad.size:
        raise ValueError(
            f"every {name}[a] must sum to 1 within {_ROW_SUM_TOLERANCE}, got sum({name}[{bad[0]}]) = "
            f"{row_sums[bad[0]]!r}"
        )
    T.setflags(write=False)
    return T


def check_rule_tensor_size(num_symbols: int, arity: int) -> None:
    """Refuse, before any allocation, a production tensor (q**(s+1) float64) larger than
    :data:`MAX_RULE_TENSOR_BYTES`."""
    size = 8 * num_symbols ** (arity + 1)
    if size > MAX_RULE_TENSOR_BYTES:
        largest = 1
        while 8 * (largest + 1) ** (arity + 1) <= MAX_RULE_TENSOR_BYTES:
            largest += 1
        raise ValueError(
            f"`num_symbols` must be at most {largest} with arity = {arity}, got {num_symbols}: a production tensor "
            f"holds q**(s+1) float64 numbers, {size / 2**30:g} GiB (limit {MAX_RULE_TENSOR_BYTES / 2**30:g} GiB)"
        )


def check_path_matrices_size(num_symbols: int, filter_level: int, arity: int = 2) -> None:
    """Refuse, before any allocation, path matrices P_k (q² s**k float64) larger than :data:`MAX_PATH_MATRICES_BYTES`."""
    size = num_symbols * num_symbols * 8 * arity**filter_level
    if size > MAX_PATH_MATRICES_BYTES:
        largest = max(k for k in range(31) if num_symbols * num_symbols * 8 * arity**k <= MAX_PATH_MATRICES_BYTES)
        nodes = "2**k" if arity == 2 else f"{arity}**k"
        raise ValueError(
            f"`filter_level` must be at most {largest} with num_symbols = {num_symbols}, got {filter_level}: the path "
            f"matrices P_k hold q² {nodes} float64 numbers, {size / 2**30:g} GiB (limit {MAX_PATH_MATRICES_BYTES / 2**30:g} GiB)"
        )
