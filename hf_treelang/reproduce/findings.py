"""What reproduced: one check per paper figure that ``reproduce`` draws, run on the numbers its steps wrote.

Each check reads the JSON that a step writes under the reproduction folder OUT and returns a :class:`Finding`: the
paper's claim in one line, the rule that tests it on this run, the measured numbers and a verdict, one of
:data:`VERDICTS`: ``reproduced``, ``not reproduced``, ``inconclusive``, or ``not run at this preset`` (the step's
file is absent: the preset has no such step, or the step has not finished; the note says which). Each rule's
docstring quotes the sentence of the paper it tests (``Paper (section): "…"``, the paper's own words) and makes it
precise with the thresholds named below; a check never trains or computes anything heavier than a few sums over the
JSON.

**Noise.** Every comparison a rule makes is recorded with its margin (how far the measured number is on the passing
side of its threshold; negative: on the failing side) and the noise of that margin — the standard error of a
fraction on the inputs behind it, the sampling error of a mean KL, the spread over seeds where there are seeds — in
``measured["margins"]`` (:class:`Margins`). A comparison is decided only when the measured number and its threshold
are told apart (:func:`hf_treelang.core.noise.told_apart`: the package's one rule, the margin beyond
:data:`~hf_treelang.core.noise.Z` standard errors); otherwise it is a tie, treated the same way whichever side of the
threshold the number fell. Each rule states its null hypothesis: ``reproduced`` rejects it beyond the noise of every
number the rule reads, ``not reproduced`` rejects the claim beyond that noise, and a verdict that hangs on a tie is
``inconclusive``: rounding, the machine or one seed cannot flip a verdict between reproduced and not reproduced. A
comparison whose noise the file does not record (written before it), or whose measured number is missing or NaN, is
a tie too, and the note names the comparison and why: no verdict is decided on an unknown noise. A file that records
a noise which is not one (a standard error that is NaN, infinite or negative, an input count that is not an integer
≥ 1; :func:`_bad_noise`) or that is not the JSON object its step writes (a list, a missing key, a field of another
type) is ``inconclusive`` with a one-line note naming the file and the field or the shape expected. A run's bytes
depend on the machine and the thread count, so the same command reproduces a run
to its noise, not to the bit, across machines: the verdicts are built to be stable under that.
:func:`write_findings` writes every finding to ``OUT/findings.json``; ``OUT/report.md`` shows them as a table
(:mod:`hf_treelang.reproduce.report`).

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

The noise each rule reads beyond its numbers: a test-set size ``num_test`` (the accuracy-vs-P panels: on the curve,
the panel or the file; the probes; the dynamics), the in-sample size ``num_in_sample`` and the KLs' standard errors
``kl_bp_se`` / ``kl_bp_gap_se`` (the dynamics), ``kl_standard_error`` and ``spearman_standard_error`` (calibration),
``num_samples`` (the attention maps), the spread over seeds ``gap_vs_scratch`` or ``num_test`` (sample complexity)
and ``kl_standard_error`` per point beside ``kl`` (Fig. 9's curves).

Glossary: ℓ the depth, k_train the filter level of the main runs (``OUT/preset.json``), ancestor level m (0 = the
root, ℓ = the leaves), the height of level m is ℓ − m; the tree distance of leaves i and j is the height of their
deepest common ancestor, ``(i ^ j).bit_length()`` (0 for i itself, 1 for its sibling, ℓ across the root).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from dataclasses import asdict, dataclass, field
from numbers import Real
from pathlib import Path
from typing import Callable

import numpy as np

from hf_treelang.analysis.io import write_json
from hf_treelang.core.noise import (
    Z,
    bounded_mean_error,
    difference_error,
    family_z,
    fraction_error,
    invalid_error,
    mean_error,
    told_apart,
)
from hf_treelang.jsonio import read_json, read_json_object

from .presets import Preset, check_figures, step_names
from .timing import timing_summary

FINDINGS_FILE = "findings.json"
REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_RUN = VERDICTS = ("reproduced", "not reproduced", "inconclusive",
                                                                 "not run at this preset")

# Thresholds of the rules (accuracies are fractions in [0, 1], KL in nats).
CALIBRATION_KL = 0.05  # Fig. 1b: in-sample mean D_KL(BP ‖ model) at most this ...
CALIBRATION_MATCH = 0.9  # ... and argmax agreement at least this;
UNIFORM_SPEARMAN = 0.5  # out of sample (uniform inputs): mean Spearman correlation at least this
LOCALITY = 1.0  # Fig. 1e: layer 1 attends at least one tree level closer than uniform attention, and the span climbs
# at least one level over the layers (attention off the diagonal: a query's attention to itself is not counted)
BP_TOLERANCE = 0.03  # Fig. 2a, 2b, 7, 8: "matches BP": |accuracy − BP| at most this at the end
CHANGE = 0.02  # Fig. 2b, 3a, 3b, 6, 12: a rise, a fall or a "lower" accuracy counts from this much on
REACHED = 0.05  # Fig. 3a: a k_test accuracy has reached BP once it is at least BP − this; only a k_test whose BP
# accuracy exceeds the most-frequent-symbol accuracy by more than this can be reached
PROBE_MARGIN = 0.1  # Fig. 3b: a probe reads an ancestor "high" with accuracy at least chance + this
LAYERS_TOLERANCE = 0.01  # Fig. 6: mean accuracy over P may fall by this much from n_L to n_L + 1
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
        note: why it was not run, what the rule could not use, or which comparisons were ties; ``""`` otherwise.
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


def _json_kind(value) -> str:
    return {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class FigureCheck:
    """One registered check: its figure, the file it reads (relative to OUT), the step that writes it, the claim and
    the rule in one line each, the top-level keys the rule needs in that file, and
    ``function(data, out) -> (measured, passed, note)`` on the file's JSON."""

    figure: str
    path: str
    step: str
    claim: str
    check: str
    function: Callable
    keys: tuple = ()

    def expected(self) -> str:
        """The shape of the file, in words: ``the JSON object step dynamics writes (keys 'steps', 'kl_bp')``."""
        keys = f" (keys {', '.join(repr(key) for key in self.keys)})" if self.keys else ""
        return f"the JSON object step {self.step} writes{keys}"

    def __call__(self, out, preset: Preset | None = None) -> Finding:
        """The :class:`Finding` of this figure in the reproduction folder ``out``; with the ``preset`` of the
        reproduction, the note on an absent file says whether the preset has no such step or it has not finished."""
        out = Path(out)
        path = out / self.path
        data = read_json(path)
        if data is None and not path.is_file():
            why = f"step {self.step} wrote no {self.path}"
            if preset is not None:
                steps = step_names(preset.attention_filter_levels, preset.figure_steps())
                why = (f"preset {preset.name!r} has no step {self.step}" if self.step not in steps
                       else f"step {self.step} has not finished: no {self.path}")
            return Finding(self.figure, self.claim, self.check, note=why)
        if not isinstance(data, dict):
            got = "no valid JSON" if data is None else _json_kind(data)
            return self._unreadable(f"{self.path} holds {got}; expected {self.expected()}")
        missing = [key for key in self.keys if key not in data]
        if missing:
            return self._unreadable(f"{self.path} lacks {', '.join(repr(key) for key in missing)}; expected "
                                    f"{self.expected()}")
        bad = _bad_noise(data)
        if bad:
            return self._unreadable(f"{self.path}: {bad} (a standard error must be a finite number >= 0, an input "
                                    "count an integer >= 1): no verdict rests on it")
        try:
            measured, passed, note = self.function(data, out)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError) as error:
            reason = f"{type(error).__name__}: {error}".replace("\n", " ")
            return self._unreadable(f"{self.path} does not have the shape of {self.expected()} ({reason})")
        if passed is None:  # the rule could not be applied to this file (the note says why)
            return Finding(self.figure, self.claim, self.check, measured=measured, note=note)
        if passed == INCONCLUSIVE:
            return Finding(self.figure, self.claim, self.check, measured=measured, verdict=INCONCLUSIVE,
                           note="; ".join(part for part in (note, _ties(measured.get("margins") or [])) if part))
        return Finding(self.figure, self.claim, self.check, measured=measured,
                       verdict=REPRODUCED if passed else NOT_REPRODUCED, note=note)

    def _unreadable(self, why: str) -> Finding:
        return Finding(self.figure, self.claim, self.check, verdict=INCONCLUSIVE, note=why)


_NOISE_KEY = re.compile(r"(^|_)se($|_)|standard_error|^spread$")  # the fields that hold standard errors
_COUNT_KEYS = ("num_test", "num_in_sample", "num_samples", "num_sequences", "num_seeds", "bp_reference_size_ktest")


def _bad_noise(value, where: str = "", kind: str | None = None) -> str | None:
    """The first field of a step's JSON that records a noise which is not one — a standard error (``*_se``,
    ``*standard_error*``, ``spread``) that is NaN, infinite or negative, or an input count (``num_test``, …) that is
    not an integer ≥ 1 — as ``"kl_bp_se['k1'][3] = nan is not finite"``; None when there is none (a missing one,
    null, is not recorded, not wrong)."""
    if isinstance(value, dict):
        for key, item in value.items():
            inner = kind or ("error" if _NOISE_KEY.search(str(key)) else "count" if key in _COUNT_KEYS else None)
            bad = _bad_noise(item, f"{where}[{key!r}]" if where else str(key), inner)
            if bad:
                return bad
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            bad = _bad_noise(item, f"{where}[{index}]", kind)
            if bad:
                return bad
        return None
    if value is None or kind is None:
        return None
    if kind == "error":
        why = invalid_error(value)
        return f"{where} = {why}" if why else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"{where} = {value!r} is not an input count (an integer >= 1)"
    return None


def _ties(entries: list) -> str:
    """The note of an inconclusive verdict: the comparisons within noise, and those without a usable noise or
    number (with why)."""
    within = [entry["test"] for entry in entries if entry.get("decided") == "tie" and not entry.get("unusable")]
    unusable = [f"{entry['test']} ({entry['unusable']})" for entry in entries if entry.get("unusable")]
    parts = ([f"within noise: {', '.join(within)}"] if within else []) + (
        [f"no usable noise or number: {', '.join(unusable)}"] if unusable else [])
    return "; ".join(parts) if parts else "a comparison within noise decides it"


CHECKS: list = []  # every FigureCheck, in the paper's figure order (1b, 1c, ..., 12 (right))


def _figure_order(check: FigureCheck) -> tuple:
    """``"1b"`` -> (1, "b"), ``"12 (left)"`` -> (12, " (left)"): the paper's order of figures and panels."""
    digits = len(check.figure) - len(check.figure.lstrip("0123456789"))
    return int(check.figure[:digits]), check.figure[digits:]


def _figure(figure: str, path: str, step: str, claim: str, check: str, keys: tuple = ()):
    """Register the decorated rule as the check of ``figure`` (see :class:`FigureCheck`): a figure of
    :data:`~hf_treelang.reproduce.presets.PAPER_FIGURES`, with its panel when it has several (``"12 (left)"``);
    ``keys``: the top-level keys the rule needs in its file."""
    check_figures([figure.split(" ")[0]])

    def register(function: Callable) -> Callable:
        CHECKS.append(FigureCheck(figure, path, step, claim, check, function, tuple(keys)))
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


