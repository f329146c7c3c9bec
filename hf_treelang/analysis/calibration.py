"""Calibration against the oracle (paper Fig. 1b, App. E.4): model probabilities vs exact BP marginals.

For an MLM checkpoint the compared distribution is that of one masked leaf per sequence (at a random position, as
in training); for a root-classification checkpoint it is the root. Two input sets are compared:

* in-sample: fresh sequences drawn from the checkpoint's own data distribution (grammar, depth ℓ, k_train);
* uniform: sequences of independent uniform symbols, far outside the training distribution.

BP is BP_{k_train}, the oracle matched to the training data. Metrics per set: mean D_KL(BP ‖ model), argmax
agreement, mean Spearman rank correlation of the q-vectors, and the accuracies of both against the true symbol.
The model's distribution is over the q symbols: a checkpoint of another architecture (whose logits also cover the
special ids) is renormalised over the symbols' logits, and ``mass_on_special_tokens``, the mean probability it put
on the other ids, is reported beside the metrics (0.0 for a TreeLang model).

Dimension glossary: ``n`` sequences, ``L = 2**ℓ`` positions, ``q`` symbols.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.sampling import sample_trees, uniform_sequences
from hf_treelang.core.metrics import compare_distributions
from hf_treelang.core.oracle import predicted_marginals, task_inputs
from hf_treelang.core.resources import calibration_bytes, check_memory, model_sizes
from hf_treelang.plotting import pyplot, save_figure

from .activations import Prediction, predict_distribution
from .checkpoint import as_checkpoint
from .io import check_positive, cli_error, prepare_output, write_json

INPUT_SETS = ("in_sample", "uniform")


@dataclass
class CalibrationSet:
    """Model vs BP on one input set.

    Attributes:
        name: ``"in_sample"`` or ``"uniform"``.
        model_probs: (n, q) model probabilities of the compared symbol.
        bp_probs: (n, q) BP_{k_train} marginals of the same symbol.
        targets: (n,) the true symbol (the masked leaf, or the root), -1 for uniform inputs (no accuracy there).
        metrics: kl_mean, kl_median, argmax_match, spearman_mean, model_accuracy, bp_accuracy, num_sequences,
            num_impossible (inputs of probability zero under BP_{k_train}, left out of every metric),
            mass_on_special_tokens (the mean over all n inputs of the model's probability off the q symbols; None
            for a ``predict`` that returns bare probabilities).
    """

    name: str
    model_probs: np.ndarray
    bp_probs: np.ndarray
    targets: np.ndarray
    metrics: dict = field(default_factory=dict)
    possible: np.ndarray | None = None  # (n,) bool: inputs BP_{k_train} gives a positive probability (None: all)


@dataclass
class CalibrationResult:
    """Output of :func:`calibrate`: the in-sample and uniform comparisons and the setting they were made in."""

    task: str
    depth: int
    filter_level: int
    num_symbols: int
    sets: dict

    @property
    def in_sample(self) -> CalibrationSet:
        return self.sets["in_sample"]

    @property
    def uniform(self) -> CalibrationSet:
        return self.sets["uniform"]

    def to_dict(self) -> dict:
        return {
            "task": self.task,
            "depth": self.depth,
            "filter_level": self.filter_level,
            "num_symbols": self.num_symbols,
            "sets": {name: s.metrics for name, s in self.sets.items()},
        }


def _accuracy(probs: np.ndarray, targets: np.ndarray) -> float | None:
    known = targets >= 0
    if not known.any():
        return None
    return float((probs[known].argmax(-1) == targets[known]).mean())


def calibrate_predictor(
    predict: Callable,
    grammar: Grammar,
    *,
    task: str,
    depth: int,
    filter_level: int,
    num_samples: int = 10_000,
    seed: int = 20_240_601,
) -> CalibrationResult:
    """Compare any predictor with BP_{filter_level}; :func:`calibrate` wraps a checkpoint into ``predict``.

    Args:
        predict: ``predict(input_ids (n, L) int64, positions (n,) or None) -> (n, q)`` probabilities of the masked
            leaf at ``positions`` (task ``"mlm"``, the mask id is q) or of the root (task ``"root"``, positions None),
            or a :class:`~hf_treelang.analysis.activations.Prediction` (the probabilities and the mass off the
            symbols).
        grammar: the grammar of the data.
        task: ``"mlm"`` or ``"root"``.
        depth: ℓ.
        filter_level: k_train, the data distribution of the in-sample set and the BP that is compared.
        num_samples: sequences per input set (10^4 in the paper).
        seed: seed of the inputs and mask positions (kept away from the training streams by default).
    """
    if task not in ("mlm", "root"):
        raise ValueError(f"task must be 'mlm' or 'root', got {task!r}")
    num_samples = check_positive("num_samples", num_samples)
    q = grammar.num_symbols
    bp = BeliefPropagation(grammar, depth, filter_level, on_impossible="flag")
    trees = sample_trees(grammar, num_samples, depth, filter_level, seed)
    inputs = {"in_sample": trees.leaves, "uniform": uniform_sequences(q, num_samples, depth, seed,
                                                                        arity=grammar.arity)}
    sets = {}
    for index, name in enumerate(INPUT_SETS):
        data = task_inputs(task, inputs[name], trees.roots, mask_token_id=q, sampling_seed=seed + 1 + index)
        ids = data.inputs.numpy()  # (n, L)
        positions = None if data.positions is None else data.positions.numpy()
        bp_probs = predicted_marginals(bp, data.inputs, data.positions).numpy()  # (n, q)
        targets = data.labels.numpy()
        if name == "uniform":
            targets = np.full(num_samples, -1)  # a uniform input has no true root, and its leaves carry no signal
        prediction = predict(ids, positions)
        mass = prediction.mass_on_special_tokens if isinstance(prediction, Prediction) else None
        model_probs = np.asarray(getattr(prediction, "probabilities", prediction), dtype=np.float64)
        if model_probs.shape != (num_samples, q):
            raise ValueError(f"predict must return shape ({num_samples}, {q}), got {model_probs.shape}")
        possible = ~bp.infer(data.inputs, downward=False).impossible.numpy()
        comparison = compare_distributions(bp_probs[possible], model_probs[possible])
        metrics = comparison.summary()
        metrics.update(
            model_accuracy=_accuracy(model_probs[possible], targets[possible]),
            bp_accuracy=_accuracy(bp_probs[possible], targets[possible]),
            num_sequences=int(num_samples),
            num_impossible=int((~possible).sum()),
            mass_on_special_tokens=mass,
        )
        sets[name] = CalibrationSet(name, model_probs, bp_probs, np.asarray(targets), metrics, possible)
    return CalibrationResult(task=task, depth=depth, filter_level=filter_level, num_symbols=q, sets=sets)


def calibrate(
    checkpoint,
    *,
    task: str | None = None,
    num_samples: int = 10_000,
    seed: int = 20_240_601,
    batch_size: int = 1024,
    device="cpu",
) -> CalibrationResult:
    """Fig. 1b for a checkpoint: its probabilities vs BP marginals, in-sample and on uniform sequences.

    Args:
        checkpoint: a checkpoint folder (or a loaded :class:`~hf_treelang.analysis.Checkpoint`) of an MLM or a
            root-classification model: TreeLang's, or a run of another architecture (``--model_type``).
        task: ``"mlm"`` (the masked symbol) or ``"root"``; ``None`` takes the checkpoint's own task. A task the
            checkpoint was not trained for is an error.
        num_samples: sequences per input set; refused before any sampling when the estimated peak memory
            (:func:`hf_treelang.core.resources.calibration_bytes`) exceeds the machine's.
        seed: seed of the inputs and mask positions.
        batch_size: inference batch size.
    """
    ckpt = as_checkpoint(checkpoint, task=task, device=device)
    if ckpt.task is None:
        raise ValueError(
            f"checkpoint {ckpt.describe()} has no task head; calibration needs an MLM (TreeLangForMaskedLM) or a "
            "root-classification (TreeLangForSequenceClassification) checkpoint"
        )
    batch_size = check_positive("batch_size", batch_size)
    num_samples = check_positive("num_samples", num_samples)
    model = model_sizes(ckpt.config, ckpt.depth, ckpt.num_symbols)
    check_memory({"--num-samples": num_samples},
                 lambda sizes: calibration_bytes(sizes["--num-samples"], batch_size, model),
                 what=f"two input sets, their BP messages and model probabilities at depth {ckpt.depth}")

    def predict(ids, positions):
        return predict_distribution(ckpt, ids, positions, batch_size=batch_size)

    return calibrate_predictor(
        predict,
        ckpt.grammar,
        task=ckpt.task,
        depth=ckpt.depth,
        filter_level=ckpt.filter_level,
        num_samples=num_samples,
        seed=seed,
    )


_TITLES = {"in_sample": "in-sample inputs", "uniform": "uniform random inputs"}


def plot_calibration(result: CalibrationResult):
    """Scatter of model probability vs BP marginal, one panel per input set (Fig. 1b)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(result.sets), figsize=(4.2 * len(result.sets), 4.0), squeeze=False)
    symbol = "masked leaf" if result.task == "mlm" else "root"
    colors = plt.get_cmap("tab10")
    for ax, (name, s) in zip(axes[0], result.sets.items()):
        shown = slice(None) if s.possible is None else s.possible  # BP's flagged (uniform) rows are not drawn
        for a in range(result.num_symbols):
            ax.scatter(s.bp_probs[shown, a], s.model_probs[shown, a], s=3, alpha=0.25, color=colors(a),
                       label=f"symbol {a}", rasterized=True)
        ax.plot([0, 1], [0, 1], color="black", lw=0.8, ls="--")
        m = s.metrics
        if s.possible is not None and not s.possible.any():
            ax.set_title(f"{_TITLES.get(name, name)}\nevery input has probability 0 under BP", fontsize=9)
        else:
            ax.set_title(f"{_TITLES.get(name, name)}\nKL={m['kl_mean']:.3g}  match={_number(m['argmax_match'], 3)}  "
                         f"Spearman={_number(m['spearman_mean'], 3)}", fontsize=9)
        ax.set_xlabel(f"BP$_{{{result.filter_level}}}$ marginal of the {symbol}")
        ax.set_ylabel("model probability")
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.02, 1.02)
        ax.set_aspect("equal")
    axes[0][0].legend(fontsize=7, markerscale=3, loc="upper left")
    fig.suptitle(f"Calibration ({'MLM' if result.task == 'mlm' else 'root classification'}, "
                 f"ℓ={result.depth}, k={result.filter_level}, q={result.num_symbols})", fontsize=10)
    fig.tight_layout()
    return fig


