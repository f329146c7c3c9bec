"""The trainings of a reproduction as data, and their execution through the sweep runner.

* :func:`planned_runs` — every training run of a preset, with the paper figures it feeds, built with the same
  :class:`~hf_treelang.reproduce.steps.Context` methods the steps train with (``runs/<name>`` folders);
* :func:`write_plan` — ``hf-treelang reproduce --preset paper --plan OUT``: ``OUT/plan.json`` (one object per run:
  task, k_train, P, epochs, n_L, grammar seed, seed, clipping, figures by the paper's numbers, optimizer steps) and
  the total steps with the estimated time on this machine and on one GPU, from steps/s measured on the runs' own
  models (a plan computed once on a machine comes from :mod:`~hf_treelang.reproduce.plan_cache` afterwards);
* :class:`EngineRunner` — ``Context.run`` of a reproduction: every run goes through the sweep runner's
  :func:`~hf_treelang.sweep.runner.execute_runs` into ``OUT/runs/<name>`` (identity-checked: finished runs of the
  same identity are reused, changed ones trained again, interrupted ones resumed), and is recorded for the step
  markers;
* :func:`marker_valid` — whether a step's ``.done`` marker still describes ``OUT``: the same preset, every run it
  trained still of the identity it had, no finished run trained again since.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

from hf_treelang.analysis import sample_complexity
from hf_treelang.jsonio import read_json_object
from hf_treelang.sweep.estimate import estimate, estimate_lines, format_duration, optimizer_steps
from hf_treelang.sweep.runner import RUNS_DIR, SWEEP_FILE, execute_runs, sweep_run
from hf_treelang.train.folders import finished_run
from hf_treelang.train.run import resolve

from .plan_cache import PLAN_FILE, store_plan, write_plan_file
from .presets import PRESETS, PUBLIC_PRESETS, check_figures
from .steps import SAMPLE_COMPLEXITY_DIR, Context, figure_sweep_runs, with_grammar_file

# the figures fed by the main runs; the sweeps' figures are set where their runs are listed below
ROOT_FIGURES = ("1c", "2b", "11")  # KL dynamics, accuracy per k_test, the classifier attention row
MLM_FIGURES = ("1b", "1d", "1e", "3a", "3b", "4", "10", "12")
MLM_K_FIGURES = ("4", "12")


def _json(value):
    return json.loads(json.dumps(value, default=str))


def planned_runs(ctx) -> list:
    """Every training of ``ctx.preset``, each folder once, in the steps' order: ``{"name", "task", "arguments",
    "figures"}`` (``name``: the folder under ``OUT/runs``; ``arguments``: the training scripts' names)."""
    p = ctx.preset
    entries: dict = {}

    def add(name: str, task: str, arguments: dict, figures) -> None:
        entry = entries.setdefault(name, {"name": name, "task": task, "arguments": arguments, "figures": []})
        entry["figures"].extend(f for f in check_figures(figures) if f not in entry["figures"])

    def add_run(run, figures) -> None:
        add(run.name, run.task, run.arguments, figures)

    add_run(ctx.spec("root", "root"), ROOT_FIGURES)
    add_run(ctx.spec("mlm", "mlm"), MLM_FIGURES)
    for k in p.attention_filter_levels:
        add_run(ctx.spec("mlm", f"mlm_k{k}", k), MLM_K_FIGURES)
    for arm, size, task, arguments in sample_complexity.sample_complexity_arguments(
            ctx.run_dir("mlm"), depth=p.depth, num_symbols=p.num_symbols, sigma=p.sigma, grammar_seed=p.grammar_seed,
            filter_level=p.filter_level, model_kwargs=p.model, sizes=p.sample_sizes, epochs=p.sample_epochs,
            max_steps=p.sample_max_steps, num_test=p.num_test, batch_size=p.batch_size,
            learning_rate=p.learning_rate, num_evaluations=1, use_dataset_builder=p.use_dataset_builder,
            classifier_hidden_size=p.finetune_classifier_hidden_size, grammar_file=p.grammar_file):
        add(f"{SAMPLE_COMPLEXITY_DIR}/{sample_complexity.run_name(arm, size)}", task, arguments,
            (sample_complexity.FIGURE_ID,))
    for run, figures in figure_sweep_runs(ctx):
        add_run(run, figures)
    return list(entries.values())


def resolve_for_plan(entry: dict, out: Path):
    """:func:`~hf_treelang.train.run.resolve` of a planned run, also when the MLM checkpoint a fine-tuning
    run starts from is not trained yet (then its sizes are read as a root run's, with the frozen encoder kept)."""
    folder = Path(out) / RUNS_DIR / entry["name"]
    arguments = entry["arguments"]
    start = arguments.get("model_name_or_path")
    if entry["task"] != "finetune" or (start is not None and (Path(start) / "config.json").is_file()):
        return resolve(entry["task"], arguments, folder)
    arguments = {k: v for k, v in arguments.items() if k not in ("model_name_or_path", "classifier_hidden_size")}
    return dataclasses.replace(resolve("root", arguments, folder), task="finetune")


def plan_row(entry: dict, resolved) -> dict:
    """One run of ``plan.json``."""
    d, m, t = resolved.data_args, resolved.model_args, resolved.training_args
    return {
        "name": entry["name"],
        "task": entry["task"],
        "figures": list(entry["figures"]),
        "k_train": d.k_train,
        "num_train": d.num_train,
        "num_train_epochs": t.num_train_epochs,
        "max_steps": t.max_steps,
        "num_hidden_layers": m.model_kwargs(d.depth)["num_hidden_layers"],
        "hidden_size": m.hidden_size,
        "intermediate_size": m.intermediate_size,
        "depth": d.depth,
        "num_symbols": d.num_symbols,
        "grammar_seed": d.grammar_seed,
        "seed": t.seed,
        "max_grad_norm": t.max_grad_norm,
        "learning_rate": t.learning_rate,
        "batch_size": t.per_device_train_batch_size,
        "freeze_encoder": bool(m.freeze_encoder) if entry["task"] == "finetune" else None,
        "optimizer_steps": optimizer_steps(t, d.num_train),
        "arguments": entry["arguments"],
    }


def lanes(preset) -> tuple:
    """(runs side by side, torch threads per run) of a reproduction of ``preset`` (:attr:`Preset.workers`)."""
    return (preset.workers, 1) if preset.workers else (1, preset.cpu_threads)


def write_plan(out, preset: str, *, measure_steps: int = 4, log: Callable | None = None,
               grammar_file: str | None = None) -> dict:
    """Write ``OUT/plan.json`` for ``preset`` (on the grammar in ``grammar_file`` when given:
    :func:`~hf_treelang.reproduce.steps.with_grammar_file`; nothing is trained) and return it; ``log`` gets the
    summary lines."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {PUBLIC_PRESETS}, got {preset!r}")
    spec = PRESETS[preset] if grammar_file is None else with_grammar_file(PRESETS[preset], grammar_file)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--plan OUT {str(out)!r} exists and is not a folder")
    log = log or (lambda line: None)
    planned = planned_runs(Context(out, spec, progress=False))
    resolved = [resolve_for_plan(run, out) for run in planned]
    rows = [plan_row(run, r) for run, r in zip(planned, resolved)]
    workers, threads = lanes(spec)
    result = estimate(resolved, workers=workers, threads=threads, measure_steps=measure_steps)
    figures = sorted({f for row in rows for f in row["figures"]})
    stopping = sum(run.training_args.early_stopping_patience is not None for run in resolved)
    plan = {
        "preset": preset,
        "description": spec.description,
        "runs": rows,
        "figures": figures,
        **result.to_dict(),
        "note": "optimizer steps only: evaluations, data and BP references are not counted; reproduce trains the runs "
                + (f"{workers} at a time" if spec.workers else "one after the other")
                + (f"; {stopping} runs stop by the validation rule, their steps counted at their cap" if stopping
                   else ""),
    }
    lines = [f"preset {preset}: {len(rows)} training runs for figures {', '.join(figures)}", *estimate_lines(result)]
    if stopping:
        lines.append(f"  {stopping} of the runs stop once their validation accuracy stops improving: their steps are "
                     "counted at their cap, so the time is an upper bound")
    if grammar_file is None:  # the cache holds the presets' own plans
        store_plan(preset, out, _json(plan), lines)
    return write_plan_file(out, _json(plan), lines, log)


def remaining_lines(ctx, *, measure_steps: int = 4) -> list:
    """The lines ``reproduce`` prints before it starts: how many of the preset's runs are left to train in
    ``ctx.out`` (a finished run of the same identity is reused) and the time their optimizer steps take on this
    machine, one run after the other, from steps/s measured on their models; the analyses come on top."""
    planned = planned_runs(ctx)
    resolved = [resolve_for_plan(entry, ctx.out) for entry in planned]
    left = [run for run in resolved if finished_run(run.output_dir, run.identity) is None]
    if not left:
        return [f"every one of the {len(planned)} training runs is finished: only the analyses are left"]
    import torch

    devices = ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)
    workers, threads = lanes(ctx.preset)
    result = estimate(left, workers=workers, threads=threads, devices=devices, measure_steps=measure_steps)
    device = "cuda" if "cuda" in result.seconds else "cpu"
    where = "one GPU" if device == "cuda" else f"this CPU ({result.threads} thread(s))"
    cap = " at most" if any(run.training_args.early_stopping_patience is not None for run in left) else ""
    lines = [f"{len(left)} of {len(planned)} training runs to train: {result.total_steps:,} optimizer steps,{cap} "
             f"about {format_duration(result.seconds[device])} on {where}"
             + (f", {workers} runs at a time" if workers > 1 else "") + ", evaluations and analyses not counted"]
    if device == "cpu" and result.cpu_busy:
        lines.append(result.busy_note())
    return lines


# ---------------------------------------------------------------- execution


def train_ahead(ctx, workers: int, log: Callable | None = None, on_trained: Callable | None = None) -> int:
    """Train every run of ``ctx.preset`` before the steps, ``workers`` side by side on one thread each (the sweep
    runner), the longest first; the steps then reuse them (same identity, same run). Fine-tuning runs start from
    the main MLM, so they follow it. ``on_trained`` is called with each run's name as soon as it is trained.
    Returns how many runs were trained."""
    planned = sorted(planned_runs(ctx), key=lambda entry: entry["name"] != "mlm")  # the longest run first
    trained = 0
    for batch in ([e for e in planned if e["task"] != "finetune"], [e for e in planned if e["task"] == "finetune"]):
        runs = [sweep_run(entry["task"], entry["arguments"], ctx.out, entry["name"]) for entry in batch]
        if not runs:
            continue
        result = execute_runs(runs, ctx.out, workers=workers, threads=1, progress=ctx.progress, estimate=False,
                              log=log, on_trained=on_trained)
        if result.failed:
            name, error = next(iter(result.failed.items()))
            raise RuntimeError(f"training run {name!r} failed: {error}")
        trained += len(result.trained)
    return trained




class EngineRunner:
    """``Context.run`` of a reproduction: trains a :class:`~hf_treelang.train.run.Run` through the sweep runner.

    The run's folder must lie under ``OUT/runs``; it is trained in this process (``workers=0``) and recorded in
    ``OUT/sweep.json`` and ``OUT/results.jsonl``. :meth:`begin` / :meth:`end` bracket a step: ``end`` returns the
    runs it used (name, task, arguments, identity) and how many it trained.
    """

    def __init__(self, out, log: Callable | None = None):
        self.out = Path(out)
        self.log = log
        self.used: list = []
        self.trained = 0

    def begin(self) -> None:
        self.used, self.trained = [], 0

    def end(self) -> tuple:
        return list(self.used), self.trained

    def __call__(self, run) -> dict:
        result = execute_runs([run], self.out, workers=0, progress=False, estimate=False, log=self.log)
        if result.failed:
            raise RuntimeError(f"training run {run.name!r} failed: {result.failed[run.name]}")
        self.used.append({"name": run.name, "task": run.task, "arguments": run.arguments, "identity": run.identity})
        self.trained += len(result.trained)
        return finished_run(run.output_dir)


def finished_runs(out) -> dict:
    """``{name: identity}`` of every finished run of the reproduction's sweep."""
    out = Path(out)
    recorded = read_json_object(out / SWEEP_FILE) or {}
    finished = {}
    for entry in recorded.get("runs", []):
        done = finished_run(out / RUNS_DIR / entry["name"])
        if done is not None and done.get("identity"):
            finished[entry["name"]] = done["identity"]
    return finished


def marker_record(preset, used: list, out) -> dict:
    """What a step's marker records beyond its summary (see :func:`marker_valid`)."""
    return {"preset": _json(dataclasses.asdict(preset)), "runs": used, "finished": finished_runs(out)}


def marker_valid(marker: dict | None, preset, out) -> bool:
    """Whether a step's marker still holds: same preset; each run the step used resolves to the identity it had
    (its arguments, the checkpoint it starts from and the code's defaults unchanged); every run finished when the
    marker was written is finished with the same identity (none trained again since)."""
    if not marker or marker.get("preset") != _json(dataclasses.asdict(preset)):
        return False
    out = Path(out)
    for run in marker.get("runs", []):
        try:
            resolved = resolve(run["task"], run["arguments"], out / RUNS_DIR / run["name"])
        except (ValueError, TypeError, KeyError):
            return False
        if resolved.identity != run["identity"]:
            return False
    for name, identity in marker.get("finished", {}).items():
        if finished_run(out / RUNS_DIR / name, identity) is None:
            return False
    return True


__all__ = ["EngineRunner", "PLAN_FILE", "marker_record", "marker_valid", "planned_runs", "remaining_lines",
           "train_ahead", "write_plan"]
