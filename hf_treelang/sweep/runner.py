"""The sweep runner: many training runs, one folder each, on worker processes or SLURM job arrays, never stale.

A sweep is a list of :class:`~hf_treelang.train.run.Run` objects, each named after its folder (:func:`sweep_run`: a
task and arguments in the training scripts' names — what a SPEC's grid point, a reproduction's preset or a
sample-complexity arm says — resolved into ``OUT/runs/<name>``), trained into ``OUT``:

* ``OUT/runs/<name>/`` — the run's folder (:func:`hf_treelang.train.loop.train` with ``reuse=True``:
  ``run_identity.json``, then the run folder — the model, its metrics and, written last, ``run_complete.json``);
* ``OUT/sweep.json`` — the SPEC and every run's identity (``hf-treelang sweep --status OUT`` reads it);
* ``OUT/results.jsonl`` — one record per finished run (its arguments, identity and final metrics), appended as runs
  finish; records of an identity that is no longer planned are dropped when a sweep starts;
* ``OUT/logs/<job>.log`` — what a worker process printed;
* ``OUT/ensembles/<job>/`` — a job of runs stacked into one model: its manifest and, while it trains, its
  checkpoints, from which a stopped sweep resumes the whole job (removed once its runs are finished).

Before any job starts every run is resolved and validated (:func:`hf_treelang.train.run.resolve`) and its identity
computed: a run already finished with the same identity is skipped, an interrupted one resumes from its last
checkpoint, one whose identity changed (its arguments, the checkpoint it starts from, the data-format version) is
trained again. Fresh runs that differ only in ``seed`` / ``k_train`` are packed into one job and trained together
(:func:`hf_treelang.train.loop.train_together`), each writing straight into its own folder; a stopped stacked job
resumes as a whole from its last checkpoint. A worker receives its runs as plain data
(:meth:`~hf_treelang.train.run.Run.payload`) and resolves them again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hf_treelang.claims import claim_folder, describe, is_claim_file, owner
from hf_treelang.core.params import check_int
from hf_treelang.jsonio import append_jsonl, read_json_object, read_jsonl, write_json_atomic, write_jsonl_atomic
from hf_treelang.processes import exit_with_parent
from hf_treelang.progress import is_terminal, quiet_progress_bars_off_terminal
from hf_treelang.train.folders import (
    ENSEMBLE_FILE,
    checkpoints,
    finished_run,
    folder_state,
    last_checkpoint,
    last_ensemble_checkpoint,
    read_identity,
)
from hf_treelang.train.loop import choose_ensemble_mode, train, train_together
from hf_treelang.train.run import (
    Run,
    check_arguments,
    check_together,
    from_payload,
    resolve,
    result_arguments,
    trains_apart,
)

from .estimate import estimate as estimate_runs, estimate_lines
from .figure import write_grid_figure
from .spec import SweepSpec, load_spec, point_name

RUNS_DIR = "runs"
SWEEP_FILE = "sweep.json"
RESULTS_FILE = "results.jsonl"
LOGS_DIR = "logs"
ENSEMBLES_DIR = "ensembles"  # OUT/ensembles/<job>: a stacked job's own folder, its manifest and resumable checkpoints
EXECUTORS = ("local", "slurm")
CLUSTER_EXTRA = "pip install 'hf-treelang[cluster]'"


@dataclass
class Job:
    """Runs trained by one worker: one run, or runs differing only in seed / k_train, trained together.

    ``name`` is also a file name (``OUT/logs/<name>.log``, ``OUT/ensembles/<name>``): a run name's ``/`` become
    ``_``, whatever made the job, so that a run that starts alone and later resumes alone writes one log.
    """

    name: str
    runs: list

    def __post_init__(self):
        self.name = self.name.replace("/", "_")


@dataclass
class SweepResult:
    """What :func:`execute_runs` did.

    Attributes:
        out: the sweep folder.
        runs: every :class:`~hf_treelang.train.run.Run`, in plan order (``tags``: its point and figures).
        states: ``{name: FolderState}`` of each run's folder before this call.
        records: ``{name: record}`` of every finished run (as in ``results.jsonl``).
        failed: ``{name: error}`` of the runs that failed in this call.
        trained: names of the runs trained (or resumed) in this call; ``skipped``: those finished before.
    """

    out: Path
    runs: list
    states: dict
    records: dict
    failed: dict
    trained: list
    skipped: list


# ---------------------------------------------------------------- planning


def spec_runs(spec: SweepSpec, out) -> list:
    """The runs of a SPEC's grid, in order, resolved into ``OUT/runs/<grid point>``; raises naming an unknown argument
    of ``base``, an unknown axis, or the run and argument of a value out of range."""
    check_arguments(spec.base, where="SPEC base")
    for axis, values in spec.grid.items():
        for value in values:
            check_arguments(spec.arguments({axis: value}), where=f"SPEC grid axis `{axis}`")
        names = set().union(*(value for value in values)) if isinstance(values[0], dict) else {axis}
        if not names & result_arguments():
            raise ValueError(f"SPEC grid axis `{axis}` does not change a run's result (where it writes, what it logs, "
                             f"its threads): its grid points would be one run; set `{axis}` in base instead")
    runs, names = [], set()
    for point in spec.points():
        name = point_name(point)
        if name in names:
            raise ValueError(f"SPEC grid points {point} and another share the folder name {name!r}")
        names.add(name)
        runs.append(sweep_run(spec.task, {**spec.base, **spec.arguments(point)}, out, name, point=point))
    return runs


def check_name(name: str) -> None:
    """A run's name is its folder under ``OUT/runs``: a relative path of letters, digits and ``._=,+-``."""
    parts = name.split("/") if isinstance(name, str) else [""]
    if any(not part or part in (".", "..") or any(not (c.isalnum() or c in "._=,+-") for c in part)
           for part in parts):
        raise ValueError(f"run name {name!r} must be a relative folder path of letters, digits and ._=,+- "
                         "(parts separated by /)")