def write_outputs(result: CalibrationResult, out_dir) -> dict:
    """Write calibration.png and calibration.json into ``out_dir``; returns their paths."""
    out = prepare_output(out_dir)
    paths = {"figure": save_figure(plot_calibration(result), out / "calibration.png")}
    paths["json"] = write_json(out / "calibration.json", result.to_dict())
    return paths


def _number(value, digits: int = 4) -> str:
    return "n/a" if value is None or (isinstance(value, float) and not np.isfinite(value)) else f"{value:.{digits}f}"


def summary_lines(result: CalibrationResult) -> list:
    """One console line per input set; accuracies read ``n/a (no true symbol)`` where the inputs have no label
    (uniform sequences) and the impossible inputs left out are counted."""
    lines = []
    for name, s in result.sets.items():
        m = s.metrics
        if m["model_accuracy"] is None:
            accuracy = "accuracy n/a (no true symbol)"
        else:
            accuracy = f"accuracy model {_number(m['model_accuracy'])} / BP {_number(m['bp_accuracy'])}"
        impossible = f"  ({m['num_impossible']} impossible under BP left out)" if m.get("num_impossible") else ""
        special = m.get("mass_on_special_tokens")
        special = f"  mass on special tokens {special:.3g} (renormalised away)" if special else ""
        kl = "n/a" if m["kl_mean"] is None or not np.isfinite(m["kl_mean"]) else f"{m['kl_mean']:.4g}"
        lines.append(f"{name:>9}: KL={kl}  argmax match={_number(m['argmax_match'])}  "
                     f"Spearman={_number(m['spearman_mean'])}  {accuracy}{impossible}{special}")
    return lines


def run(args) -> int:
    """``hf-treelang calibration`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    try:
        result = calibrate(args.checkpoint, task=args.task, num_samples=args.num_samples, seed=args.seed,
                             batch_size=args.batch_size, device=args.device)
    except (ValueError, TypeError) as error:
        return cli_error("calibration", error)
    paths = write_outputs(result, args.out)
    for line in summary_lines(result):
        print(line)
    print(f"wrote {paths['figure']} and {paths['json']}")
    return 0
