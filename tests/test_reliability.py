"""Training reliability: byte-identical resume for both tasks, no mixed output folders, a completion marker that the
analyses require, and every bad input refused first (parameter, value, allowed range), leaving no folder behind."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from hf_treelang import cli
from hf_treelang.train.arguments import TreeLangTrainingArguments
from hf_treelang.train.callbacks import RESUME_MARKER
from hf_treelang.train.collators import EXAMPLE_INDEX, MaskedLeafCollator, MaskEpochCallback
from hf_treelang.train.loop import main, train
from hf_treelang.train.run import runs_from_command_line

# 48 sequences / batch 8 = 6 steps per epoch, 2 epochs; checkpoints every 3 steps (mid-epoch 0, end of epoch 0,
# mid-epoch 1, end) and an evaluation every 3 steps. Dropout 0.1 stays on, so the restored torch RNG matters too.
TINY = ["--depth", "2", "--num_symbols", "3", "--hidden_size", "16", "--num_hidden_layers", "1",
        "--intermediate_size", "16", "--num_train", "48", "--num_eval", "16", "--num_test", "8", "--k_test", "0",
        "--per_device_train_batch_size", "8", "--num_train_epochs", "2", "--num_evaluations", "0",
        "--num_checkpoints", "0", "--save_strategy", "steps", "--save_steps", "3", "--eval_strategy", "steps",
        "--eval_steps", "3", "--logging_steps", "1000", "--disable_tqdm", "true", "--report_to", "none",
        "--cpu_threads", "1", "--use_dataset_builder", "false"]
TIMINGS = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second")


def _train(task, output_dir, *extra):
    (run,), _ = runs_from_command_line(task, TINY + ["--output_dir", str(output_dir), *extra])
    return train(run)


def _evaluations_after(history, step):
    return [{k: v for k, v in entry.items() if k not in TIMINGS} for entry in history if entry["step"] > step]


# ---------------------------------------------------------------- resuming


class UninterruptedRuns:
    """Uninterrupted runs, trained once per (task, train_engine) on first use and shared by the tests."""

    def __init__(self, factory):
        self.factory = factory
        self.runs = {}

    def get(self, task, engine=None):
        if (task, engine) not in self.runs:
            folder = self.factory.mktemp(f"full_{task}_{engine or 'default'}")
            self.runs[task, engine] = (folder, _train(task, folder / "run", *_engine_flags(engine)))
        return self.runs[task, engine]

    def __getitem__(self, task):
        return self.get(task)


def _engine_flags(engine):
    return () if engine is None else ("--train_engine", engine)


# The default engine, and the DataLoader + collator path too where the engine is a choice (--train_engine).
ENGINES = [None] + (["dataloader"] if "train_engine" in TreeLangTrainingArguments.__dataclass_fields__ else [])
RESUMES = [(engine, task, step) for engine in ENGINES for task, step in (("root", 3), ("mlm", 3), ("mlm", 9))]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return UninterruptedRuns(tmp_path_factory)


@pytest.mark.parametrize("engine, task, step", RESUMES,
                         ids=[f"{engine or 'default'}-{task}-step{step}" for engine, task, step in RESUMES])
def test_a_resumed_run_ends_with_the_same_bytes_and_evaluations_as_the_uninterrupted_run(
        tmp_path, uninterrupted, engine, task, step):
    """Steps 3 and 9 are in the middle of epochs 0 and 1 (6 steps per epoch)."""
    folder, full = uninterrupted.get(task, engine)
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(folder / "run" / f"checkpoint-{step}", resumed_dir / f"checkpoint-{step}")
    resumed = _train(task, resumed_dir, "--resume_from_checkpoint", str(resumed_dir / f"checkpoint-{step}"),
                     *_engine_flags(engine))
    assert resumed.global_step == full.global_step == 12
    first = load_file(folder / "run" / "model.safetensors")
    second = load_file(resumed_dir / "model.safetensors")
    assert first.keys() == second.keys()
    different = [key for key in first if not torch.equal(first[key], second[key])]
    assert not different, f"weights differ after resuming from step {step}: {different}"
    after = _evaluations_after(full.history, step)
    assert [e["step"] for e in after] == [s for s in (3, 6, 9, 12) if s > step]
    assert _evaluations_after(resumed.history, step) == after
    losses = [json.loads((path / "metrics.json").read_text())["train_loss"] for path in (folder / "run", resumed_dir)]
    assert losses[1] == pytest.approx(losses[0], rel=1e-6), "train_loss is the mean over every step of the run"


class StopAt(TrainerCallback):
    """Raises at the end of ``step``: the process stopped there."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt(f"stopped at step {self.step}")


