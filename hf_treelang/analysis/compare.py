"""``hf-treelang compare RUN... --out DIR``: training runs of any architectures side by side against the exact oracle.

Each run folder (of ``training/run_{mlm,clm,root}.py``, any ``--model_type``) gives one row: its architecture, its
number of parameters (read from the weights' headers, nothing is loaded), its training speed (a stacked ensemble's
member says how many runs its steps trained at once), the path of the closest BP_k along training (with the levels
not told apart from the last one: within two paired standard errors, :meth:`~hf_treelang.analysis.dynamics.
DynamicsResult.within_noise_of_closest`, where the run logged them) and the climb times
t_k (:meth:`hf_treelang.analysis.dynamics.DynamicsResult.climb_times`: the first evaluation step from which the closest
BP stays at level k or below), the final KL to the matched BP_{k_train}, the final accuracy next to BP's on every
k_test, the final probability on non-symbol ids, and a causal run's excess loss. Runs that differ only in their model
seed, and in arguments that cannot change what is trained (:data:`POOLED_FIELDS`: threads, logging, folders, the data's
``use_dataset_builder``), form one group: every other recorded argument — the data, the model, the optimiser, rate,
schedule, batch, a compiler mode or backend, the device, ... — is equal once equal settings are written alike
(:func:`setting_of`; a ``--config_name`` model by the configuration its run holds). A group is
reported as mean ± sample standard deviation over its seeds, with every seed's path, and a cell that averages fewer runs
than the group has says so ("2 of 3": the climb times average the seeds that reached the level). Groups of one task and
architecture that differ in their settings are separate rows, labelled by what differs (``bert (learning_rate=0.003)``),
and the console says in one line that they were kept apart. Every run's record carries its learning rate and the command
that trains it alone.

Outputs in DIR: ``compare.md`` (the table), ``compare.json`` (every row and group), ``summary.md`` (the comparison's
sentences with their numbers, generated from ``compare.json``: :mod:`hf_treelang.analysis.compare_summary`),
``compare.csv`` (one line per run: its settings, climb times, paired errors at the end, every final metric and its
command) with ``README.md``, a dataset card whose
``configs:`` point ``datasets.load_dataset(DIR)`` at it (one row per run: the comparison shared as a results
dataset), and ``compare.png`` (the KL to the matched BP along training, one panel per task, one colour per group).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import math
import os
import struct
import typing
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from hf_treelang.core.grammar import Grammar
from hf_treelang.core.noise import difference_error, family_z, invalid_error, told_apart
from hf_treelang.dataset_builder.treelang import hierarchy_config_name
from hf_treelang.plotting import pyplot, save_figure
from hf_treelang.train.arguments import DataArguments, ModelArguments, TreeLangTrainingArguments, grammar_content_hash
from hf_treelang.train.folders import WEIGHT_FILES, check_run_complete, is_run_folder
from hf_treelang.train.run import UNKEYED_TRAINING_FIELDS, command_line, config_file_hash

from .compare_summary import ARCHITECTURE_NAMES, TASK_TITLES, summary_lines
from .dynamics import DynamicsResult, learning_dynamics
from .io import check_output_dir, cli_error, prepare_output, write_json



def grammar_of(setting: dict) -> str:
    """The grammar a run's data come from, in words: ``rhm-v8-m4-s2-L3`` (a Random Hierarchy Model, named as its
    dataset config, :func:`~hf_treelang.dataset_builder.treelang.hierarchy_config_name`) or ``q=4 ℓ=4 σ=1.0 seed 0``
    (the paper's log-normal grammar), or ``grammar sha256:<first digits> ℓ=3`` (a user's ``--grammar_file``, by its
    content). Runs of different grammars are never drawn in one panel: their KLs are on different scales."""
    data = setting.get("data_args") or {}
    if data.get("grammar_file"):  # a user's grammar: its content's digest (setting_of)
        return f"grammar {str(data['grammar_file'])[:19]} ℓ={data.get('depth')}"
    if data.get("num_rules"):
        return hierarchy_config_name(data.get("num_symbols"), data.get("num_classes") or data.get("num_symbols"),
                                     data["num_rules"], data.get("arity"), data.get("depth"),
                                     data.get("grammar_seed") or 0)
    return (f"q={data.get('num_symbols')} ℓ={data.get('depth')} σ={data.get('sigma')} "
            f"seed {data.get('grammar_seed')}")


@dataclass
class RunRow:
    """One run of the comparison (see the module docstring)."""

    path: str
    task: str
    architecture: str
    seed: int
    group: str
    setting: dict
    grammar: str
    learning_rate: float | None
    command: str | None
    parameters: int
    steps: int
    steps_per_second: float | None
    stacked_members: int  # the runs trained at once as one stacked model with this one (1: alone)
    k_train: int
    path_of_closest: list
    within_noise_at_end: list | None  # levels within 2 paired standard errors of the last closest BP (None: unknown)
    climb_times: dict
    final_kl_matched: float | None
    accuracy: dict
    bp_accuracy: dict
    mass_on_special_tokens: float | None
    excess_loss: float | None
    dynamics: DynamicsResult = field(repr=False)
    final: dict = field(default_factory=dict)  # every final metric of metrics.json (numbers only)
    stacked_at_least: bool = False  # stacked_members is a lower bound: a member that did not record it, counted
    kl_at_end: dict = field(default_factory=dict)  # k -> KL(BP_k ‖ model) at the last evaluation
    kl_gap_se_at_end: dict = field(default_factory=dict)  # k -> paired standard error of KL_k less the closest's there
    returns: list = field(default_factory=list)  # back above a level reached before, beyond noise (:func:`returns_up`)


def count_parameters(folder: Path) -> int:
    """The parameters of a run's ``model.safetensors``, from the file's header (no tensor is read)."""
    path = folder / "model.safetensors"
    if not path.is_file():
        raise ValueError(f"run {str(folder)!r} has no model.safetensors: compare reads runs written by the training "
                         f"scripts")
    with open(path, "rb") as handle:
        size = struct.unpack("<Q", handle.read(8))[0]
        header = json.loads(handle.read(size))
    return int(sum(int(np.prod(entry["shape"])) for name, entry in header.items() if name != "__metadata__"))


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{str(path)!r} is not readable JSON ({error})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{str(path)!r} holds no JSON object")
    return value


def _integer(value, name: str, path: Path) -> int:
    """``value`` as an int, or a ValueError naming the file and the key that hold something else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{str(path)!r}: {name} must be an integer, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{str(path)!r}: {name} must be an integer, got {value!r}") from None
    if not number.is_integer():
        raise ValueError(f"{str(path)!r}: {name} must be an integer, got {value!r}")
    return int(number)


