"""What ``--step_mode auto`` adds to a CUDA-graph step, from what ``benchmarks/gpu_check.py`` measured on a GPU.

A step that ``auto`` captures as a CUDA graph (a GPU, one process, Adam, no fp16: see
:meth:`~hf_treelang.train.arguments.TreeLangTrainingArguments.cuda_graph_obstacles`) takes each *lever* that the
measurement on a GPU (:data:`MEASURED_GPU_FILE`) found faster and equivalent (the losses of eager and graph steps
within the check's tolerance, a resumed run continuing as the uninterrupted one):

* **fused Adam** — ``--optim adamw_torch`` steps with torch's fused AdamW kernel (``adamw_torch_fused``): the same
  update, one kernel for all the tensors instead of the foreach kernels' several passes. Faster at every measured
  size; any model.
* **compiled model** — the TreeLang model (one or a stacked ensemble) compiled by ``torch.compile`` (inductor) and
  captured in the graph: layer norms, dropouts and residual additions fused into a few kernels. A compilation costs
  tens of seconds once per run, so it is taken when the run is long enough to gain them back:
  ``steps × (1 / rate_fused − 1 / rate_compiled) > compile_seconds`` at the measured size nearest the model's
  (:func:`compile_pays`). Not taken for other architectures (``--model_type``), never measured compiled.
* **math attention** — a compiled stacked ensemble computes its attention with SDPA's math backend (the product,
  softmax and dropout as plain operators, fused by inductor) instead of the memory-efficient kernel, whose tiles a
  16-leaf sequence mostly pads.

The levers change how the step is computed, never what: the run keeps its identity, and the arguments the Trainer
receives say what ran (``optim``, ``torch_compile``, ``step_mode="cuda_graph"``). ``--step_mode cuda_graph`` and
``eager`` take none of them: the user's flags are then exactly what runs.

Glossary: ``N`` stacked members (1 for a single run); rates in steps/s (member-steps/s for a stacked row).
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

MEASURED_GPU_FILE = Path(__file__).with_name("gpu_measured.json")  # benchmarks/gpu_check.py's figures on one GPU
FUSABLE_OPTIMIZER = "adamw_torch"  # the foreach AdamW, whose fused kernel computes the same update
FUSED_OPTIMIZER = "adamw_torch_fused"


def measured_gpu() -> dict:
    """The steps/s ``benchmarks/gpu_check.py`` measured on one GPU (:data:`MEASURED_GPU_FILE`): the device, the date,
    single runs by parameter count and stacked runs by member count, for the plain graph step and each lever."""
    return json.loads(MEASURED_GPU_FILE.read_text())


@dataclass(frozen=True)
class Levers:
    """The levers one run's step takes (all False: the step as its flags say).

    Attributes:
        fused_adam: step ``adamw_torch`` with the fused kernel.
        compiled: compile the model and capture the compiled step.
        math_attention: the compiled step's attention through SDPA's math backend.
        reason: one line saying what was taken and why (for the log).
    """

    fused_adam: bool = False
    compiled: bool = False
    math_attention: bool = False
    reason: str = ""

    @property
    def any(self) -> bool:
        return self.fused_adam or self.compiled or self.math_attention


def nearest_row(rows: list, parameters: int) -> dict:
    """The measured row whose parameter count is nearest to ``parameters`` on a log scale."""
    return min(rows, key=lambda row: abs(math.log(row["parameters"]) - math.log(max(parameters, 1))))


def compile_pays(steps: int, row: dict, members: int = 1) -> bool:
    """Whether compiling gains back its time within ``steps`` optimizer steps, by ``row``'s measured rates (per
    member for a stacked row) and compile seconds; False when the row lacks a compiled rate."""
    key = "member_steps_per_s" if members > 1 else "steps_per_s"
    fused = row.get(f"fused_{key}", row.get(key))
    compiled = row.get(f"compiled_{key}")
    if not fused or not compiled or "compile_seconds" not in row:
        return False
    step_gain = members * (1.0 / fused - 1.0 / compiled)  # seconds saved per optimizer step of the whole stack
    return step_gain > 0 and steps * step_gain > row["compile_seconds"]


def choose_levers(*, step_mode: str, obstacles: list, optim: str, steps: int, parameters: int, members: int = 1,
                  treelang: bool = True, task: str = "root", table: dict | None = None) -> Levers:
    """The levers of a run: none unless ``step_mode`` is ``"auto"`` and nothing stands in the way of a CUDA graph
    (``obstacles`` empty); then fused Adam for ``adamw_torch``, and a compiled step (with math attention when
    stacked) for a TreeLang model of a measured task when :func:`compile_pays` for its ``steps``.

    Args:
        steps: the run's optimizer steps; parameters: one member's parameter count; members: N stacked (1: single).
        table: the measured rates (default :func:`measured_gpu`).
    """
    if step_mode != "auto" or obstacles:
        return Levers()
    table = table if table is not None else measured_gpu()
    fused = optim == FUSABLE_OPTIMIZER
    taken = [f"fused AdamW (measured faster than {FUSABLE_OPTIMIZER}'s foreach step)"] if fused else []
    compiled = False
    if treelang and task in table.get("compiled_tasks", ()):
        if members > 1:
            rows = [row for row in table["stacked"] if row["members"] <= members] or table["stacked"]
            row = max(rows, key=lambda row: row["members"])
        else:
            row = nearest_row(table["single"], parameters)
        compiled = compile_pays(steps, row, members)
        if compiled:
            taken.append(f"torch.compile ({steps:,} steps gain back its ~{row['compile_seconds']:.0f} s)")
    math_attention = compiled and members > 1
    if math_attention:
        taken.append("math attention (measured faster in a compiled stacked step)")
    reason = ("step_mode auto: a CUDA graph with " + ", ".join(taken)) if taken else ""
    return Levers(fused_adam=fused, compiled=compiled, math_attention=math_attention, reason=reason)


def rate_key(levers: Levers, members: int = 1) -> str:
    """The measured table's key of the rate a step with ``levers`` runs at (steps/s; member-steps/s stacked)."""
    name = "member_steps_per_s" if members > 1 else "steps_per_s"
    return f"compiled_{name}" if levers.compiled else f"fused_{name}" if levers.fused_adam else name


