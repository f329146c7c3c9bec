"""Every command of the README runs, at a tiny size, so that the README cannot rot (its examples are the docs
pages', run by tests/test_docs.py).

The shell commands run in the README's order (training first, then the analyses of its outputs) in a temporary
working directory, each with the extra arguments of ``TINY`` that shrink data, model and steps. A README command
without an entry in ``TINY`` fails the test: a new command must come with its tiny variant.
"""

import contextlib
import io
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import torch

from hf_treelang import cli

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")

TRAIN = (
    "--num_train 64 --num_eval 32 --num_test 32 --k_test 0 4 --hidden_size 16 --intermediate_size 32 "
    "--max_steps 4 --num_evaluations 1 --num_checkpoints 1 --report_to none --disable_tqdm true"
)
OTHER_TRAIN = "--num_train 64 --num_eval 32 --num_test 32 --k_test 0 4 --max_steps 4 --num_evaluations 1 " \
    "--num_checkpoints 1 --report_to none --disable_tqdm true"  # another architecture: its sizes are the command's
TINY = {
    "accelerate launch training/run_mlm.py": TRAIN,
    "python training/run_root.py": TRAIN,
    "python training/run_clm.py": TRAIN,
    "hf-treelang generate outputs/run_clm --out figures/generate": "--num-samples 64",
    'python training/run_mlm.py --model_type bert --config_overrides "hidden_size=64,num_hidden_layers=4,'
    'num_attention_heads=1,intermediate_size=256" --output_dir outputs/run_mlm_bert': OTHER_TRAIN,
    'python training/run_clm.py --model_type gpt2 --config_overrides "n_embd=64,n_layer=4,n_head=1" --output_dir '
    'outputs/run_clm_gpt2': OTHER_TRAIN,
    'python training/run_root.py --model_type mamba --config_overrides "hidden_size=64,num_hidden_layers=6" '
    '--output_dir outputs/run_root_mamba': OTHER_TRAIN,
    "hf-treelang compare outputs/run_mlm outputs/run_mlm_bert --out figures/compare": "",
    "python training/run_finetune.py --model_name_or_path outputs/run_mlm --freeze_encoder true": TRAIN,
    "hf-treelang calibration outputs/run_mlm --out figures/calibration": "--num-samples 64",
    "hf-treelang attention outputs/run_mlm --out figures/attention": "--num-samples 64",
    "hf-treelang probe outputs/run_mlm --out figures/probe": "--num-train 64 --num-test 32 --epochs 1",
    "hf-treelang dynamics outputs/run_mlm --out figures/dynamics": "",
    "hf-treelang sample-complexity outputs/run_mlm --out figures/sample_complexity": (
        "--sizes 32 --epochs 1 --num-test 32 --arms scratch frozen"
    ),
    "hf-treelang sweep spec.json outputs/sweep": "--workers 0 --no-progress",  # spec.json: SWEEP_TINY
    "hf-treelang sweep --status outputs/sweep": "",
    "hf-treelang reproduce --preset quick outputs/reproduction": "--preset tiny --only data bp --no-progress",
    "hf-treelang reproduce --preset paper --plan outputs/plan": "--preset tiny",
}
# The README's SPEC (its json block) is written to spec.json with this base: the same grid, tiny runs.
SWEEP_TINY = {"depth": 2, "num_train": 32, "num_eval": 16, "num_test": 16, "hidden_size": 16, "intermediate_size": 16,
              "num_hidden_layers": 1, "max_steps": 2, "num_evaluations": 1, "num_checkpoints": 0,
              "use_dataset_builder": False, "report_to": "none", "disable_tqdm": True}
SET_UP = ("python -m pip install", "HF_HUB_OFFLINE=1")


def code_blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def readme_commands():
    commands = []
    for block in code_blocks("bash"):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith(SET_UP):
                commands.append(line)
    return commands


def test_set_up_is_the_two_commands_of_ci():
    set_up = [line for block in code_blocks("bash") for line in block.splitlines() if line.startswith(SET_UP)]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith(("python", "HF_"))]
    assert len(set_up) == 2
    assert [line.split("python -m pytest")[0] + "python -m pytest" for line in set_up[1:]] == [
        line.split("python -m pytest")[0] + "python -m pytest" for line in ci[1:]
    ]
    assert set_up[0] == ci[0]


def test_every_readme_command_has_a_tiny_variant():
    missing = [command for command in readme_commands() if command not in TINY]
    assert not missing, f"README commands without a tiny variant in tests/test_readme.py: {missing}"