# Recorded arguments that cannot change what a run trains, so that runs differing in them still pool as seeds: the
# model seed, the training fields that a run's identity leaves out because they cannot change its result
# (UNKEYED_TRAINING_FIELDS: folders, logging, threads, the Hub, ...), and the data's use_dataset_builder (the dataset
# builder and sample_trees draw the same bytes, hf_treelang.train.data). Every other recorded argument, keyed by the
# identity or not (a compiler mode or backend, the device, a field a new transformers release adds), may change the
# result and keeps runs apart.
POOLED_FIELDS = {"data_args": ("use_dataset_builder",), "model_args": (),
                 "training_args": ("seed", *UNKEYED_TRAINING_FIELDS)}
ARGUMENT_CLASSES = {"data_args": DataArguments, "model_args": ModelArguments,
                    "training_args": TreeLangTrainingArguments}
MODEL_CONFIG_UNSET = ("transformers_version", "_name_or_path")  # config.json keys that do not define the model


def _default(spec: dataclasses.Field):
    if spec.default is not dataclasses.MISSING:
        return spec.default
    if spec.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return spec.default_factory()  # type: ignore[misc]
    return None


def _admits_none(hint) -> bool:
    return hint is None or type(None) in typing.get_args(hint)


def recorded_arguments(kind: str, values: dict) -> dict:
    """One argument dataclass's recorded values (``kind``: ``data_args``, ``model_args`` or ``training_args`` of
    ``run_config.json``) with the :data:`POOLED_FIELDS` left out and equal settings written alike: a field the record
    lacks, or holds as None where the field takes no None, at its default (a record written before the field
    existed trained at it); numbers of float fields as floats (``1`` and ``1.0``)."""
    cls = ARGUMENT_CLASSES[kind]
    hints = typing.get_type_hints(cls)
    fields = {spec.name: spec for spec in dataclasses.fields(cls) if spec.init}
    out = {}
    for name in sorted(set(fields) | set(values)):
        if name in POOLED_FIELDS[kind]:
            continue
        value = values.get(name)
        if name in fields and value is None and (name not in values or not _admits_none(hints.get(name))):
            value = _default(fields[name])
        options = typing.get_args(hints.get(name)) or (hints.get(name),)
        if float in options and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        out[name] = value
    return out


def model_config_identity(folder: Path) -> str:
    """``sha256:<hex>`` of the model a run folder holds (its ``config.json``, but for the keys that name no property of
    the model: :data:`MODEL_CONFIG_UNSET`): what a ``--config_name`` file built, wherever the run was started from."""
    config = _read_json(folder / "config.json")
    kept = {key: value for key, value in config.items() if key not in MODEL_CONFIG_UNSET}
    return "sha256:" + hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def setting_of(run_config: dict, folder: Path | None = None) -> dict:
    """Everything of a run's recorded arguments that may change what it trains but the model seed: every data, model
    and training argument but the :data:`POOLED_FIELDS`, equal settings written alike (:func:`recorded_arguments`:
    ``qk_learning_rate_multiplier`` absent and 1.0 are one setting); the number of layers and the test levels as the
    run resolved them; and a ``--config_name`` model by the configuration the run folder holds
    (:func:`model_config_identity`; without ``folder``, by the file's content), never by a path that a relative name
    would resolve against the working folder."""
    data, model, training = (recorded_arguments(kind, run_config.get(kind) or {}) for kind in ARGUMENT_CLASSES)
    if data.get("k_test") is None and isinstance(data.get("depth"), int):
        data["k_test"] = list(range(data["depth"] + 1))  # DataArguments.test_levels: every level 0..ℓ
    if model.get("num_hidden_layers") is None:
        model["num_hidden_layers"] = data.get("depth")  # ModelArguments.model_kwargs: one layer per level
    if model.get("config_name"):
        model["config_name"] = (model_config_identity(folder) if folder is not None
                                else config_file_hash(model["config_name"]))
    if data.get("grammar_file"):  # a user's grammar by its content, as the run's identity holds it
        grammar = Grammar.load(folder / "grammar.json" if folder is not None else data["grammar_file"])
        data["grammar_file"] = "sha256:" + grammar_content_hash(grammar)
    return {"task": run_config.get("task"), "data_args": data, "model_args": model, "training_args": training}


