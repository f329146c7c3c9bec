"""How long runs will take: their optimizer steps, and steps per second measured on this machine's hardware.

:func:`~hf_treelang.train.device_data.optimizer_steps` (the one home of the count) counts a run's steps as
``transformers.Trainer`` does (``max_steps`` when > 0, else ``ceil(num_train_epochs * ceil(num_train / batch))``).
:func:`measure_steps_per_second`
times a few optimizer steps (forward, loss, backward, Adam update) of the run's own model and batch size on random
inputs; evaluations, data building and start-up are not counted, so the estimates are lower bounds.

Dimension glossary: ``b`` batch, ``L = 2**ℓ`` positions, ``q`` symbols.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from dataclasses import dataclass

from hf_treelang.core.oracle import next_leaf_inputs
from hf_treelang.progress import format_duration
from hf_treelang.train.contention import BUSY_SHARE, share_of
from hf_treelang.train.device_data import optimizer_steps, steps_per_epoch
from hf_treelang.train.levers import auto_seconds, measured_gpu
from hf_treelang.train.loop import build_model


def epoch_steps(num_train: int, batch_size: int, epochs: float) -> int:
    """Optimizer steps of ``epochs`` epochs over ``num_train`` sequences in batches of ``batch_size`` (one process)."""
    return math.ceil(epochs * max(steps_per_epoch(num_train, batch_size), 1))


def architecture_key(run) -> tuple:
    """What a step's cost depends on: task head, architecture (TreeLang's sizes, or another model type and its
    ``config_overrides``), sizes, batch and the frozen encoder (runs sharing it share a rate)."""
    m, d = run.model_args, run.data_args
    other = None if m.is_treelang else (m.model_type, m.config_overrides, m.config_name)
    return (run.task if run.task in ("mlm", "clm") else "root", d.depth, d.num_symbols, m.hidden_size,
            m.model_kwargs(d.depth)["num_hidden_layers"], m.num_attention_heads, m.intermediate_size,
            run.training_args.per_device_train_batch_size, bool(m.freeze_encoder) and run.task == "finetune", other)


def describe_key(key: tuple) -> str:
    head, depth, q, d, layers, heads, d_ff, batch, frozen, other = key
    if other is not None:  # another architecture: its own sizes are in its overrides
        model_type, overrides, config = other
        sized = ", ".join(part for part in (overrides, config and f"config {config}") if part)
        return f"{head}, ℓ={depth}, q={q}, {model_type}" + (f" ({sized})" if sized else "") + f", batch {batch}"
    return (f"{head}, ℓ={depth}, q={q}, d={d}, {layers} layers, {heads} head(s), d'={d_ff}, batch {batch}"
            + (", encoder frozen" if frozen else ""))


def _model(run):
    if run.task == "finetune" and os.path.isfile(os.path.join(str(run.model_args.model_name_or_path), "config.json")):
        return build_model(run)
    model = build_model(dataclasses.replace(run, task=run.model_task))
    if run.task == "finetune" and run.model_args.freeze_encoder:
        model.freeze_encoder()
    return model


def measure_steps_per_second(run, *, device: str = "cpu", steps: int = 4, warmup: int = 2, repeats: int = 3,
                             threads: int | None = None) -> float:
    """Optimizer steps per second of ``run``'s model and batch size on ``device`` (random inputs).

    Args:
        run: a :class:`hf_treelang.train.run.Run` (or anything with ``task`` and the three dataclasses).
        device: ``"cpu"`` or ``"cuda"``.
        steps, warmup, repeats: the median rate of ``repeats`` timings of ``steps`` steps, after ``warmup`` untimed
            ones (the median: other processes on the machine disturb single timings).
        threads: ``torch.set_num_threads`` while measuring on the CPU (default: torch's current setting).
    """
    import torch

    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    try:
        torch.manual_seed(0)
        model = _model(run).to(device).train()
        d = run.data_args
        b, L, q = run.training_args.per_device_train_batch_size, 2**d.depth, d.num_symbols
        input_ids = torch.randint(0, q, (b, L), device=device)  # (b, L)
        if run.task == "mlm":
            positions = torch.randint(0, L, (b,), device=device)  # (b,)
            labels = torch.full((b, L), -100, device=device)  # (b, L): one labelled leaf per row
            rows = torch.arange(b, device=device)
            labels[rows, positions] = input_ids[rows, positions]
            input_ids[rows, positions] = q  # the mask id
        elif run.task == "clm":
            labels = input_ids.clone()  # (b, L): every leaf, predicted from [BOS, x_0 .. x_{L-2}]
            input_ids = next_leaf_inputs(labels, q)  # (b, L): BOS = q
        else:
            labels = torch.randint(0, q, (b,), device=device)  # (b,) roots
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=run.training_args.learning_rate, weight_decay=0.0)

        def step():
            optimizer.zero_grad(set_to_none=True)
            model(input_ids=input_ids, labels=labels).loss.backward()
            optimizer.step()

        for _ in range(warmup):
            step()
        rates = []
        for _ in range(repeats):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(steps):
                step()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            rates.append(steps / (time.perf_counter() - start))
        return statistics.median(rates)
    finally:
        torch.set_num_threads(previous)


@dataclass
class Estimate:
    """Optimizer steps and time of a list of runs.

    Attributes:
        steps: optimizer steps per run (same order as the runs).
        rates: ``{device: {architecture: steps/s}}`` measured (``describe_key`` of each architecture, with its thread
            count where runs of one architecture have different ones).
        seconds: ``{device: estimated seconds}`` with ``workers`` runs at a time on the CPU, one at a time on the GPU
            (None: not measured there); ``"cuda_stacked"``: the GPU with 16 runs stacked at a time.
        gpu_source: where the GPU figures come from (this machine's GPU, or the measured table).
        workers: runs trained at the same time.
        threads: torch threads per run on the CPU when every run has the same (a run's own ``cpu_threads``, else
            the threads given), else None; ``rate_threads``: ``{architecture: threads}`` of each CPU rate.
        cpu_share: the CPU time the measuring process got over the wall time of its threads, the lowest over the
            measured architectures (1.0: it had its cores to itself); None when the CPU was not measured;
            ``share_threads``: the threads of that measurement.
    """

    steps: list
    rates: dict
    seconds: dict
    workers: int
    threads: int | None
    gpu_source: str | None = None
    cpu_share: float | None = None
    rate_threads: dict = dataclasses.field(default_factory=dict)
    share_threads: int | None = None

    @property
    def cpu_busy(self) -> bool:
        """Whether other work took part of the measuring threads' cores (:data:`BUSY_SHARE`): the steps/s are then
        too low and the time too long."""
        return self.cpu_share is not None and self.cpu_share < BUSY_SHARE

    def busy_note(self) -> str | None:
        """The line that says the CPU was shared while measured (:attr:`cpu_busy`), else None."""
        if not self.cpu_busy:
            return None
        return (f"measured while other work took part of the CPU (the measurement got {self.cpu_share:.0%} of its "
                f"{self.share_threads or self.threads} thread(s)): the steps/s are too low and the time too long; measure again on an idle "
                "machine")

    @property
    def total_steps(self) -> int:
        return int(sum(self.steps))

    def to_dict(self) -> dict:
        return {"total_optimizer_steps": self.total_steps, "steps_per_second": self.rates,
                "estimated_seconds": self.seconds, "workers": self.workers, "cpu_threads": self.threads,
                "cpu_threads_per_rate": self.rate_threads,
                "gpu_source": self.gpu_source, "cpu_share": self.cpu_share, "cpu_busy": self.cpu_busy}


def estimate(runs, *, workers: int = 1, threads: int | None = None, devices=("cpu", "cuda"),
             measure_steps: int = 4) -> Estimate:
    """Steps of every run and the time to train them, from steps/s measured once per architecture, thread count and
    device.

    ``runs`` are :class:`~hf_treelang.train.run.Run`; each trains on the CPU with its own ``cpu_threads``, or
    ``threads`` (default: torch's current count) when it has none, as the sweep's workers give them. ``"cuda"`` is
    measured when a GPU is visible; otherwise the GPU time comes from the steps/s ``benchmarks/gpu_check.py``
    measured on another machine (:func:`measured_gpu`), one run at a time and with 16 runs stacked, and says so. The
    CPU time assumes ``workers`` runs at a time.
    """
    import torch

    threads = threads or torch.get_num_threads()
    run_threads = [int(run.training_args.cpu_threads or threads) for run in runs]
    steps = [optimizer_steps(run.training_args, run.data_args.num_train) for run in runs]
    rates, seconds, source, shares, rate_threads = {}, {}, None, [], {}
    for device in devices:
        if device == "cuda" and not torch.cuda.is_available():
            table = measured_gpu()
            source = (f"{table['device']}, {table['mode']}, the levers of --step_mode auto, measured by "
                      f"benchmarks/gpu_check.py on {table['date']}")
            sizes = [sum(p.numel() for p in _model(run).parameters()) for run in runs]
            kinds = [{"optim": run.training_args.optim_name, "treelang": run.model_args.is_treelang,
                      "task": run.model_task} for run in runs]
            seconds[device] = sum(auto_seconds(count, n, table, **kind) for count, n, kind in zip(steps, sizes, kinds))
            seconds["cuda_stacked"] = sum(auto_seconds(count, n, table, members=16, **kind) / 16
                                          for count, n, kind in zip(steps, sizes, kinds))
            continue
        measured, total = {}, 0.0
        for run, count, count_threads in zip(runs, steps, run_threads):
            key = (architecture_key(run), count_threads if device == "cpu" else None)
            if key not in measured:
                wall, cpu = time.perf_counter(), time.process_time()
                measured[key] = measure_steps_per_second(run, device=device, steps=measure_steps, threads=key[1])
                if device == "cpu":
                    shares.append((share_of(time.process_time() - cpu, time.perf_counter() - wall, key[1]), key[1]))
            total += count / measured[key]
        several = len({architecture for architecture, _ in measured}) < len(measured)  # one architecture, 2 counts
        names = {key: describe_key(key[0]) + (f", {key[1]} thread(s)" if several else "") for key in measured}
        rates[device] = {names[key]: rate for key, rate in measured.items()}
        if device == "cpu":
            rate_threads = {names[key]: key[1] for key in measured}
        seconds[device] = total / max(min(workers, len(runs)), 1) if device == "cpu" else total
        if device == "cuda":
            source = f"{torch.cuda.get_device_name()}, measured here"
    share, share_threads = min(shares) if shares else (None, None)
    return Estimate(steps=steps, rates=rates, seconds=seconds, workers=workers,
                    threads=run_threads[0] if len(set(run_threads)) == 1 else None, gpu_source=source,
                    cpu_share=None if share is None else round(share, 2), rate_threads=rate_threads,
                    share_threads=share_threads)


def estimate_lines(result: Estimate) -> list:
    """Human-readable lines: total steps, the measured rates (each with the torch threads it was measured on), the
    time on this CPU, and on one GPU where one was estimated: measured here, or from the reference table measured on
    another machine, labelled as such."""
    lines = [f"{result.total_steps} optimizer steps in all"]
    cpu = result.rates.get("cpu", {})
    for name, rate in cpu.items():
        threads = result.rate_threads.get(name, result.threads)
        lines.append(f"  this machine ({threads} torch thread(s) per run): {rate:.1f} steps/s for {name}")
    lines.append(f"  estimated time on this machine ({result.workers} run(s) at a time): "
                 f"{format_duration(result.seconds.get('cpu'))} of optimizer steps (evaluations not counted)")
    if result.cpu_busy:
        lines.append(f"  {result.busy_note()}")
    if result.seconds.get("cuda") is None:
        return lines
    if "cuda" not in result.rates:
        lines.append(f"  estimated time on one GPU, from a reference measured on another machine ({result.gpu_source}): "
                     f"{format_duration(result.seconds['cuda'])} one run at a time, "
                     f"{format_duration(result.seconds.get('cuda_stacked'))} with 16 runs stacked")
    else:
        for name, rate in result.rates["cuda"].items():
            lines.append(f"  one GPU: {rate:.1f} steps/s for {name}")
        lines.append(f"  estimated time on one GPU ({result.gpu_source}): {format_duration(result.seconds['cuda'])}")
    return lines

__all__ = ["Estimate", "epoch_steps", "estimate", "estimate_lines", "format_duration", "measure_steps_per_second",
           "optimizer_steps"]
