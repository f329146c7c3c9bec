"""Training speed: the current Trainer path, the fast single-model path and stacked ensembles, with a short profile.

For the paper size (d = 128, d' = 2048, 4 layers) and the quick size (d = 64, d' = 256, 4 layers), q = 4, ℓ = 4, MLM
(one masked leaf per sequence), batch 32, dropout 0.1, Adam 1e-4, this prints the optimizer steps/s (model-steps/s
for ensembles: members x steps/s) of

* ``current``: the stock ``transformers.Trainer`` with a DataLoader over a ``datasets.Dataset`` and the masking
  collator (``--train_engine dataloader``);
* ``fast``: :class:`hf_treelang.train.trainer.TreeLangTrainer`, the training set on the device (``--train_engine
  device``, the default; a CUDA-graph step on a GPU);
* ``stacked xN``: N members as one stacked model (:class:`hf_treelang.train.trainer.EnsembleTrainer`), N = 4, 16
  (and 8 at the quick size, the issue's CPU target);
* ``auto xN``: what ``--ensemble_mode auto`` picks there (stacked, or the members one after another at the fast
  path's rate),
* ``fast, fused Adam`` and the largest ``stacked xN, fused Adam``: the same paths with ``--optim adamw_torch_fused``,

on the CPU always and on a GPU whenever one is available (never estimated). Every path is timed inside
``Trainer.train`` by a callback, between the end of the warm-up steps and the last step, so that set-up is not
counted; the paths are timed in turn, ``--repeats`` times, and the best repeat is reported (the machine may be shared: other
jobs only slow a run down). The last columns count this process's CPU time instead of the wall clock.

Profile (one model, paper size): operators launched per step (ATen operators on the CPU, kernels on a GPU, from
``torch.profiler``) and the host time per step: on the CPU the Trainer's own work, i.e. the Trainer-driven step minus
a bare ``forward / backward / optimizer.step`` loop on the same model and batches; on a GPU the host time to issue a
step (no synchronisation) next to the device time per step.

Usage: python benchmarks/bench_train.py [--steps 10] [--warmup 3] [--repeats 3] [--threads N] [--sizes paper quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from types import SimpleNamespace

import numpy as np
import torch
from transformers import Trainer, TrainerCallback, set_seed
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from hf_treelang.models import TreeLangConfig, TreeLangForMaskedLM
from hf_treelang.train.arguments import TreeLangTrainingArguments
from hf_treelang.train.collators import MaskedLeafCollator
from hf_treelang.train.device_data import TrainingStream
from hf_treelang.train.loop import choose_ensemble_mode
from hf_treelang.train.trainer import EnsembleTrainer, TreeLangTrainer
from hf_treelang.models.stacked import StackedTreeLang

SIZES = {"paper": {"hidden_size": 128, "intermediate_size": 2048}, "quick": {"hidden_size": 64, "intermediate_size": 256}}
Q, DEPTH, BATCH = 4, 4, 32
ENSEMBLES = {"paper": (4, 16), "quick": (4, 8, 16)}
FUSED = "adamw_torch_fused"  # the fused Adam: one pass over the tensors instead of several foreach passes


def config(size: str) -> TreeLangConfig:
    return TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH, num_hidden_layers=DEPTH, **SIZES[size])


def leaves(members: int, n: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, Q, size=(members, n, 2**DEPTH))  # (N, P, T)


class StepTimer(TrainerCallback):
    """Wall time (synchronised on a GPU) and this process's CPU time between the end of step ``warmup`` and the end
    of the last step. The CPU time is what a shared CPU perturbs least (other jobs delay the wall clock, not the
    work); on a GPU it means nothing (the host waits) and is not reported."""

    def __init__(self, warmup: int):
        self.warmup = warmup
        self.start = self.end = None

    def _now(self, args) -> tuple:
        if args.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter(), time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.warmup:
            self.start = self._now(args)
        if state.global_step == state.max_steps:
            self.end = self._now(args)

    def rates(self, steps: int) -> tuple:
        """(steps per wall second, steps per CPU second of this process)."""
        return steps / (self.end[0] - self.start[0]), steps / max(self.end[1] - self.start[1], 1e-9)


def quiet(trainer):
    """The trainer without its printing and progress callbacks (the table is the output)."""
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer


def training_args(folder: str, device: str, steps: int, warmup: int, **extra) -> TreeLangTrainingArguments:
    return TreeLangTrainingArguments(
        output_dir=folder, max_steps=warmup + steps, per_device_train_batch_size=BATCH, report_to="none",
        disable_tqdm=True, save_strategy="no", logging_steps=10**9, num_evaluations=0, num_checkpoints=0,
        max_grad_norm=0.0, use_cpu=device == "cpu", remove_unused_columns=False, seed=0, **extra)


def run_path(path: str, size: str, members: int, device: str, steps: int, warmup: int,
             optim: str = "adamw_torch") -> tuple:
    """(steps/s, steps per CPU-s) of one path (``current``, ``fast`` or ``stacked``) through ``Trainer.train``, with
    the Trainer's ``optim`` (``adamw_torch``: the foreach Adam; ``adamw_torch_fused``: the fused one)."""
    import datasets

    n = BATCH * (warmup + steps + 1)  # one epoch: no epoch boundary inside the timed steps
    data = leaves(members, n)
    timer = StepTimer(warmup)
    with tempfile.TemporaryDirectory() as folder:
        args = training_args(folder, device, steps, warmup, optim=optim)
        models = []
        for seed in range(members):
            set_seed(seed)
            models.append(TreeLangForMaskedLM(config(size)))
        if path == "current":
            trainer = Trainer(model=models[0], args=args, train_dataset=datasets.Dataset.from_dict(
                {"input_ids": data[0]}), data_collator=MaskedLeafCollator(Q, seed=0), callbacks=[timer])
        elif path == "fast":
            stream = TrainingStream("mlm", data, seeds=[0], num_symbols=Q, batch_size=BATCH, device=args.device)
            trainer = TreeLangTrainer(model=models[0], args=args, train_dataset=range(n), callbacks=[timer],
                                      train_stream=stream.single())
        else:
            stream = TrainingStream("mlm", data, seeds=list(range(members)), num_symbols=Q, batch_size=BATCH,
                                    device=args.device)
            trainer = EnsembleTrainer(model=StackedTreeLang.from_models(models, "mlm"), args=args,
                                      train_dataset=range(n), callbacks=[timer], train_stream=stream,
                                      members=[SimpleNamespace()] * members, ensemble_manifest={})
        quiet(trainer).train()
    return timer.rates(steps)


