"""Ensembles: N runs trained together in one process, each written as a complete run folder.

``run_root.py`` / ``run_mlm.py --ensemble_seeds S1 S2 … --ensemble_k_train K1 K2 …`` trains every member (S, K) of the
product. A member (seed S, k_train K) *is* the run ``--seed S --k_train K`` with the same other arguments: the same
initialisation (``set_seed(S)`` then ``TreeLangFor*(config)``, as :func:`hf_treelang.train.loop.train`), the same
training data (the splits of config ``k<K>``), the same order and masks (the stream of seed S,
:mod:`hf_treelang.train.device_data`) and the same Adam; with dropout 0 its weights and evaluation history match
that single run to float rounding (``tests/test_ensemble.py``); with dropout each member draws its own masks.

Members share the architecture, the optimiser, the batch size, the number of steps and the training-set size; each
has its own model seed and its own data (k_train; the library API also takes per-member grammar seeds and σ). Every
member is written to ``OUTPUT_DIR/members/<name>/`` (``seed{S}-k{K}``): AutoModel-loadable weights, ``run_config.json``,
``eval_history.json``, ``metrics.json`` with its own BP-KL curves, ``trainer_state.json`` (its evaluation history),
``grammar.json``, the curves, the model card and ``run_complete.json``, plus ``checkpoint-<step>/`` weights at the
checkpoint steps. The data and the BP targets of the evaluation sets are built once per distinct data config
(:class:`~hf_treelang.train.engine.RunDataCache`), not per member.

Two ways to run the members (:func:`choose_ensemble_mode`, ``--ensemble_mode``):

* ``"stacked"`` — one batched model (:class:`~hf_treelang.train.stacked.StackedTreeLang`: one kernel per layer for all
  members) driven by :class:`EnsembleTrainer`; gradient clipping, when asked for, is per member. The resumable
  checkpoints are the ensemble's (``OUTPUT_DIR/checkpoint-<step>/``, with ``ensemble.json``).
* ``"sequential"`` — the members one after another in this process, each exactly as a single run.

The rule of ``"auto"``: stacked on a GPU (one small model leaves it idle); on the CPU stacked only while a member's
step is small (:data:`STACKED_CPU_MAX_FLOPS`), because there a step is bound by arithmetic, not by overhead, and a
batched matmul of N members is no faster than N matmuls. Measured on the 2-core CPU (1 thread, batch 32, CPU time of
bare forward/backward/Adam loops, which a shared machine perturbs least): N = 8 and 16 stacked members of the quick
size (d = 64, d' = 256) do 1.1–1.2x the model-steps of the same members one after another, 4 of the paper size
(d = 128, d' = 2048) 0.87–0.96x; through the Trainer the stacked quick members also share its per-step work
(``benchmarks/bench_train.py`` has both).

Bad input fails before any data are built: members of different architectures, sizes or step counts, a repeated
member, an ensemble resumed from a single run's checkpoint (or the other way round), ``finetune``, several
processes, the ``dataloader`` engine.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from transformers import set_seed
from transformers.trainer_callback import TrainerState
from transformers.trainer_utils import TrainOutput, speed_metrics

from hf_treelang.core.params import check_int, check_param

from .arguments import DataArguments, ModelArguments, TreeLangTrainingArguments
from .callbacks import LogSpacedScheduleCallback, MetricsHistoryCallback, evaluation_history
from .device_data import TrainingStream, optimizer_steps
from .engine import ENSEMBLE_FILE, ENSEMBLE_MODES, RunDataCache, TreeLangTrainer, check_engine_arguments, no_grad_eval
from .folders import clear_previous_run, mark_run_started, write_run_complete
from .outputs import write_run_config
from .stacked import StackedTreeLang, clip_grad_norm_per_member

MEMBERS_DIR = "members"
MODEL_TASKS = ("root", "mlm")
# "auto" stacks members on the CPU while one member's training step costs at most this many floating-point
# operations (6 x tokens x parameters): the quick size (d = 64, d' = 256: ~0.6 GFLOP at batch 32) stacks, the
# paper size (d = 128, d' = 2048: ~7 GFLOP) trains one member after another.
STACKED_CPU_MAX_FLOPS = 2e9
# arguments in which members may differ (everything else is shared); the output folders are the ensemble's
MEMBER_DATA_FIELDS = ("k_train", "grammar_seed", "sigma")
MEMBER_TRAINING_FIELDS = ("seed", "output_dir", "logging_dir", "run_name", "ensemble_seeds", "ensemble_k_train",
                          "ensemble_mode", "resume_from_checkpoint", "overwrite_output_dir")


# ---------------------------------------------------------------- members


@dataclass
class EnsembleMember:
    """One member: the arguments of the single run it is (its ``training_args.output_dir`` is its folder).

    Attributes:
        name: the member's folder name under ``members/`` (``seed{S}-k{K}``, plus ``-grammar{G}`` / ``-sigma{σ}`` when
            members differ in those).
        data_args, model_args, training_args: the single run's arguments.
    """

    name: str
    data_args: DataArguments
    model_args: ModelArguments
    training_args: TreeLangTrainingArguments

    @property
    def key(self) -> tuple:
        """(seed, k_train, grammar_seed, σ): what tells members apart."""
        return (self.training_args.seed, self.data_args.k_train, self.data_args.grammar_seed,
                float(self.data_args.sigma))

    @property
    def output_dir(self) -> str:
        return self.training_args.output_dir


def member_name(seed: int, k_train: int, grammar_seed: int | None = None, sigma: float | None = None) -> str:
    """``seed{S}-k{K}`` (``-grammar{G}``, ``-sigma{σ}`` appended when given)."""
    name = f"seed{seed}-k{k_train}"
    if grammar_seed is not None:
        name += f"-grammar{grammar_seed}"
    if sigma is not None:
        name += f"-sigma{float(sigma):g}"
    return name


def is_ensemble(training_args) -> bool:
    """Whether the arguments ask for an ensemble (``--ensemble_seeds`` or ``--ensemble_k_train``)."""
    return bool(getattr(training_args, "ensemble_seeds", None) or getattr(training_args, "ensemble_k_train", None))


def _repeated(name: str, values: list) -> None:
    seen = set()
    for value in values:
        if value in seen:
            raise ValueError(f"`{name}` repeats {value!r} (got {list(values)}): a repeated (seed, k_train) member "
                             "would train the same run twice")
        seen.add(value)


def ensemble_members(data_args: DataArguments, model_args: ModelArguments,
                     training_args: TreeLangTrainingArguments, *, grammar_seeds: list | None = None,
                     sigmas: list | None = None) -> list:
    """The members of the command line: every (seed, k_train[, grammar_seed, σ]) of the lists, in that order.

    ``--ensemble_seeds`` defaults to ``[--seed]`` and ``--ensemble_k_train`` to ``[--k_train]``; each member's
    ``output_dir`` is ``<output_dir>/members/<name>``.
    """
    seeds = list(training_args.ensemble_seeds or [training_args.seed])
    levels = list(training_args.ensemble_k_train or [data_args.k_train])
    for seed in seeds:
        check_param("seed", seed)
    for level in levels:
        check_int("k_train", level, 0, data_args.depth)
    _repeated("ensemble_seeds", seeds)
    _repeated("ensemble_k_train", levels)
    grammars = list(grammar_seeds) if grammar_seeds else [None]
    spreads = list(sigmas) if sigmas else [None]
    _repeated("grammar_seeds", grammars)
    _repeated("sigmas", spreads)
    members = []
    for seed, level, grammar, sigma in itertools.product(seeds, levels, grammars, spreads):
        name = member_name(seed, level, grammar, sigma)
        member_data = copy.deepcopy(data_args)
        member_data.k_train = int(level)
        if grammar is not None:
            member_data.grammar_seed = int(grammar)
        if sigma is not None:
            member_data.sigma = float(sigma)
        member_training = copy.copy(training_args)
        member_training.seed = int(seed)
        member_training.output_dir = os.path.join(training_args.output_dir, MEMBERS_DIR, name)
        member_training.ensemble_seeds = member_training.ensemble_k_train = None
        member_training.resume_from_checkpoint = None
        members.append(EnsembleMember(name, member_data, copy.deepcopy(model_args), member_training))
    return members


def _comparable_training(training_args) -> dict:
    values = training_args.to_dict()
    return {key: value for key, value in values.items() if key not in MEMBER_TRAINING_FIELDS}


def validate_members(task: str, members: list, *, resume_from_checkpoint=None, mode: str = "auto") -> None:
    """Raise a ValueError naming the argument and the members for any ensemble that cannot train as one; writes
    nothing and builds no data."""
    if task not in MODEL_TASKS:
        raise ValueError(f"an ensemble trains {' or '.join(MODEL_TASKS)} models from scratch (run_root.py, "
                         f"run_mlm.py), got task {task!r}")
    if mode not in ENSEMBLE_MODES:
        raise ValueError(f"`ensemble_mode` must be one of {ENSEMBLE_MODES}, got {mode!r}")
    if not members:
        raise ValueError("an ensemble needs at least one member, got none")
    seen = {}
    for member in members:
        if member.key in seen:
            seed, k_train, grammar_seed, sigma = member.key
            raise ValueError(f"ensemble member (seed={seed}, k_train={k_train}, grammar_seed={grammar_seed}, "
                             f"sigma={sigma:g}) is repeated ({seen[member.key]!r} and {member.name!r})")
        seen[member.key] = member.name
    if len({member.name for member in members}) != len(members):
        raise ValueError(f"ensemble member names must differ, got {[member.name for member in members]}")
    first = members[0]
    reference_data = {k: v for k, v in asdict(first.data_args).items() if k not in MEMBER_DATA_FIELDS}
    reference_model = asdict(first.model_args)
    reference_training = _comparable_training(first.training_args)
    reference_steps = optimizer_steps(first.training_args, first.data_args.num_train)
    for member in members[1:]:
        for kind, reference, values in (
            ("data", reference_data, {k: v for k, v in asdict(member.data_args).items() if k not in MEMBER_DATA_FIELDS}),
            ("architecture", reference_model, asdict(member.model_args)),
            ("training", reference_training, _comparable_training(member.training_args)),
        ):
            for name in sorted(set(reference) | set(values)):
                if reference.get(name) != values.get(name):
                    raise ValueError(
                        f"ensemble members must share the {kind} arguments but their model seed, k_train, grammar "
                        f"seed and σ: `{name}` is {reference.get(name)!r} for member {first.name!r} and "
                        f"{values.get(name)!r} for member {member.name!r}")
        steps = optimizer_steps(member.training_args, member.data_args.num_train)
        if steps != reference_steps:
            raise ValueError(f"ensemble members must train for the same number of steps: {reference_steps} for "
                             f"{first.name!r}, {steps} for {member.name!r}")
    args = first.training_args
    check_engine_arguments(args)
    if getattr(args, "train_engine", "device") != "device":
        raise ValueError(f"an ensemble runs on the device engine, got `train_engine` {args.train_engine!r}")
    if args.world_size > 1:
        raise ValueError(f"an ensemble trains in one process (its members are the parallelism), got "
                         f"{args.world_size} processes")
    if resume_from_checkpoint is not None:
        if mode == "sequential":
            raise ValueError("`resume_from_checkpoint` resumes a stacked ensemble (its OUTPUT_DIR/checkpoint-<step>); "
                             "a sequential ensemble's members are single runs: resume each with run_*.py --seed S "
                             "--k_train K --output_dir OUTPUT_DIR/members/seed{S}-k{K} --resume_from_checkpoint ...")
        check_ensemble_checkpoint(resume_from_checkpoint, [member.name for member in members])


def check_ensemble_checkpoint(path, names: list) -> dict:
    """``path`` must be a checkpoint of this ensemble (``ensemble.json`` naming the same members); returns it."""
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"`resume_from_checkpoint` {str(folder)!r} is not an existing checkpoint folder")
    manifest = folder / ENSEMBLE_FILE
    if not manifest.is_file():
        raise ValueError(f"`resume_from_checkpoint` {str(folder)!r} is a checkpoint of a single run (it has no "
                         f"{ENSEMBLE_FILE}); an ensemble resumes only from its own checkpoint, "
                         "OUTPUT_DIR/checkpoint-<step> of a stacked ensemble")
    saved = json.loads(manifest.read_text())
    if saved.get("members") != list(names):
        raise ValueError(f"`resume_from_checkpoint` {str(folder)!r} is a checkpoint of the ensemble "
                         f"{saved.get('members')}; this ensemble is {list(names)}")
    return saved


def choose_ensemble_mode(config, batch_size: int, device) -> str:
    """``"stacked"`` on a GPU; on the CPU ``"stacked"`` while 6 x tokens x parameters of one member's step is at
    most :data:`STACKED_CPU_MAX_FLOPS`, else ``"sequential"`` (the rule and its measurements: module docstring)."""
    if torch.device(device).type != "cpu":
        return "stacked"
    d, d_ff, T = config.hidden_size, config.intermediate_size, config.max_position_embeddings
    per_layer = 4 * d * d + 2 * d * d_ff  # in-projection (3d x d), out-projection, the two feed-forward matrices
    readout = d * T * config.num_symbols if config.classifier_pooling == "concat" else d * config.num_symbols
    flops = 6 * batch_size * T * (config.num_hidden_layers * per_layer + readout)
    return "stacked" if flops <= STACKED_CPU_MAX_FLOPS else "sequential"


# ---------------------------------------------------------------- the stacked Trainer


@dataclass
class MemberState:
    """What the stacked run keeps per member: its arguments, data, BP-KL callback and validation tensors."""

    member: EnsembleMember
    data: object
    bp_callback: object
    validation_inputs: torch.Tensor
    validation_labels: torch.Tensor
    eval_model: object = None
    history_writer: object = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.member.name


def _validation_tensors(task: str, data, num_symbols: int) -> tuple:
    """The single run's Trainer evaluation set as tensors: (inputs (n, T), labels (n,) or (n, T))."""
    from .data import to_datasets

    _, validation = to_datasets(task, data, num_symbols)
    columns = validation.with_format("numpy")
    return (torch.as_tensor(np.asarray(columns["input_ids"]), dtype=torch.int64),
            torch.as_tensor(np.asarray(columns["labels"]), dtype=torch.int64))


