"""Where the package meets its ecosystem: loggers and the Hub checked before a run starts, output into a file without
progress-bar codes, a shared CPU and slow paths said at the start, and the scripts' --help."""

import importlib
import json
import os
import re
import runpy
import subprocess
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY_SWEEP = {"task": "root", "grid": {"k_train": [0, 1]},
              "base": {"depth": 2, "num_symbols": 3, "hidden_size": 16, "num_hidden_layers": 1,
                       "intermediate_size": 16, "num_train": 32, "num_eval": 8, "num_test": 8,
                       "per_device_train_batch_size": 16, "num_train_epochs": 1.0, "num_evaluations": 1,
                       "num_checkpoints": 1, "report_to": "none", "use_dataset_builder": False, "cpu_threads": 1}}
PROGRESS_VARIABLES = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS", "TQDM_DISABLE")


def _into_file(tmp_path, argv: list) -> str:
    """Run ``argv`` with stdout and stderr into one file, as ``COMMAND > log 2>&1`` does; returns the file's text."""
    env = {key: value for key, value in os.environ.items() if key not in PROGRESS_VARIABLES}
    env["OMP_NUM_THREADS"] = "1"
    log = tmp_path / "log"
    with open(log, "w") as handle:
        done = subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, cwd=tmp_path, env=env, timeout=600)
    text = log.read_bytes().decode()  # not read_text: universal newlines would turn each "\r" into "\n"
    assert done.returncode == 0, text
    return text


# ---------------------------------------------------------------- output into a file


@pytest.mark.parametrize("command", ["construct", "sweep"])
def test_a_command_writing_into_a_file_writes_no_progress_bar_codes(tmp_path, command):
    cli = [sys.executable, "-m", "hf_treelang.cli"]
    if command == "construct":  # saves a model: transformers' "Writing model shards" bar
        argv = [*cli, "construct", "built", "--depth", "2", "--num-symbols", "3"]
    else:  # the sweep's own bar over its runs, and each run's checkpoints
        (tmp_path / "spec.json").write_text(json.dumps(TINY_SWEEP))
        argv = [*cli, "sweep", "spec.json", "out", "--workers", "0"]
    text = _into_file(tmp_path, argv)
    assert text.strip(), "the command wrote nothing"
    assert "\r" not in text and "\x1b[" not in text, text


# ---------------------------------------------------------------- loggers (--report_to)