def command_of(folder: Path, run_config: dict) -> str | None:
    """The command that trains the run alone: recorded in ``run_config.json``, or rebuilt from the arguments of the
    sweep's ``run_identity.json`` (runs started before the command was recorded); None when neither has it."""
    if run_config.get("command"):
        return str(run_config["command"])
    identity = folder / "run_identity.json"
    if not identity.is_file():
        return None
    record = _read_json(identity)
    return command_line(str(record.get("task")), record.get("arguments") or {}, folder)


def _at(values, i: int) -> float | None:
    value = float(values[i]) if values is not None and i < len(values) else math.nan
    return value if math.isfinite(value) else None


def returns_up(dynamics: DynamicsResult) -> list:
    """The evaluations at which a run is closest to a BP_k above a level it had been closest to before, told apart
    from that level (:func:`hf_treelang.core.noise.told_apart`): one dict per such evaluation, ``step``, ``level``
    (the closest there), ``below`` (the lowest level closest before), ``gap`` (KL_below − KL_level, nats), ``error``
    (its standard error: the paired one where the run logged it, else the sum of the two KLs' errors, the bound for
    any correlation, :func:`~hf_treelang.core.noise.difference_error`) and ``paired``. Since a return at any of the
    m evaluations after the first would count, each is tested at :func:`~hf_treelang.core.noise.family_z` (m). An
    evaluation without either error tells nothing: no return is claimed there."""
    closest = dynamics.closest_bp
    z = family_z(max(len(closest) - 1, 1))
    found = []
    for i in range(1, len(closest)):
        below, level = min(closest[:i]), closest[i]
        if level <= below:
            continue
        kl_below, kl_level = _at(dynamics.kl.get(below), i), _at(dynamics.kl.get(level), i)
        if kl_below is None or kl_level is None:
            continue
        gap = kl_below - kl_level
        paired = _at(dynamics.kl_gap_se.get(below), i)
        first, second = _at(dynamics.kl_se.get(below), i), _at(dynamics.kl_se.get(level), i)
        if paired is not None and not invalid_error(paired):
            error = paired
        elif first is not None and second is not None and not invalid_error(first) and not invalid_error(second):
            error = difference_error(first, second, same_inputs=True)
        else:
            continue
        if told_apart(gap, error, z):
            found.append({"step": int(dynamics.steps[i]), "level": int(level), "below": int(below),
                          "gap": float(gap), "error": float(error), "paired": paired is not None})
    return found


def read_run(run, *, reevaluate: bool = False, cache=None, skipped: list | None = None) -> RunRow:
    """The comparison row of one finished run folder; with ``reevaluate``, the paired errors of a last evaluation
    whose history lacks them are recomputed from the saved weights
    (:func:`~hf_treelang.analysis.final_noise.complete_last_evaluation`, ``cache`` sharing the data of runs). A run
    whose weights do not give its logged KLs raises, or, given a ``skipped`` list, is read without the errors and
    the reason appended there."""
    folder = Path(run)
    if not folder.is_dir():
        raise ValueError(f"run {str(folder)!r} is not a folder: compare reads the output folders of the training "
                         f"scripts")
    check_run_complete(folder)
    run_config = _read_json(folder / "run_config.json")
    metrics = _read_json(folder / "metrics.json")
    task = run_config.get("task")
    data, model, training = (run_config.get(key) or {} for key in ("data_args", "model_args", "training_args"))
    architecture = model.get("model_type") or "treelang"
    if architecture == "treelang":
        layers = model.get("num_hidden_layers") or data.get("depth")
        shape = f"d={model.get('hidden_size')},layers={layers},d'={model.get('intermediate_size')}"
    else:
        shape = model.get("config_overrides") or ""
    seed = _integer(training.get("seed", 0), "training_args.seed", folder / "run_config.json")
    setting = setting_of(run_config, folder)
    group = json.dumps({**setting, "shape": shape, "steps": metrics.get("global_step")}, sort_keys=True, default=str)
    dynamics = learning_dynamics(folder)
    if reevaluate:
        from .final_noise import complete_last_evaluation  # lazy: builds data and loads models

        try:
            complete_last_evaluation(dynamics, folder, cache=cache)
        except ValueError as error:
            if skipped is None:
                raise
            skipped.append(str(error))
    final = metrics.get("final") or {}
    k_train = _integer(data.get("k_train", 0), "data_args.k_train", folder / "run_config.json")
    runtime = metrics.get("train_runtime_s")
    if runtime is not None and (isinstance(runtime, bool) or not isinstance(runtime, (int, float))):
        raise ValueError(f"{str(folder / 'metrics.json')!r}: train_runtime_s must be a number, got {runtime!r}")
    steps = _integer(metrics.get("global_step", 0), "global_step", folder / "metrics.json")
    completion = _read_json(folder / "run_complete.json")
    stacked = completion.get("stacked_members", 1 if "ensemble" not in completion else 0)
    levels = sorted(dynamics.accuracy)
    return RunRow(
        path=str(folder), task=str(task), architecture=architecture, seed=seed, group=group, setting=setting,
        grammar=grammar_of(setting),
        learning_rate=training.get("learning_rate"), command=command_of(folder, run_config),
        parameters=count_parameters(folder), steps=steps,
        steps_per_second=steps / runtime if runtime else None,
        stacked_members=_integer(stacked, "stacked_members", folder / "run_complete.json"), k_train=k_train,
        path_of_closest=dynamics.alignment_sequence,
        within_noise_at_end=(dynamics.within_noise_of_closest() or [None])[-1],
        climb_times=dynamics.climb_times(),
        final_kl_matched=final.get(f"eval_kl_bp_k{k_train}"),
        accuracy={k: final.get(f"eval_acc_ktest{k}") for k in levels},
        bp_accuracy={k: final.get(f"eval_bp_acc_ktest{k}") for k in levels},
        mass_on_special_tokens=final.get("eval_mass_on_special_tokens"),
        excess_loss=final.get("eval_excess_loss") if task == "clm" else None,
        dynamics=dynamics,
        final={key: value for key, value in sorted(final.items())
               if isinstance(value, (int, float)) and not isinstance(value, bool)},
        kl_at_end={k: _at(values, len(values) - 1) for k, values in sorted(dynamics.kl.items())},
        kl_gap_se_at_end={k: _at(values, len(values) - 1) for k, values in sorted(dynamics.kl_gap_se.items())},
        returns=returns_up(dynamics),
    )


