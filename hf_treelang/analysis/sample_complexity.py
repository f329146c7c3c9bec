"""Sample complexity of root classification with and without MLM pre-training (paper Fig. 1f, Sec. 4).

For every number P of labelled training sequences, three arms are trained on root classification:

* ``scratch``   — no pre-training: a randomly initialised encoder of the MLM checkpoint's architecture (○);
* ``frozen``    — the MLM-pre-trained encoder, frozen; only the new linear readout learns (□);
* ``finetuned`` — the MLM-pre-trained encoder, fine-tuned with the readout (◇).

Each run goes through the training package (:mod:`hf_treelang.training`), in its own folder, and is skipped when
that folder already holds its finished metrics, so an interrupted sweep resumes. The reported number is the test
accuracy on data of the pre-training filter level (k_test = k_train), next to the Bayes-optimal BP accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tqdm.auto import tqdm

from hf_treelang.plotting import pyplot, save_figure
from hf_treelang.train.runs import RunSpec, run_training

from .checkpoint import as_checkpoint
from .io import check_positive, cli_error, prepare_output, write_json

ARMS = ("scratch", "frozen", "finetuned")
_MARKERS = {"scratch": ("o", "no pre-training"), "frozen": ("s", "MLM pre-trained, frozen"),
            "finetuned": ("D", "MLM pre-trained, fine-tuned")}


@dataclass
class SampleComplexityResult:
    """Test accuracy vs P for each arm.

    Attributes:
        sizes: the numbers P of labelled training sequences.
        accuracy: arm -> list (one per P) of root test accuracies on k_test = k_train data.
        bp_accuracy: accuracy of the matched BP on the same test data (the optimum).
        runs: arm -> list of the run folders.
    """

    sizes: list
    accuracy: dict
    bp_accuracy: float | None
    checkpoint: str
    depth: int
    filter_level: int
    runs: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint,
            "depth": self.depth,
            "filter_level": self.filter_level,
            "sizes": self.sizes,
            "accuracy": self.accuracy,
            "bp_accuracy": self.bp_accuracy,
            "runs": {arm: [str(r) for r in runs] for arm, runs in self.runs.items()},
        }


def check_sizes(sizes) -> list:
    if sizes is None or len(sizes) == 0:
        raise ValueError("sizes must list at least one number of labelled sequences P, got none")
    return [check_positive("sizes", p) for p in sizes]


def sample_complexity_sweep(
    checkpoint,
    sizes,
    work_dir,
    *,
    arms=ARMS,
    epochs: float = 20.0,
    max_steps: int | None = None,
    num_test: int = 10_000,
    batch_size: int = 32,
    learning_rate: float = 1e-4,
    seed: int = 0,
    num_evaluations: int = 2,
    use_dataset_builder: bool = True,
    train: Callable = run_training,
    progress: bool = True,
) -> SampleComplexityResult:
    """Run the three arms of Fig. 1f over the list ``sizes`` of P and collect their test accuracies.

    Args:
        checkpoint: the MLM-pre-trained checkpoint folder (its config fixes q, ℓ, k_train, the grammar and the
            architecture of the ``scratch`` arm).
        sizes: the numbers P of labelled root-classification sequences.
        work_dir: where each run gets its folder ``<arm>/P<P>`` (finished runs are reused).
        arms: a subset of ``("scratch", "frozen", "finetuned")``.
        epochs: training epochs per run (more steps for larger P, as training on a fixed number of epochs does).
        max_steps: an optional cap on the steps of one run.
        num_test: test (and validation) sequences.
        batch_size, learning_rate: the optimiser settings (paper: 32, 1e-4, Adam).
        seed: seed of the runs.
        num_evaluations: evaluations (with the BP-KL callback) per run, besides the one before training.
        use_dataset_builder: draw the data through ``load_dataset("treelang", ...)`` (True) or ``sample_trees``.
        train: the function that runs one training, ``train(RunSpec) -> dict`` of final metrics (the training
            package by default; tests may pass a stand-in).
    """
    ckpt = as_checkpoint(checkpoint, task="mlm")
    sizes = check_sizes(sizes)
    arms = tuple(arms)
    unknown = [a for a in arms if a not in ARMS]
    if not arms or unknown:
        raise ValueError(f"arms must be a non-empty subset of {ARMS}, got {arms}")
    if not epochs > 0:
        raise ValueError(f"epochs must be > 0, got {epochs!r}")
    work = prepare_output(work_dir)
    config = ckpt.config
    model_kwargs = {name: getattr(config, name) for name in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
        "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps", "classifier_pooling")}
    accuracy = {arm: [] for arm in arms}
    runs = {arm: [] for arm in arms}
    bp_accuracy = None
    jobs = [(arm, p) for p in sizes for arm in arms]
    for arm, p in tqdm(jobs, desc="sample complexity", disable=not progress):
        spec = RunSpec(
            task="root",
            output_dir=work / arm / f"P{p}",
            depth=ckpt.depth,
            num_symbols=ckpt.num_symbols,
            sigma=float(config.sigma),
            grammar_seed=int(config.grammar_seed),
            filter_level=ckpt.filter_level,
            num_train=p,
            num_test=num_test,
            k_tests=(ckpt.filter_level,),
            model_kwargs=model_kwargs,
            init_from=None if arm == "scratch" else ckpt.path,
            freeze_encoder=arm == "frozen",
            epochs=epochs,
            max_steps=max_steps,
            batch_size=batch_size,
            learning_rate=learning_rate,
            seed=seed,
            num_evaluations=num_evaluations,
            use_dataset_builder=use_dataset_builder,
            progress=progress,
        )
        metrics = train(spec)
        accuracy[arm].append(float(metrics["accuracy"]))
        runs[arm].append(spec.output_dir)
        if metrics.get("bp_accuracy") is not None:
            bp_accuracy = float(metrics["bp_accuracy"])
    return SampleComplexityResult(sizes=sizes, accuracy=accuracy, bp_accuracy=bp_accuracy, checkpoint=str(ckpt.path),
                                  depth=ckpt.depth, filter_level=ckpt.filter_level, runs=runs)


def plot_sample_complexity(result: SampleComplexityResult):
    """Test accuracy vs P (log scale), one marker per arm, BP as a dashed line (Fig. 1f)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 3.8))
    for arm, values in result.accuracy.items():
        marker, label = _MARKERS[arm]
        ax.plot(result.sizes, values, marker=marker, mfc="none", label=label)
    if result.bp_accuracy is not None:
        ax.axhline(result.bp_accuracy, color="black", ls="--", lw=0.9, label="BP (optimal)")
    ax.set_xscale("log", base=2)
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


def run(args) -> int:
    """``hf-treelang sample-complexity`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    try:
        result = sample_complexity_sweep(args.checkpoint, args.sizes, Path(args.out) / "runs", arms=args.arms,
                                         epochs=args.epochs, max_steps=args.max_steps, num_test=args.num_test,
                                         batch_size=args.batch_size, learning_rate=args.learning_rate,
                                         seed=args.seed)
    except (ValueError, TypeError) as error:
        return cli_error("sample-complexity", error)
    paths = write_outputs(result, args.out)
    for arm, values in result.accuracy.items():
        print(f"{arm:>10}: " + "  ".join(f"P={p}: {a:.3f}" for p, a in zip(result.sizes, values)))
    print(f"BP accuracy: {result.bp_accuracy}")
    print(f"wrote {paths['figure']} and {paths['json']}")
    return 0


def main(argv=None) -> int:
    """``hf-treelang sample-complexity`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    from hf_treelang import cli

    return cli.run_command("sample-complexity", argv)
