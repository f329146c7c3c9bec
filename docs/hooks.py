"""The site's generated pages, written at build time (mkdocs hook), so that no reference or measured number is typed
twice: the command line from its parsers, the training flags from the argument dataclasses, and the results pages
from the JSON files the measuring commands wrote.

* ``reference/cli.md`` — every ``hf-treelang`` sub-command's ``--help`` (:func:`hf_treelang.cli.command_parser`);
* ``reference/flags.md`` — every field of the scripts' argument dataclasses, with its default and help, and the
  ``transformers.TrainingArguments`` fields each engine honours (:mod:`hf_treelang.train.honoured`);
* ``results/gpu.md`` — what the GPU checks show (``docs/results_data/gpu_notes.md``), then every GPU check in
  ``benchmarks/results/*.json``, rendered by ``benchmarks/gpu_check.py``'s own tables, newest first;
* ``results/comparison.md`` — ``docs/compare/``: the architecture comparison's table, rates (``protocol/rates.json``,
  where ``training/compare_architectures.py docs/compare/protocol`` writes them) and commands;
* ``results/sample_complexity.md`` — ``docs/sample_complexity/``: P* of every learner per grammar (``pstar.json``), its
  scaling with n_c m^L, the figures and every run's command (``runs.json``), as
  ``python training/sample_complexity_campaign.py OUT --publish docs/sample_complexity`` wrote them;
* ``results/reproduction.md`` — the findings of each reproduction preset in ``docs/results_data/reproduce_<preset>/``
  (``findings.json``, the file ``hf-treelang reproduce`` wrote, and a ``NOTE.md`` with its command), then the earlier
  reports (``docs/results_data/reproduction_earlier.md``).
"""

from __future__ import annotations

import dataclasses
import json
import runpy
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "results_data"