@pytest.mark.parametrize("extra", [("--resume_checkpoint_steps", "5"), ()], ids=["option", "resumed-without"])
def test_resume_checkpoints_keep_the_newest_only_and_a_run_stopped_after_one_resumes_to_the_same_bytes(
        tmp_path, uninterrupted, extra):
    """Checkpoints every 3 steps (the schedule) and every 5 only to resume from: 5 and 10 are resume-only, and
    each save removes the older resume-only one; the resumed run (with the option or without it) removes the last."""
    folder, full = uninterrupted["root"]
    (run,), _ = runs_from_command_line("root", TINY + ["--output_dir", str(tmp_path / "run"),
                                                       "--resume_checkpoint_steps", "5"])
    assert run.identity == runs_from_command_line("root", TINY + ["--output_dir", str(tmp_path / "run")])[0][0].identity
    with pytest.raises(KeyboardInterrupt):
        train(run, callbacks=[StopAt(11)])
    names = sorted(path.name for path in (tmp_path / "run").glob("checkpoint-*"))
    assert names == ["checkpoint-10", "checkpoint-3", "checkpoint-6", "checkpoint-9"]  # checkpoint-5 removed
    assert (tmp_path / "run" / "checkpoint-10" / RESUME_MARKER).is_file()
    assert not (tmp_path / "run" / "checkpoint-9" / RESUME_MARKER).exists()
    resumed = _train("root", tmp_path / "run", *extra, "--resume_from_checkpoint",
                     str(tmp_path / "run" / "checkpoint-10"))
    assert resumed.global_step == full.global_step == 12
    first, second = load_file(folder / "run" / "model.safetensors"), load_file(tmp_path / "run" / "model.safetensors")
    assert [key for key in first if not torch.equal(first[key], second[key])] == []
    assert _evaluations_after(resumed.history, 10) == _evaluations_after(full.history, 10)
    assert sorted(path.name for path in (tmp_path / "run").glob("checkpoint-*")) == [
        "checkpoint-12", "checkpoint-3", "checkpoint-6", "checkpoint-9"]  # the finished folder: the schedule's only
    assert not list((tmp_path / "run").rglob(RESUME_MARKER))


@pytest.mark.parametrize("task", ["root", "mlm", "clm"])
def test_the_laptop_runs_checkpoint_to_resume_from_without_it_entering_their_identity(tmp_path, task):
    """The scripts' default runs (and reproduce's) lose few steps when stopped: a resume-only checkpoint every few
    minutes of a core, which is not part of what the run is."""
    (run,), _ = runs_from_command_line(task, ["--output_dir", str(tmp_path / "run")])
    args = run.training_args
    steps = run.data_args.num_train // args.per_device_train_batch_size * args.num_train_epochs
    assert 0 < args.resume_checkpoint_steps < steps
    (without,), _ = runs_from_command_line(task, ["--output_dir", str(tmp_path / "run"), "--resume_checkpoint_steps",
                                                 "0"])
    assert without.training_args.resume_checkpoint_steps == 0 and without.identity == run.identity


