"""A training run as one object: :class:`Run`, resolved from the training scripts' argument names and checked once.

Every entry point builds runs the same way — the scripts from their command line (:func:`runs_from_command_line`),
``hf-treelang sweep``, ``reproduce`` and ``sample-complexity`` from a dict of the same argument names
(:func:`resolve`) — and hands them to :func:`hf_treelang.train.loop.train` or, several at once,
:func:`~hf_treelang.train.loop.train_together`. A run is resolved in one pass: the arguments are parsed
(``HfArgumentParser.parse_dict``), the preset fills what they leave unset, and :func:`check_run` validates every
value and every checkpoint the run starts or resumes from, before any data are built or anything is written.

A run's **identity** (:func:`run_identity`) is the sha256 of what decides its result: the data and model arguments, the
training arguments of :data:`IDENTITY_TRAINING_FIELDS` (an allow-list, so that a field a new transformers release adds
changes no identity), numbers normalised (``sigma 1`` and ``1.0`` are one run), the content of the checkpoint a
fine-tuning run starts from and of a ``--grammar_file``, and the data-format version. A runner reuses a finished folder
only for an equal identity (:mod:`hf_treelang.train.folders`).

An **ensemble** is a list of runs: the scripts' ``--ensemble_seeds`` / ``--ensemble_k_train`` expand the command
line's run into one run per (seed, k_train) (:func:`ensemble_runs`); :func:`check_together` says whether a list of
runs can train as one batched model.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import json
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from hf_treelang.core.masking import TrainingMasking
from hf_treelang.core.resources import (
    MEMORY_FRACTION,
    check_memory,
    format_bytes,
    memory_budget,
    model_sizes,
    parameter_count,
    training_bytes,
)
from hf_treelang.dataset_builder.treelang import TreeLangBuilderConfig
from hf_treelang.models.architectures import build_model as build_architecture
from hf_treelang.models.architectures import check_runs, parameter_count_on_meta
from hf_treelang.models.configuration_treelang import TreeLangConfig

from .arguments import (
    CURRICULUM_FIELDS,
    HIERARCHY_FIELDS,
    MASK_OPTION_FIELDS,
    NONE_VALUE,
    OTHER_ARCHITECTURE_FIELDS,
    RENAMED_ARGUMENTS,
    TASKS,
    DataArguments,
    EnsembleArguments,
    ModelArguments,
    TreeLangTrainingArguments,
    nullable_fields,
    grammar_content_hash,
    parse_command_line,
    parse_values,
)
from .folders import (
    CHECKPOINT_PREFIX,
    ENSEMBLE_FILE,
    DamagedFile,
    TASK_ARCHITECTURES,
    check_output_dir_free,
    check_checkpoint_fits,
    check_resume_checkpoint,
    check_run_complete,
    read_model_config,
)
from .honoured import check_reporting
from .hub import check_hub_upload, upload_command
from .optimizers import CUSTOM_OPTIMIZERS

IDENTITY_VERSION = 2  # of the recipe below: bump it when the recipe changes, and every identity changes with it
# The training arguments that change a run's result (its weights, evaluations or checkpoints). Everything else —
# where it writes, what it logs, its threads, how it is resumed — is left out of its identity.
IDENTITY_TRAINING_FIELDS = (
    "seed", "data_seed", "full_determinism", "num_train_epochs", "max_steps", "per_device_train_batch_size",
    "per_device_eval_batch_size", "gradient_accumulation_steps", "dataloader_drop_last", "optim", "optim_args",
    "learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps", "warmup_ratio", "weight_decay",
    "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "label_smoothing_factor", "fp16", "bf16", "tf32",
    "torch_compile", "gradient_checkpointing", "train_engine", "step_mode", "num_evaluations", "num_checkpoints",
    "checkpoint_epochs", "eval_strategy", "eval_steps", "save_strategy", "save_steps", "save_total_limit",
    "save_only_model", "neftune_noise_alpha", "load_best_model_at_end", "metric_for_best_model", "greater_is_better",
    "ignore_data_skip", "average_tokens_across_devices", "qk_learning_rate_multiplier", "early_stopping_patience",
    "early_stopping_threshold", "early_stopping_eval_steps", "early_stopping_min_steps",
)
NEW_TRAINING_FIELDS = {"qk_learning_rate_multiplier": 1.0, "early_stopping_patience": None,
                       "early_stopping_threshold": 0.0, "early_stopping_eval_steps": None,
                       "early_stopping_min_steps": 0}  # at these values a run's identity is what it always was
# Training fields that cannot change a run's weights or metrics (logging, reporting, the Hub, data-loading workers,
# the process layout, what the runner or the scripts set): given in a run description, they are not in its identity.
# A field in neither this list nor IDENTITY_TRAINING_FIELDS (mixed precision of evaluation only, a compiler backend,
# FSDP, a new transformers field, ...) may change the result without changing the identity, so a run description
# that gives one is refused (a script run, which reuses nothing, takes any field).
UNKEYED_TRAINING_FIELDS = (
    "output_dir", "overwrite_output_dir", "resume_from_checkpoint", "preset", "cpu_threads", "activation_checkpointing",
    "resume_checkpoint_steps", "activation_checkpointing_kwargs", "gradient_checkpointing_kwargs", "use_cache", "torch_empty_cache_steps",
    "logging_strategy", "logging_steps", "logging_first_step", "log_on_each_node", "logging_nan_inf_filter",
    "include_num_input_tokens_seen", "log_level", "log_level_replica", "disable_tqdm", "report_to", "run_name",
    "project", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id", "eval_use_gather_object",
    "eval_accumulation_steps", "save_on_each_node", "enable_jit_checkpoint", "push_to_hub", "hub_token",
    "hub_private_repo", "hub_model_id", "hub_strategy", "hub_always_push", "hub_revision",
    "restore_callback_states_from_checkpoint", "dataloader_num_workers", "dataloader_pin_memory",
    "dataloader_persistent_workers", "dataloader_prefetch_factor", "dataloader_multiprocessing_context",
    "length_column_name", "ddp_find_unused_parameters", "ddp_bucket_cap_mb", "ddp_broadcast_buffers",
    "ddp_static_graph", "ddp_backend", "ddp_timeout", "debug", "skip_memory_metrics", "do_train", "do_eval",
    "do_predict", "local_rank",
)
# What the runner sets itself: a run description that gives them is refused.
RESERVED_ARGUMENTS = ("output_dir", "resume_from_checkpoint", "overwrite_output_dir")
WEIGHT_FILE_PREFIXES = ("model", "pytorch_model")  # model.safetensors, model-00001-of-00002.safetensors, ...
MEMBERS_DIR = "members"  # a scripts' ensemble writes member (S, K) to OUTPUT_DIR/members/seed{S}-k{K}
MODEL_TASKS = ("root", "mlm")  # the tasks an ensemble trains (from scratch; the stacked model has no causal head)
# arguments in which the runs of one ensemble may differ (everything else is shared: one batched model)
MEMBER_FIELDS = {"data_args": ("k_train", "grammar_seed", "sigma"), "model_args": (),
                 "training_args": ("seed", "output_dir", "logging_dir", "run_name", "resume_from_checkpoint",
                                   "overwrite_output_dir", "cpu_threads")}


@dataclass(frozen=True)
class Run:
    """One training run, resolved and checked (:func:`resolve`).

    Attributes:
        task: ``"root"`` (root classification), ``"mlm"`` (one masked leaf per sequence), ``"finetune"`` (root
            classification from an MLM checkpoint) or ``"clm"`` (next-leaf prediction, every leaf from the leaves
            before it; a single run: the stacked ensemble model has no causal head).
        data_args, model_args, training_args: the scripts' three argument dataclasses, the preset applied.
        arguments: the arguments given (the scripts' names, JSON-ready); the preset decided the rest.
        config: what the identity hashes (:func:`identity_config`); ``identity`` its sha256.
        name: the run's name in a sweep or an ensemble (its folder's), else ``""``.
        tags: what a sweep records beside it (grid point, paper figures); not part of the identity.
    """

    task: str
    data_args: DataArguments
    model_args: ModelArguments
    training_args: TreeLangTrainingArguments
    arguments: dict
    config: dict
    identity: str
    name: str = ""
    tags: dict = field(default_factory=dict)
    model_task: str = field(init=False)  # the head: "mlm", "clm", or "root" (root classification and fine-tuning)

    def __post_init__(self):
        object.__setattr__(self, "model_task", model_task_of(self.task))

    @property
    def output_dir(self) -> Path:
        return Path(self.training_args.output_dir)

    @property
    def member_key(self) -> tuple:
        """(seed, k_train, grammar_seed, σ): what tells the runs of one ensemble apart."""
        sigma = self.data_args.sigma
        return (self.training_args.seed, self.data_args.k_train, self.data_args.grammar_seed,
                None if sigma is None else float(sigma))  # None: a grammar file's

    def command(self) -> str:
        """The command that trains this run alone (:func:`command_line`)."""
        return command_line(self.task, self.arguments, self.output_dir)

    def replace_training(self, **values) -> "Run":
        """This run with training arguments changed that are not part of its identity (folder, resuming, threads)."""
        unknown = set(values) - set(MEMBER_FIELDS["training_args"])
        if unknown:
            raise ValueError(f"only {MEMBER_FIELDS['training_args']} can change without changing the run's identity, "
                             f"got {sorted(unknown)}")
        training_args = copy.copy(self.training_args)
        for key, value in values.items():
            setattr(training_args, key, value)
        return dataclasses.replace(self, training_args=training_args)

    def payload(self) -> dict:
        """The run as plain data for another process (:func:`from_payload` resolves it again there)."""
        return {"task": self.task, "arguments": self.arguments, "output_dir": str(self.output_dir),
                "identity": self.identity, "name": self.name, "tags": self.tags,
                "cpu_threads": self.training_args.cpu_threads}


def from_payload(payload: dict) -> Run:
    """The run of :meth:`Run.payload`, resolved in this process; a ValueError if its identity changed meanwhile (its
    starting checkpoint was rewritten, or the package changed)."""
    run = resolve(payload["task"], payload["arguments"], payload["output_dir"], name=payload.get("name", ""),
                  tags=payload.get("tags") or {})
    if payload.get("cpu_threads"):
        run = run.replace_training(cpu_threads=payload["cpu_threads"])
    if run.identity != payload["identity"]:
        raise ValueError(f"run {run.name or str(run.output_dir)!r} changed between planning and training (identity "
                         f"{payload['identity'][:12]} -> {run.identity[:12]}): was its starting checkpoint rewritten "
                         "meanwhile? Run the sweep again.")
    return run


# ---------------------------------------------------------------- resolving


def resolve(task: str, arguments: dict | None = None, output_dir=None, *, name: str = "", tags: dict | None = None
            ) -> Run:
    """The run of ``task`` with ``arguments`` (the training scripts' names, e.g. ``{"k_train": 2, "num_train":
    4096}``) writing into ``output_dir``; the preset (``"preset"``, default ``"laptop"``) fills the rest.

    Every check runs here (:func:`check_run`); nothing is built or written. Errors name the argument.
    """
    check_task(task)
    arguments = dict(arguments or {})
    check_arguments(arguments)
    values = {**arguments, "output_dir": str(output_dir)} if output_dir is not None else arguments
    data_args, model_args, training_args, _, _ = parse_values(task, values)
    return build(task, data_args, model_args, training_args, arguments, name=name, tags=tags)


def build(task: str, data_args, model_args, training_args, arguments: dict, *, name: str = "",
          tags: dict | None = None) -> Run:
    """A :class:`Run` of parsed arguments (the preset applied): checked by :func:`check_run`, its identity computed."""
    check_run(task, data_args, model_args, training_args)
    config = identity_config(task, data_args, model_args, training_args)
    arguments = json.loads(json.dumps(arguments, sort_keys=True, default=str))
    return Run(task, data_args, model_args, training_args, arguments, config, run_identity(config), name,
               dict(tags or {}))


def command_line(task: str, arguments: dict, output_dir) -> str:
    """The command that trains a run of ``task`` alone: its training script with every argument it was given (the
    preset fills the rest, as it did for the run) and its folder ``output_dir``."""
    import shlex

    parts = ["python", f"training/run_{task}.py"]
    for key, value in sorted(arguments.items()):
        if key in RESERVED_ARGUMENTS:
            continue
        if value is None:  # given no value: `--flag none`, read back as None, so that the preset does not fill it
            if key in nullable_fields():  # (a text field's None is its default)
                parts += [f"--{key}", NONE_VALUE]
            continue
        values = value if isinstance(value, list) else [value]
        if not values:  # an empty list: "none" where the flag spells it so (report_to), else the flag's default
            if key != "report_to":
                continue
            values = ["none"]
        parts += [f"--{key}", *[str(item).lower() if isinstance(item, bool) else str(item) for item in values]]
    parts += ["--output_dir", str(output_dir)]
    return shlex.join(parts)


def runs_from_command_line(task: str, argv: list | None = None) -> tuple:
    """The scripts' command line (flags or one JSON file) as runs: ``([run], ensemble)`` for a single run, one run per
    member for ``--ensemble_seeds`` / ``--ensemble_k_train`` (:func:`ensemble_runs`); every check runs here, the
    output folders' included (:func:`check_output`)."""
    check_task(task)
    data_args, model_args, training_args, ensemble, explicit = parse_command_line(task, argv)
    if ensemble.requested:  # the ensemble's folder and checkpoint are its own, not its member runs'
        ensemble.output_dir = training_args.output_dir
        ensemble.resume_from_checkpoint, training_args.resume_from_checkpoint = training_args.resume_from_checkpoint, None
        if ensemble.resume_from_checkpoint is not None and training_args.overwrite_output_dir:
            raise ValueError("`overwrite_output_dir` and `resume_from_checkpoint` exclude each other: resuming "
                             "continues the ensemble in output_dir, overwriting removes it; got both "
                             f"({ensemble.resume_from_checkpoint!r})")
    given = {f.name: getattr(obj, f.name) for obj in (data_args, model_args, training_args)
             for f in dataclasses.fields(obj) if f.name in explicit and f.name not in RESERVED_ARGUMENTS}
    run = build(task, data_args, model_args, training_args, given)
    if not ensemble.requested:
        check_output(run)
        return [run], ensemble
    ensemble.validate(data_args.depth)
    runs = ensemble_runs(run, ensemble)
    check_together(runs, mode=ensemble.ensemble_mode, resume_from_checkpoint=ensemble.resume_from_checkpoint)
    check_output_dir_free(ensemble.output_dir, overwrite=training_args.overwrite_output_dir,
                          resume=ensemble.resume_from_checkpoint)
    return runs, ensemble


