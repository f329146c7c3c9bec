"""One training run of :mod:`hf_treelang.train.loop`, reused only when its folder holds the same run.

The sweeps (:mod:`hf_treelang.sweep`: ``hf-treelang sweep``, ``sample-complexity``, ``reproduce``) run many
trainings programmatically. Here is what one of them is and does:

* a run is a task and a flat dict of run arguments, the keys of the training scripts' JSON file
  (:func:`resolve_arguments` parses and validates it with :func:`hf_treelang.train.arguments.parse_arguments`);
  :class:`RunSpec` is a shorter description that :meth:`RunSpec.arguments` turns into one;
* its **identity** (:func:`run_identity` of :func:`identity_config`) is the sha256 of the fully resolved arguments
  (less :data:`EXECUTION_FIELDS`: where it writes, what it logs, its threads), the content of the checkpoint a
  fine-tuning run starts from, and the data-format version (the dataset builder's version);
* :func:`train_run` trains it into its folder: a finished run of the same identity is returned as it is, an
  interrupted one resumes from its last complete checkpoint, a folder of another identity is emptied and trained
  again. ``run_identity.json`` (identity, arguments, the training process, and its error if it failed) is written
  before training; finished means the training loop's one completion marker, ``run_complete.json``
  (:mod:`hf_treelang.train.folders`), written last and listing ``run_identity.json``. :func:`folder_state` and
  :func:`finished_run` read them; the final numbers are the run's ``metrics.json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RunSpec:
    """A training run.

    Attributes:
        task: ``"root"`` (root classification) or ``"mlm"`` (one masked leaf per sequence).
        output_dir: the run's folder.
        depth, num_symbols, sigma, grammar_seed, filter_level: the data (ℓ, q, σ, grammar seed, k_train).
        num_train: P, the training sequences; ``num_eval`` validation sequences (the in-sample KL inputs);
            ``num_test`` sequences per k_test set in ``k_tests``.
        model_kwargs: the architecture (``hidden_size``, ``num_hidden_layers``, ...).
        init_from: an MLM checkpoint to start a root classifier from (fine-tuning), or None.
        freeze_encoder: with ``init_from``: train the readout only (the frozen encoder in eval mode).
        classifier_hidden_size: with ``init_from``: hidden units of the new root readout, 0 for the linear one or
            H >= 1 for the authors' two-layer head (``TreeLangConfig.classifier_hidden_size``).
        checkpoint_epochs: also evaluate and save a checkpoint at the end of these epochs.
        epochs, max_steps, batch_size, learning_rate, seed: the optimisation (paper: Adam 1e-4, batch 32).
        num_evaluations: log-spaced evaluations with the BP-KL callback (plus step 0).
        use_dataset_builder: draw the data through ``load_dataset("treelang", ...)`` (True) or ``sample_trees``.
        progress: show the Trainer's progress bar.
        num_checkpoints: log-spaced checkpoints (0: none besides ``checkpoint_epochs``): what an interrupted run
            resumes from.
    """

    task: str
    output_dir: Path
    depth: int
    num_symbols: int
    sigma: float
    grammar_seed: int
    filter_level: int
    num_train: int
    num_test: int
    k_tests: tuple
    model_kwargs: dict = field(default_factory=dict)
    num_eval: int | None = None
    init_from: Path | None = None
    freeze_encoder: bool = False
    classifier_hidden_size: int = 0
    checkpoint_epochs: tuple = ()
    epochs: float = 1.0
    max_steps: int | None = None
    batch_size: int = 32
    learning_rate: float = 1e-4
    seed: int = 0
    num_evaluations: int = 3
    use_dataset_builder: bool = True
    progress: bool = True
    num_checkpoints: int = 0

    def arguments(self) -> tuple:
        """``(task, arguments)``: this run in the words of the training scripts' JSON file (no ``output_dir``).

        The task is ``"finetune"`` when ``init_from`` is set. :func:`train_run` trains it.
        """
        from .arguments import ARCHITECTURE_FIELDS, PAPER_MODEL

        unknown = sorted(set(self.model_kwargs) - set(ARCHITECTURE_FIELDS))
        if unknown:
            raise ValueError(f"`model_kwargs` has unknown architecture fields {unknown}; allowed: "
                             f"{list(ARCHITECTURE_FIELDS)}")
        in_kwargs = self.model_kwargs.get("classifier_hidden_size", self.classifier_hidden_size)
        if in_kwargs != self.classifier_hidden_size:
            raise ValueError(f"`model_kwargs` sets classifier_hidden_size={in_kwargs!r} and the run "
                             f"classifier_hidden_size={self.classifier_hidden_size!r}: give it once")
        arguments = {
            "grammar_seed": int(self.grammar_seed),
            "sigma": float(self.sigma),
            "num_symbols": int(self.num_symbols),
            "depth": int(self.depth),
            "k_train": int(self.filter_level),
            "num_train": int(self.num_train),
            "num_eval": int(self.num_eval or self.num_test),
            "num_test": int(self.num_test),
            "k_test": [int(k) for k in self.k_tests],
            "use_dataset_builder": bool(self.use_dataset_builder),
            **PAPER_MODEL,  # what model_kwargs leaves unset is the paper's model, whatever the scripts' preset
            **self.model_kwargs,
            "freeze_encoder": bool(self.freeze_encoder),
            "classifier_hidden_size": int(self.classifier_hidden_size),
            "num_train_epochs": float(self.epochs),
            "max_steps": -1 if self.max_steps is None else int(self.max_steps),
            "per_device_train_batch_size": int(self.batch_size),
            "learning_rate": float(self.learning_rate),
            "lr_scheduler_type": "constant",
            "warmup_steps": 0,
            "seed": int(self.seed),
            "report_to": "none",
            "num_evaluations": int(self.num_evaluations),
            "num_checkpoints": int(self.num_checkpoints),
            "logging_steps": 10**9,
            "disable_tqdm": not self.progress,
        }
        if self.checkpoint_epochs:
            arguments["checkpoint_epochs"] = [int(e) for e in self.checkpoint_epochs]
        if self.init_from is not None:
            arguments["model_name_or_path"] = str(self.init_from)
        return ("finetune" if self.init_from is not None else self.task), arguments


def run_training(spec: RunSpec) -> dict:
    """Train ``spec`` into ``spec.output_dir``, or reuse that folder when it holds the same run (:func:`train_run`).

    Returns:
        The run's summary (:func:`finished_run`): ``accuracy`` and ``bp_accuracy`` (the model's and the matched
        BP's accuracy on ``k_tests[0]``), ``final`` (every final metric: ``eval_kl_bp_k*``, ``eval_acc_ktest*``,
        ...), ``global_step``, ``train_runtime_s``, ``identity``, ``output_dir``; ``reused`` says whether it was
        finished before this call.
    """
    task, arguments = spec.arguments()
    return train_run(task, arguments, spec.output_dir)


# ---------------------------------------------------------------- a run's identity, and training that honours it

IDENTITY_FILE = "run_identity.json"  # identity, arguments and the training process, written before training
IDENTITY_VERSION = 1  # of the recipe below: bump it when the recipe changes, and every identity changes with it

# Fields that change neither the data, the model nor the optimisation: where the run writes, what it logs, how
# many threads it uses, how it is resumed. They are left out of a run's identity.
EXECUTION_FIELDS = frozenset({
    "output_dir", "logging_dir", "run_name", "report_to", "logging_strategy", "logging_steps", "logging_first_step",
    "logging_nan_inf_filter", "log_level", "log_level_replica", "log_on_each_node", "disable_tqdm", "project",
    "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id", "push_to_hub", "hub_token",
    "hub_private_repo", "hub_model_id", "hub_strategy", "hub_always_push", "hub_revision", "overwrite_output_dir",
    "resume_from_checkpoint", "local_rank", "cpu_threads", "skip_memory_metrics", "preset",
})
# What the runner sets itself: a run description that gives them is refused.
RESERVED_ARGUMENTS = ("output_dir", "resume_from_checkpoint", "overwrite_output_dir")
WEIGHT_FILE_PREFIXES = ("model", "pytorch_model")  # model.safetensors, model-00001-of-00002.safetensors, ...


def data_format_version() -> str:
    """The version of the bytes a run's data are drawn as: the dataset builder's version, its one home."""
    from hf_treelang.dataset_builder.treelang import TreeLangBuilderConfig

    return str(TreeLangBuilderConfig.version)


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


def identity_config(task: str, data_args, model_args, training_args) -> dict:
    """Everything that decides a run's result, as canonical JSON-ready data (see :func:`run_identity`).

    The three argument dataclasses fully resolved (the preset applied, ``num_hidden_layers`` and ``k_test`` given
    their defaults), less :data:`EXECUTION_FIELDS`; the starting checkpoint of a fine-tuning run by its content
    (:func:`checkpoint_hash`), not its path; the data-format version (:func:`data_format_version`).
    """
    from dataclasses import asdict

    data = asdict(data_args)
    data["k_test"] = data_args.test_levels()
    model = asdict(model_args)
    model["num_hidden_layers"] = model_args.model_kwargs(data_args.depth)["num_hidden_layers"]
    start = model.pop("model_name_or_path")
    training = {key: value for key, value in training_args.to_dict().items() if key not in EXECUTION_FIELDS}
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


def known_arguments() -> dict:
    """``{name: type hint}`` of every run argument (the fields of the three dataclasses, and the renamed ones)."""
    import typing

    from .arguments import RENAMED_ARGUMENTS, DataArguments, ModelArguments, TreeLangTrainingArguments

    hints = {}
    for cls in (DataArguments, ModelArguments, TreeLangTrainingArguments):
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        hints.update({name: hint for name, hint in typing.get_type_hints(cls).items() if name in names})
    for old, new in RENAMED_ARGUMENTS.items():
        hints[old] = hints[new]
    return hints


def _allows(hint, value) -> bool:
    """Whether ``value`` (from JSON) fits the type ``hint``; types other than bool/int/float/str/list pass."""
    import types
    import typing

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


def check_run_arguments(arguments: dict, where: str = "run arguments") -> None:
    """Raise a ValueError/TypeError naming the first unknown, reserved or mistyped argument of ``arguments``."""
    import difflib

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
        if not _allows(hints[name], value):
            hint = hints[name]
            shown = hint.__name__ if isinstance(hint, type) else str(hint)
            raise TypeError(f"{where}: `{name}` must be of type {shown}, got {value!r} ({type(value).__name__})")


def check_training_arguments(training_args) -> None:
    """The optimisation's ranges (seed, epochs, steps, batch, learning rate, clipping), each error naming the field."""
    from hf_treelang.core.params import MAX_SIZE, check_int, check_param, check_real

    check_param("seed", training_args.seed)
    check_int("max_steps", training_args.max_steps, -1)
    if training_args.max_steps <= 0 and check_real("num_train_epochs", training_args.num_train_epochs, 0.0) == 0:
        raise ValueError("`num_train_epochs` must be a real number > 0 (or `max_steps` > 0), got 0.0")
    check_int("per_device_train_batch_size", training_args.per_device_train_batch_size, 1, MAX_SIZE)
    check_int("gradient_accumulation_steps", training_args.gradient_accumulation_steps, 1)
    check_real("learning_rate", training_args.learning_rate, 0.0)
    check_real("max_grad_norm", training_args.max_grad_norm, 0.0)
    check_real("weight_decay", training_args.weight_decay, 0.0)


