"""Which ``TrainingArguments`` fields each training engine honours, and the refusal of every other one.

:class:`~hf_treelang.train.arguments.TreeLangTrainingArguments` inherits every field of
``transformers.TrainingArguments``, but the package's engines honour only some of them: the device engine
(:class:`~hf_treelang.train.trainer.TreeLangTrainer`) replaces the Trainer's per-epoch loop with its own lean step,
and both engines bring their own data, schedule of evaluations and checkpoints. A field that an engine would silently
ignore would train the same weights under another run's name (and identity); it is refused before any work instead
(:func:`check_honoured`), naming the field and the engine.

The lists are allow-lists: a field that a new transformers release adds is refused until someone reads what it does,
honours it in both engines (or one) and adds it here. ``tests/test_training.py`` walks every field of the installed
``TrainingArguments`` and checks that it is either in a list or refused.

Read from the code, not guessed:

* **Both engines** run ``Trainer.train`` around their epochs: the optimizer and schedule (:data:`HONOURED_OPTIMIZERS`,
  :data:`HONOURED_SCHEDULES`), seeding, mixed precision, TF32, ``torch.compile``, activation checkpointing,
  logging, saving, evaluating and the process layout are the Trainer's own; label smoothing is transformers'
  ``LabelSmoother`` on each task's loss (the stock ``compute_loss``, or :meth:`TreeLangTrainer.forward_loss`).
* **The dataloader engine only** (the stock step and DataLoader): gradient accumulation, the DataLoader's options
  (workers, pinned memory, ``data_seed``), skipping data on resume, counting input tokens and emptying the CUDA cache
  every N steps. The device engine's data are a device tensor shuffled from ``seed`` (nothing to load, nothing to
  skip) and its step does none of the rest.
* **Both, after the Trainer**: ``--push_to_hub`` (with ``hub_model_id``, ``hub_private_repo``, ``hub_revision``,
  ``hub_token``) uploads the finished run folder once (:mod:`hf_treelang.train.hub`); the Trainer's own pushes at each
  save (``hub_strategy``, ``hub_always_push``) are not made.
* **Neither**: DeepSpeed/FSDP, Liger kernels, NEFTune, evaluation-only precision, best-model tracking,
  schedules that step on evaluation metrics (``reduce_lr_on_plateau``, ``greedy``: the package's evaluations are
  log-spaced), optimizers that need a special step or a package not installed (bitsandbytes, GaLore, LOMO,
  schedule-free), and everything else not listed.
"""

from __future__ import annotations

import dataclasses
import functools

from .optimizers import CUSTOM_OPTIMIZERS

# The package's own fields (TreeLangTrainingArguments) and the TrainingArguments fields both engines honour.
HONOURED_BY_BOTH = frozenset({
    # the package's own
    "preset", "num_evaluations", "num_checkpoints", "resume_checkpoint_steps", "cpu_threads", "checkpoint_epochs", "overwrite_output_dir",
    "train_engine", "step_mode", "qk_learning_rate_multiplier",
    # folders
    "output_dir", "resume_from_checkpoint",
    # the optimisation (Trainer.create_optimizer_and_scheduler; the step clips and smooths)
    "per_device_train_batch_size", "num_train_epochs", "max_steps", "learning_rate", "lr_scheduler_type",
    "lr_scheduler_kwargs", "warmup_steps", "optim", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
    "max_grad_norm", "label_smoothing_factor", "seed", "full_determinism", "dataloader_drop_last",
    # precision, compilation, recomputation (Trainer.train and the accelerator)
    "bf16", "fp16", "tf32", "torch_compile", "torch_compile_backend", "torch_compile_mode", "gradient_checkpointing",
    "gradient_checkpointing_kwargs", "activation_checkpointing", "activation_checkpointing_kwargs",
    # evaluation (Trainer.evaluate, called from the Trainer's _maybe_log_save_evaluate in both engines)
    "eval_strategy", "eval_steps", "eval_on_start", "per_device_eval_batch_size", "remove_unused_columns",
    # logging and saving (the Trainer's callbacks and _save_checkpoint)
    "logging_strategy", "logging_steps", "logging_first_step", "log_level", "log_level_replica", "log_on_each_node",
    "disable_tqdm", "report_to", "run_name", "skip_memory_metrics", "save_strategy", "save_steps", "save_total_limit",
    "save_only_model", "save_on_each_node",
    # NaN/inf losses: the stock step filters them (default True); the device engine never does, which is what False
    # asks for, so False is honoured by both and True (the default) is the documented difference
    "logging_nan_inf_filter",
    # the Hub: the finished folder uploaded once when the run completes (hf_treelang.train.hub), not by the Trainer
    "push_to_hub", "hub_model_id", "hub_private_repo", "hub_revision", "hub_token",
    # processes (accelerate's state and DDP wrapper, set up by the Trainer)
    "use_cpu", "local_rank", "ddp_backend", "ddp_timeout", "ddp_find_unused_parameters", "ddp_bucket_cap_mb",
    "ddp_broadcast_buffers", "ddp_static_graph",
})

