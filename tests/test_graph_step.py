"""The CUDA-graph step's logic on the CPU: the graph is stood in for by a replay that re-runs the captured step on
the captured inputs and writes the captured outputs in place (what a replay does to their memory).

What runs for real: ``TreeLangTrainer``'s graph path (warm-up steps, the capture's static inputs and outputs, the
per-step copies, the optimizer made capturable, the scheduler writing a rate tensor, what is logged) and resuming
across step modes. What cannot run here is the capture itself (CUDA); ``benchmarks/gpu_check.py`` checks that on a
GPU. The fused Adam is the one capturable optimizer that also steps on a CPU.
"""

import contextlib
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import hf_treelang.train.trainer as trainer
from tiny_run import run_tiny, weights_close

FUSED = ("--optim", "adamw_torch_fused", "--logging_steps", "1")


def stand_in_cuda(monkeypatch, graph_class) -> None:
    """Replace the CUDA calls of ``CUDAGraphStep`` (streams, capture) with no-ops and its graphs with ``graph_class``."""

    class Stream:
        def wait_stream(self, other):
            pass

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", graph_class)
    monkeypatch.setattr(torch.cuda, "graph", lambda graph: contextlib.nullcontext())


@pytest.fixture
def simulated_graphs(monkeypatch):
    """Graph steps on the CPU (``--step_mode auto`` resolves to ``cuda_graph``); returns the graph steps made."""
    steps = []
    original_init = trainer.CUDAGraphStep.__init__

    def init(self, body, optimizer):
        original_init(self, body, optimizer)
        steps.append(self)

    class Graph:
        def __init__(self):
            self.just_captured = True

        def replay(self):
            step = next(s for s in steps if s.graph is self)
            rates = [group["lr"] for group in step.optimizer.param_groups]
            if self.just_captured:  # the capture ran this step already (a real capture only records it)
                self.just_captured, self.rates = False, rates
                assert all(torch.is_tensor(rate) for rate in rates)  # a graph reads the rate's memory
                return
            assert all(now is then for now, then in zip(rates, self.rates))  # written in place, never replaced
            step.optimizer.zero_grad(set_to_none=True)  # the captured backward writes the gradients, never adds
            for static, value in zip(step.static_outputs, step.body(step.static_inputs)):
                static.copy_(value)

    stand_in_cuda(monkeypatch, Graph)
    monkeypatch.setattr(trainer.CUDAGraphStep, "__init__", init)
    monkeypatch.setattr(trainer, "resolve_step_mode", lambda mode, args: "eager" if mode == "eager" else "cuda_graph")
    return steps


def logged(folder, key):
    history = json.loads((folder / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry[key] for entry in history if key in entry and "train_loss" not in entry}


def test_graph_steps_train_as_eager_steps_with_a_schedule_and_dropout(tmp_path, simulated_graphs):
    """Every step's loss, rate and gradient norm, and the final weights, as the eager run's (to float rounding: the
    capturable rate is a float32 tensor); the graph is captured once and replayed for every full batch."""
    extra = (*FUSED, "--lr_scheduler_type", "cosine", "--warmup_steps", "3", "--hidden_dropout_prob", "0.1",
             "--max_grad_norm", "1.0")
    run_tiny("mlm", tmp_path / "eager", *extra, "--step_mode", "eager")
    assert not simulated_graphs
    run_tiny("mlm", tmp_path / "graph", *extra)
    (step,) = simulated_graphs
    assert step.graph is not None and step.calls == trainer.CUDAGraphStep.warmup_steps
    for key in ("loss", "learning_rate", "grad_norm"):
        eager, graph = logged(tmp_path / "eager", key), logged(tmp_path / "graph", key)
        assert sorted(eager) == sorted(graph) == list(range(1, 13)), key
        assert np.allclose([eager[s] for s in eager], [graph[s] for s in eager], rtol=1e-5, atol=1e-6), key
    assert len(set(logged(tmp_path / "graph", "learning_rate").values())) > 3  # the schedule moved the rate
    first = load_file(tmp_path / "eager" / "model.safetensors")
    second = load_file(tmp_path / "graph" / "model.safetensors")
    assert weights_close(first, second)


@pytest.mark.parametrize("first, second", [("eager", "auto"), ("auto", "eager"), ("auto", "auto")])
def test_a_checkpoint_resumes_across_step_modes_as_the_uninterrupted_run(tmp_path, simulated_graphs, first, second):
    """A checkpoint of either mode (``auto``: graph steps here) continues as the uninterrupted run of its mode: the
    optimizer's counters and rate change place (``align_optimizer``), its moments do not."""
    extra = (*FUSED, "--hidden_dropout_prob", "0.1")
    run_tiny("mlm", tmp_path / "full", *extra, "--step_mode", first)
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-3", resumed / "checkpoint-3")
    run_tiny("mlm", resumed, *extra, "--step_mode", second, "--resume_from_checkpoint", str(resumed / "checkpoint-3"))
    full, again = logged(tmp_path / "full", "loss"), logged(resumed, "loss")  # the checkpoint brings steps 1-3
    assert sorted(again) == list(range(1, 13))
    assert np.allclose([full[s] for s in again], [again[s] for s in again], rtol=1e-5, atol=1e-6)
    weights = load_file(tmp_path / "full" / "model.safetensors"), load_file(resumed / "model.safetensors")
    if first == second:  # the same steps in the same mode: the same bytes
        assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])
    else:
        assert weights_close(*weights)


def test_the_graph_steps_warm_up_sees_the_layout_its_capture_sees(monkeypatch):
    """A compiled model is specialised to its inputs' strides: the warm-up steps, which compile it, must see the
    layout of the captured (contiguous) copies, or it compiles again inside the capture. A stacked ensemble's batches
    are strided slices. The CUDA calls are stood in for, so the step's control flow runs on the CPU."""

    class Graph:
        replays = 0

        def replay(self):
            Graph.replays += 1

    stand_in_cuda(monkeypatch, Graph)
    seen = []

    def body(inputs):
        seen.append(inputs["input_ids"].stride())
        return (inputs["input_ids"].sum(),)

    optimizer = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())
    step = trainer.CUDAGraphStep(body, optimizer)
    data = torch.arange(4 * 10 * 8).view(4, 10, 8)  # (N, P, T) members' training sets
    batches = [data[:, rows] for rows in (slice(0, 3), slice(3, 6), slice(6, 9), slice(1, 4), slice(2, 5))]
    assert not batches[0].is_contiguous()  # (N, B, T) with the strides of (N, P, T)
    for batch in batches:
        step({"input_ids": batch})
    assert len(seen) == trainer.CUDAGraphStep.warmup_steps + 1  # three warm-up steps and the capture; then replays
    assert set(seen) == {batches[0].contiguous().stride()}
    assert Graph.replays == 2 and torch.equal(step.static_inputs["input_ids"], batches[-1])  # replayed on a copy