@dataclass
class ResolvedRun:
    """A run's three argument dataclasses, validated, with its identity (:func:`run_identity`).

    Attributes:
        task: ``"root"``, ``"mlm"`` or ``"finetune"``.
        output_dir: the run's folder.
        config: :func:`identity_config`; ``identity`` its hash.
    """

    task: str
    output_dir: Path
    data_args: object
    model_args: object
    training_args: object
    config: dict
    identity: str


def resolve_arguments(task: str, arguments: dict, output_dir) -> ResolvedRun:
    """Parse and validate a run given as a flat dict of run arguments (the keys of the scripts' JSON file).

    The dict goes through :func:`hf_treelang.train.arguments.parse_arguments` (the preset fills what it leaves
    unset), then every check of the training loop runs; nothing is written. Errors name the argument.
    """
    import tempfile

    from .arguments import TASKS, parse_arguments
    from .loop import validate_arguments

    if task not in TASKS:
        raise ValueError(f"`task` must be one of {TASKS}, got {task!r}")
    check_run_arguments(arguments)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "arguments.json")
        with open(path, "w") as handle:
            json.dump({**arguments, "output_dir": str(output_dir)}, handle)
        data_args, model_args, training_args = parse_arguments(task, [path])
    check_training_arguments(training_args)
    if hasattr(training_args, "overwrite_output_dir"):
        training_args.overwrite_output_dir = True  # the runner owns the folder: train_run decides what to keep
    validate_arguments(task, data_args, model_args, training_args)
    config = identity_config(task, data_args, model_args, training_args)
    return ResolvedRun(task, Path(output_dir), data_args, model_args, training_args, config, run_identity(config))


