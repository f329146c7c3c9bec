"""`reproduce --preset laptop_full`: every sweep of the paper at laptop size, each run trained by the validation
stopping rule, evaluation sets sized to decide, every run trained first with workers side by side, and
`sweep_runs.json` listing each sweep run with the command that trains it alone."""

import json
from dataclasses import replace

import pytest

from hf_treelang.reproduce import PRESETS, reproduce
from hf_treelang.reproduce.plan import planned_runs, train_ahead
from hf_treelang.reproduce.steps import SWEEP_RUNS_FILE, Context, figure_sweep_runs
from hf_treelang.train.folders import finished_run
from hf_treelang.train.run import runs_from_command_line

FULL = PRESETS["laptop_full"]


def test_laptop_full_sizes_every_sweep_the_issue_names(tmp_path):
    ctx = Context(tmp_path, FULL, progress=False)
    runs = [run for run, _ in figure_sweep_runs(ctx)]
    main = {(r.data_args.k_train, r.data_args.num_train) for r in runs
            if r.data_args.grammar_seed == 0 and r.model_args.model_kwargs(4)["num_hidden_layers"] == 4}
    assert len({k for k, _ in main}) >= 5 and all(len({p for k2, p in main if k2 == k}) >= 5 for k, _ in main)
    layers = {r.model_args.model_kwargs(4)["num_hidden_layers"] for r in runs}
    assert len(layers - {4}) >= 3
    assert len({r.data_args.grammar_seed for r in runs} - {0}) >= 2
    for run in runs:  # every sweep run stops by the validation rule, within a cap, on evaluation sets of its own
        t, d = run.training_args, run.data_args
        assert t.early_stopping_patience == FULL.sweep_patience and t.max_steps == FULL.sweep_max_steps
        assert t.early_stopping_min_steps == FULL.sweep_min_steps > 0  # no stop on the plateau before learning
        assert (d.num_eval, d.num_test) == (FULL.sweep_num_eval, FULL.sweep_num_test)
    root, mlm = (ctx.spec(task, task) for task in ("root", "mlm"))
    for run in (root, mlm):  # the main runs: the scripts' laptop runs with larger evaluation sets
        assert (run.data_args.num_eval, run.data_args.num_test) == (FULL.main_num_eval, FULL.main_num_test)
    assert mlm.training_args.num_train_epochs == 40.0


def tiny_ahead():
    """The tiny preset with its sweeps on the validation stopping rule and every run trained first, two at a time."""
    return replace(PRESETS["tiny"], name="tiny_ahead", sweep_patience=2, sweep_check_steps=2, sweep_max_steps=8,
                   sweep_num_eval=48, sweep_num_test=40, workers=2)


@pytest.fixture(scope="module")
def ahead(tmp_path_factory):
    PRESETS["tiny_ahead"] = preset = tiny_ahead()
    try:
        out = tmp_path_factory.mktemp("ahead") / "out"
        trained = train_ahead(Context(out, preset, progress=False), workers=2)
        result = reproduce(out, "tiny_ahead", progress=False, only=["data", "root_sweep", "layers_sweep"])
        yield out, preset, trained, result
    finally:
        del PRESETS["tiny_ahead"]


def test_workers_train_every_run_of_the_preset_before_the_steps_which_reuse_them(ahead):
    out, preset, trained, result = ahead
    ctx = Context(out, preset, progress=False)
    planned = planned_runs(ctx)
    assert trained == len(planned)
    for entry in planned:
        assert finished_run(out / "runs" / entry["name"]) is not None, entry["name"]
    assert [step.status for step in result.steps] == ["ran"] * 3
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == len(planned), "no run was trained twice"


