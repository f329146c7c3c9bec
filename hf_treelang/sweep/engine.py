"""The sweep engine: many training runs, one folder each, on worker processes or SLURM job arrays, never stale.

A sweep is a list of :class:`PlannedRun` (a name, a task and run arguments) — from a SPEC's grid
(:func:`spec_runs`), a reproduction's preset or the sample-complexity arms — trained into ``OUT``:

* ``OUT/runs/<name>/`` — the run's folder (:func:`hf_treelang.train.runs.train_run`: ``run_identity.json``, then
  the training loop's run folder — the model, its metrics and, written last, ``run_complete.json``);
* ``OUT/sweep.json`` — the SPEC and every run's identity (``hf-treelang sweep --status OUT`` reads it);
* ``OUT/results.jsonl`` — one record per finished run (its arguments, identity and final metrics), appended as runs
  finish; records of an identity that is no longer planned are dropped when a sweep starts;
* ``OUT/logs/<job>.log`` — what a worker process printed.

Before any job starts every run is resolved and validated (:func:`hf_treelang.train.runs.resolve_arguments`) and its
identity computed: a run already finished with the same identity is skipped, an interrupted one resumes from its last
checkpoint, one whose identity changed (its arguments, the checkpoint it starts from, the data-format version) is
trained again. Runs that differ only in ``seed`` / ``k_train`` are packed into one ensemble job when the training
arguments support ensembles (:func:`ensemble_supported`); otherwise each run is its own job.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hf_treelang.train import runs as train_runs

from .spec import SweepSpec, load_spec, point_name

RUNS_DIR = "runs"
SWEEP_FILE = "sweep.json"
RESULTS_FILE = "results.jsonl"
LOGS_DIR = "logs"
ENSEMBLES_DIR = "ensembles"  # where a packed job trains its ensemble before its members become run folders
EXECUTORS = ("local", "slurm")
ENSEMBLE_AXES = ("seed", "k_train")  # the run arguments an ensemble job varies inside one batched model
ENSEMBLE_FIELDS = ("ensemble_seeds", "ensemble_k_train")
CLUSTER_EXTRA = "pip install 'hf-treelang[cluster]'"


@dataclass(frozen=True)
class PlannedRun:
    """One training run of a sweep.

    Attributes:
        name: its folder under ``OUT/runs`` (letters, digits and ``._=,+-``; ``/`` for a nested folder).
        task: ``"root"``, ``"mlm"`` or ``"finetune"``.
        arguments: run arguments as in the training scripts' JSON file (no ``output_dir``).
        point: the grid values that distinguish it (for the figure and the records).
        figures: the paper figures it feeds (``"1f"``, ``"2b"``, ...).
    """

    name: str
    task: str
    arguments: dict
    point: dict = field(default_factory=dict)
    figures: tuple = ()


@dataclass
class SweepRun:
    """A planned run, resolved: its arguments validated, its identity, and what its folder holds (``state``:
    ``"done"``, ``"resume"``, ``"stale"`` or ``"new"``; see :class:`hf_treelang.train.runs.FolderState`)."""

    planned: PlannedRun
    resolved: train_runs.ResolvedRun
    state: train_runs.FolderState

    @property
    def name(self) -> str:
        return self.planned.name

    @property
    def identity(self) -> str:
        return self.resolved.identity

    @property
    def folder(self) -> Path:
        return self.resolved.output_dir


@dataclass
class Job:
    """Runs trained by one worker: one run, or an ensemble of runs differing only in seed / k_train."""

    name: str
    runs: list

    @property
    def ensemble(self) -> bool:
        return len(self.runs) > 1


@dataclass
class SweepResult:
    """What :func:`execute_runs` did.

    Attributes:
        out: the sweep folder.
        runs: every :class:`SweepRun`, in plan order.
        records: ``{name: record}`` of every finished run (as in ``results.jsonl``).
        failed: ``{name: error}`` of the runs that failed in this call.
        trained: names of the runs trained (or resumed) in this call; ``skipped``: those finished before.
    """

    out: Path
    runs: list
    records: dict
    failed: dict
    trained: list
    skipped: list


# ---------------------------------------------------------------- planning


def spec_runs(spec: SweepSpec) -> list:
    """The runs of a SPEC's grid, in order; raises naming an unknown argument of ``base`` or an unknown axis."""
    train_runs.check_run_arguments(spec.base, where="SPEC base")
    for axis, values in spec.grid.items():
        for value in values:
            train_runs.check_run_arguments({axis: value}, where=f"SPEC grid axis `{axis}`")
    planned, names = [], set()
    for point in spec.points():
        name = point_name(point)
        if name in names:
            raise ValueError(f"SPEC grid points {point} and another share the folder name {name!r}")
        names.add(name)
        planned.append(PlannedRun(name=name, task=spec.task, arguments={**spec.base, **point}, point=point))
    return planned