def rerun_check_row(published, rerun, *, reevaluate: bool = False, cache=None) -> dict:
    """A published run and the same run re-trained from its command elsewhere (other threads, another machine), side
    by side, for a re-run check's record: for each, its command, every level's KL along training, and at the last
    evaluation every level's KL and paired error (``reevaluate``: recomputed from the weights where the history lacks
    them, :func:`read_run`), its path of closest BP_k and the levels not told apart from its last closest one; and
    the difference of the two final KLs to BP_{k_train}. Refuses two runs of different settings, seeds or
    evaluation steps: they are not one run trained twice."""
    first, second = (read_run(run, reevaluate=reevaluate, cache=cache) for run in (published, rerun))
    if first.group != second.group or first.seed != second.seed:
        fields = ", ".join(differences([first.setting, second.setting])) or f"seed {first.seed} and {second.seed}"
        raise ValueError(f"runs {first.path!r} and {second.path!r} are not one run trained twice (they differ in "
                         f"{fields})")
    if list(first.dynamics.steps) != list(second.dynamics.steps):
        raise ValueError(f"runs {first.path!r} and {second.path!r} were evaluated at different steps")

    def side(row: RunRow) -> dict:
        return {"command": row.command, "kl_bp": {k: list(map(float, v)) for k, v in sorted(row.dynamics.kl.items())},
                "kl_at_end": row.kl_at_end, "kl_gap_se_at_end": row.kl_gap_se_at_end,
                "path_of_closest": row.path_of_closest, "within_noise_at_end": row.within_noise_at_end}

    k = first.k_train
    name = f"{ARCHITECTURE_NAMES.get(first.architecture, first.architecture)} {TASK_TITLES.get(first.task, first.task)}"
    return {"run": Path(first.path).name, "name": f"{name} seed {first.seed}", "k_train": k,
            "steps": [int(step) for step in first.dynamics.steps], "published": side(first), "rerun": side(second),
            "difference": second.kl_at_end[k] - first.kl_at_end[k]}


def count_stacked(rows) -> list:
    """``rows`` with the stacked model's size of every run trained in a stacked ensemble that did not record it (0:
    written before the count was): at least the runs given that name the same ensemble folder in
    ``run_complete.json`` (a path relative to the run's folder, or an absolute one), and at least two (a stacked
    ensemble has two members or more); such a count is marked a lower bound (``stacked_at_least``), since members
    that were not given are not counted."""
    rows = list(rows)
    ensembles = [_read_json(Path(row.path) / "run_complete.json").get("ensemble") for row in rows]
    ensembles = [None if e is None else os.path.normpath(os.path.join(row.path, e)) for row, e in zip(rows, ensembles)]
    for row, ensemble in zip(rows, ensembles):
        if row.stacked_members == 0:
            row.stacked_members = max(ensembles.count(ensemble), 2)
            row.stacked_at_least = True
    return rows


def _spread(values: list) -> dict:
    present = np.array([v for v in values if v is not None], dtype=float)
    return {"mean": float(present.mean()) if present.size else None,
            "std": float(present.std(ddof=1)) if present.size > 1 else None, "runs": int(present.size)}


def _shown(spread: dict, digits: int = 3, of: int | None = None) -> str:
    """``mean ± std``; with ``of`` (the group's runs), `` (2 of 3)`` when fewer runs have a value."""
    if spread["mean"] is None:
        return "–"
    text = f"{spread['mean']:.{digits}f}"
    text = text if spread["std"] is None else f"{text} ± {spread['std']:.{digits}f}"
    return text if of is None or spread["runs"] >= of else f"{text} ({spread['runs']} of {of})"


