"""What reproduced (hf_treelang.reproduce.findings): every figure's check on hand-written step outputs — one that
passes, one that fails, none when the file is absent — the report's table and findings.json; and the analyses at
laptop speed: --threads and the estimated time of probe and sample-complexity, and the frozen − scratch gap per P
with its spread over seeds."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_treelang import TreeLangConfig, TreeLangForMaskedLM, cli
from hf_treelang.analysis import sample_complexity
from hf_treelang.reproduce import findings
from hf_treelang.reproduce.presets import PRESETS
from hf_treelang.reproduce.report import write_report

DEPTH = 3  # ℓ of the synthetic outputs: 8 leaves, levels 0..3


def _tree_template(depth: int, distance: int) -> list:
    """(L, L) attention to the leaves whose deepest common ancestor with the query is at height ``distance``."""
    index = np.arange(2**depth)
    hits = np.array([[int(i ^ j).bit_length() == distance for j in index] for i in index], dtype=float)
    return (hits / hits.sum(1, keepdims=True)).tolist()


def _uniform(depth: int) -> list:
    return np.full((2**depth, 2**depth), 2.0**-depth).tolist()


def _attention(models: dict, num_samples: int | None = 10_000) -> dict:
    """An attention JSON: ``{k_train: [layer map, ...]}`` (one head each), averaged over ``num_samples`` sequences."""
    return {"models": [{"filter_level": k, "depth": DEPTH, "task": "mlm", "maps": [[m] for m in maps],
                        "num_samples": num_samples} for k, maps in models.items()]}


HIERARCHICAL = [_tree_template(DEPTH, t) for t in (1, 2, 3)]  # App. F's layers: sibling, cousins, other half
UNIFORM = [_uniform(DEPTH)] * 3
SELF_ONLY = [np.eye(2**DEPTH).tolist(), _uniform(DEPTH), _uniform(DEPTH)]  # issue 33: tree distance 0, block mass 1


def _dynamics(closest: list, *, bp_like: bool = True, **fields) -> dict:
    """A dynamics JSON of levels 0..3 whose closest BP_k at each evaluation (steps 0, 10, 20, ...) is ``closest``: KL
    0.1 to it and 0.5 to the others, each KL's paired error against the closest 0.01. Argmax agreement on 1,000
    in-sample inputs, on 30 % of which each BP_k's argmax differs from BP_0's: 0.9 with the closest BP and 0.6 with
    the others (``bp_like``), or 1.0 with BP_0 throughout (a model that knows BP_0 from the start and only grows
    confident). ``fields`` add or replace keys (None: the key is left out)."""
    levels = range(DEPTH + 1)
    if bp_like:
        match = {f"k{k}": [0.9 if c == k else 0.6 for c in closest] for k in levels}
    else:
        match = {f"k{k}": [1.0 if k == 0 else 0.6 for _ in closest] for k in levels}
    sequence = [k for i, k in enumerate(closest) if i == 0 or closest[i - 1] != k]
    data = {"steps": [10 * i for i in range(len(closest))], "closest_bp": closest, "alignment_sequence": sequence,
            "kl_bp": {f"k{k}": [0.1 if c == k else 0.5 for c in closest] for k in levels}, "match_bp": match,
            "kl_bp_gap_se": {f"k{k}": [0.0 if c == k else 0.01 for c in closest] for k in levels},
            "num_in_sample": 1000, "bp_argmax_disagreement": {f"k{k}": 0.0 if k == 0 else 0.3 for k in levels},
            **fields}
    return {key: value for key, value in data.items() if value is not None}


def _staircase(accuracy: dict, bp: dict, *, chance: float | None = 0.28, size: int | None = 100_000,
               num_test: int | None = 100_000) -> dict:
    """An MLM dynamics JSON for Fig. 3a at steps 0, 10, 100, 1000: ``{k_test: curve}`` on ``num_test`` sequences,
    BP_0 per k_test, the most-frequent-symbol accuracy of every k_test and the sequences behind BP's accuracies
    (None: not recorded)."""
    data = {"steps": [0, 10, 100, 1000], "accuracy_ktest": {f"k{k}": v for k, v in accuracy.items()},
            "bp_accuracy_ktest": {f"k{k}": v for k, v in bp.items()}, "num_test": num_test,
            "bp_reference_size_ktest": {f"k{k}": size for k in bp} if size else {}}
    if chance is not None:
        data["chance_accuracy_ktest"] = {f"k{k}": chance for k in bp}
    return data


STAIRCASE_BP = {0: 0.7, 1: 0.6, 2: 0.5, 3: 0.3}  # k_test = 3 below chance 0.28 + REACHED: it cannot be reached
# every reachable k_test climbs from 0.3 to BP at its own step, k_test = 2 first, 0 last
CLIMB = {0: [0.3, 0.4, 0.6, 0.69], 1: [0.3, 0.4, 0.58, 0.6], 2: [0.3, 0.48, 0.5, 0.5], 3: [0.28, 0.3, 0.3, 0.3]}
# issue 33: at chance until the last step, then every k_test at BP at once; k_test = 3 "reached" at step 0
ONE_JUMP = {0: [0.28, 0.28, 0.28, 0.7], 1: [0.28, 0.28, 0.28, 0.6], 2: [0.28, 0.28, 0.28, 0.5],
            3: [0.28, 0.28, 0.28, 0.3]}


def _panel(k_test: str, accuracy: dict, seed: int = 0, num_test: int | None = 10_000) -> dict:
    """An accuracy-vs-P panel: ``{k_train: (accuracy at P=64, at P=128, BP)}`` on ``num_test`` test sequences."""
    return {"k_test": k_test, "grammar_seed": seed, "title": k_test, "num_test": num_test,
            "curves": [{"label": f"k_train={k}", "filter_level": k, "num_layers": 2, "sizes": [64, 128],
                        "accuracy": [a, b], "bp_accuracy": bp} for k, (a, b, bp) in accuracy.items()]}


MATCHING = {0: (0.6, 0.99, 1.0), 2: (0.5, 0.70, 0.71)}
OFF_BP = {0: (0.6, 0.80, 1.0), 2: (0.5, 0.70, 0.71)}


def _probe(accuracy, num_test: int | None = 2**14) -> dict:
    """A probe JSON of layers 0..3 and levels 0..2 at chance 0.3, tested on ``num_test`` sequences."""
    return {"depth": DEPTH, "layers": [0, 1, 2, 3], "levels": [0, 1, 2], "accuracy": accuracy,
            "final_accuracy": accuracy, "chance": [0.3, 0.3, 0.3], "bp_accuracy": [0.95, 0.95, 0.95],
            "num_test": num_test}


# accuracy 0.9 where the layer reaches the level (height 3 − m <= layer), chance above it: the layers climb the tree
CLIMBING = [[0.9 if DEPTH - m <= layer else 0.3 for m in (0, 1, 2)] for layer in range(4)]
FLAT = [[0.9, 0.9, 0.9] for _ in range(4)]  # every layer knows every ancestor: nothing is climbed
# App. E.7 (left): the same climb from chance 0.3 to 0.35 only, under Fig. 3b's margin (chance + 0.1)
CLIMBING_NEAR_CHANCE = [[0.35 if DEPTH - m <= layer else 0.3 for m in (0, 1, 2)] for layer in range(4)]


def _filtered_probes(level_1_of_k2: float, root_of_k2: float = 0.5, num_test: int = 2**14) -> dict:
    """The probes of the k_train = 0 model (0.9 on every level) and the k_train = 2 model (``root_of_k2``,
    ``level_1_of_k2``, 0.9), each on ``num_test`` test sequences."""
    return {"models": [{"model_filter_level": k, "levels": [0, 1, 2], "accuracy": [row], "final_accuracy": [row],
                        "chance": [0.3] * 3, "bp_accuracy": [0.95] * 3, "num_test": num_test}
                       for k, row in ((0, [0.9, 0.9, 0.9]), (2, [root_of_k2, level_1_of_k2, 0.9]))]}


def _gap(mean: float, spread: float, finetuned: float | None = 0.08) -> dict:
    """A Fig. 1f JSON: frozen − scratch ``mean`` ± ``spread`` at the smallest P over 3 seeds; fine-tuned − scratch
    ``finetuned`` ± 0.02 (None: the fine-tuned arm was not run)."""
    arms = {"frozen": (mean, spread)} if finetuned is None else {"frozen": (mean, spread), "finetuned": (finetuned, 0.02)}
    return {"sizes": [128, 512], "seeds": [0, 1, 2], "bp_accuracy": 1.0,
            "accuracy": {"scratch": [0.4, 0.8], **{arm: [0.4 + gap, 0.85] for arm, (gap, _) in arms.items()}},
            "gap_vs_scratch": {arm: [{"size": 128, "mean": gap, "spread": error, "num_seeds": 3, "values": [gap] * 3},
                                     {"size": 512, "mean": 0.05, "spread": 0.01, "num_seeds": 3, "values": [0.05] * 3}]
                               for arm, (gap, error) in arms.items()}}


def _root_curves(k3: list, num_test: int | None = 100_000) -> dict:
    """A root dynamics JSON for Fig. 2b: k_test = 0..2 as a real run (rising; k_test = 2 ends at BP_0's level), and
    the k_test = 3 curve ``k3``; BP_0's accuracies per k_test, all on ``num_test`` sequences."""
    return {"accuracy_ktest": {"k0": [0.25, 0.5, 0.9, 0.97], "k1": [0.25, 0.5, 0.65, 0.69],
                               "k2": [0.25, 0.5, 0.45, 0.42], "k3": k3},
            "bp_accuracy_ktest": {"k0": 1.0, "k1": 0.7, "k2": 0.43, "k3": 0.31}, "num_test": num_test}


def _layers(accuracy: dict, num_test: int | None = 10_000) -> dict:
    """A Fig. 6 JSON at ℓ = 3: ``{n_L: accuracy per P}`` on ``num_test`` test sequences."""
    return {"depth": DEPTH, "num_test": num_test,
            "panels": [{"k_test": "full", "curves": [{"num_layers": n, "accuracy": a} for n, a in accuracy.items()]}]}


def _kl_vs_samples(in_sample: list, uniform: list, error: float | None = 0.01) -> dict:
    """A Fig. 9 JSON of k_train = 0 at P = 64, 256: the KLs in sample and on uniform inputs, each with ``error``."""
    errors = None if error is None else [error, error]
    return {"curves": {"in_sample": {"0": {"sizes": [64, 256], "kl": in_sample, "kl_standard_error": errors}},
                       "uniform": {"0": {"sizes": [64, 256], "kl": uniform, "kl_standard_error": errors}}}}


def _calibration(kl: float, *, kl_error: float | None = 0.002) -> dict:
    """A Fig. 1b JSON: in-sample mean KL ``kl`` ± ``kl_error`` and argmax agreement 0.97 on 10,000 sequences, uniform
    inputs' Spearman correlation 0.8 ± 0.005."""
    return {"sets": {"in_sample": {"kl_mean": kl, "kl_standard_error": kl_error, "argmax_match": 0.97,
                                   "num_sequences": 10_000, "num_impossible": 0},
                     "uniform": {"spearman_mean": 0.8, "spearman_standard_error": 0.005, "num_sequences": 10_000}}}


def _agreement(match: float, spearman: float, num_in_sample: int | None = 10_000) -> dict:
    """A Fig. 10 JSON: argmax agreement and Spearman correlation with BP_0 at steps 0 and 10, the last ``match`` and
    ``spearman``, on ``num_in_sample`` inputs."""
    return {"steps": [0, 10], "match_bp": {"k0": [0.3, match]}, "spearman_bp": {"k0": [0.1, spearman]},
            "num_in_sample": num_in_sample}


# figure -> (file under OUT, output that reproduces the claim, output that does not)
CASES = {
    "1b": ("calibration/mlm/calibration.json", _calibration(0.01), _calibration(0.20)),
    "1c": ("dynamics/root.json", _dynamics([3, 2, 3, 1, 0]), _dynamics([3, 2, 1])),
    "1d": ("dynamics/mlm.json", _dynamics([3, 3, 2, 1, 0]), _dynamics([3, 2, 3, 1, 0])),
    "1e": ("attention/mlm/attention.json", _attention({0: HIERARCHICAL}), _attention({0: UNIFORM})),
    "1f": ("sample_complexity/sample_complexity.json", _gap(0.10, 0.03), _gap(-0.10, 0.03)),
    "2a": ("accuracy_vs_samples/fig2a_e3.json", {"panels": [_panel("full", MATCHING), _panel("train", OFF_BP)]},
           {"panels": [_panel("full", OFF_BP), _panel("train", MATCHING)]}),
    "2b": ("dynamics/root.json", _root_curves([0.25, 0.5, 0.4, 0.3]), _root_curves([0.25, 0.3, 0.4, 0.5])),
    "3a": ("dynamics/mlm.json", _staircase(CLIMB, STAIRCASE_BP),
           _staircase({**CLIMB, 0: [0.3, 0.4, 0.6, 0.62]}, STAIRCASE_BP)),
    "3b": ("probe/probe.json", _probe(CLIMBING), _probe(FLAT)),
    "4": ("attention/mlm/attention.json", _attention({0: HIERARCHICAL, 2: HIERARCHICAL, 3: UNIFORM}),
          _attention({0: HIERARCHICAL, 2: UNIFORM, 3: UNIFORM})),
    "6": ("accuracy_vs_samples/e1_layers.json", _layers({1: [0.3, 0.5], 3: [0.5, 0.9]}),
          _layers({1: [0.5, 0.9], 3: [0.3, 0.5]})),
    "7": ("accuracy_vs_samples/e2_grammar_seeds.json",
          {"panels": [_panel("full", MATCHING, seed=1), _panel("full", MATCHING, seed=15)]},
          {"panels": [_panel("full", MATCHING, seed=1), _panel("full", OFF_BP, seed=15)]}),
    "8": ("accuracy_vs_samples/fig2a_e3.json", {"panels": [_panel("full", OFF_BP), _panel("train", MATCHING)]},
          {"panels": [_panel("full", MATCHING), _panel("train", OFF_BP)]}),
    "9": ("accuracy_vs_samples/fig9_kl.json", _kl_vs_samples([0.8, 0.1], [0.9, 0.4]),
          _kl_vs_samples([0.8, 0.9], [0.9, 0.5])),
    "10": ("dynamics/mlm.json", _agreement(0.95, 0.9), _agreement(0.70, 0.9)),
    "11": ("attention/classifier/attention.json", _attention({0: UNIFORM, 2: HIERARCHICAL}),
           _attention({0: HIERARCHICAL, 2: UNIFORM})),
    "12 (left)": ("probe/probe_ends.json", _probe(CLIMBING_NEAR_CHANCE), _probe(FLAT)),
    "12 (right)": ("probe/probe_filtered.json", _filtered_probes(0.4), _filtered_probes(0.9)),
}
CHECKS = {check.figure: check for check in findings.CHECKS}


def _write(out: Path, path: str, data: dict) -> None:
    (out / path).parent.mkdir(parents=True, exist_ok=True)
    (out / path).write_text(json.dumps(data))


def test_every_check_has_a_passing_and_a_failing_case():
    assert list(CHECKS) == list(CASES)  # the paper's order: 1b .. 12 (right)


@pytest.mark.parametrize("figure", list(CASES))
def test_a_claim_is_reproduced_on_an_output_that_shows_it(figure, tmp_path):
    path, passing, _ = CASES[figure]
    _write(tmp_path, path, passing)
    finding = CHECKS[figure](tmp_path)
    assert (finding.figure, finding.verdict) == (figure, "reproduced"), finding
    assert finding.measured and finding.claim and finding.check


@pytest.mark.parametrize("figure", list(CASES))
def test_a_claim_is_not_reproduced_on_an_output_that_contradicts_it(figure, tmp_path):
    path, _, failing = CASES[figure]
    _write(tmp_path, path, failing)
    assert CHECKS[figure](tmp_path).verdict == "not reproduced"


def test_absent_files_are_not_run_and_say_whether_the_preset_has_the_step(tmp_path):
    quick = findings.check_all(tmp_path, PRESETS["quick"])
    assert [f.figure for f in quick] == list(CASES)
    assert all(f.verdict == "not run at this preset" and f.measured == {} for f in quick)
    notes = {f.figure: f.note for f in quick}
    assert notes["2a"] == "preset 'quick' has no step root_sweep"
    assert notes["1c"] == "step dynamics has not finished: no dynamics/root.json"


def test_the_filtered_attention_grid_is_not_run_without_filtered_models(tmp_path):
    _write(tmp_path, "attention/mlm/attention.json", _attention({0: HIERARCHICAL}))  # the quick preset's grid
    finding = CHECKS["4"](tmp_path)
    assert finding.verdict == "not run at this preset" and "filtered" in finding.note


def test_one_seed_has_no_spread_so_fig1f_reads_the_test_sets_noise_and_without_it_is_inconclusive(tmp_path):
    one_seed = {"sizes": [128], "accuracy": {"scratch": [0.50], "frozen": [0.55]}}  # written before the gap
    _write(tmp_path, "sample_complexity/sample_complexity.json", one_seed)
    finding = CHECKS["1f"](tmp_path)
    assert finding.verdict == "inconclusive" and "one seed and no test-set size recorded" in finding.note
    assert finding.measured["frozen_minus_scratch"] == pytest.approx(0.05)
    # 10,000 test sequences: each accuracy's error ~0.005, the gap's at most their sum, 0.01: 0.05 is beyond 2 × 0.01
    _write(tmp_path, "sample_complexity/sample_complexity.json", {**one_seed, "num_test": 10_000})
    finding = CHECKS["1f"](tmp_path)
    assert finding.verdict == "reproduced"
    assert finding.measured["frozen_noise"] == pytest.approx(math.sqrt(0.55 * 0.45 / 1e4) + math.sqrt(0.25 / 1e4),
                                                             abs=1e-4)


def test_a_k_train_recorded_by_the_preset_is_the_end_of_the_root_alignment(tmp_path):
    _write(tmp_path, "preset.json", {"name": "x", "filter_level": 1})
    _write(tmp_path, "dynamics/root.json", _dynamics([3, 2, 1]))
    assert CHECKS["1c"](tmp_path).verdict == "reproduced"


# ---------------------------------------------------------------- issue 33: checks that passed without the finding


@pytest.mark.parametrize("figure, path", [("1c", "dynamics/root.json"), ("1d", "dynamics/mlm.json")])
def test_a_model_that_knows_bp0_from_the_start_passes_no_bp_k_on_the_way(figure, path, tmp_path):
    # its KL is smallest to BP_3, BP_2, BP_1, BP_0 in turn as it grows confident, but its argmax is BP_0's throughout
    _write(tmp_path, path, _dynamics([3, 2, 1, 0], bp_like=False))
    finding = CHECKS[figure](tmp_path)
    assert finding.verdict == "not reproduced" and finding.measured["closest_bp_sequence"] == [3, 2, 1, 0]
    assert finding.measured["bp_k_like_on_the_way"]["k2"].startswith("BP_0-like at every evaluation")
    _write(tmp_path, path, _dynamics([3, 2, 1, 0]))
    assert CHECKS[figure](tmp_path).verdict == "reproduced"


def test_agreement_with_bp_j_before_the_path_arrives_at_bp_j_does_not_count(tmp_path):
    data = _dynamics([3, 3, 2, 1, 0], bp_like=False)
    data["match_bp"]["k0"] = [0.8] * 5
    data["match_bp"]["k1"][3] = data["match_bp"]["k2"][0] = 1.0  # BP_2-like at step 0 only: an untrained model
    _write(tmp_path, "dynamics/mlm.json", data)
    assert CHECKS["1d"](tmp_path).verdict == "not reproduced"
    data["match_bp"]["k2"][2] = 0.9  # and once it is there
    _write(tmp_path, "dynamics/mlm.json", data)
    finding = CHECKS["1d"](tmp_path)
    assert finding.verdict == "reproduced", finding
    evidence = finding.measured["bp_k_like_on_the_way"]
    assert evidence["k2"].startswith("BP_j-like: largest agreement gap +0.1000 with BP_2 over BP_0 at step 20 ")
    assert evidence["k1"].startswith("BP_j-like: largest agreement gap +0.2000 with BP_1 over BP_0 at step 30 ")


def test_a_root_classifier_that_jumps_from_bp_l_to_bp_k_train_passes_no_level_between(tmp_path):
    _write(tmp_path, "dynamics/root.json", _dynamics([3, 3, 0, 0]))
    assert CHECKS["1c"](tmp_path).verdict == "not reproduced"


def test_the_mlm_alignment_must_end_at_bp_k_train(tmp_path):
    _write(tmp_path, "dynamics/mlm.json", _dynamics([3, 2, 1]))  # decreasing, 3 levels: passed before issue 33
    finding = CHECKS["1d"](tmp_path)
    assert finding.verdict == "not reproduced" and finding.measured["k_train"] == 0


def test_a_return_to_a_larger_k_for_one_evaluation_within_noise_is_not_a_failure(tmp_path):
    data = _dynamics([3, 2, 3, 1, 0])
    _write(tmp_path, "dynamics/mlm.json", data)
    assert CHECKS["1d"](tmp_path).verdict == "not reproduced"  # KL 0.1 to BP_3 against 0.5 to BP_2: a real return
    data["kl_bp"]["k2"][2] = 0.105  # BP_2 within 2 paired errors (0.01) of BP_3 at the return
    _write(tmp_path, "dynamics/mlm.json", data)
    finding = CHECKS["1d"](tmp_path)
    assert finding.verdict == "reproduced", finding
    assert finding.measured["closest_bp_sequence"] == [3, 2, 1, 0]
    assert finding.measured["ties_held_at_step"] == [20]
    # a tie holds the level however long it lasts, and only a decided change moves the path
    longer = _dynamics([3, 2, 3, 3, 1, 0])
    longer["kl_bp"]["k2"][2:4] = [0.105, 0.105]
    _write(tmp_path, "dynamics/mlm.json", longer)
    assert CHECKS["1d"](tmp_path).measured["ties_held_at_step"] == [20, 30]
    longer["kl_bp"]["k2"][3] = 0.5  # decidedly back at BP_3 at the second evaluation
    _write(tmp_path, "dynamics/mlm.json", longer)
    finding = CHECKS["1d"](tmp_path)
    assert finding.verdict == "not reproduced" and finding.measured["closest_bp_sequence"] == [3, 2, 3, 1, 0]


def test_a_tie_in_kl_holds_the_level_whichever_side_rounding_puts_it(tmp_path):
    data = _dynamics([3, 2, 2, 1, 0], kl_bp_se={f"k{k}": [0.001] * 5 for k in range(DEPTH + 1)})
    for shift in (-0.003, 0.003):  # BP_3 a hair below or above BP_2 at step 20, inside 2 × (0.001 + 0.001)
        data["kl_bp"]["k3"][2] = data["kl_bp"]["k2"][2] + shift
        data["closest_bp"][2] = 3 if shift < 0 else 2
        _write(tmp_path, "dynamics/mlm.json", data)
        finding = CHECKS["1d"](tmp_path)
        assert finding.verdict == "reproduced" and finding.measured["closest_bp_sequence"] == [3, 2, 1, 0], shift
    data["kl_bp"]["k3"][2] = data["kl_bp"]["k2"][2] - 0.01  # beyond the noise: a real return
    data["closest_bp"][2] = 3
    _write(tmp_path, "dynamics/mlm.json", data)
    assert CHECKS["1d"](tmp_path).verdict == "not reproduced"


def _siding(agreement_gaps: list, *, n: int, d: dict) -> dict:
    """A dynamics JSON of n in-sample inputs whose path is 3 → 2 → 1 → 0 and whose agreement with BP_1 minus that with
    BP_0 is ``agreement_gaps`` at the four evaluations (BP_2 clearly BP_2-like, disagreements ``d``)."""
    data = _dynamics([3, 2, 1, 0], num_in_sample=n, bp_argmax_disagreement=d)
    data["match_bp"]["k0"] = [0.7] * 4
    data["match_bp"]["k1"] = [0.7 + gap for gap in agreement_gaps]
    return data


def test_the_counterexample_a_few_decisive_inputs_are_evidence_against_the_level(tmp_path):
    # n = 10,000; BP_1 and BP_0 disagree on 90 inputs (0.009 < 1/√n = 0.01: the former rule exempted level 1), and
    # on all 90 the model sides with BP_0 at every evaluation: a sign test gives p ≈ 1.6e-27 against BP_1-like
    data = _siding([-0.009] * 4, n=10_000, d={"k0": 0.0, "k1": 0.009, "k2": 0.3, "k3": 0.5})
    _write(tmp_path, "dynamics/mlm.json", data)
    finding = CHECKS["1d"](tmp_path)
    assert finding.verdict == "not reproduced", finding
    assert finding.measured["bp_k_like_on_the_way"]["k1"].startswith("BP_0-like at every evaluation")


def test_a_level_the_inputs_cannot_tell_from_bp_k_train_is_a_tie_not_an_exemption(tmp_path):
    # 3 disagreeing inputs of 10,000: even a model siding with BP_1 on all 3 could not be decided (3 ≤ z²), so the
    # level is not shown BP_1-like: a tie, whose note says how many inputs would decide
    data = _siding([-0.0003] * 4, n=10_000, d={"k0": 0.0, "k1": 0.0003, "k2": 0.3, "k3": 0.5})
    _write(tmp_path, "dynamics/mlm.json", data)
    finding = CHECKS["1d"](tmp_path)
    assert finding.verdict == "inconclusive", finding
    evidence = finding.measured["bp_k_like_on_the_way"]["k1"]
    assert evidence.startswith("within noise: BP_1's argmax differs from BP_0's on 3 of 10000 inputs")
    assert "inputs would" in evidence
    # 100,000 inputs: 30 disagree, and the model sides with BP_0 on all 30 — decided against BP_1
    data = _siding([-0.0003] * 4, n=100_000, d={"k0": 0.0, "k1": 0.0003, "k2": 0.3, "k3": 0.5})
    _write(tmp_path, "dynamics/mlm.json", data)
    assert CHECKS["1d"](tmp_path).verdict == "not reproduced"


@pytest.mark.parametrize("gap, verdict", [(0.012, "reproduced"), (0.002, "inconclusive"), (-0.002, "inconclusive"),
                                          (-0.012, "not reproduced")])
def test_agreement_evidence_is_decided_only_beyond_its_paired_noise(gap, verdict, tmp_path):
    # 200 disagreeing inputs of 10,000: noise √(d/n) = 0.0014, z = 1.96 over the 2 evaluations tested: ±0.0028
    data = _siding([0.0, 0.0, gap, gap], n=10_000, d={"k0": 0.0, "k1": 0.02, "k2": 0.3, "k3": 0.5})
    _write(tmp_path, "dynamics/mlm.json", data)
    assert CHECKS["1d"](tmp_path).verdict == verdict


def test_a_record_moved_within_its_noise_never_flips_between_reproduced_and_not(tmp_path):
    base = {"k0": 0.0, "k1": 0.02, "k2": 0.3, "k3": 0.5}
    verdicts = set()
    for gap in np.linspace(-0.0027, 0.0027, 13):  # within z·√(d/n) = 0.0028 of zero
        _write(tmp_path, "dynamics/mlm.json", _siding([0.0, 0.0, gap, gap], n=10_000, d=base))
        verdicts.add(CHECKS["1d"](tmp_path).verdict)
    assert verdicts == {"inconclusive"}
    calibration = CASES["1b"][1]
    for kl in (0.049, 0.051):  # either side of 0.05, within 2 × its standard error 0.002
        calibration["sets"]["in_sample"].update(kl_mean=kl, kl_standard_error=0.002)
        _write(tmp_path, "calibration/mlm/calibration.json", calibration)
        finding = CHECKS["1b"](tmp_path)
        assert finding.verdict == "inconclusive" and "within noise: in-sample KL" in finding.note


@pytest.mark.parametrize("level_1, verdict", [(0.80, "reproduced"), (0.875, "inconclusive"), (0.885, "inconclusive"),
                                              (0.95, "not reproduced")])
def test_a_filtered_level_read_almost_as_well_as_by_the_unfiltered_model_is_a_tie(level_1, verdict, tmp_path):
    # 2,048 test sequences a probe, the same for both models: the difference of two accuracies near 0.9 has an error
    # of at most the sum of theirs, ~0.014, so k_train = 2's level 1 must lie beyond 0.88 ± ~0.03 (k_train = 0's
    # 0.9 − 0.02, ± Z = 2 noises) to decide
    _write(tmp_path, "probe/probe_filtered.json", _filtered_probes(level_1, num_test=2048))
    finding = CHECKS["12 (right)"](tmp_path)
    assert finding.verdict == verdict
    entry = next(e for e in finding.measured["margins"] if e["test"].startswith("k_train=2, level 1"))
    assert entry["noise"] == pytest.approx(math.sqrt(level_1 * (1 - level_1) / 2048) + math.sqrt(0.9 * 0.1 / 2048),
                                           abs=1e-4)


def test_a_dynamics_file_without_the_bp_disagreement_or_the_kl_errors_is_inconclusive_and_says_so(tmp_path):
    _write(tmp_path, "dynamics/mlm.json", _dynamics([3, 2, 1, 0], num_in_sample=None, bp_argmax_disagreement=None))
    finding = CHECKS["1d"](tmp_path)
    assert finding.verdict == "inconclusive" and "no in-sample size recorded (num_in_sample)" in finding.note
    _write(tmp_path, "dynamics/mlm.json", _dynamics([3, 2, 1, 0], kl_bp_gap_se=None))
    finding = CHECKS["1d"](tmp_path)
    assert finding.verdict == "inconclusive" and "no standard errors of the KLs" in finding.note


def test_an_untrained_model_does_not_reach_a_k_test_whose_bp_is_at_chance_and_one_jump_is_no_staircase(tmp_path):
    _write(tmp_path, "dynamics/mlm.json", _staircase(ONE_JUMP, STAIRCASE_BP))
    finding = CHECKS["3a"](tmp_path)
    assert finding.verdict == "not reproduced"
    assert list(finding.measured["not_reachable"]) == ["k3"]  # BP 0.3 ≤ chance 0.28 + 0.05
    assert finding.measured["step_reaching_bp"] == {"k2": 1000, "k1": 1000, "k0": 1000}


def test_a_reach_counts_once_the_accuracy_has_risen_from_its_start(tmp_path):
    start_at_bp = {**CLIMB, 0: [0.66, 0.66, 0.66, 0.69]}  # within REACHED of BP at step 0, risen at step 1000 only
    _write(tmp_path, "dynamics/mlm.json", _staircase(start_at_bp, STAIRCASE_BP))
    finding = CHECKS["3a"](tmp_path)
    assert finding.measured["step_reaching_bp"]["k0"] == 1000 and finding.verdict == "reproduced"
    never = {**CLIMB, 0: [0.66, 0.66, 0.66, 0.67]}
    _write(tmp_path, "dynamics/mlm.json", _staircase(never, STAIRCASE_BP))
    assert CHECKS["3a"](tmp_path).verdict == "not reproduced"


@pytest.mark.parametrize("size, verdict", [(1000, "reproduced"), (100_000, "not reproduced")])
def test_k_test_levels_whose_bp_accuracies_cannot_be_told_apart_have_no_order(size, verdict, tmp_path):
    bp = {0: 0.718, 1: 0.708, 2: 0.592, 3: 0.456, 4: 0.271}  # BP_0 on the paper's grammar (issue 33)
    accuracy = {0: [0.25, 0.5, 0.68, 0.7], 1: [0.25, 0.5, 0.6, 0.69], 2: [0.25, 0.56, 0.58, 0.6],
                4: [0.25, 0.28, 0.28, 0.28], 3: [0.25, 0.45, 0.45, 0.45]}  # k_test = 0 reached before 1
    _write(tmp_path, "dynamics/mlm.json", _staircase(accuracy, bp, size=size))
    finding = CHECKS["3a"](tmp_path)
    assert finding.verdict == verdict
    pairs = finding.measured["unordered_pairs"]
    if size == 1000:  # 2 standard errors of the difference: 0.040 > 0.010
        assert list(pairs) == ["k1, k0"] and "2 standard errors 0.040 on 1000 and 1000 sequences" in pairs["k1, k0"]
    else:
        assert pairs == {} and finding.measured["out_of_order"] == ["k_test 1 at step 1000 after k_test 0 at step 100"]


def test_a_staircase_file_without_chance_or_sizes_takes_every_k_test_as_reachable_and_says_so(tmp_path):
    _write(tmp_path, "dynamics/mlm.json", _staircase(ONE_JUMP, STAIRCASE_BP, chance=None, size=None, num_test=None))
    finding = CHECKS["3a"](tmp_path)
    assert "every k_test taken as reachable" in finding.note and "no pair can be ordered" in finding.note
    assert finding.measured["step_reaching_bp"]["k3"] is None  # without the test-set size no reach is sure
    assert finding.verdict == "inconclusive"


@pytest.mark.parametrize("figure, path, models", [
    ("1e", "attention/mlm/attention.json", {0: SELF_ONLY}),
    ("4", "attention/mlm/attention.json", {0: HIERARCHICAL, 2: SELF_ONLY, 3: UNIFORM}),
    ("11", "attention/classifier/attention.json", {0: UNIFORM, 2: SELF_ONLY}),
])
def test_a_layer_that_attends_only_to_itself_is_not_local_attention(figure, path, models, tmp_path):
    _write(tmp_path, path, _attention(models))
    assert CHECKS[figure](tmp_path).verdict == "not reproduced"


def test_the_tree_distance_counts_the_attention_to_other_leaves(tmp_path):
    half_self = [(0.5 * np.eye(8) + 0.5 * np.array(m)).tolist() for m in HIERARCHICAL]
    _write(tmp_path, "attention/mlm/attention.json", _attention({0: half_self}))
    finding = CHECKS["1e"](tmp_path)
    assert finding.verdict == "reproduced"
    assert finding.measured["tree_distance_per_layer"] == [1.0, 2.0, 3.0]  # App. F's layers, self not counted
    assert finding.measured["attention_to_itself_per_layer"] == [0.5, 0.5, 0.5]
    assert finding.measured["uniform_attention"] == pytest.approx(17 / 7, abs=1e-4)


def test_the_root_classifier_must_fall_back_to_bp_k_train_on_the_most_filtered_data(tmp_path):
    _write(tmp_path, "dynamics/root.json", _root_curves([0.25, 0.5, 0.4, 0.1]))  # rises, falls far below BP's 0.31
    finding = CHECKS["2b"](tmp_path)
    assert finding.verdict == "not reproduced" and finding.measured["k3"]["bp"] == 0.31


def test_identical_curves_for_every_number_of_layers_do_not_show_that_one_layer_is_poor(tmp_path):
    _write(tmp_path, "accuracy_vs_samples/e1_layers.json", _layers({n: [0.5, 0.9] for n in (1, 2, 3)}))
    finding = CHECKS["6"](tmp_path)
    assert finding.verdict == "not reproduced" and finding.note == ""
    _write(tmp_path, "accuracy_vs_samples/e1_layers.json", _layers({1: [0.3, 0.5], 2: [0.5, 0.9]}))
    assert CHECKS["6"](tmp_path).note == "n_L = 1 compared with n_L = 2 (the sweep's extremes)"


def test_the_kl_on_uniform_inputs_must_fall_with_p_too(tmp_path):
    _write(tmp_path, "accuracy_vs_samples/fig9_kl.json", _kl_vs_samples([1.0, 0.99], [0.5, 3.0]))
    assert CHECKS["9"](tmp_path).verdict == "not reproduced"


def test_a_fine_tuned_encoder_below_scratch_is_not_reproduced(tmp_path):
    _write(tmp_path, "sample_complexity/sample_complexity.json", _gap(0.10, 0.03, finetuned=-0.2))
    finding = CHECKS["1f"](tmp_path)
    assert finding.verdict == "not reproduced" and finding.measured["finetuned_minus_scratch"] == -0.2
    _write(tmp_path, "sample_complexity/sample_complexity.json", _gap(0.10, 0.03, finetuned=None))
    finding = CHECKS["1f"](tmp_path)
    assert finding.verdict == "reproduced" and finding.note == "the finetuned arm was not run: not tested"


def test_end_position_probes_need_the_climb_not_fig3b_margin_over_chance(tmp_path):
    _write(tmp_path, "probe/probe_ends.json", _probe(CLIMBING_NEAR_CHANCE))
    finding = CHECKS["12 (left)"](tmp_path)
    assert finding.verdict == "reproduced" and finding.measured["gain_over_embedding"]["level 0"] == 0.05
    _write(tmp_path, "probe/probe.json", _probe(CLIMBING_NEAR_CHANCE))
    assert CHECKS["3b"](tmp_path).verdict == "not reproduced"  # Fig. 3b keeps its margin
    no_climb_from_the_embedding = [[0.35, 0.35, 0.35]] + CLIMBING_NEAR_CHANCE[1:]
    _write(tmp_path, "probe/probe_ends.json", _probe(no_climb_from_the_embedding))
    assert CHECKS["12 (left)"](tmp_path).verdict == "not reproduced"


def test_the_report_has_one_row_per_figure_and_findings_json_beside_it(tmp_path):
    for figure in ("1c", "3b"):
        _write(tmp_path, CASES[figure][0], CASES[figure][1])
    _write(tmp_path, CASES["1d"][0], CASES["1d"][2])
    report = write_report(tmp_path, PRESETS["quick"], []).read_text()
    rows = [line for line in report.splitlines() if line.startswith("| ") and line.endswith(("** |", "preset |"))]
    assert [row.split(" | ")[0][2:] for row in rows] == list(CASES)
    assert "| 1c |" in report and "| **reproduced** |" in report and "| **not reproduced** |" in report
    written = json.loads((tmp_path / findings.FINDINGS_FILE).read_text())
    verdicts = {f["figure"]: f["verdict"] for f in written["findings"]}
    assert verdicts["1c"] == verdicts["3b"] == "reproduced" and verdicts["1d"] == "not reproduced"
    # 2b and 3a read the same dynamics files, which lack their accuracy curves: named, not decided
    notes = {f["figure"]: f["note"] for f in written["findings"]}
    assert verdicts["2b"] == verdicts["3a"] == "inconclusive" and "lacks 'accuracy_ktest'" in notes["2b"]
    assert written["verdicts"] == {"reproduced": 2, "not reproduced": 1, "inconclusive": 2,
                                   "not run at this preset": len(CASES) - 5}
    assert "missing" not in report.split("## Model vs BP")[0]


# ---------------------------------------------------------------- laptop speed: --threads, estimates, the gap


def test_gap_is_paired_by_seed_with_mean_and_sample_standard_deviation():
    frozen = [[0.6, 0.7, None], [0.9, 0.9, 0.9]]  # per P, per seed (None: the run failed)
    scratch = [[0.4, 0.4, 0.5], [0.8, 0.9, 1.0]]
    small, large = sample_complexity.seed_gaps([128, 512], frozen, scratch)
    assert small.values == pytest.approx([0.2, 0.3]) and small.mean == pytest.approx(0.25)
    assert small.spread == pytest.approx(np.std([0.2, 0.3], ddof=1))
    assert large.mean == pytest.approx(0.0) and large.spread == pytest.approx(0.1)
    assert small.describe() == "P=128: +0.250 ± 0.071 (2 seeds)"
    (one,) = sample_complexity.seed_gaps([128], [[0.6]], [[0.5]])
    assert one.spread is None and one.describe() == "P=128: +0.100 (1 seed, no spread)"


def _save_mlm(folder: Path) -> Path:
    torch.manual_seed(0)
    config = TreeLangConfig.from_data(num_symbols=3, depth=2, filter_level=0, hidden_size=16, num_hidden_layers=1,
                                      intermediate_size=16)
    TreeLangForMaskedLM(config).save_pretrained(folder)
    return folder


def test_several_seeds_train_every_arm_once_per_seed_and_report_the_gap(tmp_path):
    names = []

    def fake_train(run):  # frozen beats scratch by 0.1 + 0.01 * seed
        names.append(run.name)
        seed = run.arguments["seed"]
        return {"accuracy": 0.5 + (0.1 + 0.01 * seed if run.model_args.freeze_encoder else 0.0), "bp_accuracy": 1.0}

    result = sample_complexity.sample_complexity_sweep(_save_mlm(tmp_path / "mlm"), [16], tmp_path / "out",
                                                       arms=("scratch", "frozen"), seeds=[0, 1, 2],
                                                       train=fake_train, progress=False)
    assert names == [f"{arm}-P16-seed{s}" for s in (0, 1, 2) for arm in ("scratch", "frozen")]
    assert result.accuracy["frozen"] == [pytest.approx(0.61)] and result.accuracy_per_seed["scratch"] == [[0.5] * 3]
    (gap,) = result.gap("frozen")
    assert gap.mean == pytest.approx(0.11) and gap.spread == pytest.approx(0.01)
    saved = result.to_dict()["gap_vs_scratch"]["frozen"][0]
    assert saved["num_seeds"] == 3 and saved["mean"] == pytest.approx(0.11)


@pytest.mark.parametrize("command", ["probe", "sample-complexity"])
@pytest.mark.parametrize("flags, message", [(["--threads", "0"], "`threads` must be an integer >= 1, got 0")])
def test_a_bad_thread_count_is_one_line_and_exit_2_before_any_work(command, flags, message, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.run_command(command, [str(tmp_path / "no-checkpoint"), "--out", str(out), *flags]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [f"hf-treelang {command}: error: {message}"]
    assert captured.out == "" and not out.exists()


def test_repeated_seeds_are_refused_before_any_work(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.run_command("sample-complexity", [str(tmp_path / "none"), "--out", str(out), "--seeds", "0", "0"]) == 2
    assert capsys.readouterr().err.strip() == "hf-treelang sample-complexity: error: `seeds` must not repeat a value, got [0, 0]"
    assert not out.exists()


def test_probe_prints_its_estimated_time_before_the_work_with_its_threads(tmp_path, capsys):
    threads = torch.get_num_threads()
    try:
        code = cli.run_command("probe", [str(_save_mlm(tmp_path / "mlm")), "--out", str(tmp_path / "out"),
                                         "--threads", "1", "--num-train", "16", "--num-validation", "8",
                                         "--num-test", "8", "--epochs", "1", "--probe-hidden", "0"])
        assert code == 0 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("estimated time: about ") and "an estimate" in lines[0]
    assert "1 torch thread(s)" in lines[0] and any(line.startswith("held-out accuracy") for line in lines[1:])


def test_sample_complexity_prints_the_gap_per_p_and_passes_its_threads(tmp_path, monkeypatch, capsys):
    seen = {}

    def fake_sweep(checkpoint, sizes, work_dir, **options):
        seen.update(options)
        per_seed = {"scratch": [[0.4, 0.5]], "frozen": [[0.6, 0.6]]}
        return sample_complexity.SampleComplexityResult(
            sizes=sizes, accuracy={arm: [np.mean(v[0])] for arm, v in per_seed.items()}, bp_accuracy=1.0,
            checkpoint=str(checkpoint), depth=2, filter_level=0, seeds=options["seeds"], accuracy_per_seed=per_seed)

    monkeypatch.setattr(sample_complexity, "sample_complexity_sweep", fake_sweep)
    code = cli.run_command("sample-complexity", [str(tmp_path / "ckpt"), "--out", str(tmp_path / "out"),
                                                 "--sizes", "128", "--seeds", "0", "1", "--threads", "2"])
    assert code == 0 and seen["threads"] == 2 and seen["seeds"] == [0, 1]
    printed = capsys.readouterr().out
    assert "frozen − scratch (mean ± standard deviation over seeds): P=128: +0.150 ± 0.071 (2 seeds)" in printed
    saved = json.loads((tmp_path / "out" / "sample_complexity.json").read_text())
    assert saved["gap_vs_scratch"]["frozen"][0]["spread"] == pytest.approx(0.0707, abs=1e-4)


# ---------------------------------------------------------------- verdicts decided only beyond noise


def _two_levels_tied_at(closer: int) -> dict:
    """A root dynamics JSON (k_train = 0) at BP_3, then BP_2 (model BP_2-like), then KL_0 and KL_1 within 0.001 of
    each other (0.2000 and 0.1990, the smaller to BP_``closer``), each KL with standard error 0.01, then BP_0. The
    model sides with BP_0 over BP_1 on their disagreeing inputs at every evaluation."""
    kl = {"k0": [0.5, 0.5, 0.2, 0.1], "k1": [0.5, 0.5, 0.2, 0.5], "k2": [0.5, 0.1, 0.5, 0.5],
          "k3": [0.1, 0.5, 0.5, 0.5]}
    kl[f"k{closer}"][2] = 0.199
    return {"steps": [0, 10, 20, 30], "closest_bp": [3, 2, closer, 0], "kl_bp": kl,
            "kl_bp_se": {k: [0.01] * 4 for k in kl}, "num_in_sample": 1000,
            "bp_argmax_disagreement": {"k0": 0.0, "k1": 0.3, "k2": 0.3, "k3": 0.3},
            "match_bp": {"k0": [0.6, 0.6, 0.9, 0.95], "k1": [0.6, 0.6, 0.6, 0.6], "k2": [0.6, 0.9, 0.6, 0.6],
                         "k3": [0.9, 0.6, 0.6, 0.6]}}


def test_two_records_that_differ_within_noise_at_one_evaluation_get_the_same_verdict(tmp_path):
    # (KL_0, KL_1) = (0.2000, 0.1990) against (0.1990, 0.2000), both with standard error 0.01: 0.1 of it apart
    verdicts = set()
    for closer in (1, 0):
        _write(tmp_path, "dynamics/root.json", _two_levels_tied_at(closer))
        verdicts.add(CHECKS["1c"](tmp_path).verdict)
    assert verdicts == {"reproduced"}  # BP_1 is never closest beyond noise: no BP_1-likeness is asked of the model


@pytest.mark.parametrize("figure, path", [("1c", "dynamics/root.json"), ("1d", "dynamics/mlm.json")])
def test_a_last_evaluation_within_noise_of_bp_k_train_is_a_tie_not_a_failure(figure, path, tmp_path):
    data = _dynamics([3, 2, 1, 1])
    data["kl_bp"]["k0"][3], data["kl_bp"]["k1"][3] = 0.199, 0.2  # at BP_0 by 0.001, standard error 0.01
    data["closest_bp"][3] = 0
    data["kl_bp_gap_se"]["k1"][3], data["kl_bp_gap_se"]["k0"][3] = 0.01, 0.0
    _write(tmp_path, path, data)
    finding = CHECKS[figure](tmp_path)
    assert finding.verdict == "inconclusive", finding
    assert finding.measured["path"]["ends at k_train"] == "within noise"
    data["kl_bp"]["k1"][3] = 0.25  # BP_0 closer beyond noise: the run ends at BP_0
    _write(tmp_path, path, data)
    assert CHECKS[figure](tmp_path).verdict == "reproduced"


def test_few_inputs_exempt_no_level_so_a_model_at_bp0_all_along_is_not_reproduced(tmp_path):
    # n = 20 inputs, BP_j and BP_0 differ on d = 0.2 of them (m = 4 ≤ z²): the KL path 3 → 2 → 1 → 0 alone is no
    # evidence, and a model siding with BP_0 on all 4 cannot be told from a BP_j-like one
    data = _dynamics([3, 2, 1, 0], num_in_sample=20,
                     bp_argmax_disagreement={"k0": 0.0, "k1": 0.2, "k2": 0.2, "k3": 0.2})
    data["match_bp"] = {"k0": [1.0] * 4, **{f"k{k}": [0.8] * 4 for k in (1, 2, 3)}}  # at BP_0 all along
    _write(tmp_path, "dynamics/root.json", data)
    finding = CHECKS["1c"](tmp_path)
    assert finding.verdict == "inconclusive"
    assert finding.measured["bp_k_like_on_the_way"]["k2"].startswith(
        "within noise: BP_2's argmax differs from BP_0's on 4 of 20 inputs")


@pytest.mark.parametrize("final", [0.6680, 0.6675])
def test_a_reach_within_noise_of_its_threshold_is_decided_neither_way(final, tmp_path):
    # k_test = 0 ends at 0.6680 or 0.6675 against BP − 0.05 = 0.668: on 1,000 test sequences its standard error is
    # ~0.015, so both are ties
    bp = {0: 0.718, 1: 0.6, 2: 0.5, 3: 0.3}
    accuracy = {**CLIMB, 0: [0.3, 0.4, 0.6, final]}
    _write(tmp_path, "dynamics/mlm.json", _staircase(accuracy, bp, num_test=1000))
    finding = CHECKS["3a"](tmp_path)
    assert finding.verdict == "inconclusive", finding
    assert finding.measured["step_reaching_bp"]["k0"] is None
    assert finding.measured["earliest_step_reaching_bp"]["k0"] == 1000


def test_the_root_above_the_filtering_is_tested_too(tmp_path):
    data = _filtered_probes(0.4, root_of_k2=0.340)
    data["models"][0]["accuracy"][0][0] = 0.336  # the k_train = 0 model reads the root no better
    _write(tmp_path, "probe/probe_filtered.json", data)
    finding = CHECKS["12 (right)"](tmp_path)
    assert finding.verdict == "not reproduced"
    entry = next(e for e in finding.measured["margins"] if e["test"].startswith("k_train=2, level 0"))
    assert entry["decided"] == "fail"


BAD_NOISE = [math.nan, math.inf, -0.002]


@pytest.mark.parametrize("bad", BAD_NOISE)
@pytest.mark.parametrize("figure, path, data, where", [
    ("1b", "calibration/mlm/calibration.json", lambda bad: _calibration(0.01, kl_error=bad), "kl_standard_error"),
    ("1f", "sample_complexity/sample_complexity.json",
     lambda bad: _gap(0.10, bad), "spread"),
    ("1c", "dynamics/root.json",
     lambda bad: _dynamics([3, 2, 1, 0], kl_bp_gap_se={f"k{k}": [bad] * 4 for k in range(DEPTH + 1)}), "kl_bp_gap_se"),
    ("3b", "probe/probe.json", lambda bad: {**_probe(CLIMBING), "num_test": -3 if bad < 0 else bad}, "num_test"),
])
def test_a_noise_that_is_not_a_standard_error_is_never_reproduced_and_is_named(figure, path, data, where, bad,
                                                                                tmp_path):
    _write(tmp_path, path, data(bad))
    finding = CHECKS[figure](tmp_path)
    assert finding.verdict == "inconclusive", finding
    assert where in finding.note and path in finding.note


@pytest.mark.parametrize("figure, panel", [("2a", "full"), ("8", "train")])
@pytest.mark.parametrize("accuracy", [math.nan, None])
def test_a_nan_accuracy_at_the_largest_p_is_never_a_match(figure, panel, accuracy, tmp_path):
    curves = {0: (0.6, accuracy, 1.0), 2: (0.5, 0.70, 0.71)}
    other = "train" if panel == "full" else "full"
    _write(tmp_path, "accuracy_vs_samples/fig2a_e3.json",
           {"panels": [_panel(panel, curves), _panel(other, MATCHING)]})
    finding = CHECKS[figure](tmp_path)
    assert finding.verdict == "inconclusive" and "k_train=0" in finding.note


def test_fig10_reads_the_last_evaluation_and_a_nan_there_is_inconclusive(tmp_path):
    data = _agreement(0.95, 0.9)
    data["steps"].append(20)
    data["match_bp"]["k0"].append(0.95)
    data["spearman_bp"]["k0"].append(None)  # NaN at the last evaluation (JSON null)
    _write(tmp_path, "dynamics/mlm.json", data)
    finding = CHECKS["10"](tmp_path)
    assert finding.verdict == "inconclusive"
    assert "the last evaluation at step 20 has no finite Spearman correlation" in finding.note
    assert finding.measured["spearman"] is None


@pytest.mark.parametrize("figure", list(CASES))
@pytest.mark.parametrize("shape", ["list", "missing keys", "fields of another type"])
def test_a_file_of_the_wrong_shape_is_named_in_one_line_and_the_report_is_written(figure, shape, tmp_path):
    path, passing, _ = CASES[figure]
    check = CHECKS[figure]
    value = {"list": [passing], "missing keys": {"other": 1},
             "fields of another type": {key: [[1]] for key in passing}}[shape]
    _write(tmp_path, path, value)
    finding = check(tmp_path)
    assert finding.verdict != "reproduced" and "\n" not in finding.note
    if shape == "list":
        assert finding.note == f"{path} holds a list; expected {check.expected()}"
    elif shape == "missing keys" and check.keys:
        assert finding.note.startswith(f"{path} lacks ") and check.expected() in finding.note
    report = write_report(tmp_path, PRESETS["laptop_long"], []).read_text()
    assert "## Steps" in report


def test_the_report_names_a_step_file_it_cannot_show(tmp_path):
    _write(tmp_path, "probe/probe.json", ["not", "an", "object"])
    _write(tmp_path, "calibration/mlm/calibration.json", {"sets": {"in_sample": "x"}})
    report = write_report(tmp_path, PRESETS["quick"], []).read_text()
    assert "`probe/probe.json` holds a JSON list, not the object its step writes: not shown." in report
    assert "`calibration/mlm/calibration.json` does not have the shape its step writes" in report


# ---------------------------------------------------------------- the probes test what the paper says

# the laptop MLM's probes (reproduce --preset laptop_long): its last layer reads the root worse than layer 3
LAPTOP_PROBES = {"depth": 4, "layers": [0, 1, 2, 3, 4], "levels": [0, 1, 2, 3], "num_test": 2048,
                 "chance": [0.242, 0.297, 0.286, 0.297], "bp_accuracy": [1.0, 0.9, 0.8, 0.7],
                 "accuracy": [[0.309, 0.367, 0.474, 0.561], [0.339, 0.431, 0.577, 0.801], [0.409, 0.542, 0.82, 0.917],
                              [0.656, 0.808, 0.862, 0.909], [0.387, 0.605, 0.859, 0.964]]}
LAPTOP_END_PROBES = {**LAPTOP_PROBES, "accuracy": [
    [0.258, 0.274, 0.325, 0.445], [0.263, 0.283, 0.355, 0.619], [0.291, 0.35, 0.461, 0.533],
    [0.36, 0.458, 0.529, 0.619], [0.285, 0.365, 0.542, 0.881]]}


@pytest.mark.parametrize("figure, path, data", [("3b", "probe/probe.json", LAPTOP_PROBES),
                                                ("12 (left)", "probe/probe_ends.json", LAPTOP_END_PROBES)])
def test_probes_high_up_to_the_layers_level_and_worse_above_reproduce_whichever_layer_reads_the_root_best(
        figure, path, data, tmp_path):
    # the paper: "high on ancestors up to the same level as the probed layer and deteriorates on higher levels of
    # ancestry" — not that the deepest layer reads each ancestor best, which this MLM's last layer does not
    _write(tmp_path, path, data)
    finding = CHECKS[figure](tmp_path)
    assert finding.verdict == "reproduced", finding
    assert finding.measured["best_layer_per_level"]["level 0"].startswith("layer 3 ")


def test_a_layer_reading_an_ancestor_above_its_level_as_well_as_its_own_does_not_climb(tmp_path):
    flat_top = [row[:] for row in CLIMBING]
    flat_top[1][1] = 0.9  # layer 1 reads level 1 (height 2) as well as level 2 (height 1, its own)
    _write(tmp_path, "probe/probe.json", _probe(flat_top))
    finding = CHECKS["3b"](tmp_path)
    assert finding.verdict == "not reproduced"
    failed = [e["test"] for e in finding.measured["margins"] if e["decided"] == "fail"]
    assert failed == ["layer 1, level 1 ≤ its level 2 − 0.02"]


def test_every_rule_states_its_null_hypothesis_and_quotes_the_paper():
    for check in findings.CHECKS:
        doc = " ".join(check.function.__doc__.split())
        assert "Null hypothes" in doc or "null hypothes" in doc, check.figure
        assert re.search(r'Paper \((Sec\.|App\.) [0-9A-F.]+\): "', doc), check.figure


PAPER = Path("/work/shared/paper/hierarchical_filtering.tex")


@pytest.mark.skipif(not PAPER.is_file(), reason="the paper's source is not on this machine")
def test_every_quote_of_the_paper_is_its_own_words():
    source = re.sub(r"(?<!\\)%.*", "", PAPER.read_text())  # LaTeX comments are not the paper's words
    source = " ".join(source.split())
    for check in findings.CHECKS:
        doc = " ".join(check.function.__doc__.split())
        paragraph = doc[doc.index("Paper ("):].split(". Rule")[0]
        quotes = re.findall(r'"([^"]+)"', paragraph)
        assert quotes, check.figure
        for quote in quotes:
            assert quote in source, (check.figure, quote)


def test_the_report_shows_a_comparison_without_a_usable_noise_with_why(tmp_path):
    _write(tmp_path, "calibration/mlm/calibration.json", _calibration(0.01, kl_error=None))
    report = write_report(tmp_path, PRESETS["quick"], []).read_text()
    row = next(line for line in report.splitlines() if line.startswith("| 1b |"))
    assert "in-sample KL: +0.04 (no standard error of the KL recorded) (tie)" in row
    assert row.endswith("| **inconclusive** |")


def test_a_bp_k_undefined_on_some_inputs_is_not_a_candidate_of_the_closest(tmp_path):
    # a Random Hierarchy Model's BP_1 below k_train gives some in-sample inputs probability zero: its KL is over
    # fewer inputs, has no paired error and is no candidate of the closest BP, so it ties with no level
    data = _dynamics([3, 2, 2, 0], impossible_bp={f"k{k}": [0.2 if k == 1 else 0.0] * 4 for k in range(DEPTH + 1)})
    data["kl_bp"]["k1"] = [0.1] * 4
    data["kl_bp_gap_se"]["k1"] = [None] * 4
    _write(tmp_path, "dynamics/root.json", data)
    finding = CHECKS["1c"](tmp_path)
    assert finding.verdict == "reproduced" and finding.measured["path"]["ends at k_train"] == "yes"


def test_an_ancestor_read_best_by_the_embedding_is_decided_not_climbed(tmp_path):
    # the embedding reads the root best: its gain over itself is exactly 0, one number, with no noise to hide in
    embedding_reads_the_root = [[0.36, 0.3, 0.3]] + CLIMBING_NEAR_CHANCE[1:]
    _write(tmp_path, "probe/probe_ends.json", _probe(embedding_reads_the_root, num_test=2048))
    finding = CHECKS["12 (left)"](tmp_path)
    assert finding.verdict == "not reproduced"
    entry = next(e for e in finding.measured["margins"] if e["test"].startswith("level 0: layer 0"))
    assert (entry["noise"], entry["decided"]) == (0.0, "fail")


def test_a_margins_cell_reads_findings_written_before_unusable_noises_were_named():
    from hf_treelang.reproduce.report import margins_cell

    older = [{"test": "Spearman", "value": 0.9, "threshold": 0.8, "margin": 0.1, "noise": None, "decided": "pass"}]
    assert margins_cell(older) == "Spearman: +0.1 noise not recorded (pass)"
