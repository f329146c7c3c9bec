"""Training speed of every architecture of the comparison, alone, one CPU thread: the step of each cell's model.

For each cell of :mod:`hf_treelang.sweep.comparison` (the task's laptop preset, the architecture at the laptop
TreeLang model's parameter count, batch 32), this prints the optimizer steps/s of a bare ``forward / backward /
AdamW step`` on random batches of the cell's shape (:func:`hf_treelang.sweep.estimate.measure_steps_per_second`:
the median of ``--repeats`` timings after a warm-up), one thread, and the parameter count. The state-space
candidates that the comparison did not take (Mamba with transformers' reference scan, with ``use_mambapy``, and
Mamba2's chunked path) are timed beside them on the root task, with the share of the step that Mamba spends in
``aten::fill_`` (``torch.profiler``), the reason RWKV is the comparison's recurrent model.

Run it alone: other jobs on the machine slow every row (the table says the load average when it started). The
comparison's own runs record their speed too (``compare``'s steps/s column), measured beside each other and the
evaluations: those are not a speed comparison, this table is.

Usage: python benchmarks/bench_architectures.py [--cells paper-root ...] [--steps 20] [--repeats 3]
       [--json benchmarks/results/architectures.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from hf_treelang.sweep import comparison
from hf_treelang.sweep.estimate import _model, measure_steps_per_second
from hf_treelang.train.run import resolve

STATE_SPACE = {  # the candidates timed beside the comparison's recurrent model, at about its parameter count
    "mamba": {"model_type": "mamba", "config_overrides": "hidden_size=64,num_hidden_layers=6"},
    "mamba (use_mambapy)": {"model_type": "mamba", "config_overrides": "hidden_size=64,num_hidden_layers=6,"
                                                                       "use_mambapy=True"},
    "mamba2": {"model_type": "mamba2", "config_overrides": "hidden_size=64,num_hidden_layers=5,n_groups=1"},
}
SMALL_DATA = {"num_train": 1024, "num_eval": 64, "num_test": 64, "use_dataset_builder": False}  # timing only


def fill_share(run, steps: int = 3) -> float:
    """The share of a training step's CPU time spent in ``aten::fill_`` (self time), from ``torch.profiler``."""
    from torch.profiler import profile

    torch.manual_seed(0)
    model = _model(run).train()
    d = run.data_args
    input_ids = torch.randint(0, d.num_symbols, (32, 2**d.depth))  # (batch, 2**depth)
    labels = torch.randint(0, d.num_symbols, (32,))  # (batch,) roots
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(input_ids=input_ids, labels=labels).loss.backward()
        optimizer.step()

    step()
    with profile() as profiler:
        for _ in range(steps):
            step()
    events = profiler.key_averages()
    total = sum(event.self_cpu_time_total for event in events)
    fill = sum(event.self_cpu_time_total for event in events if event.key == "aten::fill_")
    return fill / total if total else float("nan")


def measure(name: str, task: str, arguments: dict, args) -> dict:
    run = resolve(task, {**arguments, **SMALL_DATA, "cpu_threads": 1}, f"/tmp/bench-architectures/{name}")
    parameters = sum(p.numel() for p in _model(run).parameters())
    rate = measure_steps_per_second(run, device="cpu", steps=args.steps, warmup=3, repeats=args.repeats, threads=1)
    return {"name": name, "task": task, "parameters": parameters, "steps_per_second": rate}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", nargs="+", default=None,
                        help="comparison cells or their prefixes (default: every cell of the paper's grammar)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="timings per row (the median is reported)")
    parser.add_argument("--no-state-space", action="store_true", help="skip the Mamba / Mamba2 rows")
    parser.add_argument("--json", default=None, help="also write the rows and the machine to this JSON file")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeats < 1:
        parser.error(f"--steps and --repeats must be ≥ 1, got {args.steps} and {args.repeats}")
    try:
        chosen = comparison.selected(comparison.cells(), args.cells or ["paper-"])
    except ValueError as error:
        parser.error(str(error))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    rows = []
    started = time.perf_counter()
    for cell in chosen:
        rows.append({**measure(cell.name, cell.task, cell.arguments(), args), "architecture": cell.architecture})
    if not args.no_state_space:
        for name, arguments in STATE_SPACE.items():
            row = measure(f"paper-root-{name}", "root", arguments, args)
            row["architecture"] = name
            if name == "mamba":
                run = resolve("root", {**arguments, **SMALL_DATA}, "/tmp/bench-architectures/profile")
                torch.set_num_threads(1)
                row["fill_share"] = fill_share(run)
            rows.append(row)
    print(f"one thread, batch 32, load average {load:.2f} at the start" if load is not None else "one thread, batch 32")
    print(f"{'cell':<34} {'parameters':>10} {'steps/s':>8}")
    for row in rows:
        extra = f"  ({row['fill_share']:.0%} of the step in aten::fill_)" if "fill_share" in row else ""
        print(f"{row['name']:<34} {row['parameters']:>10,} {row['steps_per_second']:>8.1f}{extra}")
    if args.json:
        machine = {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                   "torch": torch.__version__, "load_average_at_start": load,
                   "seconds": round(time.perf_counter() - started, 1)}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"machine": machine, "steps": args.steps, "repeats": args.repeats,
                                               "rows": rows}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