def _flat(setting: dict) -> dict:
    """``{"training_args.learning_rate": 0.001, ...}``: a setting's leaves by their dotted names."""
    flat = {}
    for part, values in setting.items():
        if isinstance(values, dict):
            flat.update({f"{part}.{name}": json.dumps(value, sort_keys=True, default=str)
                         for name, value in values.items()})
        else:
            flat[part] = json.dumps(values, sort_keys=True, default=str)
    return flat


def differences(settings: list) -> list:
    """The dotted names of the fields in which ``settings`` differ (in sorted order)."""
    flats = [_flat(setting) for setting in settings]
    names = sorted(set().union(*flats))
    return [name for name in names if len({flat.get(name) for flat in flats}) > 1]


def group_rows(rows: list) -> list:
    """The rows grouped by everything but the seed: one dict per group, in the order of first appearance. Groups of
    one task, grammar and architecture with different settings get a ``label`` naming what differs (else the
    architecture) and ``differs_in`` (the fields). Two runs of one setting and seed are refused: the same run
    trained twice is not two seeds."""
    groups: dict = {}
    for row in rows:
        twin = next((other for other in groups.get(row.group, []) if other.seed == row.seed), None)
        if twin is not None:  # pooled, one run would count twice as two seeds
            raise ValueError(f"runs {twin.path!r} and {row.path!r} have the same setting and the same seed "
                             f"({row.seed}): one run trained twice; pass one of them")
        groups.setdefault(row.group, []).append(row)
    by_kind: dict = {}
    for key, members in groups.items():
        by_kind.setdefault((members[0].task, members[0].grammar, members[0].architecture), []).append(key)
    labels, differing = {}, {}
    for (_, _, architecture), keys in by_kind.items():
        fields = differences([groups[key][0].setting for key in keys]) if len(keys) > 1 else []
        for key in keys:
            flat = _flat(groups[key][0].setting)
            shown = ", ".join(f"{name.split('.')[-1]}={json.loads(flat[name]) if name in flat else '–'}"
                              for name in fields)
            labels[key] = f"{architecture} ({shown})" if fields else architecture
            differing[key] = fields
    out = []
    for key, members in groups.items():
        first = members[0]
        levels = sorted(first.accuracy)
        out.append({
            "task": first.task, "grammar": first.grammar, "architecture": first.architecture, "label": labels[key],
            "differs_in": differing[key], "learning_rate": first.learning_rate,
            "seeds": [row.seed for row in members],
            "runs": [row.path for row in members], "parameters": first.parameters, "steps": first.steps,
            "steps_per_second": _spread([row.steps_per_second for row in members]),
            "stacked_members": max(row.stacked_members for row in members),
            "stacked_at_least": any(row.stacked_at_least for row in members),
            "paths_of_closest": [row.path_of_closest for row in members],
            "within_noise_at_end": [row.within_noise_at_end for row in members],
            "climb_times": {k: _spread([row.climb_times.get(k) for row in members]) for k in sorted(first.climb_times)},
            "final_kl_matched": _spread([row.final_kl_matched for row in members]),
            "accuracy": {k: _spread([row.accuracy.get(k) for row in members]) for k in levels},
            "bp_accuracy": {k: _spread([row.bp_accuracy.get(k) for row in members]) for k in levels},
            "mass_on_special_tokens": _spread([row.mass_on_special_tokens for row in members]),
            "excess_loss": _spread([row.excess_loss for row in members]),
            "k_train": first.k_train,
        })
    return out


