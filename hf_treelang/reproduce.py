"""``hf-treelang reproduce --preset quick|paper OUT``: the paper's pipeline in one command, with a report.

Steps (each writes into its own sub-folder of OUT and, when finished, a done-file ``OUT/.done/<step>.json``; a rerun
skips every finished step, so an interrupted reproduction resumes where it stopped):

1. ``data`` — the grammar and the datasets (``load_dataset("treelang", "k<k>")`` for every k the runs use);
2. ``bp`` — BP baselines: root and masked-leaf accuracy of the matched BP_{k_test} (optimal) and of BP_{k_train}
   on every k_test set;
3. ``train_root`` / ``train_mlm`` (and ``train_mlm_k<k>`` for the attention grid of the paper preset) — training
   with the BP-KL callback (Sec. 3);
4. ``dynamics`` (Fig. 1c/d, 2b, 3a), ``calibration`` (Fig. 1b), ``attention`` (Fig. 4, App. E.5), ``probe``
   (Fig. 3b, App. E.7), ``sample_complexity`` (Fig. 1f);
5. ``OUT/report.md`` with every figure embedded and the model-vs-BP tables (rewritten on every call).

Presets: ``quick`` (a reduced model and data, about 20 minutes on a 2-core CPU) and ``paper`` (the paper's sizes; a
GPU is advisable). ``tiny`` is the smoke-test preset of the test suite.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from .analysis import attention as attention_analysis
from .analysis import calibration as calibration_analysis
from .analysis import dynamics as dynamics_analysis
from .analysis import probing as probing_analysis
from .analysis import sample_complexity as sample_complexity_analysis
from .analysis._common import write_json
from .analysis._training import RunSpec, run_training
from .bp import BeliefPropagation
from .grammar import Grammar

DONE_DIR = ".done"
PRESET_FILE = "preset.json"


@dataclass(frozen=True)
class Preset:
    """Sizes of one reproduction (data: q, ℓ, σ, grammar seed, k_train; model; training; analyses)."""

    name: str
    description: str
    depth: int = 4
    num_symbols: int = 4
    sigma: float = 1.0
    grammar_seed: int = 0
    filter_level: int = 0
    model: dict = field(default_factory=dict)
    root_train: int = 2**14
    root_epochs: float = 5.0
    mlm_train: int = 2**14
    mlm_epochs: float = 10.0
    num_test: int = 2048
    num_evaluations: int = 12
    batch_size: int = 32
    learning_rate: float = 1e-4
    analysis_samples: int = 10_000
    probe_train: int = 2**13
    probe_test: int = 2**11
    probe_epochs: int = 10
    sample_sizes: tuple = (2**7, 2**9, 2**11)
    sample_epochs: float = 20.0
    sample_max_steps: int | None = None
    attention_filter_levels: tuple = ()
    use_dataset_builder: bool = True
    cpu_threads: int | None = None


PRESETS = {
    "quick": Preset(
        name="quick",
        description="ℓ=4, q=4, a reduced encoder (d=64, d'=256, 4 layers); P=2^14 root (6 epochs), P=2^14 MLM "
        "(20 epochs); 12-20 min on a 2-core CPU",
        model={"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 1, "intermediate_size": 256},
        root_train=2**14, root_epochs=6.0, mlm_train=2**14, mlm_epochs=20.0, num_test=2048, num_evaluations=12,
        analysis_samples=10_000, probe_train=2**13, probe_test=2**11, probe_epochs=8,
        sample_sizes=(2**7, 2**9, 2**11), sample_epochs=20.0, sample_max_steps=400, cpu_threads=1,
    ),
    "paper": Preset(
        name="paper",
        description="the paper's sizes: ℓ=4, q=4, d=128, d'=2048, 4 layers; P=2^17 root (10 epochs), P=2^18 MLM "
        "(1000 epochs), 10^4 test inputs, probes on 2^14 sequences for 100 epochs, MLM models for k_train=0..4",
        model={"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 1, "intermediate_size": 2048},
        root_train=2**17, root_epochs=10.0, mlm_train=2**18, mlm_epochs=1000.0, num_test=10_000,
        num_evaluations=25, analysis_samples=10_000, probe_train=2**14, probe_test=2**12, probe_epochs=100,
        sample_sizes=(2**7, 2**9, 2**11, 2**13, 2**15, 2**17), sample_epochs=50.0,
        attention_filter_levels=(1, 2, 3, 4),
    ),
    "tiny": Preset(
        name="tiny",
        description="smoke test: ℓ=3, q=4, d=32, 2 layers, a few hundred sequences",
        depth=3,
        model={"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 1, "intermediate_size": 64},
        root_train=128, root_epochs=1.0, mlm_train=128, mlm_epochs=1.0, num_test=64, num_evaluations=1,
        analysis_samples=64, probe_train=64, probe_test=32, probe_epochs=1,
        sample_sizes=(64,), sample_epochs=1.0, use_dataset_builder=False, cpu_threads=1,
    ),
}
PUBLIC_PRESETS = ("quick", "paper")


@dataclass
class StepRecord:
    """One step of a reproduction: ``status`` is ``"ran"`` or ``"skipped"`` (done in an earlier call)."""

    name: str
    status: str
    seconds: float


@dataclass
class ReproduceResult:
    """What :func:`reproduce` did: the steps in order and the report it wrote."""

    out_dir: Path
    preset: str
    steps: list
    report: Path


class _Context:
    """Paths and shared helpers of one reproduction."""

    def __init__(self, out: Path, preset: Preset, progress: bool):
        self.out, self.preset, self.progress = out, preset, progress

    @property
    def k_tests(self) -> tuple:
        return tuple(range(self.preset.depth + 1))

    def run_dir(self, name: str) -> Path:
        return self.out / "runs" / name

    def spec(self, task: str, name: str, filter_level: int | None = None) -> RunSpec:
        p = self.preset
        k = p.filter_level if filter_level is None else filter_level
        return RunSpec(
            task=task,
            output_dir=self.run_dir(name),
            depth=p.depth,
            num_symbols=p.num_symbols,
            sigma=p.sigma,
            grammar_seed=p.grammar_seed,
            filter_level=k,
            num_train=p.root_train if task == "root" else p.mlm_train,
            num_test=p.num_test,
            k_tests=(k, *[j for j in self.k_tests if j != k]),
            model_kwargs=dict(p.model),
            epochs=p.root_epochs if task == "root" else p.mlm_epochs,
            batch_size=p.batch_size,
            learning_rate=p.learning_rate,
            num_evaluations=p.num_evaluations,
            use_dataset_builder=p.use_dataset_builder,
            progress=self.progress,
        )


# ---------------------------------------------------------------- steps


def _load_arrays(ctx: _Context, num_train: int) -> dict:
    """The data of a run as the training package builds it (the dataset builder caches it for the training)."""
    from .training import load_arrays
    from .training_args import DataArguments

    p = ctx.preset
    data_args = DataArguments(grammar_seed=p.grammar_seed, sigma=p.sigma, vocab_size=p.num_symbols, depth=p.depth,
                              k_train=p.filter_level, num_train=num_train, num_eval=p.num_test, num_test=p.num_test,
                              k_test=list(ctx.k_tests), use_dataset_builder=p.use_dataset_builder)
    return load_arrays(data_args)[1]


def _step_data(ctx: _Context) -> dict:
    """The grammar, and the data of every run built once."""
    p = ctx.preset
    folder = ctx.out / "data"
    folder.mkdir(parents=True, exist_ok=True)
    grammar = Grammar.random(p.num_symbols, p.sigma, p.grammar_seed)
    grammar.save(folder / "grammar.json")
    summary = {"grammar": grammar.params, "depth": p.depth, "k_train": p.filter_level, "k_tests": list(ctx.k_tests)}
    for task, num_train in (("root", p.root_train), ("mlm", p.mlm_train)):
        arrays = _load_arrays(ctx, num_train)
        summary[f"{task}_sizes"] = {str(key if isinstance(key, str) else f"test_k{key[1]}"): int(len(value[0]))
                                    for key, value in arrays.items()}
        summary["example"] = {"leaves": arrays["train"][0][0].tolist(), "root": int(arrays["train"][1][0])}
    write_json(folder / "data.json", summary)
    return summary


def bp_baselines(preset: Preset, test_sets: dict, *, seed: int = 0) -> dict:
    """Root and masked-leaf accuracy of BP on every k_test set: the matched BP_{k_test} and BP_{k_train}.

    The inputs (and the masked positions) are those the BP-KL training callback evaluates the models on, so the
    numbers sit next to the models' test accuracies in the report.

    Args:
        preset: the data parameters.
        test_sets: ``{task: {k_test: (leaves (n, 2**ℓ), roots (n,))}}`` for task ``"root"`` and ``"mlm"``.
        seed: the training seed (it fixes the callback's masked positions).
    """
    from .callbacks import BPKLCallback

    grammar = Grammar.random(preset.num_symbols, preset.sigma, preset.grammar_seed)
    depth = preset.depth
    table = {}
    for task, tests in test_sets.items():
        first = next(iter(tests.values()))[0][:1]  # the callback's in-sample KL inputs are not needed here
        targets = BPKLCallback(grammar, depth, preset.filter_level, task, first, tests, seed=seed).prepare()
        for k_test in sorted(tests):
            inputs, positions = targets.test_inputs[k_test], targets.test_positions[k_test]
            bp = BeliefPropagation(grammar, depth, k_test, on_impossible="flag")
            if positions is None:
                marginals = bp.root_marginals(inputs)  # (n, q)
            else:
                marginals = bp.leaf_marginals(inputs)[torch.arange(inputs.shape[0]), positions]  # (n, q)
            correct = marginals.argmax(-1) == targets.test_labels[k_test]
            row = table.setdefault(k_test, {})
            row[f"{task}_optimal"] = float(correct.double().mean())
            row[f"{task}_k_train"] = float(targets.bp_accuracy[k_test])
    return table


def _step_bp(ctx: _Context) -> dict:
    from .analysis._common import pyplot, save_figure

    folder = ctx.out / "bp"
    folder.mkdir(parents=True, exist_ok=True)
    test_sets = {}
    for task, num_train in (("root", ctx.preset.root_train), ("mlm", ctx.preset.mlm_train)):
        arrays = _load_arrays(ctx, num_train)
        test_sets[task] = {k: arrays[("test", k)] for k in ctx.k_tests}
    table = bp_baselines(ctx.preset, test_sets, seed=ctx.spec("root", "root").seed)
    write_json(folder / "bp_baselines.json", {"k_train": ctx.preset.filter_level, "accuracy": table})
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    ks = sorted(table)
    for ax, task in zip(axes, ("root", "mlm")):
        ax.plot(ks, [table[k][f"{task}_optimal"] for k in ks], marker="o", label="BP$_{k_{test}}$ (optimal)")
        ax.plot(ks, [table[k][f"{task}_k_train"] for k in ks], marker="s", ls="--",
                label=f"BP$_{{{ctx.preset.filter_level}}}$ (k_train)")
        ax.set_xlabel("$k_{test}$")
        ax.set_ylabel("accuracy")
        ax.set_title("root" if task == "root" else "masked leaf", fontsize=10)
        ax.set_xticks(ks)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, folder / "bp_baselines.png")
    return {"accuracy": table}


def _train_step(task: str, name: str, filter_level: int | None = None) -> Callable:
    def step(ctx: _Context) -> dict:
        summary = run_training(ctx.spec(task, name, filter_level))
        return {key: summary[key] for key in ("accuracy", "bp_accuracy", "global_step", "train_runtime_s")}

    return step


def _step_dynamics(ctx: _Context) -> dict:
    out = {}
    for task in ("root", "mlm"):
        result = dynamics_analysis.learning_dynamics(ctx.run_dir(task))
        title = f"{'Root classification' if task == 'root' else 'MLM'}, k_train={ctx.preset.filter_level}"
        dynamics_analysis.write_outputs(result, ctx.out / "dynamics", name=task, title=title)
        out[task] = {"alignment_sequence": result.alignment_sequence}
    return out


def _step_calibration(ctx: _Context) -> dict:
    out = {}
    for task in ("mlm", "root"):
        result = calibration_analysis.calibrate(ctx.run_dir(task), task=task, num_samples=ctx.preset.analysis_samples)
        calibration_analysis.write_outputs(result, ctx.out / "calibration" / task)
        out[task] = result.to_dict()["sets"]
    return out


def _step_attention(ctx: _Context) -> dict:
    n = ctx.preset.analysis_samples
    mlm_runs = [ctx.run_dir("mlm")] + [ctx.run_dir(f"mlm_k{k}") for k in ctx.preset.attention_filter_levels]
    attention_analysis.write_outputs(attention_analysis.attention_grid(mlm_runs, num_samples=n),
                                     ctx.out / "attention" / "mlm")
    attention_analysis.write_outputs(attention_analysis.attention_grid([ctx.run_dir("root")], num_samples=n),
                                     ctx.out / "attention" / "root")
    return {"models": [str(r) for r in mlm_runs]}


def _step_probe(ctx: _Context) -> dict:
    p = ctx.preset
    out = {}
    for positions in ("all", "ends"):
        result = probing_analysis.probe(ctx.run_dir("mlm"), data_filter_level=0, positions=positions,
                                        num_train=p.probe_train, num_test=p.probe_test, epochs=p.probe_epochs,
                                        progress=ctx.progress)
        probing_analysis.write_outputs(result, ctx.out / "probe")
        out[positions] = {"levels": result.levels, "accuracy": result.accuracy.tolist()}
    return out


def _step_sample_complexity(ctx: _Context) -> dict:
    p = ctx.preset
    result = sample_complexity_analysis.sample_complexity_sweep(
        ctx.run_dir("mlm"), list(p.sample_sizes), ctx.out / "runs" / "sample_complexity", epochs=p.sample_epochs,
        max_steps=p.sample_max_steps, num_test=p.num_test, batch_size=p.batch_size,
        learning_rate=p.learning_rate, progress=ctx.progress, use_dataset_builder=p.use_dataset_builder, num_evaluations=1,
    )
    sample_complexity_analysis.write_outputs(result, ctx.out / "sample_complexity")
    return result.to_dict()


def steps_of(preset: Preset) -> list:
    """The ordered (name, function) steps of a preset."""
    steps = [("data", _step_data), ("bp", _step_bp), ("train_root", _train_step("root", "root")),
             ("train_mlm", _train_step("mlm", "mlm"))]
    steps += [(f"train_mlm_k{k}", _train_step("mlm", f"mlm_k{k}", k)) for k in preset.attention_filter_levels]
    steps += [("dynamics", _step_dynamics), ("calibration", _step_calibration), ("attention", _step_attention),
              ("probe", _step_probe), ("sample_complexity", _step_sample_complexity)]
    return steps


# ---------------------------------------------------------------- report


def _read_json(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if abs(value) >= 10 ** -digits or value == 0 else f"{value:.1e}"
    return str(value)


def _figure(lines: list, path: Path, out: Path, caption: str) -> None:
    if path.is_file():
        lines.append(f"![{caption}]({path.relative_to(out).as_posix()})")
        lines.append(f"*{caption}*")
        lines.append("")


def write_report(out: Path, preset: Preset, records: list) -> Path:
    """OUT/report.md: settings, model-vs-BP tables and every figure (steps not run yet are marked missing)."""
    p = preset
    k = p.filter_level
    lines = [
        f"# hf-treelang reproduction — preset `{p.name}`",
        "",
        f"{p.description}.",
        "",
        "| setting | value |",
        "|---|---|",
        f"| data | q={p.num_symbols}, ℓ={p.depth}, σ={p.sigma}, grammar seed {p.grammar_seed}, k_train={k} |",
        f"| model | {', '.join(f'{key}={value}' for key, value in p.model.items())} |",
        f"| root classification | P={p.root_train}, {p.root_epochs:g} epochs |",
        f"| masked language modelling | P={p.mlm_train}, {p.mlm_epochs:g} epochs |",
        f"| optimiser | Adam, learning rate {p.learning_rate:g}, batch {p.batch_size} |",
        f"| test sets | {p.num_test} sequences per k_test |",
        "",
    ]
    bp = _read_json(out / "bp" / "bp_baselines.json")
    runs = {task: _read_json(out / "runs" / task / "run_done.json") for task in ("root", "mlm")}
    lines += ["## Model vs BP", "",
              f"Test accuracy of the trained models on data of every filter level k_test, against BP_{k} (the oracle "
              "matched to the training data, evaluated on the same inputs) and the optimal BP_{k_test}.", ""]
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
        summary = _read_json(out / "dynamics" / f"{task}.json")
        if summary:
            lines.append(f"{task}: closest BP_k along training {summary['alignment_sequence']}")
            lines.append("")
        _figure(lines, out / "dynamics" / f"{task}.png", out, f"{task}: KL to BP_k and accuracy per k_test")

    lines += ["## Calibration (Fig. 1b)", "", "| task | inputs | KL | argmax match | Spearman | model acc | BP acc |",
              "|---|---|---|---|---|---|---|"]
    for task in ("mlm", "root"):
        summary = _read_json(out / "calibration" / task / "calibration.json")
        for name, m in ((summary or {}).get("sets") or {}).items():
            lines.append(f"| {task} | {name} | {_fmt(m['kl_mean'], 4)} | {_fmt(m['argmax_match'])} | "
                         f"{_fmt(m['spearman_mean'])} | {_fmt(m['model_accuracy'])} | {_fmt(m['bp_accuracy'])} |")
    lines.append("")
    for task in ("mlm", "root"):
        _figure(lines, out / "calibration" / task / "calibration.png", out, f"{task}: model vs BP probabilities")

    lines += ["## Attention maps (Fig. 4, App. E.5)", ""]
    _figure(lines, out / "attention" / "mlm" / "attention.png", out, "MLM: average attention per layer")
    _figure(lines, out / "attention" / "root" / "attention.png", out, "root classifier: average attention per layer")

    lines += ["## Probing (Fig. 3b, App. E.6-E.7)", ""]
    for name in ("probe", "probe_ends"):
        summary = _read_json(out / "probe" / f"{name}.json")
        if summary:
            where = "all positions" if name == "probe" else "first and last positions only"
            lines += [f"Trained on {where}; held-out accuracy (rows: layer, 0 = embedding; columns: ancestor level):",
                      "", "| layer | " + " | ".join(f"level {m}" for m in summary["levels"]) + " |",
                      "|---|" + "---|" * len(summary["levels"])]
            for layer, row in zip(summary["layers"], summary["accuracy"]):
                lines.append(f"| {layer} | " + " | ".join(_fmt(a) for a in row) + " |")
            lines.append("| BP | " + " | ".join(_fmt(a) for a in summary["bp_accuracy"]) + " |")
            lines.append("")
        _figure(lines, out / "probe" / f"{name}.png", out, f"ancestor probes ({name})")

    lines += ["## Sample complexity (Fig. 1f)", ""]
    summary = _read_json(out / "sample_complexity" / "sample_complexity.json")
    if summary:
        lines += ["| arm | " + " | ".join(f"P={s}" for s in summary["sizes"]) + " |",
                  "|---|" + "---|" * len(summary["sizes"])]
        for arm in sample_complexity_analysis.ARMS:
            values = summary["accuracy"].get(arm)
            if values is None:
                continue
            lines.append(f"| {arm} | " + " | ".join(_fmt(a) for a in values) + " |")
        lines += [f"| BP | {_fmt(summary['bp_accuracy'])} |", ""]
    _figure(lines, out / "sample_complexity" / "sample_complexity.png", out, "root accuracy vs labelled P")

    done = {r.name: r for r in records}
    lines += ["## Steps", "", "| step | status | seconds |", "|---|---|---|"]
    for name, _ in steps_of(p):
        record = done.get(name)
        marker = _read_json(out / DONE_DIR / f"{name}.json")
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


# ---------------------------------------------------------------- driver


def _check_out(out: Path, preset: Preset) -> None:
    if out.exists() and not out.is_dir():
        raise ValueError(f"OUT {str(out)!r} exists and is not a folder")
    recorded = _read_json(out / PRESET_FILE) if out.is_dir() else None
    if recorded is not None and recorded.get("name") != preset.name:
        raise ValueError(f"OUT {str(out)!r} holds a reproduction with preset {recorded.get('name')!r}; use another "
                         f"folder for preset {preset.name!r}")


def reproduce(out_dir, preset: str = "quick", *, progress: bool = True, log: Callable | None = None,
              only: list | None = None) -> ReproduceResult:
    """Run (or resume) every step of a preset into ``out_dir`` and write ``out_dir/report.md``.

    Args:
        out_dir: the output folder (created; a folder of another preset is refused).
        preset: ``"quick"``, ``"paper"`` (or ``"tiny"``, the smoke test).
        progress: show progress bars.
        log: called with one line of text per step (the CLI prints them).
        only: run only these steps (the others are left as they are); ``None`` runs all.
    """
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {PUBLIC_PRESETS}, got {preset!r}")
    spec = PRESETS[preset]
    out = Path(out_dir)
    _check_out(out, spec)
    steps = steps_of(spec)
    names = [name for name, _ in steps]
    if only is not None:
        unknown = [name for name in only if name not in names]
        if unknown:
            raise ValueError(f"only: unknown steps {unknown}; steps of preset {preset!r}: {names}")
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / PRESET_FILE, asdict(spec))
    (out / DONE_DIR).mkdir(exist_ok=True)
    ctx = _Context(out, spec, progress)
    log = log or (lambda line: None)
    records = []
    threads = torch.get_num_threads()
    if spec.cpu_threads:
        # Small models on a few shared cores: one thread avoids OpenMP oversubscription, which can be 10x slower.
        torch.set_num_threads(spec.cpu_threads)
    try:
        bar = tqdm(steps, desc="reproduce", unit="step", disable=not progress)
        for name, function in bar:
            if only is not None and name not in only:
                continue
            bar.set_postfix_str(name)
            marker = out / DONE_DIR / f"{name}.json"
            if marker.is_file():
                records.append(StepRecord(name, "skipped", 0.0))
                log(f"{name}: done earlier, skipped")
                continue
            start = time.perf_counter()
            summary = function(ctx)
            seconds = time.perf_counter() - start
            write_json(marker, {"step": name, "seconds": seconds, "summary": summary})
            records.append(StepRecord(name, "ran", seconds))
            log(f"{name}: finished in {seconds:.1f} s")
    finally:
        torch.set_num_threads(threads)
    report = write_report(out, spec, records)
    return ReproduceResult(out_dir=out, preset=preset, steps=records, report=report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-treelang reproduce",
        description="Data, BP baselines, training and every analysis of the paper, with OUT/report.md. Resumable: "
        "finished steps (OUT/.done/<step>.json) are skipped when the command is rerun.",
    )
    parser.add_argument("out", help="output folder")
    parser.add_argument("--preset", default="quick", metavar="{quick,paper}",
                        help="quick: about 20 min on a 2-core CPU; paper: the paper's sizes (GPU advisable)")
    parser.add_argument("--only", nargs="+", default=None, help="run only these steps")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    try:
        result = reproduce(args.out, args.preset, progress=not args.no_progress, only=args.only,
                           log=lambda line: print(line, flush=True))
    except (ValueError, TypeError) as error:
        sys.stderr.write(f"hf-treelang reproduce: error: {error}\n")
        return 2
    print(f"wrote {result.report} ({time.perf_counter() - start:.0f} s)")
    return 0
