"""The steps of a reproduction, each a function of a :class:`Context` that writes its sub-folder and returns a summary.

Steps: ``data``, ``bp``, ``train_root``, ``train_mlm`` (and ``train_mlm_k<k>``), ``dynamics``, ``calibration``,
``attention``, ``probe``, ``sample_complexity``, then the sweeps a preset sizes: ``root_sweep`` (Fig. 2a / App.
E.3), ``layers_sweep`` (App. E.1), ``seed_sweep`` (App. E.2), ``classifier_attention`` (App. E.5) and
``probe_filtered`` (App. E.7, right); :func:`steps_of` lists those of a preset in order.

Every training is a :class:`~hf_treelang.train.run.Run` named after its folder under ``OUT/runs``
(:meth:`Context.spec`, :meth:`Context.sweep_spec`: the ``paper`` preset with the reproduction preset's sizes), trained
or reused through ``Context.run`` (by default :func:`~hf_treelang.train.loop.train` with ``reuse=True``); the sweeps
are lists of them (:func:`root_sweep_specs`), gathered by :mod:`hf_treelang.analysis.accuracy_curves`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from hf_treelang.analysis import accuracy_curves
from hf_treelang.analysis import attention as attention_analysis
from hf_treelang.analysis import calibration as calibration_analysis
from hf_treelang.analysis import dynamics as dynamics_analysis
from hf_treelang.analysis import probing as probing_analysis
from hf_treelang.analysis import sample_complexity as sample_complexity_analysis
from hf_treelang.analysis.io import write_json
from hf_treelang.analysis.kl_vs_samples import kl_vs_samples
from hf_treelang.analysis.kl_vs_samples import write_outputs as write_kl_outputs
from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.oracle import bp_accuracy, task_inputs
from hf_treelang.plotting import pyplot, save_figure
from hf_treelang.train.arguments import DataArguments, apply_grammar_file, grammar_content_hash, read_grammar_file
from hf_treelang.train.callbacks import REFERENCE_SIZE, BPKLCallback
from hf_treelang.train.data import load_run_data
from hf_treelang.sweep.runner import sweep_run
from hf_treelang.train.loop import bp_callback_for, train
from hf_treelang.train.folders import finished_run
from hf_treelang.train.run import Run, command_line

from .presets import Preset, step_names

SWEEP_DIR = "sweep"  # OUT/runs/sweep/seed<s>_k<k>_L<n_L>_P<P>: one root-classification run of a sweep
SAMPLE_COMPLEXITY_DIR = "sample_complexity"  # OUT/runs/sample_complexity/<arm>-P<P>: the runs of Fig. 1f


def with_grammar_file(preset: Preset, path) -> Preset:
    """``preset`` on the grammar in ``path`` (``reproduce --grammar_file``): every run and the data step use it
    (:attr:`Preset.grammar_file`, its absolute path, and :attr:`Preset.grammar_sha256`, its content), q and, for rules
    given per level, ℓ are the file's, and the sweep over other grammar seeds (App. E.2) is left out. A file that is
    missing or not a grammar is a one-line ValueError naming ``grammar_file``."""
    grammar = read_grammar_file(path)
    return replace(preset, grammar_file=str(Path(path).resolve()), grammar_sha256=grammar_content_hash(grammar),
                   num_symbols=grammar.num_symbols, depth=grammar.depth or preset.depth, grammar_seeds=())


def preset_grammar(preset: Preset) -> Grammar:
    """The grammar of a reproduction: its grammar file's, else the generated one of its seed, q and σ."""
    if preset.grammar_file is not None:
        return read_grammar_file(preset.grammar_file)
    return Grammar.random(preset.num_symbols, preset.sigma, preset.grammar_seed)