def markdown_table(groups: list) -> str:
    """The comparison as one markdown table (a row per group; ± is the standard deviation over the seeds)."""
    header = ("| task | grammar | architecture | seeds | parameters | steps | steps/s | closest BP_k along training | "
              "t_k (k = ℓ … 0) | "
              "final KL to BP_{k_train} | accuracy k_test=0 (model / BP) | accuracy per k_test (model) | "
              "off-symbol mass | excess loss |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for group in groups:
        n = len(group["seeds"])
        paths = closest_paths(group)
        times = ", ".join("–" if t["mean"] is None else f"{t['mean']:.0f}" + ("" if t["runs"] >= n else
                                                                             f" ({t['runs']} of {n})")
                          for _, t in sorted(group["climb_times"].items(), reverse=True))
        levels = sorted(group["accuracy"])
        first = levels[0] if levels else None
        accuracy0 = "–" if first is None else \
            f"{_shown(group['accuracy'][first], of=n)} / {_shown(group['bp_accuracy'][first], of=n)}"
        per_level = " ".join(_shown(group["accuracy"][k], 2).split(" ± ")[0] for k in levels)
        lines.append(
            f"| {TASK_TITLES.get(group['task'], group['task'])} | {group['grammar']} | {group['label']} | {n} | "
            f"{group['parameters']:,} | {group['steps']:,} | {_speed(group, n)} | {paths} | "
            f"{times} | "
            f"{_shown(group['final_kl_matched'], of=n)} | {accuracy0} | {per_level} | "
            f"{_shown(group['mass_on_special_tokens'], of=n)} | {_shown(group['excess_loss'], of=n)} |")
    return "\n".join(lines) + "\n"


def closest_paths(group: dict) -> str:
    """Each run's closest BP_k along training, ``; ``-separated; where other levels are within two paired standard
    errors of the last one, they follow it in parentheses (``4 → 3 → 2 → 1 (≈ 0)``: BP_1 closest at the end, BP_0
    not told apart from it)."""
    paths = group["paths_of_closest"]
    shown = []
    for path, noise in zip(paths, group.get("within_noise_at_end") or [None] * len(paths)):
        others = [k for k in noise or [] if k not in path[-1:]]
        shown.append(" → ".join(map(str, path)) + (f" (≈ {', '.join(map(str, others))})" if others else ""))
    return "; ".join(shown)


def _speed(group: dict, runs: int) -> str:
    """The steps/s cell: a stacked ensemble's steps/s train all its members at once, and the cell says how many."""
    shown = _shown(group["steps_per_second"], 1, runs)
    stacked = group.get("stacked_members", 1)
    at_least = "≥" if group.get("stacked_at_least") else ""
    return shown if stacked <= 1 or shown == "–" else f"{shown} (×{at_least}{stacked} stacked)"


def plot_comparison(rows: list, title: str = "", labels: dict | None = None):
    """Per task and grammar (columns): the KL to the matched BP along training (top) and the closest BP_k along
    training (bottom: the climb down the hierarchy), one colour per group (``labels``: group key → its label, default
    the architecture), a line per seed; log step axis from step 1."""
    grammars = list(dict.fromkeys(row.grammar for row in rows))
    panels = [(task, grammar) for task in TASK_TITLES for grammar in grammars
              if any(row.task == task and row.grammar == grammar for row in rows)]
    labels = labels or {}
    name_of = {row.path: labels.get(row.group, row.architecture) for row in rows}
    colours = {name: f"C{i % 10}" for i, name in enumerate(sorted(set(name_of.values())))}
    plt = pyplot()
    figure, axes = plt.subplots(2, len(panels), figsize=(5.2 * len(panels), 7.0), squeeze=False, sharex="col")
    for column, (task, grammar) in enumerate(panels):
        top, bottom = axes[0][column], axes[1][column]
        labelled = set()
        members = [r for r in rows if r.task == task and r.grammar == grammar]
        for offset, row in enumerate(members):
            curve = row.dynamics.kl.get(row.k_train)
            if curve is None:
                continue
            shown = row.dynamics.steps > 0  # a log axis: the evaluation before training is the curves' start
            steps = row.dynamics.steps[shown]
            name = name_of[row.path]
            label = None if name in labelled else name
            labelled.add(name)
            top.plot(steps, np.asarray(curve)[shown], color=colours[name], label=label, lw=1.4,
                     alpha=0.85)
            closest = np.asarray(row.dynamics.closest_bp, dtype=float)[shown]
            jitter = 0.08 * (offset - (len(members) - 1) / 2) / max(len(members), 1)  # lines side by side
            bottom.step(steps, closest + jitter, where="post", color=colours[name], lw=1.4, alpha=0.85)
        top.set_xscale("log")
        top.set_yscale("log")
        top.set_ylabel("KL(BP_k_train ‖ model), nats")
        top.set_title(f"{TASK_TITLES[task]} prediction" + (f"\n{grammar}" if len(grammars) > 1 else ""))
        top.legend(fontsize=8)
        levels = sorted({k for row in members for k in row.dynamics.kl})
        bottom.set_yticks(levels)
        bottom.set_ylim(max(levels, default=1) + 0.5, min(levels, default=0) - 0.5)  # the climb: BP_ℓ up to BP_0
        bottom.set_ylabel("closest BP_k")
        bottom.set_xlabel("step")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure


def check_out_holds_no_run(out_dir, runs: list) -> None:
    """Refuse an output folder that is, or lies inside, one of the compared ``runs`` or any run folder, or that holds a
    model: compare's ``README.md`` (the dataset card) would replace the model card there."""
    out = Path(out_dir).expanduser().resolve()
    compared = {Path(run).expanduser().resolve(): str(run) for run in runs}
    for folder in (out, *out.parents):
        if folder in compared:
            raise ValueError(f"--out {str(out_dir)!r} is {'' if folder == out else 'inside '}the compared run "
                             f"{compared[folder]!r}: its README.md (the model card) would be replaced; write the "
                             f"comparison elsewhere")
        model = folder == out and any((folder / name).is_file() for name in ("config.json", *WEIGHT_FILES))
        if is_run_folder(folder) or model:
            raise ValueError(f"--out {str(out_dir)!r} is {'' if folder == out else 'inside '}the run or model "
                             f"folder {str(folder)!r}: its README.md (the model card) would be replaced; write the "
                             f"comparison elsewhere")


def compare(runs: list, out_dir, *, title: str = "", reevaluate: bool = False, progress: bool = True) -> dict:
    """Read every run, then write ``compare.{md,json,csv,png}`` into ``out_dir``; returns the paths and groups.

    ``reevaluate``: recompute the last evaluation of every run whose history lacks the paired errors that tell the
    closest BP_k from the others (:func:`read_run`), with a progress bar over the runs (``progress``); a run whose
    weights do not give its logged KLs (trained on another device's arithmetic, say) keeps none, and
    ``not_reevaluated`` says why."""
    if not runs:
        raise ValueError("compare needs at least one run folder")
    check_output_dir(out_dir)
    check_out_holds_no_run(out_dir, runs)
    cache = None
    if reevaluate:
        from hf_treelang.train.trainer import RunDataCache  # lazy: only a re-evaluation builds data

        cache = RunDataCache()
    listed = tqdm(runs, desc="re-evaluating", unit="run", leave=False, disable=not (reevaluate and progress))
    skipped: list = []
    rows = count_stacked(read_run(run, reevaluate=reevaluate, cache=cache, skipped=skipped) for run in listed)
    groups = group_rows(rows)
    figure = plot_comparison(rows, title, {row.group: group["label"] for group in groups for row in rows
                                           if row.path in group["runs"]})
    payload = {"groups": groups, "runs": [{key: value for key, value in vars(row).items() if key != "dynamics"}
                                          for row in rows]}
    summary = summary_lines(json.loads(json.dumps(payload, default=str)))  # as compare.json will read back
    records = dataset_records(rows, groups)
    columns = dataset_columns(records)
    table = StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=columns)
    writer.writeheader()
    writer.writerows(records)
    out = prepare_output(out_dir)  # everything is computed: the files follow
    (out / "compare.md").write_text(markdown_table(groups))
    write_json(out / "compare.json", payload)
    (out / "summary.md").write_text("\n".join(summary) + "\n")
    (out / "compare.csv").write_bytes(table.getvalue().encode())
    (out / "README.md").write_text(dataset_card(columns, len(records), title,
                                                 table_config_name(table.getvalue().encode())))
    save_figure(figure, out / "compare.png")
    return {"groups": groups, "kept_apart": kept_apart_lines(groups), "not_reevaluated": skipped,
            "files": [out / name for name in ("compare.md", "compare.json", "summary.md", "compare.csv", "README.md",
                                                "compare.png")]}


