"""The GPU path, proved in one command: equivalence, resume across step modes, throughput, the authors' baseline.

    python benchmarks/gpu_check.py --out DIR            # on a GPU: about 6 minutes on one H100
    python benchmarks/gpu_check.py --out DIR --tiny     # anywhere (the test suite runs it on the CPU)
    python benchmarks/gpu_check.py --out DIR --sections throughput kernels    # some sections only

Writes ``DIR/gpu_check.json`` (every number) and ``DIR/gpu_check.md`` (the tables), case by case, so that a run cut
short keeps what it measured:

* **environment** — torch, CUDA, the GPU, TF32 / bf16 support, and the measured matmul ceilings (fp32, TF32, bf16)
  that the fractions of peak below divide by;
* **equivalence** — 50 steps eager vs CUDA graph from the same seed, TF32 off, dropout 0: root (constant rate), MLM
  (cosine schedule with warm-up: the schedule runs inside the graph) and a stacked ensemble of 4; the per-step losses
  must agree within :data:`LOSS_TOLERANCE`;
* **resume** — a run checkpointed at step 20 and resumed in each direction (eager/graph → eager/graph) must continue
  as the uninterrupted run (losses of steps 21-40 within :data:`LOSS_TOLERANCE`), with the foreach Adam and the
  fused one;
* **sync** — 100 graph steps under ``torch.cuda.set_sync_debug_mode("error")``: no step syncs the host;
* **throughput** — steps/s of the laptop and paper models, single and stacked N = 1, 4, 16, eager vs graph, fp32 /
  TF32 / bf16, each with its TFLOP/s (6 × tokens × parameters) and fraction of the measured ceiling; the paper
  model's graph step also with the fused Adam (``--optim adamw_torch_fused``) and with the model compiled
  (``--torch_compile``: inductor's fused kernels inside the graph), and the stacked × 16 in bf16 (at that size the
  feed-forward activations are tens of MB per step, so halving their bytes may count where it did not for one
  model); the authors' loop (``authors_loop.py``) in the same run;
* **kernels** — what a step is made of on the device: the kernels of a few eager steps of the paper model (plain,
  compiled with the fused Adam, stacked × 16; TF32), counted and timed by ``torch.profiler`` (on the CPU: the ATen
  operators), with the busiest kernels. A TF32 graph step replays these kernels without the launch gaps (and a
  few more: the capturable Adam's update is longer than the eager one), so their time per step bounds the TF32
  graph's steps/s from above;
* **paper run** (``--paper-steps N``) — ``run_root.py --preset paper``'s first N steps and its closest-BP_k path.

Without CUDA the graph cases are recorded as skipped, with the reason; nothing is estimated.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
from transformers import TrainerCallback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import authors_loop  # noqa: E402  (the baseline beside this script)

from hf_treelang.jsonio import write_json_atomic  # noqa: E402, I001
from hf_treelang.jsonio import read_json_object  # noqa: E402
from hf_treelang.train import trainer as trainer_module  # noqa: E402
from hf_treelang.train.loop import train, train_together  # noqa: E402
from hf_treelang.train.run import resolve  # noqa: E402

LOSS_TOLERANCE = 5e-3  # max |loss difference| per step between eager and graph steps, fp32 with TF32 off
SIZES = {  # the models of the laptop and paper presets; the data trimmed to what a throughput case needs
    "laptop": {"preset": "laptop"},
    "paper": {"preset": "paper", "checkpoint_epochs": None},
}
VARIANTS = {"": {}, "fused": {"optim": "adamw_torch_fused"}, "compiled": {"torch_compile": True},
            "compiled fused": {"torch_compile": True, "optim": "adamw_torch_fused"},
            "math": {"sdpa": "math"}, "compiled fused math": {"torch_compile": True, "optim": "adamw_torch_fused",
                                                               "sdpa": "math"},
            "autograd linear": {"stacked_backward": "autograd"},
            "compiled fused autograd linear": {"torch_compile": True, "optim": "adamw_torch_fused",
                                               "stacked_backward": "autograd"}}  # the step's implementations
# the keys of VARIANTS that are not training arguments: how the benchmark runs the case
#   sdpa="math": every attention through SDPA's math backend (its matmuls, softmax and dropout as plain operators,
#     which inductor fuses), instead of the fused memory-efficient kernel that pads a 16-token sequence to its tiles;
#   stacked_backward="autograd": the stacked linear layers with autograd's own backward of baddbmm (the weight
#     gradient as a transposed view, copied into the weight's layout), the layout before StackedAffine
RUN_KEYS = ("sdpa", "stacked_backward")
TINY = {"depth": 2, "num_symbols": 3, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class RecordedGraphStep(trainer_module.CUDAGraphStep):
    """The Trainer's captured step, remembered (the latest one) so that its graph's replays can be timed alone."""

    latest = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        RecordedGraphStep.latest = self



def replay_rate(seconds: float = 1.0) -> float | None:
    """Steps/s of the latest captured step's graph replayed back to back for about ``seconds`` with nothing between
    the replays (no input copy, no Trainer): the device's own rate, which the Trainer's rate approaches when the host
    keeps up."""
    step, RecordedGraphStep.latest = RecordedGraphStep.latest, None
    if step is None or step.graph is None:
        return None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        step.graph.replay()
    end.record()
    end.synchronize()
    replays = int(min(max(seconds / (start.elapsed_time(end) / 1e3 / 20), 50), 5000))  # about `seconds` of them
    start.record()
    for _ in range(replays):
        step.graph.replay()
    end.record()
    end.synchronize()
    return replays / (start.elapsed_time(end) / 1e3)


class StepTimer(TrainerCallback):
    """Synchronise at step ``warm``, time ``seconds`` of steps, synchronise again and stop the run; optionally run
    the timed steps under ``torch.cuda.set_sync_debug_mode(sync_mode)``."""

    def __init__(self, warm: int, seconds: float, max_timed: int | None = None, sync_mode: str | None = None):
        self.warm, self.seconds, self.max_timed, self.sync_mode = warm, seconds, max_timed, sync_mode
        self.start = self.stop = None

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if self.start is None and step >= self.warm:
            sync()
            self.start = (step, time.perf_counter())
            if self.sync_mode:
                torch.cuda.set_sync_debug_mode(self.sync_mode)
        elif self.start is not None and self.stop is None:
            timed = step - self.start[0]
            if time.perf_counter() - self.start[1] >= self.seconds or (self.max_timed and timed >= self.max_timed):
                if self.sync_mode:
                    torch.cuda.set_sync_debug_mode(0)
                sync()
                self.stop = (step, time.perf_counter())
                control.should_training_stop = True
        return control

    @property
    def steps_per_second(self) -> float | None:
        if self.stop is None:
            return None
        return (self.stop[0] - self.start[0]) / (self.stop[1] - self.start[1])


class KernelProfile(TrainerCallback):
    """Profile ``steps`` steps after step ``warm`` with ``torch.profiler``, then stop the run: the kernels on a GPU,
    the innermost ATen operators (views included) on a CPU."""

    def __init__(self, warm: int, steps: int, cuda: bool):
        self.warm, self.steps, self.cuda = warm, steps, cuda
        self.profiler, self.stopped = None, False

    def on_step_end(self, args, state, control, **kwargs):
        from torch.profiler import ProfilerActivity, profile

        if state.global_step == self.warm:
            sync()
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
            self.profiler = profile(activities=activities)
            self.profiler.__enter__()
        elif self.profiler is not None and state.global_step == self.warm + self.steps:
            sync()
            self.close()
            control.should_training_stop = True
        return control

    def close(self) -> None:
        """Stop profiling (also when the run failed while profiling, so that the next case can profile)."""
        if self.profiler is not None and not self.stopped:
            self.profiler.__exit__(None, None, None)
            self.stopped = True

    def summary(self, top: int = 6) -> dict:
        """Per step: how many kernels, their summed time, the rate that time allows, and the ``top`` busiest."""
        totals, counts = {}, {}
        for event in self.profiler.events():
            if getattr(event, "is_user_annotation", False):  # a range around kernels (Optimizer.step#...), not one
                continue
            if self.cuda and event.device_type == torch.autograd.DeviceType.CUDA:
                micros = event.time_range.elapsed_us()
            elif not self.cuda and event.name.startswith("aten::") and not event.cpu_children:
                micros = event.self_cpu_time_total
            else:
                continue
            totals[event.name] = totals.get(event.name, 0.0) + micros
            counts[event.name] = counts.get(event.name, 0) + 1
        ms = sum(totals.values()) / 1e3 / self.steps
        busiest = sorted(totals, key=totals.get, reverse=True)[:top]
        return {"kernels_per_step": sum(counts.values()) / self.steps, "kernel_ms_per_step": ms,
                "steps_per_s_bound": 1e3 / ms if ms else None,
                "busiest": [{"name": name[:100], "ms_per_step": totals[name] / 1e3 / self.steps,
                             "per_step": counts[name] / self.steps} for name in busiest]}


class Check:
    """The check's state: where it writes, its budget, and the JSON it grows case by case."""

    def __init__(self, out: Path, tiny: bool, budget: float, cases=None):
        self.out, self.tiny, self.deadline = out, tiny, time.perf_counter() + budget
        self.cases = None if cases is None else list(cases)  # "section/name" of the cases to run (None: all)
        self.cuda = torch.cuda.is_available()
        self.work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
        self.results = {"tiny": tiny, "environment": {}, "equivalence": [], "resume": [], "sync": {},
                        "throughput": [], "kernels": [], "authors_loop": {}, "paper_run": {}, "skipped": []}

    def in_order(self, section: str, cases: list, name) -> list:
        """``cases`` in the order --cases names them (``name(case)`` is its name in ``section``), else as given."""
        if self.cases is None:
            return cases
        rank = {case: index for index, case in enumerate(self.cases)}
        return sorted(cases, key=lambda case: rank.get(f"{section}/{name(case)}", len(rank)))

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def save(self) -> None:
        write_json_atomic(self.out / "gpu_check.json", self.results)
        (self.out / "gpu_check.md").write_text(markdown(self.results))

    def arguments(self, size: str, **values) -> dict:
        base = dict(TINY) if self.tiny else dict(SIZES[size])
        data = {"num_train": 256 if self.tiny else 2**14, "num_eval": 32 if self.tiny else 256,
                "num_test": 16 if self.tiny else 256, "k_test": [0], "use_dataset_builder": False}
        return {**base, **data, "num_evaluations": 0, "num_checkpoints": 0, "report_to": "none",
                "disable_tqdm": True, "logging_steps": 10**6, **values}

    def folder(self, name: str) -> Path:
        return self.work / name


