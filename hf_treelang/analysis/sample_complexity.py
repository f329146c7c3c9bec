"""Sample complexity: test accuracy against the number P of training sequences, in two modes of one command.

**The arms of Fig. 1f** (``hf-treelang sample-complexity CHECKPOINT``; paper Sec. 4): for every P, three arms are
trained on root classification:

* ``scratch``   — no pre-training: a randomly initialised encoder of the MLM checkpoint's architecture (○);
* ``frozen``    — the MLM-pre-trained encoder, frozen; only the new readout learns (□);
* ``finetuned`` — the MLM-pre-trained encoder, fine-tuned with the readout (◇).

**One learner against the exact optimum** (``hf-treelang sample-complexity --model_type ARCH --sizes ...``, no
checkpoint: :func:`learner_sweep`): a grammar (the paper's, or a Random Hierarchy Model), an architecture (the
comparison's size and tuned rate by default) and a grid of P × seeds, each run trained from scratch until its
validation accuracy stops improving (:class:`hf_treelang.sweep.sample_complexity.Curve`), reported as its test accuracy
on k_test = 0 next to BP_0's on the same inputs and its KL to BP_0, with P* — the smallest P at which the mean accuracy
over the seeds comes within ε of BP_0's, defined in :mod:`hf_treelang.analysis.pstar` — and its spread over seeds
(the files of :mod:`hf_treelang.analysis.sample_complexity_results`: ``runs.csv``/``runs.json``, ``pstar.json``, a
dataset card, figures).

The runs are a sweep (:mod:`hf_treelang.sweep`): ``OUT/runs/<arm>-P<P>/`` (or ``OUT/runs/<grammar>/<architecture>-P<P>
-seed<s>/``) each, trained on worker processes, the estimated time printed before the first step, the figures redrawn
as runs finish. A rerun into the same folder skips a run only when its identity is unchanged — the same arguments, the
same content of the MLM checkpoint, the same data format — trains it again when that changed, and resumes interrupted
runs; a folder written with other settings (sizes, epochs, steps, ...) is refused unless ``force``.

In the arms mode the reported number is the test accuracy on data of the pre-training filter level (k_test =
k_train), next to the accuracy of BP_{k_train} on the same inputs. With several ``seeds`` every (arm, P) is trained
once per seed (folders ``<arm>-P<P>-seed<s>``; one seed keeps ``<arm>-P<P>``): an arm's accuracy is the mean over its
seeds, and the gain of pre-training is reported per P as the gap frozen − scratch (and fine-tuned − scratch), paired by
seed, with its mean and its spread over the seeds (:class:`SeedGap`).

The arms mode's defaults (P = 2^7, 2^9, 2^11; 20 epochs capped at 600 steps: 80, 320 and 600 steps; 2048 test
sequences) keep the default MLM checkpoint of ``training/run_mlm.py`` (the paper's model) within 15 minutes on a 2-core
CPU: 3 000 optimizer steps, the frozen arm's at about a fifth of the cost (an estimate from measured steps/s, see
``training/README.md``, "Sweeps").
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hf_treelang.plotting import pyplot, save_figure
from hf_treelang.sweep import sample_complexity as learners
from hf_treelang.sweep.estimate import epoch_steps
from hf_treelang.sweep.runner import RUNS_DIR, execute_runs, sweep_run
from hf_treelang.train.folders import finished_run

from . import sample_complexity_results as results
from .checkpoint import as_checkpoint
from .io import check_output_dir, check_positive, cli_error, prepare_output, write_json
from .pstar import DELTA, EPSILON, check_threshold

ARMS = ("scratch", "frozen", "finetuned")
FIGURE_ID = "1f"
_MARKERS = {"scratch": ("o", "no pre-training"), "frozen": ("s", "MLM pre-trained, frozen"),
            "finetuned": ("D", "MLM pre-trained, fine-tuned")}
ARCHITECTURE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
                "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps", "classifier_pooling")


@dataclass(frozen=True)
class SeedGap:
    """The gain of one arm over ``scratch`` at one P: arm − scratch test accuracy, paired by seed.

    Attributes:
        size: P.
        values: arm − scratch for every seed at which both runs finished, in the order of the seeds.
        mean: their mean (None without any).
        spread: their sample standard deviation over the seeds (``ddof=1``; None with fewer than two seeds).
    """

    size: int
    values: list
    mean: float | None
    spread: float | None

    def to_dict(self) -> dict:
        return {"size": self.size, "values": self.values, "mean": self.mean, "spread": self.spread,
                "num_seeds": len(self.values)}

    def describe(self) -> str:
        """``P=128: +0.120 ± 0.030 (3 seeds)``; one seed: ``(1 seed, no spread)``."""
        if self.mean is None:
            return f"P={self.size}: n/a (no seed with both runs finished)"
        if self.spread is None:
            return f"P={self.size}: {self.mean:+.3f} (1 seed, no spread)"
        return f"P={self.size}: {self.mean:+.3f} ± {self.spread:.3f} ({len(self.values)} seeds)"


def seed_gaps(sizes, arm: list, scratch: list) -> list:
    """:class:`SeedGap` per P of ``arm`` − ``scratch``.

    Args:
        sizes: the P values.
        arm, scratch: per P, the list of test accuracies per seed (same seed order; None where a run failed).
    """
    gaps = []
    for size, ours, theirs in zip(sizes, arm, scratch):
        values = [float(a) - float(b) for a, b in zip(ours, theirs) if a is not None and b is not None]
        gaps.append(SeedGap(size=int(size), values=values, mean=statistics.fmean(values) if values else None,
                            spread=statistics.stdev(values) if len(values) > 1 else None))
    return gaps


def _mean(values: list) -> float | None:
    finished = [v for v in values if v is not None]
    return statistics.fmean(finished) if finished else None


@dataclass
class SampleComplexityResult:
    """Test accuracy vs P for each arm.

    Attributes:
        sizes: the numbers P of labelled training sequences.
        accuracy: arm -> list (one per P) of root test accuracies on k_test = k_train data, the mean over the seeds
            whose run finished (None: every run of that P failed).
        bp_accuracy: accuracy of the matched BP on the same test data (the optimum).
        runs: arm -> list of the run folders (P outer, seed inner).
        failed: ``{run name: error}`` of the runs that failed.
        seeds: the seeds of the runs.
        accuracy_per_seed: arm -> per P, the list of accuracies per seed (None: the run failed).
        num_test: the test sequences behind every accuracy (what an accuracy's sampling noise reads).
    """

    sizes: list
    accuracy: dict
    bp_accuracy: float | None
    checkpoint: str
    depth: int
    filter_level: int
    runs: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)
    seeds: list = field(default_factory=lambda: [0])
    accuracy_per_seed: dict = field(default_factory=dict)
    num_test: int | None = None

    def gap(self, arm: str = "frozen") -> list | None:
        """:func:`seed_gaps` of ``arm`` − ``scratch`` per P; None when either arm was not run."""
        if arm not in self.accuracy_per_seed or "scratch" not in self.accuracy_per_seed or arm == "scratch":
            return None
        return seed_gaps(self.sizes, self.accuracy_per_seed[arm], self.accuracy_per_seed["scratch"])

    def to_dict(self) -> dict:
        gaps = {arm: self.gap(arm) for arm in ARMS if arm != "scratch"}
        return {
            "checkpoint": self.checkpoint,
            "depth": self.depth,
            "filter_level": self.filter_level,
            "sizes": self.sizes,
            "seeds": self.seeds,
            "accuracy": self.accuracy,
            "accuracy_per_seed": self.accuracy_per_seed,
            "gap_vs_scratch": {arm: [g.to_dict() for g in gap] for arm, gap in gaps.items() if gap is not None},
            "bp_accuracy": self.bp_accuracy,
            "num_test": self.num_test,
            "runs": {arm: [str(r) for r in runs] for arm, runs in self.runs.items()},
            "failed": self.failed,
        }


def check_sizes(sizes) -> list:
    """The numbers P (:func:`hf_treelang.sweep.sample_complexity.check_sizes`) as a list."""
    return list(learners.check_sizes(sizes))


def check_arms(arms) -> tuple:
    arms = tuple(arms)
    unknown = [a for a in arms if a not in ARMS]
    if not arms or unknown or len(set(arms)) != len(arms):
        raise ValueError(f"arms must be a non-empty subset of {ARMS} without repeats, got {arms}")
    return arms


def check_seeds(seeds) -> list:
    """``seeds`` (an int or a list of ints >= 0 without repeats) as a list
    (:func:`hf_treelang.sweep.sample_complexity.check_seeds`)."""
    return list(learners.check_seeds(seeds))


def run_name(arm: str, size: int, seed: int | None = None) -> str:
    """A run's folder name under ``OUT/runs``: ``<arm>-P<P>``, or ``<arm>-P<P>-seed<s>`` in a sweep of several
    seeds (``seed`` given)."""
    return f"{arm}-P{size}" if seed is None else f"{arm}-P{size}-seed{seed}"


def hierarchy_arguments(grammar) -> dict:
    """The data arguments of a Random Hierarchy Model grammar (``num_rules``, ``num_classes``, ``arity``), so that
    every arm trains on the checkpoint's own grammar; ``{}`` for the paper's grammar."""
    params = grammar.params
    if params.get("ensemble") != "random_hierarchy":
        return {}
    return {"num_rules": int(params["num_rules"]), "num_classes": int(params["num_classes"]),
            "arity": int(params["arity"])}


def sample_complexity_arguments(checkpoint_path, *, depth: int, num_symbols: int, sigma: float, grammar_seed: int,
                                filter_level: int, model_kwargs: dict, sizes, arms=ARMS, epochs: float = 20.0,
                                max_steps: int | None = 600, num_test: int = 2048, num_eval: int = 512,
                                batch_size: int = 32, learning_rate: float = 1e-4, seeds=(0,),
                                num_evaluations: int = 1, use_dataset_builder: bool = True,
                                classifier_hidden_size: int = 0, progress: bool = False,
                                grammar_file: str | None = None) -> list:
    """The runs of Fig. 1f as ``(arm, P, task, arguments)`` in the training scripts' names: sizes outer, then
    ``seeds`` (the run's ``arguments["seed"]``), arms inner.

    Every run is the ``paper`` preset (the paper's model and optimiser) with the sizes, schedule and data given here;
    ``scratch`` trains the checkpoint's architecture from scratch (task ``root``), ``frozen`` and ``finetuned`` start
    from ``checkpoint_path`` (task ``finetune``, a new root readout of ``classifier_hidden_size`` hidden units). The
    checkpoint need not exist yet: ``hf-treelang reproduce --plan`` lists these runs before the MLM model is trained.
    With ``grammar_file`` (the checkpoint's grammar as a file) every run is on that grammar (``--grammar_file``), and
    ``sigma``, ``grammar_seed``, ``num_symbols`` and ``use_dataset_builder`` are not used.
    """
    entries = []
    for size, seed, arm in itertools.product(sizes, check_seeds(seeds), arms):
        # a cap, not a count: the Trainer's max_steps would replace the epochs even for small P
        capped = max_steps is not None and epoch_steps(size, batch_size, epochs) > max_steps
        grammar = {"grammar_file": str(grammar_file)} if grammar_file is not None else {
            "grammar_seed": int(grammar_seed),
            **({} if "num_rules" in model_kwargs else {"sigma": float(sigma)}),  # an RHM's rules are uniform
            "num_symbols": int(num_symbols), "use_dataset_builder": bool(use_dataset_builder)}
        arguments = {
            "preset": "paper", **grammar, "depth": int(depth), "k_train": int(filter_level),
            "num_train": int(size), "num_eval": int(num_eval), "num_test": int(num_test),
            "k_test": [int(filter_level)], **model_kwargs,
            "num_train_epochs": float(epochs), "max_steps": int(max_steps) if capped else -1,
            "per_device_train_batch_size": int(batch_size), "learning_rate": float(learning_rate),
            "seed": int(seed), "num_evaluations": int(num_evaluations), "num_checkpoints": 0,
            "checkpoint_epochs": None, "report_to": "none", "logging_steps": 10**9, "disable_tqdm": not progress,
        }
        if arm != "scratch":
            arguments.update(model_name_or_path=str(checkpoint_path), freeze_encoder=arm == "frozen",
                             classifier_hidden_size=int(classifier_hidden_size))
        entries.append((arm, size, "root" if arm == "scratch" else "finetune", arguments))
    return entries


def sample_complexity_sweep(
    checkpoint,
    sizes,
    work_dir,
    *,
    arms=ARMS,
    epochs: float = 20.0,
    max_steps: int | None = 600,
    num_test: int = 2048,
    num_eval: int = 512,
    batch_size: int = 32,
    learning_rate: float = 1e-4,
    seeds=(0,),
    num_evaluations: int = 1,
    use_dataset_builder: bool = True,
    classifier_hidden_size: int = 0,
    workers: int | None = None,
    threads: int | None = None,
    force: bool = False,
    out_dir=None,
    log: Callable | None = None,
    train: Callable | None = None,
    progress: bool = True,
    grammar_file: str | None = None,
) -> SampleComplexityResult:
    """Run the arms of Fig. 1f over the list ``sizes`` of P (a sweep into ``work_dir``) and collect their accuracies.

    Args:
        checkpoint: the MLM-pre-trained checkpoint folder (its config fixes q, ℓ, k_train, the grammar and the
            architecture of the ``scratch`` arm).
        sizes: the numbers P of labelled root-classification sequences.
        work_dir: the sweep folder: ``runs/<arm>-P<P>/`` per run (``runs/<arm>-P<P>-seed<s>/`` with several seeds),
            ``results.jsonl``, ``sweep.json``.
        arms: a subset of ``("scratch", "frozen", "finetuned")``.
        epochs: training epochs per run (more steps for larger P, as training on a fixed number of epochs does).
        max_steps: a cap on the optimizer steps of one run (None: none); runs with fewer steps keep their epochs.
        num_test: test sequences (k_test = k_train); ``num_eval``: in-sample sequences of the KL to BP.
        batch_size, learning_rate: the optimiser settings (paper: 32, 1e-4, Adam).
        seeds: the seeds of the runs (an int or a list): each (arm, P) is trained once per seed, and the result has
            the frozen − scratch gap per P with its spread over the seeds (:meth:`SampleComplexityResult.gap`).
        num_evaluations: evaluations (with the BP-KL callback) per run, besides the one before training.
        use_dataset_builder: draw the data through ``load_dataset("treelang", ...)`` (True) or ``sample_trees``.
        grammar_file: train every arm on the grammar in this file (``--grammar_file``), the checkpoint's; default: the
            grammar the checkpoint's config names, or its grammar.json when it names no seed (a grammar file's run).
        classifier_hidden_size: hidden units of the pre-trained arms' new root readout (0: linear).
        workers: runs trained at the same time (default: one per CPU core; 0: in this process).
        threads: torch threads per run (``torch.set_num_threads``, >= 1; default: the CPU cores shared out among
            the workers).
        force: run in a ``work_dir`` written with other settings (runs of unchanged identity are kept).
        out_dir: where the figure is redrawn as runs finish (default: none until :func:`write_outputs`).
        log: called with lines of text (the estimated time, each finished run).
        train: ``train(run) -> {"accuracy", "bp_accuracy", ...}`` called in this process for each
            :class:`~hf_treelang.train.run.Run` instead of the sweep runner (``reproduce``'s own runner, tests).
    """
    seeds = check_seeds(seeds)
    if threads is not None:
        threads = check_positive("threads", threads)
    ckpt = as_checkpoint(checkpoint, task="mlm")
    sizes = check_sizes(sizes)
    arms = check_arms(arms)
    if not epochs > 0:
        raise ValueError(f"epochs must be > 0, got {epochs!r}")
    if max_steps is not None:
        check_positive("max_steps", max_steps)
    config = ckpt.config
    if grammar_file is None and config.grammar_seed is None:  # no seed to regenerate it: the run's grammar.json
        saved = ckpt.path / "grammar.json"
        grammar_file = str(saved if saved.is_file() else ckpt.path.parent / "grammar.json")
    hierarchy = hierarchy_arguments(ckpt.grammar) if grammar_file is None else {}  # a file gives them itself
    entries = sample_complexity_arguments(
        ckpt.path, depth=ckpt.depth, num_symbols=ckpt.num_symbols, sigma=config.sigma,  # None: an RHM's (no σ)
        grammar_seed=None if config.grammar_seed is None else int(config.grammar_seed), filter_level=ckpt.filter_level,
        model_kwargs={**{name: getattr(config, name) for name in ARCHITECTURE}, **hierarchy},
        sizes=sizes, arms=arms, grammar_file=grammar_file,
        epochs=epochs, max_steps=max_steps, num_test=num_test, num_eval=num_eval, batch_size=batch_size,
        learning_rate=learning_rate, seeds=seeds, num_evaluations=num_evaluations,
        use_dataset_builder=use_dataset_builder, classifier_hidden_size=classifier_hidden_size,
        progress=progress and workers == 0,
    )

    def name(arm: str, size: int, arguments: dict) -> str:  # one seed keeps the folders of a single-seed sweep
        return run_name(arm, size, arguments["seed"] if len(seeds) > 1 else None)

    runs = [sweep_run(task, arguments, work_dir, name(arm, size, arguments),
                      point={"arm": arm, "num_train": size, "seed": arguments["seed"]}, figures=(FIGURE_ID,))
            for arm, size, task, arguments in entries]

    def collect(records: dict) -> SampleComplexityResult:
        per_seed = {arm: [[None] * len(seeds) for _ in sizes] for arm in arms}
        runs = {arm: [] for arm in arms}
        bp_accuracy = None
        for arm, size, _, arguments in entries:
            record = records.get(name(arm, size, arguments))
            # where the run was trained: its summary says so when a caller's `train` put it elsewhere
            runs[arm].append(Path((record or {}).get("output_dir")
                                  or Path(work_dir) / RUNS_DIR / name(arm, size, arguments)))
            if record is None or record.get("accuracy") is None:
                continue
            per_seed[arm][sizes.index(size)][seeds.index(arguments["seed"])] = float(record["accuracy"])
            if record.get("bp_accuracy") is not None:
                bp_accuracy = float(record["bp_accuracy"])
        accuracy = {arm: [_mean(values) for values in per_seed[arm]] for arm in arms}
        return SampleComplexityResult(sizes=sizes, accuracy=accuracy, bp_accuracy=bp_accuracy,
                                      checkpoint=str(ckpt.path), depth=ckpt.depth, filter_level=ckpt.filter_level,
                                      runs=runs, seeds=seeds, accuracy_per_seed=per_seed, num_test=int(num_test))

    if train is not None:
        return collect({run.name: train(run) for run in runs})
    source = {"command": "sample-complexity", "runs": [{"name": r.name, "task": r.task, "arguments": r.arguments}
                                                       for r in runs]}

    def redraw(records: dict, runs: list) -> None:
        if out_dir is not None:
            write_outputs(collect(records), out_dir)

    sweep = execute_runs(runs, work_dir, source=source, force=force, workers=workers, threads=threads,
                         progress=progress, log=log, on_record=redraw)
    result = collect(sweep.records)
    result.failed = dict(sweep.failed)
    return result


def plot_sample_complexity(result: SampleComplexityResult):
    """Test accuracy vs P (log scale), one marker per arm, BP as a dashed line (Fig. 1f); runs not finished are
    left out."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 3.8))
    for arm, values in result.accuracy.items():
        marker, label = _MARKERS[arm]
        points = [(p, a) for p, a in zip(result.sizes, values) if a is not None]
        ax.plot([p for p, _ in points], [a for _, a in points], marker=marker, mfc="none", label=label)
    if result.bp_accuracy is not None:
        ax.axhline(result.bp_accuracy, color="black", ls="--", lw=0.9, label="BP (optimal)")
    ax.set_xscale("log", base=2)
    ax.set_xlim(min(result.sizes) / 1.5, max(result.sizes) * 1.5)
    ax.set_xlabel("labelled training sequences P")
    ax.set_ylabel(f"root test accuracy ($k_{{test}}$={result.filter_level})")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7)
    ax.set_title(f"Sample complexity (ℓ={result.depth}, k={result.filter_level})", fontsize=10)
    fig.tight_layout()
    return fig


def write_outputs(result: SampleComplexityResult, out_dir) -> dict:
    out = prepare_output(out_dir)
    paths = {"figure": save_figure(plot_sample_complexity(result), out / "sample_complexity.png")}
    paths["json"] = write_json(out / "sample_complexity.json", result.to_dict())
    return paths


# ---------------------------------------------------------------- one learner against the exact optimum


@dataclass
class LearnerResult:
    """What :func:`learner_sweep` trained and wrote.

    Attributes:
        curve: the :class:`~hf_treelang.sweep.sample_complexity.Curve`.
        rows: one row per finished run (:data:`~hf_treelang.analysis.sample_complexity_results.ROW_COLUMNS`).
        entry: the curve's ``pstar.json`` object (None without a finished run).
        failed: ``{run name: error}`` of the runs that failed.
        files: the files written into the sweep folder.
    """

    curve: object
    rows: list
    entry: dict | None
    failed: dict = field(default_factory=dict)
    files: list = field(default_factory=list)


def learner_rows(runs: list, work_dir) -> list:
    """The rows of the ``runs`` (of a sweep in ``work_dir``) finished with today's identity."""
    rows = []
    for run in runs:
        summary = finished_run(run.output_dir, run.identity)
        if summary is not None:
            rows.append(results.run_row(run, summary, work_dir))
    return rows


def learner_sweep(curve, work_dir, *, epsilon: float = EPSILON, delta: float = DELTA, workers: int | None = None,
                  threads: int | None = None, force: bool = False, progress: bool = True,
                  log: Callable | None = None) -> LearnerResult:
    """Train every (P, seed) of ``curve`` (a :class:`~hf_treelang.sweep.sample_complexity.Curve`) into ``work_dir``
    and write its results there (:func:`~hf_treelang.analysis.sample_complexity_results.write_results`: the rows, P*
    at ``epsilon`` and P*_KL at ``delta``, the figures), redrawn as runs finish.

    Every check — the grid, the thresholds, each run's arguments, an ``work_dir`` of other runs without ``force`` —
    runs before the first run starts; ``workers``, ``threads``, ``progress`` and ``log`` as in
    :func:`sample_complexity_sweep`."""
    check_threshold("epsilon", epsilon, 1.0)
    check_threshold("delta", delta)
    if threads is not None:
        threads = check_positive("threads", threads)
    runs = curve.runs(work_dir)
    source = {"command": "sample-complexity", "runs": [{"name": r.name, "task": r.task, "arguments": r.arguments}
                                                       for r in runs]}

    def redraw(records: dict, planned: list) -> None:
        rows = learner_rows(planned, work_dir)
        if rows:
            results.write_results(rows, work_dir, epsilon=epsilon, delta=delta)

    sweep = execute_runs(runs, work_dir, source=source, force=force, workers=workers, threads=threads,
                         progress=progress, log=log, on_record=redraw)
    rows = learner_rows(runs, work_dir)
    written = results.write_results(rows, work_dir, epsilon=epsilon, delta=delta) if rows else {"entries": [],
                                                                                                "files": []}
    return LearnerResult(curve=curve, rows=rows, entry=(written["entries"] or [None])[0], failed=dict(sweep.failed),
                         files=written["files"])


LEARNER_OPTIONS = ("model_type", "config_overrides", "rates", "grammar_seed", "sigma", "num_symbols", "depth",
                   "num_rules", "num_classes", "arity", "num_eval", "early_stopping_patience",
                   "early_stopping_eval_steps", "early_stopping_min_steps", "early_stopping_threshold", "epsilon",
                   "delta")
ARMS_OPTIONS = ("arms", "epochs")
ARMS_DEFAULTS = {"sizes": [2**7, 2**9, 2**11], "arms": list(ARMS), "epochs": 20.0, "max_steps": 600,
                 "num_test": 2048, "batch_size": 32, "learning_rate": 1e-4}
HIERARCHY_DEFAULTS = {"num_symbols": 8, "depth": 3}  # the comparison's Random Hierarchy Model, rhm-v8-m4-s2-L3
PAPER_DEFAULTS = {"num_symbols": 4, "depth": 4}


def check_mode(args) -> None:
    """Refuse, in one line, an option of the other mode: the learner's options without a CHECKPOINT, the arms' with
    one."""
    learner = args.checkpoint is None
    other = ARMS_OPTIONS if learner else LEARNER_OPTIONS
    given = [name for name in other if getattr(args, name, None) is not None]
    if given:
        if learner:
            raise ValueError(f"--{given[0]} is an option of Fig. 1f's arms, which start from an MLM CHECKPOINT; "
                             f"without one the command trains the learner --model_type from scratch")
        raise ValueError(f"--{given[0]} is an option of the learner mode (no CHECKPOINT); with a CHECKPOINT the "
                         f"arms of Fig. 1f train on its grammar and architecture")


def learner_curve(args):
    """The :class:`~hf_treelang.sweep.sample_complexity.Curve` the command line of the learner mode names."""
    if args.sizes is None:
        raise ValueError("--sizes: the learner mode (no CHECKPOINT) needs the grid of P, e.g. --sizes 2^10,2^12,2^14")
    hierarchy = any(getattr(args, name) is not None for name in ("num_rules", "num_classes", "arity"))
    defaults = HIERARCHY_DEFAULTS if hierarchy else PAPER_DEFAULTS
    num_symbols = defaults["num_symbols"] if args.num_symbols is None else args.num_symbols
    depth = defaults["depth"] if args.depth is None else args.depth
    seed = 0 if args.grammar_seed is None else args.grammar_seed
    if hierarchy:
        if args.num_rules is None:
            raise ValueError("--num_classes / --arity choose a Random Hierarchy Model, which needs --num_rules (m)")
        if args.sigma is not None:
            raise ValueError(f"--sigma {args.sigma} is the paper's grammar's; a Random Hierarchy Model (--num_rules) "
                             f"has uniform rules: leave it out")
        grammar = learners.random_hierarchy(num_symbols, args.num_rules, depth, 2 if args.arity is None else args.arity,
                                            args.num_classes, seed)
    else:
        grammar = learners.paper_grammar(seed, 1.0 if args.sigma is None else args.sigma, num_symbols, depth)
    learner = learners.default_learner(args.model_type or "treelang", grammar, learning_rate=args.learning_rate,
                                       config_overrides=args.config_overrides,
                                       rates_file=args.rates or learners.RATES_FILE)
    given = {"patience": args.early_stopping_patience, "every": args.early_stopping_eval_steps,
             "min_steps": args.early_stopping_min_steps, "threshold": args.early_stopping_threshold,
             "max_steps": args.max_steps}
    stopping = learners.Stopping(**{name: value for name, value in given.items() if value is not None})
    sizes = {"num_validation": args.num_eval, "num_test": args.num_test}
    return learners.Curve(grammar, learner, tuple(args.sizes), tuple(check_seeds(args.seeds)), stopping,
                          batch_size=args.batch_size, **{name: value for name, value in sizes.items()
                                                         if value is not None})


def _shown(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _pstar_line(name: str, found: dict, threshold: str) -> str:
    if found["mean"] is None:
        return f"{name} ({threshold}): none ({found['reason']}" + (
            f": at most {found['at_most']:,})" if found["at_most"] is not None else ")")
    spread = "" if found["std"] is None else f", ± {found['std']:,.0f} over the {found['num_seeds_crossing']} seeds " \
                                              f"that cross alone"
    return f"{name} ({threshold}): {found['mean']:,.0f}{spread}"


def run_learner(args) -> int:
    """The learner mode of ``hf-treelang sample-complexity`` (no CHECKPOINT); returns the exit status."""
    try:
        check_mode(args)
        if args.threads is not None:
            check_positive("threads", args.threads)
        check_output_dir(args.out)
        curve = learner_curve(args)
        result = learner_sweep(curve, args.out, epsilon=EPSILON if args.epsilon is None else args.epsilon,
                               delta=DELTA if args.delta is None else args.delta, workers=args.workers,
                               threads=args.threads, force=args.force, progress=not args.no_progress,
                               log=lambda line: print(line, flush=True))
    except (ValueError, TypeError) as error:
        return cli_error("sample-complexity", error)
    entry = result.entry
    print(f"{curve.name}: learning rate {curve.learner.learning_rate:g}")
    if entry is not None:
        for size, accuracy, bp, kl in zip(entry["sizes"], entry["accuracy"], entry["bp_accuracy"], entry["kl_bp0"]):
            print(f"  P={size}: accuracy {_shown(accuracy)} (BP_0 {_shown(bp)}), KL to BP_0 {_shown(kl, 4)}")
        print(_pstar_line("P*", entry["pstar"], f"accuracy within ε={entry['epsilon']:g} of BP_0's"))
        print(_pstar_line("P*_KL", entry["pstar_kl"], f"KL to BP_0 below δ={entry['delta']:g}"))
        print(f"wrote {', '.join(str(path) for path in result.files)}")
    for name, error in result.failed.items():
        print(f"run {name} failed: {error}")
    return 1 if result.failed else 0


def run(args) -> int:
    """``hf-treelang sample-complexity`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status:
    Fig. 1f's arms with a CHECKPOINT, one learner's curve without (:func:`run_learner`)."""
    if args.checkpoint is None:
        return run_learner(args)
    try:
        check_mode(args)
        options = {name: ARMS_DEFAULTS[name] if getattr(args, name) is None else getattr(args, name)
                   for name in ARMS_DEFAULTS}
        check_seeds(args.seeds)
        if args.threads is not None:
            check_positive("threads", args.threads)
        check_output_dir(args.out)
        result = sample_complexity_sweep(
            args.checkpoint, options["sizes"], args.out, arms=options["arms"], epochs=options["epochs"],
            max_steps=options["max_steps"], num_test=options["num_test"], batch_size=options["batch_size"],
            learning_rate=options["learning_rate"], seeds=args.seeds, workers=args.workers, threads=args.threads,
            force=args.force, out_dir=args.out, progress=not args.no_progress,
            log=lambda line: print(line, flush=True),
        )
    except (ValueError, TypeError) as error:
        return cli_error("sample-complexity", error)
    paths = write_outputs(result, args.out)
    mean = "" if len(result.seeds) == 1 else f", mean over {len(result.seeds)} seeds"
    for arm, values in result.accuracy.items():
        print(f"{arm:>10}: " + "  ".join(f"P={p}: {'failed' if a is None else f'{a:.3f}'}"
                                         for p, a in zip(result.sizes, values)) + mean)
    for arm in ("frozen", "finetuned"):
        gap = result.gap(arm)
        if gap is not None:
            print(f"{arm} − scratch (mean ± standard deviation over seeds): " + "  ".join(g.describe() for g in gap))
    print(f"BP accuracy: {result.bp_accuracy}")
    print(f"wrote {paths['figure']} and {paths['json']}")
    for name, error in result.failed.items():
        print(f"run {name} failed: {error}")
    return 1 if result.failed else 0