def test_resume_checkpoint_steps_must_be_a_count(tmp_path):
    with pytest.raises(ValueError, match=r"`resume_checkpoint_steps` must be an integer in \[0, \d+\], got -1"):
        runs_from_command_line("root", TINY + ["--output_dir", str(tmp_path / "run"), "--resume_checkpoint_steps",
                                               "-1"])
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_written_without_the_loss_record_resumes_and_counts_the_logged_losses(tmp_path):
    """Checkpoints of earlier versions hold no RunLoss entry: resuming one trains on (no KeyError at the next save),
    and train_loss is the mean over the steps whose losses are known (the logged ones and those trained now)."""
    logged = ("--logging_steps", "3")
    full = _train("root", tmp_path / "full", *logged)
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-3", resumed_dir / "checkpoint-3")
    state_file = resumed_dir / "checkpoint-3" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    del state["stateful_callbacks"]["RunLoss"]
    state_file.write_text(json.dumps(state))
    resumed = _train("root", resumed_dir, "--resume_from_checkpoint", str(resumed_dir / "checkpoint-3"), *logged)
    assert resumed.global_step == full.global_step == 12 and (resumed_dir / "checkpoint-6").is_dir()
    losses = [json.loads((path / "metrics.json").read_text())["train_loss"] for path in (tmp_path / "full", resumed_dir)]
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)  # step 3 was a logging step: nothing is lost


@pytest.mark.parametrize("engine", ENGINES, ids=[engine or "default" for engine in ENGINES])
def test_resuming_from_the_final_checkpoint_of_a_max_steps_run_trains_no_further(tmp_path, engine):
    """max_steps 9 ends in the middle of the second epoch (6 steps per epoch): Trainer alone would train step 10."""
    limit = ("--max_steps", "9", *_engine_flags(engine))
    full = _train("root", tmp_path / "full", *limit)
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-9", resumed_dir / "checkpoint-9")
    resumed = _train("root", resumed_dir, "--resume_from_checkpoint", str(resumed_dir / "checkpoint-9"), *limit)
    assert full.global_step == resumed.global_step == 9
    first, second = (load_file(path / "model.safetensors") for path in (tmp_path / "full", resumed_dir))
    assert all(torch.equal(first[key], second[key]) for key in first)
    losses = [json.loads((path / "metrics.json").read_text())["train_loss"] for path in (tmp_path / "full", resumed_dir)]
    assert losses[1] == pytest.approx(losses[0], rel=1e-6)


def test_keyed_masks_depend_on_seed_epoch_and_examples_only():
    features = [{"input_ids": [0, 1, 2, 0, 1, 2, 0, 1], EXAMPLE_INDEX: i} for i in range(64)]
    collate = MaskedLeafCollator(3, seed=5)
    torch.manual_seed(0)
    first = collate(features)["input_ids"]
    torch.manual_seed(1)  # the global generator (dropout's) plays no part
    assert torch.equal(collate(features)["input_ids"], first)
    assert torch.equal(MaskedLeafCollator(3, seed=5)(features)["input_ids"], first)
    assert not torch.equal(MaskedLeafCollator(3, seed=6)(features)["input_ids"], first)
    collate.epoch = 1
    assert not torch.equal(collate(features)["input_ids"], first)
    other_examples = [{**f, EXAMPLE_INDEX: f[EXAMPLE_INDEX] + 64} for f in features]
    collate.epoch = 0
    assert not torch.equal(collate(other_examples)["input_ids"], first)
    with pytest.raises(ValueError, match="seed"):
        MaskedLeafCollator(3)(features)


def test_the_mask_epoch_callback_sets_the_epoch_about_to_run():
    from transformers import TrainerControl, TrainerState

    collate = MaskedLeafCollator(3, seed=0)
    callback = MaskEpochCallback(collate)
    for epoch, expected in ((0.0, 0), (1.0, 1), (1.5, 1), (2.0, 2)):  # 1.5: a run resumed in the middle of epoch 1
        callback.on_epoch_begin(None, TrainerState(epoch=epoch), TrainerControl())
        assert collate.epoch == expected


# ---------------------------------------------------------------- output folders and the completion marker


@pytest.fixture
def no_data(monkeypatch):
    """Fail the test if a run gets as far as building its data."""
    import hf_treelang.train.trainer as trainer

    def refuse(*args, **kwargs):
        raise AssertionError("the data were built before the bad input was refused")

    monkeypatch.setattr(trainer, "load_run_data", refuse)