def losses_of(folder: Path) -> dict:
    state = read_json_object(folder / "trainer_state.json") or {}
    return {entry["step"]: entry["loss"] for entry in state.get("log_history", []) if "loss" in entry}


def run_case(check: Check, name: str, task: str, arguments: dict, *, members: int = 1, callbacks=()) -> Path:
    """Train one case (``members`` > 1: a stacked ensemble of that many model seeds) and return the folder of its
    Trainer (``trainer_state.json``)."""
    arguments = dict(arguments)
    with how_to_run(arguments):
        return _run_case(check, check.folder(name), task, arguments, members, callbacks)


@contextlib.contextmanager
def how_to_run(arguments: dict):
    """Take the :data:`RUN_KEYS` out of ``arguments`` (in place) and run the block as they say."""
    how = {key: arguments.pop(key) for key in RUN_KEYS if key in arguments}
    with contextlib.ExitStack() as stack:
        if how.get("sdpa") == "math":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
        if how.get("stacked_backward") == "autograd":
            stack.enter_context(autograd_stacked_backward())
        yield


@contextlib.contextmanager
def autograd_stacked_backward():
    """The stacked linear layers as one autograd ``baddbmm`` (the side-by-side baseline of :class:`StackedAffine`)."""
    from hf_treelang.models import stacked

    def forward(self, x):
        flat = x.reshape(x.shape[0], -1, self.in_features)
        y = torch.baddbmm(self.bias.unsqueeze(1), flat, self.weight.transpose(1, 2))
        return y.view(*x.shape[:-1], self.out_features)

    original = stacked.StackedLinear.forward
    stacked.StackedLinear.forward = forward
    try:
        yield
    finally:
        stacked.StackedLinear.forward = original