class Context:
    """Paths and shared helpers of one reproduction; ``run`` trains one :class:`~hf_treelang.train.run.Run` (or
    reuses its folder) and returns its summary."""

    def __init__(self, out: Path, preset: Preset, progress: bool, run: Callable | None = None):
        self.out, self.preset, self.progress = out, preset, progress
        self.run = run or (lambda run: train(run, reuse=True).summary)

    @property
    def k_tests(self) -> tuple:
        return tuple(range(self.preset.depth + 1))

    @property
    def num_layers(self) -> int:
        """n_L of the preset's model (the depth ℓ when the model does not set it, as the paper)."""
        return int(self.preset.model.get("num_hidden_layers", self.preset.depth))

    def run_dir(self, name: str) -> Path:
        return self.out / "runs" / name

    def arguments(self, **values) -> dict:
        """A run of this reproduction in the training scripts' names, then ``values``: the data of the preset on the
        scripts' preset :attr:`Preset.training_preset` — ``"laptop"``: nothing else (the laptop preset sets the
        model, optimiser and sizes); ``"paper"``: the paper's model and optimiser with this preset's model, sizes,
        batch and learning rate."""
        p = self.preset
        grammar = ({"grammar_file": p.grammar_file} if p.grammar_file is not None else
                   {"grammar_seed": int(p.grammar_seed), "sigma": float(p.sigma), "num_symbols": int(p.num_symbols),
                    "use_dataset_builder": bool(p.use_dataset_builder)})
        arguments = {"preset": p.training_preset, **grammar, "depth": int(p.depth), "report_to": "none",
                     "logging_steps": 10**9, "disable_tqdm": not self.progress}
        if p.training_preset != "laptop":
            arguments.update({"num_test": int(p.num_test), "num_eval": int(p.num_test), **p.model,
                              "per_device_train_batch_size": int(p.batch_size),
                              "learning_rate": float(p.learning_rate), "max_steps": -1, "seed": 0,
                              "num_checkpoints": 0, "checkpoint_epochs": None})
        return {**arguments, **values}

    def spec(self, task: str, name: str, filter_level: int | None = None) -> Run:
        """The main run ``name`` of ``task`` (``root`` or ``mlm``) at k_train ``filter_level`` (default: preset's),
        tested on every k_test (k_train's first); an MLM given a ``filter_level`` is one of the filtered models
        (:attr:`Preset.filtered_mlm_epochs`). With the ``laptop`` training preset, the run at the default data
        is the training script's run with no arguments (``python training/run_root.py``; the main MLM with
        ``--preset`` :attr:`Preset.mlm_training_preset` when set)."""
        p = self.preset
        k = p.filter_level if filter_level is None else filter_level
        k_test = [int(k), *[j for j in self.k_tests if j != k]]
        filtered = task == "mlm" and filter_level is not None and p.filtered_mlm_epochs is not None
        if p.training_preset == "laptop":
            values = {} if (k, k_test) == (0, list(self.k_tests)) else {"k_train": int(k), "k_test": k_test}
            values.update(self.evaluation_sizes(p.main_num_eval, p.main_num_test))
            if filtered:
                values["num_train_epochs"] = float(p.filtered_mlm_epochs)
            elif task == "mlm" and p.mlm_training_preset:
                values["preset"] = p.mlm_training_preset
            return sweep_run(task, self.arguments(**values), self.out, name)
        epochs = p.root_epochs if task == "root" else p.filtered_mlm_epochs if filtered else p.mlm_epochs
        checkpoint_epochs = p.root_checkpoint_epochs if task == "root" else p.mlm_checkpoint_epochs
        return sweep_run(task, self.arguments(
            k_train=int(k), num_train=int(p.root_train if task == "root" else p.mlm_train),
            k_test=k_test, num_train_epochs=float(epochs), num_evaluations=int(p.num_evaluations),
            checkpoint_epochs=[int(e) for e in checkpoint_epochs if e <= epochs] or None), self.out, name)

    @staticmethod
    def evaluation_sizes(num_eval: int | None, num_test: int | None) -> dict:
        """The run arguments of the in-sample (validation) and test sets' sizes a preset sets (None: not set)."""
        sizes = {"num_eval": num_eval, "num_test": num_test}
        return {name: int(value) for name, value in sizes.items() if value is not None}

    def sweep_training(self) -> dict:
        """How long a sweep run trains: ``sweep_epochs``, or by the validation stopping rule, not before
        ``sweep_min_steps``, up to ``sweep_max_steps`` (:attr:`Preset.sweep_patience`)."""
        p = self.preset
        if p.sweep_patience is None:
            return {"num_train_epochs": float(p.sweep_epochs)}
        floor = {} if not p.sweep_min_steps else {"early_stopping_min_steps": int(p.sweep_min_steps)}
        return {"max_steps": int(p.sweep_max_steps), "early_stopping_patience": int(p.sweep_patience),
                "early_stopping_eval_steps": int(p.sweep_check_steps), **floor}

    def sweep_spec(self, filter_level: int, num_train: int, *, num_layers: int | None = None,
                   grammar_seed: int | None = None) -> Run:
        """One root-classification run of a sweep: k_train, P, n_L and grammar seed; tested on k_train and k = 0.

        The run with the main root run's settings is the main root run itself (``runs/root``), reused.
        """
        p = self.preset
        num_layers = self.num_layers if num_layers is None else int(num_layers)
        seed = p.grammar_seed if grammar_seed is None else int(grammar_seed)
        if p.sweep_patience is None and (filter_level, num_train, num_layers, seed, p.sweep_epochs) == (
                p.filter_level, p.root_train, self.num_layers, p.grammar_seed, p.root_epochs):
            return self.spec("root", "root")
        return sweep_run("root", self.arguments(
            **({} if p.grammar_file is not None else {"grammar_seed": seed}),  # a grammar file has no seed
            k_train=int(filter_level), num_train=int(num_train),
            k_test=[int(filter_level), 0] if filter_level else [0], num_hidden_layers=num_layers,
            **self.sweep_training(), **self.evaluation_sizes(p.sweep_num_eval, p.sweep_num_test),
            num_evaluations=1,  # step 0, step 1 and the last step: the sweeps read the final accuracy only
        ), self.out, f"{SWEEP_DIR}/seed{seed}_k{filter_level}_L{num_layers}_P{num_train}")


