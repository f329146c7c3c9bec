"""What reproduced: one check per paper figure that ``reproduce`` draws, run on the numbers its steps wrote.

Each check reads the JSON that a step writes under the reproduction folder OUT and returns a :class:`Finding`: the
paper's claim in one line, the rule that tests it on this run, the measured numbers and a verdict, one of
:data:`VERDICTS`: ``reproduced``, ``not reproduced``, ``inconclusive``, or ``not run at this preset`` (the step's
file is absent: the preset has no such step, or the step has not finished; the note says which). The rules are the
paper's qualitative claims made precise, with the thresholds named below; a check never trains or computes anything
heavier than a few sums over the JSON.

**Noise.** Every comparison a rule makes against a threshold is recorded with its margin (how far the measured
number is on the passing side; negative: on the failing side) and the noise of what it measured — the standard
error of a fraction on the inputs behind it, the sampling error of a mean KL, the spread over seeds where there are
seeds — in ``measured["margins"]`` (:class:`Margins`). A comparison is decided only when its margin exceeds
:data:`Z` times its noise; inside that it is a tie, treated the same way whichever side of the threshold the number
fell, and a verdict that hangs on a tie is ``inconclusive``: rounding, the machine or one seed cannot flip a verdict
between reproduced and not reproduced. Where the file records no noise (written before it, or one seed of a
quantity whose noise only seeds show), the comparison is decided by its sign and the margin says ``noise: None``.
A run's bytes depend on the machine and the thread count, so the same command reproduces a run to its noise, not
to the bit, across machines: the verdicts are built to be stable under that. :func:`write_findings` writes every finding to ``OUT/findings.json``; ``OUT/report.md`` shows
them as a table (:mod:`hf_treelang.reproduce.report`).

Figures, in the paper's numbering (appendix figures: 6 = App. E.1, 7 = E.2, 8 and 9 = E.3, 10 = E.4, 11 = E.5, 12 = E.7;
figures 1a, 5 and 13 are drawings or not drawn by ``reproduce``), and the file each check reads:

=============  ==========================================  ===================
figure         file under OUT                              step
=============  ==========================================  ===================
1b             calibration/mlm/calibration.json            calibration
1c, 2b         dynamics/root.json                          dynamics
1d, 3a, 10     dynamics/mlm.json                           dynamics
1e, 4          attention/mlm/attention.json                attention
1f             sample_complexity/sample_complexity.json    sample_complexity
2a, 8          accuracy_vs_samples/fig2a_e3.json           root_sweep
9              accuracy_vs_samples/fig9_kl.json            root_sweep
3b             probe/probe.json                            probe
6              accuracy_vs_samples/e1_layers.json          layers_sweep
7              accuracy_vs_samples/e2_grammar_seeds.json   seed_sweep
11             attention/classifier/attention.json         classifier_attention
12 (left)      probe/probe_ends.json                       probe
12 (right)     probe/probe_filtered.json                   probe_filtered
=============  ==========================================  ===================

Glossary: ℓ the depth, k_train the filter level of the main runs (``OUT/preset.json``), ancestor level m (0 = the
root, ℓ = the leaves), the height of level m is ℓ − m; the tree distance of leaves i and j is the height of their
deepest common ancestor, ``(i ^ j).bit_length()`` (0 for i itself, 1 for its sibling, ℓ across the root).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from hf_treelang.analysis.io import write_json
from hf_treelang.jsonio import read_json_object

from .presets import Preset, check_figures, step_names

FINDINGS_FILE = "findings.json"
REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_RUN = VERDICTS = ("reproduced", "not reproduced", "inconclusive",
                                                                 "not run at this preset")
Z = 2.0  # a comparison is decided when its margin exceeds Z × its noise (two standard errors); else it is a tie
ALPHA = 0.05  # Fig. 1c/d: the chance that a model no more BP_j-like than BP_k_train-like passes a level's evidence

# Thresholds of the rules (accuracies are fractions in [0, 1], KL in nats).
CALIBRATION_KL = 0.05  # Fig. 1b: in-sample mean D_KL(BP ‖ model) at most this ...
CALIBRATION_MATCH = 0.9  # ... and argmax agreement at least this;
UNIFORM_SPEARMAN = 0.5  # out of sample (uniform inputs): mean Spearman correlation at least this
KL_NOISE = 0.1  # Fig. 1c/d: without the KL's logged standard errors, two KLs within this fraction of the smaller
# are tied (the closest BP_k does not change on a tie)
LOCALITY = 1.0  # Fig. 1e: layer 1 attends at least one tree level closer than uniform attention, and the span climbs
# at least one level over the layers (attention off the diagonal: a query's attention to itself is not counted)
BP_TOLERANCE = 0.03  # Fig. 2a, 2b, 7, 8: "matches BP": |accuracy − BP| at most this at the end
CHANGE = 0.02  # Fig. 2b, 3a, 3b, 6, 12: a rise, a fall or a "lower" accuracy counts from this much on
REACHED = 0.05  # Fig. 3a: a k_test accuracy has reached BP once it is at least BP − this; only a k_test whose BP
# accuracy exceeds the most-frequent-symbol accuracy by more than this can be reached
PROBE_MARGIN = 0.1  # Fig. 3b, 12: a probe "recovers" an ancestor with accuracy at least chance + this
LAYERS_TOLERANCE = 0.01  # Fig. 6: mean accuracy over P may fall by this much from n_L to n_L + 1 (noise)
MATCH = 0.9  # Fig. 10: final argmax agreement with BP_k_train at least this ...
SPEARMAN = 0.8  # ... and final mean Spearman correlation with it at least this


@dataclass(frozen=True)
class Finding:
    """The verdict on one paper figure.

    Attributes:
        figure: the paper's figure, e.g. ``"1c"`` or ``"12 (right)"``.
        claim: what the paper claims there, in one line.
        check: the rule that tests the claim on this run.
        measured: the numbers the rule read (JSON-able), ``{}`` when not run.
        verdict: one of :data:`VERDICTS`.
        note: why it was not run, or what the rule could not use; ``""`` otherwise.
    """

    figure: str
    claim: str
    check: str
    measured: dict = field(default_factory=dict)
    verdict: str = NOT_RUN
    note: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FigureCheck:
    """One registered check: its figure, the file it reads (relative to OUT), the step that writes it, the claim and
    the rule in one line each, and ``function(data, out) -> (measured, passed, note)`` on the file's JSON."""

    figure: str
    path: str
    step: str
    claim: str
    check: str
    function: Callable

    def __call__(self, out, preset: Preset | None = None) -> Finding:
        """The :class:`Finding` of this figure in the reproduction folder ``out``; with the ``preset`` of the
        reproduction, the note on an absent file says whether the preset has no such step or it has not finished."""
        out = Path(out)
        data = read_json_object(out / self.path)
        if data is None:
            why = f"step {self.step} wrote no {self.path}"
            if preset is not None:
                steps = step_names(preset.attention_filter_levels, preset.figure_steps())
                why = (f"preset {preset.name!r} has no step {self.step}" if self.step not in steps
                       else f"step {self.step} has not finished: no {self.path}")
            return Finding(self.figure, self.claim, self.check, note=why)
        try:
            measured, passed, note = self.function(data, out)
        except (KeyError, TypeError, ValueError, IndexError) as error:
            return Finding(self.figure, self.claim, self.check, note=f"{self.path} could not be read: {error!r}")
        if passed is None:  # the rule could not be applied to this file (the note says why)
            return Finding(self.figure, self.claim, self.check, measured=measured, note=note)
        if passed == INCONCLUSIVE:
            ties = [entry["test"] for entry in measured.get("margins", []) if entry.get("decided") == "tie"]
            why = f"within noise: {', '.join(ties)}" if ties else "a comparison within noise decides it"
            return Finding(self.figure, self.claim, self.check, measured=measured, verdict=INCONCLUSIVE,
                           note="; ".join(part for part in (note, why) if part))
        return Finding(self.figure, self.claim, self.check, measured=measured,
                       verdict=REPRODUCED if passed else NOT_REPRODUCED, note=note)