def _not_installed(monkeypatch, *modules):
    """``importlib.util.find_spec`` finds none of ``modules``: transformers' tests of its loggers see them missing."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args, **kwargs: None if name.split(".")[0] in modules else
                        find_spec(name, *args, **kwargs))


@pytest.mark.parametrize("logger, modules, install", [
    ("wandb", ("wandb",), "pip install wandb"),
    ("mlflow", ("mlflow",), "pip install mlflow"),
    ("clearml", ("clearml",), "pip install clearml"),
    ("dvclive", ("dvclive",), "pip install dvclive"),
    ("tensorboard", ("tensorboard", "tensorboardX"), "pip install tensorboard"),
])
def test_a_logger_that_is_not_installed_is_refused_in_one_line_before_the_run_folder_exists(
        tmp_path, capsys, monkeypatch, logger, modules, install):
    from hf_treelang.train.loop import main
    from tiny_run import TINY

    _not_installed(monkeypatch, *modules)
    out = tmp_path / "run"
    argv = [*TINY, "--output_dir", str(out), "--report_to", logger]
    assert main("root", argv, as_script=True) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"`report_to` {logger!r}" in err and install in err, err
    assert not out.exists()


def test_an_unknown_logger_is_refused_naming_the_known_ones(tmp_path, capsys):
    from hf_treelang.train.loop import main
    from tiny_run import TINY

    out = tmp_path / "run"
    assert main("root", [*TINY, "--output_dir", str(out), "--report_to", "wandbb"], as_script=True) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "`report_to` 'wandbb' is not one of transformers' loggers" in err
    assert "wandb" in err.split("use one of")[1] and not out.exists()


def test_a_run_stopped_before_it_trained_is_started_again_by_the_same_command(tmp_path, monkeypatch):
    from hf_treelang.train import loop
    from hf_treelang.train.folders import RUN_START_FILES
    from tiny_run import TINY

    out = tmp_path / "run"
    argv = [*TINY, "--output_dir", str(out), "--num_checkpoints", "1"]
    trainer_for = loop.trainer_for

    def fails(*args, **kwargs):  # the Trainer does not start (a logger's own error, an interrupt)
        raise RuntimeError("the Trainer did not start")

    monkeypatch.setattr(loop, "trainer_for", fails)
    with pytest.raises(RuntimeError, match="did not start"):
        loop.main("root", argv, as_script=True)
    assert sorted(p.name for p in out.iterdir()) == sorted(RUN_START_FILES)
    monkeypatch.setattr(loop, "trainer_for", trainer_for)
    assert loop.main("root", argv, as_script=True) == 0
    assert (out / "run_complete.json").is_file()


def test_a_folder_without_a_checkpoint_is_refused_without_pointing_to_one(tmp_path):
    from hf_treelang.train.folders import RUN_CONFIG, check_output_dir_free

    out = tmp_path / "run"
    (out / "tensorboard").mkdir(parents=True)  # a run that logged, then stopped before its first checkpoint
    (out / RUN_CONFIG).write_text("{}")
    with pytest.raises(ValueError, match="is not empty") as refused:
        check_output_dir_free(out, overwrite=False, resume=None)
    assert "checkpoint-" not in str(refused.value) and "no checkpoint to resume from" in str(refused.value)
    assert "--overwrite_output_dir true" in str(refused.value)


# ---------------------------------------------------------------- the Hub (--push_to_hub)


@pytest.fixture
def hub(monkeypatch):
    """A stand-in for the Hub: ``HfApi``'s repository creation and folder upload recorded, a token, the Hub on."""
    import huggingface_hub
    from huggingface_hub import constants

    calls = []

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", repo_id, kwargs))
        return huggingface_hub.RepoUrl(f"https://huggingface.co/{repo_id}")

    def upload_folder(self, *, repo_id, folder_path, **kwargs):
        folder = Path(folder_path)
        calls.append(("upload_folder", repo_id, {**kwargs, "folder_path": folder,
                                                  "complete": (folder / "run_complete.json").is_file()}))

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", "hf_stand_in")
    return calls


def test_push_to_hub_uploads_the_finished_run_folder_once_to_hub_model_id(tmp_path, capsys, hub):
    from hf_treelang.train.loop import main
    from tiny_run import TINY

    out = tmp_path / "run"
    argv = [*TINY, "--output_dir", str(out), "--push_to_hub", "true", "--hub_model_id", "someone/tiny-root",
            "--hub_private_repo", "true"]
    assert main("root", argv, as_script=True) == 0
    assert [(name, repo) for name, repo, _ in hub] == [("create_repo", "someone/tiny-root"),
                                                       ("upload_folder", "someone/tiny-root")]
    assert hub[0][2]["private"] is True
    upload = hub[1][2]
    assert upload["folder_path"] == out and upload["complete"]  # the finished folder, its marker written
    assert "checkpoint-*" in upload["ignore_patterns"] and list(out.glob("checkpoint-*"))
    assert f"uploaded {out} to https://huggingface.co/someone/tiny-root" in capsys.readouterr().out


@pytest.mark.parametrize("setting, advice", [("no token", "hf auth login"), ("offline", "HF_HUB_OFFLINE")])
def test_push_to_hub_that_could_not_upload_is_refused_before_any_work_with_the_upload_command(
        tmp_path, capsys, monkeypatch, hub, setting, advice):
    import huggingface_hub
    from huggingface_hub import constants

    from hf_treelang.train.loop import main
    from tiny_run import TINY

    if setting == "no token":
        monkeypatch.delenv("HF_TOKEN")
        monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    else:
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    out = tmp_path / "run"
    assert main("root", [*TINY, "--output_dir", str(out), "--push_to_hub", "true"], as_script=True) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "`push_to_hub`" in err and advice in err, err
    assert f"hf upload run {out} ." in err and not out.exists() and not hub