def _check_name(name: str) -> None:
    parts = name.split("/") if isinstance(name, str) else [""]
    if any(not part or part in (".", "..") or any(not (c.isalnum() or c in "._=,+-") for c in part)
           for part in parts):
        raise ValueError(f"run name {name!r} must be a relative folder path of letters, digits and ._=,+- "
                         "(parts separated by /)")


def plan_runs(planned: list, out) -> list:
    """Resolve and validate every run (nothing is written); an error names the run and the argument."""
    out = Path(out)
    seen = set()
    resolved = []
    for run in planned:
        _check_name(run.name)
        if run.name in seen:
            raise ValueError(f"two runs are named {run.name!r}")
        seen.add(run.name)
        try:
            result = train_runs.resolve_arguments(run.task, run.arguments, out / RUNS_DIR / run.name)
            state = train_runs.folder_state(result.output_dir, result.identity)
        except (ValueError, TypeError) as error:
            raise type(error)(f"run {run.name!r}: {error}") from None
        if state.status == "running":
            raise ValueError(f"run {run.name!r} is being trained by process {state.record.get('pid')} on "
                             f"{state.record.get('host')}; wait for it or stop it")
        resolved.append(SweepRun(run, result, state))
    return resolved


def ensemble_supported() -> bool:
    """Whether the training arguments can train several seeds / k_train as one batched model (``--ensemble_seeds``
    and ``--ensemble_k_train``)."""
    import dataclasses

    from hf_treelang.train.arguments import DataArguments, ModelArguments, TreeLangTrainingArguments

    names = {f.name for cls in (DataArguments, ModelArguments, TreeLangTrainingArguments) for f in dataclasses.fields(cls)}
    return set(ENSEMBLE_FIELDS) <= names


def _ensemble_key(run: SweepRun) -> str:
    config = json.loads(json.dumps(run.resolved.config))
    config["data_args"].pop("k_train")
    config["training_args"].pop("seed")
    return json.dumps(config, sort_keys=True)


def pack_jobs(runs: list, ensembles: bool) -> list:
    """Group the runs into jobs.

    With ``ensembles``, fresh root / mlm runs (state ``"new"`` / ``"stale"``) whose resolved configurations differ
    only in ``seed`` and ``k_train`` form one job when they are the full product seeds × k_train (what an ensemble
    trains), else one job per k_train; a run resuming from a checkpoint, and a fine-tuning run, is its own job.
    Without, one job per run.
    """
    if not ensembles:
        return [Job(run.name, [run]) for run in runs]
    jobs, groups = [], {}
    for run in runs:
        if run.state.status == "resume" or run.planned.task not in ("root", "mlm"):
            jobs.append(Job(run.name, [run]))  # resumed runs, and fine-tuning (no ensembles), train alone
        else:
            groups.setdefault(_ensemble_key(run), []).append(run)
    for group in groups.values():
        seeds = sorted({r.resolved.training_args.seed for r in group})
        levels = sorted({r.resolved.data_args.k_train for r in group})
        if len(group) == len(seeds) * len(levels):
            parts = [group]
        else:
            parts = [[r for r in group if r.resolved.data_args.k_train == k] for k in levels]
        for part in parts:
            name = part[0].name if len(part) == 1 else f"ensemble-{part[0].name}-x{len(part)}"
            jobs.append(Job(name, part))
    order = {run.name: i for i, run in enumerate(runs)}
    return sorted(jobs, key=lambda job: min(order[r.name] for r in job.runs))


