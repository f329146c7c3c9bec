"""Training runs end to end: :func:`train` one run, :func:`train_together` several as one ensemble (paper Sec. 3).

A run (:class:`~hf_treelang.train.run.Run`, resolved and checked) goes through four stages, in this order:

1. **resolve** — :mod:`hf_treelang.train.run` (the scripts' command line, or a dict of the same argument names);
2. **check** — every value and every checkpoint to start or resume from, then the output folder: a non-empty one
   needs ``--overwrite_output_dir`` or ``--resume_from_checkpoint``; with ``reuse=True`` (sweeps, ``reproduce``) the
   folder is compared with the run's identity instead (:func:`hf_treelang.train.folders.folder_state`): a finished
   run of the same identity is returned as it is, an interrupted one resumes from its last checkpoint, a folder of
   another identity is emptied and trained again;
3. **train** — the data (the builder's split streams of k_train and of every k_test, :mod:`hf_treelang.train.data`),
   ``run_config.json`` (the folder is now a run folder), the model, and ``transformers.Trainer``
   (:mod:`hf_treelang.train.trainer`) with the paper's optimiser, log-spaced evaluations and checkpoints, the BP-KL
   callback, TensorBoard and a JSON history;
4. **write** — the model (``save_pretrained``), ``trainer_state.json``, ``grammar.json``, ``metrics.json``, the curves
   and the model card (:mod:`hf_treelang.train.outputs`), then, last and atomically, ``run_complete.json``: the
   analyses and fine-tuning refuse a run folder without it.

Resuming is byte-identical: the Trainer restores the weights, optimiser, schedule and random generators, and the
training order and MLM masks are functions of (seed, epoch, example), not of a stream consumed ahead of the
checkpoint.

An **ensemble** is a list of runs that differ only in model seed, k_train, grammar seed or σ. :func:`train_together`
trains them ``"stacked"`` (one batched model, :class:`~hf_treelang.train.trainer.EnsembleTrainer`) or
``"sequential"`` (one :func:`train` after another, sharing the data and BP targets); each run writes its own complete
run folder. With dropout 0 a stacked member equals its single run to float rounding (``tests/test_ensemble.py``).
The rule of ``"auto"`` (:func:`choose_ensemble_mode`): stacked on a GPU; on the CPU stacked only while a member's step
is small (:data:`STACKED_CPU_MAX_FLOPS`), because there a step is bound by arithmetic, and a batched matmul of N
members is no faster than N matmuls (``benchmarks/bench_train.py`` measures both).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import TrainerCallback, set_seed
from transformers.trainer_callback import TrainerState
from transformers.trainer_utils import TrainOutput

from hf_treelang.claims import FolderTaken, claim_folder, leads
from hf_treelang.jsonio import read_json_object, write_json_atomic
from hf_treelang.models.architectures import build_model as build_architecture
from hf_treelang.models.loading import load_pretrained
from hf_treelang.models.modeling_treelang import (
    TreeLangForCausalLM,
    TreeLangForMaskedLM,
    TreeLangForSequenceClassification,
)
from hf_treelang.models.stacked import StackedTreeLang
from hf_treelang.progress import quiet_progress_bars_off_terminal

from .callbacks import (
    REFERENCE_SIZE,
    BPKLCallback,
    ConsoleCallback,
    LogSpacedScheduleCallback,
    ResumeCheckpointCallback,
    MetricsHistoryCallback,
    evaluation_history,
    evaluation_line,
    reference_count,
    write_history,
)
from .stopping import ValidationStoppingCallback
from .collators import (
    EXAMPLE_INDEX,
    MaskedLeafCollator,
    MaskEpochCallback,
    NextLeafCollator,
    RootClassificationCollator,
)
from .data import sigma_curriculum, to_datasets, validation_tensors
from .device_data import TrainingStream, optimizer_steps
from .folders import (
    ENSEMBLE_FILE,
    check_checkpoint_fits,
    check_output_dir_free,
    clear_previous_run,
    disk_full_named,
    empty_folder,
    finished_run,
    folder_state,
    forget_identity,
    read_identity,
    record_failure,
    start_run_folder,
    write_identity,
    write_run_complete,
)
from .hub import upload_run, without_trainer_pushes
from .launch import leave_process_group, relaunch_data_parallel_cpu
from .outputs import ARCHITECTURE_FILE, write_outputs, write_tokenizer
from .readout import keep_frozen_in_eval_mode
from .run import (
    MEMBERS_DIR,
    Run,
    check_output,
    check_together,
    command_line,
    runs_from_command_line,
    trains_apart,
)
from .trainer import EnsembleTrainer, MemberState, RunDataCache, member_log_history, trainer_for

# "auto" stacks members on the CPU while one member's training step costs at most this many floating-point
# operations (6 x tokens x parameters): the laptop size (d = 64, d' = 256: ~0.6 GFLOP at batch 32) stacks, the
# paper size (d = 128, d' = 2048: ~7 GFLOP) trains one member after another.
STACKED_CPU_MAX_FLOPS = 2e9


@dataclass
class TrainingResult:
    """What :func:`train` returns: the output folder, the final comparison with BP, the history and timing.

    ``reused``: the folder held this run, finished, before the call (``reuse=True``); ``summary``: the finished run's
    summary (:func:`hf_treelang.train.folders.finished_run`) of a run trained with ``reuse=True``, else None.
    """

    output_dir: str
    final_metrics: dict
    history: list
    train_runtime: float
    global_step: int
    reused: bool = False
    summary: dict | None = None
    hub_url: str | None = None  # --push_to_hub: the Hub repository the finished folder was uploaded to


@dataclass
class EnsembleResult:
    """What :func:`train_together` returns: the ensemble's mode, timing and each run's :class:`TrainingResult`."""

    output_dir: str | None
    mode: str
    train_runtime: float
    global_step: int
    members: dict = field(default_factory=dict)  # name -> TrainingResult
    num_data_configs: int = 0


# ---------------------------------------------------------------- model, metrics and callbacks


MODEL_CLASSES = {"root": TreeLangForSequenceClassification, "mlm": TreeLangForMaskedLM, "clm": TreeLangForCausalLM}


def build_model(run: Run):
    """A fresh model for ``root`` / ``mlm`` / ``clm``, or the root classifier initialised from an MLM checkpoint (its
    encoder; a new root readout of ``classifier_hidden_size`` hidden units, 0: linear)."""
    data_args, model_args = run.data_args, run.model_args
    if run.task == "finetune":
        # the new root readout is part of the architecture: the config says which head to build (and to reload)
        model = load_pretrained(TreeLangForSequenceClassification, model_args.model_name_or_path,
                                expected_missing=("classifier.",),
                                classifier_hidden_size=model_args.classifier_hidden_size)
        model.config.filter_level = data_args.k_train
        if model_args.freeze_encoder:
            model.freeze_encoder()
            keep_frozen_in_eval_mode(model)
        return model
    if not model_args.is_treelang:
        return build_architecture(model_args.patched_config(data_args, run.model_task), run.model_task)
    return MODEL_CLASSES[run.model_task](model_args.config(data_args))


def next_leaf_cross_entropy(outputs, labels, num_items_in_batch=None, label_smoothing: float = 0.0):
    """The loss of next-leaf prediction for a causal model of transformers (``compute_loss_func``): row i of the
    logits, which has read ``[BOS, x_0 .. x_{i-1}]``, predicts label i, unshifted — the package's causal layout
    (:func:`hf_treelang.core.oracle.next_leaf_inputs`); the models' own loss would shift the labels once more.
    ``label_smoothing`` ε is ``--label_smoothing_factor``: torch's smoothed cross-entropy, (1 - ε) NLL + ε × the mean
    over the classes of -log p, which is transformers' ``LabelSmoother`` (the Trainer skips its own smoother when a
    ``compute_loss_func`` is given)."""
    logits = outputs["logits"]  # (b, 2**l, V)
    labels = labels.to(logits.device)  # (b, 2**l)
    if num_items_in_batch is None:
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100,
                                                 label_smoothing=label_smoothing)
    total = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100,
                                              reduction="sum", label_smoothing=label_smoothing)
    return total / num_items_in_batch


def argmax_logits(logits, labels):
    """``preprocess_logits_for_metrics``: keep only the argmax, (b,) or (b, 2**ℓ) (MLM, next leaf)."""
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


def schedule_callbacks(training_args, mirrors=()) -> list:
    """The log-spaced evaluations and checkpoints, the checkpoint epochs and the checkpoints to resume from of a
    run's arguments (``mirrors``: the folders that get a copy of each checkpoint, an ensemble's member folders)."""
    callbacks = [LogSpacedScheduleCallback(training_args.num_evaluations, training_args.num_checkpoints)]
    if training_args.checkpoint_epochs:
        callbacks.append(EpochCheckpointCallback(training_args.checkpoint_epochs))
    # last: the steps the schedules above save keep their checkpoints; without the option it only removes those of a
    # run it resumes
    callbacks.append(ResumeCheckpointCallback(training_args.resume_checkpoint_steps, mirrors))
    return callbacks


def bp_callback_for(data, data_args, model_task: str, batch_size: int) -> BPKLCallback:
    """The BP-KL callback of a run's data (its BP targets are computed in its first ``prepare``)."""
    return BPKLCallback(data.grammar, data_args.depth, data_args.k_train, model_task, data.validation, data.tests,
                        batch_size=batch_size, reference_size=REFERENCE_SIZE)