def _round(value, digits: int = 4):
    if isinstance(value, dict):
        return {k: _round(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v, digits) for v in value]
    if isinstance(value, (float, np.floating)):
        return round(float(value), digits) if math.isfinite(value) else None
    return value


def _number(value) -> float | None:
    """``value`` as a float when it is a finite real number, else None."""
    if isinstance(value, bool) or not isinstance(value, (Real, np.floating)) or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class NoNoise:
    """The noise of a comparison that cannot be used, and why (``"no test-set size recorded"``)."""

    why: str


def _count(value) -> int | NoNoise:
    """An input count read from a file (``num_test``, ``num_in_sample``): an integer ≥ 1, else why not."""
    if value is None:
        return NoNoise("no input count recorded")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return NoNoise(f"input count {value!r} is not an integer >= 1")
    return value


def _fraction_noise(value, count) -> float | NoNoise:
    """The standard error of a fraction ``value`` measured on ``count`` inputs (:func:`fraction_error`), else why it
    has none: no count recorded, a count that is not an integer ≥ 1, a value outside [0, 1]."""
    count = _count(count)
    if isinstance(count, NoNoise):
        return count
    number = _number(value)
    if number is None or not 0.0 <= number <= 1.0:
        return NoNoise(f"{value!r} is not a fraction in [0, 1]")
    return fraction_error(number, count)


def _error(value, what: str) -> float | NoNoise:
    """A standard error read from a file, else why it is not one (``what``: its name in the note)."""
    if value is None:
        return NoNoise(f"no {what} recorded")
    why = invalid_error(value)
    return NoNoise(f"{what} {why}") if why else float(value)


def _difference_noise(first, second, *, same_inputs: bool) -> float | NoNoise:
    """The standard error of a − b from their own errors (:func:`hf_treelang.core.noise.difference_error`: the sum
    on the same inputs, the root sum of squares on independent ones); the first unusable one passes through."""
    for error in (first, second):
        if isinstance(error, NoNoise):
            return error
    return difference_error(first, second, same_inputs=same_inputs)


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


def _compare(margin: float, noise: float, z: float = Z) -> bool | None:
    """A margin against its noise: True (told apart from 0 on the passing side), False (on the failing side) or
    None (not told apart: a tie)."""
    if not told_apart(margin, noise, z):
        return None
    return margin > 0


class Margins:
    """The comparisons of one rule, each with its margin and noise (see the module docstring).

    ``at_least(name, value, threshold, noise)`` records ``value ≥ threshold`` and returns True (decided: value and
    threshold told apart, :func:`~hf_treelang.core.noise.told_apart`, on the passing side), False (decided against)
    or None (a tie). ``noise`` is the standard error of value − threshold; a noise that is None (not recorded), a
    :class:`NoNoise` or not a standard error (NaN, infinite, negative), and a value or threshold that is not a finite
    number, make the comparison a tie whose entry says why (``unusable``). ``z``: the standard errors to exceed
    (:func:`~hf_treelang.core.noise.family_z` for a claim tried at several evaluations). :meth:`outcome` is the
    three-valued AND of the recorded comparisons.
    """

    def __init__(self):
        self.entries: list = []

    def at_least(self, name: str, value, threshold, noise, *, z: float = Z) -> bool | None:
        return self._add(name, value, threshold, noise, z, +1)

    def at_most(self, name: str, value, threshold, noise, *, z: float = Z) -> bool | None:
        return self._add(name, value, threshold, noise, z, -1)

    def _add(self, name: str, value, threshold, noise, z: float, sign: int) -> bool | None:
        entry = {"test": name, "value": _round(_number(value)), "threshold": _round(_number(threshold)),
                 "margin": None, "noise": None, "z": _round(z, 3)}
        unusable = None
        if _number(value) is None:
            unusable = f"value {value!r} is not a finite number"
        elif _number(threshold) is None:
            unusable = f"threshold {threshold!r} is not a finite number"
        else:
            entry["margin"] = _round(sign * (float(value) - float(threshold)))
        if noise is None:
            noise = NoNoise("noise not recorded")
        elif not isinstance(noise, NoNoise) and invalid_error(noise):
            noise = NoNoise(f"noise {invalid_error(noise)}")
        if isinstance(noise, NoNoise):
            unusable = unusable or noise.why
        else:
            entry["noise"] = _round(float(noise))
        if unusable:
            decided = None
            entry["unusable"] = unusable
        else:
            decided = _compare(sign * (float(value) - float(threshold)), float(noise), z)
        entry["decided"] = {True: "pass", False: "fail", None: "tie"}[decided]
        self.entries.append(entry)
        return decided

    def outcome(self) -> bool | None:
        return all_of({"pass": True, "fail": False, "tie": None}[entry["decided"]] for entry in self.entries)


def _tri(outcome: bool | None):
    """A three-valued outcome as a check's ``passed``: True, False, or :data:`INCONCLUSIVE` for a tie."""
    return INCONCLUSIVE if outcome is None else outcome


_OF_MARGINS = object()


def _result(measured: dict, margins: Margins, note: str = "", outcome=_OF_MARGINS) -> tuple:
    """A check's (measured, passed, note) with the margins recorded; ``outcome`` (three-valued) defaults to the
    margins' own."""
    outcome = margins.outcome() if outcome is _OF_MARGINS else outcome
    return {**measured, "margins": margins.entries}, _tri(outcome), note


def _tree_distance(depth: int) -> np.ndarray:
    """(L, L) height of the deepest common ancestor of leaves i and j: ``(i ^ j).bit_length()``."""
    index = np.arange(2**depth)
    return np.array([[int(i ^ j).bit_length() for j in index] for i in index])


def _layer_maps(model: dict) -> np.ndarray:
    """(layers, L, L) attention of one model of an attention JSON, heads averaged."""
    maps = np.asarray(model["maps"], dtype=float)  # (layers, heads, L, L)
    if maps.ndim != 4 or maps.shape[-1] != maps.shape[-2]:
        raise ValueError(f"maps must be (layers, heads, L, L), got shape {maps.shape}")
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


def _share_noise(model: dict, self_attention: float, width: float) -> float | NoNoise:
    """The largest standard error of a layer's off-diagonal share (:func:`_off_diagonal_share`) of values spanning
    ``width`` (1 for a share, ℓ − 1 for a tree distance), from the ``num_samples`` = N input sequences the maps
    average: width / √(N (1 − s)), s the layer's attention to itself. The share is a ratio of two means over the
    sequences, each sequence's part of it within ``width`` of the share, so the delta method bounds its variance by
    width² L / (N · L (1 − s))."""
    count = _count(model.get("num_samples"))
    if isinstance(count, NoNoise):
        return NoNoise("no num_samples recorded for the attention maps")
    if not 1.0 - self_attention > 0:
        return NoNoise("the layer attends only to itself")
    return width / math.sqrt(count * (1.0 - self_attention))


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


def _distance_to_uniform_noise(model: dict, length: int) -> float | NoNoise:
    """The largest sampling error of :func:`_distance_to_uniform` of maps averaged over N = ``num_samples``
    sequences of ``length`` leaves: ½ √(L / N) (each row's entries have standard errors √(p(1 − p)/N), whose sum over
    a row of L entries summing to 1 is at most √(L / N))."""
    count = _count(model.get("num_samples"))
    if isinstance(count, NoNoise):
        return NoNoise("no num_samples recorded for the attention maps")
    return 0.5 * math.sqrt(length / count)


def _uniform_distance(depth: int) -> float:
    """Tree distance of uniform attention over the other leaves."""
    distance = _tree_distance(depth)
    return float(distance.sum() / (distance.size - len(distance)))


# ---------------------------------------------------------------- Fig. 1


@_figure("1b", "calibration/mlm/calibration.json", "calibration",
         "The MLM's probabilities for a masked symbol match the exact BP marginals in sample, and stay correlated "
         "with them on uniform (out-of-sample) inputs.",
         f"in sample: mean KL(BP_k_train ‖ model) ≤ {CALIBRATION_KL} and argmax agreement ≥ {CALIBRATION_MATCH}; "
         f"uniform inputs: mean Spearman correlation ≥ {UNIFORM_SPEARMAN}", keys=("sets",))
def _check_calibration(data: dict, out: Path) -> tuple:
    """Fig. 1b.

    Paper (Sec. 3.3): "we find a close match with the exact marginals obtained from BP when measured on in-sample
    inputs" and, on uniform inputs, "we still observe high correlations between the outputs, albeit with more
    dispersion".

    Rule: on fresh in-sample sequences the MLM's distribution of a masked leaf is close to BP_{k_train}'s marginal —
    mean D_KL(BP ‖ model) ≤ :data:`CALIBRATION_KL` and argmax agreement ≥ :data:`CALIBRATION_MATCH` — and on uniform
    random sequences the two distributions still rank the symbols alike: mean Spearman correlation ≥
    :data:`UNIFORM_SPEARMAN`. Null hypothesis: the mean KL is :data:`CALIBRATION_KL` or more, or the agreement or the
    correlation below its threshold. Noise: the KL's and the Spearman correlation's standard errors over the
    sequences (``kl_standard_error``, ``spearman_standard_error``; the correlation, within [−1, 1], at most
    1/√n without it) and the agreement's √(p(1 − p)/n) on the n possible in-sample sequences."""
    in_sample, uniform = data["sets"]["in_sample"], data["sets"]["uniform"]
    measured = {"in_sample_kl": in_sample["kl_mean"], "in_sample_argmax_match": in_sample["argmax_match"],
                "uniform_spearman": uniform["spearman_mean"]}
    possible = _count(in_sample.get("num_sequences"))
    if not isinstance(possible, NoNoise):
        possible = _count(possible - (in_sample.get("num_impossible") or 0))
    spearman_noise = uniform.get("spearman_standard_error")
    if spearman_noise is None:
        count = _count(uniform.get("num_sequences"))
        spearman_noise = count if isinstance(count, NoNoise) else bounded_mean_error(-1.0, 1.0, count)
    margins = Margins()
    margins.at_most("in-sample KL", in_sample["kl_mean"], CALIBRATION_KL,
                    _error(in_sample.get("kl_standard_error"), "standard error of the KL"))
    margins.at_least("in-sample argmax agreement", in_sample["argmax_match"], CALIBRATION_MATCH,
                     possible if isinstance(possible, NoNoise) else _fraction_noise(in_sample["argmax_match"],
                                                                                      possible))
    margins.at_least("uniform-input Spearman", uniform["spearman_mean"], UNIFORM_SPEARMAN, spearman_noise)
    return _result(_round(measured), margins)