def _copy_run(uninterrupted, task, destination):
    shutil.copytree(uninterrupted[task][0] / "run", destination)
    return destination


def test_a_finished_run_writes_its_completion_marker_last_listing_every_file(uninterrupted):
    folder = uninterrupted["mlm"][0] / "run"
    marker = folder / "run_complete.json"
    document = json.loads(marker.read_text())
    assert (document["task"], document["global_step"]) == ("mlm", 12)
    files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p != marker}
    assert set(document["files"]) == files
    assert {"model.safetensors", "run_config.json", "metrics.json", "checkpoint-3/optimizer.pt"} <= files
    assert all(document["files"][name] == (folder / name).stat().st_size for name in ("model.safetensors",))
    assert marker.stat().st_mtime_ns >= max((folder / name).stat().st_mtime_ns for name in files)
    assert not list(folder.glob("*.tmp"))


def test_a_second_run_into_a_non_empty_output_dir_is_refused_before_the_data_are_built(tmp_path, no_data):
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint-7").mkdir()
    with pytest.raises(ValueError, match=r"`output_dir` .* is not empty \(checkpoint-7\).*--overwrite_output_dir"):
        main("root", TINY + ["--output_dir", str(out)])
    assert [p.name for p in out.iterdir()] == ["checkpoint-7"]


def test_overwrite_output_dir_replaces_the_previous_run_and_keeps_other_files(tmp_path, uninterrupted):
    out = _copy_run(uninterrupted, "root", tmp_path / "run")
    (out / "notes.txt").write_text("mine")
    _train("root", out, "--overwrite_output_dir", "true", "--save_steps", "5", "--num_train_epochs", "1")
    # 6 steps: checkpoints 5 and 6 (the last step); the previous run's 3, 6, 9 and 12 are gone
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-5", "checkpoint-6"]
    assert json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["max_steps"] == 6
    assert (out / "notes.txt").read_text() == "mine"
    document = json.loads((out / "run_complete.json").read_text())
    assert document["global_step"] == 6 and "checkpoint-3/optimizer.pt" not in document["files"]
    history = json.loads((out / "eval_history.json").read_text())["history"]
    assert [e["step"] for e in history] == [3, 6]


def test_the_analyses_refuse_an_interrupted_run_folder_naming_what_is_missing(tmp_path, uninterrupted, capsys):
    from hf_treelang.analysis import dynamics, load_checkpoint

    out = _copy_run(uninterrupted, "mlm", tmp_path / "run")
    load_checkpoint(out)  # complete: loads
    (out / "run_complete.json").unlink()  # killed during the final save: no marker, no metrics
    (out / "metrics.json").unlink()
    with pytest.raises(ValueError, match=r"incomplete training run: it lacks run_complete.json, metrics.json \(.*\); "
                                         r"resume it with --resume_from_checkpoint .*checkpoint-12'$"):
        load_checkpoint(out)
    assert cli.run_command("dynamics", [str(out), "--out", str(tmp_path / "dynamics")]) == 2
    assert "run_complete.json" in capsys.readouterr().err
    assert cli.run_command("calibration", [str(out), "--out", str(tmp_path / "calibration"), "--num-samples", "8"]) == 2
    assert "incomplete training run" in capsys.readouterr().err
    assert not (tmp_path / "dynamics").exists() and not (tmp_path / "calibration").exists()
    assert load_checkpoint(out / "checkpoint-12").task == "mlm"  # a checkpoint-N is a model folder: it loads
    assert dynamics.find_history(out / "eval_history.json")[1]  # an unfinished run's history file can be read


def test_a_marker_that_lists_a_missing_file_is_refused(tmp_path, uninterrupted):
    from hf_treelang.analysis import load_checkpoint

    out = _copy_run(uninterrupted, "root", tmp_path / "run")
    (out / "grammar.json").unlink()
    with pytest.raises(ValueError, match="files listed in run_complete.json are missing: grammar.json"):
        load_checkpoint(out)