def test_push_to_hub_in_a_sweep_or_an_ensemble_is_refused_with_the_upload_command(tmp_path, hub):
    from hf_treelang.train.run import resolve, runs_from_command_line
    from tiny_run import TINY

    with pytest.raises(ValueError, match=r"`push_to_hub` .*hf upload USER/NAME RUN_FOLDER \."):
        resolve("root", {**TINY_SWEEP["base"], "push_to_hub": True}, tmp_path / "swept")
    with pytest.raises(ValueError, match=r"`push_to_hub` .*one folder per member.*hf upload"):
        runs_from_command_line("root", [*TINY, "--output_dir", str(tmp_path / "ensemble"), "--push_to_hub", "true",
                                        "--ensemble_seeds", "0", "1"])
    assert not hub


# ---------------------------------------------------------------- the sweep's estimate


def _estimate_run(tmp_path, **arguments):
    from hf_treelang.train.run import resolve

    return resolve("root", {**TINY_SWEEP["base"], **arguments}, tmp_path / "run")


def test_the_estimate_measures_each_run_on_its_own_cpu_threads(tmp_path, monkeypatch):
    estimate = importlib.import_module("hf_treelang.sweep.estimate")

    measured = []

    def measure(run, *, device, steps, threads):
        measured.append(threads)
        return 10.0

    monkeypatch.setattr(estimate, "measure_steps_per_second", measure)
    own = _estimate_run(tmp_path, cpu_threads=1)  # the SPEC's cpu_threads: 1, which the sweep's workers keep
    result = estimate.estimate([own], workers=1, threads=2, devices=("cpu",))
    assert measured == [1] and result.threads == 1
    assert any("this machine (1 torch thread(s) per run)" in line for line in estimate.estimate_lines(result))
    shared = _estimate_run(tmp_path, cpu_threads=None)  # no cpu_threads of its own: the workers' share
    assert estimate.estimate([shared], workers=1, threads=2, devices=("cpu",)).threads == 2 and measured[-1] == 2


def test_the_estimate_says_nothing_of_a_gpu_it_did_not_estimate_and_labels_the_reference_table(tmp_path,
                                                                                                monkeypatch):
    import torch

    estimate = importlib.import_module("hf_treelang.sweep.estimate")

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: its time is measured, not read from the reference table")
    monkeypatch.setattr(estimate, "measure_steps_per_second", lambda *args, **kwargs: 10.0)
    run = _estimate_run(tmp_path)
    cpu_only = estimate.estimate_lines(estimate.estimate([run], devices=("cpu",)))
    assert not any("GPU" in line for line in cpu_only), cpu_only
    with_table = estimate.estimate_lines(estimate.estimate([run], devices=("cpu", "cuda")))
    assert any("one GPU, from a reference measured on another machine" in line for line in with_table), with_table


def test_a_sweep_on_a_machine_without_a_gpu_prints_no_gpu_estimate(tmp_path, monkeypatch, capsys):
    import torch

    estimate = importlib.import_module("hf_treelang.sweep.estimate")
    from hf_treelang.sweep import runner
    from hf_treelang.train import loop

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")

    def train(run, cache=None, callbacks=()):  # the runs are not trained: the estimate is printed before
        raise RuntimeError("not trained here")

    monkeypatch.setattr(estimate, "measure_steps_per_second", lambda *args, **kwargs: 10.0)
    monkeypatch.setattr(loop, "_train", train)
    lines = []
    runner.run_sweep(TINY_SWEEP, tmp_path / "out", workers=0, progress=False, estimate=True, log=lines.append)
    assert any("estimated time on this machine" in line for line in lines), lines
    assert not any("GPU" in line for line in lines), lines


# ---------------------------------------------------------------- the console at a run's start and end


@pytest.mark.parametrize("share, said", [(0.3, True), (0.97, False)])
def test_a_cpu_run_says_at_its_start_when_other_work_shares_its_cores(tmp_path, capsys, monkeypatch, share, said):
    from hf_treelang.train import callbacks
    from hf_treelang.train.loop import main
    from tiny_run import TINY

    measured = []
    monkeypatch.setattr(callbacks, "cpu_share", lambda threads: measured.append(threads) or share)
    argv = [*TINY, "--output_dir", str(tmp_path / "run"), "--num_checkpoints", "1", "--cpu_threads", "2"]
    assert main("root", argv, as_script=True) == 0
    lines = capsys.readouterr().out.splitlines()
    assert measured == [2]  # the run's own threads, measured once at its start
    shared = [line for line in lines if "other work shares" in line]
    if said:
        assert lines[0] == shared[0] and "--cpu_threads 1" in shared[0] and "30%" in shared[0], lines[:3]
    else:
        assert not shared


