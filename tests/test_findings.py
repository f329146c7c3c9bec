"""What reproduced (hf_treelang.reproduce.findings): every figure's check on hand-written step outputs — one that
passes, one that fails, none when the file is absent — the report's table and findings.json; and the analyses at
laptop speed: --threads and the estimated time of probe and sample-complexity, and the frozen − scratch gap per P
with its spread over seeds."""

import json
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


def _attention(models: dict) -> dict:
    """An attention JSON: ``{k_train: [layer map, ...]}`` (one head each)."""
    return {"models": [{"filter_level": k, "depth": DEPTH, "task": "mlm", "maps": [[m] for m in maps]}
                       for k, maps in models.items()]}


HIERARCHICAL = [_tree_template(DEPTH, t) for t in (1, 2, 3)]  # App. F's layers: sibling, cousins, other half
UNIFORM = [_uniform(DEPTH)] * 3


def _panel(k_test: str, accuracy: dict, seed: int = 0) -> dict:
    """An accuracy-vs-P panel: ``{k_train: (accuracy at P=64, at P=128, BP)}``."""
    return {"k_test": k_test, "grammar_seed": seed, "title": k_test,
            "curves": [{"label": f"k_train={k}", "filter_level": k, "num_layers": 2, "sizes": [64, 128],
                        "accuracy": [a, b], "bp_accuracy": bp} for k, (a, b, bp) in accuracy.items()]}


MATCHING = {0: (0.6, 0.99, 1.0), 2: (0.5, 0.70, 0.71)}
OFF_BP = {0: (0.6, 0.80, 1.0), 2: (0.5, 0.70, 0.71)}


def _probe(accuracy) -> dict:
    """A probe JSON of layers 0..3 and levels 0..2 at chance 0.3."""
    return {"depth": DEPTH, "layers": [0, 1, 2, 3], "levels": [0, 1, 2], "accuracy": accuracy,
            "final_accuracy": accuracy, "chance": [0.3, 0.3, 0.3], "bp_accuracy": [0.95, 0.95, 0.95]}


# accuracy 0.9 where the layer reaches the level (height 3 − m <= layer), chance above it: the layers climb the tree
CLIMBING = [[0.9 if DEPTH - m <= layer else 0.3 for m in (0, 1, 2)] for layer in range(4)]
FLAT = [[0.9, 0.9, 0.9] for _ in range(4)]  # every layer knows every ancestor: nothing is climbed


def _filtered_probes(level_1_of_k2: float) -> dict:
    return {"models": [{"model_filter_level": k, "levels": [0, 1, 2], "accuracy": [row], "final_accuracy": [row],
                        "chance": [0.3] * 3, "bp_accuracy": [0.95] * 3}
                       for k, row in ((0, [0.9, 0.9, 0.9]), (2, [0.5, level_1_of_k2, 0.9]))]}


def _gap(mean: float, spread: float) -> dict:
    return {"sizes": [128, 512], "seeds": [0, 1, 2], "bp_accuracy": 1.0,
            "accuracy": {"scratch": [0.4, 0.8], "frozen": [0.4 + mean, 0.85]},
            "gap_vs_scratch": {"frozen": [{"size": 128, "mean": mean, "spread": spread, "num_seeds": 3,
                                           "values": [mean] * 3},
                                          {"size": 512, "mean": 0.05, "spread": 0.01, "num_seeds": 3,
                                           "values": [0.05] * 3}]}}