@torch.no_grad()
def trainer_style_metrics(model, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int,
                          prefix: str = "eval") -> dict:
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
    """:class:`~hf_treelang.train.engine.TreeLangTrainer` of a :class:`StackedTreeLang`: per-member losses,
    per-member clipping, and evaluations that run every member as its own ``TreeLangFor*`` model.

    An evaluation logs every member's keys as ``<key>/<member name>`` (``eval_kl_bp_k0/seed0-k2``; TensorBoard shows
    ``eval/kl_bp_k0/seed0-k2``) and their mean ``eval_loss``, and rewrites each member's ``eval_history.json``. The
    checkpoints hold the stacked weights and ``ensemble.json`` (resumable), and each member's weights under
    ``members/<name>/checkpoint-<step>/``.
    """

    def __init__(self, *args, members: list, ensemble_manifest: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.members = members
        self.ensemble_manifest = ensemble_manifest
        self.member_loss_sum = torch.zeros(len(members), device=self.args.device)
        self.member_steps = 0

    def forward_loss(self, model, inputs: dict) -> tuple:
        output = model(**inputs)
        member_losses = output["member_losses"].detach()  # (N,)
        self.member_loss_sum += member_losses
        return output["loss"], member_losses.mean()

    def lean_step(self, model, inputs: dict) -> tuple:
        self.member_steps += 1
        return super().lean_step(model, inputs)

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
            metrics = trainer_style_metrics(model, state.validation_inputs, state.validation_labels,
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
                os.makedirs(state.member.output_dir, exist_ok=True)
                view = SimpleNamespace(is_world_process_zero=True,
                                       log_history=member_log_history(self.state.log_history, state.name))
                state.history_writer.write(view)
        return logs

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call)
        output_dir = output_dir or self.args.output_dir
        if not self.is_world_process_zero():
            return
        os.makedirs(output_dir, exist_ok=True)
        with open(os.path.join(output_dir, ENSEMBLE_FILE), "w") as handle:
            json.dump(self.ensemble_manifest, handle, indent=1, sort_keys=True)
        if _internal_call:  # a checkpoint: every member's weights next to its run folder
            checkpoint = os.path.basename(os.path.normpath(output_dir))
            stacked = self.accelerator.unwrap_model(self.model)
            for index, state in enumerate(self.members):
                stacked.member_model(index).save_pretrained(os.path.join(state.member.output_dir, checkpoint))

    def member_train_losses(self) -> list:
        """Each member's mean training loss over the steps of this ``train`` call."""
        steps = max(self.member_steps, 1)
        return [float(value) / steps for value in self.member_loss_sum.cpu()]


# ---------------------------------------------------------------- training


@dataclass
class EnsembleResult:
    """What :func:`train_members` returns: the ensemble's folder, mode, timing and each member's result."""

    output_dir: str
    mode: str
    train_runtime: float
    global_step: int
    members: dict  # name -> hf_treelang.train.loop.TrainingResult
    num_data_configs: int


def validate_ensemble(task: str, data_args: DataArguments, model_args: ModelArguments,
                      training_args: TreeLangTrainingArguments) -> list:
    """Every check of the scripts' ensemble, as :func:`train_members` runs them (no data, nothing written);
    returns the members."""
    members = ensemble_members(data_args, model_args, training_args)
    mode = getattr(training_args, "ensemble_mode", "auto")
    validate_members(task, members, resume_from_checkpoint=training_args.resume_from_checkpoint, mode=mode)
    _check_member_folders(task, members, training_args.output_dir, training_args.resume_from_checkpoint is not None,
                          bool(training_args.overwrite_output_dir))
    return members


def summary_lines(result: EnsembleResult) -> list:
    """The console summary of an ensemble: one line for the ensemble, one per member (its final evaluation)."""
    from .callbacks import evaluation_line

    lines = [f"[ensemble, {result.mode}] {len(result.members)} members, {result.global_step} steps in "
             f"{result.train_runtime:.0f} s -> {result.output_dir}/{MEMBERS_DIR}/"]
    for name, member in result.members.items():
        k_train = json.loads((Path(member.output_dir) / "run_config.json").read_text())["data_args"]["k_train"]
        lines.append(f"{name}: " + evaluation_line(member.final_metrics, member.global_step, k_train))
    return lines


def train_ensemble(task: str, data_args: DataArguments, model_args: ModelArguments,
                   training_args: TreeLangTrainingArguments) -> EnsembleResult:
    """The scripts' ensemble: the members of :func:`ensemble_members`, trained by :func:`train_members`."""
    members = ensemble_members(data_args, model_args, training_args)
    return train_members(task, members, output_dir=training_args.output_dir,
                         mode=getattr(training_args, "ensemble_mode", "auto"),
                         resume_from_checkpoint=training_args.resume_from_checkpoint,
                         overwrite_output_dir=bool(training_args.overwrite_output_dir), ensemble_args=training_args)


def _check_member_folders(task: str, members: list, output_dir: str, resume: bool, overwrite: bool) -> None:
    from .folders import check_output_dir_free
    from .loop import validate_arguments

    check_output_dir_free(output_dir, overwrite=overwrite, resume=resume)
    for member in members:
        args = copy.copy(member.training_args)
        args.resume_from_checkpoint = None
        args.overwrite_output_dir = overwrite
        if resume:
            args.overwrite_output_dir = True  # the member folders of a resumed ensemble hold its checkpoints
        validate_arguments(task, member.data_args, member.model_args, args)


def train_members(task: str, members: list, *, output_dir: str, mode: str = "auto", resume_from_checkpoint=None,
                  overwrite_output_dir: bool = False, ensemble_args=None) -> EnsembleResult:
    """Train ``members`` (a list of :class:`EnsembleMember`) into ``output_dir``; see the module docstring.

    ``ensemble_args`` are the Trainer's arguments of a stacked run (default: the first member's, with
    ``output_dir``); every check runs before any data are built.
    """
    validate_members(task, members, resume_from_checkpoint=resume_from_checkpoint, mode=mode)
    _check_member_folders(task, members, output_dir, resume_from_checkpoint is not None, overwrite_output_dir)
    if ensemble_args is None:
        ensemble_args = copy.copy(members[0].training_args)
        ensemble_args.output_dir = output_dir
        ensemble_args.resume_from_checkpoint = resume_from_checkpoint
    if mode == "auto":
        config = members[0].model_args.config(members[0].data_args)
        mode = choose_ensemble_mode(config, ensemble_args.per_device_train_batch_size, ensemble_args.device)
    if overwrite_output_dir:
        for member in members:
            if os.path.isdir(member.output_dir):
                clear_previous_run(member.output_dir)
                for checkpoint in Path(member.output_dir).glob("checkpoint-*"):
                    shutil.rmtree(checkpoint, ignore_errors=True)
        clear_previous_run(output_dir)
        if os.path.isfile(os.path.join(output_dir, ENSEMBLE_FILE)):
            os.remove(os.path.join(output_dir, ENSEMBLE_FILE))
    manifest = {"task": task, "mode": mode, "members": [member.name for member in members],
                "member_arguments": {member.name: {"seed": member.key[0], "k_train": member.key[1],
                                                   "grammar_seed": member.key[2], "sigma": member.key[3]}
                                     for member in members}}
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, ENSEMBLE_FILE), "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
    cache = RunDataCache()
    start = time.perf_counter()
    if mode == "sequential":
        from .loop import train

        results = {member.name: train(task, member.data_args, member.model_args, member.training_args, cache=cache)
                   for member in members}
        global_step = max(result.global_step for result in results.values())
    else:
        results, global_step = _train_stacked(task, members, ensemble_args, manifest, cache, resume_from_checkpoint)
    runtime = time.perf_counter() - start
    write_run_complete(output_dir, task=task, ensemble=manifest["members"], mode=mode, global_step=global_step)
    return EnsembleResult(output_dir, mode, runtime, global_step, results, cache.num_data_configs)


