"""The validation stopping rule: checks on the validation set only, the stop after `patience` checks without an
improvement, the record a run folder keeps, resumption to the same bytes, identities unchanged when the rule is off,
and its arguments refused with their ranges before any work."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from hf_treelang.train.loop import train
from hf_treelang.train.run import runs_from_command_line
from hf_treelang.train.stopping import CHECK_KEY, StoppingRecord

from test_reliability import StopAt

# 96 sequences / batch 8 = 12 steps an epoch, at most 40 epochs; the rule checks every 12 steps.
TINY = ["--depth", "2", "--num_symbols", "3", "--hidden_size", "16", "--num_hidden_layers", "1",
        "--intermediate_size", "16", "--num_train", "96", "--num_eval", "64", "--num_test", "16", "--k_test", "0",
        "--per_device_train_batch_size", "8", "--num_train_epochs", "40", "--num_evaluations", "2",
        "--num_checkpoints", "0", "--logging_steps", "1000", "--disable_tqdm", "true", "--report_to", "none",
        "--cpu_threads", "1", "--use_dataset_builder", "false", "--learning_rate", "3e-3"]
RULE = ["--early_stopping_patience", "2", "--early_stopping_eval_steps", "12"]


def _run(output_dir, *extra):
    (run,), _ = runs_from_command_line("root", TINY + ["--output_dir", str(output_dir), *extra])
    return run


@pytest.mark.parametrize("values, patience, threshold, best, stopped", [
    ([0.5, 0.6, 0.6, 0.6], 2, 0.0, 1, True),  # two checks after the best without improvement
    ([0.5, 0.6, 0.6, 0.7], 2, 0.0, 3, False),  # the last check improves: the count starts again
    ([0.5, 0.6, 0.605, 0.61], 2, 0.01, 1, True),  # gains within δ are no improvement
    ([0.5, 0.4, 0.3], 3, 0.0, 0, False),  # falling, but not yet `patience` checks
    ([], 1, 0.0, None, False),
])
def test_the_rule_stops_after_patience_checks_without_an_improvement_beyond_threshold(values, patience, threshold,
                                                                                      best, stopped):
    record = StoppingRecord(patience=patience, threshold=threshold, every=10, num_validation=100,
                            checks=[(10 * (i + 1), v) for i, v in enumerate(values)])
    assert record.best_index == best
    assert record.stopped is stopped
    summary = record.to_dict()
    assert summary["stopped"] is stopped
    assert summary["stopped_at_step"] == (10 * len(values) if stopped else None)


def _first_stop(checks, **rule):
    """The step at which the rule, fed ``checks`` one by one, first fires (None: never)."""
    record = StoppingRecord(every=10, num_validation=100, **rule)
    for check in checks:
        record.checks.append(check)
        if record.stopped:
            return check[0]
    return None


@pytest.mark.parametrize("min_steps, at", [
    (0, 40),  # no floor: two checks after the best (step 20)
    (45, 50),  # patience met at 40, before the floor: the first check at or past it
    (65, 70),  # past every check but the last
    (75, None),  # the floor past the last check: never
])
def test_no_check_before_the_floor_stops_a_run(min_steps, at):
    plateau = [(10, 0.30), (20, 0.31), (30, 0.30), (40, 0.29), (50, 0.31), (60, 0.30), (70, 0.30)]
    assert _first_stop(plateau, patience=2, threshold=0.0, min_steps=min_steps) == at
    assert StoppingRecord(patience=2, threshold=0.0, every=10, num_validation=100,
                          min_steps=min_steps).to_dict()["min_steps"] == min_steps


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stopping") / "run"
    return folder, train(_run(folder, *RULE, "--resume_checkpoint_steps", "12"))


def test_a_run_with_a_floor_trains_past_the_step_where_the_rule_alone_stopped_it(tmp_path, stopped_run):
    _, alone = stopped_run
    floor = alone.global_step + 30  # between two checks
    folder = tmp_path / "floor"
    result = train(_run(folder, *RULE, "--early_stopping_min_steps", str(floor)))
    record = json.loads((folder / "metrics.json").read_text())["early_stopping"]
    assert record["min_steps"] == floor and result.global_step > alone.global_step
    checks = [tuple(check) for check in record["checks"]]
    expected = _first_stop(checks, patience=2, threshold=0.0, min_steps=floor)
    assert result.global_step == (expected if record["stopped"] else 40 * 12)
    assert expected is None or expected >= floor


def test_a_run_with_the_rule_stops_early_at_a_check_and_records_its_checks(stopped_run):
    folder, result = stopped_run
    record = json.loads((folder / "metrics.json").read_text())["early_stopping"]
    checks = record["checks"]
    assert record["stopped"] and result.global_step == record["stopped_at_step"] == checks[-1][0]
    assert result.global_step < 40 * 12, "the rule fired before the longest the run may train"
    assert [step for step, _ in checks] == list(range(12, result.global_step + 1, 12))
    best = max(value for _, value in checks)
    assert record["best_accuracy"] == best and all(value <= best for _, value in checks[-2:])
    assert record["num_validation"] == 64 and record["metric"] == "validation accuracy"
    # the final evaluation is the model at the stop, and every check is in the log history
    assert result.history[-1]["step"] == result.global_step
    state = json.loads((folder / "trainer_state.json").read_text())
    assert [entry[CHECK_KEY] for entry in state["log_history"] if CHECK_KEY in entry] == [v for _, v in checks]


def test_the_checks_read_the_validation_set_and_never_a_test_set(stopped_run):
    folder, result = stopped_run
    record = json.loads((folder / "metrics.json").read_text())["early_stopping"]
    # at the stop the model is evaluated once more by the Trainer on the validation set: the same accuracy
    assert record["checks"][-1][1] == pytest.approx(result.final_metrics["eval_accuracy"], abs=1e-12)


def _stop_and_resume(interrupted, stopper, step, full, folder):
    """Train the rule's run into ``interrupted`` until ``stopper`` stops it, resume it from its checkpoint of ``step``
    and check that it ends at ``full``'s step with the bytes of ``folder``'s model; returns ``interrupted``."""
    with pytest.raises(KeyboardInterrupt):
        train(_run(interrupted, *RULE, "--resume_checkpoint_steps", "12"), callbacks=[stopper])
    checkpoint = interrupted / f"checkpoint-{step}"
    assert checkpoint.is_dir()
    resumed = train(_run(interrupted, *RULE, "--resume_checkpoint_steps", "12", "--resume_from_checkpoint",
                         str(checkpoint)))
    assert resumed.global_step == full.global_step
    first, second = load_file(folder / "model.safetensors"), load_file(interrupted / "model.safetensors")
    assert all(torch.equal(first[key], second[key]) for key in first)
    return interrupted


def test_a_stopped_run_resumed_from_a_checkpoint_ends_with_the_same_bytes_and_record(tmp_path, stopped_run):
    folder, full = stopped_run
    step = 24
    assert full.global_step > step
    interrupted = _stop_and_resume(tmp_path / "run", StopAt(step + 1), step, full, folder)
    records = [json.loads((path / "metrics.json").read_text())["early_stopping"] for path in (folder, interrupted)]
    assert records[0] == records[1]


class StopAfterSaving(TrainerCallback):
    """Raises once the checkpoint of ``step`` is written: the process stopped there."""

    def __init__(self, step):
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt(f"stopped after saving step {self.step}")


def test_a_run_resumed_from_the_checkpoint_where_the_rule_fired_trains_no_further_step(tmp_path, stopped_run):
    folder, full = stopped_run
    _stop_and_resume(tmp_path / "run", StopAfterSaving(full.global_step), full.global_step, full, folder)


@pytest.mark.parametrize("task, extra", [
    ("mlm", ()), ("clm", ()),
    ("root", ("--model_type", "bert", "--config_overrides",
              "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,intermediate_size=16")),
], ids=["mlm", "clm", "root-bert"])
def test_the_rule_stops_runs_of_every_task_and_architecture_at_a_check(tmp_path, task, extra):
    arguments = list(TINY)
    if extra:  # another architecture takes its sizes from --config_overrides
        for flag in ("--hidden_size", "--num_hidden_layers", "--intermediate_size"):
            del arguments[arguments.index(flag):arguments.index(flag) + 2]
    (run,), _ = runs_from_command_line(task, arguments + ["--output_dir", str(tmp_path / "run"), *RULE, *extra])
    result = train(run)
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())["early_stopping"]
    checks = [step for step, _ in record["checks"]]
    assert checks == list(range(12, result.global_step + 1, 12)) and result.history[-1]["step"] == result.global_step
    assert record["stopped"] == (result.global_step < 40 * 12)
    assert record["checks"][-1][1] == pytest.approx(result.final_metrics["eval_accuracy"], abs=1e-12)


def test_the_rule_off_leaves_a_run_identity_as_it_was(tmp_path):
    plain = _run(tmp_path / "a")
    assert not any(name.startswith("early_stopping") for name in plain.config["training_args"])
    ruled = _run(tmp_path / "b", *RULE)
    assert ruled.identity != plain.identity
    assert ruled.config["training_args"]["early_stopping_patience"] == 2


@pytest.mark.parametrize("extra, message", [
    (["--early_stopping_patience", "0"], "early_stopping_patience"),
    (["--early_stopping_patience", "2", "--train_engine", "dataloader"], "not honoured by --train_engine dataloader"),
    (["--early_stopping_patience", "2", "--early_stopping_threshold", "-0.1"], "early_stopping_threshold"),
    (["--early_stopping_patience", "2", "--early_stopping_eval_steps", "0"], "early_stopping_eval_steps"),
    (["--early_stopping_threshold", "0.01"], "needs --early_stopping_patience"),
    (["--early_stopping_eval_steps", "5"], "needs --early_stopping_patience"),
    (["--early_stopping_patience", "2", "--early_stopping_min_steps", "-1"], "early_stopping_min_steps"),
    (["--early_stopping_min_steps", "100"], "needs --early_stopping_patience"),
])
def test_bad_stopping_arguments_are_refused_naming_the_argument_before_any_folder(tmp_path, extra, message):
    with pytest.raises((ValueError, TypeError), match=message):
        _run(tmp_path / "run", *extra)
    assert not (tmp_path / "run").exists()


def test_a_stacked_ensemble_with_the_rule_is_refused_and_auto_trains_one_by_one(tmp_path):
    from hf_treelang.train.run import check_together

    runs = [_run(tmp_path / f"s{seed}", *RULE, "--seed", str(seed)) for seed in (0, 1)]
    with pytest.raises(ValueError, match="ensemble_mode sequential"):
        check_together(runs, mode="stacked")
    check_together(runs, mode="auto")