# figure -> (file under OUT, output that reproduces the claim, output that does not)
CASES = {
    "1b": ("calibration/mlm/calibration.json",
           {"sets": {"in_sample": {"kl_mean": 0.01, "argmax_match": 0.97}, "uniform": {"spearman_mean": 0.8}}},
           {"sets": {"in_sample": {"kl_mean": 0.20, "argmax_match": 0.97}, "uniform": {"spearman_mean": 0.8}}}),
    "1c": ("dynamics/root.json", {"alignment_sequence": [3, 2, 3, 1, 0]}, {"alignment_sequence": [3, 2, 1]}),
    "1d": ("dynamics/mlm.json", {"alignment_sequence": [3, 2, 1]}, {"alignment_sequence": [3, 2, 3, 1]}),
    "1e": ("attention/mlm/attention.json", _attention({0: HIERARCHICAL}), _attention({0: UNIFORM})),
    "1f": ("sample_complexity/sample_complexity.json", _gap(0.10, 0.03), _gap(0.02, 0.05)),
    "2a": ("accuracy_vs_samples/fig2a_e3.json", {"panels": [_panel("full", MATCHING), _panel("train", OFF_BP)]},
           {"panels": [_panel("full", OFF_BP), _panel("train", MATCHING)]}),
    "2b": ("dynamics/root.json",
           {"accuracy_ktest": {"k0": [0.25, 0.5, 0.9, 0.97], "k1": [0.25, 0.5, 0.65, 0.69],
                               "k2": [0.25, 0.5, 0.45, 0.42], "k3": [0.25, 0.5, 0.4, 0.3]}},
           {"accuracy_ktest": {"k0": [0.25, 0.5, 0.9, 0.97], "k1": [0.25, 0.5, 0.65, 0.69],
                               "k2": [0.25, 0.5, 0.45, 0.42], "k3": [0.25, 0.3, 0.4, 0.5]}}),
    "3a": ("dynamics/mlm.json",
           {"steps": [0, 10, 100, 1000], "bp_accuracy_ktest": {"k0": 0.7, "k1": 0.6, "k2": 0.5, "k3": 0.3},
            "accuracy_ktest": {"k0": [0.3, 0.4, 0.6, 0.69], "k1": [0.3, 0.4, 0.58, 0.6],
                               "k2": [0.3, 0.48, 0.5, 0.5], "k3": [0.28, 0.3, 0.3, 0.3]}},
           {"steps": [0, 10, 100, 1000], "bp_accuracy_ktest": {"k0": 0.7, "k1": 0.6, "k2": 0.5, "k3": 0.3},
            "accuracy_ktest": {"k0": [0.3, 0.4, 0.6, 0.62], "k1": [0.3, 0.4, 0.58, 0.6],
                               "k2": [0.3, 0.48, 0.5, 0.5], "k3": [0.28, 0.3, 0.3, 0.3]}}),
    "3b": ("probe/probe.json", _probe(CLIMBING), _probe(FLAT)),
    "4": ("attention/mlm/attention.json", _attention({0: HIERARCHICAL, 2: HIERARCHICAL, 3: UNIFORM}),
          _attention({0: HIERARCHICAL, 2: UNIFORM, 3: UNIFORM})),
    "6": ("accuracy_vs_samples/e1_layers.json",
          {"panels": [{"k_test": "full", "curves": [{"num_layers": 1, "accuracy": [0.3, 0.5]},
                                                    {"num_layers": 2, "accuracy": [0.5, 0.9]}]}]},
          {"panels": [{"k_test": "full", "curves": [{"num_layers": 1, "accuracy": [0.5, 0.9]},
                                                    {"num_layers": 2, "accuracy": [0.3, 0.5]}]}]}),
    "7": ("accuracy_vs_samples/e2_grammar_seeds.json",
          {"panels": [_panel("full", MATCHING, seed=1), _panel("full", MATCHING, seed=15)]},
          {"panels": [_panel("full", MATCHING, seed=1), _panel("full", OFF_BP, seed=15)]}),
    "8": ("accuracy_vs_samples/fig2a_e3.json", {"panels": [_panel("full", OFF_BP), _panel("train", MATCHING)]},
          {"panels": [_panel("full", MATCHING), _panel("train", OFF_BP)]}),
    "9": ("accuracy_vs_samples/fig9_kl.json",
          {"curves": {"in_sample": {"0": {"sizes": [64, 256], "kl": [0.8, 0.1]}},
                      "uniform": {"0": {"sizes": [64, 256], "kl": [0.9, 1.4]}}}},
          {"curves": {"in_sample": {"0": {"sizes": [64, 256], "kl": [0.8, 0.9]}},
                      "uniform": {"0": {"sizes": [64, 256], "kl": [0.9, 0.5]}}}}),
    "10": ("dynamics/mlm.json", {"match_bp": {"k0": [0.3, 0.95]}, "spearman_bp": {"k0": [0.1, 0.9]}},
           {"match_bp": {"k0": [0.3, 0.70]}, "spearman_bp": {"k0": [0.1, 0.9]}}),
    "11": ("attention/classifier/attention.json", _attention({0: UNIFORM, 2: HIERARCHICAL}),
           _attention({0: HIERARCHICAL, 2: UNIFORM})),
    "12 (left)": ("probe/probe_ends.json", _probe(CLIMBING), _probe(FLAT)),
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


def test_one_seed_has_no_spread_so_fig1f_asks_for_a_positive_gap_and_says_so(tmp_path):
    one_seed = {"sizes": [128], "accuracy": {"scratch": [0.50], "frozen": [0.55]}}  # written before the gap
    _write(tmp_path, "sample_complexity/sample_complexity.json", one_seed)
    finding = CHECKS["1f"](tmp_path)
    assert finding.verdict == "reproduced" and "one seed" in finding.note
    assert finding.measured["frozen_minus_scratch"] == pytest.approx(0.05)


def test_a_k_train_recorded_by_the_preset_is_the_end_of_the_root_alignment(tmp_path):
    _write(tmp_path, "preset.json", {"name": "x", "filter_level": 1})
    _write(tmp_path, "dynamics/root.json", {"alignment_sequence": [3, 2, 1]})
    assert CHECKS["1c"](tmp_path).verdict == "reproduced"


def test_the_report_has_one_row_per_figure_and_findings_json_beside_it(tmp_path):
    for figure in ("1c", "3b"):
        _write(tmp_path, CASES[figure][0], CASES[figure][1])
    _write(tmp_path, CASES["1d"][0], CASES["1d"][2])
    report = write_report(tmp_path, PRESETS["quick"], []).read_text()
    rows = [line for line in report.splitlines() if line.startswith("| ") and line.endswith(("reproduced** |",
                                                                                             "preset |"))]
    assert [row.split(" | ")[0][2:] for row in rows] == list(CASES)
    assert "| 1c |" in report and "| **reproduced** |" in report and "| **not reproduced** |" in report
    written = json.loads((tmp_path / findings.FINDINGS_FILE).read_text())
    verdicts = {f["figure"]: f["verdict"] for f in written["findings"]}
    assert verdicts["1c"] == verdicts["3b"] == "reproduced" and verdicts["1d"] == "not reproduced"
    assert written["verdicts"] == {"reproduced": 2, "not reproduced": 1, "not run at this preset": len(CASES) - 3}
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
    assert capsys.readouterr().err.strip() == "hf-treelang sample-complexity: error: seeds must not repeat, got [0, 0]"
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
    assert "1 torch thread(s)" in lines[0] and lines[1].startswith("held-out accuracy")


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