def _kl_noise(data: dict, i: int, level: int, closest: int) -> float | NoNoise:
    """The standard error of KL(BP_level) − KL(BP_closest) at evaluation ``i``: the paired error the BP-KL callback
    logged (``kl_bp_gap_se``, taken against this closest BP: 0 for it), else the sum of the two KLs' own errors
    (``kl_bp_se``: the two means are over the same sequences), else why there is none."""
    if level == closest:
        return 0.0
    paired = data.get("kl_bp_gap_se") or {}
    if f"k{level}" in paired and f"k{closest}" in paired and paired[f"k{closest}"][i] == 0:
        value = paired[f"k{level}"][i]
        if value is not None:
            return _error(value, f"paired KL error of BP_{level} at step {data['steps'][i]}")
    own = data.get("kl_bp_se") or {}
    if f"k{level}" in own and f"k{closest}" in own:
        errors = [_error(own[f"k{k}"][i], f"KL error of BP_{k} at step {data['steps'][i]}") for k in (level, closest)]
        return _difference_noise(*errors, same_inputs=True)
    return NoNoise("the file records no standard errors of the KLs (kl_bp_gap_se, kl_bp_se)")


def _tie_sets(data: dict) -> list:
    """Per evaluation, the levels whose KL is not told apart from the closest BP's (the closest included; a level
    without a usable noise is not told apart), as sorted lists. The candidates are those of ``closest_bp``: the BP_k
    defined on every in-sample input (``impossible_bp``: a Random Hierarchy Model's BP_k below k_train is none)."""
    kl = _levels(data["kl_bp"])
    impossible = _levels(data.get("impossible_bp") or {})
    kl = {k: values for k, values in kl.items() if not np.nansum(impossible.get(k, 0.0)) > 0}
    sets = []
    for i, closest in enumerate(int(k) for k in data["closest_bp"]):
        candidates = [k for k in kl if np.isfinite(kl[k][i])]
        if closest not in candidates:
            sets.append(sorted(set(candidates) | {closest}))
            continue
        tied = {closest}
        for k in candidates:
            noise = _kl_noise(data, i, k, closest)
            if isinstance(noise, NoNoise) or not told_apart(kl[k][i] - kl[closest][i], noise):
                tied.add(k)
        sets.append(sorted(tied))
    return sets


def _collapse(levels: list) -> list:
    return [k for i, k in enumerate(levels) if i == 0 or levels[i - 1] != k]


def _held_path(data: dict, sets: list) -> list:
    """The closest BP_k per evaluation as a path is drawn: the level held while it is tied with the closest (in the
    evaluation's tie set), else the closest. For the record only: the verdict reads the tie sets themselves."""
    levels = []
    for i, tied in enumerate(sets):
        levels.append(levels[-1] if levels and levels[-1] in tied else int(data["closest_bp"][i]))
    return levels


def _surely_passed(sets: list) -> set:
    """The levels the path surely passes: each alone in the tie set of some evaluation (closest beyond noise)."""
    return {tied[0] for tied in sets if len(tied) == 1}


def _path_parts(sets: list, k_train: int, depth: int, decreasing: bool) -> dict:
    """The structure of the path of closest BP_k, each part three-valued on the tie sets (per evaluation, the levels
    not told apart from the closest; :func:`_tie_sets`), so that it depends on the KLs only beyond their noise.

    * starts above k_train: True when every level of the first tie set is above, False when none is;
    * passes a level between: True when a level k_train < j < ℓ is alone in some tie set (:func:`_surely_passed`),
      False when no tie set holds one;
    * ends at k_train: True when the last tie set is {k_train}, False when it lacks k_train (a tie: None);
    * (Fig. 1d) never returns: False when some tie set lies wholly above an earlier one (a return beyond noise);
    * (Fig. 1d) at least 3 levels: True when 3 levels are each alone in some tie set, False when fewer than 3
      levels appear in any.
    """
    between = set(range(k_train + 1, depth))
    first, last = set(sets[0]), set(sets[-1])
    parts = {
        "starts above k_train": True if min(first) > k_train else False if max(first) <= k_train else None,
        "passes a level between": (True if _surely_passed(sets) & between
                                   else False if not any(set(t) & between for t in sets) else None),
        "ends at k_train": True if last == {k_train} else False if k_train not in last else None,
    }
    if decreasing:
        parts["never returns to a larger k"] = not any(min(later) > max(earlier) for i, earlier in enumerate(sets)
                                                       for later in sets[i + 1:])
        alone = _surely_passed(sets)
        parts["at least 3 levels"] = (True if len(alone) >= 3
                                      else False if len({k for t in sets for k in t}) < 3 else None)
    return parts


def _agreement_noise(data: dict, level: int) -> float | NoNoise:
    """The largest standard error of match_level − match_k_train on the n in-sample inputs, √(d/n), d the fraction
    of them on which BP_level's argmax differs from BP_k_train's (``bp_argmax_disagreement``, ``num_in_sample``)."""
    count = _count(data.get("num_in_sample"))
    if isinstance(count, NoNoise):
        return NoNoise("no in-sample size recorded (num_in_sample)")
    disagreement = _by_level(data.get("bp_argmax_disagreement")).get(level)
    if disagreement is None:
        return NoNoise(f"no argmax disagreement of BP_{level} recorded (bp_argmax_disagreement)")
    value = _number(disagreement)
    if value is None or not 0.0 <= value <= 1.0:
        return NoNoise(f"argmax disagreement {disagreement!r} of BP_{level} is not a fraction in [0, 1]")
    return math.sqrt(value / count)


def _evidence(data: dict, level: int, k_train: int, start: int, margins: Margins | None = None) -> tuple:
    """(outcome, description) of the test that the model is BP_level-like from evaluation ``start`` on (see
    :func:`_check_root_alignment`); with ``margins``, its best evaluation is recorded there."""
    match = _levels(data["match_bp"])
    steps = [int(s) for s in data["steps"]]
    tested = list(range(start, len(steps)))
    z = family_z(len(tested))
    noise = _agreement_noise(data, level)
    gaps = [float(match[level][i] - match[k_train][i]) for i in tested]  # (evaluations,) NaN where not logged
    count = data.get("num_in_sample")
    undecidable = isinstance(noise, NoNoise) or noise * noise * count * count <= z * z  # m = d·n ≤ z²
    decided = [None if undecidable or not math.isfinite(gap) else _compare(gap, noise, z) for gap in gaps]
    outcome = any_of(decided)
    finite = [(gap, i) for gap, i in zip(gaps, tested) if math.isfinite(gap)]
    gap, best = max(finite) if finite else (math.nan, tested[0])
    if margins is not None:
        margins.at_least(f"BP_{level}-like from step {steps[start]}: agreement with BP_{level} − with BP_{k_train} "
                         f"at step {steps[best]}", gap, 0.0, noise, z=z)
    if isinstance(noise, NoNoise):
        return outcome, f"within noise: {noise.why}; largest agreement gap {gap:+.4f} at step {steps[best]}"
    bound = f" (decided beyond z·√(d/n) = {z:.2f} × {noise:.4f} = {z * noise:.4f})"
    verdict = {True: "BP_j-like", False: f"BP_{k_train}-like at every evaluation", None: "within noise"}[outcome]
    disagreeing = noise * noise * count * count  # m = d·n inputs on which the two argmaxes differ
    if undecidable:  # even a model siding with BP_level on all m inputs could not be decided
        verdict = (f"within noise: BP_{level}'s argmax differs from BP_{k_train}'s on {disagreeing:.0f} of {count} "
                   f"inputs ≤ z² = {z * z:.1f}, so no outcome could decide (more than "
                   f"{math.ceil(z * z * count / max(disagreeing, 1e-300))} inputs would)")
    return outcome, (f"{verdict}: largest agreement gap {gap:+.4f} with BP_{level} over BP_{k_train} at step "
                     f"{steps[best]}{bound}")


def _path_margins(data: dict, levels: list, k_train: int, margins: Margins) -> list:
    """Record the moves and the held ties of the drawn path ``levels`` (:func:`_held_path`) and its end in
    ``margins``; returns the steps at which a tie held the level."""
    kl = _levels(data["kl_bp"])
    steps, closest = [int(s) for s in data["steps"]], [int(k) for k in data["closest_bp"]]
    held = []
    for i, level in enumerate(levels):
        c = closest[i]
        if i > 0 and levels[i - 1] == level and c != level:  # a tie held the level
            held.append(steps[i])
            margins.at_least(f"step {steps[i]}: KL to the held BP_{level} − KL to BP_{c} (a tie holds the level)",
                             kl[level][i] - kl[c][i], 0.0, _kl_noise(data, i, level, c))
        elif i > 0 and levels[i - 1] != level:
            margins.at_least(f"step {steps[i]}: KL to BP_{levels[i - 1]} − KL to BP_{c} (a move)",
                             kl[levels[i - 1]][i] - kl[c][i], 0.0, _kl_noise(data, i, levels[i - 1], c))
    i, c = len(levels) - 1, closest[-1]
    if c != k_train:
        margins.at_least(f"last evaluation: KL to BP_{c} − KL to BP_{k_train}", kl[c][i] - kl[k_train][i], 0.0,
                         _kl_noise(data, i, k_train, c))
    else:
        others = [k for k in kl if k != k_train and np.isfinite(kl[k][i])]
        if others:
            nearest = min(others, key=lambda k: kl[k][i])
            margins.at_least(f"last evaluation: KL to BP_{nearest} − KL to BP_{k_train}",
                             kl[nearest][i] - kl[k_train][i], 0.0, _kl_noise(data, i, nearest, k_train))
    return held


_WORD = {True: "yes", False: "no", None: "within noise"}


def _alignment(data: dict, out: Path, *, decreasing: bool) -> tuple:
    """The rules of Fig. 1c (``decreasing=False``) and 1d: (measured, passed, note)."""
    k_train = _k_train(out)
    kl = _levels(data["kl_bp"])
    if not kl or not data["closest_bp"]:
        return {}, None, "the file has no KL curves"
    depth = max(kl)
    match = _levels(data.get("match_bp") or {})
    sets = _tie_sets(data)
    levels = _held_path(data, sets)
    # every level between that the path surely passes, from the first evaluation at which it is within noise of it
    arrivals = {}
    for i, tied in enumerate(sets):
        for j in tied:
            if k_train < j < depth and j in _surely_passed(sets):
                arrivals.setdefault(j, i)
    if arrivals and (k_train not in match or any(j not in match for j in arrivals)):
        return ({"closest_bp_sequence": _collapse(levels), "k_train": k_train}, None,
                "the run logged no argmax agreement with every BP_k it passes (match_bp)")
    margins = Margins()
    held = _path_margins(data, levels, k_train, margins)
    parts = _path_parts(sets, k_train, depth, decreasing)
    evidence = {}
    for j in sorted(arrivals, reverse=True):
        parts[f"BP_{j}-like"], evidence[f"k{j}"] = _evidence(data, j, k_train, arrivals[j], margins)
    measured = {"closest_bp_sequence": _collapse(levels), "k_train": k_train, "ties_held_at_step": held,
                "path": {name: _WORD[value] for name, value in parts.items()}, "bp_k_like_on_the_way": evidence}
    return _result(measured, margins, outcome=all_of(parts.values()))


