"""``hf-treelang compare RUN... --out DIR``: training runs of any architectures side by side against the exact oracle.

Each run folder (of ``training/run_{mlm,clm,root}.py``, any ``--model_type``) gives one row: its architecture, its
number of parameters (read from the weights' headers, nothing is loaded), its training speed, the path of the closest
BP_k along training and the climb times t_k (:meth:`hf_treelang.analysis.dynamics.DynamicsResult.climb_times`: the
first evaluation step from which the closest BP stays at level k or below), the final KL to the matched BP_{k_train},
the final accuracy next to BP's on every k_test, the final probability on non-symbol ids, and a causal run's excess
loss. Runs that differ only in their seed (the same task, architecture, config and data) form one group, reported
as mean ± sample standard deviation over the seeds, with every seed's path.

Outputs in DIR: ``compare.md`` (the table), ``compare.json`` (every row and group), ``compare.csv`` (one line per
run) and ``compare.png`` (the KL to the matched BP along training, one panel per task, one colour per architecture).
"""

from __future__ import annotations

import csv
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hf_treelang.plotting import pyplot, save_figure
from hf_treelang.train.folders import check_run_complete

from .dynamics import DynamicsResult, learning_dynamics
from .io import check_output_dir, cli_error, prepare_output, write_json

TASK_TITLES = {"mlm": "masked leaf", "clm": "next leaf", "root": "root"}


@dataclass
class RunRow:
    """One run of the comparison (see the module docstring)."""

    path: str
    task: str
    architecture: str
    seed: int
    group: str
    parameters: int
    steps: int
    steps_per_second: float | None
    k_train: int
    path_of_closest: list
    climb_times: dict
    final_kl_matched: float | None
    accuracy: dict
    bp_accuracy: dict
    mass_on_special_tokens: float | None
    excess_loss: float | None
    dynamics: DynamicsResult = field(repr=False)


def count_parameters(folder: Path) -> int:
    """The parameters of a run's ``model.safetensors``, from the file's header (no tensor is read)."""
    path = folder / "model.safetensors"
    if not path.is_file():
        raise ValueError(f"run {str(folder)!r} has no model.safetensors: compare reads runs written by the training "
                         f"scripts")
    with open(path, "rb") as handle:
        size = struct.unpack("<Q", handle.read(8))[0]
        header = json.loads(handle.read(size))
    return int(sum(int(np.prod(entry["shape"])) for name, entry in header.items() if name != "__metadata__"))


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{str(path)!r} is not readable JSON ({error})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{str(path)!r} holds no JSON object")
    return value


def read_run(run) -> RunRow:
    """The comparison row of one finished run folder."""
    folder = Path(run)
    if not folder.is_dir():
        raise ValueError(f"run {str(folder)!r} is not a folder: compare reads the output folders of the training "
                         f"scripts")
    check_run_complete(folder)
    run_config = _read_json(folder / "run_config.json")
    metrics = _read_json(folder / "metrics.json")
    task = run_config.get("task")
    data, model, training = (run_config.get(key) or {} for key in ("data_args", "model_args", "training_args"))
    architecture = model.get("model_type") or "treelang"
    if architecture == "treelang":
        layers = model.get("num_hidden_layers") or data.get("depth")
        shape = f"d={model.get('hidden_size')},layers={layers},d'={model.get('intermediate_size')}"
    else:
        shape = model.get("config_overrides") or ""
    seed = int(training.get("seed", 0))
    data_key = json.dumps({k: v for k, v in sorted(data.items())}, sort_keys=True)
    group = f"{task}|{architecture}|{shape}|{data_key}|steps={metrics.get('global_step')}"
    dynamics = learning_dynamics(folder)
    final = metrics.get("final") or {}
    k_train = int(data.get("k_train", 0))
    runtime = metrics.get("train_runtime_s")
    steps = int(metrics.get("global_step", 0))
    levels = sorted(dynamics.accuracy)
    return RunRow(
        path=str(folder), task=str(task), architecture=architecture, seed=seed, group=group,
        parameters=count_parameters(folder), steps=steps,
        steps_per_second=steps / runtime if runtime else None, k_train=k_train,
        path_of_closest=dynamics.alignment_sequence, climb_times=dynamics.climb_times(),
        final_kl_matched=final.get(f"eval_kl_bp_k{k_train}"),
        accuracy={k: final.get(f"eval_acc_ktest{k}") for k in levels},
        bp_accuracy={k: final.get(f"eval_bp_acc_ktest{k}") for k in levels},
        mass_on_special_tokens=final.get("eval_mass_on_special_tokens"),
        excess_loss=final.get("eval_excess_loss") if task == "clm" else None,
        dynamics=dynamics,
    )


