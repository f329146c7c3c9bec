"""Sweeps (hf_treelang.sweep): a SPEC as data, one folder per run, identities, resuming, executors, --status, the plan.

Most tests replace the training loop by a stand-in that counts its calls (``fake_train``), so that what the engine
decides — skip, train again, refuse — is checked in milliseconds; the executors, resuming from a checkpoint and the
sample-complexity sweep train real tiny models (ℓ = 2, q = 3, d = 16, one layer, a few steps).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from hf_treelang import TreeLangConfig, TreeLangForMaskedLM, claims, cli
from hf_treelang.analysis import sample_complexity
from hf_treelang.reproduce import plan as reproduce_plan
from hf_treelang.reproduce.presets import PAPER_FIGURES, check_figures
from hf_treelang.reproduce import run as reproduce_run
from hf_treelang.sweep import estimate, figure, spec
from hf_treelang.sweep import runner as engine
from hf_treelang.train import folders, loop
from hf_treelang.train import run as run_module
from hf_treelang.train.arguments import TASKS

TINY = {"depth": 2, "num_symbols": 3, "hidden_size": 16, "num_hidden_layers": 1, "intermediate_size": 16,
        "num_train": 64, "num_eval": 16, "num_test": 16, "per_device_train_batch_size": 16, "num_train_epochs": 1.0,
        "num_evaluations": 1, "num_checkpoints": 2, "report_to": "none", "disable_tqdm": True,
        "use_dataset_builder": False, "cpu_threads": 1}


BERT = {"model_type": "bert", "config_overrides": "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,"
                                                   "intermediate_size=32",  # None: TINY's TreeLang sizes left out
        **{key: None for key in ("hidden_size", "num_hidden_layers", "intermediate_size")}}


def _spec(grid=None, **base):
    return {"task": "root", "base": {**TINY, **base}, "grid": {"seed": [0, 1]} if grid is None else grid}


@pytest.fixture
def fake_train(monkeypatch):
    """The training loop replaced by a stand-in: records (task, seed, k_train) per call, fails for seed 13."""
    calls = []

    def train(run, cache=None, callbacks=()):
        task, data_args, training_args = run.task, run.data_args, run.training_args
        calls.append((task, training_args.seed, data_args.k_train))
        if training_args.seed == 13:
            raise RuntimeError("diverged")
        output_dir = training_args.output_dir
        os.makedirs(output_dir, exist_ok=True)
        final = {"eval_acc_ktest0": 0.25 + 0.25 * training_args.seed, "eval_bp_acc_ktest0": 1.0,
                 f"eval_kl_bp_k{data_args.k_train}": 0.5}
        # the loop's run folder: run_config.json first, metrics.json, run_complete.json last
        (Path(output_dir) / folders.RUN_CONFIG).write_text(json.dumps({"task": task}))
        (Path(output_dir) / "metrics.json").write_text(json.dumps({"final": final, "global_step": 4,
                                                                   "train_runtime_s": 0.0}))
        folders.write_run_complete(output_dir, task=task, global_step=4)
        return loop.TrainingResult(output_dir, final, [], 0.0, 4)

    monkeypatch.setattr(loop, "_train", train)
    pack_jobs = engine.pack_jobs
    monkeypatch.setattr(engine, "pack_jobs",  # the stand-in trains single runs only
                        lambda runs, states, together=True, device=None: pack_jobs(runs, states, together=False))
    return calls


def _quiet(**options):
    return {"workers": 0, "progress": False, "estimate": False, **options}


# ---------------------------------------------------------------- the SPEC


def test_grid_points_are_the_product_in_axis_order_with_readable_folder_names(tmp_path):
    sweep = spec.load_spec(_spec({"k_train": [0, 2], "seed": [0, 1]}))
    assert sweep.points() == [{"k_train": 0, "seed": 0}, {"k_train": 0, "seed": 1}, {"k_train": 2, "seed": 0},
                              {"k_train": 2, "seed": 1}]
    assert [p.name for p in engine.spec_runs(sweep, tmp_path)] == ["k_train=0,seed=0", "k_train=0,seed=1", "k_train=2,seed=0",
                                                         "k_train=2,seed=1"]
    assert spec.point_name({"k_test": [0, 2], "hidden_act": "gelu"}) == "k_test=_0,2_,hidden_act=gelu"


def test_a_yaml_spec_reads_as_its_json(tmp_path):
    (tmp_path / "spec.yaml").write_text("task: root\nbase: {depth: 2}\ngrid:\n  seed: [0, 1]\n")
    assert spec.load_spec(tmp_path / "spec.yaml") == spec.load_spec({"task": "root", "base": {"depth": 2},
                                                                     "grid": {"seed": [0, 1]}})


def test_the_spec_tasks_are_the_training_tasks():
    assert spec.SPEC_TASKS == TASKS
    assert cli.SWEEP_EXECUTORS == engine.EXECUTORS


BAD_SPECS = [
    ({"task": "root", "grid": {"seed": [0]}, "seeds": [1]}, ValueError, r"unknown keys \['seeds'\]"),
    ({"task": "regression", "grid": {"seed": [0]}}, ValueError, r"`task` must be one of \('root', 'mlm', "
                                                                r"'finetune', 'clm'\), got 'regression'"),
    (_spec({}), ValueError, "`grid` is empty"),
    (_spec({"seed": []}), ValueError, "grid axis `seed` must be a non-empty list"),
    (_spec({"seed": [0, 0]}), ValueError, "grid axis `seed` repeats a value"),
    (_spec({"depth": [2, 3]}), ValueError, "`depth` both in `base` and as a grid axis"),
    (_spec(k_trian=1), ValueError, r"SPEC base: `k_trian` is not a run argument.*did you mean `k_train`"),
    (_spec({"k_trains": [0, 1]}), ValueError, r"grid axis `k_trains`: `k_trains` is not a run argument"),
    (_spec({"k_train": [0, 9]}), ValueError, r"run 'k_train=9': `k_train` must be an integer in \[0, 2\], got 9"),
    (_spec({"seed": [0, -1]}), ValueError, r"`seed` must be an integer in \[0, 4294967295\], got -1"),
    (_spec({"learning_rate": [1e-4, -1.0]}), ValueError, r"`learning_rate` must be a real number >= 0, got -1.0"),
    (_spec({"seed": [0, "1"]}), TypeError, r"`seed` must be of type int, got '1' \(str\)"),
    (_spec({"seed": [0]}, output_dir="x"), ValueError, "`output_dir` is set by the runner"),
]


@pytest.mark.parametrize("bad, error, message", BAD_SPECS, ids=[m[:28] for _, _, m in BAD_SPECS])
def test_a_bad_spec_is_refused_before_anything_is_written(bad, error, message, tmp_path, fake_train):
    with pytest.raises(error, match=message):
        engine.run_sweep(bad, tmp_path / "out", **_quiet())
    assert not (tmp_path / "out").exists() and fake_train == []


def test_a_bad_spec_file_is_a_clear_command_line_error(tmp_path, capsys):
    (tmp_path / "spec.json").write_text("{\"task\": \"root\", ")
    assert cli.run_command("sweep", [str(tmp_path / "spec.json"), str(tmp_path / "out")]) == 2
    assert "is not valid JSON" in capsys.readouterr().err
    assert cli.run_command("sweep", [str(tmp_path / "spec.json")]) == 2
    assert "give SPEC and OUT (or --status OUT)" in capsys.readouterr().err
    assert cli.run_command("sweep", ["--status", str(tmp_path)]) == 2
    assert "holds no sweep" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_slurm_executor_without_submitit_names_the_extra(tmp_path, monkeypatch, fake_train):
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit now raises ImportError
    with pytest.raises(ValueError, match=r"needs submitit.*pip install 'hf-treelang\[cluster\]'"):
        engine.run_sweep(_spec(), tmp_path / "out", executor="slurm", progress=False)
    assert not (tmp_path / "out").exists()


def test_slurm_parameters_out_of_range_are_refused_before_submitting(tmp_path, fake_train):
    pytest.importorskip("submitit")
    with pytest.raises(ValueError, match=r"`timeout_min` must be an integer >= 1, got 0"):
        engine.run_sweep(_spec(), tmp_path / "out", executor="slurm", cluster="local",
                         slurm_parameters={"timeout_min": 0}, progress=False)
    assert not (tmp_path / "out").exists()


def test_the_slurm_executor_without_sbatch_on_path_is_refused_before_any_file(tmp_path, monkeypatch, fake_train):
    pytest.importorskip("submitit")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ValueError, match=r"sbatch, which is not on PATH.*--executor local"):
        engine.run_sweep(_spec(), tmp_path / "out", executor="slurm", progress=False)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- identities


def test_the_identity_ignores_where_and_how_a_run_logs_but_not_what_it_computes(tmp_path, monkeypatch):
    first = run_module.resolve("root", TINY, tmp_path / "a")
    elsewhere = run_module.resolve("root", {**TINY, "logging_steps": 7, "disable_tqdm": False,
                                                "cpu_threads": 2}, tmp_path / "b")
    assert first.identity == elsewhere.identity and len(first.identity) == 64
    # the resolved defaults count, not how they were given: n_L = ℓ when unset
    defaults = run_module.resolve("root", {**TINY, "num_hidden_layers": None, "depth": 2}, tmp_path / "c")
    assert defaults.identity == run_module.resolve("root", {**TINY, "num_hidden_layers": 2}, tmp_path / "c").identity
    assert run_module.resolve("root", {**TINY, "sigma": 1}, tmp_path / "a").identity == run_module.resolve(
        "root", {**TINY, "sigma": 1.0}, tmp_path / "a").identity  # numbers normalised: 1 and 1.0 are one run
    for change in ({"seed": 1}, {"k_train": 1}, {"max_grad_norm": 1.0}, {"num_train": 32}):
        assert run_module.resolve("root", {**TINY, **change}, tmp_path / "a").identity != first.identity
    monkeypatch.setattr(run_module, "data_format_version", lambda: "2.0.0")
    assert run_module.resolve("root", TINY, tmp_path / "a").identity != first.identity


def test_a_rerun_skips_finished_runs_without_training(tmp_path, fake_train):
    first = engine.run_sweep(_spec(), tmp_path, **_quiet())
    assert sorted(first.trained) == ["seed=0", "seed=1"] and len(fake_train) == 2
    done = {name: (tmp_path / "runs" / name / folders.RUN_COMPLETE).stat().st_mtime_ns for name in first.trained}
    second = engine.run_sweep(_spec(), tmp_path, **_quiet())
    assert second.trained == [] and sorted(second.skipped) == ["seed=0", "seed=1"] and len(fake_train) == 2
    assert {name: (tmp_path / "runs" / name / folders.RUN_COMPLETE).stat().st_mtime_ns for name in done} == done
    records = engine.read_results(tmp_path)
    assert sorted(r["name"] for r in records) == ["seed=0", "seed=1"]  # one record per run, not one per call
    assert {r["identity"] for r in records} == {run.identity for run in second.runs}


def test_finished_means_the_loops_completion_marker_listing_the_run_identity(tmp_path, fake_train):
    engine.run_sweep(_spec({"seed": [0]}), tmp_path, **_quiet())
    folder = tmp_path / "runs" / "seed=0"
    identity = folders.read_identity(folder)["identity"]
    assert sorted(p.name for p in folder.glob("*.json")) == sorted(  # one marker, one identity file
        [folders.RUN_COMPLETE, folders.RUN_CONFIG, folders.IDENTITY_FILE, "metrics.json"])
    summary = folders.finished_run(folder, identity)
    assert summary["accuracy"] == 0.25 and summary["global_step"] == 4 and summary["identity"] == identity
    assert folders.finished_run(folder, "another identity") is None
    marker = json.loads((folder / folders.RUN_COMPLETE).read_text())
    del marker["files"][folders.IDENTITY_FILE]  # a completion that does not vouch for this identity file
    (folder / folders.RUN_COMPLETE).write_text(json.dumps(marker))
    assert folders.finished_run(folder, identity) is None and folders.folder_state(folder, identity).status == "resume"
    (folder / folders.RUN_COMPLETE).unlink()  # interrupted: no marker
    assert folders.folder_state(folder, identity).status == "resume"
    assert engine.run_sweep(_spec({"seed": [0]}), tmp_path, **_quiet()).trained == ["seed=0"]
    assert folders.finished_run(folder, identity) is not None and len(fake_train) == 2


def test_an_out_of_another_spec_is_refused_and_force_retrains_only_what_changed(tmp_path, fake_train):
    engine.run_sweep(_spec(), tmp_path, **_quiet())
    changed = _spec({"seed": [0, 1, 2]}, learning_rate=3e-4)
    with pytest.raises(ValueError, match=r"different SPEC \(base.learning_rate: \"<unset>\" -> 0.0003; grid.seed: "
                                         r"\[0, 1\] -> \[0, 1, 2\]\); pass --force"):
        engine.run_sweep(changed, tmp_path, **_quiet())
    assert len(fake_train) == 2
    engine.run_sweep(_spec({"seed": [0, 1, 2]}), tmp_path, force=True, **_quiet())
    assert [call[1] for call in fake_train[2:]] == [2]  # seeds 0 and 1 kept: their identity is unchanged
    result = engine.run_sweep(changed, tmp_path, force=True, **_quiet())
    assert sorted(result.trained) == ["seed=0", "seed=1", "seed=2"]  # the learning rate changed every identity
    records = engine.read_results(tmp_path)
    assert sorted(r["name"] for r in records) == ["seed=0", "seed=1", "seed=2"]  # no stale record left
    assert {r["identity"] for r in records} == {run.identity for run in result.runs}


def _save_mlm(folder, seed):
    torch.manual_seed(seed)
    config = TreeLangConfig.from_data(num_symbols=3, depth=2, filter_level=0, hidden_size=16, num_hidden_layers=1,
                                      intermediate_size=16)
    TreeLangForMaskedLM(config).save_pretrained(folder)
    return folder


def test_a_finetuning_run_is_trained_again_when_its_checkpoint_changes(tmp_path, fake_train):
    checkpoint = _save_mlm(tmp_path / "mlm", seed=0)
    sweep = {"task": "finetune", "base": {**TINY, "model_name_or_path": str(checkpoint)}, "grid": {"seed": [0]}}
    engine.run_sweep(sweep, tmp_path / "out", **_quiet())
    engine.run_sweep(sweep, tmp_path / "out", **_quiet())
    assert len(fake_train) == 1
    _save_mlm(checkpoint, seed=1)  # the same folder, other weights
    lines = []
    result = engine.run_sweep(sweep, tmp_path / "out", **_quiet(log=lines.append))
    assert result.trained == ["seed=0"] and len(fake_train) == 2
    assert any("seed=0: its folder holds a run of another identity" in line for line in lines)


def test_a_folder_with_files_of_no_run_is_refused(tmp_path, fake_train):
    (tmp_path / "runs" / "seed=0").mkdir(parents=True)
    (tmp_path / "runs" / "seed=0" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds files that no training run wrote"):
        engine.execute_runs(engine.spec_runs(spec.load_spec(_spec()), tmp_path), tmp_path, **_quiet())
    assert (tmp_path / "runs" / "seed=0" / "notes.txt").read_text() == "mine" and fake_train == []


# ---------------------------------------------------------------- status, failures, packing


def test_status_shows_done_running_failed_and_interrupted_runs(tmp_path, fake_train, capsys, request):
    result = engine.run_sweep(_spec({"seed": [0, 13, 2, 3]}), tmp_path, **_quiet())
    assert list(result.failed) == ["seed=13"] and "RuntimeError: diverged" in result.failed["seed=13"]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    request.addfinalizer(alive.kill)
    for name, pid in (("seed=2", alive.pid), ("seed=3", dead.pid)):  # another live process, and a finished one
        folder = tmp_path / "runs" / name
        (folder / folders.RUN_COMPLETE).unlink()  # not complete
        record = json.loads((folder / folders.IDENTITY_FILE).read_text())
        (folder / folders.IDENTITY_FILE).write_text(json.dumps({**record, "pid": pid}))
        (folder / claims.CLAIM_FILE).write_text(json.dumps(claims.claim_record(pid)))  # each still claims its folder
    statuses = {row.name: row.status for row in engine.sweep_status(tmp_path)}
    assert statuses == {"seed=0": "done", "seed=13": "failed", "seed=2": "running", "seed=3": "interrupted"}
    assert cli.run_command("sweep", ["--status", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "done 1 · running 1 · failed 1 · interrupted 1"
    assert "RuntimeError: diverged" in out
    with pytest.raises(ValueError, match=r"run 'seed=2' is being trained by process \d+"):
        engine.run_sweep(_spec({"seed": [0, 13, 2, 3]}), tmp_path, **_quiet())


def test_runs_differing_in_seed_and_k_train_only_are_packed_into_one_ensemble_job(tmp_path):
    resolved = engine.spec_runs(spec.load_spec(_spec({"learning_rate": [1e-4, 3e-4], "k_train": [0, 2],
                                                      "seed": [0, 1]})), tmp_path)
    states = engine.plan_runs(resolved, tmp_path)
    assert [len(job.runs) for job in engine.pack_jobs(resolved, states, together=False)] == [1] * 8
    jobs = engine.pack_jobs(resolved, states)
    assert [sorted(r.name for r in job.runs) for job in jobs] == [
        sorted(r.name for r in resolved[:4]), sorted(r.name for r in resolved[4:])]  # one per learning rate
    incomplete = engine.pack_jobs(resolved[:3], states)  # not a full seeds x k_train product
    assert [[r.name for r in job.runs] for job in incomplete] == [
        ["learning_rate=0.0001,k_train=0,seed=0", "learning_rate=0.0001,k_train=0,seed=1"],
        ["learning_rate=0.0001,k_train=2,seed=0"]]


def test_a_run_keeps_one_job_name_and_log_whether_it_starts_alone_resumes_or_trains_causally(tmp_path):
    """A run named ``main/a`` logs to ``OUT/logs/main_a.log`` fresh, resumed from its checkpoint and without packing;
    a causal run of the same name likewise (a job name is a file name: no ``/``)."""
    root = engine.sweep_run("root", TINY, tmp_path, "main/a")
    clm = engine.sweep_run("clm", TINY, tmp_path / "clm", "main/a")
    fresh, resumed = folders.FolderState("new"), folders.FolderState("resume", checkpoint=tmp_path / "checkpoint-1")
    names = {"fresh": engine.pack_jobs([root], {"main/a": fresh}, device="cpu"),
             "resumed": engine.pack_jobs([root], {"main/a": resumed}, device="cpu"),
             "one job per run": engine.pack_jobs([root], {"main/a": fresh}, together=False),
             "causal": engine.pack_jobs([clm], {"main/a": fresh}, device="cpu")}
    assert {how: [job.name for job in jobs] for how, jobs in names.items()} == {how: ["main_a"] for how in names}
    payload = engine.job_payload(names["resumed"][0], 1, tmp_path / engine.LOGS_DIR / "main_a.log", tmp_path)
    assert payload["name"] == "main_a" and payload["log_file"].endswith("logs/main_a.log")
    other = engine.sweep_run("root", {**TINY, "seed": 1}, tmp_path, "main_a")  # the same file name: refused
    with pytest.raises(ValueError, match=r"runs 'main/a' and 'main_a' would share the job name 'main_a'"):
        engine.pack_jobs([root, other], {"main/a": fresh, "main_a": fresh}, together=False)


def test_runs_that_would_train_one_after_another_get_a_job_each(tmp_path):
    bert_base = {key: value for key, value in {**TINY, **BERT}.items() if value is not None}
    others = engine.spec_runs(spec.load_spec({"task": "root", "base": bert_base, "grid": {"seed": [0, 1, 2]}}),
                              tmp_path / "bert")
    jobs = engine.pack_jobs(others, engine.plan_runs(others, tmp_path / "bert"), device="cpu")
    assert [[r.name for r in job.runs] for job in jobs] == [["seed=0"], ["seed=1"], ["seed=2"]]  # side by side
    tiny = engine.spec_runs(spec.load_spec(_spec({"seed": [0, 1, 2]})), tmp_path / "tiny")
    states = engine.plan_runs(tiny, tmp_path / "tiny")
    assert [len(job.runs) for job in engine.pack_jobs(tiny, states, device="cpu")] == [3]  # stacked on a CPU
    wide = engine.spec_runs(spec.load_spec(_spec({"seed": [0, 1]}, hidden_size=256, intermediate_size=1024,
                                                 num_hidden_layers=4, depth=4)), tmp_path / "wide")
    assert loop.choose_ensemble_mode(wide[0].model_args.config(wide[0].data_args), 16, "cpu") == "sequential"
    wide_states = engine.plan_runs(wide, tmp_path / "wide")
    assert [len(job.runs) for job in engine.pack_jobs(wide, wide_states, device="cpu")] == [1, 1]
    assert [len(job.runs) for job in engine.pack_jobs(wide, wide_states, device="cuda")] == [2]
    assert [len(job.runs) for job in engine.pack_jobs(wide, wide_states)] == [2]  # decided where the job runs


# ---------------------------------------------------------------- real training: resuming and the executors


@pytest.mark.parametrize("architecture", [{}, BERT], ids=["treelang", "bert"])
def test_an_interrupted_run_resumes_from_its_last_checkpoint(tmp_path, architecture):
    sweep = _spec({"seed": [0]}, **architecture)
    sweep["base"] = {key: value for key, value in sweep["base"].items() if value is not None}
    first = engine.run_sweep(sweep, tmp_path, **_quiet())
    folder = tmp_path / "runs" / "seed=0"
    assert first.records["seed=0"]["global_step"] == 4
    checkpoints = sorted(folder.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert [p.name for p in checkpoints] == ["checkpoint-1", "checkpoint-4"]
    # the process died after its first checkpoint: no later checkpoint, no run_complete.json, a dead pid
    import shutil

    shutil.rmtree(checkpoints[-1])
    (folder / folders.RUN_COMPLETE).unlink()
    record = json.loads((folder / folders.IDENTITY_FILE).read_text())
    (folder / folders.IDENTITY_FILE).write_text(json.dumps({**record, "pid": 2**22 + 1}))
    assert [row.status for row in engine.sweep_status(tmp_path)] == ["interrupted"]
    second = engine.run_sweep(sweep, tmp_path, **_quiet())
    record = second.records["seed=0"]
    assert second.trained == ["seed=0"] and record["resumed_from"] == "checkpoint-1"
    assert record["global_step"] == 4
    log_history = json.loads((folder / "trainer_state.json").read_text())["log_history"]
    assert all(entry["step"] >= 1 for entry in log_history if "loss" in entry)


def test_a_stopped_stacked_job_resumes_as_a_whole_from_its_checkpoint_to_the_same_weights(tmp_path, monkeypatch):
    """Two seeds stacked into one job, 12 steps, a checkpoint to resume from every 5: stopped at step 11, the next
    sweep packs the same job again and resumes it from the job's checkpoint-10, to the weights of an uninterrupted
    sweep; the job's folder keeps no checkpoint once its runs are finished."""
    from safetensors.torch import load_file
    from transformers import TrainerCallback

    sweep = _spec({"seed": [0, 1]}, num_train_epochs=3.0, num_checkpoints=3, resume_checkpoint_steps=5)
    full = engine.run_sweep(sweep, tmp_path / "full", **_quiet())
    assert full.failed == {}

    class Stop(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 11:
                raise RuntimeError("stopped at step 11")

    schedule = loop.schedule_callbacks
    with monkeypatch.context() as patch:
        patch.setattr(loop, "schedule_callbacks", lambda *args, **kwargs: [*schedule(*args, **kwargs), Stop()])
        stopped = engine.run_sweep(sweep, tmp_path / "stopped", **_quiet())
    assert sorted(stopped.failed) == ["seed=0", "seed=1"]
    job = tmp_path / "stopped" / engine.ENSEMBLES_DIR / "ensemble-seed=0-x2"
    assert [path.name for _, path in folders.checkpoints(job)] == ["checkpoint-1", "checkpoint-3", "checkpoint-10"]
    states = engine.plan_runs(stopped.runs, tmp_path / "stopped")
    assert {state.status for state in states.values()} == {"resume"}
    assert all(state.checkpoint is None for state in states.values())  # a member's copies resume nothing alone
    assert [len(job.runs) for job in engine.pack_jobs(stopped.runs, states)] == [2]
    assert engine.stacked_resume_point(job, stopped.runs) == job / "checkpoint-10"
    resumed = engine.run_sweep(sweep, tmp_path / "stopped", **_quiet())
    assert resumed.failed == {} and sorted(resumed.trained) == ["seed=0", "seed=1"]
    for name in ("seed=0", "seed=1"):
        assert resumed.records[name]["resumed_from"] == "checkpoint-10" and resumed.records[name]["global_step"] == 12
        first = load_file(tmp_path / "full" / "runs" / name / "model.safetensors")
        second = load_file(tmp_path / "stopped" / "runs" / name / "model.safetensors")
        assert all(torch.equal(first[key], second[key]) for key in first), name
        assert sorted(p.name for p in (tmp_path / "stopped" / "runs" / name).glob("checkpoint-*")) == sorted(
            p.name for p in (tmp_path / "full" / "runs" / name).glob("checkpoint-*"))
    assert folders.checkpoints(job) == [] and (job / folders.RUN_COMPLETE).is_file()


def test_the_local_executor_trains_in_worker_processes_and_redraws_the_grid(tmp_path):
    # two learning rates: two jobs (an ensemble shares its optimiser settings), one per worker process
    result = engine.run_sweep(_spec({"learning_rate": [1e-4, 2e-4]}, num_train=32), tmp_path, workers=2,
                              progress=False)
    names = ["learning_rate=0.0001", "learning_rate=0.0002"]
    assert result.failed == {} and sorted(result.trained) == names
    for name in names:
        record = json.loads((tmp_path / "runs" / name / folders.IDENTITY_FILE).read_text())
        assert record["pid"] != os.getpid() and folders.finished_run(tmp_path / "runs" / name, record["identity"])
        assert (tmp_path / engine.LOGS_DIR / f"{name}.log").is_file()  # what the worker printed
    summary = json.loads((tmp_path / figure.SUMMARY_FILE).read_text())
    assert summary["x_axis"] == "learning_rate" and summary["finished"] == 2
    assert [p["x"] for p in summary["series"][0]["points"]] == [1e-4, 2e-4]
    assert summary["series"][0]["points"][0]["accuracy"] == result.records[names[0]]["accuracy"]
    assert (tmp_path / figure.FIGURE_FILE).stat().st_size > 1000


def test_seeds_and_k_train_train_together_each_run_writing_its_own_folder(tmp_path):
    result = engine.run_sweep(_spec({"k_train": [0, 2]}, num_train=32), tmp_path, **_quiet())
    assert result.failed == {} and sorted(result.trained) == ["k_train=0", "k_train=2"]
    for name, k in (("k_train=0", 0), ("k_train=2", 2)):
        folder = tmp_path / "runs" / name
        assert folders.IDENTITY_FILE in json.loads((folder / folders.RUN_COMPLETE).read_text())["files"]
        assert json.loads((folder / "config.json").read_text())["filter_level"] == k
        assert result.records[name]["global_step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["ensembles", "runs"]  # trained in place
    job = tmp_path / engine.ENSEMBLES_DIR / "ensemble-k_train=0-x2"  # the job's record, no weights left in it
    assert json.loads((job / folders.ENSEMBLE_FILE).read_text())["members"] == ["k_train=0", "k_train=2"]
    assert folders.checkpoints(job) == [] and not list(job.glob("*.safetensors"))
    again = engine.run_sweep(_spec({"k_train": [0, 2]}, num_train=32), tmp_path, **_quiet())
    assert again.trained == []  # each member has its single run's identity


def test_the_slurm_path_runs_a_job_array_through_submitits_local_executor(tmp_path):
    pytest.importorskip("submitit")
    result = engine.run_sweep(_spec({"seed": [0]}, num_train=16), tmp_path, executor="slurm", cluster="local",
                              slurm_parameters={"timeout_min": 10}, progress=False, estimate=False)
    assert result.failed == {} and result.trained == ["seed=0"]
    assert result.records["seed=0"]["global_step"] == 1
    assert list((tmp_path / ".submitit").iterdir())  # submitit's job folders


# ---------------------------------------------------------------- sample complexity and the plan


def test_sample_complexity_caps_steps_without_forcing_them_on_small_p():
    entries = sample_complexity.sample_complexity_arguments("ckpt", depth=2, num_symbols=3, sigma=1.0,
                                                            grammar_seed=0, filter_level=0, model_kwargs={},
                                                            sizes=[64, 4096], arms=("scratch",), epochs=2.0,
                                                            max_steps=10)
    assert [(size, a["max_steps"]) for _, size, _, a in entries] == [(64, -1), (4096, 10)]  # 64: 4 steps, its epochs


def test_sample_complexity_is_a_sweep_estimated_first_and_never_stale(tmp_path):
    checkpoint = _save_mlm(tmp_path / "mlm", seed=0)
    lines = []
    options = {"sizes": [16], "arms": ("scratch", "frozen"), "epochs": 1.0, "num_test": 16, "num_eval": 16,
               "use_dataset_builder": False, "workers": 0, "progress": False, "log": lines.append}
    result = sample_complexity.sample_complexity_sweep(checkpoint, work_dir=tmp_path / "out", **options)
    assert set(result.accuracy) == {"scratch", "frozen"} and result.failed == {}
    assert all(0.0 <= values[0] <= 1.0 for values in result.accuracy.values()) and result.bp_accuracy == 1.0
    assert lines[0].startswith("2 runs: 0 finished earlier, 2 to train")
    assert any("estimated time on this machine" in line for line in lines[:8])
    assert folders.finished_run(tmp_path / "out" / "runs" / "frozen-P16") is not None
    lines.clear()
    again = sample_complexity.sample_complexity_sweep(checkpoint, work_dir=tmp_path / "out", **options)
    assert again.accuracy == result.accuracy and lines[0].startswith("2 runs: 2 finished earlier, 0 to train")
    with pytest.raises(ValueError, match=r"different SPEC \(runs.frozen-P16.arguments.num_train_epochs: 1.0 -> "
                                         r"2.0.*pass --force"):
        sample_complexity.sample_complexity_sweep(checkpoint, work_dir=tmp_path / "out", **{**options,
                                                                                           "epochs": 2.0})


PLAN_KEYS = {"task", "k_train", "num_train", "num_train_epochs", "num_hidden_layers", "grammar_seed", "seed",
             "max_grad_norm", "figures", "optimizer_steps"}


def test_the_plan_lists_every_training_of_the_preset_with_its_figures_and_steps(tmp_path, capsys):
    assert reproduce_run(cli.command_parser("reproduce").parse_args(["--preset", "tiny", "--plan",
                                                                     str(tmp_path)])) == 0
    printed = capsys.readouterr().out
    plan = json.loads((tmp_path / reproduce_plan.PLAN_FILE).read_text())
    assert all(PLAN_KEYS <= set(row) for row in plan["runs"])
    names = [row["name"] for row in plan["runs"]]
    assert len(names) == len(set(names)) and {"root", "mlm", "mlm_k2"} <= set(names)
    figures = {f for row in plan["runs"] for f in row["figures"]}
    assert {"1b", "1c", "1d", "1f", "2a", "2b", "3a", "4", "6", "7", "8", "10"} <= figures
    assert figures <= set(PAPER_FIGURES)  # the paper's figure numbers, never an appendix section
    root = next(row for row in plan["runs"] if row["name"] == "root")
    assert "1b" not in root["figures"]  # Fig. 1b is the MLM model's calibration
    arms = [row for row in plan["runs"] if "1f" in row["figures"]]
    assert sorted(row["task"] for row in arms) == ["finetune", "finetune", "root"]  # scratch, frozen, finetuned
    assert plan["total_optimizer_steps"] == sum(row["optimizer_steps"] for row in plan["runs"]) > 0
    assert plan["estimated_seconds"]["cpu"] > 0
    if not torch.cuda.is_available():
        assert plan["estimated_seconds"]["cuda"] > plan["estimated_seconds"]["cuda_stacked"] > 0
        assert "measured by benchmarks/gpu_check.py" in printed and plan["gpu_source"].startswith("NVIDIA")
    assert f"{plan['total_optimizer_steps']} optimizer steps in all" in printed
    assert not (tmp_path / "runs").exists()  # nothing trained


def test_a_second_identical_plan_comes_from_the_cache_without_torch_and_a_changed_key_misses(tmp_path, capsys,
                                                                                            monkeypatch):
    from hf_treelang.reproduce import plan_cache

    monkeypatch.setenv(plan_cache.CACHE_ENV, str(tmp_path / "cache"))
    parser = cli.command_parser("reproduce")
    assert reproduce_run(parser.parse_args(["--preset", "tiny", "--plan", str(tmp_path / "plan")])) == 0
    computed = (tmp_path / "plan" / reproduce_plan.PLAN_FILE).read_bytes()
    first = capsys.readouterr().out
    (tmp_path / "plan" / reproduce_plan.PLAN_FILE).unlink()
    code = f"""
import sys
sys.argv[0] = "hf-treelang"
from hf_treelang.cli import main
assert main(["reproduce", "--preset", "tiny", "--plan", {str(tmp_path / "plan")!r}]) == 0
print("heavy:", [m for m in ("torch", "transformers", "datasets") if m in sys.modules])
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, plan_cache.CACHE_ENV: str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("heavy: []") and "come from the cache" in done.stdout
    assert (tmp_path / "plan" / reproduce_plan.PLAN_FILE).read_bytes() == computed
    assert [line for line in first.splitlines() if "optimizer steps" in line][0] in done.stdout
    assert plan_cache.cached_plan("tiny", tmp_path / "plan") is not None
    assert plan_cache.cached_plan("quick", tmp_path / "plan") is None  # another preset
    assert plan_cache.cached_plan("tiny", tmp_path / "elsewhere") is None  # another folder
    monkeypatch.setattr(plan_cache, "code_digest", lambda: "another version of the code")
    assert plan_cache.cached_plan("tiny", tmp_path / "plan") is None


def test_the_appendix_figures_are_numbered_as_in_the_paper():
    sections = {figure: where for figure, (where, _) in PAPER_FIGURES.items()}
    assert [sections[str(n)] for n in range(5, 14)] == ["App. B", "App. E.1", "App. E.2", "App. E.3", "App. E.3",
                                                        "App. E.4", "App. E.5", "App. E.7", "App. F"]
    with pytest.raises(ValueError, match="figure 'E.6' is not one of the paper's figures"):
        check_figures(["1b", "E.6"])


def test_reproduce_takes_out_or_plan(tmp_path, capsys):
    parser = cli.command_parser("reproduce")
    assert reproduce_run(parser.parse_args([str(tmp_path / "a"), "--plan", str(tmp_path / "b")])) == 2
    assert "not both or neither" in capsys.readouterr().err
    assert reproduce_run(parser.parse_args(["--plan", str(tmp_path / "b"), "--preset", "huge"])) == 2
    assert "preset must be one of" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_optimizer_steps_count_as_the_trainer_does(tmp_path):
    assert estimate.epoch_steps(64, 16, 1.0) == 4 and estimate.epoch_steps(65, 16, 1.0) == 5
    assert estimate.epoch_steps(64, 16, 2.5) == 10
    run = run_module.resolve("root", {**TINY, "num_train_epochs": 3.0}, tmp_path)
    assert estimate.optimizer_steps(run.training_args, run.data_args.num_train) == 12
    run = run_module.resolve("root", {**TINY, "max_steps": 5}, tmp_path)
    assert estimate.optimizer_steps(run.training_args, run.data_args.num_train) == 5  # max_steps replaces epochs
    assert estimate.format_duration(30) == "30 s" and estimate.format_duration(7200) == "2.0 h"


def test_the_gpu_estimate_is_the_time_of_autos_step_from_the_measured_table(tmp_path):
    from hf_treelang.train import levers

    table = levers.measured_gpu()
    run = run_module.resolve("root", {**TINY, "max_steps": 10**6}, tmp_path)
    result = estimate.estimate([run], devices=("cuda",)) if not torch.cuda.is_available() else None
    if result is None:
        pytest.skip("a GPU is visible: the estimate measures it instead of reading the table")
    parameters = sum(p.numel() for p in estimate._model(run).parameters())
    assert result.seconds["cuda"] == pytest.approx(levers.auto_seconds(10**6, parameters, table))
    assert result.seconds["cuda_stacked"] == pytest.approx(levers.auto_seconds(10**6, parameters, table,
                                                                               members=16) / 16)
    assert "levers of --step_mode auto" in result.gpu_source and table["date"] in result.gpu_source


def test_an_estimate_measured_on_a_busy_cpu_says_so(tmp_path, monkeypatch):
    run = run_module.resolve("root", {**TINY, "cpu_threads": None}, tmp_path)  # on the estimate's threads
    clock = {"wall": 0.0, "cpu": 0.0}
    monkeypatch.setattr(estimate.time, "perf_counter", lambda: clock["wall"])
    monkeypatch.setattr(estimate.time, "process_time", lambda: clock["cpu"])
    monkeypatch.setattr(estimate.os, "cpu_count", lambda: 2)

    def measured(share):  # a measurement of 1 s of wall time on 2 threads that got `share` of them
        def measure(*args, **kwargs):
            clock["wall"] += 1.0
            clock["cpu"] += 2 * share
            return 10.0
        return measure

    monkeypatch.setattr(estimate, "measure_steps_per_second", measured(0.6))
    busy = estimate.estimate([run], devices=("cpu",), threads=2)
    assert busy.cpu_share == 0.6 and busy.cpu_busy and busy.to_dict()["cpu_busy"]
    assert any("got 60% of its 2 thread(s)" in line for line in estimate.estimate_lines(busy))
    monkeypatch.setattr(estimate, "measure_steps_per_second", measured(0.95))
    idle = estimate.estimate([run], devices=("cpu",), threads=2)
    assert not idle.cpu_busy and not any("other work" in line for line in estimate.estimate_lines(idle))


@pytest.mark.parametrize("axis, values", [("cpu_threads", [1, 2]), ("logging_steps", [10, 20])])
def test_a_grid_over_a_field_that_changes_no_result_is_refused_before_any_work(tmp_path, axis, values):
    sweep = _spec({axis: values})
    sweep["base"].pop(axis, None)
    with pytest.raises(ValueError, match=rf"grid axis `{axis}` does not change a run's result"):
        engine.run_sweep(sweep, tmp_path / "out", **_quiet())
    assert not (tmp_path / "out").exists()


def test_ensemble_flags_are_not_run_arguments_of_a_spec(tmp_path):
    with pytest.raises(ValueError, match="`ensemble_seeds` is not a run argument"):
        engine.run_sweep(_spec(ensemble_seeds=[0, 1]), tmp_path / "out", **_quiet())
    assert not (tmp_path / "out").exists()


def test_a_training_field_outside_the_identity_that_may_change_the_result_is_refused_in_a_spec(tmp_path, fake_train):
    from hf_treelang.train.run import IDENTITY_TRAINING_FIELDS, UNKEYED_TRAINING_FIELDS

    assert not set(IDENTITY_TRAINING_FIELDS) & set(UNKEYED_TRAINING_FIELDS)
    with pytest.raises(ValueError, match="SPEC base: `bf16_full_eval` may change a run's result but is not part of "
                                         "its identity"):
        engine.run_sweep(_spec(bf16_full_eval=True), tmp_path / "out", **_quiet())
    assert not (tmp_path / "out").exists()
    assert engine.run_sweep(_spec({"seed": [0]}, logging_steps=7), tmp_path / "ok", **_quiet()).failed == {}


def test_an_interrupted_local_sweep_stops_its_workers_at_once_instead_of_waiting_for_their_runs():
    from slow_jobs import quick_or_slow_job

    from hf_treelang.sweep.runner import run_local

    def on_result(payload, results):
        raise KeyboardInterrupt  # Ctrl-C while the slow job still trains

    started = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_local([{"sleep_s": 0.0}, {"sleep_s": 600.0}], 2, on_result, job=quick_or_slow_job)
    assert time.perf_counter() - started < 120
