"""Fault injection: a process killed at a random point of a run, a sweep and a publish, and a disk that fills (a
size-limited tmpfs where the platform lets this process mount one, else an injected ``ENOSPC``). After each, nothing
of the user's is lost, nothing half-written passes for complete, and the next run picks up cleanly.

Each kill is at a seeded random time after the first sign of work (a checkpoint, a staging folder), so the tests are
reproducible and still hit the middle of the work rather than its start.
"""

import errno
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hf_treelang.processes import process_alive
from hf_treelang.train import loop
from hf_treelang.train.folders import RUN_COMPLETE

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ["--depth", "2", "--num_symbols", "3", "--hidden_size", "16", "--num_hidden_layers", "1",
          "--intermediate_size", "16", "--num_train", "48", "--num_eval", "16", "--num_test", "8", "--k_test", "0",
          "--per_device_train_batch_size", "8", "--num_train_epochs", "1", "--num_evaluations", "0",
          "--num_checkpoints", "1", "--disable_tqdm", "true", "--report_to", "none", "--cpu_threads", "1",
          "--use_dataset_builder", "false"]
# a sweep of one run long enough to be killed in the middle: 1200 steps, a checkpoint every 200
SWEEP_BASE = {"depth": 2, "num_symbols": 3, "hidden_size": 16, "num_hidden_layers": 1, "intermediate_size": 16,
              "num_train": 64, "num_eval": 16, "num_test": 16, "per_device_train_batch_size": 16, "max_steps": 1200,
              "num_evaluations": 2, "num_checkpoints": 6, "report_to": "none", "disable_tqdm": True,
              "use_dataset_builder": False, "cpu_threads": 1}
SPEC = {"task": "root", "base": SWEEP_BASE, "grid": {"seed": [0]}}


def _wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def _alive(pid: int) -> bool:
    return process_alive(socket.gethostname(), pid)  # a zombie (exited, not reaped) counts as gone


# ---------------------------------------------------------------- a sweep's driver killed


def test_a_killed_sweep_driver_takes_its_worker_with_it_and_the_next_sweep_resumes_to_the_same_weights(tmp_path):
    from hf_treelang.sweep import runner

    out = tmp_path / "sweep"
    driver = subprocess.Popen(
        [sys.executable, "-c", "import json, sys\nfrom hf_treelang.sweep import runner\n"
         "runner.run_sweep(json.loads(sys.argv[1]), sys.argv[2], workers=1, progress=False, estimate=False)",
         json.dumps(SPEC), str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = out / "runs" / "seed=0"
    try:
        _wait_for(lambda: list(run_dir.glob("checkpoint-*/trainer_state.json")), 240, "the worker's first checkpoint")
        worker = json.loads((run_dir / "run_identity.json").read_text())["pid"]
        assert worker != driver.pid
        time.sleep(random.Random(0).uniform(0.0, 0.5))
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
        _wait_for(lambda: not _alive(worker), 30, f"worker {worker} to exit after its driver was killed")
    finally:
        if driver.poll() is None:
            driver.kill()
    assert not (run_dir / RUN_COMPLETE).exists()

    resumed = runner.run_sweep(SPEC, out, workers=0, progress=False, estimate=False)
    assert resumed.failed == {} and resumed.records["seed=0"]["global_step"] == 1200
    assert json.loads((run_dir / "run_identity.json").read_text())["resumed_from"].startswith("checkpoint-")

    fresh = runner.run_sweep(SPEC, tmp_path / "uninterrupted", workers=0, progress=False, estimate=False)
    assert fresh.failed == {}
    first = load_file(tmp_path / "uninterrupted" / "runs" / "seed=0" / "model.safetensors")
    second = load_file(run_dir / "model.safetensors")
    assert all(torch.equal(first[key], second[key]) for key in first)


# ---------------------------------------------------------------- a publish killed


def test_a_publish_killed_midway_leaves_no_repository_and_the_next_one_cleans_its_staging(tmp_path):
    out = tmp_path / "repo"
    command = [sys.executable, "-m", "hf_treelang.cli", "publish-dataset", str(out), "--configs", "k0", "k1", "k2",
               "k3", "k4", "--num-train", "200000"]
    publish = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: list(tmp_path.glob(".repo.tmp-*/data/*/train-*.parquet")), 240, "the first staged shard")
        time.sleep(random.Random(1).uniform(0.0, 0.5))
        publish.send_signal(signal.SIGKILL)
        publish.wait(timeout=30)
    finally:
        if publish.poll() is None:
            publish.kill()
    assert not out.exists(), "a killed publish must not leave a repository that looks complete"
    assert list(tmp_path.glob(".repo.tmp-*"))  # its staging folder, owned by a dead process
    done = subprocess.run(command[:7] + ["--num-train", "20", "--num-validation", "4", "--num-test", "4"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]


# ---------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk(tmp_path):
    """A 160 KiB tmpfs: mounted where this process may (root on Linux), else the test is skipped."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("this platform does not let the test mount a size-limited folder")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_training_script_on_a_full_disk_says_what_a_checkpoint_needs_in_one_line(small_disk):
    done = subprocess.run([sys.executable, str(ROOT / "training" / "run_root.py"), *SCRIPT, "--hidden_size", "64",
                           "--intermediate_size", "64", "--output_dir", str(small_disk / "run")],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("run_root.py: error: output_dir: no space left on the disk of ")
    assert "a checkpoint of this model takes about" in last and "free there" in last
    assert not (small_disk / "run" / RUN_COMPLETE).exists()


def test_publishing_onto_a_full_disk_says_how_much_it_wrote_and_needs(small_disk):
    done = subprocess.run([sys.executable, "-m", "hf_treelang.cli", "publish-dataset", str(small_disk / "repo"),
                           "--configs", "k0", "k1", "--num-train", "20000"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("hf-treelang publish-dataset: error: out_dir: no space left on the disk")
    assert "configs did not fit" in last or "the repository needs about" in last
    assert list(small_disk.iterdir()) == []  # the staging folder is gone too


def test_a_full_disk_at_a_checkpoint_is_one_line_from_the_script_and_leaves_an_unfinished_run(tmp_path, monkeypatch,
                                                                                             capsys):
    """The same on any platform: ``ENOSPC`` injected where the Trainer saves the optimiser's state."""

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    assert loop.main("root", [*SCRIPT, "--output_dir", str(tmp_path / "run")], as_script=True) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "no space left on the disk of" in last and "a checkpoint of this model takes about" in last
    assert (tmp_path / "run" / "run_config.json").exists() and not (tmp_path / "run" / RUN_COMPLETE).exists()
