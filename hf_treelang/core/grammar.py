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

Dimension glossary: ``q`` symbols (num_symbols), ``k`` filter level, level ``m`` has ``2**m`` nodes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from .params import check_filter_level, check_param, check_sigma, renamed_arguments, warn_renamed

GRAMMAR_FILE_FORMAT = "hf-treelang-grammar/1"
_ROW_SUM_TOLERANCE = 1e-9
MAX_PATH_MATRICES_BYTES = 2**30  # P_k holds q² 2**k float64 numbers: at most 1 GiB (q = 256: k <= 11)
_RENAMED_PARAMS = {"vocab_size": "num_symbols", "seed": "grammar_seed"}  # files written before 0.2


@dataclass(frozen=True, eq=False)
class Grammar:
    """A transition tensor ``M`` (q, q, q) and a root prior ``root_prior`` (p0, shape (q,)), float64.

    Args:
        M: ``M[a, b, c] = P(left=b, right=c | parent=a)``; non-negative, finite, every ``M[a]`` sums to 1.
        root_prior: the root distribution p0 (q,); uniform when ``None``, as in the paper.
        params: the ensemble parameters the grammar was drawn with (``num_symbols``, ``sigma``, ``grammar_seed``),
            if any.

    Example:
        >>> g = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)   # the grammar of the paper's figures
        >>> g.M.shape, g.num_symbols
        ((4, 4, 4), 4)
    """

    M: np.ndarray
    root_prior: np.ndarray | None = None
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        M = np.asarray(self.M)
        if M.dtype.kind not in "biuf":
            raise TypeError(f"M must be a real array, got dtype {M.dtype}")
        M = np.array(M, dtype=np.float64)
        if M.ndim != 3 or not (M.shape[0] == M.shape[1] == M.shape[2]):
            raise ValueError(f"M must have shape (q, q, q), got {M.shape}")
        q = check_param("num_symbols", M.shape[0], as_name="num_symbols (q, the size of M)")
        if not np.all(np.isfinite(M)):
            raise ValueError("M must be finite, got NaN or infinite entries")
        if np.any(M < 0):
            raise ValueError(f"M must be non-negative, got a minimum of {M.min()}")
        row_sums = M.reshape(q, -1).sum(1)
        bad = np.flatnonzero(np.abs(row_sums - 1) > _ROW_SUM_TOLERANCE)
        if bad.size:
            raise ValueError(
                f"every M[a] must sum to 1 within {_ROW_SUM_TOLERANCE}, got sum(M[{bad[0]}]) = {row_sums[bad[0]]!r}"
            )
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
        M.setflags(write=False)
        prior.setflags(write=False)
        object.__setattr__(self, "M", M)
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

    @property
    def num_symbols(self) -> int:
        """q, the number of symbols."""
        return self.M.shape[0]

    @property
    def vocab_size(self) -> int:
        """Deprecated name of :attr:`num_symbols` (q)."""
        warn_renamed("vocab_size", "num_symbols", "Grammar")
        return self.num_symbols

    @property
    def M_left(self) -> np.ndarray:
        """M_L[a, b] = Σ_c M[a, b, c], the left-child transition matrix (q, q)."""
        return self.M.sum(2)

    @property
    def M_right(self) -> np.ndarray:
        """M_R[a, c] = Σ_b M[a, b, c], the right-child transition matrix (q, q)."""
        return self.M.sum(1)

    def path_matrices(self, filter_level: int) -> np.ndarray:
        """P_k[a, b, j] = P(node j of level k = b | root = a), shape (q, q, 2**k) (paper eq. 1).

        Node j's path from the root is read from the k bits of j, most significant first (0 = left).

        Example:
            >>> paths = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0).path_matrices(2)
            >>> paths.shape, bool(np.allclose(paths.sum(1), 1.0))
            ((4, 4, 4), True)
        """
        k = check_filter_level(filter_level, 30)
        q = self.num_symbols
        check_path_matrices_size(q, k)
        steps = np.stack([self.M_left, self.M_right], axis=-1)  # (q, q, 2): bit 0 -> M_L, bit 1 -> M_R
        paths = np.eye(q)[:, :, None]  # (q, q, 1)
        for _ in range(k):
            # paths'[a, c, 2j + s] = Σ_b paths[a, b, j] steps[b, c, s]
            paths = np.einsum("abj,bcs->acjs", paths, steps).reshape(q, q, -1)
        return paths

    def to_dict(self) -> dict:
        """A JSON-ready description whose floats round-trip bit-exactly (Python's float repr)."""
        return {
            "format": GRAMMAR_FILE_FORMAT,
            "num_symbols": self.num_symbols,
            "params": self.params,
            "root_prior": self.root_prior.tolist(),
            "M": self.M.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Grammar":
        """Inverse of :meth:`to_dict`; a malformed description raises a ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a grammar description must be a JSON object, got {type(data).__name__}")
        if data.get("format") != GRAMMAR_FILE_FORMAT:
            raise ValueError(f"not a grammar description: format must be {GRAMMAR_FILE_FORMAT!r}, got {data.get('format')!r}")
        missing = [key for key in ("M", "root_prior") if key not in data]
        if missing:
            raise ValueError(f"grammar description lacks the key(s) {missing}; it has {sorted(data)}")
        params = data.get("params", {})
        if not isinstance(params, dict):
            raise ValueError(f"grammar description: params must be an object, got {type(params).__name__}")
        arrays = {}
        for key in ("M", "root_prior"):
            try:
                arrays[key] = np.array(data[key], dtype=np.float64)
            except (TypeError, ValueError) as error:  # ragged lists, strings
                raise ValueError(f"grammar description: {key} is not an array of numbers ({error})") from None
        grammar = cls(arrays["M"], arrays["root_prior"], {_RENAMED_PARAMS.get(k, k): v for k, v in params.items()})
        if "num_symbols" in data and data["num_symbols"] != grammar.num_symbols:
            raise ValueError(
                f"grammar description: num_symbols is {data['num_symbols']!r} but M has {grammar.num_symbols} symbols"
            )
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

    def __eq__(self, other) -> bool:
        if not isinstance(other, Grammar):
            return NotImplemented
        return np.array_equal(self.M, other.M) and np.array_equal(self.root_prior, other.root_prior)

    def __hash__(self) -> int:
        return hash((self.M.tobytes(), self.root_prior.tobytes()))

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params.items()) or f"num_symbols={self.num_symbols}"
        return f"Grammar({params})"


def check_path_matrices_size(num_symbols: int, filter_level: int) -> None:
    """Refuse, before any allocation, path matrices P_k (q² 2**k float64) larger than :data:`MAX_PATH_MATRICES_BYTES`."""
    size = num_symbols * num_symbols * 8 << filter_level
    if size > MAX_PATH_MATRICES_BYTES:
        largest = max(k for k in range(31) if num_symbols * num_symbols * 8 << k <= MAX_PATH_MATRICES_BYTES)
        raise ValueError(
            f"`filter_level` must be at most {largest} with num_symbols = {num_symbols}, got {filter_level}: the path "
            f"matrices P_k hold q² 2**k float64 numbers, {size / 2**30:g} GiB (limit {MAX_PATH_MATRICES_BYTES / 2**30:g} GiB)"
        )