@_figure("1c", "dynamics/root.json", "dynamics",
         "Trained on the full hierarchy, the root classifier first aligns with BP_ℓ and ends aligned with the "
         "matched BP_k_train, passing the levels between.",
         "at each evaluation, the BP_k whose KL is not told apart from the smallest: the first lie above k_train, "
         "some level between k_train and ℓ is closest beyond noise, and the last is BP_k_train alone; at each such "
         "level j the model sides with BP_j over BP_k_train on their disagreeing inputs beyond noise at some "
         "evaluation from its arrival there (a paired test)", keys=("steps", "closest_bp", "kl_bp"))
def _check_root_alignment(data: dict, out: Path) -> tuple:
    """Fig. 1c.

    Paper (Sec. 3.2): "we observe an initial stronger alignment to" BP_ℓ, then "the model predictions sequentially
    align to versions of BP that incorporate more and more of the correlation structure".

    Rule, on the tie sets of the run (:func:`_tie_sets`: at each evaluation, the levels k whose in-sample
    D_KL(BP_k ‖ model) is not told apart from the smallest — :func:`hf_treelang.core.noise.told_apart` on the paired
    error the BP-KL callback logs, ``kl_bp_gap_se``, else the sum of the two KLs' errors, ``kl_bp_se``): the path
    starts above k_train, passes a level k_train < j < ℓ (alone in some tie set: closest beyond noise) and ends at
    k_train (the last tie set is {k_train}; BP_0 for the paper's k_train = 0) (:func:`_path_parts`); and at every
    such level j the model is BP_j-like: from the first evaluation at which BP_j is within noise of the closest, at
    some evaluation its argmax agreement with BP_j exceeds that with BP_k_train by more than
    family_z(evaluations) × √(d/n) (:func:`_agreement_noise`: the two agreements differ only on the m = d·n of the
    n in-sample inputs where the two argmaxes differ, a paired comparison whose error is at most √(d/n);
    :func:`hf_treelang.core.noise.family_z` keeps a claim tried at every evaluation at the error rate of one
    comparison). A model that knows BP_0 from the start and only grows confident passes through smaller KL to BP_j
    on the way, but never BP_j's argmax.

    Null hypotheses: the model is no more BP_j-like than BP_k_train-like at any evaluation (rejected by one decided
    evaluation; a level whose argmaxes differ on m ≤ z² inputs cannot reject it and stays a tie — no level is
    exempt, and the note says how many inputs would decide); and two KLs within noise are the same distance. The
    verdict reads the tie sets only, never which of two tied KLs came out smaller: two records whose KLs differ
    within noise get the same verdict, and a last evaluation that does not tell BP_k_train from another level is a
    tie, never a failure. Without the KLs' errors, or n and d, the comparisons are ties and the note says which.
    ``closest_bp_sequence`` draws the path (:func:`_held_path`: a tie holds the level) and ``path`` says how each
    part was decided."""
    return _alignment(data, out, decreasing=False)


@_figure("1d", "dynamics/mlm.json", "dynamics",
         "The MLM aligns sequentially with BP_k of decreasing k as training goes on, down to the matched BP_k_train.",
         "the tie sets of Fig. 1c: the first above k_train, the last BP_k_train alone, at least 3 levels each closest "
         "beyond noise at some evaluation, and no later tie set wholly above an earlier one; at each level j between "
         "k_train and ℓ closest beyond noise, the model sides with BP_j over BP_k_train on their disagreeing inputs "
         "beyond noise at some evaluation from its arrival there", keys=("steps", "closest_bp", "kl_bp"))
def _check_mlm_alignment(data: dict, out: Path) -> tuple:
    """Fig. 1d.

    Paper (Sec. 3.3): "the predictions of a transformer trained on the fully hierarchical data sequentially align
    with the marginals yielded by" BP_k, with decreasing k as training progresses.

    Rule: the rule of Fig. 1c (:func:`_check_root_alignment`, with its null hypotheses and noise) on the MLM run,
    and the path decreases: no tie set lies wholly above an earlier one (a return to a larger k beyond noise; a
    return within noise of the level left is none), and at least 3 levels are each closest beyond noise at some
    evaluation (e.g. 4 → 3 → 2 → 0)."""
    return _alignment(data, out, decreasing=True)


@_figure("1e", "attention/mlm/attention.json", "attention",
         "The attention maps of the MLM trained on the full hierarchy mirror the tree: local in the first layer, "
         "reaching higher tree levels in later layers.",
         f"attention-weighted tree distance of the attention to other leaves (off the diagonal): layer 1 ≤ uniform "
         f"attention's − {LOCALITY:g}, and the largest over the layers ≥ layer 1's + {LOCALITY:g}", keys=("models",))
def _check_mlm_attention(data: dict, out: Path) -> tuple:
    """Fig. 1e.

    Paper (Sec. 4): "Interestingly, the network naturally organizes the attention layers hierarchically." and "Such
    a layout is consistent with the BP algorithm on the full tree, where one combines elements pairwise while going
    up the tree".

    Rule, on the MLM of k_train (the models of the grid with that filter level): the tree distance of a layer (the
    height of the deepest common ancestor of query and attended leaf, weighted by the attention a query pays to the
    other leaves — its attention to itself, at distance 0, is not counted — and pooled over queries) is at most
    uniform attention's − :data:`LOCALITY` in layer 1 (it attends within small subtrees) and rises by at least
    :data:`LOCALITY` to the widest layer (later layers combine higher subtrees, as BP going up the tree; App. F's
    layer t attends at distance exactly t). A layer that attends only to itself has no distance and cannot be layer
    1's local one. Null hypothesis: layer 1 attends no closer than uniform − :data:`LOCALITY`, or the layers climb
    less than :data:`LOCALITY`. Noise: with several models of k_train (seeds), the standard error of their mean;
    with one, the sampling error of its maps over their ``num_samples`` sequences (:func:`_share_noise`; the climb,
    two layers of the same inputs, the sum of both)."""
    k_train = _k_train(out)
    models = [m for m in data["models"] if m["filter_level"] == k_train]
    if not models:
        return {}, None, f"no MLM of k_train = {k_train} in attention/mlm/attention.json"
    model = models[0]
    depth = model["depth"]
    maps = _layer_maps(model)
    distance = _mean_distance(maps, depth)
    uniform = _uniform_distance(depth)
    itself = _self_attention(maps)
    measured = {"tree_distance_per_layer": distance.tolist(), "uniform_attention": uniform,
                "attention_to_itself_per_layer": itself.tolist(), "models": len(models)}
    if not np.isfinite(distance[0]):
        return _round(measured), False, "layer 1 attends only to itself: no local attention to other leaves"
    firsts, climbs = [], []
    for other in models:
        d = _mean_distance(_layer_maps(other), other["depth"])
        firsts.append(d[0])
        climbs.append(np.nanmax(d) - d[0])
    if len(models) > 1:  # the spread over seeds
        first_noise, climb_noise = (mean_error(np.asarray(v)) for v in (firsts, climbs))
    else:
        widest = int(np.nanargmax(distance))
        first_noise = _share_noise(model, float(itself[0]), depth - 1)
        climb_noise = _difference_noise(_share_noise(model, float(itself[widest]), depth - 1), first_noise,
                                        same_inputs=True)
    margins = Margins()
    margins.at_most("layer-1 tree distance", float(np.mean(firsts)), uniform - LOCALITY, first_noise)
    margins.at_least("climb over the layers", float(np.mean(climbs)), LOCALITY, climb_noise)
    return _result(_round(measured), margins)


PRETRAINED_ARMS = ("frozen", "finetuned")  # Fig. 1f: the arms that start from the MLM, each against scratch


def _gap_at_smallest(data: dict, arm: str) -> tuple:
    """(P, mean, noise, seeds) of ``arm`` − scratch at the smallest P: from the JSON's ``gap_vs_scratch``, the mean
    over seeds and its standard error (the spread over seeds / √seeds); with one seed (or a file written before the
    gap, from its accuracies), the two test accuracies' errors on the file's ``num_test`` sequences (the same
    sequences: their sum)."""
    sizes = data["sizes"]
    smallest = sizes.index(min(sizes))
    gaps = (data.get("gap_vs_scratch") or {}).get(arm)
    if gaps is not None and gaps[smallest]["num_seeds"] > 1:
        gap = gaps[smallest]
        spread = _error(gap["spread"], "spread over seeds")
        noise = spread if isinstance(spread, NoNoise) else spread / math.sqrt(gap["num_seeds"])
        return sizes[smallest], gap["mean"], noise, gap["num_seeds"]
    ours, scratch = data["accuracy"][arm][smallest], data["accuracy"]["scratch"][smallest]
    if gaps is not None:
        mean, seeds = gaps[smallest]["mean"], gaps[smallest]["num_seeds"]
    else:
        mean = None if ours is None or scratch is None else ours - scratch
        seeds = 0 if mean is None else 1
    if data.get("num_test") is None:
        noise = NoNoise("one seed and no test-set size recorded (num_test): the gap's noise is not known")
    else:
        noise = _difference_noise(_fraction_noise(ours, data["num_test"]), _fraction_noise(scratch, data["num_test"]),
                                  same_inputs=True)
    return sizes[smallest], mean, noise, seeds


@_figure("1f", "sample_complexity/sample_complexity.json", "sample_complexity",
         "MLM pre-training cuts the labelled data needed for root classification: the pre-trained encoder, frozen "
         "or fine-tuned, beats training from scratch at small P.",
         "at the smallest P, for the frozen and the fine-tuned encoder: its accuracy − scratch's > 0 beyond noise "
         "(the standard error of the mean gap over seeds; one seed: the test sets' errors)", keys=("sizes", "accuracy"))
def _check_sample_complexity(data: dict, out: Path) -> tuple:
    """Fig. 1f.

    Paper (Sec. 4): "A significant reduction in the labeled data required to achieve optimal root inference" "is
    observed, both with frozen and with fine-tuned encoder weights".

    Rule: at the smallest number P of labelled sequences, for each pre-trained arm — the frozen MLM encoder with a
    new readout, and the same encoder fine-tuned (:data:`PRETRAINED_ARMS`) — its test accuracy minus that of the same
    architecture trained from scratch, paired by seed and averaged, is above 0 beyond its noise. Null hypothesis: the
    pre-trained arm is no better than scratch. Noise: the standard error of the mean gap over the seeds (their
    sample standard deviation / √seeds); with one seed, the two test accuracies' errors on ``num_test`` sequences
    (their sum: the same sequences), and without ``num_test`` the gap's noise is unknown (a tie; the note says so).
    An arm the sweep did not run is not tested (the note says which); with neither, the check is not run."""
    arms = [arm for arm in PRETRAINED_ARMS if arm in data["accuracy"]]
    if "scratch" not in data["accuracy"] or not arms:
        return {}, None, "the scratch arm and a pre-trained arm were not both run"
    measured, margins = {}, Margins()
    for arm in arms:
        size, mean, noise, seeds = _gap_at_smallest(data, arm)
        measured.update({"P": size, "seeds": seeds, f"{arm}_minus_scratch": mean,
                         f"{arm}_noise": None if isinstance(noise, NoNoise) else noise})
        if mean is None:
            return _round(measured), None, f"no seed at P={size} with both the {arm} and the scratch run finished"
        margins.at_least(f"{arm} − scratch at P={size}", mean, 0.0, noise)
    notes = [f"the {arm} arm was not run: not tested" for arm in PRETRAINED_ARMS if arm not in arms]
    return _result(_round(measured), margins, "; ".join(notes))