def _run_case(check: Check, folder: Path, task: str, arguments: dict, members: int, callbacks) -> Path:
    if arguments.get("torch_compile"):  # compiled as if first: not with the shapes an earlier case made dynamic
        import torch._dynamo

        torch._dynamo.reset()
    if members == 1:
        train(resolve(task, arguments, folder), callbacks=callbacks)
        return folder
    runs = [resolve(task, {**arguments, "seed": seed}, folder / "members" / f"seed{seed}", name=f"seed{seed}")
            for seed in range(members)]
    train_together(runs, mode="stacked", ensemble_dir=folder, callbacks=callbacks)
    return folder  # its trainer_state.json logs the members' mean loss


def compare(first: dict, second: dict, steps) -> dict:
    differences = [abs(first[s] - second[s]) for s in steps if s in first and s in second]
    worst = max(differences) if differences else None
    return {"steps_compared": len(differences), "max_abs_loss_difference": worst,
            "passed": worst is not None and worst <= LOSS_TOLERANCE and len(differences) == len(list(steps))}


def guarded(check: Check, section: str, name: str, work) -> None:
    """Run ``work()`` (a case), record its error instead of stopping, and save the JSON."""
    if check.cases is not None and f"{section}/{name}" not in check.cases:
        return
    if check.left() <= 0:
        check.results["skipped"].append(f"{section}/{name}: out of --budget")
        return
    started = time.perf_counter()
    try:
        work()
        outcome = "done"
    except Exception as error:  # noqa: BLE001 - a case's failure is a finding, the others go on
        entry = {"name": name, "error": f"{type(error).__name__}: {error}",
                 "traceback": traceback.format_exc(limit=-8)}
        target = check.results[section]
        target.append(entry) if isinstance(target, list) else target.update(entry)
        outcome = f"error ({type(error).__name__})"
    seconds = time.perf_counter() - started
    check.results.setdefault("case_seconds", {})[f"{section}/{name}"] = seconds
    print(f"  {section}/{name}: {outcome} in {seconds:.1f} s", flush=True)
    check.save()