def measured_rate(parameters: int, table: dict, members: int = 1, key: str | None = None) -> float:
    """Steps/s of one run of ``parameters`` on the measured GPU (``members`` > 1: member-steps/s of that many stacked
    runs) for the table's ``key`` (default: the plain graph step; a row without it falls back to the plain rate),
    interpolated in log(parameters) between the measured sizes and held at the nearest one outside them. A stacked
    rate is the single rate at ``parameters`` times the stacked-over-single ratio measured at the largest size."""
    key = key or ("member_steps_per_s" if members > 1 else "steps_per_s")
    if members > 1:
        rows = [row for row in table["stacked"] if row["members"] <= members] or table["stacked"]
        row = max(rows, key=lambda row: row["members"])
        single_key = key.replace("member_steps_per_s", "steps_per_s")
        largest = max(table["single"], key=lambda row: row["parameters"])
        ratio = row.get(key, row["member_steps_per_s"]) / largest.get(single_key, largest["steps_per_s"])
        return measured_rate(parameters, table, key=single_key) * ratio
    points = sorted((row["parameters"], row.get(key, row["steps_per_s"])) for row in table["single"])
    if parameters <= points[0][0]:
        return points[0][1]
    for (low, low_rate), (high, high_rate) in zip(points, points[1:]):
        if parameters <= high:
            t = (math.log(parameters) - math.log(low)) / (math.log(high) - math.log(low))
            return math.exp(math.log(low_rate) + t * (math.log(high_rate) - math.log(low_rate)))
    return points[-1][1]


def auto_seconds(steps: int, parameters: int, table: dict, *, members: int = 1, optim: str = FUSABLE_OPTIMIZER,
                 treelang: bool = True, task: str = "root") -> float:
    """Seconds of optimizer steps of one run (a stack of ``members`` runs: their total) on the measured GPU, with the
    levers ``--step_mode auto`` would take there (:func:`choose_levers`), a compilation's seconds included."""
    levers = choose_levers(step_mode="auto", obstacles=[], optim=optim, steps=steps, parameters=parameters,
                           members=members, treelang=treelang, task=task, table=table)
    rate = measured_rate(parameters, table, members, rate_key(levers, members))
    compile_seconds = 0.0
    if levers.compiled:
        rows = [row for row in table["stacked"] if row["members"] <= members] if members > 1 else table["single"]
        row = max(rows, key=lambda row: row["members"]) if members > 1 else nearest_row(rows, parameters)
        compile_seconds = row["compile_seconds"]
    return steps * members / rate + compile_seconds


def attention_context(levers: Levers):
    """The context a step runs in: SDPA restricted to its math backend for :attr:`Levers.math_attention`."""
    if not levers.math_attention:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH])


__all__ = ["Levers", "MEASURED_GPU_FILE", "attention_context", "auto_seconds", "choose_levers", "compile_pays",
           "measured_gpu", "measured_rate", "nearest_row", "rate_key"]