# ---------------------------------------------------------------- one run


def train(run: Run, *, reuse: bool = False, cache: RunDataCache | None = None, callbacks=()) -> TrainingResult:
    """Train ``run`` into its output folder (see the module docstring); returns a :class:`TrainingResult`.

    The run's process owns the folder from start to end (:func:`hf_treelang.claims.claim_folder`): a second writer
    is refused naming it, and the folder is checked again once claimed, so that a run started next to another one
    into the same folder never mixes its files with the other's.

    Args:
        run: the resolved run (:func:`hf_treelang.train.run.resolve`).
        reuse: decide by the run's identity what its folder's content is worth (finished: returned as it is;
            interrupted: resumed; another run: replaced) instead of the scripts' rule for a non-empty folder.
        cache: shares the data and BP targets with the other runs of this process that have the same data.
        callbacks: more ``TrainerCallback`` objects for the run's Trainer (after the package's own).

    Raises:
        FolderTaken: another process owns the folder, or wrote into it after the run was checked.
    """
    with claim_folder(Path(run.training_args.output_dir), "output_dir"):
        return _train_owned(run, reuse, cache, callbacks)


def _train_owned(run: Run, reuse: bool, cache: RunDataCache | None, callbacks) -> TrainingResult:
    if not reuse and leads():
        # the scripts' rule, again now that the folder is ours: another run may have written into it since the
        # checks (rank 0 of a data-parallel job checks for all: the other ranks would see the files it writes)
        try:
            check_output(run)
        except ValueError as error:
            raise FolderTaken(str(error)) from None
    if not reuse:
        record = _script_identity(run)
        if run.training_args.resume_from_checkpoint is None:
            forget_identity(run.training_args.output_dir)  # whatever the folder held, it is no runner's run any more
        return _train(run, cache, callbacks, record_identity=record, forget=True)
    state = folder_state(run.output_dir, run.identity)
    if state.status == "done":
        return _result_of(run, reused=True)
    if state.status == "running":
        raise ValueError(f"output_dir {str(run.output_dir)!r}: this run is being trained by process "
                         f"{state.record.get('pid')} on {state.record.get('host')}")
    resume = state.checkpoint if state.status == "resume" else None
    if resume is None:
        empty_folder(run.output_dir)  # another run, or interrupted before its first checkpoint: start over
        run = run.replace_training(overwrite_output_dir=True, resume_from_checkpoint=None)
    else:
        run = run.replace_training(overwrite_output_dir=False, resume_from_checkpoint=str(resume))
    record = write_identity(run.output_dir, run.identity, run.task, run.arguments, run.config,
                            resumed_from=None if resume is None else resume.name)
    try:
        _train(run, cache, callbacks)
    except BaseException as error:
        record_failure(run.output_dir, record, error)
        raise
    return _result_of(run, reused=False)


