"""When two measured numbers are told apart: the package's one rule for deciding on noisy measurements.

Every number the package compares — a mean KL, an accuracy, an argmax agreement, a probe's accuracy, an attention
share — is measured on a finite sample of inputs and carries a standard error. Two such numbers a and b are **told
apart** when their difference exceeds :data:`Z` standard errors of that difference:

    |a − b| > Z · SE(a − b)

and otherwise they are not told apart (within noise), whichever of the two came out larger. A number is told apart
from a threshold the same way, with the threshold's error 0. The standard error of the difference is

* **paired** where a and b are measured on the same inputs and the error of the per-input difference is known (the
  BP-KL callback's ``kl_gap_se_bp_k{k}``; the sign-test bound √(d/n) of two argmax agreements that differ on a
  fraction d of n inputs): that error itself;
* the **sum** SE(a) + SE(b) where a and b are measured on the same inputs but only their own errors are known: the
  largest the error of a − b can be, whatever the correlation of the two (√(Var a + Var b − 2 Cov) ≤ SE(a) + SE(b));
* √(SE(a)² + SE(b)²) where a and b are measured on independent samples.

A claim that holds "at some" of m comparisons (any of m evaluations along training) is tested at :func:`family_z`
(m): the one-sided tail of :data:`Z` shared among the m comparisons (Bonferroni), so that a claim is never passed
merely because it was tried m times; one comparison is tested at :data:`Z` itself.

Standard library only; the analyses (:mod:`hf_treelang.analysis.dynamics`) and the reproduction's rules
(:mod:`hf_treelang.reproduce.findings`) import their rule from here.
"""

from __future__ import annotations

import math
import statistics
from numbers import Real
from statistics import NormalDist

Z = 2.0  # standard errors of a difference beyond which two measured numbers are told apart


def invalid_error(error) -> str | None:
    """Why ``error`` is not a standard error (a finite real number ≥ 0), e.g. ``"nan"``; None when it is one."""
    if isinstance(error, bool) or not isinstance(error, Real):
        return f"{error!r} is not a number"
    if not math.isfinite(error):
        return f"{error!r} is not finite"
    if error < 0:
        return f"{error!r} is negative"
    return None


def _check_error(name: str, error) -> float:
    why = invalid_error(error)
    if why is not None:
        raise ValueError(f"`{name}` must be a standard error (a finite number >= 0), got {why}")
    return float(error)


def _check_count(name: str, count) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"`{name}` must be an integer >= 1, got {count!r}")
    return count


def fraction_error(fraction: float, count: int) -> float:
    """Standard error √(p(1 − p)/n) of a fraction p (an accuracy, an agreement) measured on ``count`` = n inputs.

    Example:
        >>> fraction_error(0.5, 100)
        0.05
    """
    count = _check_count("count", count)
    if isinstance(fraction, bool) or not isinstance(fraction, Real) or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"`fraction` must be a number in [0, 1], got {fraction!r}")
    return math.sqrt(fraction * (1.0 - fraction) / count)


def mean_error(values) -> float:
    """Standard error s/√n of the mean of ``values``, n per-input values (a numpy array or a torch tensor, computed in
    its own dtype; any other sequence of numbers in float64), s their sample standard deviation (n − 1 in its
    denominator); NaN for fewer than two values.

    Example:
        >>> mean_error([1.0, 2.0, 3.0, 4.0, 5.0])  # s = √2.5 over √5
        0.7071067811865476
    """
    if hasattr(values, "numel"):  # a torch tensor: its std divides by n − 1
        count = int(values.numel())
        spread = values.std() if count > 1 else None
    elif hasattr(values, "std") and hasattr(values, "size"):  # a numpy array
        count = int(values.size)
        spread = values.std(ddof=1) if count > 1 else None
    else:
        values = [float(value) for value in values]
        count = len(values)
        spread = statistics.stdev(values) if count > 1 else None
    return math.nan if spread is None else float(spread / math.sqrt(count))


def bounded_mean_error(low: float, high: float, count: int) -> float:
    """The largest standard error of a mean of ``count`` values that each lie in [low, high]: (high − low) / (2√n)
    (no variable confined to an interval of width w has a standard deviation above w/2).

    Example:
        >>> bounded_mean_error(-1.0, 1.0, 100)  # a mean Spearman correlation on 100 inputs
        0.1
    """
    count = _check_count("count", count)
    if not high >= low:
        raise ValueError(f"`high` must be >= `low`, got low={low!r}, high={high!r}")
    return (high - low) / (2.0 * math.sqrt(count))


def difference_error(first: float, second: float, *, same_inputs: bool) -> float:
    """Standard error of a − b from SE(a) = ``first`` and SE(b) = ``second``: their sum where a and b are measured on
    the same inputs (the bound for any correlation of the two; pass the paired error itself where it is known),
    √(first² + second²) where they are measured on independent samples.

    Example:
        >>> difference_error(0.03, 0.04, same_inputs=False), difference_error(0.03, 0.04, same_inputs=True)
        (0.05, 0.07)
    """
    first, second = _check_error("first", first), _check_error("second", second)
    return first + second if same_inputs else math.hypot(first, second)


def told_apart(difference: float, error: float, z: float = Z) -> bool:
    """Whether a difference of two measured numbers exceeds ``z`` times its standard error ``error``:
    |difference| > z · error. A NaN difference is never told apart.

    Example:
        >>> told_apart(0.001, 0.01), told_apart(0.03, 0.01)
        (False, True)
    """
    error = _check_error("error", error)
    if isinstance(z, bool) or not isinstance(z, Real) or not math.isfinite(z) or z < 0:
        raise ValueError(f"`z` must be a finite number >= 0 (standard errors), got {z!r}")
    return bool(abs(difference) > z * error)


def family_z(comparisons: int, z: float = Z) -> float:
    """The z at which each of ``comparisons`` one-sided comparisons is tested when a claim passes if any of them
    does: the quantile of 1 − (1 − Φ(z)) / m (Bonferroni), so that m tries pass by chance no more often than one
    comparison at ``z``; ``z`` itself for m = 1.

    Example:
        >>> round(family_z(1), 3), round(family_z(10), 3)
        (2.0, 2.837)
    """
    comparisons = _check_count("comparisons", comparisons)
    normal = NormalDist()
    return normal.inv_cdf(1.0 - (1.0 - normal.cdf(z)) / comparisons)


__all__ = ["Z", "bounded_mean_error", "difference_error", "family_z", "fraction_error", "invalid_error",
           "mean_error", "told_apart"]