# ---------------------------------------------------------------- Fig. 2, 6, 7, 8: root accuracy


def _test_size(curve: dict, panel: dict, data: dict):
    """The test sequences behind a curve's accuracies: its ``num_test``, else its panel's, else the file's."""
    for holder in (curve, panel, data):
        if holder.get("num_test") is not None:
            return holder["num_test"]
    return None


def _matches_bp(panel: dict, data: dict, margins: Margins, where: str = "") -> dict:
    """Per curve of an accuracy-vs-P panel: the accuracy at its largest P and BP's, each |accuracy − BP| ≤
    :data:`BP_TOLERANCE` recorded in ``margins`` (noise: the sum of the two accuracies' errors on the curve's test
    sequences, :func:`_test_size`, which both are measured on)."""
    rows = {}
    for curve in panel["curves"]:
        largest = int(np.argmax(curve["sizes"]))
        accuracy, bp = curve["accuracy"][largest], curve["bp_accuracy"]
        count = _test_size(curve, panel, data)
        rows[curve["label"]] = {"P": curve["sizes"][largest], "accuracy": accuracy, "bp": bp, "num_test": count}
        name = f"{where}|accuracy − BP| of {curve['label']} at P={curve['sizes'][largest]}"
        if _number(accuracy) is None or _number(bp) is None:
            margins.at_most(name, math.nan if _number(accuracy) is None else abs(accuracy - bp), BP_TOLERANCE,
                            NoNoise(f"accuracy {accuracy!r} and BP {bp!r} are not both finite numbers"))
            continue
        noise = _difference_noise(_fraction_noise(accuracy, count), _fraction_noise(bp, count), same_inputs=True)
        margins.at_most(name, abs(accuracy - bp), BP_TOLERANCE, noise)
    return rows


def _panel(data: dict, k_test: str) -> dict:
    panel = next((panel for panel in data["panels"] if panel["k_test"] == k_test), None)
    if panel is None:
        raise KeyError(f"no panel tested on k_test {k_test!r}")
    return panel


@_figure("2a", "accuracy_vs_samples/fig2a_e3.json", "root_sweep",
         "Given enough labelled data, root classifiers trained on k_train reach the accuracy of BP_k_train on the "
         "full hierarchy (k_test = 0), even where that BP is mismatched.",
         f"for every k_train, the k_test = 0 accuracy at the largest P is within {BP_TOLERANCE} of BP_k_train's",
         keys=("panels",))
def _check_fig2a(data: dict, out: Path) -> tuple:
    """Fig. 2a.

    Paper (Sec. 3.2): "In both cases, the transformers achieve a performance that exactly matches that of"
    BP_{k_train}, "in the presence of the same mismatch between the assumed inference model and the data generative
    model."

    Rule: on the panel tested on the full hierarchy (k_test = 0), every k_train curve's final test accuracy at its
    largest P is within :data:`BP_TOLERANCE` of BP_{k_train}'s accuracy on the same inputs. Null hypothesis: some
    curve differs from its BP by :data:`BP_TOLERANCE` or more. Noise: the two accuracies' errors on the test
    sequences (``num_test`` of the curve, the panel or the file), summed (the same sequences); a NaN or missing
    accuracy is a tie, never a match."""
    margins = Margins()
    rows = _matches_bp(_panel(data, "full"), data, margins)
    return _result(_round({"largest_P": rows}), margins)


@_figure("2b", "dynamics/root.json", "dynamics",
         "Along the root classifier's training, the accuracy on slightly filtered test data keeps rising while on "
         "the most filtered data it rises, then falls to the mismatched BP_0 level.",
         f"every k_test < ℓ/2 ends within {CHANGE} of its peak; k_test = ℓ peaks ≥ {CHANGE} above both its first "
         f"and its final accuracy; every k_test > ℓ/2 ends within {BP_TOLERANCE} of BP_k_train's accuracy on it",
         keys=("accuracy_ktest",))
def _check_fig2b(data: dict, out: Path) -> tuple:
    """Fig. 2b.

    Paper (Sec. 3.2): "the accuracy on the most filtered datasets drops towards the" mismatched BP_0 prediction, and
    "In the meantime, the accuracy for the smallest values of $k_\\text{test}$ keeps increasing".

    Rule, on the k_test accuracy curves of the root run: every k_test < ℓ/2 "keeps rising" (its final accuracy is
    within :data:`CHANGE` of its peak) while the most filtered set k_test = ℓ "rises then falls" (its peak exceeds
    both its first and its final accuracy by at least :data:`CHANGE`), and the filtered sets k_test > ℓ/2 fall "to
    the mismatched BP_0 level": each final accuracy is within :data:`BP_TOLERANCE` of the matched BP_k_train's
    accuracy on the same k_test data (``bp_accuracy_ktest``; BP_0 for the paper's k_train = 0). Null hypothesis:
    some comparison lies on its failing side. Noise: two accuracies of one test set of ``num_test`` sequences, and
    the model's against BP's on ``bp_reference_size_ktest`` sequences that contain them: the sum of their errors."""
    curves = _levels(data["accuracy_ktest"])
    bp = _by_level(data.get("bp_accuracy_ktest"))
    sizes = _by_level(data.get("bp_reference_size_ktest"))
    n = data.get("num_test")
    depth = max(curves)
    summary, margins = {}, Margins()
    for k, values in sorted(curves.items()):
        finite = values[np.isfinite(values)]
        if finite.size < 2:
            return {}, None, f"k_test = {k} has fewer than 2 evaluations"
        first, peak, final = float(finite[0]), float(finite.max()), float(finite[-1])
        summary[f"k{k}"] = {"first": first, "peak": peak, "final": final}
        if k < depth / 2:
            margins.at_least(f"k_test {k}: final ≥ peak − {CHANGE}", final, peak - CHANGE, _one_set(final, peak, n))
        if k == depth:
            margins.at_least(f"k_test {k}: peak ≥ first + {CHANGE}", peak, first + CHANGE, _one_set(peak, first, n))
            margins.at_least(f"k_test {k}: peak ≥ final + {CHANGE}", peak, final + CHANGE, _one_set(peak, final, n))
        if k > depth / 2:
            if bp.get(k) is None:
                return _round(summary), None, f"no BP accuracy for k_test = {k} (bp_accuracy_ktest)"
            summary[f"k{k}"]["bp"] = bp[k]
            noise = _difference_noise(_fraction_noise(final, n), _fraction_noise(bp[k], sizes.get(k) or n),
                                      same_inputs=True)
            margins.at_most(f"k_test {k}: |final − BP|", abs(final - bp[k]), BP_TOLERANCE, noise)
    return _result(_round(summary), margins)


def _one_set(first: float, second: float, count) -> float | NoNoise:
    """The noise of the difference of two accuracies measured on one test set of ``count`` sequences (summed)."""
    return _difference_noise(_fraction_noise(first, count), _fraction_noise(second, count), same_inputs=True)


def _mean_over_sizes(curve: dict, panel: dict, data: dict) -> tuple:
    """(mean accuracy over the P of a curve, its standard error): each point a separate run on ``num_test`` test
    sequences, so the error is √(Σ SE²) / points."""
    accuracy = curve["accuracy"]
    numbers = [_number(a) for a in accuracy]
    if not numbers or any(a is None for a in numbers):
        return math.nan, NoNoise(f"accuracies {accuracy!r} are not all finite numbers")
    count = _test_size(curve, panel, data)
    errors = [_fraction_noise(a, count) for a in numbers]
    bad = next((e for e in errors if isinstance(e, NoNoise)), None)
    return float(np.mean(numbers)), bad or math.sqrt(sum(e * e for e in errors)) / len(errors)


@_figure("6", "accuracy_vs_samples/e1_layers.json", "layers_sweep",
         "(App. E.1) More encoder blocks n_L give better sample efficiency on the full hierarchy; n_L = 1 is poor.",
         f"accuracy averaged over P does not decrease (by more than {LAYERS_TOLERANCE}) from one n_L to the next, "
         f"and is at least {CHANGE} lower at n_L = 1 than at n_L = ℓ", keys=("panels",))
def _check_layers(data: dict, out: Path) -> tuple:
    """Fig. 6 (App. E.1).

    Paper (App. E.1): "only $n_L = 1$ appears to lead to poor sample efficiency. In all the performed experiments, a
    bigger value for $n_L$ corresponded to better sample efficiency".

    Rule: with one curve per n_L (k_train = k_test = 0), the test accuracy averaged over the P of the sweep is
    non-decreasing in n_L, up to :data:`LAYERS_TOLERANCE` between neighbours, and n_L = 1 is worse than n_L = ℓ by
    at least :data:`CHANGE` (the least and the most sample-efficient). A sweep without n_L = 1 or n_L = ℓ compares
    its smallest and largest n_L and the note says so. Null hypothesis: more layers are not more sample-efficient
    (a neighbour falls by more than the tolerance, or n_L = 1 is within :data:`CHANGE` of n_L = ℓ). Noise: each
    mean's error over its points (:func:`_mean_over_sizes`), two curves tested on the same sequences: summed."""
    panel = data["panels"][0]
    curves = sorted(panel["curves"], key=lambda c: c["num_layers"])
    if len(curves) < 2:
        return {}, None, "fewer than two n_L in the sweep"
    means = {c["num_layers"]: _mean_over_sizes(c, panel, data) for c in curves}
    margins = Margins()
    layers = list(means)
    for a, b in zip(layers, layers[1:]):
        margins.at_least(f"n_L={b} ≥ n_L={a} − {LAYERS_TOLERANCE}", means[b][0], means[a][0] - LAYERS_TOLERANCE,
                         _difference_noise(means[a][1], means[b][1], same_inputs=True))
    fewest, most, depth = layers[0], layers[-1], data.get("depth")
    margins.at_most(f"n_L={fewest} ≤ n_L={most} − {CHANGE}", means[fewest][0], means[most][0] - CHANGE,
                    _difference_noise(means[fewest][1], means[most][1], same_inputs=True))
    note = "" if (fewest, most) == (1, depth) else f"n_L = {fewest} compared with n_L = {most} (the sweep's extremes)"
    return _result(_round({"mean_accuracy_over_P": {f"n_L={n}": m for n, (m, _) in means.items()}}), margins, note)


@_figure("7", "accuracy_vs_samples/e2_grammar_seeds.json", "seed_sweep",
         "(App. E.2) Fig. 2a holds on other grammars: every k_train reaches BP_k_train's accuracy on k_test = 0.",
         f"on every grammar, every k_train's k_test = 0 accuracy at the largest P is within {BP_TOLERANCE} of "
         "BP_k_train's", keys=("panels",))
def _check_grammars(data: dict, out: Path) -> tuple:
    """Fig. 7 (App. E.2).

    Paper (App. E.2): "we illustrate that all our conclusions should qualitatively hold for any realizations of"
    the transition tensor; "the transformer architecture performs very similarly, here on the root inference task".

    Rule: the rule of Fig. 2a (:func:`_check_fig2a`, with its null hypothesis and noise) on the panel of every other
    grammar seed."""
    measured, margins = {}, Margins()
    for panel in data["panels"]:
        where = f"grammar seed {panel['grammar_seed']}: "
        measured[f"grammar seed {panel['grammar_seed']}"] = {"largest_P": _matches_bp(panel, data, margins, where)}
    return _result(_round(measured), margins)


