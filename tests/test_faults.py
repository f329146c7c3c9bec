"""Fault injection: a process killed at a random point of a run, a sweep and a publish, killed in the middle of a
checkpoint's save, a disk that fills (a size-limited tmpfs where the platform lets this process mount one, else an
injected ``ENOSPC``), and two writers on one folder. After each, nothing of the user's is lost, nothing half-written
passes for complete, and the next run picks up cleanly.

Each kill is at a seeded random time after the first sign of work (a checkpoint, a staging folder), or at a chosen
write, so the tests are reproducible and still hit the middle of the work rather than its start. The races between
two writers are made deterministic: the test holds the folder's claim for another live process (``other_owner``),
then starts the second writer.
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

from hf_treelang import claims, cli
from hf_treelang.processes import process_alive
from hf_treelang.train import loop
from hf_treelang.train.folders import RUN_COMPLETE, DamagedFile, last_checkpoint, write_run_complete
from hf_treelang.train.run import runs_from_command_line

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
# the tiny run (`T`), on data drawn without the dataset builder
T = ["--cpu_threads", "1", "--max_steps", "20", "--num_train", "256", "--num_eval", "32", "--num_test", "32",
     "--num_evaluations", "2", "--hidden_size", "16", "--intermediate_size", "32", "--report_to", "none",
     "--disable_tqdm", "true", "--use_dataset_builder", "false"]
TINY_SPEC = {"task": "root", "base": {"depth": 2, "num_symbols": 3, "hidden_size": 16, "num_hidden_layers": 1,
                                      "intermediate_size": 16, "num_train": 32, "num_eval": 16, "num_test": 16,
                                      "max_steps": 4, "num_evaluations": 1, "num_checkpoints": 1, "report_to": "none",
                                      "disable_tqdm": True, "use_dataset_builder": False, "cpu_threads": 1},
             "grid": {"seed": [0]}}


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


# ---------------------------------------------------------------- two writers on one folder


@pytest.fixture
def other_owner(request):
    """``hold(folder)``: claim ``folder`` for another live process of this host (as its own claim would read);
    returns that process, which ``kill`` ends."""
    process = subprocess.Popen(["sleep", "600"])
    request.addfinalizer(process.kill)

    def hold(folder):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / claims.CLAIM_FILE).write_text(json.dumps(claims.claim_record(process.pid)))
        return process

    return hold


def _names(folder):
    return sorted(path.name for path in folder.iterdir())


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_second_run_into_a_folder_another_run_writes_is_refused_naming_it_and_writes_nothing(
        tmp_path, other_owner, capsys):
    folder = tmp_path / "cc"
    owner = other_owner(folder)
    assert loop.main("root", [*T, "--output_dir", str(folder), "--seed", "2"], as_script=True) == 2
    line = _one_line(capsys.readouterr().err)
    assert ": error: `output_dir` " in line and f"in use by process {owner.pid} on " in line
    assert _names(folder) == [claims.CLAIM_FILE]  # the first run's folder, untouched

    owner.kill()
    owner.wait()  # its claim is left behind by a dead process: it no longer stands in the way
    (run,), _ = runs_from_command_line("root", [*T, "--output_dir", str(folder), "--seed", "2"])


def test_a_run_checked_before_another_claimed_its_folder_is_refused_once_it_tries_to_write(tmp_path, other_owner):
    """The race of two ``run_root.py`` into one folder: both find it empty, then the first starts writing."""
    folder = tmp_path / "cc"
    (run,), _ = runs_from_command_line("root", [*T, "--output_dir", str(folder), "--seed", "2"])  # checked: empty
    owner = other_owner(folder)
    with pytest.raises(claims.FolderTaken, match=f"in use by process {owner.pid} "):
        loop.train(run)
    (folder / "model.safetensors").write_text("the first run's")  # it wrote, finished and let the folder go
    (folder / claims.CLAIM_FILE).unlink()
    with pytest.raises(claims.FolderTaken, match="is not empty"):
        loop.train(run)
    assert _names(folder) == ["model.safetensors"] and (folder / "model.safetensors").read_text() == "the first run's"


def test_a_second_sweep_on_a_folder_is_refused_naming_the_first_and_records_nothing(tmp_path, other_owner, capsys):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(TINY_SPEC))
    out = tmp_path / "sw"
    owner = other_owner(out)
    assert cli.run_command("sweep", [str(spec_file), str(out), "--no-progress"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("hf-treelang sweep: error: `OUT` ") and f"in use by process {owner.pid} " in line
    assert _names(out) == [claims.CLAIM_FILE]


def test_a_sweep_that_planned_before_another_finished_its_runs_trains_none_of_them_again(tmp_path, monkeypatch):
    """The race of two sweeps on one folder: the second reads the folders, the first trains every run and lets the
    folder go, then the second claims it. It reads the folders again: nothing is trained twice, one record per run."""
    from hf_treelang.sweep import runner

    out = tmp_path / "sw"
    plan, calls = runner.plan_runs, []

    def plan_then_let_the_other_sweep_finish(runs, folder):
        states = plan(runs, folder)
        calls.append(sorted(state.status for state in states.values()))
        if len(calls) == 1:  # the second sweep's first reading, before its claim
            first = runner.run_sweep(TINY_SPEC, out, workers=0, progress=False, estimate=False)
            assert first.trained == ["seed=0"]
        return states

    monkeypatch.setattr(runner, "plan_runs", plan_then_let_the_other_sweep_finish)
    second = runner.run_sweep(TINY_SPEC, out, workers=0, progress=False, estimate=False)
    assert calls[0] == ["new"] and calls[-1] == ["done"]
    assert second.trained == [] and second.skipped == ["seed=0"]
    assert [record["name"] for record in runner.read_results(out)] == ["seed=0"]


def test_a_second_reproduction_on_a_folder_is_refused_naming_the_first_and_writes_nothing(tmp_path, other_owner,
                                                                                          capsys):
    out = tmp_path / "out"
    owner = other_owner(out)
    assert cli.run_command("reproduce", [str(out), "--preset", "quick", "--no-progress"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("hf-treelang reproduce: error: `OUT` ") and f"in use by process {owner.pid} " in line
    assert _names(out) == [claims.CLAIM_FILE]


# ---------------------------------------------------------------- claims of dead processes


def test_a_claim_of_a_dead_process_or_of_a_reused_pid_is_taken_over(tmp_path, other_owner):
    owner = other_owner(tmp_path / "alive")
    with pytest.raises(claims.FolderTaken):
        with claims.claim_folder(tmp_path / "alive", "output_dir"):
            pass
    reused = {**claims.claim_record(owner.pid), "started": "another boot:1"}  # a live pid, but another process
    (tmp_path / "reused").mkdir()
    (tmp_path / "reused" / claims.CLAIM_FILE).write_text(json.dumps(reused))
    with claims.claim_folder(tmp_path / "reused", "output_dir"):
        assert json.loads((tmp_path / "reused" / claims.CLAIM_FILE).read_text())["pid"] == os.getpid()
    assert _names(tmp_path / "reused") == []
    other_owner(tmp_path / "dead")
    owner.kill()
    owner.wait()
    with claims.claim_folder(tmp_path / "dead", "output_dir"):
        assert claims.owner(tmp_path / "dead") is None  # ours
    assert _names(tmp_path / "dead") == []


def test_a_claim_of_another_host_holds_until_its_heartbeat_stops(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    record = {**claims.claim_record(), "host": "another-node", "pid": 4242}
    (folder / claims.CLAIM_FILE).write_text(json.dumps(record))
    with pytest.raises(claims.FolderTaken, match="process 4242 on another-node .*minutes without a heartbeat"):
        with claims.claim_folder(folder, "OUT"):
            pass
    old = time.time() - claims.STALE_AFTER_S - 1
    os.utime(folder / claims.CLAIM_FILE, (old, old))
    with claims.claim_folder(folder, "OUT"):
        assert json.loads((folder / claims.CLAIM_FILE).read_text())["host"] == socket.gethostname()


def test_an_owner_refreshes_its_claim_and_removes_it_when_its_work_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(claims, "HEARTBEAT_S", 0.05)
    folder = tmp_path / "run"
    with pytest.raises(RuntimeError, match="diverged"):
        with claims.claim_folder(folder, "output_dir"):
            with claims.claim_folder(folder, "output_dir"):  # nested in one process: still one claim
                old = time.time() - claims.STALE_AFTER_S - 1
                os.utime(folder / claims.CLAIM_FILE, (old, old))
                _wait_for(lambda: time.time() - (folder / claims.CLAIM_FILE).stat().st_mtime < 5, 10, "a heartbeat")
            assert (folder / claims.CLAIM_FILE).is_file()
            raise RuntimeError("diverged")
    assert not folder.exists()  # the claim made the folder, nothing was written into it: both gone


# ---------------------------------------------------------------- killed while saving a checkpoint


CHECKPOINTED = [*SCRIPT, "--num_checkpoints", "3", "--num_evaluations", "2"]  # 6 steps, 3 checkpoints


@pytest.fixture(scope="module")
def checkpointed_run(tmp_path_factory):
    """A finished tiny run (:data:`CHECKPOINTED`), uninterrupted."""
    folder = tmp_path_factory.mktemp("checkpointed") / "run"
    assert loop.main("root", [*CHECKPOINTED, "--output_dir", str(folder)]) == 0
    return folder


KILLED_AT_SECOND_SAVE = """import os, signal, sys, torch
from hf_treelang.train import loop