def sweep_run(task: str, arguments: dict, out, name: str, *, point: dict | None = None, figures=()) -> Run:
    """The run ``name`` of a sweep in ``OUT``: :func:`~hf_treelang.train.run.resolve` into ``OUT/runs/<name>``,
    tagged with its grid point and the paper figures it feeds; errors name the run."""
    check_name(name)
    try:
        return resolve(task, arguments, Path(out) / RUNS_DIR / name, name=name,
                       tags={"point": dict(point or {}), "figures": list(figures)})
    except (ValueError, TypeError) as error:
        raise type(error)(f"run {name!r}: {error}") from None


def plan_runs(runs: list, out) -> dict:
    """Check that ``runs`` are runs of the sweep in ``out`` (one folder each, ``OUT/runs/<name>``) and read their
    folders (nothing is written); returns ``{name: FolderState}``."""
    out = Path(out)
    states = {}
    for run in runs:
        check_name(run.name)
        if run.name in states:
            raise ValueError(f"two runs are named {run.name!r}")
        if run.output_dir != out / RUNS_DIR / run.name:
            raise ValueError(f"run {run.name!r} writes to {str(run.output_dir)!r}, not to the sweep's "
                             f"{str(out / RUNS_DIR / run.name)!r}")
        try:
            state = folder_state(run.output_dir, run.identity)
        except ValueError as error:
            raise ValueError(f"run {run.name!r}: {error}") from None
        if state.status == "running":
            raise ValueError(f"run {run.name!r} is being trained by process {state.record.get('pid')} on "
                             f"{state.record.get('host')}; wait for it or stop it")
        states[run.name] = state
    return states


def _together_key(run: Run) -> str:
    config = json.loads(json.dumps(run.config))
    config["data_args"].pop("k_train")
    config["training_args"].pop("seed")
    return json.dumps(config, sort_keys=True)