def _script_identity(run: Run) -> dict | None:
    """Whether a run of the scripts' rule records its identity, so that a runner (``reproduce``, a sweep) can adopt
    the finished folder: ``{"resumed_from": ...}`` for a new run, or one resumed from a checkpoint of its own folder
    whose record names the same run; None for a run resumed from elsewhere, whose weights another run may have
    trained."""
    resume = run.training_args.resume_from_checkpoint
    if resume is None:
        return {"resumed_from": None}
    checkpoint, folder = Path(resume).resolve(), Path(run.training_args.output_dir).resolve()
    previous = read_identity(folder) or {}
    if checkpoint.parent == folder and previous.get("identity") == run.identity:
        return {"resumed_from": checkpoint.name}
    return None


def _result_of(run: Run, reused: bool) -> TrainingResult:
    """The :class:`TrainingResult` of a finished run of the runner, read back from its folder."""
    summary = finished_run(run.output_dir, run.identity)
    if summary is None:
        raise RuntimeError(f"the run in {str(run.output_dir)!r} ended without its completion marker")
    metrics = read_json_object(run.output_dir / "metrics.json") or {}
    return TrainingResult(str(run.output_dir), summary["final"], metrics.get("history", []),
                          summary["train_runtime_s"], summary["global_step"], reused, {**summary, "reused": reused})


class RunBegins(TrainerCallback):
    """Call ``action`` once, when the Trainer begins training (``on_train_begin``: after a checkpoint's weights,
    optimizer and scheduler were loaded), so that a resumed run changes nothing of its folder until then."""

    def __init__(self, action):
        self.action = action

    def on_train_begin(self, args, state, control, **kwargs):
        if self.action is not None:
            action, self.action = self.action, None
            action()


