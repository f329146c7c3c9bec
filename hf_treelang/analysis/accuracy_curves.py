"""Root accuracy against the number P of labelled training sequences (paper Fig. 2a, App. E.1, E.2, E.3).

Every point is the final test accuracy of one root-classification run (:mod:`hf_treelang.train.run`), trained on P
sequences of filter level k_train, and the dashed line of the same colour is the accuracy of BP_{k_train} on the same
test inputs (the BP-KL callback's ``eval_bp_acc_ktest{k}``). The figures differ in what varies and what is tested:

* Fig. 2a: one curve per k_train, tested out of sample on the full hierarchy (k_test = 0); BP_{k_train} is then
  mismatched and not optimal. App. E.3: the same runs tested in sample (k_test = k_train), BP optimal.
* App. E.1: k_train = 0, one curve per number of encoder blocks n_L.
* App. E.2: Fig. 2a on other grammars (grammar seeds 1, 15, 31), one panel per grammar.

The reproduction trains the runs (``hf-treelang reproduce``); this module only gathers their summaries into
:class:`AccuracyFigure` panels and draws them. Colours: :func:`hf_treelang.plotting.level_color` per k_train.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hf_treelang.plotting import level_color, pyplot, save_figure

from .io import prepare_output, write_json

K_TESTS = ("full", "train")  # the test sets of a panel: k_test = 0 (the full hierarchy) or k_test = k_train


@dataclass(frozen=True)
class SweepPoint:
    """One finished root-classification run of a sweep.

    Attributes:
        filter_level: k_train of its training data.
        num_train: P, its labelled training sequences.
        num_layers: n_L, its encoder blocks.
        grammar_seed: the grammar of its data.
        final: its final metrics (``eval_acc_ktest{k}``, ``eval_bp_acc_ktest{k}``, ...; a finished run's ``final``, :func:`hf_treelang.train.folders.finished_run`).
        output_dir: its folder.
        num_test: the test sequences per k_test behind its accuracies (None: not known).
    """

    filter_level: int
    num_train: int
    num_layers: int
    grammar_seed: int
    final: dict
    output_dir: str = ""
    num_test: int | None = None


@dataclass
class AccuracyCurve:
    """Accuracy vs P of the runs that share one value of the varied setting.

    Attributes:
        label: the legend, ``"k_train=2"`` or ``"n_L=3"`` (typeset by the plot).
        filter_level: k_train of the runs (the colour for a k_train curve).
        num_layers: n_L of the runs.
        sizes: P of each point, increasing.
        accuracy: the model's final test accuracy at each P.
        bp_accuracy: BP_{k_train} on the same test inputs (the dashed line), or None if a run did not record it.
        runs: the run folders.
        num_test: the test sequences per k_test behind every accuracy of the curve, the fewest of its runs' (what
            an accuracy's sampling noise reads; None when a run does not say).
    """

    label: str
    filter_level: int
    num_layers: int
    sizes: list
    accuracy: list
    bp_accuracy: float | None
    runs: list = field(default_factory=list)
    num_test: int | None = None

    def to_dict(self) -> dict:
        return {"label": self.label, "filter_level": self.filter_level, "num_layers": self.num_layers,
                "sizes": self.sizes, "accuracy": self.accuracy, "bp_accuracy": self.bp_accuracy, "runs": self.runs,
                "num_test": self.num_test}


@dataclass
class AccuracyPanel:
    """One panel: its curves, tested on ``k_test`` (``"full"``: k_test = 0; ``"train"``: k_test = k_train)."""

    title: str
    k_test: str
    grammar_seed: int
    curves: list

    def to_dict(self) -> dict:
        return {"title": self.title, "k_test": self.k_test, "grammar_seed": self.grammar_seed,
                "curves": [curve.to_dict() for curve in self.curves]}


@dataclass
class AccuracyFigure:
    """A figure of :class:`AccuracyPanel` side by side, e.g. Fig. 2a | App. E.3, or the three grammars of E.2."""

    title: str
    depth: int
    panels: list

    def to_dict(self) -> dict:
        return {"title": self.title, "depth": self.depth, "panels": [panel.to_dict() for panel in self.panels]}


def _k_test(point: SweepPoint, k_test: str) -> int:
    return 0 if k_test == "full" else point.filter_level


def accuracy_panel(points, *, k_test: str, vary: str, title: str) -> AccuracyPanel:
    """Gather runs of one grammar into curves of accuracy vs P.

    Args:
        points: :class:`SweepPoint` of one grammar seed.
        k_test: ``"full"`` (accuracy and BP on k_test = 0) or ``"train"`` (on k_test = k_train).
        vary: ``"filter_level"`` (one curve per k_train) or ``"num_layers"`` (one curve per n_L).
        title: the panel's title.
    """
    if k_test not in K_TESTS:
        raise ValueError(f"k_test must be one of {K_TESTS}, got {k_test!r}")
    if vary not in ("filter_level", "num_layers"):
        raise ValueError(f"vary must be 'filter_level' or 'num_layers', got {vary!r}")
    points = list(points)
    if not points:
        raise ValueError("points must hold at least one finished run, got none")
    seeds = {p.grammar_seed for p in points}
    if len(seeds) != 1:
        raise ValueError(f"points of one panel must share one grammar seed, got seeds {sorted(seeds)}")
    curves = []
    for value in sorted({getattr(p, vary) for p in points}):
        group = sorted((p for p in points if getattr(p, vary) == value), key=lambda p: p.num_train)
        sizes = [p.num_train for p in group]
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"points: two runs with {vary}={value} have the same P; sizes {sizes}")
        accuracy, bp = [], None
        for p in group:
            k = _k_test(p, k_test)
            key = f"eval_acc_ktest{k}"
            if key not in p.final:
                raise ValueError(f"run {p.output_dir!r} has no test accuracy on k_test={k} ({key}); train it with "
                                 f"k_test {k} among its test sets")
            accuracy.append(float(p.final[key]))
            bp = p.final.get(f"eval_bp_acc_ktest{k}", bp)
        first = group[0]
        label = f"k_train={value}" if vary == "filter_level" else f"n_L={value}"
        counts = [p.num_test for p in group]
        curves.append(AccuracyCurve(label=label, filter_level=first.filter_level, num_layers=first.num_layers,
                                    sizes=sizes, accuracy=accuracy, bp_accuracy=None if bp is None else float(bp),
                                    runs=[p.output_dir for p in group],
                                    num_test=None if None in counts else int(min(counts))))
    return AccuracyPanel(title=title, k_test=k_test, grammar_seed=seeds.pop(), curves=curves)


def _curve_color(curve: AccuracyCurve, panel: AccuracyPanel, depth: int, vary_layers: bool):
    if not vary_layers:
        return level_color(curve.filter_level, depth)
    plt = pyplot()
    layers = sorted(c.num_layers for c in panel.curves)
    return plt.get_cmap("plasma")(0.85 * layers.index(curve.num_layers) / max(1, len(layers) - 1))


def plot_accuracy_figure(result: AccuracyFigure):
    """One axis per panel: accuracy vs P (log2 axis, open circles), BP_{k_train} dashed in the curve's colour."""
    plt = pyplot()
    count = len(result.panels)
    fig, axes = plt.subplots(1, count, figsize=(4.2 * count, 3.6), squeeze=False)
    for ax, panel in zip(axes[0], result.panels):
        vary_layers = len({c.num_layers for c in panel.curves}) > 1
        for curve in panel.curves:
            color = _curve_color(curve, panel, result.depth, vary_layers)
            label = curve.label.replace("k_train", "$k_{train}$").replace("n_L", "$n_L$")
            ax.plot(curve.sizes, curve.accuracy, marker="o", mfc="none", color=color, label=label)
            if curve.bp_accuracy is not None and not vary_layers:
                ax.axhline(curve.bp_accuracy, color=color, ls="--", lw=0.9)
        if vary_layers and panel.curves and panel.curves[0].bp_accuracy is not None:
            ax.axhline(panel.curves[0].bp_accuracy, color="black", ls="--", lw=0.9, label="BP")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("P (labelled training sequences)")
        ax.set_ylabel("root test accuracy, " + ("$k_{test}$=0" if panel.k_test == "full" else
                                                "$k_{test}$=$k_{train}$"))
        ax.set_ylim(0, 1.02)
        ax.set_title(panel.title, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(result.title, fontsize=10)
    fig.tight_layout()
    return fig


def write_outputs(result: AccuracyFigure, out_dir, name: str) -> dict:
    """Write ``<name>.png`` and ``<name>.json`` (every curve, its runs and BP's accuracy) into ``out_dir``."""
    out = prepare_output(out_dir)
    paths = {"figure": save_figure(plot_accuracy_figure(result), out / f"{name}.png")}
    paths["json"] = write_json(out / f"{name}.json", result.to_dict())
    return paths


__all__ = ["AccuracyCurve", "AccuracyFigure", "AccuracyPanel", "K_TESTS", "SweepPoint", "accuracy_panel",
           "plot_accuracy_figure", "write_outputs"]