def test_the_contention_line_advises_one_thread_only_to_a_run_of_several():
    from hf_treelang.train.contention import BUSY_SHARE, contention_line

    assert "--cpu_threads 1" in contention_line(0.4, threads=2)
    assert "--cpu_threads 1" not in contention_line(0.4, threads=1) and "slower" in contention_line(0.4, threads=1)
    assert contention_line(BUSY_SHARE, threads=2) is None


def test_the_last_line_of_a_run_says_training_steps_apart_from_evaluations_and_checkpoints(tmp_path, capsys):


    from hf_treelang.train.loop import main
    from tiny_run import TINY

    out = tmp_path / "run"
    assert main("root", [*TINY, "--output_dir", str(out)], as_script=True) == 0
    lines = capsys.readouterr().out.splitlines()
    evaluations = sum(1 for line in lines if re.match(r"step \d+ · loss", line))
    checkpoints = len(list(out.glob("checkpoint-*")))
    (trained,) = [line for line in lines if line.startswith("trained ")]
    found = re.match(r"trained 12 steps in \S+ s \((\S+) s training steps, \S+ s in (\d+) evaluations, "
                     r"\S+ s in (\d+) checkpoints\)", trained)
    assert found, trained
    assert (int(found[2]), int(found[3])) == (evaluations, checkpoints) == (4, 3)


def test_the_phases_of_a_run_are_its_runtime_less_evaluations_and_checkpoints():
    from hf_treelang.train.callbacks import ConsoleCallback

    console = ConsoleCallback()
    console.phase_seconds, console.phase_counts = {"evaluation": 80.0, "checkpoint": 6.0}, \
        {"evaluation": 5, "checkpoint": 1}
    assert console.phases_text(156.0) == "70 s training steps, 80 s in 5 evaluations, 6 s in 1 checkpoint"


def test_a_model_on_transformers_slow_path_is_announced_at_the_start_with_the_time_of_its_first_steps(
        tmp_path, capsys):
    from hf_treelang.models.architectures import slow_path
    from hf_treelang.train.callbacks import SLOW_PATH_STEPS
    from hf_treelang.train.loop import main
    from tiny_run import TINY

    if slow_path("mamba", "cpu") is None:
        pytest.skip("mamba has no slow path here")
    pairs = [TINY[i:i + 2] for i in range(0, len(TINY), 2)]  # the TreeLang sizes out: mamba's from its overrides
    argv = [arg for flag, value in pairs if flag not in ("--hidden_size", "--num_hidden_layers", "--intermediate_size")
            for arg in (flag, value)]
    argv += ["--model_type", "mamba", "--config_overrides", "hidden_size=16,num_hidden_layers=1", "--output_dir",
             str(tmp_path / "run"), "--num_checkpoints", "1"]
    assert main("clm", argv, as_script=True) == 0
    lines = capsys.readouterr().out.splitlines()
    announced = [i for i, line in enumerate(lines) if "transformers' torch reference path" in line]
    timed = [i for i, line in enumerate(lines) if re.search(r"s per step over the first \d+ steps; its 12 steps "
                                                              r"take about", line)]
    first_step = next(i for i, line in enumerate(lines) if re.match(r"step [1-9]", line))
    assert announced and announced[0] < first_step, lines[:6]
    assert timed and f"first {SLOW_PATH_STEPS} steps" in lines[timed[0]]


def test_a_model_with_its_fast_kernels_or_none_to_miss_is_not_announced():
    from hf_treelang.models.architectures import slow_path

    assert slow_path("treelang", "cpu") is None and slow_path("bert", "cpu") is None
    assert "CUDA" in slow_path("mamba", "cpu") and "rwkv" in slow_path("rwkv", "cpu")


# ---------------------------------------------------------------- a long probe says where it is


@pytest.fixture(scope="module")
def untrained_mlm(tmp_path_factory):
    import torch

    from hf_treelang import TreeLangConfig, TreeLangForMaskedLM

    folder = tmp_path_factory.mktemp("probe") / "mlm"
    torch.manual_seed(0)
    config = TreeLangConfig.from_data(num_symbols=3, depth=2, filter_level=0, hidden_size=16, num_hidden_layers=1,
                                      intermediate_size=32)
    TreeLangForMaskedLM(config).save_pretrained(folder)
    return folder