def _train(run: Run, cache: RunDataCache | None, extra_callbacks=(), *,
           record_identity: dict | None = None, forget: bool = False) -> TrainingResult:
    """Train and write a single run whose folder is checked: the data, the model and the Trainer, then the folder
    becomes a run folder (``run_config.json``; with ``record_identity``, ``{"resumed_from": ...}``, its
    ``run_identity.json`` right after), the Trainer trains, and the outputs are written, the marker last.

    A resumed run checks that the checkpoint's weights fit its model before any work, and changes nothing of its
    folder (its completion marker, its identity record; ``forget``: the record of a run the scripts resume) until the
    Trainer has loaded the checkpoint and begins (:class:`RunBegins`): a checkpoint that fails to load leaves a
    finished run finished."""
    args, data_args, task = run.training_args, run.data_args, run.model_task
    if args.cpu_threads:
        torch.set_num_threads(int(args.cpu_threads))
    cache = cache or RunDataCache()
    output_dir = args.output_dir
    with args.main_process_first(desc="building the data"):
        data = cache.run_data(data_args)
        train_set, validation_set = to_datasets(task, data, data_args.num_symbols)
    set_seed(args.seed)
    model = build_model(run)
    if args.num_evaluations > 0 and args.resume_from_checkpoint is None:
        args.eval_on_start = True
    if task == "mlm":
        # each example's training masks are keyed by its row (MaskedLeafCollator): a resumed run draws the same ones
        train_set = train_set.add_column(EXAMPLE_INDEX, np.arange(len(train_set), dtype=np.int64))
        collator = MaskedLeafCollator(data_args.num_symbols, seed=args.seed,
                                      masking=data_args.training_masking(optimizer_steps(args, len(train_set))))
        mask_epochs = [MaskEpochCallback(collator)]
    elif task == "clm":
        collator, mask_epochs = NextLeafCollator(data_args.num_symbols), []
    else:
        collator, mask_epochs = RootClassificationCollator(), []
    callbacks = [*schedule_callbacks(args), *mask_epochs,
                 MetricsHistoryCallback(os.path.join(output_dir, "eval_history.json")), *extra_callbacks]
    bp_callback = cache.bp_callback(data_args, task, lambda: bp_callback_for(data, data_args, task,
                                                                             args.per_device_eval_batch_size))
    resuming = args.resume_from_checkpoint is not None
    if resuming:
        check_checkpoint_fits(model, args.resume_from_checkpoint)
    command = command_line(run.task, run.arguments, output_dir)
    hub_url = None

    def begin():  # the folder becomes a run folder: run_config.json first, run_complete.json last
        if not args.should_save:
            return
        if forget and resuming:
            forget_identity(output_dir)
        start_run_folder(run.task, data_args, run.model_args, args, command=command)
        if record_identity is not None:  # after start_run_folder, which clears the previous run's files
            write_identity(output_dir, run.identity, run.task, run.arguments, run.config,
                           resumed_from=record_identity["resumed_from"])

    if resuming:
        callbacks.insert(0, RunBegins(begin))
    with disk_full_named(output_dir, model):  # a full disk: one message saying what a checkpoint needs
        if not resuming:
            begin()
        other = {} if run.model_args.is_treelang or task != "clm" else {"compute_loss_func": functools.partial(
            next_leaf_cross_entropy, label_smoothing=args.label_smoothing_factor)}
        trainer = trainer_for(task, data, data_args, args, model=model, args=without_trainer_pushes(args),
                              train_dataset=train_set, eval_dataset=validation_set, data_collator=collator,
                              compute_metrics=accuracy_metrics, preprocess_logits_for_metrics=argmax_logits,
                              callbacks=callbacks, **other)
        bp_callback.attach(trainer)
        stopping = None
        if args.early_stopping_patience is not None:
            stopping = ValidationStoppingCallback(
                *validation_tensors(task, validation_set, data_args.num_symbols),
                patience=args.early_stopping_patience, threshold=args.early_stopping_threshold,
                every=args.early_stopping_eval_steps, batch_size=args.per_device_eval_batch_size,
                min_steps=args.early_stopping_min_steps).attach(trainer)
        ConsoleCallback(data_args.k_train).attach(trainer)  # after the BP-KL callback: one line per evaluation
        start = time.perf_counter()
        train_output = trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
        train_runtime = time.perf_counter() - start
        history = evaluation_history(trainer.state.log_history)
        final = dict(history[-1]) if history and history[-1].get("step") == trainer.state.global_step else {}
        if not final or "eval_kl_bp_k0" not in final:
            final.update(trainer.evaluate())
        if trainer.is_world_process_zero():
            trainer.save_model(output_dir)
            trainer.save_state()
            data.grammar.save(os.path.join(output_dir, "grammar.json"))
            write_tokenizer(output_dir, data_args.num_symbols, task)
            if not run.model_args.is_treelang:
                write_json_atomic(os.path.join(output_dir, ARCHITECTURE_FILE),
                                  run.model_args.patched_config(data_args, task).summary())
            write_outputs(run.task, data_args, run.model_args, args, bp_callback, final, history,
                          train_runtime, train_output, trainer.state.global_step, model_config=model.config,
                          stopping=None if stopping is None else stopping.record.to_dict())
            write_run_complete(output_dir, task=run.task, global_step=trainer.state.global_step)  # last, atomically
            if args.push_to_hub:  # the finished folder, once (hf_treelang.train.hub)
                hub_url = upload_run(output_dir, args, commit_message=f"hf-treelang {run.task} run: "
                                                                      f"{trainer.state.global_step} steps")
    return TrainingResult(output_dir, final, history, train_runtime, trainer.state.global_step, hub_url=hub_url)


