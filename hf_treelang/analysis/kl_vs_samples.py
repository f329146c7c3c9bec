"""The root classifiers' distance to the exact BP against the number P of training sequences (paper Fig. 9, App. E.3).

For every finished run of an accuracy-vs-P sweep (trained on P sequences of filter level k_train), two numbers:

* **in sample** — the mean KL(BP_{k_train} ‖ model) of the root posterior on held-out sequences drawn like the
  training data, the run's own final ``eval_kl_bp_k{k_train}`` (:class:`hf_treelang.train.callbacks.BPKLCallback`);
* **uniform** — the same KL on sequences of i.i.d. uniform symbols (out of sample: :func:`uniform_sequences`),
  measured here on the run's final model. Sequences to which BP_{k_train} gives probability zero have no posterior
  and are left out (their number is reported).

The figure has one panel per input set, one curve per k_train (the paper's colours), KL against P on log axes: the
paper's finding is that the in-sample KL falls with P while the out-of-sample one need not — a classifier can match BP
on the data it will see without implementing BP everywhere.

Dimension glossary: ``n`` sequences, ``l`` depth (ℓ), ``q`` symbols.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.metrics import compare_with_bp, kl_divergence
from hf_treelang.core.noise import mean_error
from hf_treelang.core.oracle import predicted_marginals
from hf_treelang.core.sampling import uniform_sequences
from hf_treelang.plotting import level_color, pyplot, save_figure
from hf_treelang.train.callbacks import symbol_log_probabilities

from .checkpoint import load_checkpoint
from .io import prepare_output, write_json

INPUT_SETS = ("in_sample", "uniform")
UNIFORM_SEED = 20_240_602  # away from every training and evaluation stream


@dataclass
class KLPoint:
    """One run: its k_train, P, and KL(BP_{k_train} ‖ model) on each input set with the standard error of that mean
    over its sequences (``kl_standard_error``; None where the run did not record it)."""

    filter_level: int
    num_train: int
    kl: dict  # {"in_sample": float, "uniform": float}
    num_impossible: int
    output_dir: str
    kl_standard_error: dict = field(default_factory=dict)  # {"in_sample": float | None, "uniform": float}

    def to_dict(self) -> dict:
        return {"filter_level": self.filter_level, "num_train": self.num_train, "kl": dict(self.kl),
                "kl_standard_error": dict(self.kl_standard_error), "num_impossible_uniform": self.num_impossible,
                "output_dir": self.output_dir}


@dataclass
class KLFigure:
    """Every run's point, the figure's title and the depth ℓ (the colour scale of k_train)."""

    title: str
    depth: int
    points: list = field(default_factory=list)

    def curves(self, input_set: str, *, errors: bool = False) -> dict:
        """``{k_train: (sizes, kl)}`` of one input set, sizes increasing; with ``errors``, ``(sizes, kl,
        standard errors)``."""
        by_level: dict = {}
        for point in sorted(self.points, key=lambda p: (p.filter_level, p.num_train)):
            sizes, values, ses = by_level.setdefault(point.filter_level, ([], [], []))
            sizes.append(point.num_train)
            values.append(point.kl[input_set])
            ses.append(point.kl_standard_error.get(input_set))
        return {k: curve if errors else curve[:2] for k, curve in by_level.items()}

    def to_dict(self) -> dict:
        def curve(sizes, values, ses) -> dict:
            return {"sizes": sizes, "kl": values, **({} if None in ses else {"kl_standard_error": ses})}

        return {"title": self.title, "depth": self.depth, "points": [point.to_dict() for point in self.points],
                "curves": {name: {str(k): curve(*values) for k, values in self.curves(name, errors=True).items()}
                           for name in INPUT_SETS}}


@torch.no_grad()
def uniform_kl(output_dir, *, num_samples: int = 10_000, seed: int = UNIFORM_SEED,
               batch_size: int = 1024) -> tuple[float, int, float]:
    """(mean KL(BP_{k_train} ‖ model) of the root on ``num_samples`` uniform sequences, how many were impossible,
    the standard error of that mean over the possible ones) for the root classifier in ``output_dir`` (k_train is its
    config's ``filter_level``)."""
    checkpoint = load_checkpoint(output_dir, task="root")
    model, grammar = checkpoint.model, checkpoint.grammar
    depth, k, q = checkpoint.depth, checkpoint.filter_level, grammar.num_symbols
    bp = BeliefPropagation(grammar, depth, k, on_impossible="flag")
    inputs = torch.from_numpy(uniform_sequences(q, num_samples, depth, seed, arity=grammar.arity))  # (n, s**l)
    possible = ~bp.infer(inputs, downward=False).impossible  # (n,)
    inputs = inputs[possible]
    targets = predicted_marginals(bp, inputs)  # (n', q)
    logits = torch.cat([model(input_ids=inputs[start:start + batch_size].to(checkpoint.device)).logits.cpu()
                        for start in range(0, inputs.shape[0], batch_size)])  # (n', q)
    log_model, _ = symbol_log_probabilities(logits, q, getattr(model.config, "num_classes", None))  # (n', q)
    per_sequence = kl_divergence(targets, log_model)  # (n',)
    kl = compare_with_bp(log_model, targets)["kl"]
    return float(kl), int((~possible).sum()), mean_error(per_sequence)


def kl_vs_samples(points, *, title: str, depth: int, num_samples: int = 10_000) -> KLFigure:
    """The :class:`KLFigure` of the sweep runs ``points`` (``SweepPoint`` of :mod:`.accuracy_curves`: ``final``
    holds the in-sample KL, ``output_dir`` the model measured on uniform inputs)."""
    figure = KLFigure(title=title, depth=depth)
    for point in points:
        key = f"eval_kl_bp_k{point.filter_level}"
        if key not in point.final:
            raise ValueError(f"run {point.output_dir!r} has no final {key} (its in-sample KL to the matched BP)")
        uniform, impossible, uniform_error = uniform_kl(point.output_dir, num_samples=num_samples)
        in_sample_error = point.final.get(f"eval_kl_se_bp_k{point.filter_level}")
        figure.points.append(KLPoint(point.filter_level, point.num_train,
                                     {"in_sample": float(point.final[key]), "uniform": uniform}, impossible,
                                     str(point.output_dir),
                                     {"in_sample": None if in_sample_error is None else float(in_sample_error),
                                      "uniform": uniform_error}))
    return figure


def plot_kl_figure(result: KLFigure):
    """Two panels (in sample | uniform inputs): KL against P per k_train, both axes logarithmic."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8.6, 3.6), sharey=True)
    for ax, name in zip(axes, INPUT_SETS):
        for k, (sizes, values) in result.curves(name).items():
            ax.plot(sizes, values, marker="o", mfc="none", color=level_color(k, result.depth), label=f"$k_{{train}}$={k}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("P (labelled training sequences)")
        ax.set_title("in sample (k = k_train)" if name == "in_sample" else "uniform (out-of-sample) inputs",
                     fontsize=9)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("mean $D_{KL}$(BP$_{k_{train}}$ ‖ model) of the root")
    fig.suptitle(result.title, fontsize=10)
    fig.tight_layout()
    return fig


def write_outputs(result: KLFigure, out_dir, name: str) -> dict:
    """Write ``<name>.png`` and ``<name>.json`` into ``out_dir``."""
    out = prepare_output(out_dir)
    paths = {"figure": save_figure(plot_kl_figure(result), out / f"{name}.png")}
    paths["json"] = write_json(out / f"{name}.json", result.to_dict())
    return paths


__all__ = ["INPUT_SETS", "KLFigure", "KLPoint", "kl_vs_samples", "plot_kl_figure", "uniform_kl", "write_outputs"]