def _cli_page() -> str:
    from hf_treelang import cli

    lines = ["# Command line", "", "Every sub-command of `hf-treelang`, as its `--help` prints it (generated from the "
             "parsers at build time). The training scripts take the flags of [Training flags](flags.md).", ""]
    for name in cli.COMMANDS:
        text = cli.command_parser(name).format_help().replace("```", "'''")
        lines += [f"## `hf-treelang {name}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(lines)


def _default(field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = field.default_factory()  # type: ignore[misc]
    else:
        return "required"
    return f"`{value!r}`"


def _flags_page() -> str:
    from transformers import TrainingArguments

    from hf_treelang.train import honoured
    from hf_treelang.train.arguments import DataArguments, ModelArguments, TreeLangTrainingArguments

    inherited = {field.name: field for field in dataclasses.fields(TrainingArguments)}
    lines = ["# Training flags", "",
             "The flags of `training/run_root.py`, `run_mlm.py`, `run_clm.py` and `run_finetune.py` (or one JSON file "
             "of them), generated from the argument dataclasses at build time. A value left unset comes from "
             "`--preset` (`laptop` by default); an unset field the preset does not name keeps the default below.", ""]
    for title, cls, keep in (("Data", DataArguments, None), ("Model", ModelArguments, None),
                             ("Training (the package's own and the defaults it changes)", TreeLangTrainingArguments,
                              lambda field: field.name not in inherited or inherited[field.name].default
                              != field.default or field.metadata.get("help") != inherited[field.name].metadata.get(
                                  "help"))):
        lines += [f"## {title}", "", "| flag | default | what it does |", "|---|---|---|"]
        for field in dataclasses.fields(cls):
            if not field.init or (keep is not None and not keep(field)):
                continue
            text = " ".join(str(field.metadata.get("help", "")).split()).replace("|", "\\|")
            lines.append(f"| `--{field.name}` | {_default(field).replace('|', '/')} | {text} |")
        lines.append("")
    both = sorted(set(honoured.HONOURED_BY_BOTH) & set(inherited))
    only = sorted(set(honoured.HONOURED_BY_DATALOADER_ONLY) & set(inherited))
    lines += _presets_section()
    lines += ["## transformers' `TrainingArguments` that the engines honour", "",
              "Any other field of `TrainingArguments` given a value other than its default is refused before any "
              "work, naming the field and the engine (`hf_treelang.train.honoured`).", "",
              "Both engines: " + ", ".join(f"`--{name}`" for name in both) + ".", "",
              "The dataloader engine only (`--train_engine dataloader`): " + ", ".join(f"`--{name}`" for name in only)
              + ".", ""]
    return "\n".join(lines)


def _presets_section() -> list:
    """Every preset of every script: the values it gives the fields it sets (``hf_treelang.train.arguments.PRESETS``)."""
    from hf_treelang.train.arguments import PRESETS

    scripts = {"root": "run_root.py", "mlm": "run_mlm.py", "clm": "run_clm.py", "finetune": "run_finetune.py"}
    lines = ["## Presets", "",
             "What `--preset` sets, script by script (a flag given explicitly wins; a field a preset leaves out keeps "
             "the default above). `laptop` is the default preset.", ""]
    for task, presets in PRESETS.items():
        names = list(presets)
        fields = sorted({field for values in presets.values() for field in values})
        lines += [f"### `{scripts.get(task, task)}`", "", "| flag | " + " | ".join(f"`{name}`" for name in names) + " |",
                  "|---|" + "---|" * len(names)]
        for field in fields:
            cells = [f"`{presets[name][field]!r}`".replace("|", "/") if field in presets[name] else "–"
                     for name in names]
            lines.append(f"| `--{field}` | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _gpu_page() -> str:
    check = runpy.run_path(str(ROOT / "benchmarks" / "gpu_check.py"), run_name="gpu_check_docs")
    lines = ["# Results: the GPU checks", "",
             "Every `python benchmarks/gpu_check.py` run kept in `benchmarks/results/`, newest first, each table "
             "rendered from its JSON at build time (the command and its settings: [The GPU path](../guides/gpu.md)).",
             ""]
    notes = DATA / "gpu_notes.md"  # what the checks show, with their commands and dates
    if notes.is_file():
        lines += [notes.read_text().strip(), ""]
    files = sorted((ROOT / "benchmarks" / "results").glob("gpu_check*.json"), key=lambda path: path.name,
                   reverse=True)
    for path in files:
        results = json.loads(path.read_text())
        body = check["markdown"](results).replace("# GPU check", f"## `{path.name}`:", 1)
        lines += [body.replace("\n## ", "\n### "), ""]
    return "\n".join(lines)


def _comparison_page() -> str:
    folder = ROOT / "docs" / "compare"
    lines = ["# Results: the architecture comparison", ""]
    intro = folder / "INTRO.md"
    if intro.is_file():
        lines += [intro.read_text().strip(), ""]
    table = folder / "compare.md"
    if table.is_file():
        lines += ["## The table (`compare.md`)", "", "Generated by `hf-treelang compare` from the runs; ± is the "
                  "standard deviation over the seeds, a cell averaging fewer runs than its group says how many, and "
                  "levels in parentheses after a run's path, `(≈ 1)`, are within two paired standard errors of its "
                  "last closest BP_k (not told apart from it; among the BP_k defined on every evaluation input).",
                  "", table.read_text().strip(), "", "![The comparison](../compare/compare.png)", ""]
    rates = folder / "protocol" / "rates.json"
    if rates.is_file():
        chosen = json.loads(rates.read_text())
        lines += ["## The learning rates", "", "Each cell's rate, chosen by the final validation KL to "
                  "BP_{k_train} of model seed 0 at a quarter of the budget (`hf_treelang.sweep.comparison`):", "",
                  "| cell | chosen | final validation KL per candidate rate |", "|---|---|---|"]
        for cell, record in sorted(chosen.items()):
            candidates = ", ".join(
                f"{entry['learning_rate']:g}: " + ("–" if entry.get(record["metric"]) is None
                                                   else f"{entry[record['metric']]:.4f}")
                for entry in record["candidates"].values())
            lines.append(f"| {cell} | {record['chosen']:g} | {candidates} |")
        lines.append("")
    data = folder / "compare.json"
    if data.is_file():
        runs = json.loads(data.read_text())["runs"]
        lines += ["## Every run's command", "", "Each row of the table, trained alone (the run's own "
                  "`run_config.json` records it):", "", "| run | learning rate | command |", "|---|---|---|"]
        for run in runs:
            lines.append(f"| {Path(run['path']).name} | {run.get('learning_rate')} | `{run.get('command')}` |")
        lines.append("")
    history = folder / "EARLIER.md"
    if history.is_file():
        lines += [history.read_text().strip(), ""]
    return "\n".join(lines)


def _pstar_cell(found: dict) -> str:
    if found["mean"] is None:
        return f"≤ {found['at_most']:,}" if found["at_most"] is not None else "–"
    return f"{found['mean']:,.0f}" + ("" if found["std"] is None else f" ± {found['std']:,.0f}")


def _seed_cells(found: dict) -> str:
    return ", ".join(f"{entry['seed']}: " + (f"{entry['pstar']:,.0f}" if entry["pstar"] is not None else
                                             f"≤ {entry['at_most']:,}" if entry["at_most"] is not None else "–")
                     for entry in found["per_seed"])


def _sample_complexity_page(folder: Path | None = None) -> str:
    """The page of ``folder`` (default ``docs/sample_complexity``; a test gives another), its figures linked where
    the site serves them (``../sample_complexity/``)."""
    from hf_treelang.analysis import sample_complexity_results as results

    folder = ROOT / "docs" / "sample_complexity" if folder is None else Path(folder)
    entries = results.read_entries(folder)
    lines = ["# Results: the sample complexity of learners", "",
             "How many training sequences P each learner needs before its root classifier reaches the exact optimum: "
             "every root architecture of [the comparison](comparison.md), at its size and tuned rate, on the "
             "paper's grammar and on Random Hierarchy Models, each (P, seed) trained until its validation accuracy "
             "stops improving (`hf_treelang.sweep.sample_complexity`). P* is the smallest P at which the mean test "
             "accuracy on k_test = 0 over the seeds comes within ε of BP_0's on the same inputs, interpolated "
             "linearly in ln P between the grid points around the crossing; P*_KL the same for the KL to BP_0 "
             "below δ (`hf_treelang.analysis.pstar`). Generated from `docs/sample_complexity/pstar.json` and "
             "`runs.json`.", "",
             "## What the runs say", "", f"<!-- {results.SUMMARY_NAME} -->", *results.summary_lines(entries),
             f"<!-- /{results.SUMMARY_NAME} -->", ""]
    if not entries:
        return "\n".join(lines)
    lines += ["## P* per grammar and architecture", "",
              "± is the standard deviation of the seeds' own P* (each seed's curve alone); ≤ P: within the threshold "
              "already at the smallest P; –: never on the grid.", "",
              "| grammar | architecture | learning rate | P* (ε) | P* per seed | P*_KL (δ) | runs |",
              "|---|---|---|---|---|---|---|"]
    for entry in entries:
        lines.append(f"| {entry['grammar']} | {entry['architecture']} | {entry['learning_rate']} | "
                     f"{_pstar_cell(entry['pstar'])} (ε = {entry['epsilon']:g}) | {_seed_cells(entry['pstar'])} | "
                     f"{_pstar_cell(entry['pstar_kl'])} (δ = {entry['delta']:g}) | {entry['num_runs']} |")
    lines.append("")
    fits = {entry["architecture"]: entry["fit"] for entry in entries if entry.get("fit")}
    if fits:
        lines += ["## P* against n_c m^L", "",
                  "The least-squares slope of ln P* against ln(n_c m^L) over the Random Hierarchy Models with a P*, "
                  "± its standard error from the residuals; the theory's slope is 1.", "",
                  "| architecture | slope | grammars with a P* | consistent with 1 (2 standard errors) |",
                  "|---|---|---|---|"]
        for architecture, fit in fits.items():
            slope = "–" if fit["slope"] is None else f"{fit['slope']:.2f}" + (
                "" if fit["slope_se"] is None else f" ± {fit['slope_se']:.2f}")
            verdict = {True: "yes", False: "no", None: "–"}[fit["consistent_with_theory"]]
            lines.append(f"| {architecture} | {slope} | {fit['num_points']} | {verdict} |")
        lines.append("")
        if (folder / results.SCALING_FIGURE).is_file():
            lines += [f"![P* against n_c m^L](../sample_complexity/{results.SCALING_FIGURE})", ""]
    lines += ["## Accuracy and KL against P", ""]
    for grammar in dict.fromkeys(entry["grammar"] for entry in entries):
        figure = next(entry["figure"] for entry in entries if entry["grammar"] == grammar)
        lines += [f"### {grammar}", "", f"![{grammar}](../sample_complexity/{figure})", ""]
    runs = json.loads((folder / "runs.json").read_text())
    lines += ["## Every run's command", "",
              "Each run trained alone (its `--output_dir` relative to the campaign's folder):", "",
              "| run | learning rate | accuracy | BP_0 | KL to BP_0 | steps | stopped | command |",
              "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        lines.append(f"| {run['run']} | {run['learning_rate']} | {run['accuracy']} | {run['bp_accuracy']} | "
                     f"{run['kl_bp0']} | {run['steps']} | {run['stopped']} | `{run['command']}` |")
    lines.append("")
    return "\n".join(lines)


REPRODUCTION_PRESETS = ("laptop_full", "quick", "laptop_long")  # docs/results_data/reproduce_<preset>/: findings.json,
# NOTE.md, sweep_runs.json; the report's figures in docs/figures/reproduce_<preset>/


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def _findings_section(preset: str) -> list:
    from hf_treelang.reproduce.findings import describe, rules_digest
    from hf_treelang.reproduce.report import margins_cell

    folder = DATA / f"reproduce_{preset}"
    findings = folder / "findings.json"
    if not findings.is_file():
        return []
    record = json.loads(findings.read_text())
    today = record.get("rules") == rules_digest()
    lines = [f"## `hf-treelang reproduce --preset {preset}`"
             + (", under today's rules" if today else ", under the rules of its day"), ""]
    if not today:
        lines += ["These verdicts were decided by rules that have changed since (`findings.json` records no digest "
                  "of today's `hf_treelang/reproduce/findings.py`); the measured numbers stand.", ""]
    if record.get("wall_time_s") is not None:
        machine = record.get("machine") or {}
        root = record.get("root_run_s")
        these = record.get("wall_time_s_these_values")
        lines += [f"Wall time {_duration(record['wall_time_s'])} over {record.get('calls', 1)} call(s)"
                  + (f" ({_duration(these)} in the {record.get('calls_these_values')} made with the preset's present "
                     "values; the earlier calls trained runs these reuse)"
                     if these is not None and record.get("calls_these_values") != record.get("calls") else "")
                  + " on "
                  f"{machine.get('cpu', 'an unnamed CPU')} ({machine.get('cores', '?')} cores"
                  + (f", {machine['gpu']}" if machine.get("gpu") else "") + ")"
                  + (f"; its main root run trained in {_duration(root)}" if root is not None else "")
                  + " (from `findings.json`).", ""]
    note = folder / "NOTE.md"
    if note.is_file():
        lines += [note.read_text().strip(), ""]
    counts = ", ".join(f"{count} {verdict}" for verdict, count in record["verdicts"].items())
    lines += [f"Verdicts: {counts} (generated from `findings.json`).", "",
              "| figure | verdict | measured | margins |", "|---|---|---|---|"]
    for finding in record["findings"]:
        shown = {key: value for key, value in finding["measured"].items() if key != "margins"}
        measured = describe(shown) + (f" ({finding['note']})" if finding["note"] else "")
        lines.append(f"| {finding['figure']} | {finding['verdict']} | {measured.replace('|', '/')} | "
                     f"{margins_cell(finding['measured'].get('margins') or []).replace('|', '/')} |")
    lines.append("")
    for figure in sorted((ROOT / "docs" / "figures" / f"reproduce_{preset}").glob("*.png")):
        lines += [f"![{figure.stem}](../figures/{figure.parent.name}/{figure.name})", ""]
    return lines


def _reproduction_page() -> str:
    lines = ["# Results: the reproduction reports", ""]
    for preset in REPRODUCTION_PRESETS:
        lines += _findings_section(preset)
    earlier = DATA / "reproduction_earlier.md"
    if earlier.is_file():
        lines += [earlier.read_text().strip(), ""]
    return "\n".join(lines)


GENERATED = {"reference/cli.md": _cli_page, "reference/flags.md": _flags_page, "results/gpu.md": _gpu_page,
             "results/comparison.md": _comparison_page, "results/sample_complexity.md": _sample_complexity_page,
             "results/reproduction.md": _reproduction_page}


def on_files(files, config):
    """Add the generated pages to the site's files (nothing is written into docs/)."""
    for uri, make in GENERATED.items():
        files.append(File.generated(config, uri, content=make()))
    return files