PROBE = dict(num_train=64, num_validation=32, num_test=32, epochs=3, batch_size=32, probe_hidden=0, seed=1)


@pytest.mark.parametrize("every, shown", [(0.0, [1, 2, 3]), (3600.0, [1, 3])])
def test_a_probe_off_a_terminal_says_its_progress_in_periodic_lines(untrained_mlm, monkeypatch, every, shown):
    from hf_treelang.analysis import probing

    monkeypatch.setattr(probing, "PROGRESS_EVERY_S", every)
    lines = []
    probing.probe(untrained_mlm, progress=False, log=lines.append, **PROBE)
    assert lines[0].startswith("estimated time")
    assert lines[1].startswith("hidden states of 128 sequences") and lines[2].startswith("hidden states done in")
    epochs = [line for line in lines if line.startswith("probe epoch")]
    assert [line.split(":")[0] for line in epochs] == [f"probe epoch {e}/3" for e in shown]
    assert all("so far, about" in line and line.endswith("left") for line in epochs)


def test_a_probe_with_a_progress_bar_writes_no_epoch_lines(untrained_mlm):
    from hf_treelang.analysis import probing

    lines = []
    probing.probe(untrained_mlm, progress=True, log=lines.append, **PROBE)
    assert not [line for line in lines if line.startswith("probe epoch")] and len(lines) == 3


# ---------------------------------------------------------------- figures


def test_the_template_figure_of_a_model_at_step_0_draws_every_panel_without_a_warning(tmp_path):
    import warnings

    from hf_treelang import Grammar
    from hf_treelang.analysis.attention import plot_template_dynamics, template_dynamics
    from hf_treelang.analysis.construction import write_bp_transformer

    depth = 3
    folder = write_bp_transformer(tmp_path / "built", Grammar.random(3, 1.0, 0), depth)  # one model, at step 0
    result = template_dynamics(folder, num_samples=16)
    assert list(result.steps) == [0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure = plot_template_dynamics(result)
        figure.canvas.draw()
    assert not [str(w.message) for w in caught]
    bottom = [ax for ax in figure.axes if ax.get_title().endswith("vs App. F templates")]
    assert len(bottom) == depth
    for ax in bottom:
        low, high = ax.get_xlim()
        drawn = [x for line in ax.get_lines() for x in line.get_xdata() if low <= x <= high and x > 0]
        assert len(drawn) >= depth, ax.get_title()  # every template's similarity is a point on the axis


def _grid_figure(tmp_path, monkeypatch, grid: dict):
    """The sweep figure and summary of ``grid`` (TINY_SWEEP's base) with every run finished at made-up numbers."""
    from hf_treelang import plotting
    from hf_treelang.sweep import figure, runner
    from hf_treelang.sweep.spec import load_spec

    base = {key: value for key, value in TINY_SWEEP["base"].items() if key not in grid}
    spec = load_spec({**TINY_SWEEP, "base": base, "grid": grid})
    runs = runner.spec_runs(spec, tmp_path / "out")
    records = {run.name: {"accuracy": 0.5 + 0.1 * i, "bp_accuracy": 0.9,
                          "metrics": {f"eval_kl_bp_k{run.data_args.k_train}": 0.1}} for i, run in enumerate(runs)}
    drawn = []
    save = plotting.save_figure
    monkeypatch.setattr(plotting, "save_figure", lambda fig, path, **kwargs: drawn.append(fig) or save(fig, path))
    (tmp_path / "out").mkdir()
    figure.write_grid_figure(tmp_path / "out", spec, runs, records)
    return figure.grid_summary(spec, runs, records), drawn[0]


def test_the_sweep_figure_draws_a_filter_level_as_categories_not_joined(tmp_path, monkeypatch):
    summary, fig = _grid_figure(tmp_path, monkeypatch, {"k_train": [0, 1, 2]})
    assert summary["x_axis"] == "k_train" and summary["x_scale"] == "category" and not summary["numeric_x"]
    accuracy = fig.axes[0]
    assert [label.get_text() for label in accuracy.get_xticklabels()] == ["0", "1", "2"]
    assert accuracy.get_xscale() == "linear" and list(accuracy.get_xticks()) == [0, 1, 2]
    assert all(line.get_linestyle() == "None" for line in accuracy.get_lines())  # no line joins two levels


def test_the_sweep_figure_draws_a_quantity_beside_a_level_on_a_continuous_axis(tmp_path, monkeypatch):
    summary, fig = _grid_figure(tmp_path, monkeypatch, {"k_train": [0, 1], "num_train": [16, 32, 128]})
    assert summary["x_axis"] == "num_train" and summary["x_scale"] == "log"  # a factor of 8: logarithmic
    assert [series["label"] for series in summary["series"]] == ["k_train=0", "k_train=1"]
    assert fig.axes[0].get_xscale() == "log"
    assert any(line.get_linestyle() == "-" for line in fig.axes[0].get_lines())


@pytest.mark.parametrize("axis, values, quantity", [
    ("k_train", [0, 1], False), ("seed", [0, 1], False), ("grammar_seed", [3, 4], False),
    ("model_type", ["bert", "gpt2"], False), ("num_train", [64, 128], True), ("sigma", [0.5, 1.0], True),
    ("learning_rate", [1e-4, 1e-3], True),
])
def test_an_axis_is_a_quantity_unless_it_names_a_level_a_seed_or_a_word(axis, values, quantity):
    from hf_treelang.sweep.figure import is_quantity

    assert is_quantity(axis, values) is quantity


# ---------------------------------------------------------------- the scripts' --help


def _flags(text: str) -> set:
    return set(re.findall(r"^  (--\w[\w-]*)", text, flags=re.MULTILINE))


def _script_help(task: str, flag: str, capsys, monkeypatch) -> str:
    """What ``python training/run_TASK.py FLAG`` prints, run through the script in this interpreter."""
    script = REPO / "training" / f"run_{task}.py"
    monkeypatch.setattr(sys, "argv", [str(script), flag])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(script), run_name="__main__")
    assert stop.value.code in (0, None)
    return capsys.readouterr().out


