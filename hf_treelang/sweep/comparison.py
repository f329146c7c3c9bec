"""The architecture comparison: which learners reach the exact optimum BP_0, level by level, and how fast.

One protocol (``training/compare_architectures.py`` runs it), on the sweep engine (:func:`~hf_treelang.sweep.runner.
execute_runs`), resumable, every run a complete run folder:

* **Cells.** A cell is a grammar, a task and an architecture (:data:`CELLS`): the root task for six architectures
  (two encoders besides TreeLang's, two causal decoders, a recurrent model) on the paper's grammar and on the Random
  Hierarchy Model ``rhm-v8-m4-s2-L3``; next-leaf prediction for four causal models; the masked leaf for four
  encoders. Every architecture has the laptop TreeLang model's parameter count for its task within
  :data:`SIZE_TOLERANCE` (:func:`check_sizes`), with one layer per level of the tree (n_L = ℓ) and no dropout, as the
  laptop TreeLang model.
* **Budgets.** Each task's laptop preset, unchanged but for the architecture and the rate: root 49,152 steps
  (P = 2^17, 12 epochs), next leaf 8,192 (P = 2^16, 4 epochs), masked leaf 49,152 with the preset's falling mask
  rate, RHM root 12,288 (P = 2^15, 12 epochs); batch 32, 16 log-spaced evaluations, the same data and test sets for
  every architecture.
* **The rate of each cell** is chosen from :data:`LEARNING_RATES` by the final *validation* KL to BP_{k_train} (the
  in-sample evaluation set, never the test sets) of model seed 0 trained for a quarter of the budget
  (:func:`choose_rate`); the choice and every candidate's KL and run identity are recorded in ``OUT/rates.json``.
  A cell whose record is of today's runs (:func:`is_current`) is not searched again, so an ``OUT`` kept as
  ``rates.json`` and its finished main runs (``hf-treelang prune``: without the checkpoints) resumes where it stopped.
  A ``rates.json`` that is not a JSON object of such records, or whose ``chosen`` rate is not its search's best (a
  hand edit), is refused before any work, naming the file (:func:`read_rates`): the main runs train only the rate
  the search chose.
* **Then the seeds** of :data:`SEEDS` at that rate, at the full budget (``OUT/runs/main/...``).

``hf-treelang compare OUT/runs/main/*`` tabulates them (groups pool only the seeds of one setting), and every record
carries the command that trains its run alone (:meth:`~hf_treelang.train.run.Run.command`).

Glossary: ℓ depth, q symbols, P training sequences.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from hf_treelang.jsonio import write_json_atomic
from hf_treelang.train.callbacks import read_history
from hf_treelang.train.device_data import optimizer_steps
from hf_treelang.train.folders import finished_run
from hf_treelang.train.loop import build_model
from hf_treelang.train.run import resolve

from .runner import execute_runs, sweep_run

LEARNING_RATES = (3e-4, 1e-3, 3e-3)
SEEDS = (0, 1, 2)
SIZE_TOLERANCE = 0.03  # every architecture's parameter count within 3 % of the laptop TreeLang model's, per task
RATE_METRIC = "eval_kl_bp_k{k}"  # the validation (in-sample) KL to BP_{k_train} at the last evaluation
TUNING_FRACTION = 4  # the rate is chosen at a quarter of the budget


def _overrides(**fields) -> str:
    return ",".join(f"{name}={value}" for name, value in fields.items())


def architecture(name: str, layers: int) -> dict:
    """The run arguments of architecture ``name`` at the laptop TreeLang size (d = 64, d' = 256) with ``layers``
    layers, dropout off: ``{}`` for TreeLang, else ``model_type`` and ``config_overrides``."""
    bert = _overrides(hidden_size=64, num_hidden_layers=layers, num_attention_heads=1, intermediate_size=256,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    table = {
        "treelang": {},
        "bert": {"model_type": "bert", "config_overrides": bert},
        "roberta": {"model_type": "roberta", "config_overrides": bert},
        "distilbert": {"model_type": "distilbert", "config_overrides": _overrides(
            dim=64, n_layers=layers, n_heads=1, hidden_dim=256, dropout=0.0, attention_dropout=0.0)},
        "gpt2": {"model_type": "gpt2", "config_overrides": _overrides(
            n_embd=64, n_layer=layers, n_head=1, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)},
        # the gated MLP has three matrices: d' = 179 gives about the parameters of two at 256
        "llama": {"model_type": "llama", "config_overrides": _overrides(
            hidden_size=64, num_hidden_layers=layers, num_attention_heads=1, num_key_value_heads=1,
            intermediate_size=179)},
        # RWKV's channel mixing has a third (receptance) matrix: d' = 232 brings it to the TreeLang count
        "rwkv": {"model_type": "rwkv", "config_overrides": _overrides(
            hidden_size=64, num_hidden_layers=layers, intermediate_size=232)},
    }
    if name not in table:
        raise ValueError(f"architecture must be one of {sorted(table)}, got {name!r}")
    return table[name]


# the grammars: each task's laptop preset on the paper's grammar, and the RHM config rhm-v8-m4-s2-L3 (P = 2^15)
GRAMMARS = {"paper": {"arguments": {}, "depth": 4},
            "rhm": {"arguments": {"num_symbols": 8, "num_rules": 4, "arity": 2, "depth": 3, "num_train": 2**15},
                    "depth": 3}}
ROOT = ("treelang", "bert", "roberta", "gpt2", "llama", "rwkv")
CELLS = (  # (grammar, task, architecture, seeds)
    *[("paper", "root", name, SEEDS) for name in ROOT],
    *[("paper", "clm", name, SEEDS) for name in ("treelang", "gpt2", "llama", "rwkv")],
    ("paper", "mlm", "treelang", SEEDS), *[("paper", "mlm", name, (0,)) for name in ("bert", "roberta", "distilbert")],
    *[("rhm", "root", name, (0,)) for name in ROOT],
)


@dataclass(frozen=True)
class Cell:
    """One grammar × task × architecture of the comparison, with the seeds of its main runs."""

    grammar: str
    task: str
    architecture: str
    seeds: tuple

    @property
    def name(self) -> str:
        return f"{self.grammar}-{self.task}-{self.architecture}"

    def arguments(self, **extra) -> dict:
        """The run arguments (the training scripts' names): the task's laptop preset, the grammar, the architecture
        and one CPU thread, with ``extra`` on top."""
        grammar = GRAMMARS[self.grammar]
        return {**grammar["arguments"], **architecture(self.architecture, grammar["depth"]), "cpu_threads": 1,
                **extra}


RESUME_CHECKPOINT_STEPS = 2048  # a main run checkpoints this often only to resume from (minutes on one CPU thread)


def cells() -> list:
    return [Cell(*entry) for entry in CELLS]


def budget(cell: Cell) -> int:
    """The optimizer steps of the cell's preset run (what the main runs train)."""
    run = resolve(cell.task, cell.arguments())
    return optimizer_steps(run.training_args, run.data_args.num_train)


def rate_name(rate: float) -> str:
    return f"lr{rate:g}"


def tuning_runs(cell: Cell, out) -> list:
    """The cell's rate search: model seed 0 at each of :data:`LEARNING_RATES` for a quarter of the budget."""
    steps = budget(cell) // TUNING_FRACTION
    return [sweep_run(cell.task, cell.arguments(learning_rate=rate, seed=0, max_steps=steps), out,
                      f"tune/{cell.name}-{rate_name(rate)}") for rate in LEARNING_RATES]


def main_runs(cell: Cell, rate: float, out) -> list:
    """The cell's runs at its chosen ``rate``: every seed at the full budget, with a checkpoint to resume from every
    :data:`RESUME_CHECKPOINT_STEPS` steps (a stopped sweep loses little of a long run; not part of a run's identity)."""
    return [sweep_run(cell.task, cell.arguments(learning_rate=rate, seed=seed,
                                                resume_checkpoint_steps=RESUME_CHECKPOINT_STEPS),
                      out, f"main/{cell.name}-s{seed}")
            for seed in cell.seeds]


def final_metric(run_dir, name: str) -> float | None:
    """``name`` at the last evaluation of a finished run folder (its ``eval_history.json``), None when absent."""
    entries = [entry for entry in read_history(Path(run_dir) / "eval_history.json") if name in entry]
    if not entries:
        return None
    value = max(entries, key=lambda entry: entry["step"])[name]
    return float(value) if value is not None and math.isfinite(float(value)) else None


def choose_rate(cell: Cell, runs: list) -> dict:
    """The rate of the tuning run with the lowest final validation KL to BP_{k_train}; the record says every
    candidate's KL (None: the run diverged or has no evaluation, never chosen)."""
    candidates = {}
    for rate, run in zip(LEARNING_RATES, runs):
        metric = RATE_METRIC.format(k=run.data_args.k_train)
        candidates[rate_name(rate)] = {"learning_rate": rate, metric: final_metric(run.output_dir, metric),
                                       "steps": run.training_args.max_steps, "identity": run.identity}
    scored = [(entry[metric], entry["learning_rate"]) for entry in candidates.values() if entry[metric] is not None]
    if not scored:
        raise RuntimeError(f"cell {cell.name}: no tuning run has a final {metric}; see {runs[0].output_dir.parent}")
    best = min(scored)[1]
    return {"cell": cell.name, "metric": metric, "chosen": best, "candidates": candidates}


def is_current(record: dict | None, runs: list) -> bool:
    """Whether ``record`` (a cell's entry of ``rates.json``) was chosen from exactly ``runs``: every candidate's rate
    and run identity (its arguments, data format and starting point) as today's. A record of other runs is stale:
    never used, its search trained again."""
    if not record:
        return False
    candidates = record.get("candidates") or {}
    return len(candidates) == len(runs) and all(
        (candidates.get(rate_name(run.training_args.learning_rate)) or {}).get("identity") == run.identity
        for run in runs)


def parameter_counts() -> dict:
    """``{cell name: parameters}`` of every cell's model, built as its runs build it."""
    counts = {}
    for cell in cells():
        run = resolve(cell.task, cell.arguments())
        model = build_model(dataclasses.replace(run, task=run.model_task))
        counts[cell.name] = sum(p.numel() for p in model.parameters())
    return counts


def check_sizes(tolerance: float = SIZE_TOLERANCE, counts: dict | None = None) -> dict:
    """Every cell's parameter count (``counts``, default :func:`parameter_counts`) against the TreeLang model of its
    grammar and task; raises a ValueError naming the cells outside ``tolerance``. Returns ``{cell name: (parameters,
    reference)}``."""
    counts = parameter_counts() if counts is None else counts
    sizes, outside = {}, []
    for cell in cells():
        reference = counts[f"{cell.grammar}-{cell.task}-treelang"]
        sizes[cell.name] = (counts[cell.name], reference)
        if abs(counts[cell.name] / reference - 1) > tolerance:
            outside.append(f"{cell.name} {counts[cell.name]:,} against {reference:,}")
    if outside:
        raise ValueError(f"parameter counts outside ±{tolerance:.0%} of TreeLang's: " + "; ".join(outside))
    return sizes


def selected(cells_: list, only, what: str = "cell") -> list:
    """The cells (or any items with a ``name``, called ``what`` in the errors) named in ``only`` (names or their
    prefixes; None: all), refusing an empty selection or name (an empty prefix would select every item) and a name
    that matches none."""
    if only is None:
        return list(cells_)
    if isinstance(only, str) or not only or any(not isinstance(name, str) or not name.strip() for name in only):
        raise ValueError(f"--only {only!r}: name one {what} or more by its name or a prefix of it (an empty name would "
                         f"select every {what}; leave --only out for all); the {what}s: "
                         f"{', '.join(c.name for c in cells_)}")
    chosen = [cell for cell in cells_ if any(cell.name == name or cell.name.startswith(name) for name in only)]
    unknown = [name for name in only if not any(c.name == name or c.name.startswith(name) for c in cells_)]
    if unknown:
        raise ValueError(f"--only {unknown}: no {what} is named so; the {what}s: "
                         f"{', '.join(c.name for c in cells_)}")
    return chosen


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def best_rate(record: dict) -> tuple | None:
    """``(final metric, rate)`` of the best candidate of a rate record (:func:`choose_rate`'s rule: the lowest final
    validation KL, a candidate without one never chosen); None when no candidate has one."""
    scored = [(entry[record["metric"]], entry["learning_rate"]) for entry in record["candidates"].values()
              if _number(entry.get(record["metric"]))]
    return min(scored) if scored else None


def check_rate_record(cell: str, record, path) -> None:
    """Refuse a record of ``rates.json`` that is not one :func:`choose_rate` writes — an object with the ``metric``,
    the ``candidates`` (an object of objects, each with its ``learning_rate``) and the ``chosen`` rate — or whose
    ``chosen`` rate is not its search's best (a hand edit: a rate never searched, or not the lowest final validation
    KL). The main runs train the chosen rate, so such a record would train them at a rate the protocol did not
    choose; the error names the file, the cell and what to do."""
    where = f"{path}: cell {cell!r}"
    fix = "restore the file or delete the cell's record to search its rate again"
    if not isinstance(record, dict):
        raise ValueError(f"{where} holds {type(record).__name__} {record!r}, not a rate record; {fix}")
    candidates, metric, chosen = record.get("candidates"), record.get("metric"), record.get("chosen")
    if not isinstance(metric, str) or not isinstance(candidates, dict) or not candidates or not all(
            isinstance(entry, dict) and _number(entry.get("learning_rate")) for entry in candidates.values()):
        raise ValueError(f"{where}: a rate record has a `metric` name and `candidates`, an object of the searched "
                         f"runs each with its `learning_rate`; this one has not; {fix}")
    if not _number(chosen):
        raise ValueError(f"{where}: `chosen` must be the rate its search chose, got {chosen!r}; {fix}")
    best = best_rate(record)
    searched = sorted(entry["learning_rate"] for entry in candidates.values())
    if chosen not in searched:
        raise ValueError(f"{where}: the chosen rate {chosen:g} was never searched (the candidates: "
                         f"{', '.join(f'{rate:g}' for rate in searched)}); the main runs train the search's best; "
                         f"{fix}")
    if best is None or best[1] != chosen:
        shown = ("no candidate has a final metric" if best is None
                 else f"the best is {best[1]:g} ({metric} {best[0]:.4g})")
        raise ValueError(f"{where}: the chosen rate {chosen:g} is not its search's best ({shown}); the main runs "
                         f"train the search's best; {fix}")


def read_rates(path) -> dict:
    """The cells' rate records of ``rates.json`` (none when the file does not exist), each checked
    (:func:`check_rate_record`). A file that is not a JSON object — cut short, empty, a list — is refused in one
    line naming it, never read as no records: that would search every cell again and write over the file."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        rates = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} is damaged (not readable JSON: {error}); restore it, or delete it to search every "
                         f"cell's rate again") from None
    if not isinstance(rates, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(rates), "a number")
        raise ValueError(f"{path} is damaged (it holds {kind}, not an object of the cells' rate records); restore "
                         f"it, or delete it to search every cell's rate again")
    for cell, record in rates.items():
        check_rate_record(cell, record, path)
    return rates


def run_protocol(out, *, stage: str = "all", workers: int = 2, only=None, log=print) -> dict:
    """Train the comparison into ``out`` (resumable: finished runs are skipped, interrupted ones resume).

    ``stage``: ``"tune"`` (the rate searches), ``"main"`` (the seeds at the chosen rates; the cells whose search has
    finished) or ``"all"`` (both in turn). Writes ``out/rates.json`` (each cell's candidates and chosen rate) and
    returns it."""
    if stage not in ("tune", "main", "all"):
        raise ValueError(f"stage must be one of ('tune', 'main', 'all'), got {stage!r}")
    out = Path(out)
    chosen_cells = selected(cells(), only)
    rates_file = out / "rates.json"
    rates = read_rates(rates_file)
    searches = {cell.name: tuning_runs(cell, out) for cell in chosen_cells}
    for cell in chosen_cells:  # a record of other runs than today's search is dropped, never used
        if cell.name in rates and not is_current(rates[cell.name], searches[cell.name]):
            log(f"{cell.name}: its recorded rate search is of other runs; searching again")
            del rates[cell.name]
    if stage == "main" and not any(cell.name in rates or all(
            finished_run(run.output_dir, run.identity) for run in searches[cell.name]) for cell in chosen_cells):
        raise ValueError(f"--stage main: no cell of {', '.join(cell.name for cell in chosen_cells)} has a chosen rate "
                         f"({rates_file}) or a finished rate search; run --stage tune (or all) into {out} first")
    if stage in ("tune", "all"):
        # a cell whose search is recorded needs none of its runs' folders (a published OUT keeps rates.json only)
        unsearched = [cell for cell in chosen_cells if cell.name not in rates]
        runs = [run for cell in unsearched for run in searches[cell.name]]
        log(f"rate searches: {len(runs)} runs of {len(unsearched)} cells, {workers} at a time")
        execute_runs(runs, out, workers=workers, threads=1, estimate=False, log=log)
    for cell in chosen_cells:
        if cell.name not in rates and all(finished_run(run.output_dir, run.identity) for run in searches[cell.name]):
            rates[cell.name] = choose_rate(cell, searches[cell.name])
    rates_file.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(rates_file, rates)
    if stage in ("main", "all"):
        ready = [cell for cell in chosen_cells if cell.name in rates]
        runs = [run for cell in ready for run in main_runs(cell, rates[cell.name]["chosen"], out)]
        waiting = [cell.name for cell in chosen_cells if cell.name not in rates]
        if waiting:
            log(f"not yet tuned (their main runs wait): {', '.join(waiting)}")
        log(f"main runs: {len(runs)} runs of {len(ready)} cells, {workers} at a time")
        execute_runs(runs, out, workers=workers, threads=1, estimate=False, log=log)
    return rates


__all__ = ["CELLS", "Cell", "GRAMMARS", "LEARNING_RATES", "SEEDS", "architecture", "budget", "cells", "check_sizes",
           "best_rate", "check_rate_record", "choose_rate", "final_metric", "is_current", "main_runs",
           "parameter_counts", "read_rates", "run_protocol", "selected", "tuning_runs"]