def read_json_file(path: Path):
    """The JSON in ``path``, or None when it is missing or unreadable (a file cut short by a crash)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def write_json_atomic(path: Path, data) -> None:
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


def process_alive(host: str | None, pid: int | None) -> bool | None:
    """Whether process ``pid`` of ``host`` runs: True/False on this host, None (unknown) on another."""
    if host != socket.gethostname():
        return None
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, TypeError, ValueError):
        return False
    except PermissionError:
        return True
    return True


def last_checkpoint(output_dir) -> Path | None:
    """The complete ``checkpoint-<step>`` folder of the highest step (a save cut short is passed over), or None."""
    from .folders import CHECKPOINT_PREFIX, check_resume_checkpoint

    found = []
    for path in Path(output_dir).glob(CHECKPOINT_PREFIX + "*"):
        step = path.name[len(CHECKPOINT_PREFIX):]
        if step.isdigit():
            found.append((int(step), path))
    for _, path in sorted(found, reverse=True):
        try:
            check_resume_checkpoint(path)
        except ValueError:
            continue
        return path
    return None


@dataclass
class FolderState:
    """What a run folder holds for a given identity.

    ``status``: ``"done"`` (complete, same identity: ``result`` is its summary, :func:`finished_run`), ``"resume"``
    (same identity, not complete; ``checkpoint`` to resume from, or None to start over), ``"running"`` (same identity,
    its process is alive), ``"stale"`` (trained under another identity, or by no runner), ``"new"`` (missing or
    empty). ``record``: the folder's ``run_identity.json``.
    """

    status: str
    result: dict | None = None
    checkpoint: Path | None = None
    record: dict | None = None


def read_identity(output_dir) -> dict | None:
    """The ``run_identity.json`` of a run folder (:func:`mark_running`'s record), or None."""
    record = read_json_file(Path(output_dir) / IDENTITY_FILE)
    return record if isinstance(record, dict) else None


def finished_run(output_dir, identity: str | None = None) -> dict | None:
    """The summary of a finished run of the runner, or None when the folder holds none (of ``identity``, if given).

    Finished means complete — ``run_complete.json``, the training loop's marker written last
    (:func:`hf_treelang.train.folders.completed_run`) — with ``run_identity.json`` among the files that marker lists:
    the identity was recorded before the run that completed, not after it.

    Returns:
        ``accuracy`` and ``bp_accuracy`` (the model's and the matched BP's accuracy on the first k_test set),
        ``final`` (every numeric final metric: ``eval_kl_bp_k*``, ``eval_acc_ktest*``, ...), ``global_step``,
        ``train_runtime_s`` (from ``metrics.json``), ``identity``, ``task``, ``resumed_from``, ``output_dir``.
    """
    from .folders import completed_run

    folder = Path(output_dir)
    record = read_identity(folder)
    if record is None or (identity is not None and record.get("identity") != identity):
        return None
    marker = completed_run(folder)
    if marker is None or IDENTITY_FILE not in (marker.get("files") or {}):
        return None
    metrics = read_json_file(folder / "metrics.json") or {}
    final = {key: value for key, value in (metrics.get("final") or {}).items() if isinstance(value, (int, float))}
    k = ((record.get("config") or {}).get("data_args", {}).get("k_test") or [0])[0]
    return {
        "accuracy": final.get(f"eval_acc_ktest{k}"),
        "bp_accuracy": final.get(f"eval_bp_acc_ktest{k}"),
        "final": final,
        "output_dir": str(folder),
        "global_step": int(metrics.get("global_step", marker.get("global_step", 0))),
        "train_runtime_s": float(metrics.get("train_runtime_s", 0.0)),
        "identity": record.get("identity"),
        "task": record.get("task"),
        "resumed_from": record.get("resumed_from"),
    }


def folder_state(output_dir, identity: str) -> FolderState:
    """Read a run folder against ``identity``; raise if it holds files that no training run wrote."""
    from .folders import is_run_folder

    folder = Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"output_dir {str(folder)!r} exists and is not a folder")
    if not folder.is_dir() or not any(folder.iterdir()):
        return FolderState("new")
    record = read_identity(folder)
    if record is None:
        if is_run_folder(folder):
            return FolderState("stale")  # a training run of no known identity (a script's, or an older version's)
        raise ValueError(f"output_dir {str(folder)!r} holds files that no run of hf_treelang.train.runs wrote (no "
                         f"{IDENTITY_FILE}); move them away or choose another folder")
    if record.get("identity") != identity:
        return FolderState("stale", record=record)
    result = finished_run(folder, identity)
    if result is not None:
        return FolderState("done", result=result, record=record)
    if "error" not in record and record.get("pid") != os.getpid() \
            and process_alive(record.get("host"), record.get("pid")) is not False:
        return FolderState("running", record=record)
    return FolderState("resume", checkpoint=last_checkpoint(folder), record=record)