# ---------------------------------------------------------------- errors before work


def _unwritable_parent(tmp_path):
    """A folder this process cannot write into (root ignores permission bits, so a read-only /proc entry then)."""
    import os

    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o500)
    if not os.access(folder, os.W_OK):
        return folder
    if os.path.isdir("/proc/1") and not os.access("/proc/1", os.W_OK):
        return Path("/proc/1")
    pytest.skip("no unwritable folder available to this process")


def _bad_finetune_checkpoint(tmp_path, kind):
    import hf_treelang

    folder = tmp_path / "mlm"
    config = hf_treelang.TreeLangConfig.from_data(num_symbols=3, depth=2, hidden_size=16, num_hidden_layers=1,
                                                  intermediate_size=16)
    hf_treelang.TreeLangForMaskedLM(config).save_pretrained(folder)
    if kind == "no_weights":
        (folder / "model.safetensors").unlink()
    else:
        (folder / "config.json").write_text('{"model_type": "treelang", ')
    return folder


def _partial_checkpoint(tmp_path, uninterrupted):
    folder = tmp_path / "partial"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):  # a save killed after the weights
        shutil.copy(uninterrupted["root"][0] / "run" / "checkpoint-3" / name, folder / name)
    return folder


BAD_INPUTS = {
    "output_dir_is_a_file": (lambda tmp, runs: ["--output_dir", str(tmp / "file.txt")],
                             r"`output_dir` must be a folder \(existing or to create\), got .*file.txt', which is a file"),
    "output_dir_under_a_file": (lambda tmp, runs: ["--output_dir", str(tmp / "file.txt" / "run")],
                                r"`output_dir` must be a folder path, got .*: .*file.txt' is a file"),
    "output_dir_unwritable": (lambda tmp, runs: ["--output_dir", str(_unwritable_parent(tmp) / "run")],
                              r"`output_dir` must be a folder this process can write, got .* is not writable"),
    "heads_do_not_divide_hidden_size": (lambda tmp, runs: ["--hidden_size", "10", "--num_attention_heads", "3"],
                                        r"hidden_size \(10\) must be divisible by num_attention_heads \(3\)"),
    "classifier_pooling": (lambda tmp, runs: ["--classifier_pooling", "cls"],
                           r"`classifier_pooling` must be one of \('concat', 'mean'\), got 'cls'"),
    "batch_size_0": (lambda tmp, runs: ["--per_device_train_batch_size", "0"],
                     r"`per_device_train_batch_size` must be an integer in \[1, 2147483647\], got 0$"),
    "learning_rate_nan": (lambda tmp, runs: ["--learning_rate", "nan"],
                          r"`learning_rate` must be a real number >= 0, got nan$"),
    "layer_norm_eps_negative": (lambda tmp, runs: ["--layer_norm_eps", "-1"],
                                r"`layer_norm_eps` must be a positive finite real number, got -1"),
    "hidden_dropout_prob_not_a_number": (lambda tmp, runs: ["--hidden_dropout_prob", "abc"],
                                         r"hidden_dropout_prob.*abc"),
    "output_dir_under_proc": (lambda tmp, runs: ["--output_dir", "/proc/hf-treelang-run"],
                              r"`output_dir` must be a folder this process can write, got '/proc/hf-treelang-run'"),
    "cpu_threads_negative": (lambda tmp, runs: ["--cpu_threads", "-1"], r"`cpu_threads` must be an integer >= 1, got -1$"),
    "resume_from_an_empty_folder": (lambda tmp, runs: ["--resume_from_checkpoint", str(_mkdir(tmp / "empty"))],
                                    r"`resume_from_checkpoint` .*empty' is empty; expected a checkpoint-N folder"),
    "resume_from_a_partial_checkpoint": (
        lambda tmp, runs: ["--resume_from_checkpoint", str(_partial_checkpoint(tmp, runs))],
        r"`resume_from_checkpoint` .*partial' is incomplete .*it lacks trainer_state.json, optimizer.pt, "
        r"scheduler.pt, rng_state.pth"),
}