def root_sweep_specs(ctx: Context, *, filter_levels, grammar_seed: int | None = None, layer_counts=None,
                     sizes=()) -> list:
    """The runs of an accuracy-vs-P sweep: every k_train in ``filter_levels``, every P in ``sizes`` (empty: the
    preset's for that k, :meth:`Preset.sweep_sizes_of`) and every n_L in ``layer_counts`` (default: the preset's
    model)."""
    layer_counts = (ctx.num_layers,) if layer_counts is None else tuple(layer_counts)
    return [ctx.sweep_spec(k, size, num_layers=n, grammar_seed=grammar_seed)
            for k in filter_levels for n in layer_counts for size in (sizes or ctx.preset.sweep_sizes_of(k))]


def layers_sweep_specs(ctx: Context) -> list:
    """The runs of App. E.1 (Fig. 6): k_train = 0, every n_L of the preset, at :attr:`Preset.layer_sizes`."""
    p = ctx.preset
    return root_sweep_specs(ctx, filter_levels=(0,), layer_counts=p.layer_counts, sizes=p.layer_sizes)


def seed_sweep_specs(ctx: Context, grammar_seed: int) -> list:
    """The runs of App. E.2 (Fig. 7) on grammar ``grammar_seed``: :attr:`Preset.seed_sweep_levels` at
    :attr:`Preset.seed_sweep_sizes`."""
    p = ctx.preset
    return root_sweep_specs(ctx, filter_levels=p.seed_sweep_levels or p.sweep_filter_levels,
                            grammar_seed=grammar_seed, sizes=p.seed_sweep_sizes)


def figure_sweep_runs(ctx: Context) -> list:
    """``(run, figures)`` of every run of the preset's figure sweeps, each folder once, in the steps' order: Figs.
    2a / 8 / 9 (and 11 at each k_train's largest P), 6 and 7."""
    p = ctx.preset
    steps = set(p.figure_steps())
    entries: dict = {}

    def add(run: Run, figures) -> None:
        figures_of = entries.setdefault(run.name, (run, []))[1]
        figures_of.extend(f for f in figures if f not in figures_of)

    if "root_sweep" in steps:
        for run in root_sweep_specs(ctx, filter_levels=p.sweep_filter_levels):
            largest = run.data_args.num_train == max(p.sweep_sizes_of(run.data_args.k_train))
            add(run, ("2a", "8", "9", "11") if largest and "classifier_attention" in steps else ("2a", "8", "9"))
    if "layers_sweep" in steps:
        for run in layers_sweep_specs(ctx):
            add(run, ("6",))
    if "seed_sweep" in steps:
        for seed in p.grammar_seeds:
            for run in seed_sweep_specs(ctx, seed):
                add(run, ("7",))
    return list(entries.values())


SWEEP_RUNS_FILE = "sweep_runs.json"  # OUT/sweep_runs.json: one object per finished run of the figure sweeps