def model_task_of(task: str) -> str:
    """The head a task trains: ``"mlm"``, ``"clm"``, or ``"root"`` (root classification and fine-tuning)."""
    return task if task in ("mlm", "clm") else "root"


def check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {TASKS}, got {task!r}")


def known_arguments() -> dict:
    """``{name: type hint}`` of every run argument (the fields of the three dataclasses, and the renamed ones)."""
    hints = {}
    for cls in (DataArguments, ModelArguments, TreeLangTrainingArguments):
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        hints.update({name: hint for name, hint in typing.get_type_hints(cls).items() if name in names})
    for old, new in RENAMED_ARGUMENTS.items():
        hints[old] = hints[new]
    return hints


def _training_fields() -> set:
    return {f.name for f in dataclasses.fields(TreeLangTrainingArguments) if f.init}


def _allows(hint, value) -> bool:
    """Whether ``value`` (from JSON) fits the type ``hint``; types other than bool/int/float/str/list pass."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_allows(option, value) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint) or (typing.Any,)
        return isinstance(value, list) and all(_allows(item, v) for v in value)
    return True  # enums, dicts, Any: left to the parser


def result_arguments() -> set:
    """The argument names that can change a run's result: every data and model field, the training fields of
    :data:`IDENTITY_TRAINING_FIELDS`, ``preset`` (it sets such fields) and the renamed ones."""
    names = {f.name for cls in (DataArguments, ModelArguments) for f in dataclasses.fields(cls) if f.init}
    return names | set(IDENTITY_TRAINING_FIELDS) | {"preset"} | set(RENAMED_ARGUMENTS)


def check_arguments(arguments: dict, where: str = "run arguments") -> None:
    """Raise a ValueError/TypeError naming the first unknown, reserved or mistyped argument of ``arguments``."""
    if not isinstance(arguments, dict):
        raise TypeError(f"{where} must be a JSON object of run arguments, got {type(arguments).__name__}")
    hints = known_arguments()
    for name, value in arguments.items():
        if name in RESERVED_ARGUMENTS:
            raise ValueError(f"{where}: `{name}` is set by the runner (one folder per run); remove it")
        if name not in hints:
            close = difflib.get_close_matches(name, hints, n=1)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            raise ValueError(f"{where}: `{name}` is not a run argument (the fields of DataArguments, ModelArguments "
                             f"and TreeLangTrainingArguments){hint}")
        if name in _training_fields() and name not in IDENTITY_TRAINING_FIELDS + UNKEYED_TRAINING_FIELDS:
            raise ValueError(f"{where}: `{name}` may change a run's result but is not part of its identity, so a "
                             "sweep or reproduction could reuse a run trained with another value; set it in a "
                             "training script's run instead")
        if name == "push_to_hub" and value:
            raise ValueError(f"{where}: `push_to_hub` uploads the folder of a run trained alone by a training "
                             "script; a runner of many runs uploads none: upload a finished run with "
                             f"{upload_command('RUN_FOLDER', 'USER/NAME')}")
        if not _allows(hints[name], value):
            hint = hints[name]
            shown = hint.__name__ if isinstance(hint, type) else str(hint)
            raise TypeError(f"{where}: `{name}` must be of type {shown}, got {value!r} ({type(value).__name__})")


# ---------------------------------------------------------------- checking


def check_run(task: str, data_args, model_args, training_args) -> None:
    """Every check of a run's arguments, each error naming the argument; writes nothing, builds no data.

    The values and their ranges (the dataclasses' ``validate``), the architecture (``TreeLangConfig``'s own checks),
    the task's rules, and the checkpoints it starts from (fine-tuning) or resumes from.
    """
    check_task(task)
    data_args.validate()
    training_args.validate()
    check_reporting(training_args.report_to)  # a logger that cannot start here, before the run folder exists
    check_hub_upload(training_args)  # --push_to_hub: what the upload at the end needs, before any work
    from .device_data import optimizer_steps  # lazy: loads torch; `import hf_treelang.train.run` needs none
    training_args.check_schedule(optimizer_steps(training_args, data_args.num_train))
    check_sigma_curriculum(data_args, training_args)
    model_task = model_task_of(task)
    if not model_args.is_treelang:
        check_other_architecture(task, data_args, model_args, training_args)
        return
    config = model_args.config(data_args)
    resume = training_args.resume_from_checkpoint
    if resume is not None:
        if training_args.overwrite_output_dir:
            raise ValueError("`overwrite_output_dir` and `resume_from_checkpoint` exclude each other: resuming "
                             f"continues the run in output_dir, overwriting removes it; got both ({resume!r})")
        if os.path.isfile(os.path.join(resume, ENSEMBLE_FILE)):
            raise ValueError(f"`resume_from_checkpoint` {str(resume)!r} is a checkpoint of an ensemble "
                             f"({ENSEMBLE_FILE}); resume it with the ensemble's own --ensemble_seeds / "
                             "--ensemble_k_train, or resume a single run from its own checkpoint-<step>")
        _, saved = check_resume_checkpoint(resume)
        _check_saved_model("resume_from_checkpoint", resume, saved, data_args)
        expected = TASK_ARCHITECTURES[model_task]
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
    if task == "finetune":
        path = model_args.model_name_or_path
        try:
            _, saved = read_model_config("model_name_or_path", path)
            check_run_complete(path, "model_name_or_path")
        except DamagedFile:
            raise  # it says what to do
        except ValueError as error:
            raise ValueError(f"{error}; run training/run_mlm.py first or pass --model_name_or_path <MLM output "
                             "folder>") from None
        _check_saved_model("model_name_or_path", path, saved, data_args)
    elif model_args.model_name_or_path is not None:
        trained = " (a causal run trains its model from scratch)" if task == "clm" else ""
        raise ValueError(f"model_name_or_path is only used by run_finetune.py{trained}, got "
                         f"{model_args.model_name_or_path!r}")
    check_mask_options(task, data_args, training_args)
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
    check_run_memory(data_args, TreeLangConfig.from_dict(dict(saved)) if task == "finetune" else config, training_args)


# the run's sizes that its memory estimate grows with, by flag, and where each is read from
MEMORY_FLAGS = {
    "--num_train": ("data", "num_train"),
    "--num_eval": ("data", "num_eval"),
    "--num_test": ("data", "num_test"),
    "--per_device_train_batch_size": ("training", "per_device_train_batch_size"),
    "--per_device_eval_batch_size": ("training", "per_device_eval_batch_size"),
}


def run_memory(config, sizes: dict, num_test_sets: int) -> int:
    """The estimated peak bytes of a run (:func:`hf_treelang.core.resources.training_bytes`) with the sizes of
    :data:`MEMORY_FLAGS` (``{flag: value}``) and ``num_test_sets`` k_test sets: every split's sequences, the BP targets
    of the validation set and of each test set's reference sequences, one training and one evaluation batch."""
    from .callbacks import REFERENCE_SIZE, reference_count  # lazy: callbacks imports torch and the BP oracle

    num_test = sizes["--num_test"]
    references = num_test_sets * reference_count(num_test, int(config.depth), REFERENCE_SIZE,
                                                 int(getattr(config, "arity", 2)))
    return training_bytes(num_sequences=sizes["--num_train"] + sizes["--num_eval"] + num_test_sets * num_test,
                          bp_sequences=sizes["--num_eval"] + references,
                          train_batch_size=sizes["--per_device_train_batch_size"],
                          eval_batch_size=sizes["--per_device_eval_batch_size"], config=config)


