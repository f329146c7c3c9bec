"""The grid figure of a sweep, redrawn as runs finish: final accuracy and KL to the matched BP against a grid axis.

The x axis is the SPEC's first grid axis with numeric values (else its first axis, as categories); one line per
combination of the other axes, averaged over ``seed`` when seed is an axis (error bars: the spread over seeds).
Writes ``OUT/sweep.png`` and ``OUT/sweep_summary.json`` (the plotted numbers).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from hf_treelang.jsonio import write_json_atomic

FIGURE_FILE = "sweep.png"
SUMMARY_FILE = "sweep_summary.json"


def _numeric(values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _mean_spread(values: list) -> tuple:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None, None
    mean = sum(values) / len(values)
    return mean, (max(values) - min(values)) / 2 if len(values) > 1 else 0.0


def grid_summary(spec, runs, records: dict) -> dict:
    """The numbers of the figure: ``{"x_axis", "series": [{"label", "points": [{x, accuracy, ...}]}]}``."""
    axes = list(spec.grid)
    numeric = [axis for axis in axes if _numeric(spec.grid[axis])]
    x_axis = numeric[0] if numeric else axes[0]
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
    return {"x_axis": x_axis, "x_values": spec.grid[x_axis], "numeric_x": x_axis in numeric, "series": series,
            "finished": len(records), "planned": len(runs)}


def write_grid_figure(out, spec, runs, records: dict) -> Path:
    """Redraw ``OUT/sweep.png`` and ``OUT/sweep_summary.json`` from the records finished so far."""
    from hf_treelang.plotting import pyplot, save_figure  # lazy: matplotlib, only once a run has finished

    out = Path(out)
    summary = grid_summary(spec, runs, records)
    write_json_atomic(out / SUMMARY_FILE, summary)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    positions = {json.dumps(v): (v if summary["numeric_x"] else i) for i, v in enumerate(summary["x_values"])}
    for series in summary["series"]:
        xs = [positions[json.dumps(p["x"])] for p in series["points"]]
        for ax, key in zip(axes, ("accuracy", "kl_matched_bp")):
            ys = [p[key] for p in series["points"]]
            spread = [p[f"{key}_spread"] or 0.0 for p in series["points"]]
            shown = [(x, y, s) for x, y, s in zip(xs, ys, spread) if y is not None]
            if shown:
                lines = ax.errorbar([s[0] for s in shown], [s[1] for s in shown], yerr=[s[2] for s in shown],
                                    marker="o", ms=4, capsize=2, label=series["label"])
                if key == "accuracy":
                    bp = [(x, p["bp_accuracy"]) for x, p in zip(xs, series["points"]) if p["bp_accuracy"] is not None]
                    if bp:
                        ax.plot([b[0] for b in bp], [b[1] for b in bp], ls="--", lw=1,
                                color=lines.lines[0].get_color())
    for ax, ylabel in zip(axes, ("final test accuracy (first k_test; dashed: BP$_{k_{train}}$)",
                                 "final KL(BP$_{k_{train}}$ ‖ model), in-sample")):
        ax.set_xlabel(summary["x_axis"])
        ax.set_ylabel(ylabel, fontsize=8)
        if not summary["numeric_x"]:
            ax.set_xticks(range(len(summary["x_values"])), [str(v) for v in summary["x_values"]])
        ax.grid(alpha=0.3)
        if summary["series"]:
            ax.legend(fontsize=7)
    fig.suptitle(f"sweep: {summary['finished']} of {summary['planned']} runs finished", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out / FIGURE_FILE)


__all__ = ["FIGURE_FILE", "SUMMARY_FILE", "grid_summary", "write_grid_figure"]
