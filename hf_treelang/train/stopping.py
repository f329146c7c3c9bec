"""The validation stopping rule: train until the accuracy on held-out validation data stops improving.

A run with ``--early_stopping_patience p`` checks its accuracy on the validation inputs — the ``num_eval`` held-out
sequences of its own training distribution (k_train), never a test set — every ``--early_stopping_eval_steps``
optimizer steps (default: once per epoch). A check *improves* when its accuracy exceeds the best one so far by more
than ``--early_stopping_threshold`` δ; training stops at the first check that closes ``p`` checks in a row without an
improvement, and the run's weights, final evaluation and model card are those of that step. With
``--early_stopping_min_steps`` m, no check before step m stops the run: a root classifier's accuracy sits near chance
for a while before it learns (the plateau that precedes learning), and a patience shorter than that plateau would
measure the plateau, not what the data allow; the first check at or after step m that closes ``p`` checks without an
improvement stops it. ``num_train_epochs`` (or
``max_steps``) is the longest the run may train: a run that reaches it before the rule fires says so
(:attr:`StoppingRecord.stopped` false).

The rule runs on the device engine (``--train_engine device``, the default). It is transformers'
``EarlyStoppingCallback`` (its patience and threshold) without ``load_best_model_at_end``:
the run keeps the weights it stopped with, so that a resumed run and an uninterrupted one are the same bytes (the
checks are in the Trainer's log history, which a checkpoint restores; nothing else needs saving). Each check is
logged as ``stop_validation_accuracy`` (TensorBoard, ``trainer_state.json``) and the run folder's ``metrics.json``
keeps the rule and its checks under ``early_stopping`` (:meth:`StoppingRecord.to_dict`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from transformers import TrainerCallback

from .trainer import evaluation_metrics

CHECK_KEY = "stop_validation_accuracy"  # a check's validation accuracy in the log history


@dataclass
class StoppingRecord:
    """The rule and its checks: ``checks`` are ``(step, validation accuracy)`` in order.

    Attributes:
        patience, threshold, every: the rule (checks without improvement, δ, optimizer steps between checks).
        num_validation: the validation sequences each check reads.
        checks: every check so far.
        min_steps: the floor: no check before this step stops the run (0: none).
    """

    patience: int
    threshold: float
    every: int
    num_validation: int
    checks: list = field(default_factory=list)
    min_steps: int = 0

    @property
    def best_index(self) -> int | None:
        """The index of the last check that improved on every check before it by more than δ (None: no checks)."""
        best, index = -math.inf, None
        for i, (_, value) in enumerate(self.checks):
            if value > best + self.threshold:
                best, index = value, i
        return index

    @property
    def stopped(self) -> bool:
        """Whether the rule fired: ``patience`` checks in a row after the best one without an improvement, the last
        at or after ``min_steps``."""
        index = self.best_index
        return (index is not None and len(self.checks) - 1 - index >= self.patience
                and self.checks[-1][0] >= self.min_steps)

    def to_dict(self) -> dict:
        index = self.best_index
        best = self.checks[index] if index is not None else (None, None)
        return {"metric": "validation accuracy", "patience": self.patience, "threshold": self.threshold,
                "every_steps": self.every, "min_steps": self.min_steps, "num_validation": self.num_validation,
                "stopped": self.stopped,
                "best_step": best[0], "best_accuracy": best[1],
                "stopped_at_step": self.checks[-1][0] if self.stopped else None,
                "checks": [[int(step), float(value)] for step, value in self.checks]}


class ValidationStoppingCallback(TrainerCallback):
    """The validation stopping rule of one run (see the module docstring).

    Args:
        inputs, labels: the validation inputs ``(n, 2**ℓ)`` and their labels (``(n,)`` root symbols, or ``(n, 2**ℓ)``
            with -100 off the predicted positions), as the run's evaluation reads them.
        patience: checks in a row without an improvement that stop the run (>= 1).
        threshold: δ, the improvement a check must exceed (>= 0).
        every: optimizer steps between checks; None: the steps of one epoch.
        batch_size: the batch of the checks' forward passes.
        min_steps: the floor: no check before this step stops the run (>= 0; 0: none).
    """

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor, *, patience: int, threshold: float,
                 every: int | None, batch_size: int, min_steps: int = 0):
        self.inputs, self.labels, self.batch_size = inputs, labels, batch_size
        self.record = StoppingRecord(patience=int(patience), threshold=float(threshold), every=int(every or 0),
                                     num_validation=int(inputs.shape[0]), min_steps=int(min_steps))
        self.trainer = None

    def attach(self, trainer) -> "ValidationStoppingCallback":
        """Add this callback to ``trainer`` and log the checks through ``trainer.log``; returns self."""
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        if not self.record.every:
            per_epoch = len(train_dataloader) if train_dataloader is not None else 0
            self.record.every = max(per_epoch // max(args.gradient_accumulation_steps, 1), 1)
        # a resumed run: its checks so far are in the restored log history
        self.record.checks = [(int(entry["step"]), float(entry[CHECK_KEY])) for entry in state.log_history
                              if CHECK_KEY in entry]
        if self.record.stopped:  # resumed after the rule fired (interrupted while writing): the device engine's
            control.should_training_stop = True  # epoch loop then stops before its first step
        return control

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.record.every or model is None:
            return control
        accuracy = evaluation_metrics(model, self.inputs, self.labels, self.batch_size)["eval_accuracy"]
        self.record.checks.append((int(state.global_step), float(accuracy)))
        if self.trainer is not None:
            self.trainer.log({CHECK_KEY: float(accuracy)})
        if self.record.stopped:  # the last step: evaluated as every run's last step is
            control.should_training_stop = True
            control.should_evaluate = control.should_log = True
        return control


__all__ = ["CHECK_KEY", "StoppingRecord", "ValidationStoppingCallback"]