def _mkdir(path):
    path.mkdir()
    return path


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_a_bad_training_input_fails_first_naming_it_and_leaves_no_folder(tmp_path, uninterrupted, no_data, case):
    (tmp_path / "file.txt").write_text("not a folder")
    make_argv, message = BAD_INPUTS[case]
    argv = TINY + ["--output_dir", str(tmp_path / "never"), *make_argv(tmp_path, uninterrupted)]
    with pytest.raises(ValueError, match=message):
        main("root", argv)
    assert not (tmp_path / "never").exists() and not (tmp_path / "file.txt" / "run").exists()


@pytest.mark.parametrize("kind, message", [
    ("no_weights", r"`model_name_or_path` .*mlm' has a config.json but no weights"),
    ("malformed_config", r"`model_name_or_path` .*mlm': config.json is not valid JSON"),
])
def test_a_bad_finetune_checkpoint_fails_first_and_leaves_no_folder(tmp_path, no_data, kind, message):
    folder = _bad_finetune_checkpoint(tmp_path, kind)
    with pytest.raises(ValueError, match=message):
        main("finetune", TINY + ["--output_dir", str(tmp_path / "never"), "--model_name_or_path", str(folder)])
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("content, message", [
    ('{"depth": 2,', r"argument file '.*args.json' is not valid JSON"),
    ("[2, 3]", r"argument file '.*args.json' must hold a JSON object .*got a list"),
    ('{"dpeth": 2}', r"argument file '.*args.json': .*dpeth"),
])
def test_a_bad_json_arguments_file_is_named_in_the_error(tmp_path, no_data, content, message):
    path = tmp_path / "args.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        main("root", [str(path)])


def test_the_analysis_commands_check_device_and_out_before_computing(tmp_path, monkeypatch, capsys):
    from hf_treelang.analysis import calibration

    def refuse(*args, **kwargs):
        raise AssertionError("calibration computed before its arguments were checked")

    monkeypatch.setattr(calibration, "calibrate", refuse)
    (tmp_path / "file.txt").write_text("not a folder")
    checkpoint = str(tmp_path)  # never read: the arguments are refused first
    cases = [
        (["--out", str(tmp_path / "out"), "--device", "foo"], "`device` must be one of 'cpu', 'cuda'"),
        (["--out", str(tmp_path / "file.txt")], "`out` must be a folder (existing or to create)"),
        (["--out", str(tmp_path / "file.txt" / "sub")], "file.txt' is a file"),
    ]
    if not torch.cuda.is_available():
        cases.append((["--out", str(tmp_path / "out"), "--device", "cuda"], "needs a CUDA GPU, but this machine has none"))
    for extra, message in cases:
        assert cli.run_command("calibration", [checkpoint, *extra]) == 2
        error = capsys.readouterr().err
        assert error.startswith("hf-treelang calibration: error: ") and message in error, error
    assert not (tmp_path / "out").exists()


def test_overwriting_twice_never_removes_a_users_files_nor_another_runs_checkpoints(tmp_path):
    import os
    import time

    out = tmp_path / "run"
    (out / "tensorboard").mkdir(parents=True)
    (out / "tensorboard" / "my_events").write_text("mine")  # the user's, before any run
    (out / "checkpoint-99").mkdir()
    (out / "checkpoint-99" / "config.json").write_text("{}")  # another run's checkpoint
    (out / "notes.txt").write_text("mine")
    old = time.time() - 3600
    for path in (out / "tensorboard" / "my_events", out / "checkpoint-99" / "config.json", out / "notes.txt"):
        os.utime(path, (old, old))
    for _ in range(2):  # the second overwrite reads the first run's marker, which lists every file in the folder
        _train("root", out, "--overwrite_output_dir", "true", "--report_to", "tensorboard")
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "tensorboard" / "my_events").read_text() == "mine"
    assert (out / "checkpoint-99" / "config.json").is_file()
    assert json.loads((out / "run_complete.json").read_text())["global_step"] > 0