def check_run_memory(data_args, config, training_args) -> None:
    """Refuse, before any data are built, a run whose estimated peak memory (:func:`run_memory`, an upper bound)
    exceeds the machine's (:func:`hf_treelang.core.resources.check_memory`: the error names the size whose share of
    the estimate is the largest and what fits)."""
    budget = memory_budget()
    weights = 16 * parameter_count(config)  # weights, gradients and Adam's two moments, float32
    if budget is not None and weights > budget:  # the model alone: no data size can make it fit
        raise ValueError(f"the model's {parameter_count(config):,} parameters need about {format_bytes(weights)} "
                         f"(weights, gradients and Adam's two moments), more than {format_bytes(budget)} ({MEMORY_FRACTION:.0%} of "
                         f"the memory available): lower its sizes (--config_overrides, or the TreeLang flags)")
    where = {"data": data_args, "training": training_args}
    sizes = {flag: int(getattr(where[kind], name)) for flag, (kind, name) in MEMORY_FLAGS.items()}
    levels = len(data_args.test_levels())
    check_memory(sizes, lambda values: run_memory(config, values, levels),
                 what=f"the data, BP targets and a training step at depth {config.depth}",
                 otherwise=f"lower --depth ({config.depth}) or the model's size")


def check_mask_options(task: str, data_args, training_args) -> None:
    """The training-mask options are MLM's (``mask_rate`` is refused by the causal task, which masks nothing; the
    newer options by every other task); a falling rate keys each batch by its step, which data-loading workers,
    each counting its own batches, cannot know."""
    given = data_args.mask_options_given()
    if task == "clm" and data_args.mask_rate is not None:
        raise ValueError(f"`mask_rate` is only used by MLM (a causal run predicts every leaf from the leaves before "
                         f"it, nothing is masked), got {data_args.mask_rate!r}")
    others = [name for name in given if name != "mask_rate"]
    if task != "mlm" and others:
        raise ValueError(f"`{others[0]}` is only used by MLM, got {getattr(data_args, others[0])!r} for a {task} run")
    workers = training_args.train_engine == "dataloader" and training_args.dataloader_num_workers
    if task == "mlm" and workers and TrainingMasking(data_args.mask_rate, data_args.mask_rate_final).scheduled:
        raise ValueError(f"`mask_rate_final` = {data_args.mask_rate_final} (a rate falling from --mask_rate "
                         f"{data_args.mask_rate}; the laptop preset's unless given) needs dataloader_num_workers = 0 "
                         f"with --train_engine dataloader (the collator keys each batch's rate by the step it counts), "
                         f"got {training_args.dataloader_num_workers}; --mask_rate alone gives a constant rate")


