"""What a finished run writes next to its weights: ``run_config.json``, ``metrics.json``, the curves and the model card.

* :func:`write_outputs` — every file below, from the run's arguments, final metrics and evaluation history;
* :func:`plot_curves` — ``kl_curves.png`` (mean D_KL(BP_k || model) against the step, every k) and ``curves.png``
  (KL, the k_test accuracies, the loss and the agreement with the matched BP);
* :func:`render_model_card` — ``README.md`` from the template ``model_cards/treelang_model_card.md``.
"""

from __future__ import annotations

import importlib.resources
import json
import math
import os
import string
from dataclasses import asdict

import numpy as np

from hf_treelang.citation import BIBTEX

from .arguments import DataArguments, ModelArguments, TreeLangTrainingArguments

MODEL_CARD_TEMPLATE = importlib.resources.files("hf_treelang.model_cards") / "treelang_model_card.md"
PIPELINE_TAGS = {"root": "text-classification", "mlm": "fill-mask", "finetune": "text-classification"}
TASK_TAGS = {"root": "root-classification", "mlm": "masked-language-modeling", "finetune": "root-classification"}
TASK_TITLES = {
    "root": "root classification",
    "mlm": "masked language modelling (one masked leaf)",
    "finetune": "root classification fine-tuned from an MLM checkpoint",
}


