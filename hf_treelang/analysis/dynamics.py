"""Learning dynamics from a run's BP-KL history (paper Fig. 1c/d, Fig. 2b, Fig. 3a, App. E.4).

The BP-KL training callback logs, at every evaluation, ``kl_bp_k{k}`` = mean D_KL(BP_k ‖ model) for every
k = 0 … ℓ, ``acc_ktest{k}`` = the model's accuracy on test data of filter level k and ``bp_acc_ktest{k}`` = the
accuracy of the matched oracle BP_{k_train} on the same data (keys may carry the Trainer's ``eval_`` prefix). This
module turns that history into the KL-to-BP_k curves (the sequential alignment: BP_ℓ first, BP_0 last when
k_train = 0) and the k_test accuracy "staircase" with the BP reference lines. A causal run (next-leaf prediction)
also logs ``kl_position{i}``, the KL to the matched BP_{k_train} at leaf position i (its mean over positions is
``kl_bp_k{k_train}``); those become a heat map, positions × evaluations, with the tree's block boundaries marked: which
positions (the ones that close a subtree, the ones that open one) are learned first.

The callback also logs ``mass_on_special_tokens``, the probability the model put outside the q symbols (a run of
another architecture, whose logits also cover the special ids; 0 for a TreeLang model): its curve is kept beside the
KLs, which are over the renormalised symbol distribution.

A history is read from the callback's JSON file, from a ``trainer_state.json`` (its ``log_history``) or from a run
folder holding either. Several runs (the same training over several model seeds) are summarised together by
:func:`seed_summary`: how far each seed's alignment sequence, climb times and final accuracy spread.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hf_treelang.core.noise import Z, invalid_error, told_apart
from hf_treelang.plotting import draw_block_boundaries, level_color, pyplot, save_figure
from hf_treelang.jsonio import read_json_object
from hf_treelang.train.folders import RUN_CONFIG, check_run_complete

from .io import check_output_dir, cli_error, prepare_output, write_json

_KL = re.compile(r"^(?:eval_)?kl_bp_k(\d+)$")
_ACC = re.compile(r"^(?:eval_)?acc_ktest(\d+)$")
_BP_ACC = re.compile(r"^(?:eval_)?bp_acc_ktest(\d+)$")
_MATCH = re.compile(r"^(?:eval_)?match_bp_k(\d+)$")
_KL_SE = re.compile(r"^(?:eval_)?kl_se_bp_k(\d+)$")
_KL_GAP_SE = re.compile(r"^(?:eval_)?kl_gap_se_bp_k(\d+)$")  # hf_treelang.train.callbacks.KL_GAP_SE_KEY
_SPEARMAN = re.compile(r"^(?:eval_)?spearman_bp_k(\d+)$")
_POSITION = re.compile(r"^(?:eval_)?kl_position(\d+)$")  # hf_treelang.train.callbacks.KL_POSITION_KEY
_IMPOSSIBLE = re.compile(r"^(?:eval_)?impossible_bp_k(\d+)$")  # hf_treelang.train.callbacks.IMPOSSIBLE_KEY
_BP_IMPOSSIBLE = re.compile(r"^(?:eval_)?bp_impossible_ktest(\d+)$")
_SPECIAL_MASS = ("eval_mass_on_special_tokens", "mass_on_special_tokens")  # hf_treelang.train.callbacks.SPECIAL_MASS_KEY
_HISTORY_FILE_HINTS = ("bp_kl", "bpkl", "bp_history", "kl_history", "history")


@dataclass
class DynamicsResult:
    """Curves of one run, evaluation by evaluation.

    Attributes:
        steps: (E,) optimisation step of each evaluation.
        epochs: (E,) epoch of each evaluation (NaN where not logged).
        kl: k_bp -> (E,) mean D_KL(BP_k ‖ model) on in-sample inputs.
        kl_se: k_bp -> (E,) the standard error of that mean over the in-sample sequences (``kl_se_bp_k{k}``; empty
            for a history that does not log it): how far two KL curves can be apart by sampling alone.
        kl_gap_se: k_bp -> (E,) the paired standard error of KL_k less the closest BP's KL at that evaluation, over
            the same sequences (``kl_gap_se_bp_k{k}``, 0 for the closest; empty for a history that does not log it):
            whether the closest BP is closer than another by more than sampling (:meth:`within_noise_of_closest`).
        accuracy: k_test -> (E,) the model's accuracy on test data of filter level k_test.
        bp_accuracy: k_test -> the matched BP accuracy on the same data (the dashed reference lines).
        match: k_bp -> (E,) argmax agreement with BP_k (App. E.4), when logged.
        spearman: k_bp -> (E,) mean Spearman correlation with BP_k (App. E.4), when logged.
        source: the file the history was read from.
        num_test: test sequences per k_test behind the model's accuracies, when the run's ``metrics.json`` says.
        reference_sizes: k_test -> sequences behind BP's reference accuracy, when the run's ``metrics.json`` says.
        kl_position: (E, 2**ℓ) mean D_KL(BP_{k_train}(x_i | x_<i) ‖ model) per leaf position i (a causal run), NaN
            where an evaluation did not log it; ``None`` for a run that logs no positions (root, MLM).
        num_in_sample: inputs behind the KL, argmax-agreement and Spearman curves (one per in-sample sequence; one
            per leaf of each sequence for next-leaf prediction), when :func:`oracle_baselines` filled it.
        bp_disagreement: k_bp -> fraction of those inputs on which BP_k's argmax differs from BP_{k_train}'s: how
            far apart the two ``match`` curves can be at most (:func:`oracle_baselines`; empty when not filled).
        chance_accuracy: k_test -> accuracy of always predicting the most frequent label of BP's reference inputs
            of that k_test (the most-frequent-symbol level; :func:`oracle_baselines`; empty when not filled).
        mass_on_special_tokens: (E,) the mean probability the model put outside the q symbols, NaN where an
            evaluation did not log it; ``None`` for a history that never logs it.
        impossible: k_bp -> (E,) the fraction of in-sample inputs BP_k gives probability zero (a Random Hierarchy
            Model's BP_k below k_train), left out of its KL; such a BP_k is not a candidate of :attr:`closest_bp`,
            whose KLs must be means over the same inputs. Empty for the paper's grammars.
        bp_impossible: k_test -> the fraction of BP's reference inputs the matched BP gives probability zero, left
            out of its accuracy (a Random Hierarchy Model's k_test > k_train). Empty for the paper's grammars.
        arity: s, the children of every node of the run's trees (its config.json or run_config.json), ``None``
            where the history has no run folder beside it (the heat map then assumes a binary tree).
    """

    steps: np.ndarray
    epochs: np.ndarray
    kl: dict
    accuracy: dict
    bp_accuracy: dict
    match: dict = field(default_factory=dict)
    spearman: dict = field(default_factory=dict)
    kl_se: dict = field(default_factory=dict)
    kl_gap_se: dict = field(default_factory=dict)
    source: str = ""
    num_test: int | None = None
    reference_sizes: dict = field(default_factory=dict)
    kl_position: np.ndarray | None = None
    num_in_sample: int | None = None
    bp_disagreement: dict = field(default_factory=dict)
    chance_accuracy: dict = field(default_factory=dict)
    mass_on_special_tokens: np.ndarray | None = None
    impossible: dict = field(default_factory=dict)
    bp_impossible: dict = field(default_factory=dict)
    arity: int | None = None

    @property
    def closest_bp(self) -> list:
        """At each evaluation, the k whose BP_k the model is closest to (smallest KL) among the BP_k defined on every
        in-sample input (:attr:`impossible`); empty without KL curves."""
        ks = sorted(k for k in self.kl if not np.nansum(self.impossible.get(k, 0.0)) > 0)
        if not ks:
            return []
        table = np.stack([self.kl[k] for k in ks])  # (K, E)
        table = np.where(np.isfinite(table), table, np.inf)
        return [ks[i] for i in table.argmin(0)]

    @property
    def alignment_sequence(self) -> list:
        """The successive closest BP_k along training, repeats collapsed (e.g. [4, 3, 2, 1, 0] in Fig. 1c/d)."""
        sequence = []
        for k in self.closest_bp:
            if not sequence or sequence[-1] != k:
                sequence.append(k)
        return sequence

    def half_kl_steps(self) -> list:
        """Per position, the first step at which its KL is at most half its first logged value (``None`` where it
        never is, or starts at 0); empty without per-position KL."""
        if self.kl_position is None:
            return []
        steps = []
        for column in self.kl_position.T:  # (E,) one position along training
            finite = np.flatnonzero(np.isfinite(column))
            if finite.size == 0 or column[finite[0]] <= 0:  # nothing to learn from the first evaluation on
                steps.append(None)
                continue
            reached = finite[column[finite] <= 0.5 * column[finite[0]]]
            steps.append(int(self.steps[reached[0]]) if reached.size else None)
        return steps

    def climb_times(self) -> dict:
        """k -> t_k, the first evaluation step from which the closest BP_k' stays at k' <= k for every later
        evaluation (``None`` where the closest BP at the last evaluation is above k), for every k of the KL curves.

        The climb down the hierarchy as one number per level: the paper's ordering t_ℓ < … < t_0 (BP_ℓ reached
        first, BP_0 last) is what several seeds can confirm or refute. A return to a larger k after reaching k moves
        t_k to after that return. By this definition t_{k+1} <= t_k wherever both exist (staying at k' <= k implies
        staying at k' <= k + 1): the paper's order is the strict one, every level left at its own evaluation.
        """
        closest = self.closest_bp  # (E,)
        times = {}
        for k in sorted(self.kl):
            above = [i for i, c in enumerate(closest) if c > k]
            start = above[-1] + 1 if above else 0  # the first evaluation after the last one closest to a BP above k
            times[k] = int(self.steps[start]) if start < len(closest) else None
        return times

    def closest_at_end(self, count: int = 3) -> list:
        """The closest BP_k at the last ``count`` evaluations (fewer when the run has fewer): whether a run has
        settled on a BP or still moves between two at the end."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"`count` must be an int >= 1, got {count!r}")
        return self.closest_bp[-count:]

    def within_noise_of_closest(self, z: float = Z) -> list:
        """At each evaluation, the levels k whose KL is not told apart from the closest BP's
        (:func:`hf_treelang.core.noise.told_apart`: within ``z`` paired standard errors, :attr:`kl_gap_se`), the
        closest among them, sorted: the BP_k a run is not told apart from at this sample size. Only the BP_k defined
        on every in-sample input are candidates (as for :attr:`closest_bp`): a Random Hierarchy Model's BP_k below
        k_train is never listed. ``None`` at an evaluation without the paired errors (a history without
        ``kl_gap_se_bp_k*``, one in-sample sequence), with an error that is not a standard error (infinite, negative) or
        whose errors were taken against another closest BP."""
        if isinstance(z, bool) or not isinstance(z, (int, float)) or not math.isfinite(z) or z < 0:
            raise ValueError(f"`z` must be a finite number >= 0 (standard errors), got {z!r}")
        out = []
        for i, closest in enumerate(self.closest_bp):
            errors = {k: float(values[i]) for k, values in self.kl_gap_se.items() if not np.isnan(values[i])}
            candidates = [k for k in self.kl if k in errors and np.isfinite(self.kl[k][i])]
            if errors.get(closest) != 0.0 or not candidates or any(invalid_error(e) for e in errors.values()):
                out.append(None)
                continue
            base = self.kl[closest][i]
            out.append(sorted(k for k in candidates if not told_apart(self.kl[k][i] - base, errors[k], z)))
        return out

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "steps": self.steps,
            "epochs": self.epochs,
            "kl_bp": {f"k{k}": v for k, v in sorted(self.kl.items())},
            **({"kl_bp_se": {f"k{k}": v for k, v in sorted(self.kl_se.items())}} if self.kl_se else {}),
            **({"kl_bp_gap_se": {f"k{k}": v for k, v in sorted(self.kl_gap_se.items())},
                "within_noise_of_closest": self.within_noise_of_closest()} if self.kl_gap_se else {}),
            "accuracy_ktest": {f"k{k}": v for k, v in sorted(self.accuracy.items())},
            "bp_accuracy_ktest": {f"k{k}": v for k, v in sorted(self.bp_accuracy.items())},
            "match_bp": {f"k{k}": v for k, v in sorted(self.match.items())},
            "spearman_bp": {f"k{k}": v for k, v in sorted(self.spearman.items())},
            "final": {
                "kl_bp": {f"k{k}": _last_finite(v) for k, v in sorted(self.kl.items())},
                "accuracy_ktest": {f"k{k}": _last_finite(v) for k, v in sorted(self.accuracy.items())},
            },
            "closest_bp": self.closest_bp,
            "alignment_sequence": self.alignment_sequence,
            "climb_times": {f"k{k}": t for k, t in self.climb_times().items()},
            "closest_at_last_3": self.closest_at_end(3),
            "num_test": self.num_test,
            "bp_reference_size_ktest": {f"k{k}": n for k, n in sorted(self.reference_sizes.items())},
            "kl_position": self.kl_position,  # (E, 2**l) or null
            "half_kl_step_per_position": self.half_kl_steps() if self.kl_position is not None else None,
            "num_in_sample": self.num_in_sample,
            "bp_argmax_disagreement": {f"k{k}": v for k, v in sorted(self.bp_disagreement.items())},
            "chance_accuracy_ktest": {f"k{k}": v for k, v in sorted(self.chance_accuracy.items())},
            "mass_on_special_tokens": self.mass_on_special_tokens,  # (E,) or null
            **({"impossible_bp": {f"k{k}": v for k, v in sorted(self.impossible.items())}} if self.impossible else {}),
            **({"bp_impossible_ktest": {f"k{k}": v for k, v in sorted(self.bp_impossible.items())}}
               if self.bp_impossible else {}),
        }


def _entries(data) -> list | None:
    """The list of logged dicts inside a history JSON document, or None if it holds none."""
    if isinstance(data, list):
        return [e for e in data if isinstance(e, dict)]
    if isinstance(data, dict):
        for key in ("log_history", "history", "evaluations", "entries", "records"):
            if isinstance(data.get(key), list):
                return [e for e in data[key] if isinstance(e, dict)]
    return None


def _has_curves(entry: dict) -> bool:
    return any(_KL.match(key) or _ACC.match(key) for key in entry)


def _read(path: Path) -> list | None:
    try:
        entries = _entries(json.loads(path.read_text()))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return None
    if entries is None:
        return None
    entries = [e for e in entries if _has_curves(e)]
    return entries or None


def find_history(run) -> tuple[Path, list]:
    """Locate and read the BP-KL history of a run folder (or a JSON file); errors name what was expected."""
    expected = ("a BP-KL history: the JSON file written by the BP-KL callback, a trainer_state.json, or a run folder "
                "holding one, with entries that log kl_bp_k<k> / acc_ktest<k>")
    if run is None or str(run) == "":
        raise ValueError(f"run must be {expected}, got {run!r}")
    path = Path(run)
    if not path.exists():
        raise ValueError(f"run {str(path)!r} does not exist; expected {expected}")
    if path.is_dir():  # a training run's folder must be complete; its history file can be read while it runs
        try:
            check_run_complete(path)
        except ValueError as error:
            raise ValueError(f"{error}; to plot the curves of an unfinished run so far, pass its history file "
                             f"{str(path / 'eval_history.json')!r}") from None
    if path.is_file():
        entries = _read(path)
        if entries is None:
            raise ValueError(f"run {str(path)!r} holds no BP-KL curves; expected {expected}")
        return path, entries
    candidates = sorted(path.glob("*.json"))
    candidates.sort(key=lambda p: (not any(h in p.name.lower() for h in _HISTORY_FILE_HINTS),
                                   p.name != "trainer_state.json", p.name))
    for candidate in candidates:
        entries = _read(candidate)
        if entries is not None:
            return candidate, entries
    contents = "it is empty" if not any(path.iterdir()) else f"none of its {len(candidates)} JSON files has them"
    raise ValueError(f"run {str(path)!r}: {contents}; expected {expected}")


def learning_dynamics(run) -> DynamicsResult:
    """Read a run's BP-KL history into curves (see :class:`DynamicsResult`)."""
    source, entries = find_history(run)
    # Several log lines may share a step (the Trainer logs eval metrics and the callback logs its own): merge them.
    merged: dict = {}
    for index, entry in enumerate(entries):
        step = entry.get("step", entry.get("global_step", index))
        merged.setdefault(int(step), {}).update(entry)
    steps = np.array(sorted(merged), dtype=np.int64)
    rows = [merged[s] for s in steps]

    def series(pattern) -> dict:
        found = {}
        for key in sorted({k for row in rows for k in row}):
            match = pattern.match(key)
            if match:
                found[int(match.group(1))] = np.array([float(row[key]) if row.get(key) is not None else np.nan for row in rows])
        return found

    bp_accuracy = {}
    for k, values in series(_BP_ACC).items():
        finite = values[np.isfinite(values)]
        if finite.size:
            bp_accuracy[k] = float(finite[-1])
    epochs = np.array([float(row["epoch"]) if row.get("epoch") is not None else np.nan for row in rows])
    num_test, reference_sizes = _sizes(source.parent / "metrics.json")
    positions = series(_POSITION)
    kl_position = None
    if positions:
        kl_position = np.full((len(rows), max(positions) + 1), np.nan)  # (E, 2**l)
        for i, values in positions.items():
            kl_position[:, i] = values
    mass = None
    if any(key in row for row in rows for key in _SPECIAL_MASS):
        mass = np.array([_first_number(row, _SPECIAL_MASS) for row in rows])  # (E,)
    return DynamicsResult(
        steps=steps,
        epochs=epochs,
        kl=series(_KL),
        accuracy=series(_ACC),
        bp_accuracy=bp_accuracy,
        match=series(_MATCH),
        spearman=series(_SPEARMAN),
        kl_se=series(_KL_SE),
        kl_gap_se=series(_KL_GAP_SE),
        source=str(source),
        num_test=num_test,
        reference_sizes=reference_sizes,
        kl_position=kl_position,
        mass_on_special_tokens=mass,
        impossible=series(_IMPOSSIBLE),
        bp_impossible={k: _last_finite(values) for k, values in series(_BP_IMPOSSIBLE).items()},
        arity=_arity(source.parent),
    )


def _arity(folder: Path) -> int | None:
    """s of the run in ``folder``: its config.json's ``arity`` (a TreeLang model), else its run_config.json's data
    arguments (2 without ``arity``); ``None`` where neither file says."""
    config = read_json_object(folder / "config.json") if (folder / "config.json").is_file() else None
    if isinstance(config, dict) and isinstance(config.get("arity"), int):
        return int(config["arity"])
    run_config = read_json_object(folder / RUN_CONFIG) if (folder / RUN_CONFIG).is_file() else None
    if isinstance(run_config, dict) and isinstance(run_config.get("data_args"), dict):
        arity = run_config["data_args"].get("arity")
        return int(arity) if isinstance(arity, int) else 2
    return None


def _first_number(row: dict, keys: tuple) -> float:
    """The first of ``keys`` that ``row`` logs as a number, as a float; NaN when none does."""
    for key in keys:
        value = row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return float("nan")


def oracle_baselines(callback) -> dict:
    """What a run's history does not hold about its own evaluation inputs, from the run's BP-KL callback
    (:class:`~hf_treelang.train.callbacks.BPKLCallback`, e.g. :func:`hf_treelang.train.loop.bp_callback_for` of the
    run's data: the same inputs as in training): ``num_in_sample``, ``bp_disagreement`` and ``chance_accuracy`` of
    :class:`DynamicsResult` (``dataclasses.replace(result, **oracle_baselines(callback))``).

    They say what the curves can resolve: two BP_k whose argmax differ on few in-sample inputs cannot be told apart
    by the model's argmax agreement, and a k_test whose BP accuracy is near the most-frequent-symbol level is
    "reached" by a model that has learned nothing (:mod:`hf_treelang.reproduce.findings`, Fig. 1c/d and 3a).
    """
    targets = callback.prepare()
    q = callback.grammar.num_symbols
    argmax = {k: np.asarray(marginals).reshape(-1, q).argmax(-1) for k, marginals in targets.marginals.items()}
    matched = argmax[callback.k_train]  # (n,) one prediction per row
    chance = {}
    for k_test, data in targets.tests.items():
        labels = np.asarray(callback.reference(k_test, data, callback.test_sets[k_test][2]).labels).reshape(-1)
        chance[k_test] = float(np.bincount(labels, minlength=q).max() / labels.size)
    return {"num_in_sample": int(matched.size),
            "bp_disagreement": {k: float(np.mean(a != matched)) for k, a in sorted(argmax.items())},
            "chance_accuracy": chance}


def _sizes(path: Path) -> tuple:
    """(num_test, {k_test: BP reference size}) from a run's ``metrics.json``; (None, {}) where it does not say."""
    try:
        summary = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None, {}
    if not isinstance(summary, dict):
        return None, {}
    num_test = summary.get("num_test")
    sizes = summary.get("bp_reference_size")
    sizes = {int(k): int(n) for k, n in sizes.items()} if isinstance(sizes, dict) else {}
    return (int(num_test) if isinstance(num_test, int) else None), sizes


def _last_finite(values) -> float | None:
    """The last finite value of a curve; None when it has none."""
    values = np.asarray(values, dtype=float)
    finite = values[np.isfinite(values)]
    return float(finite[-1]) if finite.size else None


def _spread(values: list) -> dict:
    """Mean and sample standard deviation (ddof=1) of the values that exist; std None with fewer than two."""
    present = np.array([v for v in values if v is not None], dtype=float)
    return {"mean": float(present.mean()) if present.size else None,
            "std": float(present.std(ddof=1)) if present.size > 1 else None,
            "runs": int(present.size)}


def seed_summary(results: list, names: list) -> dict:
    """The spread of several runs of one training (e.g. the default run over 5 model seeds).

    Per run: its name, alignment sequence, closest BP_k at the last 3 evaluations, climb times
    (:meth:`DynamicsResult.climb_times`), final accuracy on k_test = 0 (the smallest k_test logged when 0 is not)
    with BP's reference accuracy there and the gap BP − model (how far the run ends from the optimum: an MLM's
    accuracy stays well below 1), and final KL to BP_{min k}. Over the runs: mean and sample standard deviation
    (ddof=1; None with one value) of that accuracy, gap and KL and of each t_k (over the runs where it exists);
    the number of runs whose closest BP at the last 3 evaluations is their smallest k throughout (BP_0 for
    k_train = 0: the run has settled on the exact BP); and the number whose climb times are in the paper's order
    t_ℓ < … < t_0: every t_k exists and t_{k+1} < t_k for every k (every BP_k was the closest in turn; a run that
    skips a level, e.g. 4 → 3 → 2 → 0, has t_1 = t_0 and is not counted).
    """
    results, names = list(results), list(names)
    if not results:
        raise ValueError("seed_summary needs at least one run")
    if len(names) != len(results):
        raise ValueError(f"seed_summary needs one name per run: got {len(names)} names for {len(results)} runs")
    runs = []
    for name, result in zip(names, results):
        times = result.climb_times()  # k -> step | None
        k_test = 0 if 0 in result.accuracy else min(result.accuracy, default=None)
        k_bp = min(result.kl, default=None)
        last_3 = result.closest_at_end(3)
        accuracy = None if k_test is None else _last_finite(result.accuracy[k_test])
        reference = result.bp_accuracy.get(k_test)
        ordered_times = [times[k] for k in sorted(times)]  # t_0, t_1, ... (ascending k)
        complete = bool(times) and all(t is not None for t in ordered_times)
        runs.append({
            "name": str(name),
            "source": result.source,
            "evaluations": int(len(result.steps)),
            "alignment_sequence": result.alignment_sequence,
            "closest_at_last_3": last_3,
            "climb_times": {f"k{k}": t for k, t in times.items()},
            "k_test": k_test,
            "final_accuracy": accuracy,
            "bp_accuracy": reference,
            "accuracy_gap": None if accuracy is None or reference is None else float(reference - accuracy),
            "k_bp": k_bp,
            "final_kl": None if k_bp is None else _last_finite(result.kl[k_bp]),
            "settled_at_min_bp": bool(last_3) and all(k == k_bp for k in last_3),
            "climb_times_ordered": complete and all(a > b for a, b in zip(ordered_times, ordered_times[1:])),
        })
    levels = sorted({k for result in results for k in result.kl})
    return {
        "num_runs": len(runs),
        "runs": runs,
        "final_accuracy": _spread([r["final_accuracy"] for r in runs]),
        "accuracy_gap": _spread([r["accuracy_gap"] for r in runs]),
        "k_test": sorted({r["k_test"] for r in runs if r["k_test"] is not None}),
        "final_kl": _spread([r["final_kl"] for r in runs]),
        "k_bp": sorted({r["k_bp"] for r in runs if r["k_bp"] is not None}),
        "runs_settled_at_min_bp": sum(r["settled_at_min_bp"] for r in runs),
        "runs_climb_times_ordered": sum(r["climb_times_ordered"] for r in runs),
        "climb_times": {f"k{k}": _spread([r["climb_times"].get(f"k{k}") for r in runs]) for k in levels},
    }


LEVEL_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "h")