def _spread(values: list) -> dict:
    present = np.array([v for v in values if v is not None], dtype=float)
    return {"mean": float(present.mean()) if present.size else None,
            "std": float(present.std(ddof=1)) if present.size > 1 else None, "runs": int(present.size)}


def _shown(spread: dict, digits: int = 3) -> str:
    if spread["mean"] is None:
        return "–"
    text = f"{spread['mean']:.{digits}f}"
    return text if spread["std"] is None else f"{text} ± {spread['std']:.{digits}f}"


def group_rows(rows: list) -> list:
    """The rows grouped by everything but the seed: one dict per group, in the order of first appearance."""
    groups: dict = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    out = []
    for members in groups.values():
        first = members[0]
        levels = sorted(first.accuracy)
        out.append({
            "task": first.task, "architecture": first.architecture, "seeds": [row.seed for row in members],
            "runs": [row.path for row in members], "parameters": first.parameters, "steps": first.steps,
            "steps_per_second": _spread([row.steps_per_second for row in members]),
            "paths_of_closest": [row.path_of_closest for row in members],
            "climb_times": {k: _spread([row.climb_times.get(k) for row in members]) for k in sorted(first.climb_times)},
            "final_kl_matched": _spread([row.final_kl_matched for row in members]),
            "accuracy": {k: _spread([row.accuracy.get(k) for row in members]) for k in levels},
            "bp_accuracy": {k: _spread([row.bp_accuracy.get(k) for row in members]) for k in levels},
            "mass_on_special_tokens": _spread([row.mass_on_special_tokens for row in members]),
            "excess_loss": _spread([row.excess_loss for row in members]),
            "k_train": first.k_train,
        })
    return out