def _run(command, cwd, env):
    """Run one README command as its shell would: ``accelerate launch`` in its own processes; the ``python`` scripts
    and ``hf-treelang`` in this interpreter, through their entry points, with their ``sys.argv`` and working
    directory (a fresh interpreter per command would import torch and transformers a dozen times). Returns (exit
    status, the end of what it printed)."""
    argv = [str(ROOT / a) if a.startswith("training/") else a for a in shlex.split(command)]
    if argv[:2] == ["accelerate", "launch"]:
        done = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", *argv[2:]], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=600)
        return done.returncode, done.stdout[-3000:] + done.stderr[-3000:]
    printed, threads, argv_before, cwd_before = io.StringIO(), torch.get_num_threads(), sys.argv, os.getcwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            if argv[0] == "hf-treelang":
                sys.argv = argv
                code = cli.main(argv[1:])
            else:
                assert argv[0] == "python", command
                sys.argv = argv[1:]
                try:
                    runpy.run_path(argv[1], run_name="__main__")
                    code = 0
                except SystemExit as stop:
                    code = stop.code
    finally:
        sys.argv = argv_before
        os.chdir(cwd_before)
        torch.set_num_threads(threads)
    return code, printed.getvalue()[-3000:]


def test_readme_commands_run_at_a_tiny_size(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    (spec,) = [json.loads(block) for block in code_blocks("json")]
    (tmp_path / "spec.json").write_text(json.dumps({**spec, "base": {**spec["base"], **SWEEP_TINY}}))
    for command in readme_commands():
        tiny = f"{command} {TINY[command]}".strip()
        if "--preset tiny" in tiny:
            tiny = re.sub(r"--preset (quick|paper) ", "", tiny)
        code, printed = _run(tiny, tmp_path, env)
        assert code == 0, f"{tiny}\n{printed}"
    outputs = tmp_path / "outputs"
    assert (outputs / "run_mlm" / "config.json").is_file() and (outputs / "run_root" / "config.json").is_file()
    assert (outputs / "run_mlm_bert" / "tokenizer.json").is_file()
    for name in ("attention", "probe", "dynamics", "compare", "generate"):
        assert list((tmp_path / "figures" / name).glob("*.png")), name
    assert (outputs / "reproduction" / "report.md").is_file()
    assert len((outputs / "sweep" / "results.jsonl").read_text().splitlines()) == 4  # the grid: 2 k_train x 2 seeds
    assert (outputs / "plan" / "plan.json").is_file()


def run_block(block: str, where: str) -> None:
    """Run a python block and check that every ``print(...)  # -> TEXT`` line prints exactly TEXT (the blocks have no
    loops: the n-th print call is the n-th print line)."""
    printed = []
    exec(compile(block, where, "exec"), {"print": lambda *args, sep=" ", **_: printed.append(sep.join(map(str, args)))})
    print_lines = [line for line in block.splitlines() if line.startswith("print(")]
    assert len(printed) == len(print_lines) > 0, "every block shows its result with print"
    for line, output in zip(print_lines, printed):
        if "  # -> " in line:
            assert output == line.split("  # -> ", 1)[1], line


def test_the_readme_is_short_and_its_code_lives_in_the_docs_pages():
    assert len(README.splitlines()) <= 200
    assert not code_blocks("python")  # the examples run from the docs pages (tests/test_docs.py)


def test_readme_citation_is_the_one_bibtex_entry():
    from hf_treelang.citation import BIBTEX

    assert README.count("@inproceedings") == 1
    assert f"```bibtex\n{BIBTEX.strip()}\n```" in README


def test_license_file_is_the_mit_license_pyproject_declares():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^license = \{ text = "MIT" \}$', pyproject, flags=re.M)
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in license_text and "WITHOUT WARRANTY OF ANY KIND" in license_text


def test_the_folders_the_readme_commands_write_are_git_ignored():
    ignored = {line.strip().strip("/") for line in (ROOT / ".gitignore").read_text().splitlines()}
    written = {command.split("--out ")[1].split("/")[0] for command in readme_commands() if "--out " in command}
    written |= {"outputs"}  # training and reproduce outputs
    assert written == {"figures", "outputs"}
    assert written <= ignored


def test_every_test_the_reliability_section_names_exists():
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = design.split("## Reliability", 1)[1].split("\n## ", 1)[0]
    named = []
    for row in section.splitlines():
        current = None
        for file, name in re.findall(r"`(tests/[\w/]+\.py)?::(\w+)`", row):
            current = file or current
            named.append((current, name))
    assert len(named) >= 10
    for file, name in named:
        assert file is not None, f"{name}: the row names no test file before it"
        assert f"def {name}(" in (ROOT / file).read_text(encoding="utf-8"), f"{file}::{name} does not exist"
