"""`hf-treelang reproduce`: the whole pipeline at the hidden tiny preset, its report, and resuming."""

import json
import re

import pytest

from hf_treelang import reproduce as reproduce_module
from hf_treelang.reproduce import PRESETS, reproduce, steps_of


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce") / "out"
    first = reproduce(out, "tiny", progress=False)
    markers = {p.name: p.read_bytes() for p in (out / ".done").iterdir()}
    second = reproduce(out, "tiny", progress=False)
    return out, first, second, markers


def test_tiny_preset_runs_every_step_and_embeds_every_figure(tiny_run):
    out, first, _, _ = tiny_run
    names = [name for name, _ in steps_of(PRESETS["tiny"])]
    assert [r.name for r in first.steps] == names
    assert all(r.status == "ran" for r in first.steps)
    report = first.report.read_text()
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    expected = {"bp/bp_baselines.png", "dynamics/root.png", "dynamics/mlm.png", "calibration/mlm/calibration.png",
                "calibration/root/calibration.png", "attention/mlm/attention.png", "attention/root/attention.png",
                "probe/probe.png", "probe/probe_ends.png", "sample_complexity/sample_complexity.png"}
    assert expected <= set(figures)
    for figure in figures:
        assert (out / figure).stat().st_size > 1000
    assert "| step | status | seconds |" in report and "missing" not in report


def test_report_compares_models_with_bp_on_the_same_inputs(tiny_run):
    out, _, _, _ = tiny_run
    baselines = json.loads((out / "bp" / "bp_baselines.json").read_text())["accuracy"]
    depth = PRESETS["tiny"].depth
    assert sorted(baselines) == [str(k) for k in range(depth + 1)]
    assert baselines["0"]["root_optimal"] == 1.0  # the full hierarchy determines its root
    for task in ("root", "mlm"):
        final = json.loads((out / "runs" / task / "run_done.json").read_text())["final"]
        for k, row in baselines.items():
            # the baselines and the training callback's BP reference use the same test inputs and masks
            assert row[f"{task}_k_train"] == pytest.approx(final[f"eval_bp_acc_ktest{k}"])
            assert 0.0 <= final[f"eval_acc_ktest{k}"] <= 1.0
        assert baselines["0"][f"{task}_optimal"] == baselines["0"][f"{task}_k_train"]  # k_train = 0: same BP
    report = (out / "report.md").read_text()
    assert re.search(r"\| root \| 0 \| [0-9.]+ \| 1\.000 \| 1\.000 \|", report)


def test_rerun_skips_finished_steps_and_keeps_their_results(tiny_run):
    out, first, second, markers = tiny_run
    assert [r.status for r in second.steps] == ["skipped"] * len(first.steps)
    assert {p.name: p.read_bytes() for p in (out / ".done").iterdir()} == markers
    assert "done earlier" in second.report.read_text()


def test_a_folder_of_another_preset_or_an_unknown_preset_is_refused(tmp_path, capsys):
    (tmp_path / "preset.json").write_text(json.dumps({"name": "quick"}))
    with pytest.raises(ValueError, match="preset 'quick'"):
        reproduce(tmp_path, "tiny", progress=False)
    assert reproduce_module.main([str(tmp_path / "new"), "--preset", "huge"]) == 2
    assert "quick" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