def write_sweep_runs(ctx: Context) -> list:
    """``OUT/sweep_runs.json``: one object per finished run of the figure sweeps (:func:`figure_sweep_runs`) — the
    figures it feeds (``figure``: the first), the command that trains it alone (its folder relative to OUT), P,
    k_train, n_L, grammar seed, model seed, the test sequences per k_test, its final test accuracy on k_test =
    k_train and k_test = 0 with BP_k_train's on the same inputs, and how long it trained (steps, the validation
    stopping rule's record). Returns the rows."""
    rows = []
    for run, figures in figure_sweep_runs(ctx):
        summary = finished_run(run.output_dir, run.identity)
        if summary is None:
            continue
        d, final = run.data_args, summary["final"]
        stopping = summary.get("early_stopping") or {}
        rows.append({
            "figure": figures[0], "figures": list(figures), "name": run.name,
            "command": command_line(run.task, run.arguments, run.output_dir.relative_to(ctx.out)),
            "num_train": int(d.num_train), "k_train": int(d.k_train),
            "num_hidden_layers": int(run.model_args.model_kwargs(d.depth)["num_hidden_layers"]),
            "grammar_seed": None if d.grammar_seed is None else int(d.grammar_seed),  # None: a grammar file's
            "seed": int(run.training_args.seed), "num_test": int(d.num_test),
            "test_accuracy": final.get(f"eval_acc_ktest{d.k_train}"),
            "bp_accuracy": final.get(f"eval_bp_acc_ktest{d.k_train}"),
            "test_accuracy_k_test0": final.get("eval_acc_ktest0"), "bp_accuracy_k_test0": final.get("eval_bp_acc_ktest0"),
            "global_step": summary["global_step"], "train_runtime_s": summary["train_runtime_s"],
            "stopped": stopping.get("stopped"), "best_step": stopping.get("best_step"),
            "validation_accuracy": stopping.get("best_accuracy"), "identity": run.identity,
        })
    write_json(ctx.out / SWEEP_RUNS_FILE, rows)
    return rows


def sweep_points(ctx: Context, runs: list) -> list:
    """Train (or reuse) every run of ``runs`` with ``ctx.run``; returns their :class:`SweepPoint`."""
    points = []
    for run in runs:
        summary = ctx.run(run)
        d = run.data_args
        points.append(accuracy_curves.SweepPoint(
            filter_level=int(d.k_train), num_train=int(d.num_train),
            num_layers=int(run.model_args.model_kwargs(d.depth)["num_hidden_layers"]),
            grammar_seed=None if d.grammar_seed is None else int(d.grammar_seed), final=summary["final"],
            output_dir=str(run.output_dir),
            num_test=int(d.num_test)))
    return points


def _run_data(ctx: Context, num_train: int):
    """The data of a run exactly as the training builds it (the dataset builder caches it for the training)."""
    p = ctx.preset
    data_args = DataArguments(grammar_seed=p.grammar_seed, sigma=p.sigma, num_symbols=p.num_symbols, depth=p.depth,
                              k_train=p.filter_level, num_train=num_train, num_eval=p.num_test, num_test=p.num_test,
                              k_test=list(ctx.k_tests), use_dataset_builder=p.use_dataset_builder,
                              grammar_file=p.grammar_file)
    apply_grammar_file(data_args, {"depth"})  # a grammar file's data arguments, as its runs have them
    return load_run_data(data_args)


def _step_data(ctx: Context) -> dict:
    """The grammar, and the data of every run built once."""
    p = ctx.preset
    folder = ctx.out / "data"
    folder.mkdir(parents=True, exist_ok=True)
    grammar = preset_grammar(p)
    grammar.save(folder / "grammar.json")
    summary = {"grammar": grammar.params, **({"grammar_file": p.grammar_file} if p.grammar_file else {}),
               "depth": p.depth, "k_train": p.filter_level, "k_tests": list(ctx.k_tests)}
    for task, num_train in (("root", p.root_train), ("mlm", p.mlm_train)):
        data = _run_data(ctx, num_train)
        sizes = {"train": len(data.train), "validation": len(data.validation)}
        sizes.update({f"test_k{k}": len(test) for k, test in data.tests.items()})
        summary[f"{task}_sizes"] = sizes
        summary["example"] = {"leaves": data.train.leaves[0].tolist(), "root": int(data.train.roots[0])}
    write_json(folder / "data.json", summary)
    return summary