# ---------------------------------------------------------------- sections


def environment(check: Check) -> None:
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": "cpu"}
    if check.cuda:
        props = torch.cuda.get_device_properties(0)
        env.update(device=torch.cuda.get_device_name(0), multiprocessors=props.multi_processor_count,
                   capability=f"{props.major}.{props.minor}", bf16=torch.cuda.is_bf16_supported(),
                   tf32=props.major >= 8)
        n = 2048 if check.tiny else 8192
        for label, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                                   ("bf16", torch.bfloat16, False)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a, b = torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype)
            for _ in range(3):
                a @ b
            sync()
            start = time.perf_counter()
            for _ in range(10):
                a @ b
            sync()
            env[f"matmul_tflops_{label}"] = 10 * 2 * n**3 / (time.perf_counter() - start) / 1e12
        torch.backends.cuda.matmul.allow_tf32 = False
    check.results["environment"] = env


def equivalence(check: Check) -> None:
    cases = [("root", "root", {}, 1), ("mlm_cosine", "mlm", {"lr_scheduler_type": "cosine", "warmup_steps": 5}, 1),
             ("stacked4", "root", {}, 4), ("root_compiled_fused", "root", VARIANTS["compiled fused"], 1),
             ("stacked4_compiled_fused", "root", VARIANTS["compiled fused"], 4),
             ("root_compiled_fused_math", "root", VARIANTS["compiled fused math"], 1),
             ("stacked4_compiled_fused_math", "root", VARIANTS["compiled fused math"], 4)]
    for name, task, extra, members in cases:
        def work(name=name, task=task, extra=extra, members=members):
            arguments = check.arguments("laptop", max_steps=50, logging_steps=1, tf32=False, **extra)
            if not check.cuda:
                check.results["skipped"].append(f"equivalence/{name}: no CUDA device (graph steps need one)")
                return
            eager = run_case(check, f"eq-{name}-eager", task, {**arguments, "step_mode": "eager"}, members=members)
            graph = run_case(check, f"eq-{name}-graph", task, {**arguments, "step_mode": "cuda_graph"},
                             members=members)
            check.results["equivalence"].append({"name": name, **compare(losses_of(eager), losses_of(graph),
                                                                          range(1, 51))})
        guarded(check, "equivalence", name, work)