def level_style(k: int, k_max: int) -> dict:
    """The line of BP_k: its colour, its own marker, and a lower k drawn above a higher one, so that curves that
    coincide (an MLM's KL to BP_0 and to BP_1 late in training) stay visible instead of the last one hiding the
    first."""
    return {"color": level_color(k, k_max), "marker": LEVEL_MARKERS[k % len(LEVEL_MARKERS)], "markersize": 3.5,
            "markerfacecolor": "none" if k % 2 else level_color(k, k_max), "zorder": 3 + k_max - k,
            "lw": 1.6 if k == 0 else 1.1}


def plot_dynamics(result: DynamicsResult, title: str = ""):
    """KL-to-BP_k curves and the k_test accuracy staircase (plus argmax agreement and Spearman when logged)."""
    plt = pyplot()
    panels = [p for p in ("kl", "accuracy", "match", "spearman") if getattr(result, p)]
    if not panels:
        raise ValueError(f"history {result.source!r} has no curves to plot")
    cols = 2 if len(panels) == 4 else len(panels)
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 3.8 * rows), squeeze=False)
    x = np.where(result.steps > 0, result.steps, 0.5)  # step 0 (before training) drawn at 0.5 on the log axis
    k_max = max([*result.kl, *result.accuracy, 1])
    for ax, panel in zip(axes.flat, panels):
        ax.set_xscale("log")
        ax.set_xlabel("training step (step 0 at 0.5)")
        if panel == "kl":
            for k, values in sorted(result.kl.items()):
                left_out = np.nanmax(result.impossible[k]) if k in result.impossible else 0.0
                where = f" ({1 - left_out:.0%} of inputs: BP$_{{{k}}}$ undefined on the rest)" if left_out > 0 else ""
                ax.plot(x, values, label=f"BP$_{{{k}}}${where}", **level_style(k, k_max))
            ax.set_yscale("log")
            ax.set_ylabel("mean $D_{KL}$(BP$_k$ ‖ model)")
            ax.set_title("alignment with BP$_k$ (Fig. 1c/d)", fontsize=9)
        elif panel == "accuracy":
            for k, values in sorted(result.accuracy.items()):
                color = level_color(k, k_max)
                ax.plot(x, values, marker=".", color=color, label=f"$k_{{test}}$={k}")
                if k in result.bp_accuracy:
                    ax.axhline(result.bp_accuracy[k], color=color, ls="--", lw=0.9)
            ax.set_ylabel("test accuracy (dashed: BP)")
            sizes = sorted(set(result.reference_sizes.values()))
            on = ""
            if result.num_test and len(sizes) == 1:
                on = f"\nmodel on {result.num_test}, BP on {sizes[0]} sequences per $k_{{test}}$"
            ax.set_title(f"accuracy per $k_{{test}}$ (Fig. 2b, 3a){on}", fontsize=9)
        else:
            for k, values in sorted(getattr(result, panel).items()):
                ax.plot(x, values, label=f"BP$_{{{k}}}$", **level_style(k, k_max))
            what = "argmax agreement" if panel == "match" else "mean Spearman correlation"
            ax.set_ylabel(f"{what} with BP$_k$")
            ax.set_title(f"{what} (App. E.4)", fontsize=9)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_positions(result: DynamicsResult, title: str = ""):
    """The KL to the matched BP per leaf position over training: a heat map with the positions on x, one row per
    evaluation (labelled by its step, training going up), a log colour scale, and the boundaries of the tree's
    subtrees of levels 1..3 as vertical lines."""
    if result.kl_position is None:
        raise ValueError(f"history {result.source!r} logs no per-position KL (kl_position<i>: causal runs only)")
    from matplotlib.colors import LogNorm

    plt = pyplot()
    matrix = result.kl_position  # (E, L)
    num_evaluations, num_leaves = matrix.shape
    positive = matrix[np.isfinite(matrix) & (matrix > 0)]
    top = float(positive.max()) if positive.size else 1.0
    floor = max(float(positive.min()), top * 1e-6) if positive.size else 1e-6  # a KL of 0 drawn at the floor
    shown = np.where(np.isfinite(matrix), np.clip(matrix, floor, None), np.nan)
    fig, ax = plt.subplots(figsize=(max(5.0, min(12.0, 0.18 * num_leaves + 2.5)),
                                    max(2.5, min(9.0, 0.22 * num_evaluations + 1.5))))
    image = ax.imshow(shown, cmap="magma", norm=LogNorm(vmin=floor, vmax=max(top, floor * 10)), aspect="auto",
                      origin="lower", interpolation="nearest")
    arity = 2 if result.arity is None else result.arity
    depth = int(round(np.log(num_leaves) / np.log(arity)))
    if arity**depth == num_leaves:
        draw_block_boundaries(ax, depth, horizontal=False, color="white", lw=2.0, alpha=0.9, arity=arity)
    ax.set_xticks(list(range(0, num_leaves, max(1, num_leaves // 16))))
    every = max(1, num_evaluations // 12)
    ax.set_yticks(list(range(0, num_evaluations, every)))
    ax.set_yticklabels([str(int(s)) for s in result.steps[::every]])
    ax.tick_params(labelsize=6, length=2)
    ax.set_xlabel("leaf position $i$ (lines: subtrees of levels 1–3)")
    ax.set_ylabel("training step")
    bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
    bar.set_label("mean $D_{KL}$(BP$_{k_{train}}$($x_i$ | $x_{<i}$) ‖ model)", fontsize=7)
    bar.ax.tick_params(labelsize=6)
    ax.set_title("KL to the matched BP per position", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_seeds(results: list, title: str = ""):
    """Which BP_k each run is closest to along training: one row per run, x = step + 1 on a log axis, each
    evaluation a band in the colour of its closest BP_k (up to the next evaluation) with a marker at the evaluation
    itself, so that seeds that climb down the hierarchy at different times, or return to a larger k, stand out."""
    from matplotlib.patches import Patch

    plt = pyplot()
    if not any(result.kl for result in results):
        raise ValueError("no run has KL-to-BP_k curves to draw the closest BP from")
    k_max = max([k for result in results for k in result.kl] + [1])
    fig, ax = plt.subplots(figsize=(7.0, max(2.0, 0.45 * len(results) + 1.4)))
    for row, result in enumerate(results):
        closest = result.closest_bp  # (E,)
        x = result.steps[:len(closest)].astype(float) + 1.0  # (E,) step + 1: step 0 drawn at 1
        ends = np.append(x[1:], x[-1] * 1.15) if len(x) else x  # (E,) each band runs to the next evaluation
        for start, end, k in zip(x, ends, closest):
            ax.barh(row, end - start, left=start, height=0.6, color=level_color(k, k_max), alpha=0.85, lw=0)
        ax.scatter(x, np.full(len(x), row), c=[level_color(k, k_max) for k in closest], s=12, edgecolors="white",
                   linewidths=0.5, zorder=3)
    levels = sorted({k for result in results for k in result.kl})
    ax.legend(handles=[Patch(color=level_color(k, k_max), label=f"BP$_{{{k}}}$") for k in levels], fontsize=7,
              title="closest", title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_xscale("log")
    ax.set_xlabel("training step + 1")
    ax.set_yticks(list(range(len(results))))
    ax.set_yticklabels([f"run {i}" for i in range(len(results))], fontsize=7)
    ax.set_ylim(len(results) - 0.5, -0.5)  # run 0 on top
    ax.set_title(f"closest BP$_k$ along training, {len(results)} runs", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def half_kl_line(result: DynamicsResult) -> str:
    """The console line on the per-position heat map: which positions reach half their initial KL first, which
    last, and how many never do."""
    steps = result.half_kl_steps()
    reached = {i: s for i, s in enumerate(steps) if s is not None}
    if not reached:
        return f"no position reaches half its initial KL to the matched BP (of {len(steps)})"
    first, last = min(reached.values()), max(reached.values())

    def at(step):
        return ",".join(str(i) for i, s in reached.items() if s == step)

    never = len(steps) - len(reached)
    return (f"half the initial KL to the matched BP per position: first at step {first} (positions {at(first)}), last "
            f"at step {last} (positions {at(last)})" + (f"; {never} of {len(steps)} positions never" if never else ""))


def write_outputs(result: DynamicsResult, out_dir, *, name: str = "dynamics", title: str = "") -> dict:
    """Write <name>.png and <name>.json into ``out_dir``, and <name>_positions.png when the run logs the KL per
    position (a causal run)."""
    fig = plot_dynamics(result, title)
    positions = plot_positions(result, title) if result.kl_position is not None else None
    out = prepare_output(out_dir)
    paths = {"figure": save_figure(fig, out / f"{name}.png")}
    if positions is not None:
        paths["positions"] = save_figure(positions, out / f"{name}_positions.png")
    paths["json"] = write_json(out / f"{name}.json", result.to_dict())
    return paths


def _number(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def seed_lines(summary: dict) -> list:
    """The console lines of :func:`seed_summary`: one per run, then one over the runs."""
    lines = []
    for index, entry in enumerate(summary["runs"]):
        sequence = " → ".join(str(k) for k in entry["alignment_sequence"]) or "none"
        last = ",".join(str(k) for k in entry["closest_at_last_3"]) or "none"
        times = " ".join(f"t{key[1:]}={'none' if t is None else t}"
                         for key, t in sorted(entry["climb_times"].items(), key=lambda item: -int(item[0][1:])))
        reference = "" if entry["bp_accuracy"] is None else f" (BP {entry['bp_accuracy']:.3f})"
        lines.append(f"run {index} ({entry['name']}): closest BP_k {sequence}; last 3: {last}; t_k: {times or 'none'}; "
                     f"acc k_test={entry['k_test']} {_number(entry['final_accuracy'])}{reference}; "
                     f"KL BP_{entry['k_bp']} {_number(entry['final_kl'])}")

    def spread(stats):
        return _number(stats["mean"]) + ("" if stats["std"] is None else f" ± {stats['std']:.3f}")

    def level(keys):
        return "/".join(str(k) for k in keys) or "?"

    count = summary["num_runs"]
    gap = "" if summary["accuracy_gap"]["mean"] is None else f" (BP − model {spread(summary['accuracy_gap'])})"
    lines.append(f"over {count} runs: acc k_test={level(summary['k_test'])} {spread(summary['final_accuracy'])}{gap}, "
                 f"KL BP_{level(summary['k_bp'])} {spread(summary['final_kl'])}; BP_{level(summary['k_bp'])} closest "
                 f"at the last 3 evaluations in {summary['runs_settled_at_min_bp']} of {count}; every level "
                 f"closest in turn (t_ℓ < … < t_0) in {summary['runs_climb_times_ordered']} of {count}")
    return lines


def run(args) -> int:
    """``hf-treelang dynamics`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status.

    One run: <name>.png/.json as always. Several runs (e.g. one training over several model seeds): every run's
    files as <name>_<i>.* (i its position on the command line), plus <name>_seeds.json (:func:`seed_summary`) and
    <name>_seeds.png (:func:`plot_seeds`). All runs are read before anything is written.
    """
    runs = [args.run] if isinstance(args.run, (str, Path)) else list(args.run)  # the parser gives a list
    if len(runs) > 1:
        return _run_seeds(args, runs)
    try:
        result = learning_dynamics(runs[0])
        paths = write_outputs(result, args.out, name=args.name, title=args.title)
    except (ValueError, TypeError) as error:
        return cli_error("dynamics", error)
    print(f"read {result.source}: {len(result.steps)} evaluations; closest BP_k along training: "
          f"{result.alignment_sequence}")
    if "positions" in paths:
        print(half_kl_line(result))
    mass = None if result.mass_on_special_tokens is None else _last_finite(result.mass_on_special_tokens)
    if mass:
        print(f"mass on special tokens at the last evaluation: {mass:.3g} (the KLs are over the q symbols, "
              "renormalised)")
    figures = " and ".join(str(paths[key]) for key in ("figure", "positions") if key in paths)
    print(f"wrote {figures} and {paths['json']}")
    return 0


def _run_seeds(args, runs: list) -> int:
    """``hf-treelang dynamics RUN RUN ...``: every run's outputs and the summary over the runs."""
    try:
        check_output_dir(args.out)
        results = [learning_dynamics(run) for run in runs]
        summary = seed_summary(results, [str(run) for run in runs])
        figure = plot_seeds(results, args.title)
        written = []
        for index, result in enumerate(results):
            paths = write_outputs(result, args.out, name=f"{args.name}_{index}", title=args.title)
            written += [paths[key] for key in ("figure", "positions", "json") if key in paths]
        out = prepare_output(args.out)
        written += [save_figure(figure, out / f"{args.name}_seeds.png"),
                    write_json(out / f"{args.name}_seeds.json", summary)]
    except (ValueError, TypeError) as error:
        return cli_error("dynamics", error)
    for line in seed_lines(summary):
        print(line)
    print(f"wrote {len(written)} files into {out}: {', '.join(path.name for path in written)}")
    return 0