def bp_baselines(preset: Preset, test_sets: dict) -> dict:
    """Root and masked-leaf accuracy of BP on every k_test set: the matched BP_{k_test} and BP_{k_train}.

    The inputs and their masked positions are those of the BP-KL training callback's reference accuracy
    (:meth:`hf_treelang.train.callbacks.BPKLCallback.reference` of the same test splits: the test set, continued
    along its split stream to :data:`~hf_treelang.train.callbacks.REFERENCE_SIZE` sequences), so that the
    numbers equal the runs' ``eval_bp_acc_ktest*`` next to the models' test accuracies in the report.

    Args:
        preset: the data parameters.
        test_sets: ``{task: {k_test: EvaluationSet}}`` for task ``"root"`` and ``"mlm"``.
    """
    grammar = preset_grammar(preset)
    q, depth = preset.num_symbols, preset.depth
    matched = BeliefPropagation(grammar, depth, preset.filter_level, on_impossible="flag")
    table = {}
    for task, tests in test_sets.items():
        for k_test in sorted(tests):
            test = tests[k_test]
            data = task_inputs(task, test.leaves, test.roots, mask_token_id=q, sampling_seed=test.sampling_seed)
            reference = BPKLCallback(grammar, depth, preset.filter_level, task, test.leaves,
                                     reference_size=REFERENCE_SIZE).reference
            data = reference(k_test, data, test.sampling_seed)
            row = table.setdefault(k_test, {})
            row[f"{task}_optimal"] = bp_accuracy(BeliefPropagation(grammar, depth, k_test, on_impossible="flag"), data)
            row[f"{task}_k_train"] = bp_accuracy(matched, data)
    return table


def _step_bp(ctx: Context) -> dict:
    folder = ctx.out / "bp"
    folder.mkdir(parents=True, exist_ok=True)
    test_sets = {}
    for task, num_train in (("root", ctx.preset.root_train), ("mlm", ctx.preset.mlm_train)):
        test_sets[task] = _run_data(ctx, num_train).tests
    table = bp_baselines(ctx.preset, test_sets)
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
    def step(ctx: Context) -> dict:
        summary = ctx.run(ctx.spec(task, name, filter_level))
        return {key: summary[key] for key in ("accuracy", "bp_accuracy", "global_step", "train_runtime_s")}

    return step


def _step_dynamics(ctx: Context) -> dict:
    """Fig. 1c/d, 2b, 3a, 10: the curves of the root and MLM runs, with what their findings need to know of the
    runs' own evaluation inputs (:func:`~hf_treelang.analysis.dynamics.oracle_baselines`: how often BP_k and
    BP_k_train disagree there, the most-frequent-symbol accuracy)."""
    out = {}
    for task in ("root", "mlm"):
        run = ctx.spec(task, task)
        callback = bp_callback_for(load_run_data(run.data_args), run.data_args, task, batch_size=1024)
        result = dynamics_analysis.learning_dynamics(ctx.run_dir(task))
        result = replace(result, **dynamics_analysis.oracle_baselines(callback))
        title = f"{'Root classification' if task == 'root' else 'MLM'}, k_train={ctx.preset.filter_level}"
        dynamics_analysis.write_outputs(result, ctx.out / "dynamics", name=task, title=title)
        out[task] = {"alignment_sequence": result.alignment_sequence}
    return out


def _step_calibration(ctx: Context) -> dict:
    out = {}
    for task in ("mlm", "root"):
        result = calibration_analysis.calibrate(ctx.run_dir(task), task=task, num_samples=ctx.preset.analysis_samples)
        calibration_analysis.write_outputs(result, ctx.out / "calibration" / task)
        out[task] = result.to_dict()["sets"]
    return out


def _step_attention(ctx: Context) -> dict:
    n = ctx.preset.analysis_samples
    mlm_runs = [ctx.run_dir("mlm")] + [ctx.run_dir(f"mlm_k{k}") for k in ctx.preset.attention_filter_levels]
    attention_analysis.write_outputs(attention_analysis.attention_grid(mlm_runs, num_samples=n),
                                     ctx.out / "attention" / "mlm")
    attention_analysis.write_outputs(attention_analysis.attention_grid([ctx.run_dir("root")], num_samples=n),
                                     ctx.out / "attention" / "root")
    return {"models": [str(r) for r in mlm_runs]}