# ---------------------------------------------------------------- several runs together


def choose_ensemble_mode(config, batch_size: int, device) -> str:
    """``"stacked"`` on a GPU; on the CPU ``"stacked"`` while 6 x tokens x parameters of one member's step is at
    most :data:`STACKED_CPU_MAX_FLOPS`, else ``"sequential"`` (the rule: module docstring)."""
    if torch.device(device).type != "cpu":
        return "stacked"
    d, d_ff, T = config.hidden_size, config.intermediate_size, config.max_position_embeddings
    per_layer = 4 * d * d + 2 * d * d_ff  # in-projection (3d x d), out-projection, the two feed-forward matrices
    readout = d * T * config.num_symbols if config.classifier_pooling == "concat" else d * config.num_symbols
    flops = 6 * batch_size * T * (config.num_hidden_layers * per_layer + readout)
    return "stacked" if flops <= STACKED_CPU_MAX_FLOPS else "sequential"


def train_together(runs: list, *, mode: str = "auto", ensemble_dir=None, resume_from_checkpoint=None,
                   reuse: bool = False, callbacks=()) -> EnsembleResult:
    """Train ``runs`` (differing only in seed, k_train, grammar seed or σ) in this process; see the module docstring.

    Args:
        runs: the runs, each with its own output folder (its complete run folder when this returns).
        mode: ``"stacked"``, ``"sequential"`` or ``"auto"`` (:func:`choose_ensemble_mode`).
        ensemble_dir: the stacked ensemble's own folder: ``ensemble.json``, its resumable checkpoints and
            ``run_complete.json`` (the scripts' ``--output_dir``). None: a temporary folder, removed at the end.
        resume_from_checkpoint: a stacked ensemble's ``ensemble_dir/checkpoint-<step>``.
        reuse: as :func:`train`: runs finished with the same identity are returned as they are, the others are
            trained again from the start; with ``resume_from_checkpoint``, every run must be an interrupted run of
            its identity, and all resume from the stacked checkpoint, their folders kept.
        callbacks: more ``TrainerCallback`` objects for the Trainer (each member's, in sequence; the ensemble's).

    This process owns the ensemble's folder and every run's folder from start to end, as :func:`train` does.
    """
    if mode == "auto" and trains_apart(runs):
        mode = "sequential"
    check_together(runs, mode=mode, resume_from_checkpoint=resume_from_checkpoint)
    if mode == "auto":
        first = runs[0]
        mode = choose_ensemble_mode(first.model_args.config(first.data_args),
                                    first.training_args.per_device_train_batch_size, first.training_args.device)
    with contextlib.ExitStack() as owned:
        if ensemble_dir is not None:
            owned.enter_context(claim_folder(ensemble_dir, "output_dir"))
            if not reuse and leads():  # checked again now that the folder is ours: another run may have written
                try:
                    check_output_dir_free(ensemble_dir, overwrite=runs[0].training_args.overwrite_output_dir,
                                          resume=resume_from_checkpoint)
                except ValueError as error:
                    raise FolderTaken(str(error)) from None
        for run in runs:
            owned.enter_context(claim_folder(run.output_dir, "output_dir"))
        return _train_together_owned(runs, mode, ensemble_dir, resume_from_checkpoint, reuse, callbacks)


