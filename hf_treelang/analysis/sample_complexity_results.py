"""The sample-complexity results of learners, as files: one row per run, P* per curve, figures and a dataset card.

What ``hf-treelang sample-complexity`` (without a checkpoint: one learner's curve) and the campaign's publishing step
(``training/sample_complexity_campaign.py OUT --publish DIR``) write into their folder:

* ``runs.csv`` and ``runs.json`` — one row per finished run (:data:`ROW_COLUMNS`): its architecture, grammar (a Random
  Hierarchy Model's name starts with ``rhm``), task, P, seed, learning rate, final test accuracy on k_test = 0 next to
  BP_0's on the same inputs, final KL to BP_0, how long it trained (steps, whether the validation rule stopped it, its
  best check), the command that trains it alone and, for a Random Hierarchy Model, m, L, n_c, s and n_c m^L;
* ``README.md`` — the dataset card whose ``configs:`` make ``datasets.load_dataset(DIR)`` read ``runs.csv``
  (:func:`hf_treelang.analysis.compare.results_card`, its config named by the table's content);
* ``pstar.json`` — a list with one object per curve (grammar, task, architecture): its mean accuracy, BP_0 accuracy
  and KL per P, P* by accuracy (``pstar``, threshold ε) and by KL (``pstar_kl``, threshold δ) with their spread over
  seeds (:mod:`hf_treelang.analysis.pstar`, where P* is defined), and for a Random Hierarchy Model the fit of
  ln P* against ln(n_c m^L) over every Random Hierarchy Model of that architecture (``fit``) next to the theory's 1;
* ``summary.md`` — the sentences :func:`summary_lines` makes from ``pstar.json`` (which learner needs the fewest
  samples on each grammar, and whether each follows P* ∝ n_c m^L); the README quotes :func:`readme_line`, their
  digest;
* ``curves-<grammar>.png`` — accuracy and KL to BP_0 against P per architecture, BP_0's accuracy dashed, per grammar;
  ``pstar_scaling.png`` — P* against n_c m^L on log-log axes per architecture with its fit and the theory's line.

Every file is computed before any is written: bad input leaves no partial folder.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from io import StringIO
from pathlib import Path

from hf_treelang.plotting import pyplot, save_figure
from hf_treelang.sweep import comparison
from hf_treelang.sweep.sample_complexity import campaign_curves, curve_grammar, grammar_name, published_runs
from hf_treelang.train.run import command_line

from .compare import results_card, table_config_name
from .compare_summary import ARCHITECTURE_NAMES, quoted_summary
from .io import check_output_dir, prepare_output, write_json
from .pstar import DELTA, EPSILON, FROM_START, check_threshold, fit_slope, pstar

ROW_COLUMNS = {
    "architecture": "the model type (treelang: the paper's encoder)",
    "grammar": "the grammar of its data: rhm-v<v>-m<m>-s<s>-L<L> (a Random Hierarchy Model) or paper-seed<g>-sigma<σ> "
               "(the paper's log-normal grammar; q and ℓ named where they are not 4)",
    "task": "root (root classification on the full hierarchy, k_train = 0: BP_0 is the optimum)",
    "num_train": "P, the training sequences",
    "seed": "the model seed",
    "learning_rate": "the learning rate it was trained at",
    "accuracy": "its final test accuracy on k_test = 0",
    "bp_accuracy": "BP_0's accuracy on the same test inputs",
    "kl_bp0": "its final mean KL(BP_0 ‖ model) over the validation inputs, in nats",
    "m": "a Random Hierarchy Model's rules per symbol (empty for the paper's grammar)",
    "L": "a Random Hierarchy Model's depth (empty for the paper's grammar)",
    "n_c": "a Random Hierarchy Model's root classes (empty for the paper's grammar)",
    "s": "a Random Hierarchy Model's arity (empty for the paper's grammar)",
    "n_c_m_L": "n_c m^L, the theory's sample complexity of a Random Hierarchy Model (empty for the paper's grammar)",
    "num_symbols": "q, the symbols (a Random Hierarchy Model's v)",
    "depth": "ℓ, the tree depth",
    "k_train": "the filter level of its training data",
    "steps": "the optimizer steps it trained",
    "stopped": "whether the validation stopping rule stopped it (false: it reached its max_steps)",
    "best_step": "the step of its best validation check",
    "best_validation_accuracy": "its accuracy on the validation inputs at that check",
    "num_validation": "the validation (held-out, in-sample) sequences of the stopping rule and the KL",
    "num_test": "the test sequences of k_test = 0",
    "train_runtime_s": "its training time on the machine that trained it, in seconds",
    "run": "its folder under runs/",
    "identity": "its run identity (the hash of what decides its result)",
    "command": "the command that trains it alone (its --output_dir relative to the folder of its sweep)",
}
FIGURE_PREFIX = "curves-"
SCALING_FIGURE = "pstar_scaling.png"
SUMMARY_NAME = "sample-complexity-summary"  # <!-- sample-complexity-summary --> ... in the README and the page


def run_row(run, summary: dict, out) -> dict:
    """The row (:data:`ROW_COLUMNS`) of a finished root run of a sweep in ``out`` from its summary
    (:func:`hf_treelang.train.folders.finished_run`)."""
    d, final = run.data_args, summary.get("final") or {}
    stopping = summary.get("early_stopping") or {}
    grammar = curve_grammar(d)
    hierarchy = grammar.is_random_hierarchy
    return {
        "architecture": run.model_args.model_type, "grammar": grammar_name(d), "task": run.task,
        "num_train": int(d.num_train), "seed": int(run.training_args.seed),
        "learning_rate": float(run.training_args.learning_rate),
        "accuracy": final.get("eval_acc_ktest0"), "bp_accuracy": final.get("eval_bp_acc_ktest0"),
        "kl_bp0": final.get("eval_kl_bp_k0"),
        "m": grammar.num_rules if hierarchy else None, "L": grammar.depth if hierarchy else None,
        "n_c": grammar.num_classes if hierarchy else None, "s": grammar.arity if hierarchy else None,
        "n_c_m_L": grammar.scale, "num_symbols": int(d.num_symbols), "depth": int(d.depth),
        "k_train": int(d.k_train), "steps": summary.get("global_step"), "stopped": stopping.get("stopped"),
        "best_step": stopping.get("best_step"), "best_validation_accuracy": stopping.get("best_accuracy"),
        "num_validation": int(d.num_eval), "num_test": int(d.num_test),
        "train_runtime_s": summary.get("train_runtime_s"), "run": run.name, "identity": run.identity,
        "command": command_line(run.task, run.arguments, Path(run.output_dir).relative_to(Path(out))),
    }


def _key(row: dict) -> tuple:
    return row["grammar"], row["task"], row["architecture"]


def _means(rows: list, sizes: list, name: str) -> list:
    means = []
    for size in sizes:
        values = [float(r[name]) for r in rows if r["num_train"] == size and r.get(name) is not None]
        means.append(statistics.fmean(values) if values else None)
    return means


def curve_entries(rows: list, epsilon: float = EPSILON, delta: float = DELTA) -> list:
    """One ``pstar.json`` object per curve of ``rows`` (grammar, task, architecture; in the rows' order), with P* at
    ``epsilon`` and P*_KL at ``delta`` (:func:`hf_treelang.analysis.pstar.pstar`) and, for a Random Hierarchy Model,
    the fit of its architecture's P* against n_c m^L over the Random Hierarchy Models in ``rows``
    (:func:`~hf_treelang.analysis.pstar.fit_slope`)."""
    epsilon = check_threshold("epsilon", epsilon, 1.0)
    delta = check_threshold("delta", delta)
    curves: dict = {}
    for row in rows:
        curves.setdefault(_key(row), []).append(row)
    entries = []
    for (grammar, task, architecture), ours in curves.items():
        sizes = sorted({r["num_train"] for r in ours})
        first = ours[0]
        rates = sorted({r["learning_rate"] for r in ours})
        by_accuracy, by_kl = pstar(ours, "accuracy", epsilon), pstar(ours, "kl", delta)
        entries.append({
            "grammar": grammar, "task": task, "architecture": architecture,
            "kind": "rhm" if first.get("m") is not None else "paper",
            "m": first.get("m"), "L": first.get("L"), "n_c": first.get("n_c"), "s": first.get("s"),
            "n_c_m_L": first.get("n_c_m_L"), "num_symbols": first.get("num_symbols"), "depth": first.get("depth"),
            "learning_rate": rates[0] if len(rates) == 1 else rates, "sizes": sizes,
            "seeds": sorted({r["seed"] for r in ours}), "num_runs": len(ours),
            "accuracy": _means(ours, sizes, "accuracy"), "bp_accuracy": _means(ours, sizes, "bp_accuracy"),
            "kl_bp0": _means(ours, sizes, "kl_bp0"), "epsilon": epsilon, "delta": delta,
            "pstar": by_accuracy.to_dict(), "pstar_kl": by_kl.to_dict(),
            "figure": f"{FIGURE_PREFIX}{grammar}.png",
        })
    for architecture in dict.fromkeys(e["architecture"] for e in entries if e["kind"] == "rhm"):
        ours = [e for e in entries if e["kind"] == "rhm" and e["architecture"] == architecture]
        points = [(e["n_c_m_L"], e["pstar"]["mean"], e["grammar"]) for e in ours if e["pstar"]["mean"] is not None]
        left_out = {e["grammar"]: e["pstar"]["reason"] for e in ours if e["pstar"]["mean"] is None}
        fit = fit_slope(points, left_out).to_dict()
        for entry in ours:
            entry["fit"] = fit
    return entries


# ---------------------------------------------------------------- sentences


def _name(architecture: str) -> str:
    return ARCHITECTURE_NAMES.get(architecture, architecture)


def _count(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def _pstar_text(entry: dict) -> str:
    found = entry["pstar"]
    if found["mean"] is None:
        if found["reason"] == FROM_START:
            return f"P* ≤ {found['at_most']:,} (within ε at the smallest P)"
        return "never within ε"
    spread = ""
    if found["std"] is not None:
        spread = f" ± {_count(found['std'])} over {found['num_seeds_crossing']} seeds"
    elif len(entry["seeds"]) > 1:
        spread = f" ({found['num_seeds_crossing']} of {len(entry['seeds'])} seeds cross alone)"
    return f"P* ≈ {_count(found['mean'])}{spread}"


def _rank(entry: dict) -> float:
    found = entry["pstar"]
    if found["mean"] is not None:
        return found["mean"]
    return found["at_most"] - 0.5 if found["reason"] == FROM_START else math.inf


def grammar_line(grammar: str, entries: list) -> str:
    """The sentence of one grammar: its learners from the fewest samples to BP_0's accuracy within ε to the most,
    and those never within ε on the grid with their accuracy at the largest P."""
    first = entries[0]
    ranked = sorted(entries, key=_rank)
    crossing = [e for e in ranked if _rank(e) != math.inf]
    never = [e for e in ranked if _rank(e) == math.inf]
    scale = "" if first["n_c_m_L"] is None else f", n_c m^L = {first['n_c_m_L']:,}"
    head = (f"- **{grammar}** ({first['task']}{scale}; ε = {first['epsilon']:g}; P = {first['sizes'][0]:,} … "
            f"{max(max(e['sizes']) for e in entries):,}): ")
    parts = []
    if crossing:
        best = _rank(crossing[0])
        leaders = [e for e in crossing if _rank(e) == best]
        leader_names = " and ".join(_name(e["architecture"]) for e in leaders)
        parts.append(f"the fewest samples to BP_0's accuracy: {leader_names} ({_pstar_text(leaders[0])})")
        rest = [e for e in crossing if e not in leaders]
        if rest:
            parts.append("then " + ", ".join(f"{_name(e['architecture'])} ({_pstar_text(e)})" for e in rest))
    if never:
        parts.append("never within ε on the grid: " + ", ".join(
            f"{_name(e['architecture'])} (accuracy {e['accuracy'][-1]:.3f} at P = {e['sizes'][-1]:,} where BP_0 has "
            f"{e['bp_accuracy'][-1]:.3f})" for e in never))
    return head + "; ".join(parts) + "."


def scaling_line(entries: list) -> str | None:
    """The sentence of the fits of P* against n_c m^L, one per architecture on the Random Hierarchy Models (None
    without any)."""
    fits = {e["architecture"]: e["fit"] for e in entries if e["kind"] == "rhm"}
    if not fits:
        return None
    parts = []
    for architecture, fit in fits.items():
        name = _name(architecture)
        if fit["slope"] is None:
            parts.append(f"{name}: no slope (a P* on {fit['num_points']} of "
                         f"{fit['num_points'] + len(fit['left_out'])} grammars)")
            continue
        if fit["slope_se"] is None:
            parts.append(f"{name} {fit['slope']:.2f} over {fit['num_points']} grammars (no standard error: too few "
                         f"to say)")
        else:
            verdict = ("consistent with 1 within two standard errors" if fit["consistent_with_theory"]
                       else "not consistent with 1")
            parts.append(f"{name} {fit['slope']:.2f} ± {fit['slope_se']:.2f} over {fit['num_points']} grammars, "
                         f"{verdict}")
        if fit["left_out"]:
            parts[-1] += f" (without a P*: {', '.join(fit['left_out'])})"
    return ("- **P* ∝ n_c m^L?** The slope of ln P* against ln(n_c m^L) over the Random Hierarchy Models (the "
            "theory's is 1): " + "; ".join(parts) + ".")


NO_RUNS = ("- No sample-complexity runs are published yet: `python training/sample_complexity_campaign.py OUT` "
           "trains them, and `python training/sample_complexity_campaign.py OUT --publish docs/sample_complexity` "
           "publishes its finished curves.")


def summary_lines(entries: list) -> list:
    """The bullets ``summary.md``, the results page and the README quote, made from ``pstar.json``'s ``entries``:
    one per grammar (:func:`grammar_line`) and the scaling with n_c m^L (:func:`scaling_line`); :data:`NO_RUNS`
    without any entry."""
    if not entries:
        return [NO_RUNS]
    grammars = dict.fromkeys(e["grammar"] for e in entries)
    lines = [grammar_line(g, [e for e in entries if e["grammar"] == g]) for g in grammars]
    scaling = scaling_line(entries)
    return lines + ([scaling] if scaling else [])


README_HEAD = ("- **How much data each learner needs** ([the sample complexity of "
               "learners](docs/results/sample_complexity.md))")


def _short(entry: dict) -> str:
    found = entry["pstar"]
    if found["mean"] is not None:
        return f"P* ≈ {_count(found['mean'])}"
    return f"P* ≤ {found['at_most']:,}" if found["reason"] == FROM_START else "never within ε"


def readme_line(entries: list) -> str:
    """The README's one sentence, made from ``pstar.json``'s ``entries``: the learner with the fewest samples to
    BP_0's accuracy on each grammar of the paper's kind, how many Random Hierarchy Models each learner is the fastest
    on, and which follow P* ∝ n_c m^L (slope within two standard errors of 1) and which do not."""
    if not entries:
        return README_HEAD + ": no runs are published yet."
    parts = []
    for grammar in dict.fromkeys(e["grammar"] for e in entries if e["kind"] != "rhm"):
        ours = [e for e in entries if e["grammar"] == grammar]
        best = min(_rank(e) for e in ours)
        leaders = [e for e in ours if _rank(e) == best]
        parts.append(f"on {grammar} the fewest samples within ε = {ours[0]['epsilon']:g} of BP_0's accuracy: "
                     + (" and ".join(f"{_name(e['architecture'])} ({_short(e)})" for e in leaders)
                        if best != math.inf else "none on the grid"))
    hierarchies = dict.fromkeys(e["grammar"] for e in entries if e["kind"] == "rhm")
    if hierarchies:
        wins: dict = {}
        for grammar in hierarchies:
            ours = [e for e in entries if e["grammar"] == grammar]
            best = min(_rank(e) for e in ours)
            for e in ours:
                if best != math.inf and _rank(e) == best:
                    wins[e["architecture"]] = wins.get(e["architecture"], 0) + 1
        ranked = sorted(wins.items(), key=lambda item: -item[1])
        parts.append(f"the fewest on the {len(hierarchies)} Random Hierarchy Models: "
                     + (", ".join(f"{_name(name)} on {count}" for name, count in ranked) or "none on the grid"))
        fits = {e["architecture"]: e["fit"] for e in entries if e["kind"] == "rhm"}
        verdicts = {True: [], False: [], None: []}
        for name, fit in fits.items():
            verdicts[fit["consistent_with_theory"]].append(_name(name))
        said = [f"{label}: {', '.join(names)}" for label, names in (
            ("P* ∝ n_c m^L within two standard errors", verdicts[True]), ("not", verdicts[False]),
            ("too few grammars with a P* to say", verdicts[None])) if names]
        parts.append("; ".join(said))
    return README_HEAD + ": " + "; ".join(parts) + "."


def quoted_lines(text: str) -> list:
    """The bullets a page quotes between ``<!-- sample-complexity-summary -->`` and its end marker."""
    return quoted_summary(text, SUMMARY_NAME)


# ---------------------------------------------------------------- figures


def plot_curves(entries: list, grammar: str):
    """Accuracy on k_test = 0 (left, BP_0's dashed, BP_0 − ε dotted) and KL to BP_0 (right, δ dotted) against P, one
    line per architecture, for one grammar's ``entries``."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    bp = [a for e in entries for a in e["bp_accuracy"] if a is not None]
    for entry in entries:
        label = _name(entry["architecture"])
        points = [(p, a) for p, a in zip(entry["sizes"], entry["accuracy"]) if a is not None]
        left.plot([p for p, _ in points], [a for _, a in points], marker="o", mfc="none", label=label)
        points = [(p, k) for p, k in zip(entry["sizes"], entry["kl_bp0"]) if k is not None and k > 0]
        right.plot([p for p, _ in points], [k for _, k in points], marker="o", mfc="none", label=label)
    if bp:
        level = statistics.fmean(bp)
        left.axhline(level, color="black", ls="--", lw=0.9, label="BP$_0$")
        left.axhline(level - entries[0]["epsilon"], color="grey", ls=":", lw=0.9, label="BP$_0$ − ε")
    right.axhline(entries[0]["delta"], color="grey", ls=":", lw=0.9, label="δ")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training sequences P")
    right.set_yscale("log")
    left.set_ylabel("test accuracy ($k_{test}$ = 0)")
    right.set_ylabel("KL(BP$_0$ ‖ model), nats")
    left.legend(fontsize=7)
    fig.suptitle(grammar, fontsize=10)
    fig.tight_layout()
    return fig


def plot_scaling(entries: list):
    """P* against n_c m^L on log-log axes per architecture (the spread over seeds as error bars), each with its
    least-squares line, and the theory's P* = n_c m^L dashed; None without a Random Hierarchy Model's P*."""
    hierarchies = [e for e in entries if e["kind"] == "rhm" and e["pstar"]["mean"] is not None]
    if not hierarchies:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 4.0))
    scales = [e["n_c_m_L"] for e in hierarchies]
    for architecture in dict.fromkeys(e["architecture"] for e in hierarchies):
        ours = sorted((e for e in hierarchies if e["architecture"] == architecture), key=lambda e: e["n_c_m_L"])
        fit = ours[0]["fit"]
        label = _name(architecture) + ("" if fit["slope"] is None else f" (slope {fit['slope']:.2f})")
        bars = ax.errorbar([e["n_c_m_L"] for e in ours], [e["pstar"]["mean"] for e in ours],
                           yerr=[e["pstar"]["std"] or 0.0 for e in ours], marker="o", mfc="none", ls="none",
                           capsize=2, label=label)
        if fit["slope"] is not None:
            xs = [min(scales), max(scales)]
            ax.plot(xs, [math.exp(fit["intercept"]) * x ** fit["slope"] for x in xs], color=bars[0].get_color(),
                    lw=0.9)
    xs = [min(scales) / 1.5, max(scales) * 1.5]
    ax.plot(xs, xs, color="black", ls="--", lw=0.9, label="$P^* = n_c m^L$")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(plt.NullFormatter())  # the minor labels of a short log axis overlap
    ax.set_xlabel("$n_c m^L$")
    ax.set_ylabel("$P^*$ (accuracy within ε of BP$_0$'s)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- the folder


def _table(rows: list) -> bytes:
    text = StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(ROW_COLUMNS))
    writer.writeheader()
    writer.writerows([{column: row.get(column) for column in ROW_COLUMNS} for row in rows])
    return text.getvalue().encode()