@_figure("8", "accuracy_vs_samples/fig2a_e3.json", "root_sweep",
         "(App. E.3) Tested in sample (k_test = k_train), root classifiers reach the optimal BP_k_train accuracy "
         "with enough data.",
         f"for every k_train, the in-sample accuracy at the largest P is within {BP_TOLERANCE} of BP_k_train's",
         keys=("panels",))
def _check_in_sample(data: dict, out: Path) -> tuple:
    """Fig. 8 (App. E.3).

    Paper (App. E.3): "The optimal inference accuracy predicted by the Belief Propagation, which is not unity when
    $k > 0$, is reached by the transformers in all cases when trained on sufficient data."

    Rule: the rule of Fig. 2a (:func:`_check_fig2a`, with its null hypothesis and noise) on the panel tested in
    sample (k_test = k_train, BP optimal)."""
    margins = Margins()
    rows = _matches_bp(_panel(data, "train"), data, margins)
    return _result(_round({"largest_P": rows}), margins)


@_figure("9", "accuracy_vs_samples/fig9_kl.json", "root_sweep",
         "(App. E.3) The root classifiers' KL to the matched BP_k_train falls as P grows, on in-sample and on "
         "entirely out-of-sample (uniform) inputs.",
         "for every k_train, the KL at the largest P is below the one at the smallest P beyond noise, in sample and "
         "on uniform inputs", keys=("curves",))
def _check_kl_vs_samples(data: dict, out: Path) -> tuple:
    """Fig. 9 (App. E.3).

    Paper (Sec. 3.2): "We find a close match at the end of training", "on both in-sample and entirely
    out-of-sample inputs".

    Rule: for every k_train, KL(BP_k_train ‖ model) at the largest P < at the smallest P, both on in-sample inputs
    and on uniform random inputs. Null hypothesis: the KL does not fall from the smallest to the largest P. Noise:
    the standard errors of the two mean KLs (``kl_standard_error`` beside ``kl`` in each curve): two runs on their
    own in-sample sequences, root sum of squares; on the same uniform sequences, summed. A file without them
    leaves every comparison a tie."""
    measured, margins = {}, Margins()
    for k, curve in sorted(data["curves"]["in_sample"].items(), key=lambda item: int(item[0])):
        uniform = data["curves"]["uniform"][k]
        measured[f"k_train={k}"] = {"P": [curve["sizes"][0], curve["sizes"][-1]],
                                    "in_sample": [curve["kl"][0], curve["kl"][-1]],
                                    "uniform": [uniform["kl"][0], uniform["kl"][-1]]}
        for name, values, same in (("in sample", curve, False), ("uniform inputs", uniform, True)):
            kl, errors = values["kl"], values.get("kl_standard_error")
            if errors is None:
                noise = NoNoise("no standard errors of the KLs recorded (kl_standard_error)")
            else:
                noise = _difference_noise(_error(errors[0], "KL error"), _error(errors[-1], "KL error"),
                                          same_inputs=same)
            margins.at_most(f"k_train={k}, {name}: KL at P={curve['sizes'][-1]} < KL at P={curve['sizes'][0]}",
                            kl[-1], kl[0], noise if len(kl) > 1 else NoNoise("one P only"))
    return _result(_round(measured), margins)


# ---------------------------------------------------------------- Fig. 3, 10: MLM staircase and probes


def _reach_window(data: dict, k: int, margins: Margins) -> tuple:
    """(earliest, surest) of k_test ``k``: the first evaluation step at which its accuracy may have reached BP —
    at least BP − :data:`REACHED` and risen by at least :data:`CHANGE` from its first evaluation, both not decided
    against — and the first at which both are decided (None: never). The comparison at the surest step, else at the
    evaluation closest to deciding, goes into ``margins``. Noise: the model's accuracy on ``num_test`` sequences and
    BP's on ``bp_reference_size_ktest`` sequences that contain them, summed; two accuracies of one test set,
    summed; the first evaluation against itself has none."""
    steps = [int(s) for s in data["steps"]]
    bp = _by_level(data["bp_accuracy_ktest"])[k]
    n, reference = data.get("num_test"), _by_level(data.get("bp_reference_size_ktest")).get(k) or data.get("num_test")
    values = _levels(data["accuracy_ktest"])[k]
    finite = np.flatnonzero(np.isfinite(values))
    if finite.size == 0:
        margins.at_least(f"k_test {k} reaches BP − {REACHED}", math.nan, bp - REACHED, NoNoise("no finite accuracy"))
        return None, None
    start = int(finite[0])
    earliest = surest = None
    trials = []
    for i in finite:
        value = float(values[i])
        reach = Margins()
        reach.at_least(f"k_test {k} at step {steps[i]}: accuracy ≥ BP − {REACHED}", value, bp - REACHED,
                       _difference_noise(_fraction_noise(value, n), _fraction_noise(bp, reference), same_inputs=True))
        start_noise = 0.0 if i == start else _one_set(value, float(values[start]), n)
        reach.at_least(f"k_test {k} at step {steps[i]}: accuracy ≥ first + {CHANGE}", value,
                       float(values[start]) + CHANGE, start_noise)
        outcome = reach.outcome()
        trials.append((outcome, reach))
        if outcome is not False and earliest is None:
            earliest = steps[i]
        if outcome is True:
            surest = steps[i]
            break
    chosen = next((r for o, r in trials if o is True), None) or max(
        (r for _, r in trials), key=lambda r: min(_z_score(e) for e in r.entries))
    margins.entries.extend(chosen.entries)
    return earliest, surest


def _z_score(entry: dict) -> float:
    """A recorded comparison's margin in units of its noise (−inf when unusable): how close it came to passing."""
    if entry.get("unusable") or entry["margin"] is None:
        return -math.inf
    noise = entry["noise"]
    return entry["margin"] / noise if noise else math.copysign(math.inf, entry["margin"])


def _unordered_pairs(data: dict, levels: list) -> tuple:
    """(pairs, note): the pairs of k_test in ``levels`` whose BP accuracies are not told apart
    (:func:`hf_treelang.core.noise.told_apart` on their independent test sets of ``bp_reference_size_ktest``, else
    ``num_test``, sequences each) as ``{"k1, k0": why}``; the note says when the file records no sizes (then every
    pair is taken as unordered: no order can be shown)."""
    bp = _by_level(data["bp_accuracy_ktest"])
    sizes = _by_level(data.get("bp_reference_size_ktest"))
    sizes = {k: sizes.get(k) or data.get("num_test") for k in levels}
    pairs, ordered = {}, sorted(levels, reverse=True)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            noise = _difference_noise(_fraction_noise(bp[a], sizes[a]), _fraction_noise(bp[b], sizes[b]),
                                      same_inputs=False)
            if isinstance(noise, NoNoise):
                pairs[f"k{a}, k{b}"] = f"BP {bp[a]:.3f} and {bp[b]:.3f}: {noise.why}"
            elif not told_apart(bp[a] - bp[b], noise):
                pairs[f"k{a}, k{b}"] = (f"BP {bp[a]:.3f} and {bp[b]:.3f}: difference {abs(bp[a] - bp[b]):.3f} within "
                                        f"{Z:g} standard errors {Z * noise:.3f} on {sizes[a]} and {sizes[b]} sequences")
    note = "" if all(_count(size) == size for size in sizes.values()) else (
        "the file records no test set sizes (bp_reference_size_ktest, num_test): no pair can be ordered")
    return pairs, note


def _before(a: tuple, b: tuple) -> bool | None:
    """Whether a reach window ``a`` = (earliest, surest) comes no later than ``b``: True when a is surely reached by
    b's earliest possible step, False when b is surely reached before a's earliest, else None (None steps: never)."""
    never = math.inf
    a_earliest, a_surest = (never if s is None else s for s in a)
    b_earliest, b_surest = (never if s is None else s for s in b)
    if a_surest <= b_earliest:
        return True
    if b_surest < a_earliest:
        return False
    return None


def _strictly_before(a: tuple, b: tuple) -> bool | None:
    """Whether window ``a`` is reached strictly before window ``b``: True when a's surest step is before b's
    earliest, False when b is surely reached no later than a's earliest, else None."""
    never = math.inf
    a_earliest, a_surest = (never if s is None else s for s in a)
    b_earliest, b_surest = (never if s is None else s for s in b)
    if a_surest < b_earliest:
        return True
    if b_surest <= a_earliest:
        return False
    return None


@_figure("3a", "dynamics/mlm.json", "dynamics",
         "The MLM's test accuracies climb a staircase: the most filtered k_test reaches BP first, the full "
         "hierarchy (k_test = 0) last.",
         f"every k_test whose BP accuracy exceeds chance (the most frequent symbol) by > {REACHED} reaches BP − "
         f"{REACHED}, having risen ≥ {CHANGE} from its start; the reach steps come no earlier for smaller k_test "
         "(except between k_test whose BP accuracies are not told apart), the most filtered strictly before the "
         "least", keys=("steps", "accuracy_ktest", "bp_accuracy_ktest"))
