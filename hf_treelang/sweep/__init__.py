"""Sweeps: many training runs as data, on an existing engine (worker processes, or SLURM job arrays via submitit).

Layer: above :mod:`hf_treelang.train` (one run: :func:`hf_treelang.train.loop.train` with ``reuse=True``,
identity-checked and resumable), below :mod:`hf_treelang.analysis` and :mod:`hf_treelang.reproduce`, which run their trainings through it.

* :mod:`~hf_treelang.sweep.spec` — the SPEC ``{"task", "base", "grid"}`` and its grid points;
* :mod:`~hf_treelang.sweep.runner` — planning (validation, identities, runs packed to train together), the local and
  submitit executors, ``results.jsonl``, ``--status``, and ``hf-treelang sweep``'s ``run``;
* :mod:`~hf_treelang.sweep.estimate` — optimizer steps and measured steps/s, the time estimates;
* :mod:`~hf_treelang.sweep.figure` — the grid figure, redrawn as runs finish.

Example (a 2 x 2 grid of root-classification runs)::

    from hf_treelang.sweep import run_sweep
    spec = {"task": "root", "base": {"depth": 2, "num_train": 256, "num_train_epochs": 2.0},
            "grid": {"k_train": [0, 2], "seed": [0, 1]}}
    result = run_sweep(spec, "outputs/sweep", workers=2)   # OUT/runs/k_train=0,seed=0/ ... OUT/results.jsonl

Submodules load on first use of a name: ``import hf_treelang.sweep`` imports nothing heavy.
"""

from hf_treelang.lazy import lazy_attributes

_LAZY = {
    "SweepSpec": "hf_treelang.sweep.spec",
    "load_spec": "hf_treelang.sweep.spec",
    "sweep_run": "hf_treelang.sweep.runner",
    "SweepResult": "hf_treelang.sweep.runner",
    "execute_runs": "hf_treelang.sweep.runner",
    "run_sweep": "hf_treelang.sweep.runner",
    "sweep_status": "hf_treelang.sweep.runner",
    "read_results": "hf_treelang.sweep.runner",
    "estimate": "hf_treelang.sweep.estimate",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)

__all__ = sorted(_LAZY)