def check_sigma_curriculum(data_args, training_args) -> None:
    """The σ curriculum (:class:`hf_treelang.train.data.SigmaCurriculum`) is served by the device engine's stream
    (the dataloader engine's ``datasets.Dataset`` holds one training set), and it leaves at least one epoch at the
    run's σ: ``sigma_curriculum_epochs`` in [1, epochs - 1], the epochs the run's optimiser steps span."""
    if data_args.sigma_curriculum_start is None:
        return
    if training_args.train_engine != "device":
        raise ValueError(f"`sigma_curriculum_start` needs --train_engine device (the dataloader engine trains on "
                         f"one training set), got --train_engine {training_args.train_engine}")
    # lazy: loads torch; `import hf_treelang.train.run` needs none
    from .device_data import optimizer_steps, steps_per_epoch

    global_batch = training_args.per_device_train_batch_size * max(training_args.world_size, 1)
    per_epoch = max(steps_per_epoch(data_args.num_train, global_batch, training_args.dataloader_drop_last), 1)
    epochs = -(-optimizer_steps(training_args, data_args.num_train) // per_epoch)  # the last one may be partial
    if epochs < 2:
        raise ValueError(f"`sigma_curriculum_epochs` needs a run of at least 2 epochs (the last at --sigma), this "
                         f"run trains {epochs}; got {data_args.sigma_curriculum_epochs}")
    if not 1 <= data_args.sigma_curriculum_epochs <= epochs - 1:
        raise ValueError(f"`sigma_curriculum_epochs` must be an integer in [1, {epochs - 1}] (fewer than the run's "
                         f"{epochs} epochs), got {data_args.sigma_curriculum_epochs}")


def check_other_architecture(task: str, data_args, model_args, training_args) -> None:
    """The checks of a run of another architecture (``--model_type``): its config fitted to the data and one
    forward pass at 2**ℓ leaves (:mod:`hf_treelang.models.architectures`), and the TreeLang-only features refused."""
    if task == "finetune":
        raise ValueError(f"run_finetune.py fine-tunes a TreeLang MLM checkpoint (--model_name_or_path); "
                         f"--model_type {model_args.model_type!r} trains from scratch with run_root.py")
    if model_args.model_name_or_path is not None:
        raise ValueError(f"model_name_or_path is only used by run_finetune.py, got {model_args.model_name_or_path!r}")
    check_mask_options(task, data_args, training_args)
    if data_args.sequence_arity != 2:
        raise ValueError(f"--model_type {model_args.model_type!r} is fitted to sequences of 2**depth leaves; this "
                         f"Random Hierarchy Model has arity {data_args.arity} ({data_args.num_leaves} leaves): train "
                         f"the TreeLang encoder (--model_type treelang) on it")
    if training_args.optim_name == "muon" or training_args.qk_learning_rate_multiplier != 1:
        raise ValueError(f"--optim muon and --qk_learning_rate_multiplier find the hidden matrices and the fused "
                         f"query/key/value weights of the TreeLang encoder by name; a {model_args.model_type!r} "
                         f"model has other names: use another --optim")
    if task == "mlm" and training_args.remove_unused_columns:
        raise ValueError("`remove_unused_columns` must be False for MLM (the collator keys each example's masks "
                         "by its example_index column), got True")
    model_task = model_task_of(task)
    patched = model_args.patched_config(data_args, model_task)
    counted = parameter_count_on_meta(patched, model_task)  # every field that sizes a weight, none allocated
    check_run_memory(data_args, model_sizes(patched.config, data_args.depth, data_args.num_symbols,
                                            parameters=counted), training_args)
    model = build_architecture(patched, model_task)
    check_runs(model, data_args.num_symbols, data_args.depth)
    resume = training_args.resume_from_checkpoint
    if resume is not None:
        if training_args.overwrite_output_dir:
            raise ValueError("`overwrite_output_dir` and `resume_from_checkpoint` exclude each other: resuming "
                             f"continues the run in output_dir, overwriting removes it; got both ({resume!r})")
        check_resume_checkpoint(resume, patched.model_type)
        check_checkpoint_fits(model, resume)
    check_checkpoint_epochs(training_args.checkpoint_epochs, training_args.num_train_epochs)


def check_output(run: Run) -> None:
    """The scripts' rule for the output folder: a non-empty one needs ``--overwrite_output_dir`` or
    ``--resume_from_checkpoint`` (:func:`hf_treelang.train.folders.check_output_dir_free`)."""
    args = run.training_args
    check_output_dir_free(args.output_dir, overwrite=args.overwrite_output_dir,
                          resume=args.resume_from_checkpoint)


def check_checkpoint_epochs(epochs, num_train_epochs: float) -> None:
    """Raise a ValueError naming ``checkpoint_epochs`` unless every epoch is an integer in [1, num_train_epochs]."""
    for epoch in epochs or ():
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 1 <= epoch <= num_train_epochs:
            raise ValueError(f"`checkpoint_epochs` must hold integers in [1, num_train_epochs={num_train_epochs:g}], "
                             f"got {epoch!r}")


def _check_saved_model(name: str, path, saved: dict, data_args) -> None:
    """A saved config.json must be a valid TreeLang config of the run's data (q and ℓ)."""
    try:
        config = TreeLangConfig.from_dict(dict(saved))
    except (ValueError, TypeError) as error:
        raise ValueError(f"`{name}` {str(path)!r}: config.json is not a valid TreeLang config: {error}") from None
    q, depth, arity = config.num_symbols, saved["depth"], saved.get("arity", 2)
    if q != data_args.num_symbols or depth != data_args.depth or arity != data_args.sequence_arity:
        raise ValueError(
            f"`{name}` {str(path)!r} was trained with num_symbols q={q}, depth ℓ={depth}, arity s={arity}; the data "
            f"has num_symbols q={data_args.num_symbols}, depth ℓ={data_args.depth}, arity "
            f"s={data_args.sequence_arity}"
        )
    if saved.get("num_classes") != data_args.num_classes:  # the root head's classes (an RHM's n; None: the q symbols)
        raise ValueError(f"`{name}` {str(path)!r} was trained with num_classes={saved.get('num_classes')!r}; the data "
                         f"has num_classes={data_args.num_classes!r}")


# ---------------------------------------------------------------- ensembles: lists of runs


def member_name(seed: int, k_train: int, grammar_seed: int | None = None, sigma: float | None = None) -> str:
    """``seed{S}-k{K}`` (``-grammar{G}``, ``-sigma{σ}`` appended when given)."""
    name = f"seed{seed}-k{k_train}"
    if grammar_seed is not None:
        name += f"-grammar{grammar_seed}"
    if sigma is not None:
        name += f"-sigma{float(sigma):g}"
    return name


def ensemble_runs(run: Run, ensemble: EnsembleArguments) -> list:
    """The runs of the scripts' ensemble flags: every (seed S, k_train K) of ``--ensemble_seeds`` (default
    ``[--seed]``) × ``--ensemble_k_train`` (default ``[--k_train]``), the run ``--seed S --k_train K`` with ``run``'s
    other arguments, written to ``<output_dir>/members/seed{S}-k{K}``."""
    seeds = list(ensemble.ensemble_seeds or [run.training_args.seed])
    levels = list(ensemble.ensemble_k_train or [run.data_args.k_train])
    runs = []
    for seed in seeds:
        for level in levels:
            name = member_name(seed, level)
            data_args = copy.deepcopy(run.data_args)
            data_args.k_train = int(level)
            training_args = copy.copy(run.training_args)
            training_args.seed = int(seed)
            training_args.output_dir = os.path.join(run.training_args.output_dir, MEMBERS_DIR, name)
            training_args.resume_from_checkpoint = None
            arguments = {**run.arguments, "seed": int(seed), "k_train": int(level)}
            runs.append(build(run.task, data_args, copy.deepcopy(run.model_args), training_args, arguments,
                              name=name))
    return runs


def _comparable(run: Run) -> dict:
    """The arguments the runs of one ensemble must share."""
    values = {"data_args": dataclasses.asdict(run.data_args), "model_args": dataclasses.asdict(run.model_args),
              "training_args": run.training_args.to_dict()}
    return {kind: {key: value for key, value in fields.items() if key not in MEMBER_FIELDS[kind]}
            for kind, fields in values.items()}


def trains_apart(runs: list) -> bool:
    """Whether ``runs`` train one model each, never stacked: the validation stopping rule stops each run at its own
    step (a stacked ensemble trains its members in one model, to one step)."""
    return any(run.training_args.early_stopping_patience is not None for run in runs)


def check_together(runs: list, *, mode: str = "auto", resume_from_checkpoint=None) -> None:
    """Raise a ValueError naming the argument and the runs if ``runs`` cannot train together (one process, one
    batched model or one after another); writes nothing and builds no data."""
    from .device_data import optimizer_steps  # lazy: loads torch; the checks above it need none

    if not runs:
        raise ValueError("an ensemble needs at least one run, got none")
    other = [run for run in runs if not run.model_args.is_treelang]
    if other:
        raise ValueError(f"an ensemble stacks TreeLang encoders into one model; run {other[0].name or 0!r} is a "
                         f"{other[0].model_args.model_type!r} model: train it on its own (or in a sweep)")
    task = runs[0].task
    if task not in MODEL_TASKS or any(run.task != task for run in runs):
        raise ValueError(f"an ensemble trains {' or '.join(MODEL_TASKS)} models from scratch (run_root.py, "
                         f"run_mlm.py), all of one task (the stacked model has no causal head: train run_clm.py "
                         f"runs one by one); got tasks {sorted({run.task for run in runs})}")
    pushing = [run for run in runs if run.training_args.push_to_hub]
    if pushing:
        raise ValueError(f"`push_to_hub` uploads the folder of one run; an ensemble writes one folder per member: "
                         f"upload each finished member, e.g. {upload_command(pushing[0].output_dir)}")
    seen = {}
    for run in runs:
        if run.member_key in seen:
            seed, k_train, grammar_seed, sigma = run.member_key
            raise ValueError(f"ensemble member (seed={seed}, k_train={k_train}, grammar_seed={grammar_seed}, "
                             f"sigma={sigma:g}) is repeated ({seen[run.member_key]!r} and {run.name!r})")
        seen[run.member_key] = run.name
    if len({run.output_dir for run in runs}) != len(runs):
        raise ValueError(f"the runs of an ensemble need one output folder each, got {[str(r.output_dir) for r in runs]}")
    first, reference = runs[0], _comparable(runs[0])
    steps = optimizer_steps(first.training_args, first.data_args.num_train)
    for run in runs[1:]:
        values = _comparable(run)
        for kind, what in (("data_args", "data"), ("model_args", "architecture"), ("training_args", "training")):
            for name in sorted(set(reference[kind]) | set(values[kind])):
                if reference[kind].get(name) != values[kind].get(name):
                    raise ValueError(
                        f"ensemble members must share the {what} arguments but their model seed, k_train, grammar "
                        f"seed and σ: `{name}` is {reference[kind].get(name)!r} for member {first.name!r} and "
                        f"{values[kind].get(name)!r} for member {run.name!r}")
        if optimizer_steps(run.training_args, run.data_args.num_train) != steps:
            raise ValueError(f"ensemble members must train for the same number of steps: {steps} for "
                             f"{first.name!r}, {optimizer_steps(run.training_args, run.data_args.num_train)} for "
                             f"{run.name!r}")
    args = first.training_args
    if args.train_engine != "device":
        raise ValueError("an ensemble (--ensemble_seeds / --ensemble_k_train) needs --train_engine device, got "
                         f"--train_engine {args.train_engine}")
    if args.world_size > 1:
        raise ValueError(f"an ensemble trains in one process (its members are the parallelism), got "
                         f"{args.world_size} processes")
    if mode != "sequential" and (args.optim_name in CUSTOM_OPTIMIZERS or args.qk_learning_rate_multiplier != 1):
        given = (f"--optim {args.optim_name}" if args.optim_name in CUSTOM_OPTIMIZERS else
                 f"--qk_learning_rate_multiplier {args.qk_learning_rate_multiplier}")
        raise ValueError(f"{given} trains a single model's weights, and a stacked ensemble's are stacked: pass "
                         f"--ensemble_mode sequential")
    if mode == "stacked" and trains_apart(runs):
        raise ValueError("--early_stopping_patience stops each run at its own step, and a stacked ensemble trains "
                         "its members in one model: pass --ensemble_mode sequential (or auto)")
    if resume_from_checkpoint is not None:
        if mode == "sequential":
            raise ValueError("`resume_from_checkpoint` resumes a stacked ensemble (its OUTPUT_DIR/checkpoint-<step>); "
                             "a sequential ensemble's members are single runs: resume each with run_*.py --seed S "
                             "--k_train K --output_dir OUTPUT_DIR/members/seed{S}-k{K} --resume_from_checkpoint ...")
        check_ensemble_checkpoint(resume_from_checkpoint, [run.name for run in runs])


def check_ensemble_checkpoint(path, names: list) -> dict:
    """``path`` must be a checkpoint of this ensemble (``ensemble.json`` naming the same members); returns it."""
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"`resume_from_checkpoint` {str(folder)!r} is not an existing checkpoint folder")
    manifest = folder / ENSEMBLE_FILE
    if not manifest.is_file():
        raise ValueError(f"`resume_from_checkpoint` {str(folder)!r} is a checkpoint of a single run (it has no "
                         f"{ENSEMBLE_FILE}); an ensemble resumes only from its own checkpoint, "
                         f"OUTPUT_DIR/{CHECKPOINT_PREFIX}<step> of a stacked ensemble")
    saved = json.loads(manifest.read_text())
    if saved.get("members") != list(names):
        raise ValueError(f"`resume_from_checkpoint` {str(folder)!r} is a checkpoint of the ensemble "
                         f"{saved.get('members')}; this ensemble is {list(names)}")
    return saved