def dataset_card(num_runs: int, config_name: str, title: str = "") -> str:
    described = [f"- `{column}`: {text}" for column, text in ROW_COLUMNS.items()]
    return results_card(config_name, "runs.csv", title or "The sample complexity of learners against the exact optimum",
                        f"One row per training run ({num_runs} runs) of root classification trained until its "
                        "validation accuracy stopped improving; `pstar.json` holds P* per grammar and architecture "
                        "(its definition: `hf_treelang.analysis.pstar`).", described)


def write_results(rows: list, folder, *, epsilon: float = EPSILON, delta: float = DELTA, title: str = "") -> dict:
    """Write ``runs.csv``, ``runs.json``, ``README.md``, ``pstar.json``, ``summary.md`` and the figures of ``rows``
    into ``folder`` (see the module docstring); every file is computed first. Returns ``{"entries", "files"}``."""
    check_output_dir(folder)
    entries = curve_entries(rows, epsilon, delta)
    table = _table(rows)
    card = dataset_card(len(rows), table_config_name(table), title)
    lines = summary_lines(entries)
    figures = {f"{FIGURE_PREFIX}{grammar}.png": plot_curves([e for e in entries if e["grammar"] == grammar], grammar)
               for grammar in dict.fromkeys(e["grammar"] for e in entries)}
    scaling = plot_scaling(entries)
    if scaling is not None:
        figures[SCALING_FIGURE] = scaling
    out = prepare_output(folder)
    files = [out / "runs.csv", write_json(out / "runs.json", rows), write_json(out / "pstar.json", entries),
             out / "README.md", out / "summary.md"]
    (out / "runs.csv").write_bytes(table)
    (out / "README.md").write_text(card)
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    for stale in out.glob(f"{FIGURE_PREFIX}*.png"):  # a grammar no longer published
        if stale.name not in figures:
            stale.unlink()
    if scaling is None and (out / SCALING_FIGURE).exists():
        (out / SCALING_FIGURE).unlink()
    files += [save_figure(figure, out / name) for name, figure in figures.items()]
    return {"entries": entries, "files": files}


