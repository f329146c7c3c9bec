"""The training loop shared by ``training/run_root.py``, ``run_mlm.py`` and ``run_finetune.py`` (paper Sec. 3).

:func:`train` takes the three argument dataclasses of :mod:`hf_treelang.training_args` and:

1. validates every input (levels, sizes, checkpoints) before anything is written;
2. builds the data (``load_dataset("treelang", "k<k_train>")`` or :func:`sample_trees`) and the k_test sets;
3. builds the model (root classifier, masked-LM head, or the root classifier on top of an MLM checkpoint);
4. runs ``transformers.Trainer`` with the paper's optimiser, log-spaced evaluations and checkpoints, the BP-KL
   callback, TensorBoard and a JSON history;
5. writes the output folder: the model (``save_pretrained``), ``trainer_state.json``, ``checkpoint-*``,
   ``eval_history.json``, ``metrics.json``, ``run_config.json``, ``grammar.json``, ``tensorboard/``,
   ``curves.png``, ``kl_curves.png`` and the model card ``README.md``.

Tasks: ``"root"`` (root classification), ``"mlm"`` (one masked leaf per sequence), ``"finetune"`` (root
classification from an MLM checkpoint, encoder frozen or not, Fig. 1f).
"""

from __future__ import annotations

import importlib.resources
import json
import math
import os
import string
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from .callbacks import BPKLCallback, LogSpacedScheduleCallback, MetricsHistoryCallback, evaluation_history
from .collator import MaskedLeafCollator, RootClassificationCollator, mask_single_leaf
from .grammar import Grammar
from .sampling import sample_trees
from .training_args import TASKS, DataArguments, ModelArguments, TreeLangTrainingArguments

MODEL_CARD_TEMPLATE = importlib.resources.files("hf_treelang.model_cards") / "treelang_model_card.md"
PIPELINE_TAGS = {"root": "text-classification", "mlm": "fill-mask", "finetune": "text-classification"}
TASK_TAGS = {"root": "root-classification", "mlm": "masked-language-modeling", "finetune": "root-classification"}
TASK_TITLES = {
    "root": "root classification",
    "mlm": "masked language modelling (one masked leaf)",
    "finetune": "root classification fine-tuned from an MLM checkpoint",
}
VALIDATION_MASK_SEED = 12345  # fixed masked positions of the MLM validation set (independent of the model seed)


@dataclass
class TrainingData:
    """Datasets of one run.

    Attributes:
        grammar: the grammar of the data.
        train: ``datasets.Dataset`` with ``input_ids`` (and ``labels`` = root for the root tasks).
        validation: ``datasets.Dataset`` with ``input_ids`` and ``labels`` (root, or one masked leaf for MLM).
        validation_leaves: (n, 2**ℓ) unmasked validation sequences (the in-sample inputs of the BP-KL curves).
        validation_roots: (n,) their roots.
        tests: ``{k_test: (leaves (n_k, 2**ℓ), roots (n_k,))}``.
    """

    grammar: Grammar
    train: object
    validation: object
    validation_leaves: np.ndarray
    validation_roots: np.ndarray
    tests: dict


@dataclass
class TrainingResult:
    """What :func:`train` returns: the output folder, the final comparison with BP, the history and timing."""

    output_dir: str
    final_metrics: dict
    history: list
    train_runtime: float
    global_step: int


# ---------------------------------------------------------------- validation


def _model_task(task: str) -> str:
    return "mlm" if task == "mlm" else "root"