def _check_staircase(data: dict, out: Path) -> tuple:
    """Fig. 3a.

    Paper (Sec. 3.3): "we observe a clean ``staircase'' behavior in the test accuracy", "showing that the network
    sequentially resolves the nested levels of the hierarchy, in a bottom-up order".

    Rule, on the k_test whose BP_k_train accuracy exceeds the most-frequent-symbol accuracy of the same data by more
    than :data:`REACHED` (``chance_accuracy_ktest``; a k_test whose BP is near chance is "reached" by a model that
    has learned nothing — k_test = ℓ on the paper's grammar): each reaches BP − :data:`REACHED` in the run, counted
    from the first evaluation at which its accuracy is there and has risen by at least :data:`CHANGE` from its first
    evaluation; the reach steps are non-decreasing from the most filtered k_test down to k_test = 0 (ties allowed:
    evaluations are log-spaced), except between two k_test whose BP accuracies are not told apart
    (:func:`_unordered_pairs`: they have no order to show); and the most filtered is reached strictly before the
    least (a staircase, not one jump), which needs those two told apart.

    Null hypothesis: the k_test reach BP in no particular order. Noise: each reach is a window (:func:`_reach_window`)
    from the first evaluation at which it may have happened to the first at which it surely has; two k_test are in
    order when the first's window closes before the second's opens, out of order when the second's closes before the
    first's opens, and a tie otherwise. A k_test whose reachability is a tie counts only where it is decided. Fewer
    than two reachable k_test whose BP accuracies are told apart leave nothing to order: inconclusive. A file without
    chance accuracies (written before them) takes every k_test as reachable; the note says so."""
    bp = _by_level(data["bp_accuracy_ktest"])
    levels = sorted(_levels(data["accuracy_ktest"]), reverse=True)  # the most filtered first
    if any(_number(bp.get(k)) is None for k in levels):
        raise ValueError(f"no BP accuracy for k_test = {[k for k in levels if _number(bp.get(k)) is None]}")
    chance = _by_level(data.get("chance_accuracy_ktest"))
    sizes = _by_level(data.get("bp_reference_size_ktest"))
    notes = [] if chance else ["the file records no most-frequent-symbol accuracy (written before it): every "
                               "k_test taken as reachable"]
    margins = Margins()
    reachable, unreachable = {}, {}
    for k in levels:
        if k not in chance:
            reachable[k] = True
            continue
        size = sizes.get(k) or data.get("num_test")
        reachable[k] = margins.at_least(f"k_test {k}: BP ≥ chance + {REACHED}", bp[k], chance[k] + REACHED,
                                        _difference_noise(_fraction_noise(bp[k], size),
                                                          _fraction_noise(chance[k], size), same_inputs=True))
        if reachable[k] is False:
            unreachable[f"k{k}"] = f"BP {bp[k]:.3f} ≤ chance {chance[k]:.3f} + {REACHED}"
    levels = [k for k in levels if reachable[k] is not False]
    windows = {k: _reach_window(data, k, margins) for k in levels}
    pairs, note = _unordered_pairs(data, levels)
    notes += [note] if note else []
    measured = {"step_reaching_bp": {f"k{k}": windows[k][1] for k in levels},
                "earliest_step_reaching_bp": {f"k{k}": windows[k][0] for k in levels},
                "not_reachable": unreachable, "unordered_pairs": pairs}

    def counted(outcome, *ks):  # a failure that involves a k_test of undecided reachability is a tie
        return None if outcome is False and any(reachable[k] is None for k in ks) else outcome

    parts = [counted(True if windows[k][1] is not None else None if windows[k][0] is not None else False, k)
             for k in levels]
    never = [k for k in levels if windows[k][0] is None]
    if never:
        notes.append(f"k_test {never} never reach BP − {REACHED}")
    out_of_order = []
    for i, a in enumerate(levels):
        for b in levels[i + 1:]:
            if f"k{a}, k{b}" in pairs:
                continue
            order = counted(_before(windows[a], windows[b]), a, b)
            parts.append(order)
            if order is False:
                out_of_order.append(f"k_test {a} at step {windows[a][0]} after k_test {b} at step {windows[b][1]}")
    measured["out_of_order"] = out_of_order
    if len(levels) < 2 or f"k{levels[0]}, k{levels[-1]}" in pairs:
        notes.append("fewer than two reachable k_test whose BP accuracies are told apart: no staircase to show")
        parts.append(None)
    else:
        parts.append(counted(_strictly_before(windows[levels[0]], windows[levels[-1]]), levels[0], levels[-1]))
    return _result(measured, margins, "; ".join(notes), outcome=all_of(parts))


def _probe_noise(data: dict, value) -> float | NoNoise:
    """The standard error of a probe accuracy on the probe's ``num_test`` held-out sequences."""
    count = data.get("num_test")
    if count is None:
        return NoNoise("no probe test-set size recorded (num_test)")
    return _fraction_noise(value, count)


def _best_layers(data: dict) -> dict:
    """``{"level m": "layer j (accuracy)"}``: the layer that reads each ancestor best — what is measured, whatever
    the rule decides."""
    accuracy = np.asarray(data["accuracy"], dtype=float)  # (layers, levels)
    best = {}
    for column, level in enumerate(data["levels"]):
        row = int(np.nanargmax(accuracy[:, column])) if np.isfinite(accuracy[:, column]).any() else None
        best[f"level {level}"] = None if row is None else f"layer {data['layers'][row]} ({accuracy[row, column]:.3f})"
    return best


def _climb(data: dict, margins: Margins, *, high: bool) -> None:
    """Record the probe comparisons of the climb (Fig. 3b, with ``high``; Fig. 12 left without) in ``margins``.

    For every probed layer j ≥ 1 with a probed ancestor level within its reach (height ℓ − m ≤ j), its *top* level —
    the highest probed level within reach, height j where that level is probed — and, with ``high``, every level
    within reach is read at accuracy ≥ chance + :data:`PROBE_MARGIN`; and every level above its reach (height > j) is
    read at least :data:`CHANGE` below the top level ("deteriorates on higher levels"). Noise: a probe accuracy's
    standard error on ``num_test`` sequences; two probes of the same layer read the same sequences: summed."""
    depth, layers, levels = data["depth"], data["layers"], data["levels"]
    accuracy, chance = np.asarray(data["accuracy"], dtype=float), np.asarray(data["chance"], dtype=float)  # (P, V)
    for row, layer in enumerate(layers):
        within = [c for c, m in enumerate(levels) if depth - m <= layer]
        if layer < 1 or not within:
            continue
        top = min(within, key=lambda c: levels[c])  # the highest ancestor within the layer's reach
        if high:
            for column in within:
                value = accuracy[row, column]
                margins.at_least(f"layer {layer}, level {levels[column]} ≥ chance + {PROBE_MARGIN}", value,
                                 chance[column] + PROBE_MARGIN, _probe_noise(data, value))
        for column, level in enumerate(levels):
            if depth - level > layer:  # above the layer's reach
                value, reference = accuracy[row, column], accuracy[row, top]
                noise = _difference_noise(_probe_noise(data, value), _probe_noise(data, reference), same_inputs=True)
                margins.at_most(f"layer {layer}, level {level} ≤ its level {levels[top]} − {CHANGE}", value,
                                reference - CHANGE, noise)


def _probe_measured(data: dict) -> dict:
    return {**_round({"accuracy_by_layer": {f"layer {layer}": row for layer, row in zip(data["layers"],
                                                                                         data["accuracy"])},
                      "levels": data["levels"], "chance": data["chance"]}, 3),
            "best_layer_per_level": _best_layers(data)}


@_figure("3b", "probe/probe.json", "probe",
         "Probes of the MLM's hidden states read the ancestors well up to the probed layer's level and worse above "
         "it: the layers climb the tree.",
         f"layer j ≥ 1: accuracy ≥ chance + {PROBE_MARGIN} on every level of height ℓ − m ≤ j, and every higher "
         f"level at least {CHANGE} below the highest level within its reach", keys=("depth", "layers", "levels",
                                                                                   "accuracy", "chance"))
def _check_probes(data: dict, out: Path) -> tuple:
    """Fig. 3b.

    Paper (Sec. 4): "the prediction accuracy is high on ancestors up to the same level as the probed layer and
    deteriorates on higher levels of ancestry".

    Rule, on the held-out accuracy of every (layer j, ancestor level m) probe (layer 0 = the embedding, which
    reaches no ancestor and is not tested): for every layer j ≥ 1, "high on ancestors up to the same level" — every
    level within its reach (height ℓ − m ≤ j) is read at accuracy ≥ the most-frequent-symbol chance +
    :data:`PROBE_MARGIN` — and "deteriorates on higher levels" — every level above its reach is read at least
    :data:`CHANGE` below the highest level within its reach (:func:`_climb`). The paper does not say that each
    ancestor is read best by the deepest layer, and the rule does not ask it; which layer reads each ancestor best is
    recorded (``best_layer_per_level``). Null hypothesis: some layer reads a level within its reach at chance +
    :data:`PROBE_MARGIN` or less, or a level above its reach no worse than its highest reachable level − :data:`CHANGE`.
    Noise: the probe accuracies' standard errors on ``num_test`` sequences."""
    margins = Margins()
    _climb(data, margins, high=True)
    return _result(_probe_measured(data), margins)


@_figure("10", "dynamics/mlm.json", "dynamics",
         "(App. E.4) The trained MLM's predictions agree with BP's in argmax and in ranking (Spearman) as well.",
         f"at the last evaluation, argmax agreement with BP_k_train ≥ {MATCH} and mean Spearman correlation ≥ "
         f"{SPEARMAN}")
def _check_match(data: dict, out: Path) -> tuple:
    """Fig. 10 (App. E.4).

    Paper (Sec. 3.3): "the sample-specific prediction match and Spearman (ranking) correlation between the two
    discrete probability distributions" — it "confirms the near equivalence between transformer and BP
    computation"; App. E.4: "These confirm the observations described in the main text."

    Rule: at the last evaluation of the MLM run, the argmax agreement of the model with BP_{k_train} on in-sample
    inputs is at least :data:`MATCH` and the mean Spearman correlation of the two q-vectors at least
    :data:`SPEARMAN`. Null hypothesis: either is below its threshold. Noise: the agreement's √(p(1 − p)/n) on the
    ``num_in_sample`` = n inputs; the correlation's standard error (``spearman_bp_se``), else its largest, 1/√n (a
    mean of values in [−1, 1]). Always the last evaluation: a NaN there is a tie whose note says so, never an
    earlier evaluation in its place."""
    k = f"k{_k_train(out)}"
    if not data.get("match_bp") or not data.get("spearman_bp"):
        return {}, None, "the run logged no argmax agreement or Spearman correlation"
    match, spearman = _series(data["match_bp"][k])[-1], _series(data["spearman_bp"][k])[-1]
    steps = data.get("steps") or []
    at = f" at step {steps[-1]}" if steps else ""
    measured = _round({"argmax_match": match, "spearman": spearman})
    count = _count(data.get("num_in_sample"))
    spearman_noise = (data.get("spearman_bp_se") or {}).get(k)
    if spearman_noise is not None:
        spearman_noise = _error(spearman_noise[-1], "Spearman standard error")
    elif isinstance(count, NoNoise):
        spearman_noise = NoNoise("no in-sample size recorded (num_in_sample)")
    else:
        spearman_noise = bounded_mean_error(-1.0, 1.0, count)
    margins = Margins()
    margins.at_least(f"argmax agreement{at}", match, MATCH,
                     NoNoise("no in-sample size recorded (num_in_sample)") if isinstance(count, NoNoise)
                     else _fraction_noise(match, count))
    margins.at_least(f"Spearman correlation{at}", spearman, SPEARMAN, spearman_noise)
    nan = [name for name, value in (("argmax agreement", match), ("Spearman correlation", spearman))
           if not math.isfinite(value)]
    note = f"the last evaluation{at} has no finite {' or '.join(nan)}" if nan else ""
    return _result(measured, margins, note)


# ---------------------------------------------------------------- Fig. 4, 11: attention of filtered models


