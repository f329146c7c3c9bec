"""`hf-treelang dynamics` over several runs (one training, several model seeds): climb times, the BP_k closest at the
end, the spread over runs, and the files and lines of the command."""

import json

import numpy as np
import pytest

from hf_treelang.analysis import dynamics
from hf_treelang.cli import run_command

STEPS = [0, 10, 100, 1000, 2000, 3000]
LEVELS = 5  # BP_0 .. BP_4

# The closest BP_k at each evaluation of STEPS, the final accuracy on k_test = 0, and the KL to the closest BP.
RETURNS = ([4, 3, 2, 3, 1, 0], 0.95, 0.05)  # back to BP_3 after BP_2: t_2 moves from 100 to 2000
ENDS_AT_1 = ([4, 3, 2, 1, 1, 1], 0.90, 0.2)  # never settles at BP_0: t_0 is None
SETTLED = ([4, 2, 0, 0, 0, 0], 0.99, 0.08)  # skips BP_3 and BP_1: t_3 = t_2, t_1 = t_0
STRICT = ([4, 3, 2, 1, 0, 0], 0.97, 0.03)  # one level per evaluation: t_4 < t_3 < ... < t_0


def _history(closest, final_accuracy, base):
    """Synthetic callback history: KL to BP_k = base + |k - closest|, so BP_closest is the unique minimum."""
    entries = []
    for t, (step, centre) in enumerate(zip(STEPS, closest)):
        entry = {"step": step, "epoch": float(t)}
        for k in range(LEVELS):
            entry[f"eval_kl_bp_k{k}"] = base + abs(k - centre)
            entry[f"eval_acc_ktest{k}"] = final_accuracy * (t + 1) / len(STEPS)
        entry["eval_bp_acc_ktest0"] = 1.0
        entries.append(entry)
    return entries


def _write(folder, case):
    folder.mkdir(parents=True)
    path = folder / "eval_history.json"
    path.write_text(json.dumps(_history(*case)))
    return path


def _result(tmp_path, case, name="run"):
    return dynamics.learning_dynamics(_write(tmp_path / name, case))


def test_climb_times_follow_the_last_return_to_a_larger_k(tmp_path):
    result = _result(tmp_path, RETURNS)
    assert result.closest_bp == [4, 3, 2, 3, 1, 0]
    assert result.climb_times() == {0: 3000, 1: 2000, 2: 2000, 3: 10, 4: 0}
    without_return = _result(tmp_path, ([4, 3, 2, 2, 1, 0], 0.95, 0.05), "no_return")
    assert without_return.climb_times()[2] == 100


def test_a_run_that_ends_at_bp_1_has_no_climb_time_to_bp_0(tmp_path):
    result = _result(tmp_path, ENDS_AT_1)
    assert result.climb_times() == {0: None, 1: 1000, 2: 100, 3: 10, 4: 0}
    saved = result.to_dict()
    assert saved["climb_times"] == {"k0": None, "k1": 1000, "k2": 100, "k3": 10, "k4": 0}
    assert saved["closest_at_last_3"] == [1, 1, 1]


def test_closest_at_end(tmp_path):
    result = _result(tmp_path, RETURNS)
    assert result.closest_at_end() == [3, 1, 0]
    assert result.closest_at_end(2) == [1, 0]
    assert result.closest_at_end(10) == [4, 3, 2, 3, 1, 0]
    with pytest.raises(ValueError, match="count"):
        result.closest_at_end(0)