def publish_campaign(out, folder, *, curves: list | None = None, only=None, epsilon: float = EPSILON,
                     delta: float = DELTA, log=None) -> dict:
    """Publish the campaign in ``out`` (its curves, default the campaign's; ``only``: those named so or by a prefix)
    into ``folder``: the rows of every curve whose every run has finished with today's identity (:func:`write_results`),
    so that a campaign stopped part-way publishes whole curves only; the others are listed in ``"partial"``."""
    log = log or (lambda line: None)
    chosen = comparison.selected(campaign_curves() if curves is None else curves, only, what="curve")
    check_output_dir(folder)
    check_threshold("epsilon", epsilon, 1.0)
    check_threshold("delta", delta)
    complete, partial = published_runs(chosen, out)
    rows = [run_row(run, summary, out) for _, finished in complete for run, summary in finished]
    for curve, count in partial:
        log(f"{curve.name}: {count} of {len(curve.sizes) * len(curve.seeds)} runs finished; not published")
    result = write_results(rows, folder, epsilon=epsilon, delta=delta)
    log(f"published {len(rows)} runs of {len(complete)} curves into {folder}")
    return {**result, "partial": [curve.name for curve, _ in partial]}


def read_entries(folder) -> list:
    """The entries of ``folder/pstar.json`` (none when the folder has not been published)."""
    path = Path(folder) / "pstar.json"
    return json.loads(path.read_text()) if path.is_file() else []


__all__ = ["NO_RUNS", "README_HEAD", "ROW_COLUMNS", "SCALING_FIGURE", "curve_entries", "dataset_card", "grammar_line",
           "plot_curves", "plot_scaling", "publish_campaign", "quoted_lines", "read_entries", "readme_line", "run_row",
           "scaling_line", "summary_lines", "write_results"]