def resume(check: Check) -> None:
    modes = ("eager", "cuda_graph") if check.cuda else ("eager",)
    if not check.cuda:
        check.results["skipped"].append("resume: graph directions need a CUDA device; eager -> eager only")
    for variant in ("", "fused"):  # the foreach Adam (the default) and the fused one keep their counters apart
        arguments = check.arguments("laptop", max_steps=40, logging_steps=1, save_strategy="steps", save_steps=20,
                                    tf32=False, **VARIANTS[variant])
        prefix = f"{variant}: " if variant else ""
        full = {}
        for first in modes:
            def whole(first=first, arguments=arguments, variant=variant):
                full[first] = run_case(check, f"resume-full-{variant}{first}", "root",
                                       {**arguments, "step_mode": first})
            guarded(check, "resume", f"{prefix}uninterrupted {first}", whole)
        for first in modes:
            for second in modes:
                def work(first=first, second=second, arguments=arguments, variant=variant, full=full, prefix=prefix):
                    target = check.folder(f"resume-{variant}{first}-to-{second}")
                    target.mkdir(parents=True)
                    shutil.copytree(full[first] / "checkpoint-20", target / "checkpoint-20")
                    run = resolve("root", {**arguments, "step_mode": second}, target)
                    run = run.replace_training(resume_from_checkpoint=str(target / "checkpoint-20"))
                    train(run)
                    check.results["resume"].append({"name": f"{prefix}{first} -> {second}", **compare(
                        losses_of(full[first]), losses_of(target), range(21, 41))})
                guarded(check, "resume", f"{prefix}{first} -> {second}", work)


def sync_check(check: Check) -> None:
    def work():
        if not check.cuda:
            check.results["skipped"].append("sync: needs a CUDA device")
            return
        timer = StepTimer(warm=60, seconds=1e9, max_timed=100, sync_mode="error")
        run_case(check, "sync", "root", check.arguments("paper", max_steps=10**6, step_mode="cuda_graph"),
                 callbacks=[timer])
        check.results["sync"] = {"graph_steps_under_error_mode": timer.stop[0] - timer.start[0] if timer.stop else 0,
                                 "passed": timer.stop is not None}
    guarded(check, "sync", "graph", work)


def parameters_of(size: str, tiny: bool) -> int:
    from hf_treelang.models import TreeLangConfig

    arguments = TINY if tiny else {"laptop": {"hidden_size": 64, "intermediate_size": 256},
                                   "paper": {"hidden_size": 128, "intermediate_size": 2048}}[size]
    depth = arguments.get("depth", 4)
    config = TreeLangConfig.from_data(num_symbols=arguments.get("num_symbols", 4), depth=depth,
                                      **{k: v for k, v in arguments.items() if k not in ("depth", "num_symbols")})
    from hf_treelang.models.modeling_treelang import TreeLangForSequenceClassification

    return sum(p.numel() for p in TreeLangForSequenceClassification(config).parameters())


