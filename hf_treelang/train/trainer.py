"""The Trainers of hf_treelang: ``transformers.Trainer`` with the data on the device and a lean step, for one model
(:class:`TreeLangTrainer`) or a stacked ensemble (:class:`EnsembleTrainer`).

The scripts keep the Trainer as their driver (callbacks, log-spaced evaluations, checkpoints, resuming, TensorBoard,
``trainer_state.json``); :class:`TreeLangTrainer` changes what happens between two evaluations:

* **Data on the device** (:mod:`hf_treelang.train.device_data`). The training set is a tensor on the accelerator; an
  epoch is shuffled, batched and masked there from a generator of (seed, epoch), so there is no DataLoader, collator,
  worker or per-step host work, and resuming re-creates every generator exactly.
* **A lean step.** The Trainer's own per-step work is measured by ``benchmarks/bench_train.py`` (the "Trainer host
  overhead" row: the Trainer-driven step against a bare ``forward/backward/step`` loop on the same model and data).
  Besides the DataLoader it does, at every step: a NaN check of the loss (``logging_nan_inf_filter``, a device sync),
  a full gradient-norm pass even without clipping, the counting of label tokens, ``floating_point_ops`` (a walk over
  the parameters), gradient-accumulation contexts and the accelerate optimizer wrapper. None of it bounds a 2-core
  CPU step of the paper's model (~0.1 s), but each is a host round trip or a sync on a GPU, where a step of this
  model is well under a millisecond. The choice: a Trainer *subclass* whose per-epoch loop (``_run_epoch``, the
  one private method overridden) runs the step and the callbacks only: ``on_step_begin``, one step, ``on_step_end``,
  and the Trainer's own ``_maybe_log_save_evaluate`` (so logs, evaluations, checkpoints and their callbacks are the
  Trainer's). Not a separate loop: a second loop would have to re-implement checkpoints, resuming, callback state
  and ``trainer_state.json`` and keep them in step with the Trainer's; overriding one method keeps all of that.
  The gradient norm is only computed at logging steps (or when clipping), the loss is accumulated on the device.
* **CUDA graphs** (``step_mode="cuda_graph"``, what ``"auto"`` picks when the model is on a GPU in one process,
  with Adam, fp32, TF32 or bf16 autocast, any learning-rate schedule: the rate is a device tensor the scheduler fills). The whole step (forward, backward, per-member clipping, the capturable Adam
  update) is captured once after three eager warm-up steps (:class:`CUDAGraphStep`) and replayed; a step is then two
  input copies and one graph launch. Evaluations and the BP-KL callback run eagerly at their log-spaced steps.

:class:`RunDataCache` shares the data and the BP targets of identical data configs between the runs of one process
(ensemble members), so they are built once per distinct config.

``train_engine="dataloader"`` keeps the stock ``Trainer`` path (a DataLoader over a ``datasets.Dataset`` and the
masking collator), for comparison (the benchmark's "current Trainer path") and for gradient accumulation.

:class:`EnsembleTrainer` drives a :class:`~hf_treelang.models.stacked.StackedTreeLang` (N members as one batched
model) through the same step, with per-member losses and clipping; its evaluations run every member as its own
``TreeLangFor*`` model and compute what ``Trainer.evaluate`` computes for a single run (:func:`evaluation_metrics`).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer_callback import ExportableState
from transformers.utils import logging as transformers_logging
from transformers.integrations import TensorBoardCallback
from transformers.trainer_pt_utils import LabelSmoother
from transformers.trainer_utils import TrainOutput, speed_metrics

from hf_treelang.jsonio import write_json_atomic
from hf_treelang.models.modeling_treelang import TreeLangPreTrainedModel
from hf_treelang.models.stacked import StackedTreeLang, clip_grad_norm_per_member

from .arguments import STEP_MODES, check_choice
from .callbacks import write_history
from .data import load_run_data, sigma_curriculum
from .device_data import EpochBatches, TrainingStream, run_steps
from .optimizers import optimizer_factory
from .folders import ENSEMBLE_FILE
from .levers import FUSED_OPTIMIZER, Levers, attention_context, choose_levers

logger = transformers_logging.get_logger(__name__)

# ---------------------------------------------------------------- step mode


def resolve_step_mode(step_mode: str, args) -> str:
    """``"eager"`` or ``"cuda_graph"`` for ``step_mode`` (``"auto"``: graphs where
    :meth:`~hf_treelang.train.arguments.TreeLangTrainingArguments.cuda_graph_obstacles` finds none; the fallback is
    logged once, naming what stands in the way)."""
    check_choice("step_mode", step_mode, STEP_MODES)
    if step_mode == "eager":
        return "eager"
    obstacles = args.cuda_graph_obstacles(requested=step_mode == "cuda_graph")
    if step_mode == "cuda_graph" and obstacles:
        raise ValueError("`step_mode` 'cuda_graph' is not possible here: " + "; ".join(obstacles)
                         + " (use --step_mode auto or eager)")
    if obstacles and args.device.type == "cuda":
        logger.info("step_mode auto: eager steps, not CUDA graphs, because of " + "; ".join(obstacles))
    return "eager" if obstacles else "cuda_graph"


def with_levers(args, levers: Levers):
    """A copy of the training arguments ``args`` that asks for ``levers`` (fused AdamW, a compiled model captured in
    the graph), so that the Trainer builds that step and saves what ran; ``args`` itself when there are none."""
    if not (levers.fused_adam or levers.compiled):
        return args
    import copy

    from transformers.training_args import OptimizerNames

    args = copy.copy(args)
    if levers.fused_adam:
        args.optim = OptimizerNames(FUSED_OPTIMIZER)
    if levers.compiled:  # a compiled step is captured only when the graph mode is asked for by name
        args.torch_compile, args.torch_compile_backend, args.step_mode = True, "inductor", "cuda_graph"
    return args


def use_tf32_by_default(args) -> bool:
    """Training on a CUDA GPU multiplies float32 matrices in TF32 (10-bit mantissa inputs, float32 accumulation)
    unless ``--tf32 false`` says otherwise: the norm for training on NVIDIA GPUs since Ampere. Returns whether TF32 is
    on. On the CPU nothing changes (``--tf32 true`` there is transformers' own error)."""
    if args.device.type != "cuda" or args.tf32 is False:
        return bool(args.device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return True


def align_optimizer(optimizer, capturable: bool, fused: bool | None = None) -> None:
    """Make a (possibly just loaded) Adam follow the step mode: ``capturable`` groups keep their step counters and
    learning rate as device tensors (a CUDA graph reads them; the scheduler writes the rate with ``fill_``, no host
    sync), eager groups as a CPU counter and a float rate. A checkpoint saved in either mode thus resumes in either.
    ``fused`` (when given) sets the implementation: a loaded state dict brings its groups' flags with it, so a
    checkpoint of ``adamw_torch`` would otherwise step a run of ``adamw_torch_fused`` with the foreach kernels, and the
    reverse. A fused group keeps its counters on the parameters' device in both modes: its kernel reads them there.
    """
    for group in optimizer.param_groups:
        if "capturable" not in group:
            continue
        group["capturable"] = capturable
        if fused is not None:
            group["fused"] = fused or None
            if fused:
                group["foreach"] = None
        device = group["params"][0].device if group["params"] else torch.device("cpu")
        if capturable and not torch.is_tensor(group["lr"]):
            group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
        elif not capturable and torch.is_tensor(group["lr"]):
            group["lr"] = float(group["lr"])
        on_device = capturable or bool(group.get("fused"))
        for param in group["params"]:
            state = optimizer.state.get(param)
            if state and "step" in state:
                state["step"] = state["step"].to(device=param.device if on_device else "cpu", dtype=torch.float32)


# ---------------------------------------------------------------- the Trainer's view of the data


class DeviceBatches:
    """What :meth:`TreeLangTrainer.get_train_dataloader` returns: the stream, with the length (steps per epoch) and
    ``dataset`` (P rows) the Trainer reads to count steps; iterating it yields the batches of epoch
    :meth:`set_epoch` (the stock loop's protocol; :class:`TreeLangTrainer` reads the stream directly)."""

    def __init__(self, stream):
        self.stream = stream
        self.dataset = range(stream.num_train)
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.stream)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        batches = self.stream.epoch(self.epoch)
        return (batches.batch(step) for step in range(batches.steps))


# ---------------------------------------------------------------- CUDA graphs


class CUDAGraphStep:
    """A training step captured once as a CUDA graph and replayed (PyTorch's whole-network capture recipe).

    ``body(inputs)`` runs forward, backward, clipping and the optimizer update and returns a tuple of tensors. The
    first :attr:`warmup_steps` calls run it eagerly on a side stream (real steps: they warm up the allocator and
    create the optimizer's state); the next call captures it with the gradients set to None (so they live in the
    graph's memory) and replays it; later calls copy their inputs into the captured ones and replay. A batch of
    another shape (the last, partial one of an epoch) runs eagerly. The warm-up and the capture see contiguous inputs,
    so that a compiled model meets at the capture the layout it was compiled for in the warm-up.
    """

    warmup_steps = 3

    def __init__(self, body, optimizer):
        self.body = body
        self.optimizer = optimizer
        self.graph = None
        self.static_inputs = None
        self.static_outputs = None
        self.calls = 0

    def _same_shapes(self, inputs: dict) -> bool:
        return all(inputs[key].shape == value.shape for key, value in self.static_inputs.items())

    def __call__(self, inputs: dict) -> tuple:
        if self.graph is not None and self._same_shapes(inputs):
            for key, value in inputs.items():
                self.static_inputs[key].copy_(value, non_blocking=True)
            self.graph.replay()
            return self.static_outputs
        # the layout the capture will see: a compiled model (``--torch_compile``) is specialised to its inputs'
        # strides, and a stacked ensemble's batches are strided slices, while the captured copies are contiguous
        inputs = {key: value.contiguous() for key, value in inputs.items()}
        if self.graph is not None or self.calls < self.warmup_steps:
            self.calls += 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.optimizer.zero_grad(set_to_none=True)
                outputs = self.body(inputs)
            torch.cuda.current_stream().wait_stream(side)
            return outputs
        self.static_inputs = {key: value.clone() for key, value in inputs.items()}
        self.optimizer.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_outputs = self.body(self.static_inputs)
        self.graph.replay()  # capturing records the kernels without running them
        return self.static_outputs


# ---------------------------------------------------------------- the Trainer


# The Trainer's per-epoch loop that TreeLangTrainer overrides, with the parameters it is called with, and the private
# Trainer methods the override calls: a transformers release that changes any of them must fail loudly, not train
# differently (tests/test_engine.py pins this).
EPOCH_LOOP = "_run_epoch"
EPOCH_LOOP_PARAMETERS = ("self", "model", "epoch", "train_dataloader", "steps_in_epoch", "num_update_steps_per_epoch",
                         "trial", "ignore_keys_for_eval", "start_time", "resume_from_checkpoint", "epochs_trained",
                         "steps_trained_in_current_epoch")
EPOCH_LOOP_CALLS = ("_maybe_log_save_evaluate", "_load_rng_state", "_get_learning_rate")


def check_epoch_loop_contract(trainer_class=Trainer) -> None:
    """Raise an ImportError naming the method and the transformers version unless ``trainer_class`` has the per-epoch
    loop :class:`TreeLangTrainer` overrides, with the same parameters, and the private methods the override calls."""
    import inspect

    import transformers

    where = f"transformers {transformers.__version__}"
    loop = getattr(trainer_class, EPOCH_LOOP, None)
    if loop is None:
        raise ImportError(f"the device engine overrides Trainer.{EPOCH_LOOP}, which {where} does not have; use "
                          "--train_engine dataloader")
    parameters = tuple(inspect.signature(loop).parameters)
    if parameters != EPOCH_LOOP_PARAMETERS:
        raise ImportError(f"the device engine overrides Trainer.{EPOCH_LOOP}{EPOCH_LOOP_PARAMETERS}, which {where} "
                          f"defines as {parameters}; use --train_engine dataloader until hf_treelang supports it")
    missing = [name for name in EPOCH_LOOP_CALLS if not callable(getattr(trainer_class, name, None))]
    if missing:
        raise ImportError(f"the device engine's Trainer.{EPOCH_LOOP} calls Trainer.{', Trainer.'.join(missing)}, "
                          f"which {where} does not have; use --train_engine dataloader")


class RunLoss(TrainerCallback, ExportableState):
    """The sum of the training losses of the run's steps so far and how many steps it covers, saved in each
    checkpoint's ``trainer_state.json`` (as a stateful callback) so that a resumed run reports the same
    ``train_loss`` as the uninterrupted one.

    ``member_loss_sums`` holds a stacked ensemble's per-member sums (empty for one model).
    """

    def __init__(self, loss_sum: float = 0.0, member_loss_sums: list | None = None, steps: int = 0):
        self.loss_sum = loss_sum
        self.member_loss_sums = list(member_loss_sums or [])
        self.steps = steps

    def state(self) -> dict:
        return {"args": {}, "attributes": {"loss_sum": self.loss_sum, "member_loss_sums": self.member_loss_sums,
                                           "steps": self.steps}}


def logged_loss_sum(log_history: list, global_step: int) -> RunLoss:
    """The loss sum of the first ``global_step`` steps as far as the Trainer's logs tell it, for a checkpoint written
    without :class:`RunLoss`: each logged ``loss`` is the mean over the steps since the previous log, so the sum
    covers the steps up to the last log before ``global_step`` (none for a fresh run)."""
    total, previous = 0.0, 0
    for entry in log_history:
        if "loss" in entry and "step" in entry and previous < entry["step"] <= global_step:
            total += float(entry["loss"]) * (entry["step"] - previous)
            previous = entry["step"]
    return RunLoss(total, steps=previous)


def smoothed_logits(model, logits: torch.Tensor) -> torch.Tensor:
    """The logits label smoothing averages over: a TreeLang model's q symbols, what it predicts (its language-model
    heads also score [MASK] and [PAD], far below every symbol: a masked or next leaf is never either); another
    architecture's logits as they are (every id it scores, as transformers' ``LabelSmoother`` on its own)."""
    unwrapped = getattr(model, "_orig_mod", getattr(model, "module", model))
    if isinstance(unwrapped, (TreeLangPreTrainedModel, StackedTreeLang)):
        return logits[..., : unwrapped.config.num_symbols]
    return logits


@dataclass
class SymbolLabelSmoother(LabelSmoother):
    """transformers' ``LabelSmoother`` over :func:`smoothed_logits` of ``model``: (1 - ε) NLL + ε × the mean of
    -log p over the q symbols for a TreeLang model, over every id for another architecture."""

    model: object = field(default=None, repr=False)

    def __call__(self, model_output, labels, shift_labels=False, num_items_in_batch=None):
        logits = model_output["logits"] if isinstance(model_output, dict) else model_output[0]
        return super().__call__({"logits": smoothed_logits(self.model, logits)}, labels, shift_labels=shift_labels,
                                num_items_in_batch=num_items_in_batch)


class SmoothsOverSymbols:
    """A Trainer mixin: ``--label_smoothing_factor`` smooths over :func:`smoothed_logits` in every loss the Trainer
    computes, the evaluation's included (the stock ``compute_loss`` calls ``label_smoother`` on the model's whole
    logits)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.label_smoother is not None:
            self.label_smoother = SymbolLabelSmoother(epsilon=self.label_smoother.epsilon, model=self.model)


class EvaluatesEveryRow:
    """A Trainer mixin: ``--dataloader_drop_last`` drops the last partial batch of the *training* data only; the
    evaluation set is read whole (the stock Trainer applies the flag to its evaluation loader too, so that an
    evaluation of 600 sequences in batches of 128 would average 512 of them)."""

    def get_eval_dataloader(self, eval_dataset=None):
        if not self.args.dataloader_drop_last:
            return super().get_eval_dataloader(eval_dataset)
        self.args.dataloader_drop_last = False
        try:
            return super().get_eval_dataloader(eval_dataset)
        finally:
            self.args.dataloader_drop_last = True


class ResumesWhole:
    """A Trainer mixin for what a resumed run must report as if it had never stopped.

    * **It ends at ``max_steps``.** ``Trainer`` resumes at epoch ``global_step // steps_per_epoch`` and checks for
      the end only after a step, so a checkpoint of the final step of a run whose ``max_steps`` ends mid-epoch would
      train one step more. Here the epoch loop is skipped and the Trainer goes straight to its end of training.
    * **Its ``train_loss`` is the mean over every step of the run**, not over the steps of the last ``train`` call:
      the running sum travels in the checkpoints (:class:`RunLoss`).
    """

    _loss_before = RunLoss()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_callback(RunLoss())

    def _init_training_state(self, max_steps, *args, **kwargs):
        epochs_trained, steps_in_epoch = super()._init_training_state(max_steps, *args, **kwargs)
        saved = self.state.stateful_callbacks.get(RunLoss.__name__)
        if isinstance(saved, dict):
            self._loss_before = RunLoss(**saved.get("attributes", {}))
        else:  # a fresh run, or a checkpoint written without the record (its sum rebuilt from the logged losses)
            self._loss_before = logged_loss_sum(self.state.log_history, self.state.global_step)
            self.state.stateful_callbacks[RunLoss.__name__] = self._loss_before.state()
        self._steps_unaccounted = self.state.global_step - self._loss_before.steps  # steps of an old checkpoint
        if self.state.global_step >= max_steps:  # only a resumed state can be there: no epoch is left to run
            return self.state.num_train_epochs, 0
        return epochs_trained, steps_in_epoch

    _steps_unaccounted = 0

    def run_loss(self) -> RunLoss:
        """The loss sums of the run so far (a host sync: called at checkpoints and at the end only)."""
        return RunLoss(self._loss_before.loss_sum + self._total_loss_scalar + float(self._tr_loss.item()),
                       steps=self.state.global_step - self._steps_unaccounted)

    def _save_checkpoint(self, model, trial):
        saved = self.run_loss()
        for callback in self.callback_handler.callbacks:
            if isinstance(callback, RunLoss):
                callback.loss_sum, callback.member_loss_sums, callback.steps = (saved.loss_sum, saved.member_loss_sums,
                                                                                saved.steps)
        return super()._save_checkpoint(model, trial)

    def log(self, logs: dict, *args, **kwargs) -> None:
        if "train_loss" in logs and "train_runtime" in logs:  # the end of training (Trainer._finalize_training)
            logs = {**logs, "train_loss": self.run_train_loss()}
        return super().log(logs, *args, **kwargs)

    def run_train_loss(self) -> float:
        """The mean training loss over every step of the run (after the Trainer's end-of-training sum); over the
        steps whose losses are known when it resumed from a checkpoint written without :class:`RunLoss`."""
        steps = self.state.global_step - self._steps_unaccounted
        return (self._loss_before.loss_sum + self._total_loss_scalar) / max(steps, 1)

    def _finalize_training(self, *args, **kwargs):
        output = super()._finalize_training(*args, **kwargs)
        loss = self.run_train_loss()
        return TrainOutput(output.global_step, loss, {**output.metrics, "train_loss": loss})


class StockTrainer(SmoothsOverSymbols, EvaluatesEveryRow, ResumesWhole, Trainer):
    """The stock ``transformers.Trainer`` (``--train_engine dataloader``), ending at ``max_steps`` on resume."""


class TreeLangTrainer(SmoothsOverSymbols, EvaluatesEveryRow, ResumesWhole, Trainer):
    """``transformers.Trainer`` fed from a :class:`~hf_treelang.train.device_data.TrainingStream`, with a lean step.

    Args (besides the Trainer's):
        train_stream: the training batches (a one-member stream's :meth:`~TrainingStream.single` view for a single
            run, the stacked stream for an ensemble).
        step_mode: ``"auto"`` (CUDA graphs where :func:`cuda_graph_obstacles` finds none, else eager), ``"eager"``
            or ``"cuda_graph"``.
        total_steps: the run's optimizer steps; task: the model task (``"root"``, ``"mlm"``, ``"clm"``);
            stacked_members: N for a stacked ensemble. With ``step_mode="auto"`` and a CUDA-graph step they choose the
            levers (:mod:`hf_treelang.train.levers`): the arguments are copied to ask for the fused Adam and the
            compiled model before the Trainer is built, and the step runs in the levers' attention context.

    See the module docstring for what the step does and does not do.
    """

    def __init__(self, *args, train_stream, step_mode: str = "auto", total_steps: int | None = None,
                 task: str | None = None, stacked_members: int = 1, **kwargs):
        check_epoch_loop_contract()
        training_args = kwargs.get("args")
        self.levers = Levers()
        resolved = None
        if training_args is not None:  # before the Trainer builds its accelerator: a compiled step is asked there
            resolved = resolve_step_mode(step_mode, training_args)
            if step_mode == "auto" and resolved == "cuda_graph" and total_steps is not None:
                self.levers = self.auto_levers(training_args.optim_name, kwargs.get("model"), total_steps, task,
                                               stacked_members)
                kwargs["args"] = with_levers(training_args, self.levers)
        super().__init__(*args, **kwargs)
        if self.args.gradient_accumulation_steps != 1:
            raise ValueError(f"`gradient_accumulation_steps` must be 1 with the device engine, got "
                             f"{self.args.gradient_accumulation_steps}")
        self.train_stream = train_stream
        self.step_mode = resolved if resolved is not None else resolve_step_mode(step_mode, self.args)
        self._graph_step = None
        self._flops_per_token = None

    @staticmethod
    def auto_levers(optim: str, model, steps: int, task: str | None, members: int) -> Levers:
        """What ``--step_mode auto`` adds to this CUDA-graph step (:func:`~hf_treelang.train.levers.choose_levers`),
        logged in one line."""
        parameters = sum(p.numel() for p in model.parameters()) // max(members, 1) if model is not None else 1
        levers = choose_levers(step_mode="auto", obstacles=[], optim=optim, steps=steps, parameters=parameters,
                               members=members, task=task or "", treelang=isinstance(
                                   model, (TreeLangPreTrainedModel, StackedTreeLang)))
        if levers.reason:
            logger.info(levers.reason)
        return levers

    def train(self, *args, **kwargs):
        """``Trainer.train`` with TF32 on by default on CUDA (:func:`use_tf32_by_default`), restored afterwards so
        that the rest of the process computes as before."""
        previous = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        use_tf32_by_default(self.args)
        try:
            return super().train(*args, **kwargs)
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous

    # -- data

    def get_train_dataloader(self) -> DeviceBatches:
        return DeviceBatches(self.train_stream)

    def floating_point_ops(self, inputs: dict) -> int:
        """6 x tokens x parameters (the Trainer's estimate), with the parameter count taken once."""
        if self._flops_per_token is None:
            model = self.model
            count = model.num_parameters(exclude_embeddings=True) if hasattr(model, "num_parameters") else \
                sum(p.numel() for p in model.parameters())
            self._flops_per_token = 6 * count
        return self._flops_per_token * inputs["input_ids"].numel()

    # -- optimizer

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        if self.step_mode == "cuda_graph":  # the counters on the device: the update can be captured
            align_optimizer(self.torch_optimizer(), capturable=True)
        return optimizer

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        scheduler = super().create_scheduler(num_training_steps, optimizer)
        if self.step_mode == "cuda_graph":  # after the scheduler took the float rates as its base rates
            align_optimizer(self.torch_optimizer(), capturable=True)
        return scheduler

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:  # the checkpoint may come from the other step mode
            align_optimizer(self.torch_optimizer(), capturable=self.step_mode == "cuda_graph",
                            fused=self.args.optim_name == "adamw_torch_fused")

    def torch_optimizer(self) -> torch.optim.Optimizer:
        """The torch optimizer under accelerate's wrapper."""
        return getattr(self.optimizer, "optimizer", self.optimizer)

    # -- the step

    def forward_loss(self, model, inputs: dict) -> tuple:
        """(the loss to differentiate, the loss to log) of one batch; an ensemble returns the members' sum and mean.
        With a ``compute_loss_func`` (a causal model of transformers, whose own loss shifts the labels) the labels go
        to that function instead of the model, as in ``Trainer.compute_loss``. Otherwise, with
        ``label_smoothing_factor`` ε > 0 the loss is transformers' ``LabelSmoother`` on :func:`smoothed_logits`, as
        the Trainer's ``compute_loss`` computes it in evaluation (labels not shifted: a causal model's labels are
        already aligned with its positions): (1 - ε) NLL + ε × the mean of -log p, averaged over the labelled
        positions, the mean over the q symbols for a TreeLang model and over the q + 2 ids of the vocabulary (the
        symbols, the mask or BOS id and padding) for an architecture of transformers. ε = 0 is the model's own
        cross-entropy, unchanged."""
        if self.compute_loss_func is not None:
            inputs = dict(inputs)
            labels = inputs.pop("labels")
            loss = self.compute_loss_func(model(**inputs), labels)
        elif self.label_smoother is None:
            loss = model(**inputs)["loss"]
        else:
            labels = inputs["labels"]  # (b,) or (b, T)
            output = model(**{key: value for key, value in inputs.items() if key != "labels"})
            loss = self.label_smoother({"logits": smoothed_logits(model, output["logits"])}, labels)
        return loss, loss.detach()

    def clip_gradients(self, model) -> torch.Tensor:
        """Clip to ``max_grad_norm`` as the Trainer does (accelerate unscales fp16 gradients first); returns the norm
        before clipping."""
        if self.step_mode == "cuda_graph":  # no fp16 in graphs: no gradient scaler, nothing to unscale
            return torch.nn.utils.clip_grad_norm_(model.parameters(), self.args.max_grad_norm)
        return self.accelerator.clip_grad_norm_(model.parameters(), self.args.max_grad_norm)

    def gradient_norm(self, model) -> torch.Tensor:
        """The norm of the current gradients (what the Trainer logs as ``grad_norm``)."""
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if not grads:
            return torch.zeros((), device=self.args.device)
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))

    def _graph_body(self, model, inputs: dict) -> tuple:
        with self.compute_loss_context_manager():
            loss, logged = self.forward_loss(model, inputs)
        loss.backward()
        clipping = self.args.max_grad_norm is not None and self.args.max_grad_norm > 0
        norm = self.clip_gradients(model) if clipping else self.gradient_norm(model)
        self.torch_optimizer().step()
        return logged, norm

    def lean_step(self, model, inputs: dict) -> tuple:
        """One optimisation step: (the loss to log, the gradient norm or None); no host sync in either mode."""
        with attention_context(self.levers):
            return self._lean_step(model, inputs)

    def _lean_step(self, model, inputs: dict) -> tuple:
        if self.step_mode == "cuda_graph":
            if self._graph_step is None:
                self._graph_step = CUDAGraphStep(lambda batch: self._graph_body(model, batch), self.torch_optimizer())
            outputs = self._graph_step(inputs)
            # the replayed graph steps the optimizer where the scheduler's step counter cannot see it: say it did
            self.optimizer._opt_called = self.torch_optimizer()._opt_called = True
            return outputs
        # the previous step's gradients were kept until now for the log (see _run_epoch)
        self.optimizer.zero_grad(set_to_none=True)
        with self.compute_loss_context_manager():
            loss, logged = self.forward_loss(model, inputs)
        self.accelerator.backward(loss)
        norm = None
        if self.args.max_grad_norm is not None and self.args.max_grad_norm > 0:
            norm = self.clip_gradients(model)
        self.optimizer.step()
        return logged, norm

    def _run_epoch(self, model, epoch, train_dataloader, steps_in_epoch, num_update_steps_per_epoch, trial,
                   ignore_keys_for_eval, start_time, resume_from_checkpoint, epochs_trained,
                   steps_trained_in_current_epoch, **unused):
        """One epoch of lean steps (overrides the Trainer's per-epoch loop; see the module docstring)."""
        args, state = self.args, self.state
        start = 0
        if epoch == epochs_trained and resume_from_checkpoint is not None:
            # the stream re-creates the epoch from (seed, epoch): skipping is slicing
            start = steps_trained_in_current_epoch
            self._load_rng_state(resume_from_checkpoint)  # dropout's generators as they were at the checkpoint
        batches: EpochBatches = self.train_stream.epoch(epoch)
        learning_rate = grad_norm = None
        if not model.training:
            model.train()
        for step in range(start, batches.steps):
            if self.control.should_training_stop:  # a callback stopped the run before this step (a resumed run)
                break
            inputs = batches.batch(step)
            self.control = self.callback_handler.on_step_begin(args, state, self.control)
            logged, grad_norm = self.lean_step(model, inputs)
            self._tr_loss += logged
            self.current_flos += float(self.floating_point_ops(inputs))
            learning_rate = self.learning_rate_now()
            self.lr_scheduler.step()
            state.global_step += 1
            state.epoch = epoch + (step + 1) / steps_in_epoch
            self.control = self.callback_handler.on_step_end(args, state, self.control)
            if self.control.should_log and grad_norm is None:
                grad_norm = self.gradient_norm(model)
            self._maybe_log_save_evaluate(self._tr_loss, grad_norm, model, trial, epoch, ignore_keys_for_eval,
                                          start_time, learning_rate=self.logged(learning_rate))
            if not model.training:  # an evaluation ran
                model.train()
            if self.control.should_epoch_stop or self.control.should_training_stop:
                break
        self.control = self.callback_handler.on_epoch_end(args, state, self.control)
        self._maybe_log_save_evaluate(self._tr_loss, grad_norm, model, trial, epoch, ignore_keys_for_eval,
                                      start_time, learning_rate=self.logged(learning_rate))

    def learning_rate_now(self):
        """The rate of the coming step without a host sync: a float, or in graph mode the scheduler's own copy of
        the device tensor it writes (read as a number only when it is logged, :meth:`logged`)."""
        if self.step_mode == "cuda_graph":
            return self.lr_scheduler.get_last_lr()[0]
        return self._get_learning_rate()

    def logged(self, learning_rate):
        """``learning_rate`` as a float when this step logs, else None (then nothing reads it)."""
        if learning_rate is None or not self.control.should_log:
            return None
        return float(learning_rate)


# ---------------------------------------------------------------- shared data


def data_key(data_args) -> str:
    """The identity of a run's data: every data argument (two runs with equal keys have identical data)."""
    return json.dumps(asdict(data_args), sort_keys=True, default=str)


class RunDataCache:
    """The data and BP-KL callbacks of the runs of one process, built once per distinct data config.

    ``run_data(data_args)`` is :func:`hf_treelang.train.data.load_run_data` memoised on :func:`data_key`;
    ``bp_callback(data_args, task, make)`` returns the callback ``make()`` built for the first run of that model task
    (``"root"``, ``"mlm"``, ``"clm"``: what the callback compares) with that data (its BP targets are computed once, in
    its first ``prepare``).
    """

    def __init__(self):
        self._data: dict = {}
        self._callbacks: dict = {}

    def run_data(self, data_args):
        key = data_key(data_args)
        if key not in self._data:
            self._data[key] = load_run_data(data_args)
        return self._data[key]

    def bp_callback(self, data_args, task: str, make):
        key = (data_key(data_args), task)
        if key not in self._callbacks:
            self._callbacks[key] = make()
        return self._callbacks[key]

    @property
    def num_data_configs(self) -> int:
        return len(self._data)


def single_run_stream(task: str, data, data_args, training_args, total_steps: int) -> TrainingStream:
    """The training stream of a single run (model task ``"root"`` / ``"mlm"`` / ``"clm"``) of ``total_steps``
    optimiser steps on ``training_args.device``, with its σ curriculum if it has one."""
    return TrainingStream(
        task, data.train.leaves, data.train.roots, seeds=[training_args.seed], num_symbols=data_args.num_symbols,
        batch_size=training_args.per_device_train_batch_size,
        masking=data_args.training_masking(total_steps) if task == "mlm" else None,
        curricula=[sigma_curriculum(data_args)],
        drop_last=training_args.dataloader_drop_last, device=training_args.device,
        world_size=training_args.world_size, process_index=training_args.process_index,
        arity=data_args.sequence_arity,
    ).single()


def trainer_for(task: str, data, data_args, training_args, **trainer_kwargs):
    """The Trainer of a single run (model task ``"root"`` / ``"mlm"`` / ``"clm"``): :class:`TreeLangTrainer` fed by
    :func:`single_run_stream` with ``--train_engine device`` (the default), the stock ``Trainer`` (a DataLoader and
    the collator in ``trainer_kwargs``) with ``--train_engine dataloader``. ``trainer_kwargs`` are the Trainer's
    (``model``, ``args``, datasets, callbacks, ...)."""
    # the values, not the arguments, leave this file (tests/test_training.py: a run's arguments do not come back)
    total_steps = run_steps(training_args.max_steps, training_args.num_train_epochs,
                            training_args.per_device_train_batch_size * max(training_args.world_size, 1),
                            data_args.num_train, training_args.dataloader_drop_last)
    factory = optimizer_factory(training_args.optim, total_steps,
                                qk_multiplier=training_args.qk_learning_rate_multiplier,
                                learning_rate=training_args.learning_rate,
                                betas=(training_args.adam_beta1, training_args.adam_beta2),
                                eps=training_args.adam_epsilon, weight_decay=training_args.weight_decay)
    if factory is not None:  # --optim muon / ademamix / grokfast_adamw, a query/key rate: built on the device
        trainer_kwargs = {**trainer_kwargs, "optimizer_cls_and_kwargs": factory}
    if getattr(training_args, "train_engine", "device") == "dataloader":
        return tensorboard_in_output_dir(StockTrainer(**trainer_kwargs))
    return tensorboard_in_output_dir(TreeLangTrainer(
        train_stream=single_run_stream(task, data, data_args, training_args, total_steps),
        step_mode=getattr(training_args, "step_mode", "auto"), total_steps=None if factory else total_steps,
        task=task, **trainer_kwargs))


def tensorboard_in_output_dir(trainer):
    """Point the Trainer's TensorBoard logger (when ``report_to`` has it) at ``OUTPUT_DIR/tensorboard``, the run
    folder's, unless ``--logging_dir`` says otherwise; returns the trainer."""
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.logging_dir is None:
            callback.logging_dir = os.path.join(trainer.args.output_dir, "tensorboard")
    return trainer


@contextlib.contextmanager
def no_grad_eval(model):
    """Evaluation mode and no gradients for the duration; restores the mode."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


# ---------------------------------------------------------------- a stacked ensemble


@dataclass
class MemberState:
    """What a stacked ensemble keeps per member: its run, data, BP-KL callback and validation tensors."""

    run: object  # hf_treelang.train.run.Run
    data: object
    bp_callback: object
    validation_inputs: torch.Tensor  # (n, T)
    validation_labels: torch.Tensor  # (n,) or (n, T)
    eval_model: object = None

    @property
    def name(self) -> str:
        return self.run.name

    @property
    def history_path(self) -> str:
        return os.path.join(self.run.training_args.output_dir, "eval_history.json")


@torch.no_grad()
def evaluation_metrics(model, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int, prefix: str = "eval") -> dict:
    """``eval_loss``, ``eval_accuracy``, ``eval_num_examples`` as ``Trainer.evaluate`` computes them for a single run
    (the loss of each batch counted once per row, the accuracy over the labelled positions)."""
    device = next(model.parameters()).device
    losses, correct, labelled = [], 0, 0
    with no_grad_eval(model):
        for start in range(0, inputs.shape[0], batch_size):
            x = inputs[start : start + batch_size].to(device)  # (b, T)
            y = labels[start : start + batch_size].to(device)  # (b,) or (b, T)
            output = model(input_ids=x, labels=y)
            losses.append(output.loss.detach().float().repeat(x.shape[0]).cpu())
            mask = y != -100
            correct += int((output.logits.argmax(-1)[mask] == y[mask]).sum())
            labelled += int(mask.sum())
    values = torch.cat(losses).numpy()
    values = values[np.isfinite(values)]
    return {
        f"{prefix}_loss": values.mean().item() if values.size else float("nan"),
        f"{prefix}_accuracy": correct / labelled if labelled else float("nan"),
        f"{prefix}_num_examples": labelled,
    }


def member_log_history(log_history: list, name: str) -> list:
    """A member's entries of the ensemble's ``log_history``: the keys ``<key>/<name>`` as ``<key>``, with the step."""
    suffix = "/" + name
    entries = []
    for entry in log_history:
        values = {key[: -len(suffix)]: value for key, value in entry.items() if key.endswith(suffix)}
        if values:
            values.update({key: entry[key] for key in ("epoch", "step") if key in entry})
            entries.append(values)
    return entries


class EnsembleTrainer(TreeLangTrainer):
    """:class:`TreeLangTrainer` of a :class:`~hf_treelang.models.stacked.StackedTreeLang`: per-member losses,
    per-member clipping, and evaluations that run every member as its own ``TreeLangFor*`` model.

    An evaluation logs every member's keys as ``<key>/<member name>`` (``eval_kl_bp_k0/seed0-k2``; TensorBoard shows
    ``eval/kl_bp_k0/seed0-k2``) and their mean ``eval_loss``, and rewrites each member's ``eval_history.json``. The
    checkpoints hold the stacked weights and ``ensemble.json`` (resumable), and each member's weights in
    ``<member folder>/checkpoint-<step>/``.
    """

    def __init__(self, *args, members: list, ensemble_manifest: dict, **kwargs):
        super().__init__(*args, stacked_members=len(members), **kwargs)
        self.members = members
        self.ensemble_manifest = ensemble_manifest
        self.member_loss_sum = torch.zeros(len(members), device=self.args.device)  # (N,) over the whole run
        self._member_steps_unaccounted = 0
        tensorboard_in_output_dir(self)

    def forward_loss(self, model, inputs: dict) -> tuple:
        output = model(**inputs)
        if self.label_smoother is not None:  # each member's loss smoothed as its single run's (forward_loss above)
            labels = inputs["labels"]  # (N, b) or (N, b, T)
            smoothed = torch.stack([self.label_smoother({"logits": smoothed_logits(model, output["logits"][index])},
                                                        labels[index])
                                    for index in range(labels.shape[0])])  # (N,)
            output = {"loss": smoothed.sum(), "member_losses": smoothed}
        member_losses = output["member_losses"].detach()  # (N,)
        self.member_loss_sum += member_losses
        return output["loss"], member_losses.mean()

    def _init_training_state(self, max_steps, *args, **kwargs):
        trained = super()._init_training_state(max_steps, *args, **kwargs)
        if self._loss_before.member_loss_sums:  # resumed: the members' sums so far (in place: a graph may hold it)
            self.member_loss_sum.copy_(torch.tensor(self._loss_before.member_loss_sums))
            self._member_steps_unaccounted = self._steps_unaccounted
        else:  # fresh, or a checkpoint written without the record: the members' losses before it are unknown
            self._member_steps_unaccounted = self.state.global_step
        return trained

    def run_loss(self) -> RunLoss:
        loss = super().run_loss()
        loss.member_loss_sums = [float(value) for value in self.member_loss_sum.cpu()]
        return loss

    def clip_gradients(self, model) -> torch.Tensor:
        if self.step_mode == "eager":
            self.accelerator.unscale_gradients()
        norms = clip_grad_norm_per_member(list(model.parameters()), self.args.max_grad_norm, len(self.members))
        return torch.linalg.vector_norm(norms)  # (the norm of every member's gradient together, for the log)

    def member_models(self):
        """Each member as a ``TreeLangFor*`` model holding its current weights (reused between evaluations)."""
        stacked = self.accelerator.unwrap_model(self.model)
        for index, state in enumerate(self.members):
            if state.eval_model is None:
                state.eval_model = stacked.member_model(index)
            else:
                state.eval_model.load_state_dict(stacked.member_state_dict(index))
            yield state, state.eval_model

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        logs, losses, total = {}, [], 0
        start = time.time()
        for state, model in self.member_models():
            member_start = time.time()
            metrics = evaluation_metrics(model, state.validation_inputs, state.validation_labels,
                                         self.args.eval_batch_size, metric_key_prefix)
            n = len(state.validation_inputs)
            metrics.update(speed_metrics(metric_key_prefix, member_start, num_samples=n,
                                         num_steps=-(-n // self.args.eval_batch_size)))
            metrics.update(state.bp_callback.compute(model, prefix=f"{metric_key_prefix}_"))
            losses.append(metrics[f"{metric_key_prefix}_loss"])
            total += n
            logs.update({f"{key}/{state.name}": value for key, value in metrics.items()})
        logs[f"{metric_key_prefix}_loss"] = float(np.mean(losses))
        logs.update(speed_metrics(metric_key_prefix, start, num_samples=total))
        self.log(logs)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, logs)
        if self.is_world_process_zero():
            for state in self.members:
                write_history(state.history_path, member_log_history(self.state.log_history, state.name))
        return logs

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call)
        output_dir = output_dir or self.args.output_dir
        if not self.is_world_process_zero():
            return
        os.makedirs(output_dir, exist_ok=True)
        write_json_atomic(os.path.join(output_dir, ENSEMBLE_FILE), self.ensemble_manifest)
        if _internal_call:  # a checkpoint: every member's weights next to its run folder
            checkpoint = os.path.basename(os.path.normpath(output_dir))
            stacked = self.accelerator.unwrap_model(self.model)
            for index, state in enumerate(self.members):
                stacked.member_model(index).save_pretrained(
                    os.path.join(state.run.training_args.output_dir, checkpoint))

    def member_train_losses(self) -> list:
        """Each member's mean training loss over every step of the run (resumed ones included; from a checkpoint
        written without :class:`RunLoss`, over the steps since)."""
        steps = max(self.state.global_step - self._member_steps_unaccounted, 1)
        return [float(value) / steps for value in self.member_loss_sum.cpu()]


__all__ = [
    "CUDAGraphStep",
    "DeviceBatches",
    "EnsembleTrainer",
    "MemberState",
    "RunDataCache",
    "TreeLangTrainer",
    "check_epoch_loop_contract",
    "align_optimizer",
    "use_tf32_by_default",
    "data_key",
    "evaluation_metrics",
    "member_log_history",
    "resolve_step_mode",
    "single_run_stream",
    "tensorboard_in_output_dir",
    "trainer_for",
]