def pack_jobs(runs: list, states: dict, together: bool = True, device: str | None = None) -> list:
    """Group the runs into jobs.

    With ``together``, fresh root / mlm runs (state ``"new"`` / ``"stale"``) whose resolved configurations differ
    only in ``seed`` and ``k_train`` form one job when they are the full product seeds × k_train, else one job per
    k_train, but only where that job trains them as one stacked model on ``device`` (:func:`trains_stacked`; None:
    the device is chosen where the job runs): runs that would train one after another (another architecture, a
    TreeLang too large to stack on this device) get a job each, so the workers train them side by side.
    A run resuming from a checkpoint of its own, a fine-tuning run and a causal (clm) run is its own job; an
    interrupted run without one (a stacked job's member) is packed as a fresh run, so that its job forms again and
    resumes from the job's checkpoint (:func:`stacked_resume_point`). Without ``together``, one job per run.
    """
    if not together:
        return _distinct([Job(run.name, [run]) for run in runs])
    jobs, groups = [], {}
    for run in runs:
        state = states[run.name]
        resumes_alone = state.status == "resume" and state.checkpoint is not None
        if resumes_alone or run.task not in ("root", "mlm"):
            jobs.append(Job(run.name, [run]))  # resumed runs, fine-tuning and causal runs train alone
        else:
            groups.setdefault(_together_key(run), []).append(run)
    for group in groups.values():
        seeds = sorted({r.training_args.seed for r in group})
        levels = sorted({r.data_args.k_train for r in group})
        if len(group) == len(seeds) * len(levels):
            parts = [group]
        else:
            parts = [[r for r in group if r.data_args.k_train == k] for k in levels]
        parts = [piece for part in parts for piece in ([part] if trains_stacked(part, device) else [[r] for r in part])]
        for part in parts:
            name = part[0].name if len(part) == 1 else f"ensemble-{part[0].name}-x{len(part)}"
            jobs.append(Job(name, part))
    order = {run.name: i for i, run in enumerate(runs)}
    return _distinct(sorted(jobs, key=lambda job: min(order[r.name] for r in job.runs)))


def _distinct(jobs: list) -> list:
    """``jobs``, refused where two share a name: a job's name is a file name (its log), which two must not share."""
    named: dict = {}
    for job in jobs:
        if job.name in named:
            raise ValueError(f"runs {named[job.name]!r} and {job.runs[0].name!r} would share the job name "
                             f"{job.name!r} and its log file ({LOGS_DIR}/{job.name}.log): rename one of them")
        named[job.name] = job.runs[0].name
    return jobs


def trains_stacked(runs: list, device: str | None = None) -> bool:
    """Whether :func:`~hf_treelang.train.loop.train_together` trains ``runs`` (more than one) as one stacked model:
    they pass its checks and, on ``device`` (``"cpu"``, ``"cuda"``; None: not known here), its
    :func:`~hf_treelang.train.loop.choose_ensemble_mode` picks ``"stacked"``."""
    if len(runs) < 2:
        return False
    try:
        check_together(runs)
    except ValueError:
        return False
    if trains_apart(runs):
        return False
    if device is None:
        return True
    first = runs[0]
    return choose_ensemble_mode(first.model_args.config(first.data_args),
                                first.training_args.per_device_train_batch_size, device) == "stacked"


def local_device(runs: list) -> str:
    """The device this machine trains ``runs`` on: ``"cpu"`` when no GPU is visible or the runs ask for the CPU."""
    import torch

    return "cpu" if not torch.cuda.is_available() or any(run.training_args.use_cpu for run in runs) else "cuda"