# the dataset's fixed columns, in order, with what each holds (the final metrics and climb times follow)
DATASET_COLUMNS = {
    "run": "the run's folder",
    "task": "root, mlm (masked leaf) or clm (next leaf)",
    "grammar": "the grammar of its data: rhm-v<v>-m<m>-s<s>-L<L> (a Random Hierarchy Model) or q ℓ σ seed (the "
               "paper's log-normal grammar)",
    "architecture": "the model type (treelang: the paper's encoder)",
    "group": "the row of compare.md this run averages into: its architecture and what sets it apart from the other "
             "groups of that architecture and task",
    "seed": "the model seed",
    "learning_rate": "the learning rate it was trained at",
    "parameters": "the model's parameters (from the weights' header)",
    "steps": "optimizer steps trained",
    "steps_per_second": "its training speed on the machine that trained it (not a speed comparison; a stacked "
                        "ensemble's steps train all its members at once)",
    "stacked_members": "how many runs trained at once as one stacked model with this one (1: alone)",
    "stacked_at_least": "whether stacked_members is a lower bound (a member that did not record it, counted among "
                        "the compared runs that name its ensemble)",
    "k_train": "the filter level of its training data",
    "path_of_closest": "the closest BP_k along training, repeats collapsed (e.g. 4-3-2-0)",
    "within_noise_at_end": "the levels k whose KL at the last evaluation is within two paired standard errors of the "
                           "closest BP's (e.g. 0-1: BP_0 and BP_1 not told apart; empty: errors not logged), among "
                           "the BP_k defined on every evaluation input",
    "returns": "the evaluations at which the run is back at a BP_k above a level it had been closest to, told apart "
               "from it (step:level>lowest level before, ;-separated; empty: none)",
    "command": "the command that trains this run alone",
}


def dataset_records(rows: list, groups: list) -> list:
    """One dict per run for the dataset file: :data:`DATASET_COLUMNS`, then ``t_k`` (the climb times, empty where a
    level was not reached), ``kl_gap_se_bp_k<k>`` (the paired errors at the last evaluation) and every final metric
    of ``metrics.json`` under its own key."""
    label = {path: group["label"] for group in groups for path in group["runs"]}
    records = []
    for row in rows:
        record = {"run": row.path, "task": row.task, "grammar": row.grammar, "architecture": row.architecture,
                  "group": label[row.path],
                  "seed": row.seed, "learning_rate": row.learning_rate, "parameters": row.parameters,
                  "steps": row.steps, "steps_per_second": row.steps_per_second,
                  "stacked_members": row.stacked_members, "stacked_at_least": row.stacked_at_least,
                  "k_train": row.k_train,
                  "path_of_closest": "-".join(map(str, row.path_of_closest)),
                  "within_noise_at_end": "-".join(map(str, row.within_noise_at_end or [])),
                  "returns": ";".join(f"{r['step']}:{r['level']}>{r['below']}" for r in row.returns),
                  "command": row.command}
        record.update({f"t_{k}": time for k, time in sorted(row.climb_times.items(), reverse=True)})
        record.update({f"kl_gap_se_bp_k{k}": error for k, error in row.kl_gap_se_at_end.items()})
        record.update(row.final)
        records.append(record)
    return records