def job_payload(job: Job, threads: int | None, log_file: Path | None, out: Path) -> dict:
    """What a worker needs to train ``job``: plain data (picklable), re-resolved in the worker; an ensemble trains in
    ``OUT/ensembles/<job name>``."""
    runs = []
    for run in job.runs:
        arguments = dict(run.planned.arguments)
        if threads and "cpu_threads" not in arguments:
            arguments["cpu_threads"] = int(threads)  # not part of the identity
        runs.append({"name": run.name, "task": run.planned.task, "arguments": arguments,
                     "output_dir": str(run.folder), "identity": run.identity})
    return {"name": job.name, "runs": runs, "log_file": None if log_file is None else str(log_file),
            "work_dir": str(Path(out) / ENSEMBLES_DIR / job.name)}


# ---------------------------------------------------------------- a job, in a worker


def _failed(run: dict, error: BaseException) -> dict:
    return {"name": run["name"], "status": "failed", "error": f"{type(error).__name__}: {error}",
            "traceback": traceback.format_exc(limit=20)}


def _train_single(run: dict) -> dict:
    summary = train_runs.train_run(run["task"], run["arguments"], run["output_dir"])
    if summary["identity"] != run["identity"]:
        raise ValueError(f"run {run['name']!r} changed between planning and training (identity "
                         f"{run['identity'][:12]} -> {summary['identity'][:12]}): was its starting checkpoint "
                         "rewritten meanwhile? Run the sweep again.")
    return {"name": run["name"], "status": "done", "summary": summary}


def _train_ensemble(payload: dict) -> list:
    """One ensemble (``--ensemble_seeds`` x ``--ensemble_k_train``) for the runs of ``payload``; each member folder
    becomes its run's folder. Runs the ensemble refuses (its own checks, before any training) are trained one by
    one instead; an interrupted ensemble starts over (its members are not resumed)."""
    import shutil

    from hf_treelang.train import loop
    from hf_treelang.train.ensemble import MEMBERS_DIR, member_name

    runs = payload["runs"]
    members = [train_runs.resolve_arguments(r["task"], r["arguments"], r["output_dir"]) for r in runs]
    seeds = sorted({m.training_args.seed for m in members})
    levels = sorted({m.data_args.k_train for m in members})
    work = Path(payload["work_dir"])
    if work.exists():
        shutil.rmtree(work)
    arguments = {**runs[0]["arguments"], "seed": seeds[0], "k_train": levels[0], "ensemble_seeds": seeds,
                 "ensemble_k_train": levels}
    try:
        combined = train_runs.resolve_arguments(runs[0]["task"], arguments, work)
    except (ValueError, TypeError):
        return [_train_or_fail(run) for run in runs]
    records = [train_runs.mark_running(m, r["arguments"], trained_in=str(work)) for m, r in zip(members, runs)]
    try:
        loop.train(combined.task, combined.data_args, combined.model_args, combined.training_args)
    except ValueError:
        if (work / MEMBERS_DIR).exists():
            raise
        shutil.rmtree(work, ignore_errors=True)
        return [_train_or_fail(run) for run in runs]  # refused by the ensemble's checks: one run at a time
    results = []
    for run, member, record in zip(runs, members, records):
        folder = work / MEMBERS_DIR / member_name(member.training_args.seed, member.data_args.k_train)
        try:
            results.append({"name": run["name"], "status": "done",
                            "summary": train_runs.adopt_run(member, folder, record)})
        except Exception as error:  # noqa: BLE001 - reported per run
            results.append(_failed(run, error))
    shutil.rmtree(work, ignore_errors=True)
    return results


def _train_or_fail(run: dict) -> dict:
    try:
        return _train_single(run)
    except Exception as error:  # noqa: BLE001 - reported per run, the other jobs go on
        return _failed(run, error)


def execute_job(payload: dict) -> list:
    """Train the runs of one job (in a worker process, a SLURM task or in-process); never raises for a run's error.

    Returns one record per run: ``{"name", "status": "done", "summary"}`` or ``{"name", "status": "failed",
    "error", "traceback"}``.
    """
    import hf_treelang  # noqa: F401  (registers the TreeLang Auto classes and dataset builder in a fresh process)

    log_file = payload.get("log_file")
    with contextlib.ExitStack() as stack:
        if log_file:
            Path(log_file).parent.mkdir(parents=True, exist_ok=True)
            handle = stack.enter_context(open(log_file, "a", buffering=1))
            stack.enter_context(contextlib.redirect_stdout(handle))
            stack.enter_context(contextlib.redirect_stderr(handle))
        if len(payload["runs"]) > 1:
            try:
                return _train_ensemble(payload)
            except Exception as error:  # noqa: BLE001 - the whole ensemble failed
                return [_failed(run, error) for run in payload["runs"]]
        return [_train_or_fail(run) for run in payload["runs"]]