def train_run(task: str, arguments: dict, output_dir, *, resolved: ResolvedRun | None = None) -> dict:
    """Train one run into ``output_dir``, reusing what is there only when it is the same run.

    The run's identity (:func:`run_identity` of its fully resolved arguments, the content of the checkpoint it
    starts from and the data-format version) decides: a finished run of the same identity is returned as it is; an
    interrupted one resumes from its last checkpoint (``resume_from_checkpoint``); a folder of another identity is
    emptied and trained again, so a result is never stale. ``run_identity.json`` (identity, arguments, the process)
    is written before training; the training loop writes ``run_complete.json`` last.

    Args:
        task: ``"root"``, ``"mlm"`` or ``"finetune"``.
        arguments: run arguments as in the training scripts' JSON file (no ``output_dir``).
        output_dir: the run's folder.
        resolved: :func:`resolve_arguments` of the same inputs, when the caller has it already.

    Returns:
        :func:`finished_run`'s summary, plus ``reused`` (True when the run was finished before this call).
    """
    from . import loop

    run = resolved or resolve_arguments(task, arguments, output_dir)
    folder = run.output_dir
    state = folder_state(folder, run.identity)
    if state.status == "done":
        return {**state.result, "reused": True}
    if state.status == "running":
        raise ValueError(f"output_dir {str(folder)!r}: this run is being trained by process {state.record.get('pid')} "
                         f"on {state.record.get('host')}")
    resume = state.checkpoint if state.status == "resume" else None
    if resume is None and folder.is_dir():
        shutil.rmtree(folder)  # stale, or interrupted before its first checkpoint: start over
    folder.mkdir(parents=True, exist_ok=True)
    training_args = run.training_args
    if resume is not None:
        training_args.resume_from_checkpoint = str(resume)
        if hasattr(training_args, "overwrite_output_dir"):
            training_args.overwrite_output_dir = False  # resuming keeps the folder
    record = mark_running(run, arguments, resumed_from=None if resume is None else resume.name)
    try:
        loop.train(run.task, run.data_args, run.model_args, training_args)
    except BaseException as error:
        write_json_atomic(folder / IDENTITY_FILE, {**record, "error": f"{type(error).__name__}: {error}"})
        raise
    return {**_finished(run), "reused": False}