def _train_together_owned(runs: list, mode: str, ensemble_dir, resume_from_checkpoint, reuse: bool,
                          callbacks) -> EnsembleResult:
    results, cache, records = {}, RunDataCache(), {}
    if reuse and resume_from_checkpoint is not None:  # every member resumes with the stacked checkpoint
        for run in runs:
            if folder_state(run.output_dir, run.identity).status != "resume":
                raise ValueError(f"run {run.name!r} in {str(run.output_dir)!r} is not an interrupted run of this "
                                 f"identity: the ensemble cannot resume from {str(resume_from_checkpoint)!r}")
        runs = [run.replace_training(resume_from_checkpoint=str(resume_from_checkpoint)) for run in runs]
        for run in runs:  # the members' folders keep their files: the checkpoint's steps and evaluations
            records[run.name] = write_identity(run.output_dir, run.identity, run.task, run.arguments, run.config,
                                               resumed_from=Path(resume_from_checkpoint).name)
    elif reuse:
        for run in runs:
            if folder_state(run.output_dir, run.identity).status == "done":
                results[run.name] = _result_of(run, reused=True)
        runs = [run for run in runs if run.name not in results]
        for run in runs:
            empty_folder(run.output_dir)
            records[run.name] = write_identity(run.output_dir, run.identity, run.task, run.arguments, run.config)
    elif resume_from_checkpoint is None:
        for run in runs:
            check_output(run)
            forget_identity(run.output_dir)
    if ensemble_dir is not None and runs:  # the ensemble's own folder: its previous run cleared, its record first
        os.makedirs(ensemble_dir, exist_ok=True)
        if runs[0].training_args.overwrite_output_dir and resume_from_checkpoint is None:
            clear_previous_run(ensemble_dir)
        if resume_from_checkpoint is None or not os.path.isfile(os.path.join(ensemble_dir, ENSEMBLE_FILE)):
            write_json_atomic(os.path.join(ensemble_dir, ENSEMBLE_FILE), ensemble_manifest(runs, mode))
    start = time.perf_counter()
    global_step = max((result.global_step for result in results.values()), default=0)
    try:
        if runs and mode == "sequential":
            for run in runs:
                results[run.name] = _train(run, cache, callbacks)
        elif runs:
            with _ensemble_folder(ensemble_dir) as folder:
                trained, global_step = _train_stacked(runs, folder, cache, resume_from_checkpoint, callbacks,
                                                      kept=ensemble_dir is not None)
            results.update(trained)
    except BaseException as error:
        for run in runs:
            if run.name in records:
                record_failure(run.output_dir, records[run.name], error)
        raise
    for run in runs:
        if reuse:
            results[run.name] = _result_of(run, reused=False)
    global_step = max((result.global_step for result in results.values()), default=global_step)
    runtime = time.perf_counter() - start
    if ensemble_dir is not None:
        write_run_complete(ensemble_dir, task=runs[0].task if runs else None, ensemble=[r.name for r in runs],
                           mode=mode, global_step=global_step)
    return EnsembleResult(None if ensemble_dir is None else str(ensemble_dir), mode, runtime, global_step, results,
                          cache.num_data_configs)


def ensemble_manifest(runs: list, mode: str) -> dict:
    """``ensemble.json``: the task, the mode, the members with their run identities and what tells them apart."""
    return {"task": runs[0].task, "mode": mode, "members": [run.name for run in runs],
            "identities": {run.name: run.identity for run in runs},
            "member_arguments": {run.name: dict(zip(("seed", "k_train", "grammar_seed", "sigma"), run.member_key))
                                 for run in runs}}


class _ensemble_folder:
    """The stacked ensemble's own folder: ``folder`` itself, or a temporary one removed on exit."""

    def __init__(self, folder):
        self.folder, self.temporary = folder, None

    def __enter__(self) -> str:
        if self.folder is not None:
            return str(self.folder)
        self.temporary = tempfile.TemporaryDirectory(prefix="hf-treelang-ensemble-")
        return self.temporary.name

    def __exit__(self, *exc) -> None:
        if self.temporary is not None:
            self.temporary.cleanup()