def test_resuming_into_a_folder_that_holds_another_complete_run_is_refused(tmp_path, uninterrupted):
    other = _copy_run(uninterrupted, "root", tmp_path / "other")
    done = _copy_run(uninterrupted, "root", tmp_path / "done")
    before = (done / "model.safetensors").read_bytes()
    with pytest.raises(ValueError, match=r"holds a complete run and `resume_from_checkpoint` .* is not one of its"):
        _train("root", done, "--resume_from_checkpoint", str(other / "checkpoint-6"))
    assert (done / "model.safetensors").read_bytes() == before


def test_a_script_run_into_a_runner_folder_records_its_own_identity_so_no_sweep_reuses_it(tmp_path):
    from hf_treelang.train import folders

    out = tmp_path / "run"
    (run,), _ = runs_from_command_line("root", TINY + ["--output_dir", str(out)])
    train(run, reuse=True)  # as a sweep does: run_identity.json, then the run
    assert folders.folder_state(out, run.identity).status == "done"
    (other,), _ = runs_from_command_line("root", TINY + ["--output_dir", str(out), "--overwrite_output_dir", "true",
                                                         "--learning_rate", "0.05"])
    train(other)  # another run, by a script
    assert folders.read_identity(out)["identity"] == other.identity != run.identity
    assert folders.folder_state(out, run.identity).status == "stale"  # the sweep trains its run again


def test_a_runner_adopts_the_finished_run_of_a_script(tmp_path):
    # run_root.py / run_mlm.py, then reproduce or a sweep with the same run in that folder: nothing is trained again
    from hf_treelang.train import folders

    out = tmp_path / "run"
    (script,), _ = runs_from_command_line("root", TINY + ["--output_dir", str(out)])
    (run,), _ = runs_from_command_line("root", TINY + ["--output_dir", str(out)])  # the runner's, resolved alike
    train(script)
    record = folders.read_identity(out)
    assert record["identity"] == run.identity and record["resumed_from"] is None
    assert "run_identity.json" in json.loads((out / "run_complete.json").read_text())["files"]
    before = (out / "model.safetensors").read_bytes()
    result = train(run, reuse=True)
    assert result.reused and (out / "model.safetensors").read_bytes() == before


def test_a_script_run_resumed_from_another_folder_records_no_identity(tmp_path, uninterrupted):
    # its weights come from a run this folder never held: no runner may take it for the run its arguments describe
    from hf_treelang.train import folders

    source = _copy_run(uninterrupted, "root", tmp_path / "source")
    _train("root", tmp_path / "run", "--resume_from_checkpoint", str(source / "checkpoint-3"))
    assert folders.read_identity(tmp_path / "run") is None
    own = _copy_run(uninterrupted, "root", tmp_path / "own")
    (own / "run_complete.json").unlink()  # interrupted after its last checkpoint
    _train("root", own, "--resume_from_checkpoint", str(own / "checkpoint-3"))
    assert folders.read_identity(own)["resumed_from"] == "checkpoint-3"


def test_a_resumed_run_keeps_the_start_of_its_folder(tmp_path, uninterrupted):
    out = _copy_run(uninterrupted, "root", tmp_path / "run")
    before = (out / "run_config.json").stat().st_mtime_ns
    (out / "run_complete.json").unlink()  # interrupted after its last checkpoint
    _train("root", out, "--resume_from_checkpoint", str(out / "checkpoint-6"))
    assert (out / "run_config.json").stat().st_mtime_ns == before  # what clear_previous_run dates the run by


def test_a_script_reports_bad_input_in_one_line_with_exit_status_2(tmp_path):
    """Not a usage block of every flag, not a traceback: argparse's message (and every ValueError of the checks)."""
    from tiny_run import run_script

    code, _, stderr = run_script("root", ["--hidden_dropout_prob", "abc", "--output_dir", tmp_path / "never"])
    assert code == 2
    assert stderr.strip().splitlines() == [
        "run_root.py: error: argument --hidden_dropout_prob/--hidden-dropout-prob: invalid float value: 'abc' "
        "(see --help for the flags and their types)"]
    assert not (tmp_path / "never").exists()