def _finished(run: ResolvedRun) -> dict:
    summary = finished_run(run.output_dir, run.identity)
    if summary is None:
        raise RuntimeError(f"the run in {str(run.output_dir)!r} ended without its completion marker "
                           f"({IDENTITY_FILE} listed in run_complete.json)")
    return summary


def mark_running(run: ResolvedRun, arguments: dict, *, resumed_from: str | None = None,
                 trained_in: str | None = None) -> dict:
    """Write ``run_identity.json`` (the identity, arguments, this process) into the run's folder, whose previous
    completion marker no longer describes it; returns the record."""
    from .folders import mark_run_started

    record = {"identity": run.identity, "task": run.task, "arguments": arguments, "config": run.config,
              "host": socket.gethostname(), "pid": os.getpid(), "started": time.time(),
              "resumed_from": resumed_from, "trained_in": trained_in}
    run.output_dir.mkdir(parents=True, exist_ok=True)
    mark_run_started(run.output_dir)
    write_json_atomic(run.output_dir / IDENTITY_FILE, record)
    return record


def adopt_run(run: ResolvedRun, trained_folder, record: dict) -> dict:
    """Make ``trained_folder`` — a complete single-run folder trained elsewhere (an ensemble's member) — the run
    folder of ``run``: moved to ``run.output_dir``, given ``record`` (:func:`mark_running`'s) as its
    ``run_identity.json``, and its ``run_complete.json`` written again, last, listing it. Returns
    :func:`finished_run`'s summary."""
    from .folders import RUN_COMPLETE, completed_run, write_run_complete

    trained_folder = Path(trained_folder)
    marker = completed_run(trained_folder)
    if marker is None:
        raise ValueError(f"{str(trained_folder)!r} is not a complete run folder (no valid {RUN_COMPLETE})")
    if run.output_dir.exists():
        shutil.rmtree(run.output_dir)
    run.output_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(trained_folder), str(run.output_dir))
    write_json_atomic(run.output_dir / IDENTITY_FILE, record)
    write_run_complete(run.output_dir, **{key: value for key, value in marker.items() if key != "files"})
    return _finished(run)