def _train_stacked(runs: list, ensemble_dir: str, cache: RunDataCache, resume, extra_callbacks=(), *,
                   kept: bool = True) -> tuple:
    """Train ``runs`` as one :class:`~hf_treelang.models.stacked.StackedTreeLang`; returns ``({name: result},
    global_step)``."""
    first = runs[0]
    task = first.model_task
    args = first.replace_training(output_dir=ensemble_dir, resume_from_checkpoint=resume).training_args
    if args.cpu_threads:  # as a single run: the stacked model's threads are the run's --cpu_threads
        torch.set_num_threads(int(args.cpu_threads))
    manifest = ensemble_manifest(runs, "stacked")
    os.makedirs(ensemble_dir, exist_ok=True)
    if not os.path.isfile(os.path.join(ensemble_dir, ENSEMBLE_FILE)):  # a temporary folder: its record
        write_json_atomic(os.path.join(ensemble_dir, ENSEMBLE_FILE), manifest)
    states = []
    for run in runs:
        data = cache.run_data(run.data_args)
        callback = cache.bp_callback(run.data_args, task, lambda run=run, data=data: bp_callback_for(
            data, run.data_args, task, run.training_args.per_device_eval_batch_size))
        callback.prepare()  # the BP targets, once per distinct data config
        _, validation = to_datasets(task, data, run.data_args.num_symbols)
        states.append(MemberState(run, data, callback, *validation_tensors(task, validation, run.data_args.num_symbols)))
    def begin():  # each member folder becomes a run folder, complete when run_complete.json is written
        for run in runs:
            start_run_folder(run.task, run.data_args, run.model_args, run.training_args, command=run.command())

    if resume is None:
        begin()
    models = []
    for run in runs:
        set_seed(run.training_args.seed)  # exactly the single run's initialisation
        models.append(build_model(run))
    stacked = StackedTreeLang.from_models(models, task)
    del models
    if resume is not None:  # nothing of the members' folders changes until the checkpoint has loaded
        check_checkpoint_fits(stacked, resume)
        extra_callbacks = [RunBegins(begin), *extra_callbacks]
    stream = TrainingStream(
        task, np.stack([s.data.train.leaves for s in states]), np.stack([s.data.train.roots for s in states]),
        seeds=[run.training_args.seed for run in runs], num_symbols=first.data_args.num_symbols,
        batch_size=args.per_device_train_batch_size,
        masking=first.data_args.training_masking(optimizer_steps(args, first.data_args.num_train))
        if task == "mlm" else None, curricula=[sigma_curriculum(run.data_args) for run in runs],
        drop_last=args.dataloader_drop_last, device=args.device, arity=first.data_args.sequence_arity,
    )
    if args.num_evaluations > 0 and resume is None:
        args.eval_on_start = True
    train_set, _ = to_datasets(task, states[0].data, first.data_args.num_symbols)
    trainer = EnsembleTrainer(model=stacked, args=args, train_dataset=train_set,
                              callbacks=[*schedule_callbacks(args, [s.run.output_dir for s in states]), *extra_callbacks],
                              train_stream=stream, step_mode=args.step_mode, members=states,
                              ensemble_manifest=manifest, total_steps=optimizer_steps(args, first.data_args.num_train),
                              task=task)
    ConsoleCallback().attach(trainer)  # one line per evaluation (the mean loss), not the members' raw dicts
    with disk_full_named(ensemble_dir, stacked):  # a full disk: one message saying what a checkpoint needs
        start = time.perf_counter()
        trainer.train(resume_from_checkpoint=resume)
        runtime = time.perf_counter() - start
        global_step = trainer.state.global_step
        histories = {s.name: evaluation_history(member_log_history(trainer.state.log_history, s.name)) for s in states}
        final_needed = any(not h or h[-1].get("step") != global_step or "eval_kl_bp_k0" not in h[-1]
                           for h in histories.values())
        final_logs = trainer.evaluate() if final_needed else {}
        trainer.save_state()
        losses = trainer.member_train_losses()
        results = {}
        for index, state in enumerate(states):
            history = histories[state.name]
            final = dict(history[-1]) if history and history[-1].get("step") == global_step else {}
            if final_logs:
                suffix = "/" + state.name
                final.update({key[: -len(suffix)]: value for key, value in final_logs.items() if key.endswith(suffix)})
            _write_member(trainer, index, state, final, history, runtime, losses[index], global_step,
                          ensemble_dir if kept else None)
            results[state.name] = TrainingResult(str(state.run.output_dir), final, history, runtime, global_step)
    return results, global_step