# ---------------------------------------------------------------- the sweep folder


def _read_jsonl(path: Path) -> list:
    records = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by a crash
    return records


def read_results(out) -> list:
    """The records of ``OUT/results.jsonl`` (one per finished run)."""
    return _read_jsonl(Path(out) / RESULTS_FILE)


def _record(run: SweepRun, summary: dict) -> dict:
    return {
        "name": run.name,
        "identity": run.identity,
        "task": run.planned.task,
        "point": run.planned.point,
        "figures": list(run.planned.figures),
        "arguments": run.planned.arguments,
        "folder": str(Path(RUNS_DIR) / run.name),
        "accuracy": summary.get("accuracy"),
        "bp_accuracy": summary.get("bp_accuracy"),
        "metrics": summary.get("final", {}),
        "global_step": summary.get("global_step"),
        "train_runtime_s": summary.get("train_runtime_s"),
        "resumed_from": summary.get("resumed_from"),
    }


def _append(path: Path, record: dict) -> None:
    with open(path, "a") as handle:
        handle.write(json.dumps(record, sort_keys=True, default=str) + "\n")


def _by_name(value):
    """A list of named objects (``[{"name": ...}, ...]``) as a dict by name, so that differences name the run."""
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        return {v["name"]: {k: x for k, x in v.items() if k != "name"} for v in value}
    return value


def _differences(old, new, prefix: str = "") -> list:
    """``["path: old -> new", ...]`` between two JSON values (values shortened to 40 characters)."""
    old, new = _by_name(old), _by_name(new)
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new), key=str):
            found += _differences(old.get(key, "<unset>"), new.get(key, "<unset>"), f"{prefix}{key}.")
        return found

    def shown(value) -> str:
        text = json.dumps(value)
        return text if len(text) <= 40 else text[:37] + "..."

    return [] if old == new else [f"{prefix.rstrip('.')}: {shown(old)} -> {shown(new)}"]


def check_out(out: Path, source: dict | None, force: bool) -> dict | None:
    """Refuse an ``OUT`` that is a file, holds files of no sweep, or was written by another SPEC (unless ``force``).

    Returns the recorded ``sweep.json`` (None for a new folder).
    """
    if out.exists() and not out.is_dir():
        raise ValueError(f"OUT {str(out)!r} exists and is not a folder")
    recorded = train_runs.read_json_file(out / SWEEP_FILE) if out.is_dir() else None
    if source is not None and out.is_dir() and recorded is None and any(out.iterdir()):
        raise ValueError(f"OUT {str(out)!r} holds files but no {SWEEP_FILE}: choose a new or empty folder")
    if source is not None and recorded is not None and recorded.get("source") != source and not force:
        changes = _differences(recorded.get("source"), source)
        shown = "; ".join(changes[:4]) + (f"; ... ({len(changes)} changes)" if len(changes) > 4 else "")
        raise ValueError(f"OUT {str(out)!r} was written by a different SPEC ({shown}); pass --force to run this "
                         "SPEC there (finished runs of unchanged identity are kept, changed ones trained again)")
    return recorded


def _write_sweep_file(out: Path, source, runs: list, recorded: dict | None, merge: bool) -> None:
    entries = {}
    if merge and recorded:
        entries = {entry["name"]: entry for entry in recorded.get("runs", [])}
    for run in runs:
        entries[run.name] = {"name": run.name, "task": run.planned.task, "identity": run.identity,
                             "point": run.planned.point, "figures": list(run.planned.figures),
                             "folder": str(Path(RUNS_DIR) / run.name)}
    data = {"source": source if not merge else (recorded or {}).get("source", source),
            "runs": list(entries.values()), "updated": time.time()}
    train_runs.write_json_atomic(out / SWEEP_FILE, data)