save, saves = torch.save, []


def save_then_die(obj, f, *args, **kwargs):
    save(obj, f, *args, **kwargs)
    if str(f).endswith("optimizer.pt"):
        saves.append(f)
        if len(saves) == 2:  # the second checkpoint: its optimiser state half written, then kill -9
            os.truncate(f, os.path.getsize(f) // 2)
            os.kill(os.getpid(), signal.SIGKILL)


torch.save = save_then_die
sys.exit(loop.main("root", sys.argv[1:], as_script=True))
"""


def test_a_run_killed_while_saving_a_checkpoint_resumes_from_the_one_before_to_the_same_weights(
        tmp_path, checkpointed_run, capsys):
    folder = tmp_path / "cc"
    arguments = [*CHECKPOINTED, "--output_dir", str(folder)]
    killed = subprocess.run([sys.executable, "-c", KILLED_AT_SECOND_SAVE, *arguments], capture_output=True,
                            text=True, timeout=240)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (first, _), (second, _) = sorted((int(p.name.split("-")[1]), p) for p in folder.glob("checkpoint-*"))
    assert (folder / claims.CLAIM_FILE).is_file() and not (folder / RUN_COMPLETE).exists()

    half_saved = folder / f"checkpoint-{second}"
    assert loop.main("root", [*arguments, "--resume_from_checkpoint", str(half_saved)], as_script=True) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(half_saved) in line and f"checkpoint-{first}" in line  # what is wrong, and where to resume from

    resume = folder / f"checkpoint-{first}"
    assert loop.main("root", [*arguments, "--resume_from_checkpoint", str(resume)], as_script=True) == 0
    assert (folder / RUN_COMPLETE).is_file() and not (folder / claims.CLAIM_FILE).exists()  # the dead one's claim
    for name in ("model.safetensors", f"checkpoint-{second}/optimizer.pt"):
        resumed, whole = (load_file(path / name) if name.endswith(".safetensors") else torch.load(path / name)
                          for path in (folder, checkpointed_run))
        if name.endswith(".safetensors"):
            assert all(torch.equal(resumed[key], whole[key]) for key in whole), name
        else:
            assert all(torch.equal(a, b) for a, b in zip(_tensors(resumed), _tensors(whole))), name
    steps = [[entry["step"] for entry in json.loads((path / "eval_history.json").read_text())["history"]]
             for path in (folder, checkpointed_run)]
    assert steps[0] == steps[1]  # every evaluation once: none lost, none twice


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from _tensors(value[key])
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


# ---------------------------------------------------------------- damaged files named, not tracebacks


def _complete_run(folder, head):
    """A run folder marked complete (randomly initialised weights, ℓ = 2, q = 3, the scripts' SCRIPT data)."""
    from hf_treelang import TreeLangConfig

    torch.manual_seed(0)
    config = TreeLangConfig.from_data(num_symbols=3, depth=2, filter_level=0, hidden_size=16, num_hidden_layers=1,
                                      intermediate_size=16)
    head(config).save_pretrained(folder)
    (folder / "run_config.json").write_text("{}")
    write_run_complete(folder, task="mlm", global_step=0)
    return folder


def _truncate(path):
    os.truncate(path, path.stat().st_size // 2)


def test_a_truncated_weights_file_in_a_complete_run_is_one_line_from_every_loader(tmp_path, capsys):
    from hf_treelang import TreeLangForCausalLM, TreeLangForMaskedLM

    mlm = _complete_run(tmp_path / "mlm", TreeLangForMaskedLM)
    causal = _complete_run(tmp_path / "causal", TreeLangForCausalLM)
    for run in (mlm, causal):
        _truncate(run / "model.safetensors")
    capsys.readouterr()  # save_pretrained's progress bars
    commands = {
        "calibration": [str(mlm), "--num-samples", "8"], "attention": [str(mlm), "--num-samples", "8"],
        "probe": [str(mlm), "--num-train", "8", "--num-validation", "8", "--num-test", "8", "--epochs", "1"],
        "generate": [str(causal), "--num-samples", "2"],
    }
    for command, arguments in commands.items():
        assert cli.run_command(command, [*arguments, "--out", str(tmp_path / command)]) == 2, command
        line = _one_line(capsys.readouterr().err)
        assert "model.safetensors is damaged" in line and "cut short" in line and "train it again" in line, line
        assert not (tmp_path / command).exists()
    finetune = [*SCRIPT, "--model_name_or_path", str(mlm), "--output_dir", str(tmp_path / "finetuned")]
    assert loop.main("finetune", finetune, as_script=True) == 2
    line = _one_line(capsys.readouterr().err)
    assert "model.safetensors is damaged" in line and "train it again" in line, line
    assert not (tmp_path / "finetuned").exists()


def test_weights_rewritten_in_place_differ_from_the_recorded_digest(tmp_path):
    from hf_treelang import TreeLangForMaskedLM
    from hf_treelang.analysis import load_checkpoint

    run = _complete_run(tmp_path / "mlm", TreeLangForMaskedLM)
    data = bytearray((run / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF  # one byte of the last tensor: same size, same header
    (run / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(DamagedFile, match=r"model.safetensors is damaged \(its content differs from the sha256"):
        load_checkpoint(run)


DAMAGES = {
    "trainer_state.json": lambda path: path.write_text('{"global_step": 6, "log_history": ['),
    "model.safetensors": _truncate,
    "optimizer.pt": _truncate,
}


@pytest.mark.parametrize("name", sorted(DAMAGES))
def test_resuming_from_a_checkpoint_with_a_damaged_file_names_it_and_the_checkpoint_to_resume_from(
        tmp_path, checkpointed_run, capsys, name):
    import shutil

    folder = shutil.copytree(checkpointed_run, tmp_path / "run")
    *_, (_, earlier), (_, latest) = sorted((int(p.name.split("-")[1]), p) for p in folder.glob("checkpoint-*"))
    DAMAGES[name](latest / name)
    before = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
    arguments = [*CHECKPOINTED, "--output_dir", str(folder), "--resume_from_checkpoint", str(latest)]
    assert loop.main("root", arguments, as_script=True) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"is damaged: {name} is " in line and f"--resume_from_checkpoint {str(earlier)!r}" in line, line
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == before
    assert last_checkpoint(folder) == earlier  # a sweep resumes from the intact one


def _zero_fill(path: Path) -> None:
    path.write_bytes(bytes(path.stat().st_size))  # what a power loss can leave: the size, none of the bytes


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt"])
def test_a_checkpoint_file_zero_filled_at_its_size_is_named_and_the_finished_run_stays_finished(
        tmp_path, checkpointed_run, capsys, name):
    import shutil

    folder = shutil.copytree(checkpointed_run, tmp_path / "run")
    *_, (_, earlier), (_, latest) = sorted((int(p.name.split("-")[1]), p) for p in folder.glob("checkpoint-*"))
    _zero_fill(latest / name)
    before = {p.relative_to(folder).as_posix(): p.stat().st_mtime_ns for p in folder.rglob("*")}
    arguments = [*CHECKPOINTED, "--output_dir", str(folder), "--resume_from_checkpoint", str(latest)]
    assert loop.main("root", arguments, as_script=True) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"is damaged: {name} is " in line and "not a torch archive (all zero bytes)" in line, line
    assert {p.relative_to(folder).as_posix(): p.stat().st_mtime_ns for p in folder.rglob("*")} == before
    assert (folder / RUN_COMPLETE).is_file() and last_checkpoint(folder) == earlier  # a sweep takes the intact one


def test_a_damaged_first_checkpoint_of_a_finished_run_is_advised_as_such_and_the_advice_works(
        tmp_path, checkpointed_run, capsys):
    import shutil

    from hf_treelang.train.folders import check_run_complete, checkpoints

    folder = shutil.copytree(checkpointed_run, tmp_path / "run")
    (_, first), *_ = checkpoints(folder)
    _truncate(first / "model.safetensors")
    capsys.readouterr()
    resume = [*CHECKPOINTED, "--output_dir", str(folder), "--resume_from_checkpoint", str(first)]
    assert loop.main("root", resume, as_script=True) == 2
    lines = [_one_line(capsys.readouterr().err)]
    assert cli.run_command("calibration", [str(first), "--num-samples", "8", "--out", str(tmp_path / "cal")]) == 2
    lines.append(_one_line(capsys.readouterr().err))
    for line in lines:
        assert "damaged" in line and "model.safetensors is" in line and "--overwrite_output_dir" not in line, line
        assert "is finished" in line and "nothing needs resuming" in line, line
        assert f"rm -r {str(first)!r}" in line and f"hf-treelang prune {str(folder)!r}" in line, line
    assert (folder / RUN_COMPLETE).is_file()
    # kept, the damaged checkpoint leaves the run finished for every analysis
    check_run_complete(folder)
    assert cli.run_command("calibration", [str(folder), "--num-samples", "8", "--out", str(tmp_path / "kept")]) == 0
    removed = shutil.copytree(folder, tmp_path / "removed")
    shutil.rmtree(removed / first.name)  # removed by hand
    check_run_complete(removed)
    assert cli.main(["prune", str(folder)]) == 0  # or with every checkpoint
    check_run_complete(folder)
    assert checkpoints(folder) == []


def test_a_resume_that_fails_once_the_trainer_loads_leaves_the_finished_run_finished(
        tmp_path, checkpointed_run, monkeypatch):
    import shutil

    from hf_treelang.train.trainer import TreeLangTrainer

    folder = shutil.copytree(checkpointed_run, tmp_path / "run")
    (_, latest), = [max((int(p.name.split("-")[1]), p) for p in folder.glob("checkpoint-*"))]
    identity = (folder / "run_identity.json").read_bytes() if (folder / "run_identity.json").is_file() else None

    def fails(self, checkpoint):
        raise RuntimeError("the optimizer's state would not load")

    monkeypatch.setattr(TreeLangTrainer, "_load_optimizer_and_scheduler", fails)
    with pytest.raises(RuntimeError, match="would not load"):
        loop.main("root", [*CHECKPOINTED, "--output_dir", str(folder), "--resume_from_checkpoint", str(latest)])
    assert (folder / RUN_COMPLETE).is_file()  # nothing of the finished run is removed before the new work began
    if identity is not None:
        assert (folder / "run_identity.json").read_bytes() == identity


def test_resuming_a_finished_run_of_another_architecture_with_other_sizes_is_one_line(tmp_path, capsys):
    folder = tmp_path / "gpt2"
    sizes = "n_embd=16,n_layer=1,n_head=1"
    script = [flag for i, flag in enumerate(SCRIPT) if flag not in ("--hidden_size", "--num_hidden_layers",
                                                                      "--intermediate_size")
              and (i == 0 or SCRIPT[i - 1] not in ("--hidden_size", "--num_hidden_layers", "--intermediate_size"))]
    base = [*script, "--model_type", "gpt2", "--max_steps", "4", "--num_checkpoints", "1"]
    assert loop.main("root", [*base, "--config_overrides", sizes, "--output_dir", str(folder)]) == 0
    checkpoint = max(folder.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    before = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
    other = [*base, "--config_overrides", "n_embd=32,n_layer=1,n_head=1", "--output_dir", str(folder),
             "--resume_from_checkpoint", str(checkpoint)]
    assert loop.main("root", other, as_script=True) == 2
    line = _one_line(capsys.readouterr().err)
    assert "does not fit this run's model" in line and "16] there and " in line and "32] here" in line, line
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == before
    assert (folder / RUN_COMPLETE).is_file()