def _probe_settings(p: Preset) -> dict:
    return {"num_train": p.probe_train, "num_validation": p.probe_validation, "num_test": p.probe_test,
            "epochs": p.probe_epochs, "batch_size": p.probe_batch_size, "learning_rate": p.probe_learning_rate}


def _step_probe(ctx: Context) -> dict:
    p = ctx.preset
    out = {}
    for positions in ("all", "ends"):
        result = probing_analysis.probe(ctx.run_dir("mlm"), data_filter_level=0, positions=positions,
                                        probe_hidden=p.probe_hidden, progress=ctx.progress, **_probe_settings(p))
        probing_analysis.write_outputs(result, ctx.out / "probe")
        out[positions] = {"levels": result.levels, "accuracy": result.accuracy.tolist(),
                          "final_accuracy": result.final_accuracy.tolist()}
    return out


def _step_sample_complexity(ctx: Context) -> dict:
    """Fig. 1f: every arm trains ``sample_epochs`` (the paper preset: 200, as the root runs and the authors'
    fine-tuning); the pre-trained arms get the preset's ``finetune_classifier_hidden_size`` (their root readout)
    and a frozen encoder in eval mode."""
    p = ctx.preset

    def train_in_this_sweep(run: Run) -> dict:  # the run named after its folder in the reproduction's OUT/runs
        return ctx.run(sweep_run(run.task, run.arguments, ctx.out, f"{SAMPLE_COMPLEXITY_DIR}/{run.name}"))

    result = sample_complexity_analysis.sample_complexity_sweep(
        ctx.run_dir("mlm"), list(p.sample_sizes), ctx.run_dir(SAMPLE_COMPLEXITY_DIR), epochs=p.sample_epochs,
        max_steps=p.sample_max_steps, num_test=p.num_test, batch_size=p.batch_size,
        learning_rate=p.learning_rate, progress=ctx.progress, use_dataset_builder=p.use_dataset_builder,
        num_evaluations=1, classifier_hidden_size=p.finetune_classifier_hidden_size, train=train_in_this_sweep,
        grammar_file=p.grammar_file,
    )
    sample_complexity_analysis.write_outputs(result, ctx.out / "sample_complexity")
    return result.to_dict()


def _curves_summary(figure: accuracy_curves.AccuracyFigure) -> dict:
    return {panel.title: {curve.label: dict(zip(map(str, curve.sizes), curve.accuracy)) for curve in panel.curves}
            for panel in figure.panels}


def _step_root_sweep(ctx: Context) -> dict:
    """Fig. 2a (k_test = 0) and Fig. 8 (k_test = k_train): root accuracy vs P for every k_train; Fig. 9: their KL
    to the matched BP, in sample and on uniform inputs."""
    p = ctx.preset
    points = sweep_points(ctx, root_sweep_specs(ctx, filter_levels=p.sweep_filter_levels))
    figure = accuracy_curves.AccuracyFigure(
        title=f"Root classification accuracy vs P (ℓ={p.depth}, q={p.num_symbols}, grammar seed {p.grammar_seed}, "
        f"{p.sweep_budget}; dashed: BP_k_train on the same inputs)",
        depth=p.depth,
        panels=[
            accuracy_curves.accuracy_panel(points, k_test="full", vary="filter_level",
                                           title="Fig. 2a: tested on the full hierarchy (k_test = 0)"),
            accuracy_curves.accuracy_panel(points, k_test="train", vary="filter_level",
                                           title="App. E.3: tested in sample (k_test = k_train)"),
        ],
    )
    accuracy_curves.write_outputs(figure, ctx.out / "accuracy_vs_samples", "fig2a_e3")
    kl = kl_vs_samples(
        points, depth=p.depth, num_samples=p.analysis_samples,
        title=f"Fig. 9: KL(BP_k_train ‖ model) of the root vs P (ℓ={p.depth}, q={p.num_symbols}, {p.sweep_budget})")
    write_kl_outputs(kl, ctx.out / "accuracy_vs_samples", "fig9_kl")
    write_sweep_runs(ctx)
    return {**_curves_summary(figure), "Fig. 9": kl.to_dict()["curves"]}