def job_payload(job: Job, threads: int | None, log_file: Path | None, out: Path | None = None) -> dict:
    """What a worker needs to train ``job``: plain data (picklable), resolved again in the worker; a job of several
    runs gets its own folder ``OUT/ensembles/<job>`` when ``out`` is given."""
    runs = [run.replace_training(cpu_threads=int(threads)) if threads and not run.training_args.cpu_threads else run
            for run in job.runs]  # threads are not part of a run's identity
    ensemble_dir = Path(out) / ENSEMBLES_DIR / job.name if out is not None and len(job.runs) > 1 else None
    return {"name": job.name, "runs": [run.payload() for run in runs],
            "log_file": None if log_file is None else str(log_file),
            "ensemble_dir": None if ensemble_dir is None else str(ensemble_dir)}


def stacked_resume_point(ensemble_dir, runs: list) -> Path | None:
    """The checkpoint from which the stacked job of ``runs`` resumes: the last complete one of ``ensemble_dir``
    when its manifest names exactly these runs with these identities and every run is interrupted (none finished,
    none replaced by another identity); else None (the job trains from the start)."""
    folder = Path(ensemble_dir)
    manifest = read_json_object(folder / ENSEMBLE_FILE) or {}
    if manifest.get("mode") != "stacked" or manifest.get("members") != [run.name for run in runs] \
            or manifest.get("identities") != {run.name: run.identity for run in runs}:
        return None
    if any(folder_state(run.output_dir, run.identity).status != "resume" for run in runs):
        return None
    return last_ensemble_checkpoint(folder)


# ---------------------------------------------------------------- a job, in a worker


def _failed(name: str, error: BaseException) -> dict:
    return {"name": name, "status": "failed", "error": f"{type(error).__name__}: {error}",
            "traceback": traceback.format_exc(limit=20)}


def _done(run: Run, result) -> dict:
    return {"name": run.name, "status": "done", "summary": result.summary}


def _train_alone(payload: dict) -> dict:
    try:
        run = from_payload(payload)
        return _done(run, train(run, reuse=True))
    except Exception as error:  # noqa: BLE001 - reported per run, the other jobs go on
        return _failed(payload["name"], error)


def _train_job(payloads: list, ensemble_dir=None) -> list:
    """Train the runs of one job: alone, or together (:func:`~hf_treelang.train.loop.train_together`, each run
    writing into its own folder). Runs that cannot train together (its checks, before any training) train one by one.
    Runs trained together keep their job's folder in ``ensemble_dir``: a stacked job stopped after a checkpoint
    resumes from it (:func:`stacked_resume_point`), else starts over; the folder's checkpoints are removed once every
    run is finished (None: a temporary folder, and an interrupted job starts over)."""
    if len(payloads) == 1:
        return [_train_alone(payloads[0])]
    runs = [from_payload(payload) for payload in payloads]
    try:
        check_together(runs)
    except ValueError:
        return [_train_alone(payload) for payload in payloads]
    resume = None
    if ensemble_dir is not None:
        resume = stacked_resume_point(ensemble_dir, runs)
        if resume is None:
            shutil.rmtree(ensemble_dir, ignore_errors=True)  # another job's, or one that never checkpointed
    result = train_together(runs, reuse=True, ensemble_dir=ensemble_dir, resume_from_checkpoint=resume)
    if ensemble_dir is not None:
        for _, path in checkpoints(ensemble_dir):  # only for resuming: the runs' folders are complete
            shutil.rmtree(path)
    return [_done(run, result.members[run.name]) for run in runs]


def execute_job(payload: dict) -> list:
    """Train the runs of one job (in a worker process, a SLURM task or in-process); never raises for a run's error.

    Returns one record per run: ``{"name", "status": "done", "summary"}`` or ``{"name", "status": "failed",
    "error", "traceback"}``.
    """
    import hf_treelang  # noqa: F401  # lazy: registers the TreeLang Auto classes and dataset builder in a new worker

    log_file = payload.get("log_file")
    with contextlib.ExitStack() as stack:
        if log_file:
            Path(log_file).parent.mkdir(parents=True, exist_ok=True)
            handle = stack.enter_context(open(log_file, "a", buffering=1))
            stack.enter_context(contextlib.redirect_stdout(handle))
            stack.enter_context(contextlib.redirect_stderr(handle))
            quiet_progress_bars_off_terminal(handle)  # a log file: plain lines, no \r redraws
        try:
            return _train_job(payload["runs"], payload.get("ensemble_dir"))
        except Exception as error:  # noqa: BLE001 - the whole job failed
            return [_failed(run["name"], error) for run in payload["runs"]]