def throughput(check: Check) -> None:
    graph = "cuda_graph"
    cases = [("laptop", "eager", "fp32", 1, ""), ("laptop", graph, "tf32", 1, ""), ("paper", "eager", "fp32", 1, ""),
             ("paper", graph, "fp32", 1, ""), ("paper", graph, "tf32", 1, ""), ("paper", graph, "bf16", 1, ""),
             ("paper", graph, "tf32", 4, ""), ("paper", graph, "tf32", 16, ""), ("paper", "eager", "tf32", 16, ""),
             ("paper", graph, "tf32", 1, "fused"), ("paper", graph, "tf32", 1, "compiled"),
             ("paper", graph, "tf32", 1, "compiled fused"), ("paper", graph, "tf32", 16, "compiled fused"),
             ("paper", graph, "bf16", 16, ""), ("paper", graph, "bf16", 16, "compiled fused"),
             ("paper", graph, "tf32", 16, "autograd linear"), ("paper", graph, "tf32", 16, "compiled fused autograd linear"),
             ("paper", graph, "tf32", 1, "math"), ("paper", graph, "tf32", 1, "compiled fused math"),
             ("paper", graph, "tf32", 16, "compiled fused math"), ("paper", graph, "bf16", 16, "compiled fused math"),
             ("laptop", graph, "tf32", 1, "fused"), ("laptop", graph, "tf32", 1, "compiled fused"),
             ("laptop", graph, "tf32", 1, "compiled fused math")]
    seconds = 0.5 if check.tiny else 2.0

    def case_name(case):
        size, mode, precision, members, variant = case
        return f"{size} {mode} {precision} x{members}" + (f" {variant}" if variant else "")

    for size, mode, precision, members, variant in check.in_order("throughput", cases, case_name):
        name = case_name((size, mode, precision, members, variant))
        if not check.cuda and (precision != "fp32" or mode == graph):
            check.results["skipped"].append(f"throughput/{name}: needs a CUDA device")
            continue

        def work(size=size, mode=mode, precision=precision, members=members, variant=variant, name=name):
            precision_args = {"fp32": {"tf32": False}, "tf32": {}, "bf16": {"bf16": True, "tf32": False}}[precision]
            arguments = check.arguments(size, max_steps=10**6, step_mode=mode, **precision_args, **VARIANTS[variant])
            timer = StepTimer(warm=10 if check.tiny else 50, seconds=seconds)
            run_case(check, f"tput-{name}".replace(" ", "-"), "root", arguments, members=members, callbacks=[timer])
            rate = timer.steps_per_second
            replayed = replay_rate() if mode == graph else None
            params = parameters_of(size, check.tiny)
            tokens = 32 * (2 ** (2 if check.tiny else 4))
            tflops = None if rate is None else 6 * tokens * params * members * rate / 1e12
            ceiling = check.results["environment"].get(f"matmul_tflops_{precision}")
            check.results["throughput"].append({
                "name": name, "size": size, "mode": mode, "precision": precision, "members": members,
                "variant": variant,
                "steps_per_s": rate, "member_steps_per_s": None if rate is None else rate * members,
                "graph_replay_steps_per_s": replayed,
                "parameters_per_member": params, "tflops": tflops,
                "fraction_of_measured_peak": None if tflops is None or not ceiling else tflops / ceiling})
        guarded(check, "throughput", name, work)

    def baseline():
        size = dict(hidden_size=16, intermediate_size=32, num_layers=2, depth=2, num_symbols=3) if check.tiny else {}
        device = "cuda" if check.cuda else "cpu"
        check.results["authors_loop"] = authors_loop.measure(device, num_train=4096 if check.tiny else 2**17,
                                                             seconds=seconds, warmup=5 if check.tiny else 30, **size)
    guarded(check, "authors_loop", "baseline", baseline)


def kernels(check: Check) -> None:
    cases = [("paper x1", 1, ""), ("paper x1 compiled fused", 1, "compiled fused"), ("paper x16", 16, ""),
             ("paper x16 compiled fused", 16, "compiled fused"),
             ("paper x1 compiled fused math", 1, "compiled fused math"),
             ("paper x16 compiled fused math", 16, "compiled fused math")]
    for name, members, variant in cases[:1] if check.tiny else cases:
        def work(name=name, members=members, variant=variant):
            profiled = KernelProfile(warm=5 if check.tiny else 20, steps=3 if check.tiny else 10, cuda=check.cuda)
            arguments = check.arguments("paper", max_steps=10**6, step_mode="eager", **VARIANTS[variant])
            try:
                run_case(check, f"kernels-{name}".replace(" ", "-"), "root", arguments, members=members,
                         callbacks=[profiled])
            finally:
                profiled.close()
            check.results["kernels"].append({"name": name, "members": members, "variant": variant,
                                             "device": "cuda" if check.cuda else "cpu", **profiled.summary(top=40)})
        guarded(check, "kernels", name, work)
    if check.tiny:
        check.results["skipped"].append("kernels: the compiled and stacked cases run only on a GPU")