# Honoured by the stock Trainer's step and DataLoader only.
HONOURED_BY_DATALOADER_ONLY = frozenset({
    "gradient_accumulation_steps", "data_seed", "dataloader_num_workers", "dataloader_pin_memory",
    "dataloader_persistent_workers", "dataloader_prefetch_factor", "dataloader_multiprocessing_context",
    "ignore_data_skip", "include_num_input_tokens_seen", "torch_empty_cache_steps",
})

# Honoured by the device engine only: the validation stopping rule (hf_treelang.train.stopping), whose resumed run
# stops before its first step when the rule fired at its checkpoint, which the stock epoch loop cannot do.
HONOURED_BY_DEVICE_ONLY = frozenset({"early_stopping_patience", "early_stopping_threshold", "early_stopping_eval_steps",
                                     "early_stopping_min_steps"})

HONOURED_FIELDS = {
    "device": HONOURED_BY_BOTH | HONOURED_BY_DEVICE_ONLY,
    "dataloader": HONOURED_BY_BOTH | HONOURED_BY_DATALOADER_ONLY,
}

# Values of honoured fields that an engine still cannot honour. The optimizers are torch's, built by the Trainer and
# stepped with a plain ``optimizer.step()`` (no closure, no special backward, no train/eval switch, nothing to install);
# the schedules step once per optimizer step (not on evaluation metrics).
HONOURED_OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "adagrad", "rmsprop",
                       *CUSTOM_OPTIMIZERS)  # the package's own (hf_treelang.train.optimizers), in both engines
HONOURED_SCHEDULES = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                      "inverse_sqrt", "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay")
HONOURED_VALUES = {"optim": HONOURED_OPTIMIZERS, "lr_scheduler_type": HONOURED_SCHEDULES}


# What each of transformers' loggers (``--report_to``, ``transformers.integrations.INTEGRATION_TO_CALLBACK``) needs on
# this machine: transformers' own test of it (``transformers.integrations.is_<name>_available``) and what it lacks when
# that test fails. A logger of a later transformers release, missing here, is tested by its ``is_<name>_available``.
REPORTING_NEEDS = {
    "azure_ml": ("is_azureml_available", "the azureml-sdk package (pip install azureml-sdk)"),
    "clearml": ("is_clearml_available", "the clearml package (pip install clearml)"),
    "codecarbon": ("is_codecarbon_available", "the codecarbon package (pip install codecarbon)"),
    "comet_ml": ("is_comet_available", "a recent comet-ml package (pip install -U comet-ml) and COMET_API_KEY set"),
    "dagshub": ("is_dagshub_available", "the dagshub and mlflow packages (pip install dagshub mlflow)"),
    "dvclive": ("is_dvclive_available", "the dvclive package (pip install dvclive)"),
    "flyte": ("is_flytekit_available", "the flytekit package (pip install flytekit)"),
    "kubeflow": ("is_kubeflow_available", "a Kubeflow TrainJob, which sets KUBEFLOW_TRAINER_SERVER_URL"),
    "mlflow": ("is_mlflow_available", "the mlflow package (pip install mlflow) and DISABLE_MLFLOW_INTEGRATION unset"),
    "neptune": ("is_neptune_available", "the neptune package (pip install neptune)"),
    "swanlab": ("is_swanlab_available", "the swanlab package (pip install swanlab)"),
    "tensorboard": ("is_tensorboard_available", "the tensorboard package (pip install tensorboard)"),
    "trackio": ("is_trackio_available", "the trackio package (pip install trackio)"),
    "wandb": ("is_wandb_available", "the wandb package (pip install wandb)"),
}