# ---------------------------------------------------------------- the sweep folder


def read_results(out) -> list:
    """The records of ``OUT/results.jsonl`` (one per finished run)."""
    return read_jsonl(Path(out) / RESULTS_FILE)


def _record(run: Run, summary: dict) -> dict:
    return {
        "name": run.name,
        "identity": run.identity,
        "task": run.task,
        "point": run.tags.get("point", {}),
        "figures": list(run.tags.get("figures", [])),
        "arguments": run.arguments,
        "folder": str(Path(RUNS_DIR) / run.name),
        "accuracy": summary.get("accuracy"),
        "bp_accuracy": summary.get("bp_accuracy"),
        "metrics": summary.get("final", {}),
        "global_step": summary.get("global_step"),
        "train_runtime_s": summary.get("train_runtime_s"),
        "resumed_from": summary.get("resumed_from"),
    }


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
    recorded = read_json_object(out / SWEEP_FILE) if out.is_dir() else None
    if source is not None and out.is_dir() and recorded is None \
            and any(not is_claim_file(entry.name) for entry in out.iterdir()):
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
        entries[run.name] = {"name": run.name, "task": run.task, "identity": run.identity,
                             "point": run.tags.get("point", {}), "figures": list(run.tags.get("figures", [])),
                             "folder": str(Path(RUNS_DIR) / run.name)}
    data = {"source": source if not merge else (recorded or {}).get("source", source),
            "runs": list(entries.values()), "updated": time.time()}
    write_json_atomic(out / SWEEP_FILE, data)


def _refresh_results(out: Path, runs: list, states: dict, merge: bool) -> dict:
    """Rewrite results.jsonl keeping only records of a planned identity; add finished runs that lack a record."""
    path = out / RESULTS_FILE
    current = {run.name: run.identity for run in runs}
    kept = {}
    for record in read_jsonl(path):
        name = record.get("name")
        if name in current:
            if record.get("identity") == current[name]:
                kept[name] = record
        elif merge:
            kept[name] = record
    for run in runs:
        if states[run.name].status == "done" and run.name not in kept:
            kept[run.name] = _record(run, states[run.name].result)
    write_jsonl_atomic(path, kept.values())
    return {name: record for name, record in kept.items() if name in current}


# ---------------------------------------------------------------- executors


def require_submitit(cluster: str = "slurm"):
    """The submitit module, or a ValueError naming the extra that installs it; for ``cluster="slurm"``, also a
    ValueError when SLURM's ``sbatch`` is not on PATH (submitit would fail only at the first submission)."""
    try:
        import submitit
    except ImportError:
        raise ValueError(f"--executor slurm needs submitit, which is not installed: {CLUSTER_EXTRA}") from None
    if cluster == "slurm" and shutil.which("sbatch") is None:
        raise ValueError("--executor slurm submits with SLURM's sbatch, which is not on PATH: run the sweep on a "
                         "node of the cluster (where `sbatch --version` works), or use --executor local")
    return submitit


def run_local(payloads: list, workers: int, on_result: Callable, job: Callable = None) -> None:
    """Run ``payloads`` on ``workers`` spawned processes (0: one after the other in this process); ``job`` (a
    module-level function, default :func:`execute_job`) runs one payload. An interruption of this process (Ctrl-C,
    an error of ``on_result``) stops the workers at once, as a killed driver does: their runs resume from their last
    checkpoints in the next sweep, rather than this process waiting for them to finish."""
    job = job or execute_job
    if workers == 0:
        for payload in payloads:
            on_result(payload, job(payload))
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = multiprocessing.get_context("spawn")  # torch and fork do not mix
    with ProcessPoolExecutor(max_workers=min(workers, len(payloads)), mp_context=context,
                             initializer=exit_with_parent, initargs=(os.getpid(),)) as pool:  # they die with this one
        futures = {pool.submit(job, payload): payload for payload in payloads}
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
            for process in list((pool._processes or {}).values()):  # leaving the pool would wait for them
                process.terminate()
            raise