# ---------------------------------------------------------------- identity


def data_format_version() -> str:
    """The version of the bytes a run's data are drawn as: the dataset builder's version, its one home."""
    return str(TreeLangBuilderConfig.version)


def config_file_hash(path) -> str:
    """``sha256:<hex>`` of a ``--config_name`` file (a config.json or its folder's), what a run's identity keeps of
    it; ``missing:<path>`` when it is not there (the run's checks refuse that before any work)."""
    candidates = [Path(path), Path(path) / "config.json"]
    found = next((candidate for candidate in candidates if candidate.is_file()), None)
    if found is None:
        return f"missing:{path}"
    return "sha256:" + hashlib.sha256(found.read_bytes()).hexdigest()


def checkpoint_hash(path) -> str:
    """sha256 of what a fine-tuning run starts from: the checkpoint's ``config.json`` and weight files."""
    folder = Path(path)
    names = sorted(
        p.name for p in folder.iterdir()
        if p.is_file() and (p.name == "config.json"
                            or (p.name.startswith(WEIGHT_FILE_PREFIXES) and p.suffix in (".safetensors", ".bin", ".json")))
    )
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode() + b"\0")
        with open(folder / name, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _normalised(cls, values: dict) -> dict:
    """``values`` of dataclass ``cls`` with every number of a float field as a float (``1`` and ``1.0`` hash alike)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for key, value in values.items():
        options = typing.get_args(hints.get(key)) or (hints.get(key),)
        if float in options and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        out[key] = value
    return out


def identity_config(task: str, data_args, model_args, training_args) -> dict:
    """Everything that decides a run's result, as canonical JSON-ready data (see :func:`run_identity`).

    The data and model arguments (``num_hidden_layers`` and ``k_test`` given their defaults), the training arguments
    of :data:`IDENTITY_TRAINING_FIELDS`, numbers of float fields as floats; the starting checkpoint of a fine-tuning
    run by its content (:func:`checkpoint_hash`), not its path, and so a ``grammar_file`` (its grammar's
    :func:`~hf_treelang.train.arguments.grammar_content_hash`); the data-format version (:func:`data_format_version`).
    """
    data = _normalised(DataArguments, dataclasses.asdict(data_args))
    data["k_test"] = data_args.test_levels()
    for name in (*MASK_OPTION_FIELDS, *HIERARCHY_FIELDS, *CURRICULUM_FIELDS):  # a run without them: as it always was
        if data[name] is None:
            del data[name]
    if data["grammar_file"] is None:  # a generated grammar: as it always was
        del data["grammar_file"]
    else:  # a grammar file by its content: another grammar under the same name is another run, a copy the same run
        data["grammar_file"] = "sha256:" + grammar_content_hash(data_args.file_grammar())
    model = _normalised(ModelArguments, dataclasses.asdict(model_args))
    model["num_hidden_layers"] = model_args.model_kwargs(data_args.depth)["num_hidden_layers"]
    for name, default in OTHER_ARCHITECTURE_FIELDS.items():  # a TreeLang run's identity is what it always was
        if model[name] == default:
            del model[name]
    start = model.pop("model_name_or_path")
    if model.get("config_name"):  # a config file by its content: an edited file is another run
        model["config_name"] = config_file_hash(model["config_name"])
    everything = training_args.to_dict()
    training = _normalised(TreeLangTrainingArguments,
                           {key: everything.get(key) for key in IDENTITY_TRAINING_FIELDS})
    for name, default in NEW_TRAINING_FIELDS.items():
        if training[name] == default:
            del training[name]
    config = {
        "identity_version": IDENTITY_VERSION,
        "data_format_version": data_format_version(),
        "task": task,
        "data_args": data,
        "model_args": model,
        "training_args": training,
        "start_checkpoint": checkpoint_hash(start) if task == "finetune" and start is not None else None,
    }
    return json.loads(json.dumps(config, sort_keys=True, default=str))


def run_identity(config: dict) -> str:
    """sha256 of the canonical JSON of :func:`identity_config`: equal identities, equal runs."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


__all__ = [
    "IDENTITY_TRAINING_FIELDS",
    "UNKEYED_TRAINING_FIELDS",
    "MEMBERS_DIR",
    "Run",
    "build",
    "check_arguments",
    "check_output",
    "check_run",
    "check_together",
    "ensemble_runs",
    "from_payload",
    "identity_config",
    "member_name",
    "resolve",
    "result_arguments",
    "run_identity",
    "runs_from_command_line",
]