@pytest.mark.parametrize("task, own, others", [("mlm", "--mask_rate", "--freeze_encoder"),
                                                ("finetune", "--freeze_encoder", "--mask_rate"),
                                                ("clm", "--num_train", "--ensemble_seeds")])
def test_a_scripts_help_lists_its_task_and_the_common_flags_and_help_all_lists_every_one(task, own, others, capsys,
                                                                                          monkeypatch):
    brief = types.SimpleNamespace(stdout=_script_help(task, "--help", capsys, monkeypatch))
    full = types.SimpleNamespace(stdout=_script_help(task, "--help-all", capsys, monkeypatch))
    shown, every = _flags(brief.stdout), _flags(full.stdout)
    assert {own, "--output_dir", "--preset", "--max_steps", "--report_to", "--help-all"} <= shown
    assert others not in shown and "--fsdp" not in shown and "--neftune_noise_alpha" not in shown
    assert shown < every and {others, "--fsdp", "--neftune_noise_alpha"} <= every
    assert len(shown) <= len(every) // 2, len(shown)
    assert "--help-all" in brief.stdout.split("\n\n")[-1]  # the last paragraph says where the others are


def test_a_flag_the_help_leaves_out_is_still_accepted():
    from hf_treelang.train.arguments import parse_command_line

    _, _, training_args, _, explicit = parse_command_line("mlm", ["--logging_first_step", "true"])
    assert training_args.logging_first_step is True and "logging_first_step" in explicit


def test_a_sweep_asked_for_its_bar_draws_none_into_a_file(tmp_path, monkeypatch, capsys):
    from hf_treelang.sweep import runner
    from hf_treelang.train import loop

    def train(run, cache=None, callbacks=()):  # the runs fail at once: only the sweep's own output is left
        raise RuntimeError("not trained here")

    monkeypatch.setattr(loop, "_train", train)
    pack_jobs = runner.pack_jobs
    monkeypatch.setattr(runner, "pack_jobs",  # one run per job, each through loop._train
                        lambda runs, states, together=True, device=None: pack_jobs(runs, states, together=False))
    runner.run_sweep(TINY_SWEEP, tmp_path / "out", workers=0, progress=True, estimate=False, log=print)
    captured = capsys.readouterr()  # stderr is not a terminal here
    assert "not trained here" in captured.out  # the runs were tried
    assert "\r" not in captured.err + captured.out and "sweep:" not in captured.err