def dataset_columns(records: list) -> list:
    """The fixed columns, then the climb times, the paired errors and the final metrics of every run (their union,
    sorted)."""
    extra = sorted({key for record in records for key in record} - set(DATASET_COLUMNS),
                   key=lambda key: (not key.startswith("t_"), not key.startswith("kl_gap_se_"), key))
    return [*DATASET_COLUMNS, *extra]


def table_config_name(table: bytes) -> str:
    """The name of a compare folder's one dataset config: ``runs-<sha256 of compare.csv>``. ``datasets`` keys its
    cache by the folder's name and the card, not by the files' content, so a config named by the content is what keeps
    ``load_dataset(DIR)`` from serving a table cached from an earlier ``compare`` into DIR (or another folder of the
    same name)."""
    return f"runs-{hashlib.sha256(table).hexdigest()[:16]}"


def dataset_card(columns: list, num_runs: int, title: str, config_name: str = "default") -> str:
    """The dataset card (README.md) of a compare folder: its ``configs:`` front matter points ``load_dataset(DIR)``
    at ``compare.csv`` (one row per run) as its one config, ``config_name`` (:func:`table_config_name`), and it says
    what each column holds."""
    described = []
    for column in columns:
        if column in DATASET_COLUMNS:
            described.append(f"- `{column}`: {DATASET_COLUMNS[column]}")
        elif column.startswith("t_"):
            described.append(f"- `{column}`: the first evaluation step from which the closest BP stays at level "
                             f"≤ {column[2:]} (empty: never)")
        elif column.startswith("kl_gap_se_bp_k"):
            described.append(f"- `{column}`: the paired standard error of KL(BP_{column[14:]} ‖ model) less the "
                             "closest BP's at the last evaluation, over the same sequences (0 for the closest; empty: "
                             "not logged nor recomputed)")
        else:
            described.append(f"- `{column}`: the run's final `{column}` (metrics.json; `eval_kl_bp_k<k>` mean "
                             "KL(BP_k ‖ model) in nats, `eval_acc_ktest<k>` / `eval_bp_acc_ktest<k>` the model's and "
                             "the matched BP's accuracy on k_test = k)")
    return results_card(config_name, "compare.csv", title or "Architectures against the exact BP oracle",
                        f"One row per training run ({num_runs} runs), written by `hf-treelang compare`; `compare.md` "
                        "averages them per group (the runs that differ only in their seed).", described)


def results_card(config_name: str, data_file: str, title: str, intro: str, described: list) -> str:
    """The dataset card (README.md) of a results folder: its ``configs:`` front matter points
    ``datasets.load_dataset(DIR)`` at ``data_file`` (one row per run) as its one config, ``config_name``
    (:func:`table_config_name`), then ``intro``, how to load it and ``described`` (a line per column)."""
    return "\n".join([
        "---", "configs:", f"- config_name: {config_name}", f"  data_files: {data_file}", "  default: true", "tags:",
        "- hf-treelang",
        "- belief-propagation", "- results", "---", "", f"# {title}",
        "", f"{intro} Load it with `datasets.load_dataset(\"path/to/this/"
        "folder\")` (split `train`; its one config is named by the table's content, so that a cached earlier table "
        "is never served).", "", "## Columns", "", *described, ""])


def kept_apart_lines(groups: list) -> list:
    """One line per task, grammar and architecture whose runs differ in more than the seed: the groups were kept
    apart."""
    lines, seen = [], set()
    for group in groups:
        kind = (group["task"], group["grammar"], group["architecture"])
        if group["differs_in"] and kind not in seen:
            seen.add(kind)
            count = sum(1 for g in groups if (g["task"], g["grammar"], g["architecture"]) == kind)
            fields = ", ".join(name.split(".")[-1] for name in group["differs_in"])
            lines.append(f"not pooled: the {group['architecture']} {group['task']} runs differ in {fields}, so they "
                         f"are {count} groups, not seeds of one")
    return lines


def run(args) -> int:
    """``hf-treelang compare`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    try:
        result = compare(list(args.runs), args.out, title=args.title, reevaluate=args.reevaluate,
                         progress=not args.no_progress)
    except (ValueError, TypeError) as error:
        return cli_error("compare", error)
    for line in result["kept_apart"]:
        print(line)
    for reason in result["not_reevaluated"]:
        print(f"not re-evaluated (its paths show no ≈): {reason}")
    for group in result["groups"]:
        paths = closest_paths(group)
        print(f"{group['task']:>4} {group['label']:<12} {len(group['seeds'])} seed(s) · "
              f"{group['parameters']:,} parameters · closest BP_k {paths} · final KL to BP_{group['k_train']} "
              f"{_shown(group['final_kl_matched'])}")
    print(f"wrote {', '.join(str(path) for path in result['files'])}")
    return 0


__all__ = ["POOLED_FIELDS", "RunRow", "check_out_holds_no_run", "command_of", "compare", "count_parameters",
           "differences", "grammar_of", "group_rows", "kept_apart_lines", "markdown_table", "model_config_identity",
           "read_run", "recorded_arguments", "rerun_check_row", "results_card", "returns_up", "setting_of",
           "table_config_name"]
