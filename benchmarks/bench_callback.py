"""Cost of the BP-KL callback as a share of training time, at the default evaluation frequency. Prints a table.

    python benchmarks/bench_callback.py              # the default runs' sizes (paper model, preset "default")
    python benchmarks/bench_callback.py --quick      # fewer timed steps, for a smoke run

For each task (root, mlm) with the sizes of ``training/run_<task>.py`` without arguments: the time of one training
step (median over timed blocks of a real ``Trainer`` step loop), the time of one callback evaluation (BP targets are
computed once, outside; an evaluation is the network's forward passes on the fixed inputs plus the comparisons), the
number of evaluations of the default run (log-spaced, plus step 0), and the callback's share
``n_evals * t_eval / (n_steps * t_step)``. Target: <= 10 %. The one-off BP preparation is reported separately.
"""

from __future__ import annotations

import argparse
import time

import torch

from hf_treelang.train.callbacks import BPKLCallback, log_spaced_steps
from hf_treelang.train.collators import MaskedLeafCollator, RootClassificationCollator
from hf_treelang.train.arguments import parse_command_line
from hf_treelang.train.data import load_run_data, to_datasets
from hf_treelang.train.loop import build_model


def time_training_step(task, train_set, num_symbols: int, model, steps: int) -> float:
    """Median seconds per optimiser step (batch 32, Adam) over blocks of ``steps // 4`` steps."""
    collate = MaskedLeafCollator(num_symbols, seed=0) if task == "mlm" else RootClassificationCollator()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train()
    rows = train_set.select(range(32 * steps))
    batches = [collate([rows[i] for i in range(s, s + 32)]) for s in range(0, 32 * steps, 32)]
    block = max(steps // 4, 1)
    timings = []
    for start in range(0, steps, block):
        began = time.perf_counter()
        for batch in batches[start : start + block]:
            loss = model(**batch).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        timings.append((time.perf_counter() - began) / len(batches[start : start + block]))
    return sorted(timings)[len(timings) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="time fewer steps")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    rows = []
    for task in ("root", "mlm"):
        data_args, model_args, training_args = parse_command_line(task, ["--use_dataset_builder", "false"])[:3]
        data = load_run_data(data_args)
        train_set, _ = to_datasets(task, data, data_args.num_symbols)
        torch.manual_seed(0)
        model = build_model(task, data_args, model_args)
        callback = BPKLCallback(data.grammar, data_args.depth, data_args.k_train, task, data.validation, data.tests,
                                batch_size=training_args.per_device_eval_batch_size)
        began = time.perf_counter()
        callback.prepare()
        t_prepare = time.perf_counter() - began
        callback.compute(model)  # warm-up
        t_eval = min(_timed(lambda: callback.compute(model)) for _ in range(3))
        t_step = time_training_step(task, train_set, data_args.num_symbols, model, 40 if options.quick else 160)
        n_steps = int(len(train_set) * training_args.num_train_epochs) // training_args.per_device_train_batch_size
        n_evals = len(log_spaced_steps(n_steps, training_args.num_evaluations)) + 1
        share = n_evals * t_eval / (n_steps * t_step)
        rows.append((task, n_steps, t_step * 1e3, n_evals, t_eval, t_prepare, 100 * share))
    print(f"threads={options.threads}; default sizes (paper model d=128, d'=2048, n_L=4; see training/README.md)")
    print(f"{'task':6} {'steps':>6} {'ms/step':>8} {'evals':>6} {'s/eval':>7} {'BP prep s':>9} {'callback %':>10}")
    for task, n_steps, ms, n_evals, t_eval, t_prepare, percent in rows:
        verdict = "ok" if percent <= 10 else "OVER 10%"
        print(f"{task:6} {n_steps:6d} {ms:8.1f} {n_evals:6d} {t_eval:7.2f} {t_prepare:9.2f} {percent:9.1f}% {verdict}")


def _timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


if __name__ == "__main__":
    main()