SLURM_LIMITS = {"timeout_min": 1, "cpus_per_task": 1, "gpus_per_node": 0, "slurm_array_parallelism": 1}


def check_slurm_parameters(parameters: dict | None) -> dict:
    """The submitit parameters of ``--executor slurm``; each known integer one checked against its lower bound."""
    parameters = dict(parameters or {})
    for name, low in SLURM_LIMITS.items():
        if parameters.get(name) is not None:
            check_int(name, parameters[name], low)
    return parameters


def run_submitit(payloads: list, folder: Path, on_result: Callable, *, cluster: str = "slurm",
                 parameters: dict | None = None, poll_seconds: float = 2.0) -> None:
    """Submit ``payloads`` as one job array through submitit (``cluster="local"``: its LocalExecutor) and report
    each job as it finishes."""
    submitit = require_submitit(cluster)
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


def execute_runs(runs: list, out, *, source: dict | None = None, force: bool = False, executor: str = "local",
                 workers: int | None = None, threads: int | None = None, cluster: str = "slurm",
                 slurm_parameters: dict | None = None, progress: bool = True, log: Callable | None = None,
                 on_record: Callable | None = None, on_trained: Callable | None = None,
                 estimate: bool = True) -> SweepResult:
    """Train ``runs`` into ``out``: check all, skip finished ones, run the rest, record the results.

    Args:
        runs: the :class:`~hf_treelang.train.run.Run` list (:func:`sweep_run`: ``OUT/runs/<name>`` each).
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
        on_trained: called with a run's name as soon as it is trained (so that a caller stopped part-way knows
            what was trained before the stop).
        estimate: measure steps/s and log the estimated time before training.

    This process owns ``out`` for the duration (:func:`hf_treelang.claims.claim_folder`): a second sweep (or
    reproduction) on it is refused naming this one, so no run is trained twice and ``results.jsonl`` gets one record
    per run; a run whose folder another process owns (a training script's run) is refused naming that process.
    """
    log = log or (lambda line: None)
    out = Path(out)
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if executor == "slurm":
        require_submitit(cluster)
        slurm_parameters = check_slurm_parameters(slurm_parameters)
    workers = default_workers() if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"`workers` must be an integer >= 0 (0: train in this process), got {workers!r}")
    check_out(out, source, force)
    plan_runs(runs, out)  # every check before the folder is claimed: bad input leaves nothing behind
    with claim_folder(out, "OUT"):  # one sweep per folder; a reproduction that claimed it calls this again
        return _execute_owned(runs, out, source=source, force=force, executor=executor, workers=workers,
                              threads=threads, cluster=cluster, slurm_parameters=slurm_parameters,
                              progress=progress, log=log, on_record=on_record, on_trained=on_trained,
                              estimate=estimate)


