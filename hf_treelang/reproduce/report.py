"""``OUT/report.md`` of a reproduction: settings, what reproduced (one row per paper figure, also in
``OUT/findings.json``), model-vs-BP tables and every figure, rewritten on every call."""

from __future__ import annotations

import json
from pathlib import Path

from hf_treelang.analysis import sample_complexity as sample_complexity_analysis
from hf_treelang.core.noise import Z
from hf_treelang.jsonio import read_json_object
from hf_treelang.train.folders import finished_run

from .findings import NOT_RUN, VERDICTS, describe, write_findings
from .presets import Preset
from .steps import steps_of

DONE_DIR = ".done"


def read_json(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def _section(lines: list, out: Path, relative: str, render) -> None:
    """Append ``render(data)`` (a list of lines) for the step JSON ``OUT/relative``, if present; a file that is not
    a JSON object, or lacks what ``render`` reads, gets one line naming it instead of ending the report."""
    path = out / relative
    if not path.is_file():
        return
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        lines += [f"`{relative}` is not valid JSON ({error}): not shown.", ""]
        return
    if not isinstance(data, dict):
        lines += [f"`{relative}` holds a JSON {type(data).__name__}, not the object its step writes: not shown.", ""]
        return
    try:
        shown = render(data)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        reason = f"{type(error).__name__}: {error}".replace("\n", " ")
        lines += [f"`{relative}` does not have the shape its step writes ({reason}): not shown.", ""]
        return
    lines += shown


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if abs(value) >= 10 ** -digits or value == 0 else f"{value:.1e}"
    return str(value)


def _epochs(epochs) -> str:
    return f"; evaluated and saved at epochs {', '.join(map(str, epochs))}" if epochs else ""


def _accuracy_curves(summary: dict) -> list:
    """One table per panel of an accuracy-vs-P figure (hf_treelang.analysis.accuracy_curves JSON)."""
    lines = []
    for panel in summary.get("panels", []):
        sizes = sorted({size for curve in panel["curves"] for size in curve["sizes"]})
        lines += [f"{panel['title']}:", "", "| curve | " + " | ".join(f"P={size}" for size in sizes) + " | BP |",
                  "|---|" + "---|" * (len(sizes) + 1)]
        for curve in panel["curves"]:
            accuracy = dict(zip(curve["sizes"], curve["accuracy"]))
            lines.append(f"| {curve['label']} | " + " | ".join(_fmt(accuracy.get(size)) for size in sizes)
                         + f" | {_fmt(curve['bp_accuracy'])} |")
        lines.append("")
    return lines


def _figure(lines: list, path: Path, out: Path, caption: str) -> None:
    if path.is_file():
        lines.append(f"![{caption}]({path.relative_to(out).as_posix()})")
        lines.append(f"*{caption}*")
        lines.append("")


def _findings(lines: list, out: Path, preset: Preset) -> None:
    """The table of what reproduced (:mod:`hf_treelang.reproduce.findings`), written to OUT/findings.json too."""
    findings, path = write_findings(out, preset)
    counts = ", ".join(f"{sum(f.verdict == v for f in findings)} {v}" for v in VERDICTS)
    lines += ["## What reproduced", "",
              f"One row per paper figure that this pipeline draws ({counts}): the paper's claim, the rule that tests "
              f"it on this run, the numbers it read, each threshold's margin ± noise (a margin within {Z:g} noise is "
              f"a tie: the verdict it decides is inconclusive) and the verdict (rules and thresholds: "
              f"`hf_treelang/reproduce/findings.py`; machine-readable: [{path.name}]({path.name})).", "",
              "| figure | paper's claim | check | measured | margins | verdict |", "|---|---|---|---|---|---|"]
    for f in findings:
        shown = {key: value for key, value in f.measured.items() if key != "margins"}
        measured = describe(shown) + (f" ({f.note})" if f.note else "")
        verdict = f.verdict if f.verdict == NOT_RUN else f"**{f.verdict}**"
        lines.append(f"| {f.figure} | {f.claim} | {f.check} | {measured.replace('|', '/')} | "
                     f"{margins_cell(f.measured.get('margins') or []).replace('|', '/')} | {verdict} |")
    lines.append("")


def margins_cell(entries: list) -> str:
    """A rule's comparisons in one cell: ``test: margin ± noise (pass | fail | tie)``, a comparison without a usable
    noise or number with why in its place; "–" for none."""
    if not entries:
        return "–"
    parts = []
    for entry in entries:
        margin = "–" if entry.get("margin") is None else f"{entry['margin']:+.3g}"
        noise = (f"({entry['unusable']})" if entry.get("unusable")
                 else "noise not recorded" if entry.get("noise") is None else f"± {entry['noise']:.3g}")
        parts.append(f"{entry['test']}: {margin} {noise} ({entry['decided']})")
    return "; ".join(parts)


def _probe_table(summary: dict, name: str) -> list:
    """The held-out accuracy of every (layer, ancestor level) probe of a probe JSON."""
    where = "all positions" if name == "probe" else "first and last positions only"
    final = summary.get("final_accuracy", summary["accuracy"])
    lines = [f"Trained on {where}; held-out accuracy (rows: layer, 0 = embedding; columns: ancestor level):", "",
             "| layer | " + " | ".join(f"level {m}" for m in summary["levels"]) + " |",
             "|---|" + "---|" * len(summary["levels"])]
    for layer, row, last in zip(summary["layers"], summary["accuracy"], final):
        lines.append(f"| {layer} | " + " | ".join(f"{_fmt(a)} ({_fmt(b)})" for a, b in zip(row, last)) + " |")
    return lines + ["| BP | " + " | ".join(_fmt(a) for a in summary["bp_accuracy"]) + " |", ""]


def _filtered_probe_table(summary: dict) -> list:
    """App. E.7 (right): the probes of the complete encoding of the MLM of each k_train."""
    levels = summary["models"][0]["levels"]
    lines = ["App. E.7 (right): the complete encoding of the MLM model of each k_train, on k = 0 data:", "",
             "| k_train | " + " | ".join(f"level {m}" for m in levels) + " |", "|---|" + "---|" * len(levels)]
    for model in summary["models"]:
        lines.append(f"| {model['model_filter_level']} | " + " | ".join(
            f"{_fmt(a)} ({_fmt(b)})" for a, b in zip(model["accuracy"][0], model["final_accuracy"][0])) + " |")
    return lines + ["| BP | " + " | ".join(_fmt(a) for a in summary["models"][0]["bp_accuracy"]) + " |", ""]


def _sample_complexity_table(summary: dict) -> list:
    """Fig. 1f: the accuracy of every arm per P, the gaps to scratch (mean ± standard deviation over seeds), BP."""
    lines = ["| arm | " + " | ".join(f"P={s}" for s in summary["sizes"]) + " |",
             "|---|" + "---|" * len(summary["sizes"])]
    for arm in sample_complexity_analysis.ARMS:
        values = summary["accuracy"].get(arm)
        if values is not None:
            lines.append(f"| {arm} | " + " | ".join(_fmt(a) for a in values) + " |")
    for arm, gaps in (summary.get("gap_vs_scratch") or {}).items():
        lines.append(f"| {arm} − scratch | " + " | ".join(
            _fmt(g["mean"]) + ("" if g["spread"] is None else f" ± {_fmt(g['spread'])}") for g in gaps) + " |")
    return lines + [f"| BP | {_fmt(summary['bp_accuracy'])} |", ""]


def write_report(out: Path, preset: Preset, records: list) -> Path:
    """OUT/report.md: settings, what reproduced (and OUT/findings.json), model-vs-BP tables and every figure (steps
    not run yet are marked missing)."""
    p = preset
    k = p.filter_level
    lines = [
        f"# hf-treelang reproduction — preset `{p.name}`",
        "",
        f"{p.description}.",
        "",
        "| setting | value |",
        "|---|---|",
        f"| data | q={p.num_symbols}, ℓ={p.depth}, σ={p.sigma}, grammar seed {p.grammar_seed}, k_train={k} |"
        if p.grammar_file is None else
        f"| data | the grammar of `{p.grammar_file}` (sha256 {p.grammar_sha256[:12]}), q={p.num_symbols}, "
        f"ℓ={p.depth}, k_train={k} |",
        f"| model | {', '.join(f'{key}={value}' for key, value in p.model.items())} |",
        f"| root classification | P={p.root_train}, {p.root_epochs:g} epochs{_epochs(p.root_checkpoint_epochs)} |",
        f"| masked language modelling | P={p.mlm_train}, {p.mlm_epochs:g} epochs{_epochs(p.mlm_checkpoint_epochs)} |",
        f"| optimiser | Adam, learning rate {p.learning_rate:g}, batch {p.batch_size}, no gradient clipping |",
        f"| test sets | {p.num_test} sequences per k_test |",
        "",
    ]
    _findings(lines, out, p)
    bp = read_json_object(out / "bp" / "bp_baselines.json")
    runs = {task: finished_run(out / "runs" / task) for task in ("root", "mlm")}
    metrics = {task: read_json_object(out / "runs" / task / "metrics.json") or {} for task in ("root", "mlm")}
    reference = sorted({n for task in ("root", "mlm") for n in (metrics[task].get("bp_reference_size") or {}).values()})
    bp_on = f"{reference[0]} sequences per k_test of the same split stream (the test set and its continuation)" \
        if len(reference) == 1 else "the test sets"
    lines += ["## Model vs BP", "",
              f"Test accuracy of the trained models on data of every filter level k_test ({p.num_test} sequences "
              f"each), against BP_{k} (the oracle matched to the training data, on {bp_on}) and the optimal "
              "BP_{k_test} (on the same sequences).", ""]
    lines += ["| task | k_test | model | BP_k_train | BP_k_test (optimal) |", "|---|---|---|---|---|"]
    for task, title in (("root", "root"), ("mlm", "masked leaf")):
        final = (runs[task] or {}).get("final", {})
        for k_test in range(p.depth + 1):
            optimal = bp["accuracy"][str(k_test)][f"{task}_optimal"] if bp else None
            lines.append(f"| {title} | {k_test} | {_fmt(final.get(f'eval_acc_ktest{k_test}'))} | "
                         f"{_fmt(final.get(f'eval_bp_acc_ktest{k_test}'))} | {_fmt(optimal)} |")
    lines += ["", "Final mean D_KL(BP_k ‖ model) on in-sample inputs:", "",
              "| task | " + " | ".join(f"BP_{j}" for j in range(p.depth + 1)) + " |",
              "|---|" + "---|" * (p.depth + 1)]
    for task in ("root", "mlm"):
        final = (runs[task] or {}).get("final", {})
        lines.append(f"| {task} | " + " | ".join(_fmt(final.get(f"eval_kl_bp_k{j}"), 4)
                                                 for j in range(p.depth + 1)) + " |")
    lines.append("")
    _figure(lines, out / "bp" / "bp_baselines.png", out, "BP baselines: accuracy vs k_test")

    lines += ["## Learning dynamics (Fig. 1c/d, 2b, 3a)", ""]
    for task in ("root", "mlm"):
        _section(lines, out, f"dynamics/{task}.json",
                 lambda summary: [f"{task}: closest BP_k along training {summary['alignment_sequence']}", ""])
        _figure(lines, out / "dynamics" / f"{task}.png", out, f"{task}: KL to BP_k and accuracy per k_test")

    lines += ["## Calibration (Fig. 1b)", "", "| task | inputs | KL | argmax match | Spearman | model acc | BP acc |",
              "|---|---|---|---|---|---|---|"]
    for task in ("mlm", "root"):
        _section(lines, out, f"calibration/{task}/calibration.json", lambda summary: [
            f"| {task} | {name} | {_fmt(m['kl_mean'], 4)} | {_fmt(m['argmax_match'])} | {_fmt(m['spearman_mean'])} | "
            f"{_fmt(m['model_accuracy'])} | {_fmt(m['bp_accuracy'])} |" for name, m in (summary["sets"] or {}).items()])
    lines.append("")
    for task in ("mlm", "root"):
        _figure(lines, out / "calibration" / task / "calibration.png", out, f"{task}: model vs BP probabilities")

    lines += ["## Attention maps (Fig. 4, App. E.5)", ""]
    _figure(lines, out / "attention" / "mlm" / "attention.png", out, "MLM: average attention per layer")
    _figure(lines, out / "attention" / "root" / "attention.png", out, "root classifier: average attention per layer")
    _figure(lines, out / "attention" / "classifier" / "attention.png", out,
            "App. E.5: root classifiers of every k_train at their largest P")

    lines += ["## Probing (Fig. 3b, App. E.6-E.7)", "",
              f"Readouts trained on {p.probe_train} sequences for {p.probe_epochs} epochs (Adam "
              f"{p.probe_learning_rate:g}, batch {p.probe_batch_size}); each probe at its best epoch on "
              f"{p.probe_validation} validation sequences, accuracy on {p.probe_test} further held-out sequences, "
              "the last epoch's in brackets.", ""]
    for name in ("probe", "probe_ends"):
        _section(lines, out, f"probe/{name}.json", lambda summary: _probe_table(summary, name))
        _figure(lines, out / "probe" / f"{name}.png", out, f"ancestor probes ({name})")
    _section(lines, out, "probe/probe_filtered.json", _filtered_probe_table)
    _figure(lines, out / "probe" / "probe_filtered.png", out, "App. E.7 (right): probes of the k_train models")

    lines += ["## Sample complexity (Fig. 1f)", ""]
    _section(lines, out, "sample_complexity/sample_complexity.json", _sample_complexity_table)
    _figure(lines, out / "sample_complexity" / "sample_complexity.png", out, "root accuracy vs labelled P")

    if p.figure_steps():
        lines += ["## Accuracy vs P (Fig. 2a, App. E.1-E.3)", "",
                  f"Final root test accuracy of runs trained {p.sweep_budget} on P labelled sequences; BP: "
                  "BP_{k_train} on the same test inputs (optimal in sample only).", ""]
        for name, caption in (("fig2a_e3", "Fig. 2a (k_test = 0) and App. E.3 (k_test = k_train)"),
                              ("e1_layers", "App. E.1: n_L encoder blocks"),
                              ("e2_grammar_seeds", "App. E.2: other grammars")):
            _section(lines, out, f"accuracy_vs_samples/{name}.json", _accuracy_curves)
            _figure(lines, out / "accuracy_vs_samples" / f"{name}.png", out, caption)

    done = {r.name: r for r in records}
    lines += ["## Steps", "", "| step | status | seconds |", "|---|---|---|"]
    for name, _ in steps_of(p):
        record = done.get(name)
        marker = read_json(out / DONE_DIR / f"{name}.json")
        if record is not None and record.status == "ran":
            status, seconds = "ran", record.seconds
        elif marker is not None:
            status, seconds = "done earlier", marker["seconds"]
        else:
            status, seconds = "missing", None
        lines.append(f"| {name} | {status} | {_fmt(seconds, 1)} |")
    lines.append("")
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
