"""P*, the sample complexity of a learner against the exact optimum, defined once; and its scaling with n_c m^L.

**P\\* (accuracy).** A curve is the runs of one grammar, task and architecture, each a number P of training sequences
(``num_train``), a model seed, its test accuracy on k_test = 0 (``accuracy``) and BP_0's accuracy on the same test
inputs (``bp_accuracy``). At every P of the curve the *gap* is the mean of ``bp_accuracy`` less the mean of
``accuracy`` over the runs of that P (its seeds). P* is the smallest P at which the gap is at most ε (default
:data:`EPSILON` = 0.02): with P_1 < P_2 < … the curve's sizes and g_i their gaps, i the first with g_i ≤ ε, P* is
interpolated linearly in ln P between P_{i-1} and P_i::

    ln P* = ln P_{i-1} + (g_{i-1} − ε) / (g_{i-1} − g_i) · (ln P_i − ln P_{i-1})

(P* = P_i when g_i = ε, to within :data:`TOLERANCE` of floating point). A curve has no P* when no P comes within ε (``"never within ε"``) or when the smallest
already does (``"≤ smallest P"``: P* is at most P_1, recorded as ``at_most``).

**P\\*_KL.** The same rule on the mean KL(BP_0 ‖ model) over the validation inputs (``kl_bp0``, nats) against δ
(default :data:`DELTA` = 0.01): the smallest P at which the mean KL is at most δ, interpolated the same way.

**Spread over seeds.** Each seed's own curve (its runs alone) gives its P* by the same rule; ``std`` is the sample
standard deviation (ddof = 1) of the seeds' P* that are numbers, ``seed_mean`` their mean (None with fewer than two,
one). ``mean`` is the P* of the mean curve above, the published value.

**Scaling with n_c m^L** (:func:`fit_slope`): over the Random Hierarchy Models of one architecture whose P* is a
number, the ordinary least-squares line of ln P* against ln(n_c m^L); its slope's standard error is
sqrt(Σ r² / (n − 2) / Σ (x − x̄)²) from the residuals r (None with two points), and the slope is consistent with the
theory's 1 (Cagnetta et al., PRX 2024: P* ≈ n_c m^L) when |slope − 1| ≤ 2 standard errors.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

EPSILON = 0.02  # the accuracy gap to BP_0 within which a curve has reached it
DELTA = 0.01  # nats: the KL to BP_0 under which a curve has reached it
THEORY_SLOPE = 1.0  # P* ∝ n_c m^L
QUANTITIES = ("accuracy", "kl")
NEVER = "never within the threshold on the grid"
TOLERANCE = 1e-12  # a gap this close to the threshold is on it (1.0 − 0.98 is 0.020000000000000018 in floats)
FROM_START = "≤ smallest P"


def check_threshold(name: str, value, high: float | None = None) -> float:
    """A threshold: a finite number > 0 (and < ``high``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0 or (
            high is not None and value >= high):
        bound = f"in (0, {high:g})" if high is not None else "> 0"
        raise ValueError(f"`{name}` must be a number {bound}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Crossing:
    """Where one curve comes within its threshold: ``value`` (P*, None when it has none), ``reason`` (None, or why
    none: :data:`NEVER`, :data:`FROM_START`) and ``at_most`` (the smallest P when the curve starts within it)."""

    value: float | None
    reason: str | None = None
    at_most: int | None = None

    def to_dict(self) -> dict:
        return {"pstar": self.value, "reason": self.reason, "at_most": self.at_most}


def crossing(sizes, gaps, threshold: float) -> Crossing:
    """P* of one curve: the smallest of ``sizes`` (P, increasing) at which ``gaps`` (one per P) is at most
    ``threshold``, interpolated linearly in ln P with the point before it (see the module docstring)."""
    points = sorted(zip(sizes, gaps))
    if not points:
        return Crossing(None, "no runs")
    first = next((i for i, (_, gap) in enumerate(points) if gap <= threshold + TOLERANCE), None)
    if first is None:
        return Crossing(None, NEVER)
    if first == 0:
        return Crossing(None, FROM_START, at_most=int(points[0][0]))
    (low, above), (high, below) = points[first - 1], points[first]
    if below >= threshold - TOLERANCE:  # on the threshold at a grid point: that P
        return Crossing(float(high))
    fraction = (above - threshold) / (above - below)  # above > threshold > below
    return Crossing(math.exp(math.log(low) + fraction * (math.log(high) - math.log(low))))


def _gap(row: dict, quantity: str) -> float | None:
    if quantity == "accuracy":
        if row.get("accuracy") is None or row.get("bp_accuracy") is None:
            return None
        return float(row["bp_accuracy"]) - float(row["accuracy"])
    return None if row.get("kl_bp0") is None else float(row["kl_bp0"])


def _mean_curve(rows: list, quantity: str) -> tuple:
    """(sizes, gaps) of ``rows``: per P the mean over its runs (accuracy: mean BP_0 accuracy less mean accuracy)."""
    sizes = sorted({int(row["num_train"]) for row in rows})
    kept, gaps = [], []
    for size in sizes:
        at = [row for row in rows if int(row["num_train"]) == size and _gap(row, quantity) is not None]
        if not at:
            continue
        if quantity == "accuracy":
            gap = statistics.fmean(float(r["bp_accuracy"]) for r in at) - statistics.fmean(float(r["accuracy"])
                                                                                            for r in at)
        else:
            gap = statistics.fmean(float(r["kl_bp0"]) for r in at)
        kept.append(size)
        gaps.append(gap)
    return kept, gaps


@dataclass(frozen=True)
class PStar:
    """P* of a curve and its spread over seeds (see the module docstring).

    Attributes:
        quantity: ``"accuracy"`` (threshold ε on the gap to BP_0's accuracy) or ``"kl"`` (δ on the KL to BP_0).
        threshold: ε or δ.
        curve: the mean curve's :class:`Crossing` (its ``value`` is the published P*, ``mean``).
        per_seed: ``{seed: Crossing}`` of each seed's own curve.
    """

    quantity: str
    threshold: float
    curve: Crossing
    per_seed: dict = field(default_factory=dict)

    @property
    def seed_values(self) -> list:
        return [c.value for c in self.per_seed.values() if c.value is not None]

    @property
    def std(self) -> float | None:
        values = self.seed_values
        return statistics.stdev(values) if len(values) > 1 else None

    @property
    def seed_mean(self) -> float | None:
        values = self.seed_values
        return statistics.fmean(values) if values else None

    def to_dict(self) -> dict:
        return {"mean": self.curve.value, "std": self.std, "reason": self.curve.reason, "at_most": self.curve.at_most,
                "seed_mean": self.seed_mean, "num_seeds_crossing": len(self.seed_values),
                "per_seed": [{"seed": seed, **crossing_.to_dict()} for seed, crossing_ in self.per_seed.items()],
                "quantity": self.quantity, "threshold": self.threshold}


def pstar(rows: list, quantity: str = "accuracy", threshold: float | None = None) -> PStar:
    """:class:`PStar` of one curve's ``rows`` (dicts with ``num_train``, ``seed``, ``accuracy``, ``bp_accuracy``,
    ``kl_bp0``; rows missing the quantity are left out) at ``threshold`` (default ε = :data:`EPSILON` for
    ``"accuracy"``, δ = :data:`DELTA` for ``"kl"``)."""
    if quantity not in QUANTITIES:
        raise ValueError(f"`quantity` must be one of {QUANTITIES}, got {quantity!r}")
    if threshold is None:
        threshold = EPSILON if quantity == "accuracy" else DELTA
    threshold = check_threshold("epsilon" if quantity == "accuracy" else "delta", threshold,
                                1.0 if quantity == "accuracy" else None)
    seeds = sorted({int(row["seed"]) for row in rows})
    per_seed = {seed: crossing(*_mean_curve([r for r in rows if int(r["seed"]) == seed], quantity), threshold)
                for seed in seeds}
    return PStar(quantity, threshold, crossing(*_mean_curve(rows, quantity), threshold), per_seed)


@dataclass(frozen=True)
class SlopeFit:
    """The least-squares line ln P* = intercept + slope · ln(n_c m^L) over ``points`` ``[(n_c m^L, P*, grammar)]``.

    ``slope_se``: the slope's standard error from the residuals (None with fewer than three points); ``slope`` None
    with fewer than two distinct n_c m^L. ``left_out``: the grammars without a P* (``{grammar: reason}``)."""

    points: list
    slope: float | None
    slope_se: float | None
    intercept: float | None
    left_out: dict = field(default_factory=dict)

    @property
    def consistent(self) -> bool | None:
        """Whether the slope is within two standard errors of the theory's 1 (None: no standard error)."""
        if self.slope is None or self.slope_se is None:
            return None
        return abs(self.slope - THEORY_SLOPE) <= 2 * self.slope_se

    def to_dict(self) -> dict:
        return {"slope": self.slope, "slope_se": self.slope_se, "intercept": self.intercept,
                "num_points": len(self.points), "theory_slope": THEORY_SLOPE,
                "consistent_with_theory": self.consistent,
                "points": [{"grammar": g, "n_c_m_L": x, "pstar": y} for x, y, g in self.points],
                "left_out": self.left_out,
                "method": "ordinary least squares of ln P* on ln(n_c m^L) over the grammars whose P* is a number; "
                          "standard error of the slope from the residuals (n − 2 degrees of freedom); consistent "
                          "with the theory when |slope − 1| ≤ 2 standard errors"}


def fit_slope(points, left_out: dict | None = None) -> SlopeFit:
    """:class:`SlopeFit` of ``points`` ``[(n_c m^L, P*, grammar), ...]`` (every P* a number > 0)."""
    points = sorted(points)
    xs = [math.log(x) for x, _, _ in points]
    ys = [math.log(y) for _, y, _ in points]
    if len(set(xs)) < 2:
        return SlopeFit(points, None, None, None, dict(left_out or {}))
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sxx
    intercept = mean_y - slope * mean_x
    se = None
    if len(points) > 2:
        residuals = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys))
        se = math.sqrt(residuals / (len(points) - 2) / sxx)
    return SlopeFit(points, slope, se, intercept, dict(left_out or {}))


__all__ = ["Crossing", "DELTA", "EPSILON", "FROM_START", "NEVER", "PStar", "SlopeFit", "THEORY_SLOPE",
           "check_threshold", "crossing", "fit_slope", "pstar"]