def _execute_owned(runs: list, out: Path, *, source, force, executor, workers, threads, cluster, slurm_parameters,
                   progress, log, on_record, on_trained, estimate) -> SweepResult:
    """:func:`execute_runs` in the claimed ``out``: the folders are read again, since another sweep may have
    finished runs between the checks and the claim."""
    from tqdm.auto import tqdm

    recorded = check_out(out, source, force)
    states = plan_runs(runs, out)
    pending = [run for run in runs if states[run.name].status != "done"]
    jobs = pack_jobs(pending, states, device=local_device(pending) if executor == "local" and pending else None)
    if threads is None and executor == "local" and workers > 0:
        threads = max((os.cpu_count() or 1) // max(min(workers, len(jobs)), 1), 1)
    resumed = sum(states[run.name].status == "resume" and states[run.name].checkpoint is not None for run in pending)
    log(f"{len(runs)} runs: {len(runs) - len(pending)} finished earlier, {len(pending)} to train "
        f"({resumed} resumed from a checkpoint) in {len(jobs)} job(s), executor {executor}")
    for run in pending:
        if states[run.name].status == "stale":
            log(f"{run.name}: its folder holds a run of another identity (its arguments, starting checkpoint or the "
                "data format changed): training it again")
    if estimate and pending:
        lanes = workers if executor == "local" else len(jobs)
        on_gpu = executor != "local" or local_device(pending) == "cuda"  # a GPU here, or the cluster's
        for line in estimate_lines(estimate_runs(pending, workers=max(lanes, 1), threads=threads,
                                                 devices=("cpu", "cuda") if on_gpu else ("cpu",))):
            log(line)
    out.mkdir(parents=True, exist_ok=True)
    merge = source is None
    _write_sweep_file(out, source, runs, recorded, merge)
    records = _refresh_results(out, runs, states, merge)
    by_name = {run.name: run for run in runs}
    failed, trained = {}, []
    bar = tqdm(total=len(pending), desc="sweep", unit="run", disable=not (progress and is_terminal()))  # never a file

    def on_result(payload: dict, results: list) -> None:
        for result in results:
            run = by_name[result["name"]]
            if result["status"] == "done":
                record = _record(run, result["summary"])
                append_jsonl(out / RESULTS_FILE, record)
                records[run.name] = record
                trained.append(run.name)
                if on_trained is not None:
                    on_trained(run.name)
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
    skipped = [run.name for run in runs if states[run.name].status == "done"]
    return SweepResult(out=out, runs=runs, states=states, records=records, failed=failed, trained=trained,
                       skipped=skipped)


def run_sweep(spec, out, *, force: bool = False, **options) -> SweepResult:
    """Run a SPEC (a path, a dict or a :class:`SweepSpec`) into ``out``; the grid figure is redrawn as runs finish.

    Every check — the SPEC's shape, unknown arguments or axes, values out of range, a missing submitit for
    ``executor="slurm"``, an ``out`` of another SPEC without ``force`` — runs before any job starts. ``options`` are
    those of :func:`execute_runs`.
    """
    spec = load_spec(spec)
    out = Path(out)
    runs = spec_runs(spec, out)

    def redraw(records: dict, runs: list) -> None:
        write_grid_figure(out, spec, runs, records)

    return execute_runs(runs, out, source=spec.to_dict(), force=force, on_record=redraw, **options)


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
    recorded = read_json_object(out / SWEEP_FILE)
    if recorded is None:
        raise ValueError(f"OUT {str(out)!r} holds no sweep ({SWEEP_FILE} missing)")
    rows = []
    for entry in recorded.get("runs", []):
        folder = out / entry["folder"]
        done = finished_run(folder, entry["identity"])  # the completion marker, for this identity
        record = read_identity(folder)
        if done is not None:
            rows.append(RunStatus(entry["name"], "done", f"{done.get('global_step')} steps, accuracy "
                                                         f"{done.get('accuracy')}"))
        elif record is None:
            rows.append(RunStatus(entry["name"], "pending"))
        elif record.get("identity") != entry["identity"]:
            rows.append(RunStatus(entry["name"], "stale", "its folder holds another identity"))
        elif "error" in record:
            rows.append(RunStatus(entry["name"], "failed", record["error"]))
        else:  # started and not complete: its process owns the folder, or is gone (hf_treelang.claims)
            taken = owner(folder)
            checkpoint = last_checkpoint(folder)
            if taken is None:
                rows.append(RunStatus(entry["name"], "interrupted", f"process {record.get('pid')} on "
                                      f"{record.get('host')} is gone; last checkpoint "
                                      f"{checkpoint.name if checkpoint else 'none'}"))
            else:
                rows.append(RunStatus(entry["name"], "running", describe(taken)))
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
