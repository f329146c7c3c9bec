"""The steps of a reproduction, each a function of a :class:`Context` that writes its sub-folder and returns a summary.

Steps: ``data``, ``bp``, ``train_root``, ``train_mlm`` (and ``train_mlm_k<k>``), ``dynamics``, ``calibration``,
``attention``, ``probe``, ``sample_complexity``; :func:`steps_of` lists those of a preset in order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from hf_treelang.analysis import attention as attention_analysis
from hf_treelang.analysis import calibration as calibration_analysis
from hf_treelang.analysis import dynamics as dynamics_analysis
from hf_treelang.analysis import probing as probing_analysis
from hf_treelang.analysis import sample_complexity as sample_complexity_analysis
from hf_treelang.analysis.io import write_json
from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.oracle import bp_accuracy, task_inputs
from hf_treelang.plotting import pyplot, save_figure
from hf_treelang.train.runs import RunSpec, run_training

from .presets import Preset, step_names


class Context:
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


def _run_data(ctx: Context, num_train: int):
    """The data of a run exactly as the training builds it (the dataset builder caches it for the training)."""
    from hf_treelang.train.arguments import DataArguments
    from hf_treelang.train.data import load_run_data

    p = ctx.preset
    data_args = DataArguments(grammar_seed=p.grammar_seed, sigma=p.sigma, num_symbols=p.num_symbols, depth=p.depth,
                              k_train=p.filter_level, num_train=num_train, num_eval=p.num_test, num_test=p.num_test,
                              k_test=list(ctx.k_tests), use_dataset_builder=p.use_dataset_builder)
    return load_run_data(data_args)


def _step_data(ctx: Context) -> dict:
    """The grammar, and the data of every run built once."""
    p = ctx.preset
    folder = ctx.out / "data"
    folder.mkdir(parents=True, exist_ok=True)
    grammar = Grammar.random(p.num_symbols, p.sigma, p.grammar_seed)
    grammar.save(folder / "grammar.json")
    summary = {"grammar": grammar.params, "depth": p.depth, "k_train": p.filter_level, "k_tests": list(ctx.k_tests)}
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

    The inputs and their masked positions are those the BP-KL training callback evaluates the models on
    (:func:`hf_treelang.core.oracle.task_inputs` of the same test splits), so the numbers sit next to the models'
    test accuracies in the report.

    Args:
        preset: the data parameters.
        test_sets: ``{task: {k_test: EvaluationSet}}`` for task ``"root"`` and ``"mlm"``.
    """
    grammar = Grammar.random(preset.num_symbols, preset.sigma, preset.grammar_seed)
    q, depth = preset.num_symbols, preset.depth
    matched = BeliefPropagation(grammar, depth, preset.filter_level, on_impossible="flag")
    table = {}
    for task, tests in test_sets.items():
        for k_test in sorted(tests):
            test = tests[k_test]
            data = task_inputs(task, test.leaves, test.roots, mask_token_id=q, sampling_seed=test.sampling_seed)
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
        summary = run_training(ctx.spec(task, name, filter_level))
        return {key: summary[key] for key in ("accuracy", "bp_accuracy", "global_step", "train_runtime_s")}

    return step


def _step_dynamics(ctx: Context) -> dict:
    out = {}
    for task in ("root", "mlm"):
        result = dynamics_analysis.learning_dynamics(ctx.run_dir(task))
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


def _step_probe(ctx: Context) -> dict:
    p = ctx.preset
    out = {}
    for positions in ("all", "ends"):
        result = probing_analysis.probe(ctx.run_dir("mlm"), data_filter_level=0, positions=positions,
                                        num_train=p.probe_train, num_test=p.probe_test, epochs=p.probe_epochs,
                                        progress=ctx.progress)
        probing_analysis.write_outputs(result, ctx.out / "probe")
        out[positions] = {"levels": result.levels, "accuracy": result.accuracy.tolist()}
    return out


def _step_sample_complexity(ctx: Context) -> dict:
    p = ctx.preset
    result = sample_complexity_analysis.sample_complexity_sweep(
        ctx.run_dir("mlm"), list(p.sample_sizes), ctx.out / "runs" / "sample_complexity", epochs=p.sample_epochs,
        max_steps=p.sample_max_steps, num_test=p.num_test, batch_size=p.batch_size,
        learning_rate=p.learning_rate, progress=ctx.progress, use_dataset_builder=p.use_dataset_builder, num_evaluations=1,
    )
    sample_complexity_analysis.write_outputs(result, ctx.out / "sample_complexity")
    return result.to_dict()


# the function of each step of BASE_STEPS (the train_mlm_k<k> steps are made per preset)
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
}


def steps_of(preset: Preset) -> list:
    """The ordered (name, function) steps of a preset, in the order of :func:`~.presets.step_names`."""
    functions = dict(_STEPS)
    functions.update({f"train_mlm_k{k}": _train_step("mlm", f"mlm_k{k}", k) for k in preset.attention_filter_levels})
    return [(name, functions[name]) for name in step_names(preset.attention_filter_levels)]