def test_seed_summary_counts_and_spread(tmp_path):
    cases = {"returns": RETURNS, "ends_at_1": ENDS_AT_1, "settled": SETTLED, "strict": STRICT}
    results = [_result(tmp_path, case, name) for name, case in cases.items()]
    summary = dynamics.seed_summary(results, list(cases))
    assert summary["num_runs"] == 4
    assert [r["name"] for r in summary["runs"]] == list(cases)
    assert summary["runs"][2]["alignment_sequence"] == [4, 2, 0]
    assert summary["runs"][2]["climb_times"] == {"k0": 100, "k1": 100, "k2": 10, "k3": 10, "k4": 0}
    assert summary["runs"][0]["closest_at_last_3"] == [3, 1, 0]
    assert summary["runs"][1]["bp_accuracy"] == 1.0 and summary["runs"][1]["k_test"] == 0
    assert summary["runs_settled_at_min_bp"] == 1  # only "settled" ends 0, 0, 0
    assert summary["runs_climb_times_ordered"] == 1  # only "strict": "settled" skips BP_3 and BP_1

    accuracy = np.array([0.95, 0.90, 0.99, 0.97])
    kl = np.array([0.05, 1.2, 0.08, 0.03])  # "ends_at_1" is 1 away from BP_0 at the end
    assert summary["final_accuracy"]["mean"] == pytest.approx(accuracy.mean())
    assert summary["final_accuracy"]["std"] == pytest.approx(accuracy.std(ddof=1))
    assert [r["accuracy_gap"] for r in summary["runs"]] == pytest.approx(list(1.0 - accuracy))  # BP_0's 1.0 − model
    assert summary["accuracy_gap"]["mean"] == pytest.approx(1.0 - accuracy.mean())
    assert summary["accuracy_gap"]["std"] == pytest.approx(accuracy.std(ddof=1))
    assert summary["final_kl"]["mean"] == pytest.approx(kl.mean())
    assert summary["final_kl"]["std"] == pytest.approx(kl.std(ddof=1))
    t0 = np.array([3000, 100, 2000])  # over the three runs that reach BP_0
    assert summary["climb_times"]["k0"] == {"mean": pytest.approx(t0.mean()), "std": pytest.approx(t0.std(ddof=1)),
                                            "runs": 3}
    t2 = np.array([2000, 100, 10, 100])
    assert summary["climb_times"]["k2"]["mean"] == pytest.approx(t2.mean())
    assert summary["climb_times"]["k2"]["std"] == pytest.approx(t2.std(ddof=1))


def test_seed_summary_of_one_run_has_no_spread(tmp_path):
    summary = dynamics.seed_summary([_result(tmp_path, SETTLED)], ["only"])
    assert summary["final_accuracy"] == {"mean": pytest.approx(0.99), "std": None, "runs": 1}
    assert summary["climb_times"]["k0"]["std"] is None
    with pytest.raises(ValueError, match="one name per run"):
        dynamics.seed_summary([_result(tmp_path, RETURNS, "other")], ["a", "b"])
    with pytest.raises(ValueError, match="at least one run"):
        dynamics.seed_summary([], [])


