"""The one table of names and limits of the public API, and the checks every entry point uses.

Every parameter that a user can pass — to :class:`~hf_treelang.core.grammar.Grammar`, the sampler, BP, the
``datasets`` builder, the model config or the training scripts — is checked here against the same range and
reported with the same wording::

    ValueError: `depth` must be an integer in [1, 16], got 17

Names (one per quantity):

* ``num_symbols`` (q): the symbols ``0 .. q-1``. The model's ``TreeLangConfig.vocab_size`` is q + 2, every id of
  its tokenizer: the symbols, the mask id q (the causal model's beginning of sequence) and the padding id q + 1;
  its token embedding has a row for each of the q + 1 ids an input holds (``TreeLangConfig.num_embeddings``).
* ``depth`` (ℓ): sequences have ``2**depth`` leaves (``arity**depth`` for a grammar of arity s). ``filter_level`` (k)
  in [0, ℓ].
* ``arity`` (s): the children of every node of a tree grammar (2 for the paper's, any s >= 2 for the Random
  Hierarchy Model); ``num_classes`` (n), ``num_rules`` (m): the RHM's root classes and rules per symbol.
* ``sigma`` (σ): the log-normal width of the grammar's rule weights.
* ``grammar_seed``: the grammar M (``Grammar.random``). ``sampling_seed``: the tree and sequence streams of
  :func:`~hf_treelang.core.sampling.sample_trees`. ``seed``: the model's initialisation and data order, as in
  ``transformers.TrainingArguments``. The dataset config keeps ``seed`` for the grammar seed (the user's card asks for
  "a config per (seed, k, σ)").
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Limit:
    """The allowed range of one parameter: an integer or real in [low, high] (``high=None``: unbounded)."""

    low: float
    high: float | None
    kind: str = "integer"  # "integer" or "real"

    def describe(self) -> str:
        show = (lambda v: f"{v:g}") if self.kind == "real" else str
        span = f">= {show(self.low)}" if self.high is None else f"in [{show(self.low)}, {show(self.high)}]"
        return f"{'an integer' if self.kind == 'integer' else 'a real number'} {span}"


MAX_NUM_SYMBOLS = 256  # symbols are stored as uint8 by the dataset builder
MAX_DEPTH = 16  # 65 536 leaves; BP's working set and the builder's Arrow lists stay bounded
MAX_SIGMA = 1000.0  # beyond this every rule is deterministic to float64 precision (and σ ξ may overflow)
MAX_SIZE = 2**31 - 1  # sequences in one split or one call
MAX_ARITY = 16  # s; with s**depth <= MAX_LEAVES, depth 4 at s = 16
MAX_LEAVES = 2**MAX_DEPTH  # leaves of one sequence, s**depth, at any arity

LIMITS = {
    "num_symbols": Limit(2, MAX_NUM_SYMBOLS),  # q
    "depth": Limit(1, MAX_DEPTH),  # ℓ
    "arity": Limit(2, MAX_ARITY),  # s
    "sigma": Limit(0.0, MAX_SIGMA, kind="real"),  # σ
    "grammar_seed": Limit(0, 2**32 - 1),  # numpy's legacy RandomState, as the paper's script
    "sampling_seed": Limit(0, 2**63 - 1),  # a SeedSequence entropy word
    "seed": Limit(0, 2**32 - 1),  # torch / transformers' set_seed
    "num_sequences": Limit(0, MAX_SIZE),
}


def describe_range(low, high) -> str:
    return Limit(low, high).describe()


def check_int(name: str, value, low: int, high: int | None = None) -> int:
    """``value`` as an int, or a TypeError/ValueError "`name` must be an integer in [low, high], got value"."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"`{name}` must be {describe_range(low, high)}, got {value!r} ({type(value).__name__})")
    value = int(value)
    if value < low or (high is not None and value > high):
        raise ValueError(f"`{name}` must be {describe_range(low, high)}, got {value}")
    return value


def check_real(name: str, value, low: float, high: float | None = None) -> float:
    """``value`` as a finite float in [low, high], or an error naming ``name``, the value and the range."""
    allowed = Limit(low, high, kind="real").describe()
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"`{name}` must be {allowed}, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value) or value < low or (high is not None and value > high):
        raise ValueError(f"`{name}` must be {allowed}, got {value!r}")
    return value


def check_param(name: str, value, *, as_name: str | None = None):
    """Check ``value`` against ``LIMITS[name]``; the error names ``as_name`` (default ``name``)."""
    limit = LIMITS[name]
    shown = as_name or name
    if limit.kind == "real":
        return check_real(shown, value, limit.low, limit.high)
    return check_int(shown, value, int(limit.low), None if limit.high is None else int(limit.high))


def check_filter_level(value, depth: int, name: str = "filter_level") -> int:
    """k in [0, depth]."""
    return check_int(name, value, 0, depth)


def check_depth(depth, arity: int = 2) -> int:
    """ℓ in [1, MAX_DEPTH] with at most MAX_LEAVES leaves, ``arity**depth`` (for s = 2 the two limits agree)."""
    depth = check_param("depth", depth)
    if arity**depth > MAX_LEAVES:
        largest = max(d for d in range(1, MAX_DEPTH + 1) if arity**d <= MAX_LEAVES)
        raise ValueError(
            f"`depth` must be an integer in [1, {largest}] with arity = {arity} (arity**depth leaves, at most "
            f"{MAX_LEAVES}), got {depth}"
        )
    return depth


def check_sigma(sigma, name: str = "sigma") -> float:
    """σ, a finite real in [0, MAX_SIGMA]."""
    return check_param("sigma", sigma, as_name=name)


def renamed_arguments(**renames):
    """Decorator: keyword arguments renamed in 0.2 (``old="new"``) keep working for one release with a FutureWarning.

    Example:
        >>> @renamed_arguments(vocab_size="num_symbols")
        ... def f(num_symbols=4):
        ...     return num_symbols
        >>> import warnings
        >>> with warnings.catch_warnings(record=True):
        ...     f(vocab_size=8)
        8
    """

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{function.__qualname__}() got both `{old}` (renamed) and `{new}`; pass `{new}`")
                    warn_renamed(old, new, function.__qualname__)
                    kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return wrapper

    return decorate


def warn_renamed(old: str, new: str, where: str) -> None:
    """The FutureWarning of a renamed argument (one wording everywhere)."""
    warnings.warn(
        f"{where}: `{old}` is renamed `{new}`; `{old}` will stop working in hf-treelang 0.3",
        FutureWarning,
        stacklevel=3,
    )


__all__ = [
    "LIMITS",
    "Limit",
    "MAX_ARITY",
    "MAX_DEPTH",
    "MAX_LEAVES",
    "MAX_NUM_SYMBOLS",
    "MAX_SIGMA",
    "MAX_SIZE",
    "check_depth",
    "check_filter_level",
    "check_int",
    "check_param",
    "check_real",
    "check_sigma",
    "renamed_arguments",
    "warn_renamed",
]