def _refresh_results(out: Path, runs: list, merge: bool) -> dict:
    """Rewrite results.jsonl keeping only records of a planned identity; add finished runs that lack a record."""
    path = out / RESULTS_FILE
    current = {run.name: run.identity for run in runs}
    kept = {}
    for record in _read_jsonl(path):
        name = record.get("name")
        if name in current:
            if record.get("identity") == current[name]:
                kept[name] = record
        elif merge:
            kept[name] = record
    for run in runs:
        if run.state.status == "done" and run.name not in kept:
            kept[run.name] = _record(run, run.state.result)
    tmp = Path(f"{path}.tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in kept.values()))
    os.replace(tmp, path)
    return {name: record for name, record in kept.items() if name in current}


# ---------------------------------------------------------------- executors


def require_submitit():
    """The submitit module, or a ValueError naming the extra that installs it."""
    try:
        import submitit
    except ImportError:
        raise ValueError(f"--executor slurm needs submitit, which is not installed: {CLUSTER_EXTRA}") from None
    return submitit


def run_local(payloads: list, workers: int, on_result: Callable) -> None:
    """Run ``payloads`` on ``workers`` spawned processes (0: one after the other in this process)."""
    if workers == 0:
        for payload in payloads:
            on_result(payload, execute_job(payload))
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = multiprocessing.get_context("spawn")  # torch and fork do not mix
    with ProcessPoolExecutor(max_workers=min(workers, len(payloads)), mp_context=context) as pool:
        futures = {pool.submit(execute_job, payload): payload for payload in payloads}
        try:
            for future in as_completed(futures):
                payload = futures[future]
                try:
                    results = future.result()
                except Exception as error:  # noqa: BLE001 - a worker died (killed, out of memory)
                    results = [{"name": run["name"], "status": "failed", "error": f"worker died: {error!r}"}
                               for run in payload["runs"]]
                on_result(payload, results)
        except BaseException:
            for future in futures:
                future.cancel()
            raise


SLURM_LIMITS = {"timeout_min": 1, "cpus_per_task": 1, "gpus_per_node": 0, "slurm_array_parallelism": 1}


def check_slurm_parameters(parameters: dict | None) -> dict:
    """The submitit parameters of ``--executor slurm``; each known integer one checked against its lower bound."""
    from hf_treelang.core.params import check_int

    parameters = dict(parameters or {})
    for name, low in SLURM_LIMITS.items():
        if parameters.get(name) is not None:
            check_int(name, parameters[name], low)
    return parameters


def run_submitit(payloads: list, folder: Path, on_result: Callable, *, cluster: str = "slurm",
                 parameters: dict | None = None, poll_seconds: float = 2.0) -> None:
    """Submit ``payloads`` as one job array through submitit (``cluster="local"``: its LocalExecutor) and report
    each job as it finishes."""
    submitit = require_submitit()
    executor = submitit.AutoExecutor(folder=str(folder / "%j"), cluster=cluster)
    executor.update_parameters(name="hf-treelang-sweep", **(parameters or {}))
    jobs = executor.map_array(execute_job, payloads)
    pending = dict(zip(jobs, payloads))
    try:
        while pending:
            for job in [job for job in pending if job.done()]:
                payload = pending.pop(job)
                try:
                    results = job.result()
                except Exception as error:  # noqa: BLE001 - the job itself failed (timeout, node failure)
                    results = [{"name": run["name"], "status": "failed", "error": f"job {job.job_id}: {error}"}
                               for run in payload["runs"]]
                on_result(payload, results)
            if pending:
                time.sleep(poll_seconds)
    except BaseException:
        for job in pending:
            with contextlib.suppress(Exception):
                job.cancel()
        raise


def default_workers() -> int:
    """Worker processes of the local executor: one per CPU core."""
    return max(os.cpu_count() or 1, 1)


# ---------------------------------------------------------------- a sweep


def execute_runs(planned: list, out, *, source: dict | None = None, force: bool = False, executor: str = "local",
                 workers: int | None = None, threads: int | None = None, cluster: str = "slurm",
                 slurm_parameters: dict | None = None, progress: bool = True, log: Callable | None = None,
                 on_record: Callable | None = None, estimate: bool = True) -> SweepResult:
    """Train ``planned`` runs into ``out``: validate all, skip finished ones, run the rest, record the results.

    Args:
        planned: the :class:`PlannedRun` list.
        out: the sweep folder (``OUT/runs/<name>`` per run).
        source: what defines the sweep (a SPEC as a dict): an ``out`` written by another source is refused unless
            ``force``. None (a reproduction's steps): the runs of several calls accumulate in ``out``.
        executor: ``"local"`` (``workers`` processes; 0 trains in this process) or ``"slurm"`` (a submitit job
            array; ``cluster="local"`` uses submitit's LocalExecutor, as the tests do). The local workers are
            spawned, so a script that calls this needs the ``if __name__ == "__main__":`` guard.
        threads: torch threads per run (default: the CPU cores shared out among the workers).
        progress: a progress bar over the runs to train.
        log: called with lines of text (the estimate, each run as it finishes).
        on_record: called with ``(records, sweep_runs)`` after every finished run (to redraw figures).
        estimate: measure steps/s and log the estimated time before training.
    """
    from tqdm.auto import tqdm

    log = log or (lambda line: None)
    out = Path(out)
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if executor == "slurm":
        require_submitit()
        slurm_parameters = check_slurm_parameters(slurm_parameters)
    workers = default_workers() if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"`workers` must be an integer >= 0 (0: train in this process), got {workers!r}")
    recorded = check_out(out, source, force)
    runs = plan_runs(planned, out)
    pending = [run for run in runs if run.state.status != "done"]
    jobs = pack_jobs(pending, ensemble_supported())
    if threads is None and executor == "local" and workers > 0:
        threads = max((os.cpu_count() or 1) // max(min(workers, len(jobs)), 1), 1)
    resumed = sum(run.state.status == "resume" and run.state.checkpoint is not None for run in pending)
    log(f"{len(runs)} runs: {len(runs) - len(pending)} finished earlier, {len(pending)} to train "
        f"({resumed} resumed from a checkpoint) in {len(jobs)} job(s), executor {executor}")
    for run in pending:
        if run.state.status == "stale":
            log(f"{run.name}: its folder holds a run of another identity (its arguments, starting checkpoint or the "
                "data format changed): training it again")
    if estimate and pending:
        from .estimate import estimate as estimate_runs, estimate_lines

        lanes = workers if executor == "local" else len(jobs)
        for line in estimate_lines(estimate_runs([run.resolved for run in pending], workers=max(lanes, 1),
                                                 threads=threads)):
            log(line)
    out.mkdir(parents=True, exist_ok=True)
    merge = source is None
    _write_sweep_file(out, source, runs, recorded, merge)
    records = _refresh_results(out, runs, merge)
    by_name = {run.name: run for run in runs}
    failed, trained = {}, []
    bar = tqdm(total=len(pending), desc="sweep", unit="run", disable=not progress)

    def on_result(payload: dict, results: list) -> None:
        for result in results:
            run = by_name[result["name"]]
            if result["status"] == "done":
                record = _record(run, result["summary"])
                _append(out / RESULTS_FILE, record)
                records[run.name] = record
                trained.append(run.name)
                log(f"{run.name}: done, accuracy {record['accuracy']}, {record['global_step']} steps"
                    + (f" (resumed from {record['resumed_from']})" if record["resumed_from"] else ""))
            else:
                failed[run.name] = result["error"]
                log(f"{run.name}: FAILED: {result['error']}\n{result.get('traceback', '')}".rstrip())
            bar.update(1)
        if on_record is not None:
            on_record(records, runs)

    if on_record is not None and records:
        on_record(records, runs)
    try:
        if jobs and executor == "local":
            payloads = [job_payload(job, threads, None if workers == 0 else out / LOGS_DIR / f"{job.name}.log", out)
                        for job in jobs]
            run_local(payloads, workers, on_result)
        elif jobs:
            payloads = [job_payload(job, threads, None, out) for job in jobs]
            run_submitit(payloads, out / ".submitit", on_result, cluster=cluster, parameters=slurm_parameters)
    finally:
        bar.close()
    skipped = [run.name for run in runs if run.state.status == "done"]
    return SweepResult(out=out, runs=runs, records=records, failed=failed, trained=trained, skipped=skipped)


def run_sweep(spec, out, *, force: bool = False, **options) -> SweepResult:
    """Run a SPEC (a path, a dict or a :class:`SweepSpec`) into ``out``; the grid figure is redrawn as runs finish.

    Every check — the SPEC's shape, unknown arguments or axes, values out of range, a missing submitit for
    ``executor="slurm"``, an ``out`` of another SPEC without ``force`` — runs before any job starts. ``options`` are
    those of :func:`execute_runs`.
    """
    from .figure import write_grid_figure

    spec = load_spec(spec)
    planned = spec_runs(spec)
    out = Path(out)

    def redraw(records: dict, runs: list) -> None:
        write_grid_figure(out, spec, runs, records)

    return execute_runs(planned, out, source=spec.to_dict(), force=force, on_record=redraw, **options)


# ---------------------------------------------------------------- status


@dataclass
class RunStatus:
    """One run of ``hf-treelang sweep --status``: ``status`` is ``done``, ``running``, ``failed``, ``interrupted``,
    ``stale`` (its folder holds another identity) or ``pending``."""

    name: str
    status: str
    detail: str = ""


STATUSES = ("done", "running", "failed", "interrupted", "stale", "pending")


def sweep_status(out) -> list:
    """The status of every run recorded in ``OUT/sweep.json``."""
    out = Path(out)
    recorded = train_runs.read_json_file(out / SWEEP_FILE)
    if recorded is None:
        raise ValueError(f"OUT {str(out)!r} holds no sweep ({SWEEP_FILE} missing)")
    rows = []
    for entry in recorded.get("runs", []):
        folder = out / entry["folder"]
        done = train_runs.finished_run(folder, entry["identity"])  # the completion marker, for this identity
        record = train_runs.read_identity(folder)
        if done is not None:
            rows.append(RunStatus(entry["name"], "done", f"{done.get('global_step')} steps, accuracy "
                                                         f"{done.get('accuracy')}"))
        elif record is None:
            rows.append(RunStatus(entry["name"], "pending"))
        elif record.get("identity") != entry["identity"]:
            rows.append(RunStatus(entry["name"], "stale", "its folder holds another identity"))
        elif "error" in record:
            rows.append(RunStatus(entry["name"], "failed", record["error"]))
        else:  # started and not complete: its process runs, or is gone
            alive = train_runs.process_alive(record.get("host"), record.get("pid"))
            where = f"process {record.get('pid')} on {record.get('host')}"
            checkpoint = train_runs.last_checkpoint(folder)
            if alive is False:
                rows.append(RunStatus(entry["name"], "interrupted", f"{where} is gone; last checkpoint "
                                      f"{checkpoint.name if checkpoint else 'none'}"))
            else:
                rows.append(RunStatus(entry["name"], "running", where + ("" if alive else " (another host)")))
    return rows


def format_status(rows: list) -> str:
    counts = {status: sum(row.status == status for row in rows) for status in STATUSES}
    lines = [" · ".join(f"{status} {count}" for status, count in counts.items() if count or status in
                        ("done", "running", "failed"))]
    width = max((len(row.name) for row in rows), default=4)
    lines += [f"{row.name:<{width}}  {row.status:<11}  {row.detail}".rstrip() for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- command line


def cli_error(error: Exception) -> int:
    """Report a bad-input error of ``hf-treelang sweep`` on stderr; returns the exit status 2."""
    sys.stderr.write(f"hf-treelang sweep: error: {error}\n")
    return 2


def _slurm_parameters(args) -> dict:
    parameters = {"timeout_min": args.slurm_time, "cpus_per_task": args.slurm_cpus, "gpus_per_node": args.slurm_gpus}
    if args.slurm_partition:
        parameters["slurm_partition"] = args.slurm_partition
    if args.slurm_array_parallelism:
        parameters["slurm_array_parallelism"] = args.slurm_array_parallelism
    return parameters


def run(args) -> int:
    """``hf-treelang sweep`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    if args.status is not None:
        if args.spec is not None or args.out is not None:
            return cli_error(ValueError("--status OUT takes no SPEC / OUT positional arguments"))
        try:
            rows = sweep_status(args.status)
        except ValueError as error:
            return cli_error(error)
        print(format_status(rows))
        return 0
    if args.spec is None or args.out is None:
        return cli_error(ValueError("give SPEC and OUT (or --status OUT)"))
    try:
        result = run_sweep(args.spec, args.out, force=args.force, executor=args.executor, workers=args.workers,
                           slurm_parameters=_slurm_parameters(args), progress=not args.no_progress,
                           log=lambda line: print(line, flush=True))
    except (ValueError, TypeError) as error:
        return cli_error(error)
    print(f"{len(result.trained)} trained, {len(result.skipped)} finished earlier, {len(result.failed)} failed; "
          f"results in {Path(args.out) / RESULTS_FILE}")
    return 1 if result.failed else 0


def main(argv=None) -> int:
    """``hf-treelang sweep`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    from hf_treelang import cli

    return cli.run_command("sweep", argv)


if __name__ == "__main__":
    sys.exit(main())