CHECKS: list = []  # every FigureCheck, in the paper's figure order (1b, 1c, ..., 12 (right))


def _figure_order(check: FigureCheck) -> tuple:
    """``"1b"`` -> (1, "b"), ``"12 (left)"`` -> (12, " (left)"): the paper's order of figures and panels."""
    digits = len(check.figure) - len(check.figure.lstrip("0123456789"))
    return int(check.figure[:digits]), check.figure[digits:]


def _figure(figure: str, path: str, step: str, claim: str, check: str):
    """Register the decorated rule as the check of ``figure`` (see :class:`FigureCheck`): a figure of
    :data:`~hf_treelang.reproduce.presets.PAPER_FIGURES`, with its panel when it has several (``"12 (left)"``)."""
    check_figures([figure.split(" ")[0]])

    def register(function: Callable) -> Callable:
        CHECKS.append(FigureCheck(figure, path, step, claim, check, function))
        CHECKS.sort(key=_figure_order)
        return function

    return register


# ---------------------------------------------------------------- helpers


def _k_train(out: Path) -> int:
    """k_train of the main runs: the preset's filter level as ``reproduce`` recorded it (0 when not recorded)."""
    return int((read_json_object(out / "preset.json") or {}).get("filter_level", 0))


def _series(values) -> np.ndarray:
    """A JSON curve (None for NaN) as a float array."""
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def _levels(curves: dict) -> dict:
    """``{"k0": [...], "k3": [...]}`` as ``{0: array, 3: array}``."""
    return {int(key[1:]): _series(values) for key, values in curves.items()}


def _by_level(values: dict | None) -> dict:
    """``{"k0": x, "k3": y}`` as ``{0: x, 3: y}`` (missing or None: ``{}``)."""
    return {int(key[1:]): value for key, value in (values or {}).items()}


