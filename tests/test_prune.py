"""``hf-treelang prune``: a finished run without its checkpoints stays a complete run for every analysis, ``compare``
and the sweep engine; an interrupted prune leaves a complete run; a folder that is not a finished run is refused
before any folder is touched."""

import json
import shutil

import pytest

from hf_treelang import cli
from hf_treelang.sweep.runner import run_sweep
from hf_treelang.train import folders

TINY = {"depth": 2, "num_symbols": 3, "hidden_size": 16, "num_hidden_layers": 1, "intermediate_size": 16,
        "num_train": 64, "num_eval": 16, "num_test": 16, "per_device_train_batch_size": 8, "num_train_epochs": 1.0,
        "num_evaluations": 2, "num_checkpoints": 2, "report_to": "none", "disable_tqdm": True,
        "use_dataset_builder": False, "cpu_threads": 1}


def _sweep(out):
    return run_sweep({"task": "root", "base": TINY, "grid": {"seed": [0]}}, out, workers=0, progress=False)


@pytest.fixture
def finished(tmp_path):
    _sweep(tmp_path / "sweep")
    run = tmp_path / "sweep" / "runs" / "seed=0"
    assert len(folders.checkpoints(run)) >= 2
    return run


def test_a_pruned_run_is_complete_skipped_by_a_rerun_and_compared(finished, tmp_path, capsys):
    before = folders.finished_run(finished)
    assert cli.main(["prune", str(finished)]) == 0
    assert "removed" in capsys.readouterr().out
    assert folders.checkpoints(finished) == []
    marker = json.loads((finished / folders.RUN_COMPLETE).read_text())
    assert marker["pruned"] and not any(name.startswith(folders.CHECKPOINT_PREFIX) for name in marker["files"])
    folders.check_run_complete(finished)
    assert folders.finished_run(finished)["final"] == before["final"]
    again = _sweep(tmp_path / "sweep")
    assert again.trained == [] and again.skipped == ["seed=0"]
    assert cli.main(["compare", str(finished), "--out", str(tmp_path / "cmp")]) == 0
    capsys.readouterr()
    assert cli.main(["prune", str(finished)]) == 0
    assert "no checkpoint to remove" in capsys.readouterr().out


def test_an_interrupted_prune_leaves_a_complete_run_that_a_second_prune_finishes(finished, monkeypatch):
    real_rmtree = shutil.rmtree
    calls = []

    def rmtree_once(path, *args, **kwargs):
        calls.append(path)
        if len(calls) > 1:
            raise KeyboardInterrupt  # the process stops after the first checkpoint went
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(folders.shutil, "rmtree", rmtree_once)
    with pytest.raises(KeyboardInterrupt):
        folders.prune_checkpoints(finished)
    monkeypatch.setattr(folders.shutil, "rmtree", real_rmtree)
    assert folders.checkpoints(finished)  # some are left, unlisted
    assert folders.completed_run(finished) is not None
    names, _ = folders.prune_checkpoints(finished)
    assert names and folders.checkpoints(finished) == []
    assert folders.completed_run(finished) is not None


def test_prune_refuses_an_unfinished_or_foreign_folder_before_touching_any(finished, tmp_path, capsys):
    unfinished = tmp_path / "unfinished"
    shutil.copytree(finished, unfinished)
    (unfinished / folders.RUN_COMPLETE).unlink()
    count = len(folders.checkpoints(finished))
    assert cli.main(["prune", str(finished), str(unfinished)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "incomplete training run" in error and str(unfinished) in error
    assert len(folders.checkpoints(finished)) == count and len(folders.checkpoints(unfinished)) == count
    (tmp_path / "notes").mkdir()
    assert cli.main(["prune", str(tmp_path / "notes")]) == 2
    assert "is not a training run folder" in capsys.readouterr().err


def test_prune_refuses_a_symlinked_checkpoint_before_changing_anything(finished, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(finished, other)
    _, last = folders.checkpoints(finished)[-1]
    elsewhere = tmp_path / "elsewhere" / last.name
    elsewhere.parent.mkdir()
    shutil.move(last, elsewhere)
    last.symlink_to(elsewhere, target_is_directory=True)
    marker = (finished / folders.RUN_COMPLETE).read_bytes()
    before = {path.name for path in finished.iterdir()}
    kept = sorted(path.name for path in elsewhere.iterdir())
    assert cli.main(["prune", str(other), str(finished)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and last.name in error and "symbolic link" in error
    assert (finished / folders.RUN_COMPLETE).read_bytes() == marker
    assert {path.name for path in finished.iterdir()} == before and last.is_symlink()
    assert sorted(path.name for path in elsewhere.iterdir()) == kept
    assert len(folders.checkpoints(other)) == len(folders.checkpoints(finished))  # the other run is untouched too
