"""``hf-treelang reproduce --preset quick|paper OUT``: the paper's pipeline in one command, with a report.

Steps (each writes into its own sub-folder of OUT and, when finished, a done-file ``OUT/.done/<step>.json``; a rerun
skips every finished step, so an interrupted reproduction resumes where it stopped). Every training goes through the
sweep engine (:class:`hf_treelang.reproduce.plan.EngineRunner`: ``OUT/runs/<name>``, ``OUT/sweep.json``,
``OUT/results.jsonl``), which reuses a run only when its identity is unchanged; a done-file holds only while the
preset is the same and every run the step used keeps its identity (:func:`hf_treelang.reproduce.plan.marker_valid`),
and once a run is trained again the steps after it are redone. ``--plan OUT`` lists the runs instead
(``OUT/plan.json``, with the estimated time):

1. ``data`` — the grammar and the datasets (``load_dataset("treelang", "k<k>")`` for every k the runs use);
2. ``bp`` — BP baselines: root and masked-leaf accuracy of the matched BP_{k_test} (optimal) and of BP_{k_train}
   on every k_test set;
3. ``train_root`` / ``train_mlm`` (and ``train_mlm_k<k>`` for the attention grid of the paper preset) — training
   with the BP-KL callback (Sec. 3);
4. ``dynamics`` (Fig. 1c/d, 2b, 3a), ``calibration`` (Fig. 1b), ``attention`` (Fig. 4), ``probe``
   (Fig. 3b, Fig. 12 left), ``sample_complexity`` (Fig. 1f);
5. the sweeps of the presets that size them (``paper``): ``root_sweep`` (Fig. 2a and Fig. 8: root accuracy vs P
   for every k_train), ``layers_sweep`` (Fig. 6: per n_L), ``seed_sweep`` (Fig. 7: other grammars),
   ``classifier_attention`` (Fig. 11) and ``probe_filtered`` (Fig. 12 right), each writing a PNG and a JSON;
6. ``OUT/report.md``: what reproduced, one row per paper figure with the paper's claim, the check, the measured
   numbers and a verdict (:mod:`hf_treelang.reproduce.findings`, also written as ``OUT/findings.json``), every
   figure embedded and the model-vs-BP tables (rewritten on every call).

Presets: ``quick`` (the training scripts' laptop runs, :mod:`hf_treelang.train.laptop_settings`, one MLM on data
filtered at k = 2 and every analysis; at most 45 minutes on a 2-core CPU, no sweeps), ``laptop_long`` (the same
with the 40-epoch MLM of ``run_mlm.py --preset laptop_long``; over an hour) and ``paper`` (the
authors' settings, figure by figure, listed with their sources in training/README.md; GPU-weeks for every sweep).
``tiny`` is the smoke-test preset of the test suite (every step, toy sizes).
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from hf_treelang import register
from hf_treelang.claims import claim_folder
from hf_treelang.lazy import lazy_attributes

from .plan_cache import write_cached_plan
from .presets import PRESETS, PUBLIC_PRESETS, Preset

PRESET_FILE = "preset.json"
GRAMMAR_COPY = "grammar_file.json"  # OUT's copy of a --grammar_file, which every run of the reproduction reads
MAX_WORKERS = 256  # processes that train a preset's runs side by side (reproduce --workers)

# Names of the steps and report modules, imported on first access (PEP 562): they import torch, transformers and
# every analysis, and ``hf-treelang reproduce --help`` imports this package for the presets and step names.
_LAZY = {
    "Context": "hf_treelang.reproduce.steps",
    "bp_baselines": "hf_treelang.reproduce.steps",
    "steps_of": "hf_treelang.reproduce.steps",
    "DONE_DIR": "hf_treelang.reproduce.report",
    "read_json": "hf_treelang.reproduce.report",
    "write_report": "hf_treelang.reproduce.report",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)


@dataclass
class StepRecord:
    """One step of a reproduction: ``status`` is ``"ran"`` or ``"skipped"`` (done in an earlier call)."""

    name: str
    status: str
    seconds: float


@dataclass
class ReproduceResult:
    """What :func:`reproduce` did: the steps in order and the report it wrote."""

    out_dir: Path
    preset: str
    steps: list
    report: Path


def _check_out(out: Path, preset: Preset) -> None:
    from .report import read_json  # lazy: loads torch; `hf-treelang --help` imports this package (its presets)

    if out.exists() and not out.is_dir():
        raise ValueError(f"OUT {str(out)!r} exists and is not a folder")
    recorded = read_json(out / PRESET_FILE) if out.is_dir() else None
    if recorded is not None and recorded.get("name") != preset.name:
        raise ValueError(f"OUT {str(out)!r} holds a reproduction with preset {recorded.get('name')!r}; use another "
                         f"folder for preset {preset.name!r}")
    if recorded is not None and recorded.get("grammar_sha256") != preset.grammar_sha256:
        raise ValueError(f"OUT {str(out)!r} holds a reproduction on another grammar (sha256 "
                         f"{recorded.get('grammar_sha256')}, this one's {preset.grammar_sha256}); use another folder")


def reproduce(out_dir, preset: str = "quick", *, progress: bool = True, log: Callable | None = None,
              only: list | None = None, workers: int | None = None,
              grammar_file: str | None = None) -> ReproduceResult:
    """Run (or resume) every step of a preset into ``out_dir`` and write ``out_dir/report.md``.

    Args:
        out_dir: the output folder (created; a folder of another preset is refused). This process owns it for the
            duration (:func:`hf_treelang.claims.claim_folder`): a second reproduction on it is refused naming this
            one.
        preset: ``"quick"``, ``"laptop_long"``, ``"paper"`` (or ``"tiny"``, the smoke test).
        progress: show progress bars.
        log: called with one line of text per step (the CLI prints them).
        only: run only these steps (the others are left as they are); ``None`` runs all.
        workers: train every run of the preset first, this many side by side on one thread each, then run the
            steps on the finished runs (:func:`hf_treelang.reproduce.plan.train_ahead`; not with ``only``); 0: each
            run when its step needs it, in this process; None: the preset's
            :attr:`~hf_treelang.reproduce.presets.Preset.workers`.
        grammar_file: train every run and build the data on the grammar in this file (the JSON ``Grammar.save``
            writes) instead of the preset's generated one (:func:`~hf_treelang.reproduce.steps.with_grammar_file`).
    """
    from hf_treelang.train.arguments import read_grammar_file  # lazy: as the steps below

    from .steps import steps_of, with_grammar_file  # lazy: loads torch; `hf-treelang --help` imports this package

    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {PUBLIC_PRESETS}, got {preset!r}")
    spec = PRESETS[preset] if grammar_file is None else with_grammar_file(PRESETS[preset], grammar_file)
    out = Path(out_dir)
    _check_out(out, spec)
    steps = steps_of(spec)
    names = [name for name, _ in steps]
    if only is not None:
        unknown = [name for name in only if name not in names]
        if unknown:
            raise ValueError(f"only: unknown steps {unknown}; steps of preset {preset!r}: {names}")
    workers = spec.workers if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or not 0 <= workers <= MAX_WORKERS:
        raise ValueError(f"`workers` must be an integer in [0, {MAX_WORKERS}], got {workers!r}")
    with claim_folder(out, "OUT"):  # one reproduction per folder: a second one is refused, naming this process
        _check_out(out, spec)  # again, now that the folder is ours
        if grammar_file is not None:  # every run reads OUT's copy: an edit of the user's file changes no run
            out.mkdir(parents=True, exist_ok=True)
            copy = out / GRAMMAR_COPY
            read_grammar_file(grammar_file).save(copy)
            spec = with_grammar_file(spec, copy)
        return _reproduce_owned(out, spec, steps, only=only, progress=progress, log=log, workers=workers)


def _reproduce_owned(out: Path, spec: Preset, steps: list, *, only, progress: bool, log,
                     workers: int = 0) -> ReproduceResult:
    """:func:`reproduce` in the claimed ``out``."""
    # lazy: torch and the steps load on a run; `hf-treelang --help` imports this package for its presets
    import torch
    from tqdm.auto import tqdm

    from hf_treelang.analysis.io import write_json

    from .plan import EngineRunner, marker_record, marker_valid, remaining_lines, train_ahead
    from .report import DONE_DIR, read_json, write_report
    from .steps import Context
    from .timing import Terminated, record_call, sigterm_as_interrupt

    preset = spec.name
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / PRESET_FILE, asdict(spec))
    (out / DONE_DIR).mkdir(exist_ok=True)
    log = log or (lambda line: None)
    # every training goes through the sweep engine (identity-checked, resumable), recorded for the step markers
    runner = EngineRunner(out, log=lambda line: log(line) if "training it again" in line or "FAILED" in line else None)
    ctx = Context(out, spec, progress, run=runner)
    invalidated = False  # a run was trained in this call: later markers may describe older runs
    trained_ahead, status = [], "stopped"  # the runs trained ahead, counted as each finishes (a stop included)
    records = []
    threads = torch.get_num_threads()
    if spec.cpu_threads:
        # Small models on a few shared cores: one thread avoids OpenMP oversubscription, which can be 10x slower.
        torch.set_num_threads(spec.cpu_threads)
    with sigterm_as_interrupt():  # a `kill` is recorded as Ctrl-C is
        try:
            if only is None or any(name.startswith("train") for name in only):
                for line in remaining_lines(ctx):
                    log(line)
            if workers and only is None:
                train_ahead(ctx, workers, log=lambda line: log(line) if "FAILED" in line else None,
                            on_trained=trained_ahead.append)
                invalidated = bool(trained_ahead)
            bar = tqdm(steps, desc="reproduce", unit="step", disable=not progress)
            for name, function in bar:
                if only is not None and name not in only:
                    continue
                bar.set_postfix_str(name)
                marker = out / DONE_DIR / f"{name}.json"
                if marker.is_file() and not invalidated and marker_valid(read_json(marker), spec, out):
                    records.append(StepRecord(name, "skipped", 0.0))
                    log(f"{name}: done earlier, skipped")
                    continue
                start = time.perf_counter()
                runner.begin()
                summary = function(ctx)
                used, trained = runner.end()
                invalidated = invalidated or trained > 0
                seconds = time.perf_counter() - start
                write_json(marker, {"step": name, "seconds": seconds, "summary": summary,
                                    **marker_record(spec, used, out)})
                records.append(StepRecord(name, "ran", seconds))
                log(f"{name}: finished in {seconds:.1f} s")
            status = "finished"
        except BaseException as error:
            status = "stopped by SIGTERM" if isinstance(error, Terminated) else f"stopped by {type(error).__name__}"
            raise
        finally:
            torch.set_num_threads(threads)
            runs_trained = len(trained_ahead) + sum(r.status == "ran" for r in records if r.name.startswith("train"))
            record_call(out, time.perf_counter() - started, preset=asdict(spec), status=status,
                        steps_ran=[r.name for r in records if r.status == "ran"], trained_runs=runs_trained)
    report = write_report(out, spec, records)
    return ReproduceResult(out_dir=out, preset=preset, steps=records, report=report)


def run(args) -> int:
    """``hf-treelang reproduce`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    start = time.perf_counter()
    try:
        if (args.out is None) == (args.plan is None):
            raise ValueError("give OUT (run the reproduction) or --plan OUT (write its plan), not both or neither")
        if args.plan is not None:
            if args.only is not None:
                raise ValueError("--only selects steps to run; --plan lists every training run of the preset")
            log = lambda line: print(line, flush=True)  # noqa: E731
            grammar_file = args.grammar_file
            if grammar_file is not None or write_cached_plan(args.plan, args.preset, log=log) is None:
                from .plan import write_plan  # lazy: loads torch; `hf-treelang --help` imports this package

                register()
                write_plan(args.plan, args.preset, log=log, grammar_file=grammar_file)
            return 0
        register()
        result = reproduce(args.out, args.preset, progress=not args.no_progress, only=args.only,
                           workers=args.workers, log=lambda line: print(line, flush=True),
                           grammar_file=args.grammar_file)
    except (ValueError, TypeError) as error:
        sys.stderr.write(f"hf-treelang reproduce: error: {error}\n")
        return 2
    print(f"wrote {result.report} ({time.perf_counter() - start:.0f} s)")
    return 0