def _train_stacked(task: str, members: list, args, manifest: dict, cache: RunDataCache, resume) -> tuple:
    from .loop import TrainingResult, bp_callback_for, build_model

    states = []
    for member in members:
        data = cache.run_data(member.data_args)
        callback = cache.bp_callback(member.data_args,
                                     lambda: bp_callback_for(task, data, member.data_args, member.training_args))
        callback.prepare()  # the BP targets, once per distinct data config
        inputs, labels = _validation_tensors(task, data, member.data_args.num_symbols)
        states.append(MemberState(member, data, callback, inputs, labels,
                                  history_writer=MetricsHistoryCallback(
                                      os.path.join(member.output_dir, "eval_history.json"))))
    for member in members:  # each member folder becomes a run folder now, complete when run_complete.json is written
        os.makedirs(member.output_dir, exist_ok=True)
        mark_run_started(member.output_dir)
        write_run_config(task, member.data_args, member.model_args, member.training_args)
    models = []
    for member in members:
        set_seed(member.training_args.seed)  # exactly the single run's initialisation
        models.append(build_model(task, member.data_args, member.model_args))
    stacked = StackedTreeLang.from_models(models, task)
    del models
    first = members[0]
    stream = TrainingStream(
        task, np.stack([s.data.train.leaves for s in states]), np.stack([s.data.train.roots for s in states]),
        seeds=[m.training_args.seed for m in members], num_symbols=first.data_args.num_symbols,
        batch_size=args.per_device_train_batch_size, mask_rate=first.data_args.mask_rate if task == "mlm" else None,
        drop_last=args.dataloader_drop_last, device=args.device,
    )
    if args.num_evaluations > 0 and resume is None:
        args.eval_on_start = True
    callbacks = [LogSpacedScheduleCallback(args.num_evaluations, args.num_checkpoints)]
    if getattr(args, "checkpoint_epochs", None):
        from .loop import EpochCheckpointCallback

        callbacks.append(EpochCheckpointCallback(args.checkpoint_epochs))
    from .data import to_datasets

    train_set, _ = to_datasets(task, states[0].data, first.data_args.num_symbols)
    trainer = EnsembleTrainer(model=stacked, args=args, train_dataset=train_set, callbacks=callbacks,
                              train_stream=stream, step_mode=getattr(args, "step_mode", "auto"), members=states,
                              ensemble_manifest=manifest)
    from .callbacks import ConsoleCallback
    from .loop import _tensorboard_dir

    _tensorboard_dir(trainer, args.output_dir)
    ConsoleCallback().attach(trainer)  # one line per evaluation (the mean loss), not the members' raw dicts
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
        member, history = state.member, histories[state.name]
        final = dict(history[-1]) if history and history[-1].get("step") == global_step else {}
        if final_logs:
            suffix = "/" + state.name
            final.update({key[: -len(suffix)]: value for key, value in final_logs.items() if key.endswith(suffix)})
        _write_member(task, member, trainer, index, state, final, history, runtime, losses[index], global_step)
        results[state.name] = TrainingResult(member.output_dir, final, history, runtime, global_step)
    return results, global_step


