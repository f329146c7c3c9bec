"""The training loop shared by ``training/run_root.py``, ``run_mlm.py`` and ``run_finetune.py`` (paper Sec. 3).

:func:`train` takes the three argument dataclasses of :mod:`hf_treelang.train.arguments` and:

1. validates every input (values with their ranges, the output folder, the checkpoints to start or resume from)
   before anything is built or written; a non-empty ``output_dir`` needs ``--overwrite_output_dir`` or
   ``--resume_from_checkpoint`` (:mod:`hf_treelang.train.folders`);
2. builds the data: the builder's split streams of k_train and of every k_test (:mod:`hf_treelang.train.data`),
   then writes ``run_config.json``, which makes ``output_dir`` a run folder;
3. builds the model (root classifier, masked-LM head, or the root classifier on top of an MLM checkpoint);
4. runs ``transformers.Trainer`` with the paper's optimiser, log-spaced evaluations and checkpoints, the BP-KL
   callback, TensorBoard and a JSON history;
5. writes the output folder: the model (``save_pretrained``), ``trainer_state.json``, ``checkpoint-*``,
   ``eval_history.json``, ``metrics.json``, ``run_config.json``, ``grammar.json``, ``tensorboard/``,
   ``curves.png``, ``kl_curves.png`` and the model card ``README.md`` (:mod:`hf_treelang.train.outputs`), then,
   last and atomically, ``run_complete.json``: the analyses and fine-tuning refuse a run folder without it.

Resuming is byte-identical: the Trainer restores the weights, optimiser, schedule and random generators, and the MLM
masks are a function of (seed, epoch, example), not of a stream consumed ahead of the checkpoint
(:class:`~hf_treelang.train.collators.MaskedLeafCollator`).

Tasks: ``"root"`` (root classification), ``"mlm"`` (one masked leaf per sequence), ``"finetune"`` (root
classification from an MLM checkpoint, encoder frozen or not, Fig. 1f).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
import torch
from transformers import TrainerCallback

from .arguments import TASKS, DataArguments, ModelArguments, TreeLangTrainingArguments
from .callbacks import (
    REFERENCE_SIZE,
    BPKLCallback,
    ConsoleCallback,
    LogSpacedScheduleCallback,
    MetricsHistoryCallback,
    evaluation_history,
    evaluation_line,
    quiet_progress_bars_off_terminal,
    reference_count,
)
from .collators import EXAMPLE_INDEX, MaskedLeafCollator, MaskEpochCallback, RootClassificationCollator
from .data import RunData, load_run_data, to_datasets
from .folders import (
    TASK_ARCHITECTURES,
    check_output_dir_free,
    check_resume_checkpoint,
    check_run_complete,
    clear_previous_run,
    mark_run_started,
    read_model_config,
    write_run_complete,
)
from .launch import relaunch_data_parallel_cpu
from .readout import keep_frozen_in_eval_mode
from .outputs import write_outputs, write_run_config
from .engine import check_engine_arguments, check_single_run_checkpoint, trainer_for


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
    training_args.validate()
    config = model_args.config(data_args)  # the architecture's own checks
    resume = training_args.resume_from_checkpoint
    if resume is not None:
        if training_args.overwrite_output_dir:
            raise ValueError("`overwrite_output_dir` and `resume_from_checkpoint` exclude each other: resuming "
                             f"continues the run in output_dir, overwriting removes it; got both ({resume!r})")
        check_single_run_checkpoint(resume)
        _, saved = check_resume_checkpoint(resume)
        _check_saved_model("resume_from_checkpoint", resume, saved, data_args)
        expected = TASK_ARCHITECTURES[_model_task(task)]
        if expected not in (saved.get("architectures") or []):
            raise ValueError(f"`resume_from_checkpoint` {resume!r} holds a {saved.get('architectures')} model; this "
                             f"{task} run trains a {expected}")
        if task != "finetune":
            for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
                if saved.get(name) != getattr(config, name):
                    raise ValueError(f"`resume_from_checkpoint` {resume!r} was saved with {name}={saved.get(name)}; "
                                     f"this run has {name}={getattr(config, name)}: pass the checkpoint's architecture")
        if saved.get("classifier_hidden_size", 0) != config.classifier_hidden_size:  # the root readout, every task
            raise ValueError(f"`resume_from_checkpoint` {resume!r} was saved with classifier_hidden_size="
                             f"{saved.get('classifier_hidden_size', 0)}; this run has classifier_hidden_size="
                             f"{config.classifier_hidden_size}: pass the checkpoint's readout")
    check_output_dir_free(training_args.output_dir, overwrite=training_args.overwrite_output_dir,
                          resume=resume is not None)
    if task == "finetune":
        path = model_args.model_name_or_path
        try:
            _, saved = read_model_config("model_name_or_path", path)
            check_run_complete(path, "model_name_or_path")
        except ValueError as error:
            raise ValueError(f"{error}; run training/run_mlm.py first or pass --model_name_or_path <MLM output "
                             "folder>") from None
        _check_saved_model("model_name_or_path", path, saved, data_args)
    elif model_args.model_name_or_path is not None:
        raise ValueError(f"model_name_or_path is only used by run_finetune.py, got {model_args.model_name_or_path!r}")
    if task == "mlm":
        if training_args.remove_unused_columns:
            raise ValueError("`remove_unused_columns` must be False for MLM (the collator keys each example's masks "
                             "by its example_index column), got True")
        if training_args.dataloader_persistent_workers and training_args.dataloader_num_workers > 0:
            raise ValueError("`dataloader_persistent_workers` must be False for MLM with dataloader_num_workers > 0 "
                             "(persistent workers keep the collator of the first epoch, and the masks are keyed by "
                             "the epoch), got True")
    if task != "finetune" and config.classifier_hidden_size:
        raise ValueError(f"`classifier_hidden_size` must be 0 (the paper's linear readout) for a {task} run from "
                         f"scratch, got {config.classifier_hidden_size}: the authors' two-layer head is the new head "
                         "of run_finetune.py on an MLM checkpoint")
    check_checkpoint_epochs(training_args.checkpoint_epochs, training_args.num_train_epochs)


def check_checkpoint_epochs(epochs, num_train_epochs: float) -> None:
    """Raise a ValueError naming ``checkpoint_epochs`` unless every epoch is an integer in [1, num_train_epochs]."""
    for epoch in epochs or ():
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 1 <= epoch <= num_train_epochs:
            raise ValueError(f"`checkpoint_epochs` must hold integers in [1, num_train_epochs={num_train_epochs:g}], "
                             f"got {epoch!r}")


class EpochCheckpointCallback(TrainerCallback):
    """Evaluate and save a checkpoint at the end of the listed epochs (the authors' ``checkpoint_epochs``).

    An epoch is ``len(train_dataloader) // gradient_accumulation_steps`` optimiser steps (the Trainer's own count);
    the log-spaced schedule of :class:`LogSpacedScheduleCallback` runs alongside.
    """

    def __init__(self, epochs):
        self.epochs = sorted({int(e) for e in epochs})
        self.steps: set = set()

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        per_epoch = max(len(train_dataloader) // max(args.gradient_accumulation_steps, 1), 1)
        self.steps = {epoch * per_epoch for epoch in self.epochs if epoch * per_epoch <= state.max_steps}

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.steps:
            control.should_evaluate = True
            control.should_save = True
            control.should_log = True
        return control


def _check_saved_model(name: str, path, saved: dict, data_args: DataArguments) -> None:
    """A saved config.json must be a valid TreeLang config of the run's data (q and ℓ)."""
    from hf_treelang.models.configuration_treelang import TreeLangConfig

    try:
        TreeLangConfig.from_dict(dict(saved))
    except (ValueError, TypeError) as error:
        raise ValueError(f"`{name}` {str(path)!r}: config.json is not a valid TreeLang config: {error}") from None
    q, depth = saved["vocab_size"] - 1, saved["depth"]
    if q != data_args.num_symbols or depth != data_args.depth:
        raise ValueError(
            f"`{name}` {str(path)!r} was trained with num_symbols q={q}, depth ℓ={depth}; the data has "
            f"num_symbols q={data_args.num_symbols}, depth ℓ={data_args.depth}"
        )


# ---------------------------------------------------------------- model and metrics


def build_model(task: str, data_args: DataArguments, model_args: ModelArguments):
    """A fresh model for ``root`` / ``mlm``, or the root classifier initialised from an MLM checkpoint (its encoder;
    a new root readout of ``classifier_hidden_size`` hidden units, 0: linear)."""
    from hf_treelang.models.modeling_treelang import TreeLangForMaskedLM, TreeLangForSequenceClassification

    if task == "finetune":
        # the new root readout is part of the architecture: the config says which head to build (and to reload)
        model = TreeLangForSequenceClassification.from_pretrained(
            model_args.model_name_or_path, classifier_hidden_size=model_args.classifier_hidden_size
        )
        model.config.filter_level = data_args.k_train
        if model_args.freeze_encoder:
            model.freeze_encoder()
            keep_frozen_in_eval_mode(model)
        return model
    model_class = TreeLangForMaskedLM if task == "mlm" else TreeLangForSequenceClassification
    return model_class(model_args.config(data_args))


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


# ---------------------------------------------------------------- the loop


def _tensorboard_dir(trainer, output_dir: str) -> None:
    from transformers.integrations import TensorBoardCallback

    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.logging_dir is None:
            callback.logging_dir = os.path.join(output_dir, "tensorboard")


def bp_callback_for(task: str, data: RunData, data_args: DataArguments, training_args) -> BPKLCallback:
    """The BP-KL callback of a run (its BP targets are computed in its first ``prepare``)."""
    return BPKLCallback(
        data.grammar, data_args.depth, data_args.k_train, _model_task(task), data.validation, data.tests,
        batch_size=training_args.per_device_eval_batch_size, reference_size=REFERENCE_SIZE,
    )


def train(task: str, data_args: DataArguments, model_args: ModelArguments,
          training_args: TreeLangTrainingArguments, *, cache=None):
    """Run one experiment end to end (see the module docstring); returns a :class:`TrainingResult`.

    With ``--ensemble_seeds`` / ``--ensemble_k_train`` it trains an ensemble instead and returns an
    :class:`hf_treelang.train.ensemble.EnsembleResult`. ``cache`` (a :class:`hf_treelang.train.engine.RunDataCache`)
    shares the data and BP targets with the other runs of this process that have the same data.
    """
    from transformers import set_seed

    from .ensemble import is_ensemble, train_ensemble

    if is_ensemble(training_args):
        return train_ensemble(task, data_args, model_args, training_args)
    validate_arguments(task, data_args, model_args, training_args)
    check_engine_arguments(training_args)
    if training_args.cpu_threads:
        torch.set_num_threads(int(training_args.cpu_threads))
    output_dir = training_args.output_dir
    with training_args.main_process_first(desc="building the data"):
        data = load_run_data(data_args) if cache is None else cache.run_data(data_args)
        train_set, validation_set = to_datasets(_model_task(task), data, data_args.num_symbols)
    if training_args.should_save:
        # the folder becomes a run folder: run_config.json first, run_complete.json (the marker) last
        if training_args.overwrite_output_dir:
            clear_previous_run(output_dir)
        os.makedirs(output_dir, exist_ok=True)
        mark_run_started(output_dir)
        write_run_config(task, data_args, model_args, training_args)
    set_seed(training_args.seed)
    model = build_model(task, data_args, model_args)
    if training_args.num_evaluations > 0 and training_args.resume_from_checkpoint is None:
        training_args.eval_on_start = True
    if task == "mlm":
        # each example's training masks are keyed by its row (MaskedLeafCollator): a resumed run draws the same ones
        train_set = train_set.add_column(EXAMPLE_INDEX, np.arange(len(train_set), dtype=np.int64))
        collator = MaskedLeafCollator(data_args.num_symbols, data_args.mask_rate, seed=training_args.seed)
        mask_epochs = [MaskEpochCallback(collator)]
    else:
        collator, mask_epochs = RootClassificationCollator(), []
    schedule = LogSpacedScheduleCallback(training_args.num_evaluations, training_args.num_checkpoints)
    epochs = training_args.checkpoint_epochs
    epoch_schedule = [EpochCheckpointCallback(epochs)] if epochs else []
    trainer = trainer_for(
        _model_task(task), data, data_args, training_args,
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=validation_set,
        data_collator=collator,
        compute_metrics=accuracy_metrics,
        preprocess_logits_for_metrics=argmax_logits,
        callbacks=[schedule, *epoch_schedule, *mask_epochs,
                   MetricsHistoryCallback(os.path.join(output_dir, "eval_history.json"))],
    )
    _tensorboard_dir(trainer, output_dir)
    make_bp_callback = lambda: bp_callback_for(task, data, data_args, training_args)  # noqa: E731
    bp_callback = (make_bp_callback() if cache is None else cache.bp_callback(data_args, make_bp_callback))
    bp_callback.attach(trainer)
    ConsoleCallback(data_args.k_train).attach(trainer)  # after the BP-KL callback: one line per evaluation
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
        write_outputs(task, data_args, model_args, training_args, bp_callback, final, history,
                       train_runtime, train_output, trainer.state.global_step)
        write_run_complete(output_dir, task=task, global_step=trainer.state.global_step)  # last, atomically
    return TrainingResult(output_dir, final, history, train_runtime, trainer.state.global_step)


def main(task: str, argv: list | None = None) -> int:
    """Entry point of the scripts: parse ``argv`` (flags or one JSON file), train, print a summary; returns 0."""
    import sys

    from .arguments import parse_arguments

    argv = list(sys.argv[1:] if argv is None else argv)
    from .ensemble import EnsembleResult, is_ensemble, summary_lines, validate_ensemble

    arguments = parse_arguments(task, argv)
    check = validate_ensemble if is_ensemble(arguments[2]) else validate_arguments
    check(task, *arguments)  # bad arguments fail here, before any process starts
    code = relaunch_data_parallel_cpu(argv)
    if code is not None:
        return code
    data_args, model_args, training_args = parse_arguments(task, argv)
    quiet_progress_bars_off_terminal()
    result = train(task, data_args, model_args, training_args)
    if training_args.process_index == 0 and isinstance(result, EnsembleResult):
        print("\n".join(summary_lines(result)))
    elif training_args.process_index == 0:
        final = result.final_metrics
        bp_size = reference_count(data_args.num_test, data_args.depth, REFERENCE_SIZE)
        print(f"[{task}] {result.global_step} steps in {result.train_runtime:.0f} s -> {result.output_dir}")
        print("final: " + evaluation_line(final, result.global_step, data_args.k_train))
        print(f"(accuracy per k_test: the model on {data_args.num_test} test sequences, BP_{data_args.k_train} on "
              f"{bp_size}; KL on {data_args.num_eval} in-sample sequences)")
    return 0


__all__ = ["RunData", "TrainingResult", "build_model", "load_run_data", "main", "train", "validate_arguments"]