class Deadline(TrainerCallback):
    """Stop the run at the first step end past ``seconds`` of wall time after its first step."""

    def __init__(self, seconds: float):
        self.seconds, self.start, self.stopped_at = seconds, None, None

    def on_step_end(self, args, state, control, **kwargs):
        if self.start is None:
            self.start = time.perf_counter()
        elif time.perf_counter() - self.start >= self.seconds:
            self.stopped_at = state.global_step
            control.should_training_stop = True
        return control


def paper_run(check: Check, steps: int, seconds: float | None = None, variant: str = "") -> None:
    """``run_root.py --preset paper``'s first ``steps`` steps (or as many as ``seconds`` of wall time allow), with
    the step ``variant`` of :data:`VARIANTS` (a CUDA graph on a GPU), and its closest-BP_k path."""
    def work():
        arguments = {"preset": "paper", "max_steps": steps, "report_to": "none", "disable_tqdm": True,
                     **VARIANTS[variant]}
        if check.cuda and arguments.get("torch_compile"):
            arguments["step_mode"] = "cuda_graph"
        if check.tiny:
            arguments.update(TINY, num_train=256, num_eval=32, num_test=16, checkpoint_epochs=None, num_evaluations=4)
        deadline = [Deadline(seconds)] if seconds else []
        start = time.perf_counter()
        with how_to_run(arguments):
            result = train(resolve("root", arguments, check.folder("paper-run")), callbacks=deadline)
        elapsed = time.perf_counter() - start
        closest = []
        for entry in result.history:
            kls = {k: v for k, v in entry.items() if k.startswith("eval_kl_bp_k")}
            if kls:
                closest.append([entry["step"], int(min(kls, key=kls.get)[len("eval_kl_bp_k"):])])
        check.results["paper_run"] = {"steps": result.global_step, "of_steps": steps, "variant": variant,
                                      "seconds_with_evaluations": elapsed,
                                      "steps_per_s_with_evaluations": result.global_step / elapsed,
                                      "stopped_by_deadline": bool(deadline and deadline[0].stopped_at),
                                      "closest_bp": closest, "final": {k: v for k, v in result.final_metrics.items()
                                                                       if isinstance(v, (int, float))}}
    guarded(check, "paper_run", "paper", work)


# ---------------------------------------------------------------- the report