def test_cli_over_two_runs_writes_every_run_and_the_summary(tmp_path, capsys):
    first, second = _write(tmp_path / "seed0", RETURNS), _write(tmp_path / "seed1", ENDS_AT_1)
    out = tmp_path / "out"
    assert run_command("dynamics", [str(first), str(second), "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert names == {"dynamics_0.png", "dynamics_0.json", "dynamics_1.png", "dynamics_1.json", "dynamics_seeds.json",
                     "dynamics_seeds.png"}
    assert (out / "dynamics_seeds.png").stat().st_size > 1000
    assert json.loads((out / "dynamics_1.json").read_text())["climb_times"]["k0"] is None
    summary = json.loads((out / "dynamics_seeds.json").read_text())
    assert summary["num_runs"] == 2 and summary["runs"][0]["name"] == str(first)
    printed = capsys.readouterr().out
    assert (f"run 0 ({first}): closest BP_k 4 → 3 → 2 → 3 → 1 → 0; last 3: 3,1,0; t_k: t4=0 t3=10 t2=2000 "
            "t1=2000 t0=3000; acc k_test=0 0.950 (BP 1.000); KL BP_0 0.050") in printed
    assert "t1=1000 t0=none;" in printed
    # acc: mean(0.95, 0.90) = 0.925, std 0.035 (BP's 1.0 − acc: 0.075 ± 0.035); KL to BP_0: mean(0.05, 1.2) = 0.625,
    # std 0.813
    assert ("over 2 runs: acc k_test=0 0.925 ± 0.035 (BP − model 0.075 ± 0.035), KL BP_0 0.625 ± 0.813; BP_0 closest "
            "at the last 3 evaluations "
            "in 0 of 2; every level closest in turn (t_ℓ < … < t_0) in 0 of 2") in printed
    assert "wrote 6 files" in printed


def test_cli_with_one_run_writes_the_same_files_as_before(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_command("dynamics", [str(_write(tmp_path / "seed0", SETTLED)), "--out", str(out), "--name", "mlm"]) == 0
    assert {p.name for p in out.iterdir()} == {"mlm.png", "mlm.json"}
    printed = capsys.readouterr().out
    assert "closest BP_k along training: [4, 2, 0]" in printed and "over 1 runs" not in printed


def test_cli_reads_every_run_before_writing(tmp_path, capsys):
    first = _write(tmp_path / "seed0", RETURNS)
    out = tmp_path / "out"
    missing = tmp_path / "seed1" / "eval_history.json"
    assert run_command("dynamics", [str(first), str(missing), "--out", str(out)]) == 2
    assert str(missing) in capsys.readouterr().err
    assert not out.exists()


def test_levels_within_two_paired_standard_errors_of_the_closest_bp_are_told_apart_from_the_others(tmp_path):
    """KL to BP_0, BP_1, BP_2 and the paired errors of each less the closest's: BP_1 within noise of BP_0 (a gap of
    0.005 against an error of 0.004), BP_2 not; an evaluation without the errors, or with errors taken against another
    closest BP, says None."""
    rows = [{"step": 1, "eval_kl_bp_k0": 0.5, "eval_kl_bp_k1": 0.3, "eval_kl_bp_k2": 0.2},  # written before the errors
            {"step": 2, "eval_kl_bp_k0": 0.20, "eval_kl_bp_k1": 0.10, "eval_kl_bp_k2": 0.104,
             "eval_kl_gap_se_bp_k0": 0.01, "eval_kl_gap_se_bp_k1": 0.0, "eval_kl_gap_se_bp_k2": 0.001},
            {"step": 3, "eval_kl_bp_k0": 0.100, "eval_kl_bp_k1": 0.105, "eval_kl_bp_k2": 0.3,
             "eval_kl_gap_se_bp_k0": 0.0, "eval_kl_gap_se_bp_k1": 0.004, "eval_kl_gap_se_bp_k2": 0.01},
            {"step": 4, "eval_kl_bp_k0": 0.100, "eval_kl_bp_k1": 0.105, "eval_kl_bp_k2": 0.3,
             "eval_kl_gap_se_bp_k0": 0.003, "eval_kl_gap_se_bp_k1": 0.0, "eval_kl_gap_se_bp_k2": 0.01}]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "eval_history.json").write_text(json.dumps(rows))
    result = dynamics.learning_dynamics(tmp_path / "run" / "eval_history.json")
    assert result.closest_bp == [2, 1, 0, 0]
    assert result.within_noise_of_closest() == [None, [1], [0, 1], None]
    assert result.within_noise_of_closest(z=6.0)[1] == [1, 2]  # a gap of 0.004 is 4 errors of 0.001
    assert result.within_noise_of_closest(z=1.0)[2] == [0]
    assert result.to_dict()["within_noise_of_closest"] == [None, [1], [0, 1], None]
    assert "within_noise_of_closest" not in _result(tmp_path, STRICT, "older").to_dict()  # no errors logged
    with pytest.raises(ValueError, match=r"`z` must be a finite number >= 0.*got -1"):
        result.within_noise_of_closest(z=-1)
