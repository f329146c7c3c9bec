"""Where the package meets its ecosystem: loggers and the Hub checked before a run starts, output into a file without
progress-bar codes, a shared CPU and slow paths said at the start, and the scripts' --help."""

import json
import os
import subprocess
import sys
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