def _write_member(task, member: EnsembleMember, trainer, index: int, state: MemberState, final: dict, history: list,
                  runtime: float, train_loss: float, global_step: int) -> None:
    """Member ``index``'s complete run folder (what a single run writes at its end)."""
    from .outputs import write_outputs

    output_dir = member.output_dir
    os.makedirs(output_dir, exist_ok=True)
    stacked = trainer.accelerator.unwrap_model(trainer.model)
    stacked.member_model(index).save_pretrained(output_dir)
    state.data.grammar.save(os.path.join(output_dir, "grammar.json"))
    member_state = TrainerState(global_step=global_step, max_steps=trainer.state.max_steps,
                                num_train_epochs=trainer.state.num_train_epochs, epoch=trainer.state.epoch,
                                train_batch_size=trainer.state.train_batch_size,
                                log_history=member_log_history(trainer.state.log_history, state.name)
                                + [{"train_loss": train_loss, "step": global_step}])
    member_state.save_to_json(os.path.join(output_dir, "trainer_state.json"))
    state.history_writer.write(SimpleNamespace(is_world_process_zero=True,
                                               log_history=member_log_history(trainer.state.log_history, state.name)))
    write_outputs(task, member.data_args, member.model_args, member.training_args, state.bp_callback, final,
                  history, runtime, TrainOutput(global_step, train_loss, {}), global_step)
    write_run_complete(output_dir, task=task, global_step=global_step, ensemble=os.path.dirname(
        os.path.dirname(os.path.abspath(output_dir))), member=member.name)


__all__ = [
    "ENSEMBLE_MODES",
    "MEMBERS_DIR",
    "STACKED_CPU_MAX_FLOPS",
    "EnsembleMember",
    "EnsembleResult",
    "EnsembleTrainer",
    "check_ensemble_checkpoint",
    "choose_ensemble_mode",
    "ensemble_members",
    "is_ensemble",
    "member_log_history",
    "member_name",
    "summary_lines",
    "train_ensemble",
    "train_members",
    "trainer_style_metrics",
    "validate_ensemble",
    "validate_members",
]