def _write_member(trainer, index: int, state: MemberState, final: dict, history: list, runtime: float,
                  train_loss: float, global_step: int, ensemble_dir: str | None) -> None:
    """Member ``index``'s complete run folder (what a single run writes at its end); its ``run_complete.json`` names
    the ensemble's folder relative to its own where that folder is kept (``ensemble_dir``; None: a temporary one)."""
    run = state.run
    output_dir = str(run.output_dir)
    stacked = trainer.accelerator.unwrap_model(trainer.model)
    stacked.member_model(index).save_pretrained(output_dir)
    state.data.grammar.save(os.path.join(output_dir, "grammar.json"))
    write_tokenizer(output_dir, state.data.grammar.num_symbols, state.run.model_task)
    log_history = member_log_history(trainer.state.log_history, state.name)
    member_state = TrainerState(global_step=global_step, max_steps=trainer.state.max_steps,
                                num_train_epochs=trainer.state.num_train_epochs, epoch=trainer.state.epoch,
                                train_batch_size=trainer.state.train_batch_size,
                                log_history=log_history + [{"train_loss": train_loss, "step": global_step}])
    member_state.save_to_json(os.path.join(output_dir, "trainer_state.json"))
    write_history(state.history_path, log_history)
    write_outputs(run.task, run.data_args, run.model_args, run.training_args, state.bp_callback, final,
                  history, runtime, TrainOutput(global_step, train_loss, {}), global_step)
    write_run_complete(output_dir, task=run.task, global_step=global_step, member=run.name,
                       stacked_members=len(trainer.members),
                       **({"ensemble": os.path.relpath(ensemble_dir, output_dir)} if ensemble_dir is not None else {}))


# ---------------------------------------------------------------- the scripts


def summary_lines(result: EnsembleResult, runs: list) -> list:
    """The console summary of an ensemble: one line for the ensemble, one per member (its final evaluation)."""
    where = f"{result.output_dir}/{MEMBERS_DIR}/" if result.output_dir else "its members' folders"
    lines = [f"[ensemble, {result.mode}] {len(result.members)} members, {result.global_step} steps in "
             f"{result.train_runtime:.0f} s -> {where}"]
    for run in runs:
        member = result.members[run.name]
        lines.append(f"{run.name}: " + evaluation_line(member.final_metrics, member.global_step,
                                                          run.data_args.k_train))
    return lines


def main(task: str, argv: list | None = None, *, as_script: bool = False) -> int:
    """Entry point of the scripts: resolve the command line (flags or one JSON file) into runs, train, print a
    summary; returns 0. Bad arguments fail before any process, data or folder is created: with a ``ValueError``, or
    with ``as_script`` (the scripts) as one line ``run_root.py: error: ...`` on stderr and exit status 2; so does an
    ``output_dir`` that another process owns (:class:`~hf_treelang.claims.FolderTaken`); a disk that fills while the
    run writes is one such line too (exit status 1)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    script = os.path.basename(sys.argv[0]) or "hf_treelang"
    try:
        runs, ensemble = runs_from_command_line(task, argv)
    except (ValueError, OSError) as error:
        if not as_script:
            raise
        sys.stderr.write(f"{script}: error: {error}\n")
        return 2
    try:
        return _train_and_report(task, argv, runs, ensemble)
    except FolderTaken as error:  # another process owns output_dir, or wrote into it since the checks
        if not as_script:
            raise
        sys.stderr.write(f"{script}: error: {error}\n")
        return 2
    except OSError as error:
        if not as_script or error.errno != errno.ENOSPC:
            raise
        sys.stderr.write(f"{script}: error: {error.strerror}\n")
        return 1


def _train_and_report(task: str, argv: list, runs: list, ensemble) -> int:
    code = relaunch_data_parallel_cpu(argv)
    if code is not None:
        return code
    quiet_progress_bars_off_terminal()
    if ensemble.requested:
        result = train_together(runs, mode=ensemble.ensemble_mode, ensemble_dir=ensemble.output_dir,
                                resume_from_checkpoint=ensemble.resume_from_checkpoint)
        leave_process_group()
        print("\n".join(summary_lines(result, runs)))
        return 0
    (run,) = runs
    if not run.model_args.is_treelang and run.training_args.process_index == 0:
        print(run.model_args.patched_config(run.data_args, run.model_task).describe())
    result = train(run)
    leave_process_group()
    if run.training_args.process_index == 0:
        data_args = run.data_args
        bp_size = reference_count(data_args.num_test, data_args.depth, REFERENCE_SIZE, data_args.sequence_arity)
        print(f"[{task}] {result.global_step} steps -> {result.output_dir}")  # their time: the line above
        if result.hub_url is not None:
            print(f"uploaded {result.output_dir} to {result.hub_url}")
        print("final: " + evaluation_line(result.final_metrics, result.global_step, data_args.k_train))
        leaves = " (every leaf from the leaves before it)" if task == "clm" else ""
        excess = (f", excess loss = model cross-entropy per leaf - the exact -log P(x)/{data_args.num_leaves}"
                  if task == "clm" else "")
        print(f"(accuracy per k_test{leaves}: the model on {data_args.num_test} test sequences, BP_{data_args.k_train} "
              f"on {bp_size}; KL{excess} on {data_args.num_eval} in-sample sequences)")
    return 0


__all__ = ["EnsembleResult", "TrainingResult", "build_model", "choose_ensemble_mode", "main", "train",
           "train_together"]
