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