def bare_steps_per_second(size: str, device: str, steps: int, warmup: int) -> tuple:
    """A bare forward / backward / Adam loop on the same model and device batches (no Trainer)."""
    set_seed(0)
    model = TreeLangForMaskedLM(config(size)).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    stream = TrainingStream("mlm", leaves(1, BATCH * (warmup + steps)), seeds=[0], num_symbols=Q,
                            batch_size=BATCH, device=device).single()
    epoch = stream.epoch(0)
    start = cpu_start = None
    for step in range(warmup + steps):
        if step == warmup:
            if device == "cuda":
                torch.cuda.synchronize()
            start, cpu_start = time.perf_counter(), time.process_time()
        batch = epoch.batch(step)
        optimizer.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
    return steps / (time.perf_counter() - start), steps / max(time.process_time() - cpu_start, 1e-9)


def operators_per_step(path: str, size: str, device: str, steps: int = 3) -> float:
    """Operators (CPU: ATen operators; GPU: kernels) launched per training step, from ``torch.profiler``."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])

    class Profiled(TrainerCallback):
        def __init__(self):
            self.profiler = profile(activities=activities)

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 4:  # after the warm-up (and the CUDA-graph capture)
                self.profiler.__enter__()
            if state.global_step == 4 + steps:
                if device == "cuda":
                    torch.cuda.synchronize()
                self.profiler.__exit__(None, None, None)

    import datasets

    n = BATCH * (4 + steps + 1)
    profiled = Profiled()
    with tempfile.TemporaryDirectory() as folder:
        args = training_args(folder, device, steps, 4)
        set_seed(0)
        model = TreeLangForMaskedLM(config(size))
        if path == "current":
            trainer = Trainer(model=model, args=args, train_dataset=datasets.Dataset.from_dict(
                {"input_ids": leaves(1, n)[0]}), data_collator=MaskedLeafCollator(Q, seed=0), callbacks=[profiled])
        else:
            stream = TrainingStream("mlm", leaves(1, n), seeds=[0], num_symbols=Q, batch_size=BATCH,
                                    device=args.device).single()
            trainer = TreeLangTrainer(model=model, args=args, train_dataset=range(n), callbacks=[profiled],
                                      train_stream=stream)
        quiet(trainer).train()
    events = profiled.profiler.events()
    if device == "cuda":
        count = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    else:
        count = sum(1 for e in events if e.name.startswith("aten::"))
    return count / steps


def gpu_host_time(size: str, steps: int, warmup: int) -> tuple:
    """(host ms to issue a step without synchronising, device ms per step) of the fast path on the GPU."""
    n = BATCH * (warmup + 2 * steps + 1)
    with tempfile.TemporaryDirectory() as folder:
        args = training_args(folder, "cuda", 2 * steps, warmup)
        set_seed(0)
        model = TreeLangForMaskedLM(config(size))
        stream = TrainingStream("mlm", leaves(1, n), seeds=[0], num_symbols=Q, batch_size=BATCH,
                                device=args.device).single()
        trainer = TreeLangTrainer(model=model, args=args, train_dataset=range(n), train_stream=stream)
        timings = {}

        class Host(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step == warmup:
                    torch.cuda.synchronize()
                    timings["issue"] = time.perf_counter()
                if state.global_step == warmup + steps:  # issued, not waited for
                    timings["issued"] = time.perf_counter()
                    torch.cuda.synchronize()
                    timings["synced"] = time.perf_counter()

        trainer.add_callback(Host())
        quiet(trainer).train()
    host = (timings["issued"] - timings["issue"]) / steps
    device = (timings["synced"] - timings["issue"]) / steps
    return 1e3 * host, 1e3 * device


def best_rates(jobs: dict, repeats: int) -> dict:
    """Run every job in turn ``repeats`` times; the best of each of its (wall, CPU) rates (as ``timeit``: on a
    shared machine other jobs only ever slow a run down, so the fastest repeat is the least disturbed)."""
    results = {name: [] for name in jobs}
    for _ in range(repeats):
        for name, job in jobs.items():
            results[name].append(job())
    return {name: tuple(max(rate[i] for rate in values) for i in range(2)) for name, values in results.items()}


def benchmark_device(device: str, sizes: list, steps: int, warmup: int, repeats: int) -> None:
    label = f"{device} ({torch.get_num_threads()} threads)" if device == "cpu" else torch.cuda.get_device_name()
    print(f"\n## {label}: MLM, q={Q}, ℓ={DEPTH}, batch {BATCH}, dropout 0.1, best of {repeats}\n")
    cpu = device == "cpu"
    print("| size | path | members | steps/s | model-steps/s | vs current | vs fast, one after another |"
          + (" model-steps per CPU-s | vs fast (CPU-s) |" if cpu else ""))
    print("|---|---|---|---|---|---|---|" + ("---|---|" if cpu else ""))
    for size in sizes:
        ensemble_steps = max(2, steps // 2)
        jobs = {("current", 1): lambda: run_path("current", size, 1, device, steps, warmup),
                ("fast", 1): lambda: run_path("fast", size, 1, device, steps, warmup),
                ("fast fused", 1): lambda: run_path("fast", size, 1, device, steps, warmup, FUSED)}
        for members in ENSEMBLES[size]:
            jobs[("stacked", members)] = (lambda m: lambda: run_path("stacked", size, m, device, ensemble_steps,
                                                                      warmup))(members)
        largest = max(ENSEMBLES[size])
        jobs[("stacked fused", largest)] = lambda: run_path("stacked", size, largest, device, ensemble_steps, warmup,
                                                            FUSED)
        rates = best_rates(jobs, repeats)
        current, fast = rates[("current", 1)], rates[("fast", 1)]
        rows = [("current (DataLoader)", 1, current), ("fast (device data)", 1, fast),
                ("fast, fused Adam", 1, rates[("fast fused", 1)])]
        for members in ENSEMBLES[size]:
            rows.append((f"stacked x{members}", members, rates[("stacked", members)]))
            auto = choose_ensemble_mode(config(size), BATCH, device)
            auto_rate = rates[("stacked", members)] if auto == "stacked" else tuple(r / members for r in fast)
            rows.append((f"auto x{members} ({auto})", members, auto_rate))
        rows.append((f"stacked x{largest}, fused Adam", largest, rates[("stacked fused", largest)]))
        for name, members, (rate, cpu_rate) in rows:
            model_rate = members * rate
            line = (f"| {size} | {name} | {members} | {rate:.2f} | {model_rate:.2f} | {model_rate / current[0]:.2f}x | "
                    f"{model_rate / fast[0]:.2f}x |")
            if cpu:
                line += f" {members * cpu_rate:.2f} | {members * cpu_rate / fast[1]:.2f}x |"
            print(line)
        sys.stdout.flush()


def profile_device(device: str, steps: int, warmup: int, repeats: int) -> None:
    print(f"\n### Profile ({device}, paper size, one model)\n")
    operators = {path: operators_per_step(path, "paper", device) for path in ("current", "fast")}
    what = "kernels" if device == "cuda" else "ATen operators"
    print(f"- {what} per step: current {operators['current']:.0f}, fast {operators['fast']:.0f}")
    if device == "cuda":
        host, device_ms = gpu_host_time("paper", max(steps, 20), warmup)
        print(f"- fast path: host time to issue a step {host:.3f} ms, device time per step {device_ms:.3f} ms")
        return
    rates = best_rates({
        "bare": lambda: bare_steps_per_second("paper", device, steps, warmup),
        "current": lambda: run_path("current", "paper", 1, device, steps, warmup),
        "fast": lambda: run_path("fast", "paper", 1, device, steps, warmup),
    }, repeats)
    bare, bare_cpu = (1e3 / rate for rate in rates["bare"])
    for path in ("current", "fast"):
        step, step_cpu = (1e3 / rate for rate in rates[path])
        print(f"- {path}: {step:.1f} ms per step (wall), {step_cpu:.1f} ms CPU; the Trainer's own host work, against "
              f"a bare loop on the same model and batches ({bare:.1f} ms wall, {bare_cpu:.1f} ms CPU): "
              f"{step - bare:+.1f} ms wall, {step_cpu - bare_cpu:+.1f} ms CPU")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per path (ensembles: half)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (and the CUDA-graph capture)")
    parser.add_argument("--repeats", type=int, default=3, help="each path is timed this many times, in turn")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["paper", "quick"])
    parser.add_argument("--no-profile", action="store_true", help="skip the profile")
    args = parser.parse_args(argv)
    for name in ("steps", "warmup", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be an integer >= 1, got {getattr(args, name)}")
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be an integer >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        benchmark_device(device, args.sizes, args.steps, args.warmup, args.repeats)
        if not args.no_profile:
            profile_device(device, args.steps, args.warmup, args.repeats)
    if "cuda" not in devices:
        print("\nNo GPU here: no GPU figures (none are estimated).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