def _blocks(data: dict, *, structureless_top: bool) -> tuple:
    """The rule of Fig. 4 on the models of an attention JSON: (measured, passed, note)."""
    models = data["models"]
    depth = models[0]["depth"]
    filtered = [m for m in models if 1 <= m["filter_level"] < depth]
    top = [m for m in models if m["filter_level"] == depth] if structureless_top else []
    if not filtered and not top:
        return {}, None, "no model trained on filtered data (1 ≤ k_train) in the grid at this preset"
    measured, margins = {}, Margins()
    for model in filtered:
        k = model["filter_level"]
        maps = _layer_maps(model)
        masses, itself = _block_mass(maps, depth, k), _self_attention(maps)  # (layers,) NaN: attends only to itself
        needed = _block_needed(depth, k)
        trials = []
        for layer, mass in enumerate(masses):
            if not np.isfinite(mass):  # a layer that attends only to itself keeps no attention to its block
                continue
            trial = Margins()
            trial.at_least(f"k_train={k}: in-block share of layer {layer + 1} ≥ halfway to block-diagonal", mass,
                           needed, _share_noise(model, float(itself[layer]), 1.0))
            trials.append(trial)
        if not trials:  # every layer attends only to itself: none attends within its block, exactly
            margins.at_least(f"k_train={k}: in-block share (every layer attends only to itself)", 0.0, needed, 0.0)
        else:  # any layer: the one that passes, else a tie, else the closest to passing
            rank = {"pass": 2, "tie": 1, "fail": 0}
            best = max(trials, key=lambda t: (rank[t.entries[0]["decided"]], _z_score(t.entries[0])))
            margins.entries.extend(best.entries)
        finite = masses[np.isfinite(masses)]
        measured[f"k_train={k}"] = {"block": 2 ** (depth - k), "in_block_attention": float(finite.max())
                                    if finite.size else None, "needed": needed}
    if top:
        distances = {m["filter_level"]: (_distance_to_uniform(_layer_maps(m)),
                                         _distance_to_uniform_noise(m, 2**depth)) for m in models}
        measured["distance_to_uniform"] = {f"k_train={k}": d for k, (d, _) in distances.items()}
        for k, (distance, noise) in distances.items():
            if k != depth:
                margins.at_most(f"k_train={depth} closer to uniform attention than k_train={k}", distances[depth][0],
                                distance, _difference_noise(distances[depth][1], noise, same_inputs=True))
    return _result(_round(measured), margins)


@_figure("4", "attention/mlm/attention.json", "attention",
         "MLMs trained on data filtered at k attend within blocks of about 2^(ℓ−k) leaves; the fully factorized "
         "model (k = ℓ) is structureless.",
         "every 1 ≤ k_train < ℓ: in some layer, the share of the attention to other leaves (off the diagonal) inside "
         "the query's block of 2^(ℓ−k) leaves is at least halfway from uniform's, (2^(ℓ−k) − 1)/(2^ℓ − 1), to "
         "block-diagonal's, 1; k_train = ℓ: the model closest to uniform attention", keys=("models",))
def _check_attention_blocks(data: dict, out: Path) -> tuple:
    """Fig. 4.

    Paper (Sec. 4): "In the fully filtered case (bottom row) there is no need to combine the different elements of
    the sequence before the readout and the attention matrices are nearly uniform"; caption of Fig. 4: "When $k$
    decreases one sees the emergence of attention blocks of size" at most about 2^(ℓ−k).

    Rule, on the MLMs of every k_train of the grid: for 1 ≤ k < ℓ, in at least one layer the share of the attention
    that queries pay to the other leaves (off the diagonal: a query's attention to itself, always inside its block,
    is not counted) kept inside the query's own block of 2^(ℓ−k) leaves (its level-k subtree) is at least halfway
    from uniform attention's, (2^(ℓ−k) − 1) / (2^ℓ − 1), to a block-diagonal map's, 1 (:func:`_block_needed`); the
    model of k = ℓ, if in the grid, is closer to uniform attention than every other model (mean total-variation
    distance over layers and rows). Null hypothesis: no layer keeps that share, or the k = ℓ model is no closer to
    uniform than another. Noise: the sampling error of the maps over their ``num_samples`` sequences
    (:func:`_share_noise`, :func:`_distance_to_uniform_noise`; two models of the same inputs: summed). Not run
    without a model of k ≥ 1 (the ``quick`` preset trains none)."""
    return _blocks(data, structureless_top=True)


@_figure("11", "attention/classifier/attention.json", "classifier_attention",
         "(App. E.5) Root classifiers trained on data filtered at k also attend within blocks of about 2^(ℓ−k) "
         "leaves.",
         "every 1 ≤ k_train < ℓ: in some layer, the share of the attention to other leaves (off the diagonal) inside "
         "the query's block of 2^(ℓ−k) leaves is at least halfway from uniform's to block-diagonal's (Fig. 4)",
         keys=("models",))
def _check_classifier_blocks(data: dict, out: Path) -> tuple:
    """Fig. 11 (App. E.5).

    Paper (App. E.5): "As in the masked language modeling task, one immediately notices the emergence of blocks of
    size" about 2^(ℓ−k).

    Rule: the block rule of Fig. 4 (:func:`_check_attention_blocks`, with its null hypothesis and noise) on the root
    classifiers of every 1 ≤ k_train < ℓ (the paper claims no pattern for k = ℓ there)."""
    return _blocks(data, structureless_top=False)


# ---------------------------------------------------------------- Fig. 12: further probes


@_figure("12 (left)", "probe/probe_ends.json", "probe",
         "(App. E.7 left) Probes trained on the first and last positions only lose some accuracy but still show "
         "the layers climbing the tree.",
         f"layer j ≥ 1: every level above its reach at least {CHANGE} below the highest level within its reach; "
         f"every ancestor read at least {CHANGE} better by some layer than by the embedding (layer 0)",
         keys=("depth", "layers", "levels", "accuracy", "chance"))
def _check_probes_ends(data: dict, out: Path) -> tuple:
    """Fig. 12, left (App. E.7).

    Paper (App. E.7): "While some accuracy is lost, since the readout cannot fully disentangle the positional
    information from the semantic one in positions that were never seen at training, the sequential effect is still
    evident."

    Rule, on the probes trained on the first and last positions and tested on all of them: the sequential effect of
    Fig. 3b without its absolute margin over chance (the accuracy "is lost") — every layer j ≥ 1 reads each level
    above its reach at least :data:`CHANGE` below the highest level within its reach (:func:`_climb`) — and the
    layers add what the embedding lacks: every ancestor is read at least :data:`CHANGE` better by its best layer
    than by the embedding (layer 0; ``gain_over_embedding``); not run when layer 0 was not probed. Which layer reads
    each ancestor best is recorded. Null hypothesis: some layer reads a level above its reach no worse than its
    highest reachable level − :data:`CHANGE`, or some ancestor is read no better than by the embedding + :data:`CHANGE`.
    Noise: the probe accuracies' standard errors on ``num_test`` sequences (two probes of the same sequences:
    summed)."""
    layers = list(data["layers"])
    measured = _probe_measured(data)
    if 0 not in layers:
        return measured, None, "the embedding (layer 0) was not probed: the climb from it cannot be read"
    accuracy = np.asarray(data["accuracy"], dtype=float)  # (P, V)
    embedding = accuracy[layers.index(0)]  # (V,)
    margins = Margins()
    _climb(data, margins, high=False)
    gains = {}
    for column, level in enumerate(data["levels"]):
        best = int(np.nanargmax(accuracy[:, column]))
        gains[f"level {level}"] = accuracy[best, column] - embedding[column]
        noise = 0.0 if layers[best] == 0 else _difference_noise(  # the embedding against itself: one number
            _probe_noise(data, accuracy[best, column]), _probe_noise(data, embedding[column]), same_inputs=True)
        margins.at_least(f"level {level}: layer {layers[best]} ≥ the embedding + {CHANGE}", accuracy[best, column],
                         embedding[column] + CHANGE, noise)
    measured["gain_over_embedding"] = _round(gains, 3)
    return _result(measured, margins)


@_figure("12 (right)", "probe/probe_filtered.json", "probe_filtered",
         "(App. E.7 right) An MLM trained on data filtered at k recovers ancestors up to level k and not the "
         "filtered levels above it, the root included.",
         f"model k: levels m ≥ k at ≥ chance + {PROBE_MARGIN}; levels 0 ≤ m < k at least {CHANGE} below the "
         "k_train = 0 model", keys=("models",))
def _check_filtered_probes(data: dict, out: Path) -> tuple:
    """Fig. 12, right (App. E.7).

    Paper (App. E.7): "a model trained of filtered data can only accurately recover ancestors up to the level in
    which filtering kicks in."

    Rule, on the probes of the complete encoding of the MLM of each k_train on k = 0 data: for every model of k ≥ 1,
    every probed level m ≥ k is recovered (accuracy ≥ chance + :data:`PROBE_MARGIN`) and every level above the
    filtering, 0 ≤ m < k (the root included), is read at least :data:`CHANGE` worse than by the k_train = 0 model.
    Null hypothesis: some level m ≥ k is read at chance + :data:`PROBE_MARGIN` or less, or some level above the
    filtering no worse than by the k_train = 0 model − :data:`CHANGE`. Noise: a probe accuracy's standard error on
    its ``num_test`` sequences; for the gap between two models, whose probes read the same test sequences, the sum
    of both. Not run without both a k_train = 0 model and one of k ≥ 1."""
    models = {m["model_filter_level"]: m for m in data["models"]}
    if 0 not in models or not any(k >= 1 for k in models):
        return {}, None, "the grid lacks the k_train = 0 model or a filtered one"
    reference = dict(zip(models[0]["levels"], models[0]["accuracy"][0]))
    measured, margins = {}, Margins()
    for k, model in sorted(models.items()):
        accuracy = dict(zip(model["levels"], model["accuracy"][0]))
        chance = dict(zip(model["levels"], model["chance"]))
        measured[f"k_train={k}"] = {f"level {m}": a for m, a in accuracy.items()}
        if k == 0:
            continue
        for m, value in accuracy.items():
            error = _probe_noise(model, value)
            if m >= k:
                margins.at_least(f"k_train={k}, level {m} ≥ chance + {PROBE_MARGIN}", value, chance[m] + PROBE_MARGIN,
                                 error)
            elif m in reference:
                noise = _difference_noise(error, _probe_noise(models[0], reference[m]), same_inputs=True)
                margins.at_most(f"k_train={k}, level {m} ≤ k_train=0's − {CHANGE}", value, reference[m] - CHANGE,
                                noise)
    return _result(_round(measured, 3), margins)


# ---------------------------------------------------------------- all of them


def check_all(out, preset: Preset | None = None) -> list:
    """The :class:`Finding` of every figure of :data:`CHECKS` in the reproduction folder ``out``, in figure order
    (``preset``: see :meth:`FigureCheck.__call__`)."""
    return [check(out, preset) for check in CHECKS]


def rules_digest() -> str:
    """The first digits of the sha256 of this module's source: the rules a findings file was decided by."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def write_findings(out, preset: Preset | None = None) -> tuple:
    """Check every figure (:func:`check_all`) and write ``OUT/findings.json`` (with the reproduction's time and
    machine, :func:`~hf_treelang.reproduce.timing.timing_summary`); returns (findings, path)."""
    findings = check_all(out, preset)
    counts = {verdict: sum(f.verdict == verdict for f in findings) for verdict in VERDICTS}
    path = write_json(Path(out) / FINDINGS_FILE, {"preset": None if preset is None else preset.name,
                                                  "rules": rules_digest(),
                                                  **timing_summary(out, None if preset is None else
                                                                   dataclasses.asdict(preset)),
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


__all__ = ["CHECKS", "FINDINGS_FILE", "Finding", "FigureCheck", "INCONCLUSIVE", "Margins", "NOT_REPRODUCED",
           "NOT_RUN", "REPRODUCED", "VERDICTS", "check_all", "describe", "write_findings"]