def test_sweep_runs_json_lists_every_sweep_run_with_a_command_that_trains_it_alone(ahead, tmp_path):
    out, preset, _, _ = ahead
    rows = json.loads((out / SWEEP_RUNS_FILE).read_text())
    ctx = Context(out, preset, progress=False)
    assert sorted(row["name"] for row in rows) == sorted(run.name for run, _ in figure_sweep_runs(ctx))
    keys = {"figure", "command", "num_train", "k_train", "num_hidden_layers", "grammar_seed", "seed", "num_test",
            "test_accuracy", "bp_accuracy"}
    for row in rows:
        assert keys <= set(row) and row["num_test"] == 40
        assert row["stopped"] is not None and row["global_step"] <= 8
    # the command is the run: the same identity when resolved from it
    row = rows[0]
    argv = row["command"].split()[2:]
    argv[argv.index("--output_dir") + 1] = str(tmp_path / "again")
    (run,), _ = runs_from_command_line("root", argv)
    assert run.identity == json.loads((out / "runs" / row["name"] / "run_identity.json").read_text())["identity"]


def test_bad_workers_are_refused_before_any_folder(tmp_path):
    with pytest.raises(ValueError, match="workers"):
        reproduce(tmp_path / "out", "tiny", workers=-1)
    assert not (tmp_path / "out").exists()


def test_a_run_command_gives_a_value_of_none_that_the_preset_would_fill_and_resolves_to_the_same_run(tmp_path):
    from hf_treelang.train.run import command_line, resolve

    arguments = {"preset": "paper", "depth": 2, "num_symbols": 3, "num_train": 64, "num_train_epochs": 200.0,
                 "checkpoint_epochs": None, "hidden_size": 16, "intermediate_size": 16, "num_hidden_layers": 1}
    run = resolve("root", arguments, tmp_path / "a")
    command = command_line("root", run.arguments, tmp_path / "b")
    assert "--checkpoint_epochs none" in command
    (again,), _ = runs_from_command_line("root", command.split()[2:])
    assert again.training_args.checkpoint_epochs is None and again.identity == run.identity
    (filled,), _ = runs_from_command_line("root", [a for a in command.split()[2:] if a not in ("--checkpoint_epochs",
                                                                                             "none")])
    assert filled.training_args.checkpoint_epochs, "without the flag the paper preset fills its checkpoint epochs"


def test_findings_record_the_wall_time_of_every_call_the_root_runs_time_and_the_machine(ahead):
    from hf_treelang.reproduce.findings import write_findings
    from hf_treelang.reproduce.timing import TIMING_FILE

    out, preset, _, result = ahead
    calls = json.loads((out / TIMING_FILE).read_text())["calls"]
    assert len(calls) == 1 and calls[0]["steps_ran"] == [step.name for step in result.steps]
    _, path = write_findings(out, preset)
    findings = json.loads(path.read_text())
    assert findings["wall_time_s"] == pytest.approx(calls[0]["seconds"]) and findings["calls"] == 1
    assert findings["machine"]["cores"] >= 1 and findings["machine"]["cpu"] is not None
    root = json.loads((out / "runs" / "root" / "metrics.json").read_text())
    assert findings["root_run_s"] == root["train_runtime_s"]


def test_a_call_stopped_while_training_ahead_records_the_runs_it_trained_before_the_stop(tmp_path, monkeypatch):
    import hf_treelang.reproduce.plan as plan
    from hf_treelang.reproduce.timing import TIMING_FILE, Terminated

    monkeypatch.setitem(PRESETS, "tiny_ahead", tiny_ahead())

    def two_runs_then_a_kill(runs, out, *, on_trained=None, **kwargs):
        for run in runs[:2]:
            on_trained(run.name)
        raise Terminated("SIGTERM")

    monkeypatch.setattr(plan, "execute_runs", two_runs_then_a_kill)
    monkeypatch.setattr(plan, "remaining_lines", lambda ctx, **kwargs: [])
    with pytest.raises(Terminated):
        reproduce(tmp_path / "out", "tiny_ahead", progress=False)
    (call,) = json.loads((tmp_path / "out" / TIMING_FILE).read_text())["calls"]
    assert (call["status"], call["trained_runs"], call["steps_ran"]) == ("stopped by SIGTERM", 2, [])