def _last(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(finite[-1]) if finite.size else None


def _round(value, digits: int = 4):
    if isinstance(value, dict):
        return {k: _round(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v, digits) for v in value]
    if isinstance(value, (float, np.floating)):
        return round(float(value), digits) if math.isfinite(value) else None
    return value


def _standard_error(fraction: float, n: int) -> float:
    """Standard error of a fraction (an accuracy, an agreement) measured on ``n`` inputs: √(p(1 − p)/n); at its
    largest, p = 1/2, 0.5/√n."""
    return math.sqrt(fraction * (1 - fraction) / n)


def all_of(outcomes) -> bool | None:
    """Three-valued AND of decided (True / False) and tied (None) outcomes: False if any is False, else None if any
    is None, else True."""
    outcomes = list(outcomes)
    if any(outcome is False for outcome in outcomes):
        return False
    return None if any(outcome is None for outcome in outcomes) else True


def any_of(outcomes) -> bool | None:
    """Three-valued OR: True if any is True, else None if any is None, else False."""
    outcomes = list(outcomes)
    if any(outcome is True for outcome in outcomes):
        return True
    return None if any(outcome is None for outcome in outcomes) else False


class Margins:
    """The threshold comparisons of one rule, each with its margin and noise (see the module docstring).

    ``at_least(name, value, threshold, noise)`` records ``value ≥ threshold`` and returns True (decided: the margin
    exceeds :data:`Z` × ``noise``), False (decided against) or None (a tie); with ``noise`` None (not measured) the
    comparison is decided by its sign. :meth:`outcome` is the three-valued AND of the recorded comparisons.
    """

    def __init__(self):
        self.entries: list = []

    def at_least(self, name: str, value: float, threshold: float, noise: float | None) -> bool | None:
        return self._add(name, value, threshold, float(value) - float(threshold), noise)

    def at_most(self, name: str, value: float, threshold: float, noise: float | None) -> bool | None:
        return self._add(name, value, threshold, float(threshold) - float(value), noise)

    def _add(self, name: str, value, threshold, margin: float, noise: float | None) -> bool | None:
        margin = float(margin)
        if noise is None or not math.isfinite(noise):
            decided, noise = margin >= 0, None
        elif margin > Z * noise:
            decided = True
        elif margin < -Z * noise:
            decided = False
        else:
            decided = None
        self.entries.append({"test": name, "value": _round(value), "threshold": _round(threshold),
                             "margin": _round(margin), "noise": None if noise is None else _round(noise),
                             "decided": {True: "pass", False: "fail", None: "tie"}[decided]})
        return decided

    def outcome(self) -> bool | None:
        return all_of({"pass": True, "fail": False, "tie": None}[entry["decided"]] for entry in self.entries)


def _tri(outcome: bool | None):
    """A three-valued outcome as a check's ``passed``: True, False, or :data:`INCONCLUSIVE` for a tie."""
    return INCONCLUSIVE if outcome is None else outcome


def _tree_distance(depth: int) -> np.ndarray:
    """(L, L) height of the deepest common ancestor of leaves i and j: ``(i ^ j).bit_length()``."""
    index = np.arange(2**depth)
    return np.array([[int(i ^ j).bit_length() for j in index] for i in index])


def _layer_maps(model: dict) -> np.ndarray:
    """(layers, L, L) attention of one model of an attention JSON, heads averaged."""
    maps = np.asarray(model["maps"], dtype=float)  # (layers, heads, L, L)
    return maps.mean(1)


def _off_diagonal_share(maps: np.ndarray, where: np.ndarray) -> np.ndarray:
    """(layers,) mean of the (L, L) values ``where`` under the attention that the queries pay to the other leaves
    (off the diagonal), pooled over the queries: a share for 0/1 values, a mean tree distance for the distances; NaN
    for a layer that attends only to the query itself. A query's attention to itself says nothing of the tree: a
    layer that attends only to itself is not local, it is idle."""
    other = 1.0 - np.eye(maps.shape[-1])  # (L, L)
    total = (maps * other).sum((-1, -2))  # (layers,)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (maps * other * where).sum((-1, -2)) / total, np.nan)


def _self_attention(maps: np.ndarray) -> np.ndarray:
    """(layers,) attention of a query to itself (the diagonal), averaged over the queries."""
    return np.diagonal(maps, axis1=-2, axis2=-1).mean(-1)


def _mean_distance(maps: np.ndarray, depth: int) -> np.ndarray:
    """(layers,) tree distance of the attention off the diagonal (to the other leaves), attention-weighted."""
    return _off_diagonal_share(maps, _tree_distance(depth))


def _block_mass(maps: np.ndarray, depth: int, filter_level: int) -> np.ndarray:
    """(layers,) share of the attention off the diagonal kept inside the query's own block of 2**(ℓ − k) leaves (its
    level-k subtree)."""
    return _off_diagonal_share(maps, _tree_distance(depth) <= depth - filter_level)


def _block_needed(depth: int, filter_level: int) -> float:
    """Fig. 4's threshold: halfway from uniform attention's off-diagonal share inside the block,
    (2^(ℓ−k) − 1)/(2^ℓ − 1), to a block-diagonal map's, 1."""
    return (1.0 + (2.0 ** (depth - filter_level) - 1) / (2.0**depth - 1)) / 2


def _distance_to_uniform(maps: np.ndarray) -> float:
    """Mean over layers and rows of the total-variation distance to uniform attention."""
    return float(0.5 * np.abs(maps - 1.0 / maps.shape[-1]).sum(-1).mean())


def _uniform_distance(depth: int) -> float:
    """Tree distance of uniform attention over the other leaves."""
    distance = _tree_distance(depth)
    return float(distance.sum() / (distance.size - len(distance)))


# ---------------------------------------------------------------- Fig. 1


@_figure("1b", "calibration/mlm/calibration.json", "calibration",
         "The MLM's probabilities for a masked symbol match the exact BP marginals in sample, and stay correlated "
         "with them on uniform (out-of-sample) inputs.",
         f"in sample: mean KL(BP_k_train ‖ model) ≤ {CALIBRATION_KL} and argmax agreement ≥ {CALIBRATION_MATCH}; "
         f"uniform inputs: mean Spearman correlation ≥ {UNIFORM_SPEARMAN}")
def _check_calibration(data: dict, out: Path) -> tuple:
    """Fig. 1b. Rule: on fresh in-sample sequences the MLM's distribution of a masked leaf is close to BP_{k_train}'s
    marginal — mean D_KL(BP ‖ model) ≤ :data:`CALIBRATION_KL` and argmax agreement ≥ :data:`CALIBRATION_MATCH` —
    and on uniform random sequences the two distributions still rank the symbols alike: mean Spearman correlation
    ≥ :data:`UNIFORM_SPEARMAN` (the paper: "high correlations, albeit with more dispersion")."""
    in_sample, uniform = data["sets"]["in_sample"], data["sets"]["uniform"]
    measured = {"in_sample_kl": in_sample["kl_mean"], "in_sample_argmax_match": in_sample["argmax_match"],
                "uniform_spearman": uniform["spearman_mean"]}
    n = (in_sample.get("num_sequences") or 0) - (in_sample.get("num_impossible") or 0)
    margins = Margins()
    margins.at_most("in-sample KL", in_sample["kl_mean"], CALIBRATION_KL, in_sample.get("kl_standard_error"))
    margins.at_least("in-sample argmax agreement", in_sample["argmax_match"], CALIBRATION_MATCH,
                     _standard_error(in_sample["argmax_match"], n) if n > 0 else None)
    margins.at_least("uniform-input Spearman", uniform["spearman_mean"], UNIFORM_SPEARMAN,
                     uniform.get("spearman_standard_error"))
    return {**_round(measured), "margins": margins.entries}, _tri(margins.outcome()), ""


def _kl_tie(data: dict, kl: dict, a: int, b: int, i: int) -> float:
    """The noise band of the KL difference between BP_a and BP_b at evaluation ``i``: :data:`Z` × the sum of their
    standard errors (``kl_bp_se``: the sampling error of each mean over the in-sample sequences; their sum bounds the
    error of the paired difference), else :data:`KL_NOISE` × the smaller KL (a file written before them)."""
    se = _levels(data.get("kl_bp_se") or {})
    if a in se and b in se and math.isfinite(se[a][i]) and math.isfinite(se[b][i]):
        return Z * (se[a][i] + se[b][i])
    return KL_NOISE * min(kl[a][i], kl[b][i])


def _closest_path(data: dict) -> tuple:
    """(path, levels, held): the closest BP_k along training with ties held, repeats collapsed; the level held at
    every evaluation; and the steps at which a KL tie held the level.

    The closest BP_k of an evaluation is the argmin over k of the in-sample D_KL(BP_k ‖ model) (``closest_bp``), but
    it changes only when the new level is closer than the held one beyond noise (:func:`_kl_tie`): a tie keeps the
    level of the evaluation before, whichever of the two KLs rounding made smaller, so a difference within noise
    never moves the path (e.g. a return to a larger k nearly tied with the level left). The first evaluation takes
    its argmin."""
    closest, steps = [int(k) for k in data["closest_bp"]], [int(s) for s in data["steps"]]
    kl = _levels(data["kl_bp"])
    levels, held = [], []
    for i, k in enumerate(closest):
        current = levels[-1] if levels else k
        if k != current and kl[current][i] - kl[k][i] <= _kl_tie(data, kl, current, k, i):
            held.append(steps[i])
            levels.append(current)
        else:
            levels.append(k)
    path = [k for i, k in enumerate(levels) if i == 0 or levels[i - 1] != k]
    return path, levels, held


def agreement_z(evaluations: int) -> float:
    """The one-sided normal quantile that keeps the chance of any of ``evaluations`` tests passing by chance at
    :data:`ALPHA` (Bonferroni)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(1 - ALPHA / max(evaluations, 1))


def _intermediate_evidence(data: dict, levels: list, k_train: int) -> tuple:
    """(measured, outcome, note) of the rule that the model is BP_j-like on the way, for every level k_train < j < ℓ
    that the closest BP_k passes (``levels``: the level held per evaluation, :func:`_closest_path`); ``outcome`` is
    True, False, None (a tie decides it) or ``"absent"`` (the run logged no argmax agreements).

    The evidence lies on the inputs where BP_j's and BP_k_train's argmax differ: m = d·n of the n in-sample inputs
    (``bp_argmax_disagreement`` d, ``num_in_sample`` n). On the others the model agrees with both or with neither,
    so the two agreements differ by (a − b)/n, a and b the disagreeing inputs on which the model sides with BP_j and
    with BP_k_train: a paired comparison (a sign test) whose standard error is at most √m / n = √(d/n), however the
    m split. At an evaluation from the first at which BP_j is the closest on, the model is decidedly BP_j-like when
    match_j − match_k_train > z·√(d/n) and decidedly BP_k_train-like when it is < −z·√(d/n), with z the one-sided
    quantile of :data:`ALPHA` over the evaluations tested (:func:`agreement_z`, Bonferroni): a model no more BP_j-like
    than BP_k_train-like passes with probability at most :data:`ALPHA`. Level j has evidence when one evaluation is
    decidedly BP_j-like, none when every one is decidedly BP_k_train-like, and a tie otherwise.

    Exempt: a level whose argmaxes differ on m ≤ z² inputs, where even a model siding with BP_j on all m would not
    be decided (m / n ≤ z·√m / n): the inputs cannot tell the two apart. A level with more disagreeing inputs is
    tested however small d is: 90 of 10,000 inputs on all of which the model sides with BP_0 are decisive evidence
    against BP_3. Without n and d (a file written before them) each evaluation compares the two agreements by sign
    and the note says so."""
    depth = max(_levels(data["kl_bp"]))
    match = _levels(data.get("match_bp") or {})
    visited = sorted({k for k in levels if k_train < k < depth}, reverse=True)
    if visited and (k_train not in match or any(j not in match for j in visited)):
        return {}, "absent", "the run logged no argmax agreement with every BP_k it passes (match_bp)"
    n, disagreement = data.get("num_in_sample"), _by_level(data.get("bp_argmax_disagreement"))
    steps = [int(s) for s in data["steps"]]
    paired = bool(n) and bool(disagreement)
    evidence = {}
    note = "" if paired else ("the file records no argmax disagreement between BP_k and BP_k_train (written before "
                              "it): no level exempted, agreements compared by sign")
    outcomes = []
    for j in visited:
        start = levels.index(j)
        tested = list(range(start, len(steps)))
        z = agreement_z(len(tested))
        if paired and j in disagreement:
            m = disagreement[j] * n
            if m <= z * z:
                evidence[f"k{j}"] = (f"exempt: BP_{j}'s argmax differs from BP_{k_train}'s on {m:.0f} of {n} inputs "
                                     f"≤ z² = {z * z:.1f} (z = {z:.2f}): no outcome could decide")
                continue
            noise = math.sqrt(disagreement[j] / n)
        else:
            noise = None
        decided = []
        for i in tested:
            gap = float(match[j][i] - match[k_train][i])
            decided.append(gap > 0 if noise is None else (True if gap > z * noise else
                                                           False if gap < -z * noise else None))
        outcome = any_of(decided)
        outcomes.append(outcome)
        best = max(tested, key=lambda i: match[j][i] - match[k_train][i])
        gap = match[j][best] - match[k_train][best]
        bound = "" if noise is None else f" (decided beyond z·√(d/n) = {z:.2f} × {noise:.4f} = {z * noise:.4f})"
        verdict = {True: "BP_j-like", False: f"BP_{k_train}-like at every evaluation", None: "within noise"}[outcome]
        evidence[f"k{j}"] = (f"{verdict}: largest agreement gap {gap:+.4f} with BP_{j} over BP_{k_train} at step "
                             f"{steps[best]}{bound}")
    return evidence, all_of(outcomes), note


def _alignment(data: dict, out: Path, *, decreasing: bool) -> tuple:
    """The rules of Fig. 1c (``decreasing=False``) and 1d: (measured, passed, note)."""
    k_train = _k_train(out)
    path, levels, held = _closest_path(data)
    if not path:
        return {}, None, "the file has no KL curves"
    evidence, outcome, note = _intermediate_evidence(data, levels, k_train)
    measured = {"closest_bp_sequence": path, "k_train": k_train, "ties_held_at_step": held,
                "bp_k_like_on_the_way": evidence}
    if outcome == "absent":
        return measured, None, note
    between = [k for k in path if k_train < k < max(_levels(data["kl_bp"]))]
    structure = bool(path[0] > k_train and path[-1] == k_train and between)
    if decreasing:
        structure = structure and len(path) >= 3 and all(a > b for a, b in zip(path, path[1:]))
    passed = all_of([structure, outcome])
    return measured, INCONCLUSIVE if passed is None else passed, note


@_figure("1c", "dynamics/root.json", "dynamics",
         "Trained on the full hierarchy, the root classifier first aligns with BP_ℓ and ends aligned with the "
         "matched BP_k_train, passing the levels between.",
         "the closest BP_k along training (smallest KL; a KL tie within noise keeps the level) starts above k_train, "
         "passes a level between k_train and ℓ and ends at BP_k_train; at each level j between that it passes, the "
         "model sides with BP_j over BP_k_train on their disagreeing inputs beyond noise at some evaluation from its "
         "arrival there (a paired test; exempt only when they disagree on ≤ z² inputs)")
def _check_root_alignment(data: dict, out: Path) -> tuple:
    """Fig. 1c. Rule: the sequence of closest BP_k (:func:`_closest_path`: argmin over k of the in-sample
    D_KL(BP_k ‖ model) at each evaluation, held on a tie within noise, repeats collapsed) starts at some k > k_train,
    passes at least one level k_train < j < ℓ, and ends at k_train (BP_0 for the paper's k_train = 0); and the model
    is BP_j-like at every such level it passes (:func:`_intermediate_evidence`: a paired test of its argmax agreement
    with BP_j against BP_k_train on the inputs where the two differ). A model that knows BP_0 from the start and only
    grows confident passes through smaller KL to BP_j on the way, but never BP_j's argmax. Inconclusive when the
    evidence of a level is within noise."""
    return _alignment(data, out, decreasing=False)


@_figure("1d", "dynamics/mlm.json", "dynamics",
         "The MLM aligns sequentially with BP_k of decreasing k as training goes on, down to the matched BP_k_train.",
         "the closest BP_k along training (a KL tie within noise keeps the level) are strictly decreasing, number at "
         "least 3 and end at BP_k_train; at each level j between k_train and ℓ that they pass, the model sides with "
         "BP_j over BP_k_train on their disagreeing inputs beyond noise at some evaluation from its arrival there")
def _check_mlm_alignment(data: dict, out: Path) -> tuple:
    """Fig. 1d. Rule: the sequence of closest BP_k of the MLM run (as Fig. 1c, :func:`_closest_path`) is strictly
    decreasing — every change of the closest oracle goes to a smaller k; a return to a larger k within noise of the
    level held is a tie and keeps it — passes at least 3 levels (e.g. 4 → 3 → 2 → 0) and ends at BP_k_train; and the
    model is BP_j-like at every level k_train < j < ℓ it passes (:func:`_intermediate_evidence`, as Fig. 1c)."""
    return _alignment(data, out, decreasing=True)


@_figure("1e", "attention/mlm/attention.json", "attention",
         "The attention maps of the MLM trained on the full hierarchy mirror the tree: local in the first layer, "
         "reaching higher tree levels in later layers.",
         f"attention-weighted tree distance of the attention to other leaves (off the diagonal): layer 1 ≤ uniform "
         f"attention's − {LOCALITY:g}, and the largest over the layers ≥ layer 1's + {LOCALITY:g}")
def _check_mlm_attention(data: dict, out: Path) -> tuple:
    """Fig. 1e. Rule, on the MLM of k_train (the first model of the grid with that filter level): the tree distance
    of a layer (the height of the deepest common ancestor of query and attended leaf, weighted by the attention a
    query pays to the other leaves — its attention to itself, at distance 0, is not counted — and pooled over
    queries) is at most uniform attention's − :data:`LOCALITY` in layer 1 (it attends within small subtrees) and
    rises by at least :data:`LOCALITY` to the widest layer (later layers combine higher subtrees, as BP going up the
    tree; App. F's layer t attends at distance exactly t). A layer that attends only to itself has no distance and
    cannot be layer 1's local one."""
    k_train = _k_train(out)
    models = [m for m in data["models"] if m["filter_level"] == k_train]
    if not models:
        return {}, None, f"no MLM of k_train = {k_train} in attention/mlm/attention.json"
    model = models[0]
    maps = _layer_maps(model)
    distance = _mean_distance(maps, model["depth"])
    uniform = _uniform_distance(model["depth"])
    measured = {"tree_distance_per_layer": distance.tolist(), "uniform_attention": uniform,
                "attention_to_itself_per_layer": _self_attention(maps).tolist()}
    if not np.isfinite(distance[0]):
        return _round(measured), False, "layer 1 attends only to itself: no local attention to other leaves"
    # several models of k_train (seeds): the means over them, with their standard errors; one model: no noise known
    firsts, climbs = [], []
    for other in models:
        d = _mean_distance(_layer_maps(other), other["depth"])
        firsts.append(d[0])
        climbs.append(np.nanmax(d) - d[0])
    spread = (lambda v: float(np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) > 1 else None)
    margins = Margins()
    margins.at_most("layer-1 tree distance", float(np.mean(firsts)), uniform - LOCALITY, spread(firsts))
    margins.at_least("climb over the layers", float(np.mean(climbs)), LOCALITY, spread(climbs))
    measured["models"] = len(models)
    note = "" if len(models) > 1 else "one model of k_train: the spread of its tree distances over seeds is not known"
    return {**_round(measured), "margins": margins.entries}, _tri(margins.outcome()), note


PRETRAINED_ARMS = ("frozen", "finetuned")  # Fig. 1f: the arms that start from the MLM, each against scratch


def _gap_at_smallest(data: dict, arm: str) -> tuple:
    """(P, mean, spread, seeds) of ``arm`` − scratch at the smallest P, from the JSON's ``gap_vs_scratch`` (or its
    accuracies, one seed, for a file written before it)."""
    sizes = data["sizes"]
    smallest = sizes.index(min(sizes))
    gaps = (data.get("gap_vs_scratch") or {}).get(arm)
    if gaps is not None:
        gap = gaps[smallest]
        return sizes[smallest], gap["mean"], gap["spread"], gap["num_seeds"]
    ours, scratch = data["accuracy"][arm][smallest], data["accuracy"]["scratch"][smallest]
    mean = None if ours is None or scratch is None else ours - scratch
    return sizes[smallest], mean, None, 0 if mean is None else 1


@_figure("1f", "sample_complexity/sample_complexity.json", "sample_complexity",
         "MLM pre-training cuts the labelled data needed for root classification: the pre-trained encoder, frozen "
         "or fine-tuned, beats training from scratch at small P.",
         "at the smallest P, for the frozen and the fine-tuned encoder: its accuracy − scratch's > the standard "
         "deviation of that gap over the seeds (one seed: > 0)")
def _check_sample_complexity(data: dict, out: Path) -> tuple:
    """Fig. 1f. Rule: at the smallest number P of labelled sequences, for each pre-trained arm — the frozen MLM
    encoder with a new readout, and the same encoder fine-tuned (:data:`PRETRAINED_ARMS`) — its test accuracy minus
    that of the same architecture trained from scratch, paired by seed and averaged, is larger than its sample
    standard deviation over the seeds (the gain is beyond the seeds' spread); with a single seed there is no spread,
    the note says so and the rule asks for a positive gap. An arm the sweep did not run is not tested (the note says
    which); with neither, the check is not run."""
    arms = [arm for arm in PRETRAINED_ARMS if arm in data["accuracy"]]
    if "scratch" not in data["accuracy"] or not arms:
        return {}, None, "the scratch arm and a pre-trained arm were not both run"
    measured, passed, one_seed = {}, True, False
    for arm in arms:
        size, mean, spread, seeds = _gap_at_smallest(data, arm)
        measured.update({"P": size, "seeds": seeds, f"{arm}_minus_scratch": mean,
                         f"{arm}_spread_over_seeds": spread})
        if mean is None:
            return _round(measured), None, f"no seed at P={size} with both the {arm} and the scratch run finished"
        passed = passed and (mean > 0 if spread is None else mean > spread)
        one_seed = one_seed or spread is None
    notes = ["one seed: no spread over seeds, the rule asks for a gap > 0"] if one_seed else []
    notes += [f"the {arm} arm was not run: not tested" for arm in PRETRAINED_ARMS if arm not in arms]
    return _round(measured), passed, "; ".join(notes)


# ---------------------------------------------------------------- Fig. 2, 6, 7, 8: root accuracy


def _matches_bp(panel: dict, margins: "Margins | None" = None) -> tuple:
    """Per curve of an accuracy-vs-P panel: the accuracy at its largest P and BP's; and the curves off BP. With
    ``margins``, each |accuracy − BP| ≤ :data:`BP_TOLERANCE` is recorded there (the panels record no test-set size:
    decided by its sign)."""
    rows, off = {}, []
    for curve in panel["curves"]:
        largest = int(np.argmax(curve["sizes"]))
        accuracy, bp = curve["accuracy"][largest], curve["bp_accuracy"]
        rows[curve["label"]] = {"P": curve["sizes"][largest], "accuracy": accuracy, "bp": bp}
        if bp is None or abs(accuracy - bp) > BP_TOLERANCE:
            off.append(curve["label"])
        if margins is not None and bp is not None:
            margins.at_most(f"|accuracy − BP| of {curve['label']}", abs(accuracy - bp), BP_TOLERANCE, None)
    return rows, off


def _panel(data: dict, k_test: str) -> dict:
    panel = next((panel for panel in data["panels"] if panel["k_test"] == k_test), None)
    if panel is None:
        raise KeyError(f"no panel tested on k_test {k_test!r}")
    return panel


@_figure("2a", "accuracy_vs_samples/fig2a_e3.json", "root_sweep",
         "Given enough labelled data, root classifiers trained on k_train reach the accuracy of BP_k_train on the "
         "full hierarchy (k_test = 0), even where that BP is mismatched.",
         f"for every k_train, the k_test = 0 accuracy at the largest P is within {BP_TOLERANCE} of BP_k_train's")
def _check_fig2a(data: dict, out: Path) -> tuple:
    """Fig. 2a. Rule: on the panel tested on the full hierarchy (k_test = 0), every k_train curve's final test
    accuracy at its largest P is within :data:`BP_TOLERANCE` of BP_{k_train}'s accuracy on the same inputs."""
    margins = Margins()
    rows, off = _matches_bp(_panel(data, "full"), margins)
    return {**_round({"largest_P": rows, "off_bp": off}), "margins": margins.entries}, not off, ""


@_figure("2b", "dynamics/root.json", "dynamics",
         "Along the root classifier's training, the accuracy on slightly filtered test data keeps rising while on "
         "the most filtered data it rises, then falls to the mismatched BP_0 level.",
         f"every k_test < ℓ/2 ends within {CHANGE} of its peak; k_test = ℓ peaks ≥ {CHANGE} above both its first "
         f"and its final accuracy; every k_test > ℓ/2 ends within {BP_TOLERANCE} of BP_k_train's accuracy on it")
def _check_fig2b(data: dict, out: Path) -> tuple:
    """Fig. 2b. Rule, on the k_test accuracy curves of the root run: every k_test < ℓ/2 "keeps rising" (its final
    accuracy is within :data:`CHANGE` of its peak) while the most filtered set k_test = ℓ "rises then falls" (its
    peak exceeds both its first and its final accuracy by at least :data:`CHANGE`), and the filtered sets
    k_test > ℓ/2 fall "to the mismatched BP_0 level": each final accuracy is within :data:`BP_TOLERANCE` of the
    matched BP_k_train's accuracy on the same k_test data (``bp_accuracy_ktest``; BP_0 for the paper's k_train = 0)."""
    curves = _levels(data["accuracy_ktest"])
    bp = _by_level(data.get("bp_accuracy_ktest"))
    sizes = _by_level(data.get("bp_reference_size_ktest"))
    n = data.get("num_test")
    depth = max(curves)
    summary, margins = {}, Margins()

    def error(value, count):  # the standard error of an accuracy on `count` sequences; None when not recorded
        return _standard_error(min(max(value, 0.0), 1.0), count) if count else None

    for k, values in sorted(curves.items()):
        finite = values[np.isfinite(values)]
        if finite.size < 2:
            return {}, None, f"k_test = {k} has fewer than 2 evaluations"
        first, peak, final = float(finite[0]), float(finite.max()), float(finite[-1])
        summary[f"k{k}"] = {"first": first, "peak": peak, "final": final}
        pair = None if not n else math.sqrt(2) * error(peak, n)  # two accuracies of one test set
        if k < depth / 2:
            margins.at_least(f"k_test {k}: final ≥ peak − {CHANGE}", final, peak - CHANGE, pair)
        if k == depth:
            margins.at_least(f"k_test {k}: peak ≥ first + {CHANGE}", peak, first + CHANGE, pair)
            margins.at_least(f"k_test {k}: peak ≥ final + {CHANGE}", peak, final + CHANGE, pair)
        if k > depth / 2:
            if bp.get(k) is None:
                return _round(summary), None, f"no BP accuracy for k_test = {k} (bp_accuracy_ktest)"
            summary[f"k{k}"]["bp"] = bp[k]
            noise = None if not n else math.hypot(error(final, n), error(bp[k], sizes.get(k) or n))
            margins.at_most(f"k_test {k}: |final − BP|", abs(final - bp[k]), BP_TOLERANCE, noise)
    return {**_round(summary), "margins": margins.entries}, _tri(margins.outcome()), ""


@_figure("6", "accuracy_vs_samples/e1_layers.json", "layers_sweep",
         "(App. E.1) More encoder blocks n_L give better sample efficiency on the full hierarchy; n_L = 1 is poor.",
         f"accuracy averaged over P does not decrease (by more than {LAYERS_TOLERANCE}) from one n_L to the next, "
         f"and is at least {CHANGE} lower at n_L = 1 than at n_L = ℓ")
def _check_layers(data: dict, out: Path) -> tuple:
    """Fig. 6 (App. E.1). Rule: with one curve per n_L (k_train = k_test = 0), the test accuracy averaged over the
    P of the sweep is non-decreasing in n_L, up to :data:`LAYERS_TOLERANCE` between neighbours, and n_L = 1 is worse
    than n_L = ℓ by at least :data:`CHANGE` (the least and the most sample-efficient: "only n_L = 1 appears to lead
    to poor sample efficiency"). A sweep without n_L = 1 or n_L = ℓ compares its smallest and largest n_L and the
    note says so."""
    curves = sorted(data["panels"][0]["curves"], key=lambda c: c["num_layers"])
    if len(curves) < 2:
        return {}, None, "fewer than two n_L in the sweep"
    means = {f"n_L={c['num_layers']}": float(np.mean(c["accuracy"])) for c in curves}
    values = list(means.values())
    passed = all(b >= a - LAYERS_TOLERANCE for a, b in zip(values, values[1:])) and values[0] <= values[-1] - CHANGE
    fewest, most, depth = curves[0]["num_layers"], curves[-1]["num_layers"], data.get("depth")
    note = "" if (fewest, most) == (1, depth) else f"n_L = {fewest} compared with n_L = {most} (the sweep's extremes)"
    return _round({"mean_accuracy_over_P": means}), passed, note


@_figure("7", "accuracy_vs_samples/e2_grammar_seeds.json", "seed_sweep",
         "(App. E.2) Fig. 2a holds on other grammars: every k_train reaches BP_k_train's accuracy on k_test = 0.",
         f"on every grammar, every k_train's k_test = 0 accuracy at the largest P is within {BP_TOLERANCE} of "
         "BP_k_train's")
def _check_grammars(data: dict, out: Path) -> tuple:
    """Fig. 7 (App. E.2). Rule: the rule of Fig. 2a on the panel of every other grammar seed."""
    measured, passed, margins = {}, True, Margins()
    for panel in data["panels"]:
        rows, off = _matches_bp(panel, margins)
        measured[f"grammar seed {panel['grammar_seed']}"] = {"largest_P": rows, "off_bp": off}
        passed = passed and not off
    return {**_round(measured), "margins": margins.entries}, passed, ""


@_figure("8", "accuracy_vs_samples/fig2a_e3.json", "root_sweep",
         "(App. E.3) Tested in sample (k_test = k_train), root classifiers reach the optimal BP_k_train accuracy "
         "with enough data.",
         f"for every k_train, the in-sample accuracy at the largest P is within {BP_TOLERANCE} of BP_k_train's")
def _check_in_sample(data: dict, out: Path) -> tuple:
    """Fig. 8 (App. E.3). Rule: the rule of Fig. 2a on the panel tested in sample (k_test = k_train, BP optimal)."""
    margins = Margins()
    rows, off = _matches_bp(_panel(data, "train"), margins)
    return {**_round({"largest_P": rows, "off_bp": off}), "margins": margins.entries}, not off, ""


@_figure("9", "accuracy_vs_samples/fig9_kl.json", "root_sweep",
         "(App. E.3) The root classifiers' KL to the matched BP_k_train falls as P grows, on in-sample and on "
         "entirely out-of-sample (uniform) inputs.",
         "for every k_train, the KL at the largest P is below the one at the smallest P, in sample and on uniform "
         "inputs")
def _check_kl_vs_samples(data: dict, out: Path) -> tuple:
    """Fig. 9 (App. E.3). Rule: for every k_train, KL(BP_k_train ‖ model) at the largest P < at the smallest P, both
    on in-sample inputs and on uniform random inputs (Sec. 3.2: the match holds "on both in-sample and entirely
    out-of-sample inputs")."""
    measured, passed = {}, True
    for k, curve in sorted(data["curves"]["in_sample"].items(), key=lambda item: int(item[0])):
        uniform = data["curves"]["uniform"][k]["kl"]
        measured[f"k_train={k}"] = {"P": [curve["sizes"][0], curve["sizes"][-1]],
                                    "in_sample": [curve["kl"][0], curve["kl"][-1]],
                                    "uniform": [uniform[0], uniform[-1]]}
        for kl in (curve["kl"], uniform):
            passed = passed and len(kl) > 1 and None not in (kl[0], kl[-1]) and kl[-1] < kl[0]
    return _round(measured), passed, ""


# ---------------------------------------------------------------- Fig. 3, 10: MLM staircase and probes


def _reach_steps(data: dict, levels: list) -> dict:
    """k_test -> the first evaluation step at which its accuracy is at least BP − :data:`REACHED` and has risen by
    at least :data:`CHANGE` from its first evaluation (None: never), for every k_test of ``levels``."""
    steps = [int(s) for s in data["steps"]]
    bp, curves = _by_level(data["bp_accuracy_ktest"]), _levels(data["accuracy_ktest"])
    reach = {}
    for k in levels:
        values = curves[k]
        finite = values[np.isfinite(values)]
        start = finite[0] if finite.size else np.nan
        hits = [step for step, value in zip(steps, values)
                if np.isfinite(value) and value >= bp[k] - REACHED and value >= start + CHANGE]
        reach[k] = hits[0] if hits else None
    return reach


def _unordered_pairs(data: dict, levels: list) -> tuple:
    """(pairs, note): the pairs of k_test in ``levels`` whose BP accuracies cannot be told apart — they differ by
    less than two standard errors of their difference, √(p₁(1 − p₁)/n₁ + p₂(1 − p₂)/n₂) on the n sequences behind
    each (``bp_reference_size_ktest``, else ``num_test``) — as ``{"k1, k0": why}``; the note says when the file
    records no sizes (then no pair is exempt)."""
    bp = _by_level(data["bp_accuracy_ktest"])
    sizes = _by_level(data.get("bp_reference_size_ktest"))
    sizes = {k: sizes.get(k) or data.get("num_test") for k in levels}
    if not all(sizes.values()):
        return {}, "the file records no test set sizes (bp_reference_size_ktest, num_test): no pair exempted"
    pairs, ordered = {}, sorted(levels, reverse=True)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            error = math.hypot(_standard_error(bp[a], sizes[a]), _standard_error(bp[b], sizes[b]))
            if abs(bp[a] - bp[b]) < 2 * error:
                pairs[f"k{a}, k{b}"] = (f"BP {bp[a]:.3f} and {bp[b]:.3f}: difference {abs(bp[a] - bp[b]):.3f} < 2 "
                                        f"standard errors {2 * error:.3f} on {sizes[a]} and {sizes[b]} sequences")
    return pairs, ""


@_figure("3a", "dynamics/mlm.json", "dynamics",
         "The MLM's test accuracies climb a staircase: the most filtered k_test reaches BP first, the full "
         "hierarchy (k_test = 0) last.",
         f"every k_test whose BP accuracy exceeds chance (the most frequent symbol) by > {REACHED} reaches BP − "
         f"{REACHED}, having risen ≥ {CHANGE} from its start; the reach steps come no earlier for smaller k_test "
         "(except between k_test whose BP accuracies differ by < 2 standard errors), the most filtered strictly "
         "before the least")
def _check_staircase(data: dict, out: Path) -> tuple:
    """Fig. 3a. Rule, on the k_test whose BP_k_train accuracy exceeds the most-frequent-symbol accuracy of the same
    data by more than :data:`REACHED` (``chance_accuracy_ktest``; a k_test whose BP is near chance is "reached" by a
    model that has learned nothing — k_test = ℓ on the paper's grammar): each reaches BP − :data:`REACHED` in the
    run, counted from the first evaluation at which its accuracy is there and has risen by at least :data:`CHANGE`
    from its first evaluation (:func:`_reach_steps`); the reach steps are non-decreasing from the most filtered
    k_test down to k_test = 0 (ties allowed: evaluations are log-spaced), except between two k_test whose BP
    accuracies differ by less than two standard errors of their difference (:func:`_unordered_pairs`: they have no
    order to show, e.g. BP_0's 0.718 on k_test = 0 and 0.708 on k_test = 1 on 1000 sequences each); and the most
    filtered is reached strictly before the least (a staircase, not one jump), which needs those two told apart. A
    file without chance accuracies (written before them) takes every k_test as reachable; the note says so."""
    bp = _by_level(data["bp_accuracy_ktest"])
    levels = sorted(_levels(data["accuracy_ktest"]), reverse=True)  # the most filtered first
    if any(bp.get(k) is None for k in levels):
        raise ValueError(f"no BP accuracy for k_test = {[k for k in levels if bp.get(k) is None]}")
    chance = _by_level(data.get("chance_accuracy_ktest"))
    notes = [] if chance else ["the file records no most-frequent-symbol accuracy (written before it): every "
                               "k_test taken as reachable"]
    unreachable = {f"k{k}": f"BP {bp[k]:.3f} ≤ chance {chance[k]:.3f} + {REACHED}" for k in levels
                   if k in chance and bp[k] <= chance[k] + REACHED}
    levels = [k for k in levels if f"k{k}" not in unreachable]
    reach = _reach_steps(data, levels)
    pairs, note = _unordered_pairs(data, levels)
    notes += [note] if note else []
    measured = {"step_reaching_bp": {f"k{k}": step for k, step in reach.items()}, "not_reachable": unreachable,
                "unordered_pairs": pairs}
    never = [k for k in levels if reach[k] is None]
    if never:
        return measured, False, "; ".join([f"k_test {never} never reach BP − {REACHED}", *notes])
    if len(levels) < 2 or f"k{levels[0]}, k{levels[-1]}" in pairs:
        return measured, False, "; ".join(["fewer than two reachable k_test whose BP accuracies can be told apart: "
                                           "no staircase to show", *notes])
    out_of_order = [f"k_test {a} at step {reach[a]} after k_test {b} at step {reach[b]}"
                    for i, a in enumerate(levels) for b in levels[i + 1:]
                    if reach[a] > reach[b] and f"k{a}, k{b}" not in pairs]
    measured["out_of_order"] = out_of_order
    return measured, not out_of_order and reach[levels[0]] < reach[levels[-1]], "; ".join(notes)


def _probe_error(data: dict, value: float) -> float | None:
    """The standard error of a probe accuracy on the probe's ``num_test`` held-out sequences (None: not recorded)."""
    n = data.get("num_test")
    return _standard_error(min(max(float(value), 0.0), 1.0), int(n)) if n else None


def _probe_violations(data: dict, *, margin: bool = True, margins: "Margins | None" = None) -> list:
    """Where the probes of one probe JSON break the rule of Fig. 3b beyond noise (empty: none); ``margin=False``:
    its sequential half only (the layers below an ancestor's height read it worse than a deeper layer). Each
    comparison goes into ``margins`` when given (noise: the accuracies' standard errors on ``num_test``)."""
    depth, layers, levels = data["depth"], data["layers"], data["levels"]
    accuracy, chance = np.asarray(data["accuracy"], dtype=float), np.asarray(data["chance"], dtype=float)  # (P, V)
    margins = margins if margins is not None else Margins()
    violations = []
    for row, layer in enumerate(layers):
        for column, level in enumerate(levels):
            value = accuracy[row, column]
            if depth - level <= layer:  # within the layer's reach
                if margin and margins.at_least(f"layer {layer}, level {level} ≥ chance + {PROBE_MARGIN}", value,
                                               chance[column] + PROBE_MARGIN, _probe_error(data, value)) is False:
                    violations.append(f"layer {layer}, level {level}: {value:.3f} < chance {chance[column]:.3f} + "
                                      f"{PROBE_MARGIN}")
            elif layer < max(layers):  # above its reach: a deeper layer must know that ancestor better
                deeper = max(accuracy[r, column] for r, other in enumerate(layers) if other > layer)
                error = _probe_error(data, value)
                if margins.at_most(f"layer {layer}, level {level} ≤ deeper − {CHANGE}", value, deeper - CHANGE,
                                   None if error is None else math.sqrt(2) * error) is False:
                    violations.append(f"layer {layer}, level {level}: {value:.3f} not below the deeper layers' "
                                      f"{deeper:.3f} − {CHANGE}")
    return violations


def _probe_measured(data: dict) -> dict:
    return _round({"accuracy_by_layer": {f"layer {layer}": row for layer, row in zip(data["layers"], data["accuracy"])},
                   "levels": data["levels"], "chance": data["chance"]}, 3)


@_figure("3b", "probe/probe.json", "probe",
         "Probes of the MLM's hidden states recover the ancestors up to the probed layer's level and get worse "
         "above it: the layers climb the tree.",
         f"layer j: accuracy ≥ chance + {PROBE_MARGIN} on every level of height ℓ − m ≤ j, and on every higher level "
         f"at least {CHANGE} below some deeper layer")
def _check_probes(data: dict, out: Path) -> tuple:
    """Fig. 3b. Rule, on the held-out accuracy of every (layer j, ancestor level m) probe (layer 0 = the embedding):
    within the layer's reach — height ℓ − m ≤ j — the accuracy is at least the most-frequent-symbol chance +
    :data:`PROBE_MARGIN`; above it, the accuracy is at least :data:`CHANGE` below that of some deeper layer (the
    ancestor becomes readable only later; the last probed layer has no deeper one and is not tested there)."""
    margins = Margins()
    violations = _probe_violations(data, margins=margins)
    return ({**_probe_measured(data), "violations": violations, "margins": margins.entries},
            _tri(margins.outcome()), "")


@_figure("10", "dynamics/mlm.json", "dynamics",
         "(App. E.4) The trained MLM's predictions agree with BP's in argmax and in ranking (Spearman) as well.",
         f"at the last evaluation, argmax agreement with BP_k_train ≥ {MATCH} and mean Spearman correlation ≥ "
         f"{SPEARMAN}")
def _check_match(data: dict, out: Path) -> tuple:
    """Fig. 10 (App. E.4). Rule: at the last evaluation of the MLM run, the argmax agreement of the model with
    BP_{k_train} on in-sample inputs is at least :data:`MATCH` and the mean Spearman correlation of the two
    q-vectors at least :data:`SPEARMAN`."""
    k = f"k{_k_train(out)}"
    if not data.get("match_bp") or not data.get("spearman_bp"):
        return {}, None, "the run logged no argmax agreement or Spearman correlation"
    match, spearman = _last(_series(data["match_bp"][k])), _last(_series(data["spearman_bp"][k]))
    measured = _round({"argmax_match": match, "spearman": spearman})
    if match is None or spearman is None:
        return measured, False, "no finite argmax agreement or Spearman correlation at the last evaluation"
    n = data.get("num_in_sample")
    margins = Margins()
    margins.at_least("argmax agreement", match, MATCH, _standard_error(min(match, 1.0), n) if n else None)
    margins.at_least("Spearman correlation", spearman, SPEARMAN, None)
    return {**measured, "margins": margins.entries}, _tri(margins.outcome()), ""


# ---------------------------------------------------------------- Fig. 4, 11: attention of filtered models


def _blocks(data: dict, *, structureless_top: bool) -> tuple:
    """The rule of Fig. 4 on the models of an attention JSON: (measured, passed, note)."""
    models = data["models"]
    depth = models[0]["depth"]
    filtered = [m for m in models if 1 <= m["filter_level"] < depth]
    top = [m for m in models if m["filter_level"] == depth] if structureless_top else []
    if not filtered and not top:
        return {}, None, "no model trained on filtered data (1 ≤ k_train) in the grid at this preset"
    measured, passed = {}, True
    for model in filtered:
        k = model["filter_level"]
        masses = _block_mass(_layer_maps(model), depth, k)  # (layers,) NaN: a layer that attends only to itself
        mass = float(np.nanmax(masses)) if np.isfinite(masses).any() else None
        needed = _block_needed(depth, k)
        measured[f"k_train={k}"] = {"block": 2 ** (depth - k), "in_block_attention": mass, "needed": needed}
        passed = passed and mass is not None and mass >= needed
    if top:
        distances = {m["filter_level"]: _distance_to_uniform(_layer_maps(m)) for m in models}
        measured["distance_to_uniform"] = {f"k_train={k}": d for k, d in distances.items()}
        passed = passed and distances[depth] <= min(distances.values())
    return _round(measured), passed, ""


@_figure("4", "attention/mlm/attention.json", "attention",
         "MLMs trained on data filtered at k attend within blocks of about 2^(ℓ−k) leaves; the fully factorized "
         "model (k = ℓ) is structureless.",
         "every 1 ≤ k_train < ℓ: in some layer, the share of the attention to other leaves (off the diagonal) inside "
         "the query's block of 2^(ℓ−k) leaves is at least halfway from uniform's, (2^(ℓ−k) − 1)/(2^ℓ − 1), to "
         "block-diagonal's, 1; k_train = ℓ: the model closest to uniform attention")
def _check_attention_blocks(data: dict, out: Path) -> tuple:
    """Fig. 4. Rule, on the MLMs of every k_train of the grid: for 1 ≤ k < ℓ, in at least one layer the share of the
    attention that queries pay to the other leaves (off the diagonal: a query's attention to itself, always inside
    its block, is not counted) kept inside the query's own block of 2^(ℓ−k) leaves (its level-k subtree) is at least
    halfway from uniform attention's, (2^(ℓ−k) − 1) / (2^ℓ − 1), to a block-diagonal map's, 1 (:func:`_block_needed`);
    the model of k = ℓ, if in the grid, is the one closest to uniform attention (mean total-variation distance over
    layers and rows). Not run without a model of k ≥ 1 (the ``quick`` preset trains none)."""
    return _blocks(data, structureless_top=True)


@_figure("11", "attention/classifier/attention.json", "classifier_attention",
         "(App. E.5) Root classifiers trained on data filtered at k also attend within blocks of about 2^(ℓ−k) "
         "leaves.",
         "every 1 ≤ k_train < ℓ: in some layer, the share of the attention to other leaves (off the diagonal) inside "
         "the query's block of 2^(ℓ−k) leaves is at least halfway from uniform's to block-diagonal's (Fig. 4)")
def _check_classifier_blocks(data: dict, out: Path) -> tuple:
    """Fig. 11 (App. E.5). Rule: the block rule of Fig. 4 on the root classifiers of every 1 ≤ k_train < ℓ (the
    paper claims no pattern for k = ℓ there)."""
    return _blocks(data, structureless_top=False)


# ---------------------------------------------------------------- Fig. 12: further probes


@_figure("12 (left)", "probe/probe_ends.json", "probe",
         "(App. E.7 left) Probes trained on the first and last positions only lose some accuracy but still show "
         "the layers climbing the tree.",
         f"every ancestor: each layer below its height, the embedding (layer 0) included, reads it at least "
         f"{CHANGE} below some deeper layer (so its best layer reads it at least {CHANGE} above the embedding)")
def _check_probes_ends(data: dict, out: Path) -> tuple:
    """Fig. 12, left (App. E.7). Rule, on the probes trained on the first and last positions and tested on all of
    them: the sequential half of Fig. 3b's rule — every layer j below the height of an ancestor level m (ℓ − m > j)
    reads it at least :data:`CHANGE` worse than some deeper layer (the last probed layer has none and is not tested
    there). The embedding (layer 0) is below every ancestor's height, so every ancestor's best layer reads it at
    least :data:`CHANGE` better than the embedding (``gain_over_embedding``); not run when layer 0 was not probed.
    Fig. 3b's absolute margin over chance is dropped: the paper says only that "some accuracy is lost, since the
    readout cannot fully disentangle the positional information from the semantic one in positions that were never
    seen at training, [but] the sequential effect is still evident"."""
    layers = list(data["layers"])
    measured = _probe_measured(data)
    if 0 not in layers:
        return measured, None, "the embedding (layer 0) was not probed: the climb from it cannot be read"
    accuracy = np.asarray(data["accuracy"], dtype=float)  # (P, V)
    gain = accuracy.max(0) - accuracy[layers.index(0)]  # (V,) best layer − embedding, per level
    margins = Margins()
    violations = _probe_violations(data, margin=False, margins=margins)
    measured["gain_over_embedding"] = _round({f"level {m}": g for m, g in zip(data["levels"], gain)}, 3)
    return {**measured, "violations": violations, "margins": margins.entries}, _tri(margins.outcome()), ""


@_figure("12 (right)", "probe/probe_filtered.json", "probe_filtered",
         "(App. E.7 right) An MLM trained on data filtered at k recovers ancestors up to level k and not the "
         "filtered levels above it.",
         f"model k: levels m ≥ k at ≥ chance + {PROBE_MARGIN}; levels 1 ≤ m < k at least {CHANGE} below the "
         "k_train = 0 model")
def _check_filtered_probes(data: dict, out: Path) -> tuple:
    """Fig. 12, right (App. E.7). Rule, on the probes of the complete encoding of the MLM of each k_train on k = 0
    data: for every model of k ≥ 1, every probed level m ≥ k is recovered (accuracy ≥ chance +
    :data:`PROBE_MARGIN`) and every filtered level 1 ≤ m < k is read at least :data:`CHANGE` worse than by the
    k_train = 0 model. Each comparison carries its noise — a probe accuracy's standard error on its ``num_test``
    sequences, and for the gap between two models the root sum of squares of both — and is a tie within it.
    Not run without both a k_train = 0 model and one of k ≥ 1."""
    models = {m["model_filter_level"]: m for m in data["models"]}
    if 0 not in models or not any(k >= 1 for k in models):
        return {}, None, "the grid lacks the k_train = 0 model or a filtered one"
    reference = dict(zip(models[0]["levels"], models[0]["accuracy"][0]))
    measured, violations, margins = {}, [], Margins()
    for k, model in sorted(models.items()):
        accuracy = dict(zip(model["levels"], model["accuracy"][0]))
        chance = dict(zip(model["levels"], model["chance"]))
        measured[f"k_train={k}"] = {f"level {m}": a for m, a in accuracy.items()}
        if k == 0:
            continue
        for m, value in accuracy.items():
            error = _probe_error(model, value)
            if m >= k and margins.at_least(f"k_train={k}, level {m} ≥ chance + {PROBE_MARGIN}", value,
                                           chance[m] + PROBE_MARGIN, error) is False:
                violations.append(f"k_train={k}, level {m}: {value:.3f} < chance {chance[m]:.3f} + {PROBE_MARGIN}")
            if 1 <= m < k:
                # two models' probes on their own test sequences: the noise of the difference of two accuracies
                reference_error = _probe_error(models[0], reference[m])
                noise = None if error is None or reference_error is None else math.hypot(error, reference_error)
                if margins.at_most(f"k_train={k}, level {m} ≤ k_train=0's − {CHANGE}", value,
                                   reference[m] - CHANGE, noise) is False:
                    violations.append(f"k_train={k}, level {m}: {value:.3f} not below k_train=0's "
                                      f"{reference[m]:.3f} − {CHANGE}")
    return ({**_round(measured, 3), "violations": violations, "margins": margins.entries},
            _tri(margins.outcome()), "")


# ---------------------------------------------------------------- all of them


def check_all(out, preset: Preset | None = None) -> list:
    """The :class:`Finding` of every figure of :data:`CHECKS` in the reproduction folder ``out``, in figure order
    (``preset``: see :meth:`FigureCheck.__call__`)."""
    return [check(out, preset) for check in CHECKS]


def write_findings(out, preset: Preset | None = None) -> tuple:
    """Check every figure (:func:`check_all`) and write ``OUT/findings.json``; returns (findings, path)."""
    findings = check_all(out, preset)
    counts = {verdict: sum(f.verdict == verdict for f in findings) for verdict in VERDICTS}
    path = write_json(Path(out) / FINDINGS_FILE, {"preset": None if preset is None else preset.name,
                                                  "verdicts": counts,
                                                  "findings": [f.to_dict() for f in findings]})
    return findings, path


def describe(value, top: bool = True) -> str:
    """Measured numbers in one line for a table cell: floats to 3 digits, lists in brackets, ``key: value`` pairs
    separated by ``;`` at the top and in braces below it."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict):
        if not value:
            return "–" if top else "{}"
        pairs = [f"{key}: {describe(item, top=False)}" for key, item in value.items()]
        return "; ".join(pairs) if top else "{" + ", ".join(pairs) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(describe(item, top=False) for item in value) + "]"
    return str(value)


__all__ = ["CHECKS", "FINDINGS_FILE", "Finding", "FigureCheck", "NOT_REPRODUCED", "NOT_RUN", "REPRODUCED",
           "VERDICTS", "check_all", "describe", "write_findings"]
