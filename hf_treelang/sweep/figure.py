"""The grid figure of a sweep, redrawn as runs finish: final accuracy and KL to the matched BP against a grid axis.

The x axis is the SPEC's first grid axis that is a quantity (:func:`is_quantity`), else its first axis; one series
per combination of the other axes, averaged over ``seed`` when seed is an axis (error bars: the spread over seeds).
A quantity (``num_train``, ``learning_rate``, ``sigma``, a size) is drawn on a continuous axis, logarithmic when its
values span a factor of :data:`LOG_SPAN` or more, its points joined by lines. A level — a filter level such as
``k_train``, a seed, any value that is not a number — names a category, not an amount (k = 2 is not twice k = 1):
its values are evenly spaced ticks, each series' points side by side and not joined.
Writes ``OUT/sweep.png`` and ``OUT/sweep_summary.json`` (the plotted numbers).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from hf_treelang.jsonio import write_json_atomic

FIGURE_FILE = "sweep.png"
SUMMARY_FILE = "sweep_summary.json"


LEVEL_AXES = ("k_train", "k_test", "filter_level")  # run arguments whose integers are the hierarchy's levels
LOG_SPAN = 8.0  # a quantity whose largest value is this many times its smallest (all > 0) is drawn on a log axis


def _numeric(values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def is_quantity(axis: str, values) -> bool:
    """Whether grid ``axis`` with ``values`` is an amount, drawn on a continuous axis: numbers that are neither a
    filter level (:data:`LEVEL_AXES`) nor a seed (``seed``, ``grammar_seed``, ...), which only name their runs."""
    return _numeric(values) and axis not in LEVEL_AXES and not axis.endswith("seed")


def _log_scale(values) -> bool:
    return bool(values) and min(values) > 0 and max(values) >= LOG_SPAN * min(values)


def _mean_spread(values: list) -> tuple:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None, None
    mean = sum(values) / len(values)
    return mean, (max(values) - min(values)) / 2 if len(values) > 1 else 0.0


def grid_summary(spec, runs, records: dict) -> dict:
    """The numbers of the figure: ``{"x_axis", "series": [{"label", "points": [{x, accuracy, ...}]}]}``."""
    axes = list(spec.grid)
    quantities = [axis for axis in axes if is_quantity(axis, spec.grid[axis])]
    x_axis = quantities[0] if quantities else axes[0]
    grouping = [axis for axis in axes if axis not in (x_axis, "seed")]
    cells: dict = {}
    for run in runs:
        record = records.get(run.name)
        if record is None:
            continue
        k_train = run.data_args.k_train
        label = ", ".join(f"{axis}={run.tags['point'][axis]}" for axis in grouping) or "all runs"
        cell = cells.setdefault(label, {}).setdefault(json.dumps(run.tags['point'][x_axis]), {
            "x": run.tags['point'][x_axis], "accuracy": [], "bp_accuracy": [], "kl_matched_bp": []})
        cell["accuracy"].append(record.get("accuracy"))
        cell["bp_accuracy"].append(record.get("bp_accuracy"))
        cell["kl_matched_bp"].append(record.get("metrics", {}).get(f"eval_kl_bp_k{k_train}"))
    series = []
    for label, points in cells.items():
        rows = []
        for cell in points.values():
            row = {"x": cell["x"], "runs": len(cell["accuracy"])}
            for key in ("accuracy", "bp_accuracy", "kl_matched_bp"):
                row[key], row[f"{key}_spread"] = _mean_spread(cell[key])
            rows.append(row)
        order = {json.dumps(v): i for i, v in enumerate(spec.grid[x_axis])}
        rows.sort(key=lambda r: order[json.dumps(r["x"])])
        series.append({"label": label, "points": rows})
    quantity = x_axis in quantities
    return {"x_axis": x_axis, "x_values": spec.grid[x_axis], "numeric_x": quantity,
            "x_scale": ("log" if _log_scale(spec.grid[x_axis]) else "linear") if quantity else "category",
            "series": series, "finished": len(records), "planned": len(runs)}


def write_grid_figure(out, spec, runs, records: dict) -> Path:
    """Redraw ``OUT/sweep.png`` and ``OUT/sweep_summary.json`` from the records finished so far."""
    from hf_treelang.plotting import pyplot, save_figure  # lazy: matplotlib, only once a run has finished

    out = Path(out)
    summary = grid_summary(spec, runs, records)
    write_json_atomic(out / SUMMARY_FILE, summary)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    quantity = summary["numeric_x"]
    positions = {json.dumps(v): (v if quantity else i) for i, v in enumerate(summary["x_values"])}
    count = len(summary["series"])
    for number, series in enumerate(summary["series"]):
        dodge = 0.0 if quantity else (number - (count - 1) / 2) * min(0.3 / max(count - 1, 1), 0.1)  # side by side
        xs = [positions[json.dumps(p["x"])] + dodge for p in series["points"]]
        style = {"ls": "-"} if quantity else {"ls": "none"}  # a category's points are not joined
        for ax, key in zip(axes, ("accuracy", "kl_matched_bp")):
            ys = [p[key] for p in series["points"]]
            spread = [p[f"{key}_spread"] or 0.0 for p in series["points"]]
            shown = [(x, y, s) for x, y, s in zip(xs, ys, spread) if y is not None]
            if shown:
                lines = ax.errorbar([s[0] for s in shown], [s[1] for s in shown], yerr=[s[2] for s in shown],
                                    marker="o", ms=4, capsize=2, label=series["label"], **style)
                if key == "accuracy":
                    bp = [(x, p["bp_accuracy"]) for x, p in zip(xs, series["points"]) if p["bp_accuracy"] is not None]
                    if bp:
                        ax.plot([b[0] for b in bp], [b[1] for b in bp], color=lines.lines[0].get_color(),
                                **({"ls": "--", "lw": 1} if quantity else {"ls": "none", "marker": "_", "ms": 12}))
    bp_drawn = "dashed" if quantity else "bars"
    for ax, ylabel in zip(axes, (f"final test accuracy (first k_test; {bp_drawn}: BP$_{{k_{{train}}}}$)",
                                 "final KL(BP$_{k_{train}}$ ‖ model), in-sample")):
        ax.set_xlabel(summary["x_axis"])
        ax.set_ylabel(ylabel, fontsize=8)
        if summary["x_scale"] == "log":
            ax.set_xscale("log", base=2 if all(isinstance(v, int) for v in summary["x_values"]) else 10)
        elif not quantity:
            ax.set_xticks(range(len(summary["x_values"])), [str(v) for v in summary["x_values"]])
            ax.set_xlim(-0.5, len(summary["x_values"]) - 0.5)
        ax.grid(alpha=0.3)
        if summary["series"]:
            ax.legend(fontsize=7)
    fig.suptitle(f"sweep: {summary['finished']} of {summary['planned']} runs finished", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out / FIGURE_FILE)


__all__ = ["FIGURE_FILE", "LEVEL_AXES", "LOG_SPAN", "SUMMARY_FILE", "grid_summary", "is_quantity", "write_grid_figure"]