def markdown_table(groups: list) -> str:
    """The comparison as one markdown table (a row per group; ± is the standard deviation over the seeds)."""
    header = ("| task | architecture | seeds | parameters | steps | steps/s | closest BP_k along training | "
              "t_k (k = ℓ … 0) | "
              "final KL to BP_{k_train} | accuracy k_test=0 (model / BP) | accuracy per k_test (model) | "
              "off-symbol mass | excess loss |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for group in groups:
        paths = "; ".join(" → ".join(map(str, path)) for path in group["paths_of_closest"])
        times = ", ".join("–" if t["mean"] is None else f"{t['mean']:.0f}"
                          for _, t in sorted(group["climb_times"].items(), reverse=True))
        levels = sorted(group["accuracy"])
        first = levels[0] if levels else None
        accuracy0 = "–" if first is None else \
            f"{_shown(group['accuracy'][first])} / {_shown(group['bp_accuracy'][first])}"
        per_level = " ".join(_shown(group["accuracy"][k], 2).split(" ± ")[0] for k in levels)
        lines.append(
            f"| {TASK_TITLES.get(group['task'], group['task'])} | {group['architecture']} | {len(group['seeds'])} | "
            f"{group['parameters']:,} | {group['steps']:,} | {_shown(group['steps_per_second'], 1)} | {paths} | "
            f"{times} | "
            f"{_shown(group['final_kl_matched'])} | {accuracy0} | {per_level} | "
            f"{_shown(group['mass_on_special_tokens'])} | {_shown(group['excess_loss'])} |")
    return "\n".join(lines) + "\n"


def plot_comparison(rows: list, title: str = ""):
    """Per task (columns): the KL to the matched BP along training (top) and the closest BP_k along training
    (bottom: the climb down the hierarchy), one colour per architecture, a line per seed; log step axis from step 1."""
    tasks = [task for task in TASK_TITLES if any(row.task == task for row in rows)]
    architectures = sorted({row.architecture for row in rows})
    colours = {name: f"C{i % 10}" for i, name in enumerate(architectures)}
    plt = pyplot()
    figure, axes = plt.subplots(2, len(tasks), figsize=(5.2 * len(tasks), 7.0), squeeze=False, sharex="col")
    for column, task in enumerate(tasks):
        top, bottom = axes[0][column], axes[1][column]
        labelled = set()
        members = [r for r in rows if r.task == task]
        for offset, row in enumerate(members):
            curve = row.dynamics.kl.get(row.k_train)
            if curve is None:
                continue
            shown = row.dynamics.steps > 0  # a log axis: the evaluation before training is the curves' start
            steps = row.dynamics.steps[shown]
            label = None if row.architecture in labelled else row.architecture
            labelled.add(row.architecture)
            top.plot(steps, np.asarray(curve)[shown], color=colours[row.architecture], label=label, lw=1.4,
                     alpha=0.85)
            closest = np.asarray(row.dynamics.closest_bp, dtype=float)[shown]
            jitter = 0.08 * (offset - (len(members) - 1) / 2) / max(len(members), 1)  # lines side by side
            bottom.step(steps, closest + jitter, where="post", color=colours[row.architecture], lw=1.4, alpha=0.85)
        top.set_xscale("log")
        top.set_yscale("log")
        top.set_ylabel("KL(BP_k_train ‖ model), nats")
        top.set_title(f"{TASK_TITLES[task]} prediction")
        top.legend(fontsize=8)
        levels = sorted({k for row in members for k in row.dynamics.kl})
        bottom.set_yticks(levels)
        bottom.set_ylim(max(levels, default=1) + 0.5, min(levels, default=0) - 0.5)  # the climb: BP_ℓ up to BP_0
        bottom.set_ylabel("closest BP_k")
        bottom.set_xlabel("step")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure


def compare(runs: list, out_dir, *, title: str = "") -> dict:
    """Read every run, then write ``compare.{md,json,csv,png}`` into ``out_dir``; returns the paths and groups."""
    if not runs:
        raise ValueError("compare needs at least one run folder")
    check_output_dir(out_dir)
    rows = [read_run(run) for run in runs]
    groups = group_rows(rows)
    figure = plot_comparison(rows, title)
    out = prepare_output(out_dir)
    (out / "compare.md").write_text(markdown_table(groups))
    payload = {"groups": groups, "runs": [{key: value for key, value in vars(row).items() if key != "dynamics"}
                                          for row in rows]}
    write_json(out / "compare.json", payload)
    with open(out / "compare.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        levels = sorted({k for row in rows for k in row.accuracy})
        writer.writerow(["run", "task", "architecture", "seed", "parameters", "steps", "steps_per_second",
                         "path_of_closest", "final_kl_matched", "mass_on_special_tokens", "excess_loss",
                         *[f"accuracy_ktest{k}" for k in levels], *[f"bp_accuracy_ktest{k}" for k in levels]])
        for row in rows:
            writer.writerow([row.path, row.task, row.architecture, row.seed, row.parameters, row.steps,
                             row.steps_per_second, "-".join(map(str, row.path_of_closest)), row.final_kl_matched,
                             row.mass_on_special_tokens, row.excess_loss,
                             *[row.accuracy.get(k) for k in levels], *[row.bp_accuracy.get(k) for k in levels]])
    save_figure(figure, out / "compare.png")
    return {"groups": groups, "files": [out / name for name in ("compare.md", "compare.json", "compare.csv",
                                                                "compare.png")]}


def run(args) -> int:
    """``hf-treelang compare`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    try:
        result = compare(list(args.runs), args.out, title=args.title)
    except (ValueError, TypeError) as error:
        return cli_error("compare", error)
    for group in result["groups"]:
        paths = "; ".join(" → ".join(map(str, path)) for path in group["paths_of_closest"])
        print(f"{group['task']:>4} {group['architecture']:<12} {len(group['seeds'])} seed(s) · "
              f"{group['parameters']:,} parameters · closest BP_k {paths} · final KL to BP_{group['k_train']} "
              f"{_shown(group['final_kl_matched'])}")
    print(f"wrote {', '.join(str(path) for path in result['files'])}")
    return 0


__all__ = ["RunRow", "compare", "count_parameters", "group_rows", "markdown_table", "read_run"]
