"""The noise of a finished run's last evaluation, recomputed from its weights: which BP_k it is not told apart from.

The BP-KL callback logs, at every evaluation, the paired standard error of each level's KL less the closest level's
(``eval_kl_gap_se_bp_k{k}``, :mod:`hf_treelang.train.callbacks`). A run whose history has no such key still has its
final weights and everything that made its evaluation set (``run_config.json``): :func:`final_gap_errors` rebuilds the
run's data and BP-KL callback as training did (:func:`hf_treelang.train.loop.bp_callback_for`), evaluates the saved
model once, and returns the paired errors of that last evaluation, after checking that the recomputed KL to every BP_k
is the one the run logged at its last evaluation (same data, same weights; float rounding apart). ``hf-treelang
compare --reevaluate`` uses it for the runs whose history lacks the key.

Glossary: ``k`` filter level of a BP_k.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from hf_treelang.jsonio import read_json_object
from hf_treelang.train.arguments import DataArguments
from hf_treelang.train.callbacks import KL_GAP_SE_KEY
from hf_treelang.train.folders import RUN_CONFIG, check_run_complete
from hf_treelang.train.loop import bp_callback_for
from hf_treelang.train.run import model_task_of
from hf_treelang.train.trainer import RunDataCache

from .checkpoint import load_checkpoint

# the recomputed KL must be the logged one to float rounding (the model's float32 logits on another thread count)
KL_RTOL, KL_ATOL = 1e-4, 1e-6


def _data_arguments(folder: Path, run_config: dict) -> DataArguments:
    recorded = run_config.get("data_args")
    if not isinstance(recorded, dict):
        raise ValueError(f"{str(folder / RUN_CONFIG)!r} has no data_args: the run's evaluation set cannot be rebuilt")
    known = {f.name for f in dataclasses.fields(DataArguments)}
    return DataArguments(**{name: value for name, value in recorded.items() if name in known})


def final_gap_errors(run, logged_kl: dict, *, cache: RunDataCache | None = None, device: str = "cpu") -> dict:
    """``{k: paired standard error of KL_k less the closest BP's KL}`` at the last evaluation of the finished run
    folder ``run``, recomputed from its saved weights on its own evaluation set.

    Args:
        run: a complete run folder (``run_config.json``, the final model).
        logged_kl: ``{k: KL to BP_k}`` the run logged at its last evaluation; the recomputed KLs must equal them (to
            :data:`KL_RTOL` / :data:`KL_ATOL`), else the folder's data or weights are not those of its history and a
            ValueError says so.
        cache: the data and BP targets shared by runs of the same data (built once per data config).
        device: where the model runs.
    """
    folder = Path(run)
    check_run_complete(folder)
    run_config = read_json_object(folder / RUN_CONFIG)
    if not isinstance(run_config, dict):
        raise ValueError(f"run {str(folder)!r} has no readable {RUN_CONFIG}")
    data_args = _data_arguments(folder, run_config)
    task = model_task_of(str(run_config.get("task")))
    cache = cache or RunDataCache()
    data = cache.run_data(data_args)
    training = run_config.get("training_args") or {}
    batch_size = int(training.get("per_device_eval_batch_size") or 256)
    callback = cache.bp_callback(data_args, task, lambda: bp_callback_for(data, data_args, task, batch_size))
    model = load_checkpoint(folder, task=task, device=device).model
    values = callback.compute(model)  # no gradients, eval mode: as at every evaluation of training
    for k, logged in sorted(logged_kl.items()):
        found = values.get(f"eval_kl_bp_k{k}")
        if found is None or abs(found - logged) > KL_ATOL + KL_RTOL * abs(logged):
            raise ValueError(f"run {str(folder)!r}: its saved model gives KL {found!r} to BP_{k} on its evaluation "
                             f"set, where its last logged evaluation has {logged!r}: the folder's weights or data are "
                             "not those of its history, so its last evaluation cannot be recomputed")
    prefix = f"eval_{KL_GAP_SE_KEY}"
    return {int(key[len(prefix):]): value for key, value in values.items() if key.startswith(prefix)}


def complete_last_evaluation(dynamics, run, *, cache: RunDataCache | None = None, device: str = "cpu") -> bool:
    """Give ``dynamics`` (the run's :class:`~hf_treelang.analysis.dynamics.DynamicsResult`) the paired errors of its
    last evaluation where its history has none (:func:`final_gap_errors`; the earlier evaluations stay without).
    Returns whether it recomputed them. The errors are taken against the closest level of the recomputed KLs; where
    two levels are within float rounding of each other that may be another level than the logged KLs' closest, and
    :meth:`~hf_treelang.analysis.dynamics.DynamicsResult.within_noise_of_closest` then says None (unknown)."""
    if not len(dynamics.steps) or any(not np.isnan(values[-1]) for values in dynamics.kl_gap_se.values()):
        return False
    logged = {k: float(values[-1]) for k, values in dynamics.kl.items() if np.isfinite(values[-1])}
    errors = final_gap_errors(run, logged, cache=cache, device=device)
    count = len(dynamics.steps)
    dynamics.kl_gap_se = {k: np.append(np.full(count - 1, np.nan), value) for k, value in sorted(errors.items())}
    return True


__all__ = ["KL_ATOL", "KL_RTOL", "complete_last_evaluation", "final_gap_errors"]