def _step_layers_sweep(ctx: Context) -> dict:
    """App. E.1: root accuracy vs P on the full hierarchy (k = 0) for every number of encoder blocks n_L."""
    p = ctx.preset
    points = sweep_points(ctx, layers_sweep_specs(ctx))
    figure = accuracy_curves.AccuracyFigure(
        title=f"App. E.1: root accuracy vs P for n_L encoder blocks (k=0, ℓ={p.depth}, {p.sweep_budget})",
        depth=p.depth,
        panels=[accuracy_curves.accuracy_panel(points, k_test="full", vary="num_layers",
                                               title="k_train = k_test = 0")],
    )
    accuracy_curves.write_outputs(figure, ctx.out / "accuracy_vs_samples", "e1_layers")
    write_sweep_runs(ctx)
    return _curves_summary(figure)


def _step_seed_sweep(ctx: Context) -> dict:
    """App. E.2: Fig. 2a (k_test = 0, every k_train) on other grammars, one panel per grammar seed."""
    p = ctx.preset
    panels = []
    for seed in p.grammar_seeds:
        points = sweep_points(ctx, seed_sweep_specs(ctx, seed))
        panels.append(accuracy_curves.accuracy_panel(points, k_test="full", vary="filter_level",
                                                     title=f"grammar seed {seed}"))
    figure = accuracy_curves.AccuracyFigure(
        title=f"App. E.2: Fig. 2a on other grammars (ℓ={p.depth}, q={p.num_symbols}, σ={p.sigma:g}; k_test = 0)",
        depth=p.depth, panels=panels)
    accuracy_curves.write_outputs(figure, ctx.out / "accuracy_vs_samples", "e2_grammar_seeds")
    write_sweep_runs(ctx)
    return _curves_summary(figure)


def _step_classifier_attention(ctx: Context) -> dict:
    """App. E.5: attention maps of the root classifiers of the sweep at their largest P, one row per k_train."""
    p = ctx.preset
    runs = [ctx.sweep_spec(k, max(p.sweep_sizes_of(k))) for k in sorted(p.sweep_filter_levels)]
    for run in runs:
        ctx.run(run)  # reused when the root_sweep step trained it
    results = attention_analysis.attention_grid([run.output_dir for run in runs], num_samples=p.analysis_samples)
    attention_analysis.write_outputs(results, ctx.out / "attention" / "classifier")
    return {"models": [str(run.output_dir) for run in runs], "sizes": [int(run.data_args.num_train) for run in runs]}


def _step_probe_filtered(ctx: Context) -> dict:
    """App. E.7 (right): probes of the complete encoding of the MLM models of every k_train, on k = 0 data."""
    p = ctx.preset
    runs = {p.filter_level: ctx.spec("mlm", "mlm")}
    runs.update({k: ctx.spec("mlm", f"mlm_k{k}", k) for k in p.attention_filter_levels})
    for run in runs.values():
        ctx.run(run)  # reused when the train_mlm steps trained it
    result = probing_analysis.probe_filtered_models([runs[k].output_dir for k in sorted(runs)],
                                                    probe_hidden=p.filtered_probe_hidden, progress=ctx.progress,
                                                    **_probe_settings(p))
    probing_analysis.write_filtered_outputs(result, ctx.out / "probe")
    return {"levels": result.models[0].levels,
            "accuracy": {str(r.model_filter_level): r.accuracy[0].tolist() for r in result.models},
            "final_accuracy": {str(r.model_filter_level): r.final_accuracy[0].tolist() for r in result.models}}


# the function of each step of BASE_STEPS and FIGURE_STEPS (the train_mlm_k<k> steps are made per preset)
_STEPS = {
    "data": _step_data,
    "bp": _step_bp,
    "train_root": _train_step("root", "root"),
    "train_mlm": _train_step("mlm", "mlm"),
    "dynamics": _step_dynamics,
    "calibration": _step_calibration,
    "attention": _step_attention,
    "probe": _step_probe,
    "sample_complexity": _step_sample_complexity,
    "root_sweep": _step_root_sweep,
    "layers_sweep": _step_layers_sweep,
    "seed_sweep": _step_seed_sweep,
    "classifier_attention": _step_classifier_attention,
    "probe_filtered": _step_probe_filtered,
}


def steps_of(preset: Preset) -> list:
    """The ordered (name, function) steps of a preset, in the order of :func:`~.presets.step_names`."""
    functions = dict(_STEPS)
    functions.update({f"train_mlm_k{k}": _train_step("mlm", f"mlm_k{k}", k) for k in preset.attention_filter_levels})
    return [(name, functions[name]) for name in step_names(preset.attention_filter_levels, preset.figure_steps())]