def _number(value, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def markdown(results: dict) -> str:
    env = results["environment"]
    lines = [f"# GPU check ({'tiny' if results['tiny'] else 'full'})", "",
             f"{env.get('device')} · torch {env.get('torch')} · CUDA {env.get('cuda')} · measured matmul TFLOP/s: "
             f"fp32 {_number(env.get('matmul_tflops_fp32'))}, TF32 {_number(env.get('matmul_tflops_tf32'))}, "
             f"bf16 {_number(env.get('matmul_tflops_bf16'))}", "",
             f"## Equivalence and resume (max |Δloss| ≤ {LOSS_TOLERANCE}, fp32, TF32 off)", "",
             "| case | steps | max abs Δloss | passed |", "|---|---|---|---|"]
    for entry in results.get("equivalence", []) + results.get("resume", []):
        lines.append(f"| {entry['name']} | {entry.get('steps_compared', '–')} | "
                     f"{_number(entry.get('max_abs_loss_difference'), 6)} | {entry.get('passed', entry.get('error'))} |")
    sync_result = results.get("sync", {})
    lines += ["", f"Sync check: {sync_result.get('graph_steps_under_error_mode', '–')} graph steps under "
                  f"set_sync_debug_mode('error'), passed: {sync_result.get('passed', sync_result.get('error', '–'))}",
              "", "## Throughput (root, batch 32)", "",
              "The graph replay column: the captured step replayed back to back, without the Trainer (the device's own "
              "rate; the steps/s column approaches it when the host keeps up).", "",
              "| case | steps/s | graph replay steps/s | member-steps/s | TFLOP/s | of measured peak |",
              "|---|---|---|---|---|---|"]
    for entry in results.get("throughput", []):
        if "error" in entry:
            lines.append(f"| {entry['name']} | error: {entry['error'][:80]} | | | | |")
            continue
        fraction = entry.get("fraction_of_measured_peak")
        lines.append(f"| {entry['name']} | {_number(entry['steps_per_s'])} | "
                     f"{_number(entry.get('graph_replay_steps_per_s'))} | {_number(entry['member_steps_per_s'])} "
                     f"| {_number(entry['tflops'], 3)} | {'–' if fraction is None else f'{100 * fraction:.2f} %'} |")
    if results.get("kernels"):
        devices = {entry.get("device") for entry in results["kernels"]} - {None}
        what = "kernels" if "cuda" in devices else "ATen operators (CPU)"
        lines += ["", f"## What a step is made of (eager steps, torch.profiler: {what})", "",
                  "| case | per step | their time per step (ms) | steps/s that time allows | busiest (ms per step) |",
                  "|---|---|---|---|---|"]
        for entry in results["kernels"]:
            if "error" in entry:
                lines.append(f"| {entry['name']} | error: {entry['error'][:80]} | | | |")
                continue
            busiest = ", ".join(f"{b['name'][:40]} ({b['ms_per_step']:.3f})" for b in entry["busiest"][:3])
            lines.append(f"| {entry['name']} | {_number(entry['kernels_per_step'])} | "
                         f"{_number(entry['kernel_ms_per_step'], 3)} | {_number(entry['steps_per_s_bound'])} | "
                         f"{busiest} |")
    base = results.get("authors_loop", {})
    if base:
        lines += ["", f"Authors' loop (same size and batch): {_number(base.get('steps_per_s'))} steps/s "
                      f"({_number(base.get('training_step_only_steps_per_s'))} without its per-batch accuracy "
                      "forward)"]
    if results.get("paper_run"):
        run = results["paper_run"]
        variant = f" ({run['variant']})" if run.get("variant") else ""
        lines += ["", f"Paper run{variant}: {run.get('steps')} steps in {_number(run.get('seconds_with_evaluations'))} s "
                      f"with its evaluations ({_number(run.get('steps_per_s_with_evaluations'))} steps/s); "
                      f"closest BP_k path {run.get('closest_bp', run.get('error'))}"]
    if results.get("skipped"):
        lines += ["", "Skipped: " + "; ".join(results["skipped"])]
    return "\n".join(lines) + "\n"


SECTIONS = {"equivalence": equivalence, "resume": resume, "sync": sync_check, "throughput": throughput,
            "kernels": kernels}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--tiny", action="store_true", help="a tiny model and a few steps (the CPU test)")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds; cases past it are skipped, named")
    parser.add_argument("--paper-steps", type=int, default=0, help="also train the paper's root run this far (0: no)")
    parser.add_argument("--paper-seconds", type=float, default=None,
                        help="stop the paper's root run after this many seconds of training (default: no limit)")
    parser.add_argument("--paper-variant", choices=list(VARIANTS), default="",
                        help="the step of the paper's root run (default: the plain step that --step_mode auto picks)")
    parser.add_argument("--cases", nargs="+", default=None,
                        help="run only these cases, named 'section/name' as in the JSON's case_seconds (default: all)")
    parser.add_argument("--sections", nargs="+", choices=list(SECTIONS), default=list(SECTIONS),
                        help="the sections to run, in this order (default: all; the environment always runs first)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    check = Check(out, args.tiny or not torch.cuda.is_available(), args.budget, args.cases)
    trainer_module.CUDAGraphStep = RecordedGraphStep  # the Trainer's graph steps, remembered for replay_rate
    for section in [environment] + [SECTIONS[name] for name in dict.fromkeys(args.sections)]:  # in the order given
        section(check)
        check.save()
        print(f"{section.__name__}: done ({check.left():.0f} s of budget left)", flush=True)
    if args.paper_steps:
        paper_run(check, args.paper_steps, args.paper_seconds, args.paper_variant)
    check.save()
    print(markdown(check.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