def validate_arguments(task: str, data_args: DataArguments, model_args: ModelArguments,
                       training_args: TreeLangTrainingArguments) -> None:
    """Raise a ValueError naming the argument for any inconsistent input; writes nothing."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    data_args.validate()
    resume = training_args.resume_from_checkpoint
    if resume is not None and not os.path.isdir(resume):
        raise ValueError(f"resume_from_checkpoint {resume!r} is not an existing checkpoint folder")
    if task == "finetune":
        path = model_args.model_name_or_path
        if path is None or not os.path.isfile(os.path.join(path, "config.json")):
            raise ValueError(
                f"model_name_or_path {path!r} is not a saved TreeLang checkpoint (no config.json there); run "
                "training/run_mlm.py first or pass --model_name_or_path <MLM output folder>"
            )
        with open(os.path.join(path, "config.json")) as handle:
            config = json.load(handle)
        if config.get("model_type") != "treelang":
            raise ValueError(f"model_name_or_path {path!r} holds model_type {config.get('model_type')!r}, not 'treelang'")
        q, depth = config.get("vocab_size", 0) - 1, config.get("depth")
        if q != data_args.vocab_size or depth != data_args.depth:
            raise ValueError(
                f"model_name_or_path {path!r} was trained with vocab_size q={q}, depth ℓ={depth}; the data has "
                f"vocab_size q={data_args.vocab_size}, depth ℓ={data_args.depth}"
            )
    elif model_args.model_name_or_path is not None:
        raise ValueError(f"model_name_or_path is only used by run_finetune.py, got {model_args.model_name_or_path!r}")
    for name in ("num_evaluations", "num_checkpoints"):
        value = getattr(training_args, name)
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")


# ---------------------------------------------------------------- data


def _builder_split(data_args: DataArguments, level: int, num_train: int, num_validation: int, num_test: int):
    import datasets

    from .data import register_dataset_builder

    register_dataset_builder()
    return datasets.load_dataset(
        "treelang",
        f"k{level}",
        seed=data_args.grammar_seed,
        sigma=float(data_args.sigma),
        vocab_size=data_args.vocab_size,
        depth=data_args.depth,
        num_train=num_train,
        num_validation=num_validation,
        num_test=num_test,
    )


def _arrays(split) -> tuple[np.ndarray, np.ndarray]:
    split = split.with_format("numpy", columns=["input_ids", "root"])
    return np.asarray(split["input_ids"], dtype=np.int64), np.asarray(split["root"], dtype=np.int64)


def load_arrays(data_args: DataArguments) -> tuple[Grammar, dict]:
    """The raw data as numpy: ``(grammar, {"train": (leaves, roots), "validation": ..., ("test", k): ...})``.

    With ``use_dataset_builder`` the splits come from ``load_dataset("treelang", ...)``; otherwise from
    :func:`sample_trees` with the validation and test trees taken after the training trees of the same stream.
    """
    grammar = Grammar.random(vocab_size=data_args.vocab_size, sigma=float(data_args.sigma), seed=data_args.grammar_seed)
    arrays = {}
    if data_args.use_dataset_builder:
        main = _builder_split(data_args, data_args.k_train, data_args.num_train, data_args.num_eval, 0)
        arrays["train"] = _arrays(main["train"])
        arrays["validation"] = _arrays(main["validation"])
        for k in data_args.test_levels():
            arrays[("test", k)] = _arrays(_builder_split(data_args, k, 0, 0, data_args.num_test)["test"])
        return grammar, arrays
    n_train, n_eval = data_args.num_train, data_args.num_eval
    sample = sample_trees(grammar, n_train + n_eval, data_args.depth, data_args.k_train, seed=data_args.grammar_seed)
    arrays["train"] = (sample.leaves[:n_train], sample.roots[:n_train])
    arrays["validation"] = (sample.leaves[n_train:], sample.roots[n_train:])
    for k in data_args.test_levels():
        test = sample_trees(grammar, data_args.num_test, data_args.depth, k, seed=data_args.grammar_seed,
                            start=n_train + n_eval)
        arrays[("test", k)] = (test.leaves, test.roots)
    return grammar, arrays


def build_data(task: str, data_args: DataArguments) -> TrainingData:
    """Datasets for ``task``: training inputs, a fixed validation set (premasked for MLM) and the k_test sets."""
    import datasets

    grammar, arrays = load_arrays(data_args)
    train_leaves, train_roots = arrays["train"]
    val_leaves, val_roots = arrays["validation"]
    if _model_task(task) == "mlm":
        train = datasets.Dataset.from_dict({"input_ids": train_leaves})
        positions = torch.randint(0, val_leaves.shape[1], (val_leaves.shape[0],),
                                  generator=torch.Generator().manual_seed(VALIDATION_MASK_SEED))
        masked, labels = mask_single_leaf(torch.as_tensor(val_leaves), data_args.vocab_size, positions)
        validation = datasets.Dataset.from_dict({"input_ids": masked.numpy(), "labels": labels.numpy()})
    else:
        train = datasets.Dataset.from_dict({"input_ids": train_leaves, "labels": train_roots})
        validation = datasets.Dataset.from_dict({"input_ids": val_leaves, "labels": val_roots})
    tests = {k: arrays[("test", k)] for k in data_args.test_levels()}
    return TrainingData(grammar, train, validation, val_leaves, val_roots, tests)


# ---------------------------------------------------------------- model and metrics


def build_model(task: str, data_args: DataArguments, model_args: ModelArguments):
    """A fresh model for ``root`` / ``mlm``, or the root classifier initialised from an MLM checkpoint."""
    from .configuration_treelang import TreeLangConfig
    from .modeling_treelang import TreeLangForMaskedLM, TreeLangForSequenceClassification

    if task == "finetune":
        model = TreeLangForSequenceClassification.from_pretrained(model_args.model_name_or_path)
        model.config.filter_level = data_args.k_train
        if model_args.freeze_encoder:
            model.freeze_encoder()
        return model
    config = TreeLangConfig.from_data(
        num_symbols=data_args.vocab_size,
        depth=data_args.depth,
        filter_level=data_args.k_train,
        sigma=float(data_args.sigma),
        grammar_seed=data_args.grammar_seed,
        **model_args.model_kwargs(data_args.depth),
    )
    model_class = TreeLangForMaskedLM if task == "mlm" else TreeLangForSequenceClassification
    return model_class(config)


def argmax_logits(logits, labels):
    """``preprocess_logits_for_metrics``: keep only the argmax, (b,) or (b, 2**ℓ)."""
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(-1)


def accuracy_metrics(eval_prediction) -> dict:
    """``compute_metrics``: accuracy on the labelled positions and how many were evaluated (``num_examples``)."""
    predictions = np.asarray(eval_prediction.predictions)
    labels = np.asarray(eval_prediction.label_ids)
    labelled = labels != -100
    return {
        "accuracy": float((predictions[labelled] == labels[labelled]).mean()) if labelled.any() else float("nan"),
        "num_examples": int(labelled.sum()),
    }


# ---------------------------------------------------------------- outputs


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


def _fmt(value) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def render_model_card(task: str, data_args: DataArguments, model_args: ModelArguments,
                      training_args: TreeLangTrainingArguments, final: dict, train_runtime: float,
                      global_step: int, template_path: str | os.PathLike = MODEL_CARD_TEMPLATE) -> str:
    """The model card (README.md) of a finished run, from ``model_cards/treelang_model_card.md``."""
    rows = [
        f"| {k} | {_fmt(final.get(f'eval_acc_ktest{k}'))} | {_fmt(final.get(f'eval_bp_acc_ktest{k}'))} |"
        for k in data_args.test_levels()
    ]
    kl_rows = [f"| BP_{k} | {_fmt(final.get(f'eval_kl_bp_k{k}'))} | {_fmt(final.get(f'eval_match_bp_k{k}'))} |"
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
        "vocab_size": data_args.vocab_size,
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
        "spearman": _fmt(final.get("eval_spearman_bp")),
        "match": _fmt(final.get("eval_match_bp")),
    }
    with open(template_path) as handle:
        return string.Template(handle.read()).substitute(values)


# ---------------------------------------------------------------- the loop


def _tensorboard_dir(trainer, output_dir: str) -> None:
    from transformers.integrations import TensorBoardCallback

    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.logging_dir is None:
            callback.logging_dir = os.path.join(output_dir, "tensorboard")


def train(task: str, data_args: DataArguments, model_args: ModelArguments,
          training_args: TreeLangTrainingArguments) -> TrainingResult:
    """Run one experiment end to end (see the module docstring); returns a :class:`TrainingResult`."""
    from transformers import Trainer, set_seed

    validate_arguments(task, data_args, model_args, training_args)
    if training_args.cpu_threads:
        torch.set_num_threads(int(training_args.cpu_threads))
    output_dir = training_args.output_dir
    with training_args.main_process_first(desc="building the data"):
        data = build_data(task, data_args)
    set_seed(training_args.seed)
    model = build_model(task, data_args, model_args)
    if training_args.num_evaluations > 0 and training_args.resume_from_checkpoint is None:
        training_args.eval_on_start = True
    collator = MaskedLeafCollator(data_args.vocab_size, data_args.mask_rate) if task == "mlm" \
        else RootClassificationCollator()
    schedule = LogSpacedScheduleCallback(training_args.num_evaluations, training_args.num_checkpoints)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=data.train,
        eval_dataset=data.validation,
        data_collator=collator,
        compute_metrics=accuracy_metrics,
        preprocess_logits_for_metrics=argmax_logits,
        callbacks=[schedule, MetricsHistoryCallback(os.path.join(output_dir, "eval_history.json"))],
    )
    _tensorboard_dir(trainer, output_dir)
    bp_callback = BPKLCallback(
        data.grammar, data_args.depth, data_args.k_train, _model_task(task), data.validation_leaves,
        data.tests, seed=training_args.seed, batch_size=training_args.per_device_eval_batch_size,
    ).attach(trainer)
    start = time.perf_counter()
    train_output = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    train_runtime = time.perf_counter() - start
    history = evaluation_history(trainer.state.log_history)
    final = dict(history[-1]) if history and history[-1].get("step") == trainer.state.global_step else {}
    if not final or "eval_kl_bp_k0" not in final:
        final.update(trainer.evaluate())
    if trainer.is_world_process_zero():
        trainer.save_model(output_dir)
        trainer.save_state()
        data.grammar.save(os.path.join(output_dir, "grammar.json"))
        _write_outputs(task, data_args, model_args, training_args, bp_callback, final, history,
                       train_runtime, train_output, trainer.state.global_step)
    return TrainingResult(output_dir, final, history, train_runtime, trainer.state.global_step)


def _write_outputs(task, data_args, model_args, training_args, bp_callback, final, history, train_runtime,
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


def _requested_cpu_processes() -> int:
    """Processes asked of ``accelerate launch --cpu --num_processes N`` by the parent process (Linux), else 1.

    accelerate 1.x runs ``--cpu`` jobs with its simple launcher, a single process whatever ``--num_processes``
    says (it only exports MASTER_ADDR/MASTER_PORT); the number is read back from the launcher's command line.
    """
    from transformers.utils import strtobool

    if "WORLD_SIZE" in os.environ or "MASTER_ADDR" not in os.environ:
        return 1
    if not strtobool(os.environ.get("ACCELERATE_USE_CPU", "False")):
        return 1
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
            parent = [part.decode() for part in handle.read().split(b"\0") if part]
    except OSError:
        return 1
    for i, token in enumerate(parent):
        if token == "--num_processes" and i + 1 < len(parent) and parent[i + 1].isdigit():
            return int(parent[i + 1])
        if token.startswith("--num_processes=") and token.split("=", 1)[1].isdigit():
            return int(token.split("=", 1)[1])
    return 1


def relaunch_data_parallel_cpu(argv: list) -> int | None:
    """Under ``accelerate launch --cpu --num_processes N`` (N > 1), rerun the script as N ``torch.distributed``
    processes (gloo, CPU) and return their exit code; ``None`` when nothing needs relaunching."""
    import subprocess
    import sys

    processes = _requested_cpu_processes()
    if processes <= 1:
        return None
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
               "--master_addr", os.environ["MASTER_ADDR"], "--master_port", os.environ.get("MASTER_PORT", "29500"),
               os.path.abspath(sys.argv[0]), *argv]
    env = {**os.environ, "ACCELERATE_USE_CPU": "True"}
    env.pop("MASTER_ADDR")
    env.pop("MASTER_PORT", None)
    return subprocess.call(command, env=env)


def main(task: str, argv: list | None = None) -> int:
    """Entry point of the scripts: parse ``argv`` (flags or one JSON file), train, print a summary; returns 0."""
    import sys

    from .training_args import parse_arguments

    argv = list(sys.argv[1:] if argv is None else argv)
    parse_arguments(task, argv)  # bad arguments fail here, before any process is started
    code = relaunch_data_parallel_cpu(argv)
    if code is not None:
        return code
    data_args, model_args, training_args = parse_arguments(task, argv)
    result = train(task, data_args, model_args, training_args)
    if training_args.process_index == 0:
        final = result.final_metrics
        print(f"[{task}] {result.global_step} steps in {result.train_runtime:.0f} s -> {result.output_dir}")
        for k in data_args.test_levels():
            print(f"  k_test={k}: accuracy {_fmt(final.get(f'eval_acc_ktest{k}'))} "
                  f"(BP_{data_args.k_train} {_fmt(final.get(f'eval_bp_acc_ktest{k}'))})")
        print("  KL(BP_k || model): " + ", ".join(
            f"k={k} {_fmt(final.get(f'eval_kl_bp_k{k}'))}" for k in range(data_args.depth + 1)))
    return 0


__all__ = ["TrainingData", "TrainingResult", "build_data", "build_model", "train", "main", "validate_arguments"]