def check_reporting(report_to) -> None:
    """Raise a ValueError naming the first logger of ``report_to`` (``TrainingArguments.report_to``, a list after
    its ``__post_init__``) that transformers does not know or that cannot log from this machine (its package missing,
    :data:`REPORTING_NEEDS`), with what to install; before any work, so that a run never fails on it at its start."""
    from transformers.integrations import integration_utils  # lazy: the loggers' tests, only for a run's checks

    names = [report_to] if isinstance(report_to, str) or report_to is None else list(report_to)
    known = sorted(integration_utils.INTEGRATION_TO_CALLBACK)
    for name in names:
        if name in ("none", "all"):  # "all": every logger transformers finds installed
            continue
        if name not in known:
            raise ValueError(f"`report_to` {name!r} is not one of transformers' loggers: use one of "
                             f"{', '.join(known)}, or none")
        function, needs = REPORTING_NEEDS.get(name, (f"is_{name}_available", f"the {name} package"))
        available = getattr(integration_utils, function, None)
        if available is not None and not available():
            raise ValueError(f"`report_to` {name!r} cannot log from this machine: it needs {needs}; install it, or "
                             "log with --report_to tensorboard (the default) or none")


# Fields that ``TrainingArguments.__post_init__`` derives from an honoured one: the derived value is not the user's
# setting (``do_eval`` turns True with any ``eval_strategy`` but "no", and the Trainer never reads it).
DERIVED_VALUES = {"do_eval": lambda args: _plain(args.eval_strategy) != "no"}


@functools.lru_cache(maxsize=None)
def _defaults(cls) -> dict:
    """Every field of ``cls`` as a default-constructed instance holds it (after ``__post_init__``'s normalising, so
    that a value the user gave compares like for like: ``report_to`` as a list, enums as enums)."""
    reference = cls(output_dir="unused")
    return {f.name: getattr(reference, f.name) for f in dataclasses.fields(cls)}


def _plain(value):
    """An enum member as its value (``OptimizerNames.SGD`` -> ``"sgd"``)."""
    return getattr(value, "value", value)


def unhonoured_fields(args) -> list:
    """``[(field, value)]`` of ``args`` (a ``TreeLangTrainingArguments``) whose value differs from the default and
    that ``args.train_engine`` does not honour, in field order."""
    honoured = HONOURED_FIELDS.get(args.train_engine, frozenset())
    defaults = _defaults(type(args))
    found = []
    for f in dataclasses.fields(args):
        value = getattr(args, f.name)
        derived = f.name in DERIVED_VALUES and value == DERIVED_VALUES[f.name](args)
        if f.name not in honoured and value != defaults[f.name] and not derived:
            found.append((f.name, value))
    return found


def check_honoured(args) -> None:
    """Raise a ValueError naming the first field set to a non-default value that ``args.train_engine`` does not
    honour (:data:`HONOURED_FIELDS`), or an honoured field's value it cannot honour (:data:`HONOURED_VALUES`)."""
    engine = args.train_engine
    for name, allowed in HONOURED_VALUES.items():
        value = str(_plain(getattr(args, name)))
        if value not in allowed:
            raise ValueError(f"`{name}` {value!r} is not honoured by --train_engine {engine}: use one of "
                             f"{', '.join(allowed)}")
    for name, value in unhonoured_fields(args):
        others = [other for other, fields in HONOURED_FIELDS.items() if other != engine and name in fields]
        hint = f"; --train_engine {others[0]} honours it" if others else ""
        raise ValueError(f"`{name}` is not honoured by --train_engine {engine} (got {_plain(value)!r}, default "
                         f"{_plain(_defaults(type(args))[name])!r}): leave it at its default{hint}")


__all__ = ["HONOURED_FIELDS", "HONOURED_OPTIMIZERS", "HONOURED_SCHEDULES", "REPORTING_NEEDS", "check_honoured",
           "check_reporting", "unhonoured_fields"]
