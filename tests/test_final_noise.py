"""The paired errors of a finished run's last evaluation recomputed from its weights (hf_treelang.analysis.final_noise)
and `hf-treelang compare --reevaluate`, for runs whose history lacks them."""

import json
import shutil

import numpy as np
import pytest

from hf_treelang import cli
from hf_treelang.analysis.dynamics import learning_dynamics
from hf_treelang.analysis.final_noise import complete_last_evaluation, final_gap_errors
from hf_treelang.train.folders import RUN_COMPLETE, write_run_complete
from tiny_run import run_tiny

GAP = "eval_kl_gap_se_bp_k"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny TreeLang runs, root and next leaf, trained with the errors logged."""
    root = tmp_path_factory.mktemp("final_noise")
    run_tiny("root", root / "root", "--num_checkpoints", "0")
    run_tiny("clm", root / "clm", "--num_checkpoints", "0")
    return root


def _without_errors(folder, copy):
    """``folder`` copied to ``copy`` as a run trained before the errors were logged: no gap key in its histories."""
    shutil.copytree(folder, copy)
    for name in ("eval_history.json", "trainer_state.json"):
        path = copy / name
        document = json.loads(path.read_text())
        rows = document["log_history"] if isinstance(document, dict) and "log_history" in document else document
        for row in (rows["history"] if isinstance(rows, dict) else rows):
            for key in [key for key in row if key.startswith(GAP)]:
                del row[key]
        path.write_text(json.dumps(document))
    record = json.loads((copy / RUN_COMPLETE).read_text())
    write_run_complete(copy, **{key: value for key, value in record.items() if key not in ("files", "digests")})
    return copy


@pytest.mark.parametrize("task", ["root", "clm"])
def test_the_recomputed_errors_are_the_ones_the_run_logged_at_its_last_evaluation(runs, task):
    dynamics = learning_dynamics(runs / task)
    logged = {k: float(values[-1]) for k, values in dynamics.kl.items()}
    errors = final_gap_errors(runs / task, logged)
    assert sorted(errors) == sorted(dynamics.kl_gap_se) and min(errors.values()) == 0.0
    for k, value in errors.items():
        assert value == pytest.approx(dynamics.kl_gap_se[k][-1], rel=1e-4, abs=1e-9)


def test_a_run_whose_weights_do_not_give_its_logged_kl_is_refused(runs):
    dynamics = learning_dynamics(runs / "root")
    logged = {k: float(values[-1]) for k, values in dynamics.kl.items()}
    logged[0] *= 1.01
    with pytest.raises(ValueError, match=r"saved model gives KL .* to BP_0 .* not those of its history"):
        final_gap_errors(runs / "root", logged)


def test_compare_reevaluates_only_runs_without_the_errors_to_the_same_levels(runs, tmp_path):
    older = _without_errors(runs / "root", tmp_path / "older")
    dynamics = learning_dynamics(older)
    assert dynamics.kl_gap_se == {} and dynamics.within_noise_of_closest()[-1] is None
    assert complete_last_evaluation(dynamics, older)
    assert np.isnan(dynamics.kl_gap_se[0][0]) and dynamics.within_noise_of_closest()[:-1] == [None] * (
        len(dynamics.steps) - 1)
    expected = learning_dynamics(runs / "root").within_noise_of_closest()[-1]
    assert dynamics.within_noise_of_closest()[-1] == expected
    assert not complete_last_evaluation(learning_dynamics(runs / "root"), runs / "root")  # logged: nothing to do
    assert cli.main(["compare", str(older), "--out", str(tmp_path / "plain")]) == 0
    (plain,) = json.loads((tmp_path / "plain" / "compare.json").read_text())["runs"]
    assert plain["within_noise_at_end"] is None
    assert cli.main(["compare", str(older), "--reevaluate", "--out", str(tmp_path / "again")]) == 0
    (again,) = json.loads((tmp_path / "again" / "compare.json").read_text())["runs"]
    assert again["within_noise_at_end"] == expected


def test_runs_of_two_tasks_on_the_same_data_are_reevaluated_each_against_its_own_task(runs, tmp_path):
    """The root and next-leaf runs share their data arguments: one re-evaluation gives each its own task's errors."""
    folders = [_without_errors(runs / task, tmp_path / task) for task in ("clm", "root")]
    assert cli.main(["compare", *map(str, folders), "--reevaluate", "--out", str(tmp_path / "cmp")]) == 0
    saved = {record["task"]: record for record in json.loads((tmp_path / "cmp" / "compare.json").read_text())["runs"]}
    for task in ("clm", "root"):
        assert saved[task]["within_noise_at_end"] == learning_dynamics(runs / task).within_noise_of_closest()[-1]


def test_a_run_whose_weights_do_not_give_its_logged_kl_is_named_and_the_others_are_compared(runs, tmp_path, capsys):
    broken = _without_errors(runs / "root", tmp_path / "broken")
    path = broken / "eval_history.json"
    document = json.loads(path.read_text())
    rows = document["history"] if isinstance(document, dict) else document
    rows[-1]["eval_kl_bp_k0"] *= 1.5  # not what the weights give
    path.write_text(json.dumps(document))
    record = json.loads((broken / RUN_COMPLETE).read_text())
    write_run_complete(broken, **{key: value for key, value in record.items() if key not in ("files", "digests")})
    good = _without_errors(runs / "clm", tmp_path / "good")
    assert cli.main(["compare", str(broken), str(good), "--reevaluate", "--out", str(tmp_path / "cmp")]) == 0
    printed = capsys.readouterr().out
    assert "not re-evaluated (its paths show no ≈)" in printed and str(broken) in printed
    saved = {record["task"]: record for record in json.loads((tmp_path / "cmp" / "compare.json").read_text())["runs"]}
    assert saved["root"]["within_noise_at_end"] is None and saved["clm"]["within_noise_at_end"] is not None