def plot_curves(history: list, depth: int, k_train: int, test_levels: list, path_all: str, path_kl: str) -> None:
    """``kl_curves.png`` (mean D_KL(BP_k || model) vs step, every k) and ``curves.png`` (KL, accuracies, loss)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = plt.cm.viridis(np.linspace(0.0, 0.9, depth + 1))

    def series(key):
        points = [(max(e["step"], 0.5), e[key]) for e in history if key in e and e[key] == e[key]]
        return ([p[0] for p in points], [p[1] for p in points]) if points else ([], [])

    def kl_panel(ax):
        for k in range(depth + 1):
            x, y = series(f"eval_kl_bp_k{k}")
            style = {"color": "black", "lw": 2.2} if k == k_train else {"color": colors[k], "lw": 1.4}
            ax.plot(x, y, marker="o", ms=3, label=f"BP$_{{{k}}}$" + (" (matched)" if k == k_train else ""), **style)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training step (step 0 drawn at 0.5)")
        ax.set_ylabel(r"mean $D_{KL}(\mathrm{BP}_k \,\|\, \mathrm{model})$ (nats)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)

    fig, ax = plt.subplots(figsize=(5.5, 4.0))
    kl_panel(ax)
    ax.set_title("In-sample alignment with BP$_k$")
    fig.tight_layout()
    fig.savefig(path_kl, dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    kl_panel(axes[0])
    for i, k in enumerate(test_levels):
        color = plt.cm.plasma(i / max(len(test_levels), 1))
        x, y = series(f"eval_acc_ktest{k}")
        axes[1].plot(x, y, marker="o", ms=3, color=color, label=f"$k_{{test}}={k}$")
        _, by = series(f"eval_bp_acc_ktest{k}")
        if by:
            axes[1].axhline(by[-1], color=color, ls="--", lw=1)
    axes[1].set_xscale("log")
    axes[1].set_xlabel("training step")
    axes[1].set_ylabel(f"test accuracy (dashed: BP$_{{{k_train}}}$)")
    axes[1].legend(fontsize=8)
    axes[1].grid(alpha=0.3)
    for key, label in (("eval_loss", "validation loss"), ("eval_match_bp", "argmax match with matched BP"),
                       ("eval_spearman_bp", "Spearman with matched BP")):
        x, y = series(key)
        axes[2].plot(x, y, marker="o", ms=3, label=label)
    axes[2].set_xscale("log")
    axes[2].set_xlabel("training step")
    axes[2].legend(fontsize=8)
    axes[2].grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path_all, dpi=120)
    plt.close(fig)


def format_value(value) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def render_model_card(task: str, data_args: DataArguments, model_args: ModelArguments,
                      training_args: TreeLangTrainingArguments, final: dict, train_runtime: float,
                      global_step: int, template_path: str | os.PathLike = MODEL_CARD_TEMPLATE) -> str:
    """The model card (README.md) of a finished run, from ``model_cards/treelang_model_card.md``."""
    rows = [
        f"| {k} | {format_value(final.get(f'eval_acc_ktest{k}'))} | {format_value(final.get(f'eval_bp_acc_ktest{k}'))} |"
        for k in data_args.test_levels()
    ]
    kl_rows = [f"| BP_{k} | {format_value(final.get(f'eval_kl_bp_k{k}'))} | {format_value(final.get(f'eval_match_bp_k{k}'))} |"
               for k in range(data_args.depth + 1)]
    model_class = "AutoModelForMaskedLM" if task == "mlm" else "AutoModelForSequenceClassification"
    if task == "finetune":
        origin = (f"initialised from the MLM checkpoint `{model_args.model_name_or_path}`, encoder "
                  f"{'frozen' if model_args.freeze_encoder else 'trained'} during fine-tuning")
    else:
        origin = "trained from scratch"
    values = {
        "pipeline_tag": PIPELINE_TAGS[task],
        "task": task,
        "task_tag": TASK_TAGS[task],
        "task_title": TASK_TITLES[task],
        "k_train": data_args.k_train,
        "depth": data_args.depth,
        "num_symbols": data_args.num_symbols,
        "sigma": data_args.sigma,
        "grammar_seed": data_args.grammar_seed,
        "num_train": data_args.num_train,
        "num_eval": data_args.num_eval,
        "num_test": data_args.num_test,
        "hidden_size": model_args.hidden_size,
        "num_hidden_layers": model_args.model_kwargs(data_args.depth)["num_hidden_layers"],
        "intermediate_size": model_args.intermediate_size,
        "origin": origin,
        "model_class": model_class,
        "learning_rate": training_args.learning_rate,
        "batch_size": training_args.per_device_train_batch_size,
        "epochs": training_args.num_train_epochs,
        "global_step": global_step,
        "train_runtime": f"{train_runtime:.0f}",
        "seed": training_args.seed,
        "preset": training_args.preset,
        "accuracy_rows": "\n".join(rows),
        "kl_rows": "\n".join(kl_rows),
        "spearman": format_value(final.get("eval_spearman_bp")),
        "match": format_value(final.get("eval_match_bp")),
        "citation": BIBTEX,
    }
    with open(template_path) as handle:
        return string.Template(handle.read()).substitute(values)


def write_outputs(task, data_args, model_args, training_args, bp_callback, final, history, train_runtime,
                   train_output, global_step) -> None:
    output_dir = training_args.output_dir
    run_config = {
        "task": task,
        "data_args": asdict(data_args),
        "model_args": asdict(model_args),
        "training_args": json.loads(training_args.to_json_string()),
    }
    with open(os.path.join(output_dir, "run_config.json"), "w") as handle:
        json.dump(run_config, handle, indent=1, sort_keys=True)
    summary = {
        "task": task,
        "global_step": global_step,
        "train_runtime_s": train_runtime,
        "train_loss": train_output.training_loss,
        "final": final,
        "bp_accuracy": {str(k): v for k, v in bp_callback.prepare().bp_accuracy.items()},
        "history": history,
    }
    with open(os.path.join(output_dir, "metrics.json"), "w") as handle:
        json.dump(summary, handle, indent=1, sort_keys=True)
    plot_curves(history, data_args.depth, data_args.k_train, data_args.test_levels(),
                os.path.join(output_dir, "curves.png"), os.path.join(output_dir, "kl_curves.png"))
    card = render_model_card(task, data_args, model_args, training_args, final, train_runtime, global_step)
    with open(os.path.join(output_dir, "README.md"), "w") as handle:
        handle.write(card)
