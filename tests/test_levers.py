"""``--step_mode auto``'s levers: the rule that picks them from the measured GPU table, the table itself, the training
arguments that ask for them, and the time estimates that read the same table."""

import math

import pytest
import torch

from hf_treelang.train import levers
from hf_treelang.train.arguments import TreeLangTrainingArguments
from hf_treelang.train.trainer import with_levers

TABLE = {  # a measured table's shape, with round numbers
    "compiled_tasks": ["root"],
    "single": [
        {"parameters": 10**5, "steps_per_s": 1000.0, "fused_steps_per_s": 1250.0, "compiled_steps_per_s": 2000.0,
         "compile_seconds": 10.0},
        {"parameters": 10**6, "steps_per_s": 500.0, "fused_steps_per_s": 625.0, "compiled_steps_per_s": 1000.0,
         "compile_seconds": 24.0},
    ],
    "stacked": [
        {"parameters": 10**6, "members": 4, "member_steps_per_s": 1000.0},
        {"parameters": 10**6, "members": 16, "member_steps_per_s": 2000.0, "compiled_member_steps_per_s": 4000.0,
         "compile_seconds": 32.0},
    ],
}


def choose(**overrides):
    values = {"step_mode": "auto", "obstacles": [], "optim": "adamw_torch", "steps": 10**6, "parameters": 10**6,
              "members": 1, "treelang": True, "task": "root", "table": TABLE}
    return levers.choose_levers(**{**values, **overrides})


@pytest.mark.parametrize("overrides", [{"step_mode": "eager"}, {"step_mode": "cuda_graph"},
                                       {"obstacles": ["the model runs on 'cpu', not on a CUDA GPU"]}])
def test_no_lever_unless_auto_captures_the_step(overrides):
    taken = choose(**overrides)
    assert not (taken.fused_adam or taken.compiled or taken.math_attention) and taken.reason == ""


def test_auto_fuses_adam_and_compiles_a_long_treelang_root_run():
    taken = choose()
    assert taken.fused_adam and taken.compiled and not taken.math_attention
    assert "fused AdamW" in taken.reason and "torch.compile" in taken.reason


def test_compiling_is_taken_exactly_when_the_run_gains_back_the_compile_time():
    # paper-size row: 1/625 - 1/1000 = 0.0006 s per step; 24 s of compiling are gained back after 40,000 steps
    threshold = 24.0 / (1 / 625 - 1 / 1000)
    assert threshold == pytest.approx(40_000)
    assert not choose(steps=39_999).compiled and choose(steps=40_001).compiled
    assert choose(steps=39_999).fused_adam  # the fused Adam costs nothing up front: always taken
    # the nearest measured size decides: 10**5 parameters gain 1/1250 - 1/2000 = 0.0003 s per step over 10 s
    assert not choose(parameters=10**5, steps=33_000).compiled and choose(parameters=10**5, steps=34_000).compiled


def test_other_architectures_tasks_and_optimizers_are_not_compiled_unmeasured():
    assert not choose(treelang=False).compiled and choose(treelang=False).fused_adam
    assert not choose(task="mlm").compiled  # compiled only where the check measured it (the table's compiled_tasks)
    assert not choose(optim="adamw_torch_fused").fused_adam and choose(optim="adamw_torch_fused").compiled


def test_a_stacked_ensemble_compiles_with_math_attention_where_its_size_was_measured():
    taken = choose(members=16, steps=10_000)
    # 16 members: 16 x (1/2000 - 1/4000) = 0.004 s per step; 32 s gained back after 8,000 steps
    assert taken.compiled and taken.math_attention and "math attention" in taken.reason
    assert not choose(members=16, steps=7_999).compiled
    assert not choose(members=4).compiled  # the x4 row has no compiled rate: not measured, not taken


def test_the_math_attention_context_restricts_sdpa_to_its_math_backend():
    with levers.attention_context(levers.Levers(compiled=True, math_attention=True)):
        assert torch.backends.cuda.math_sdp_enabled() and not torch.backends.cuda.flash_sdp_enabled()
        assert not torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.mem_efficient_sdp_enabled()  # restored
    with levers.attention_context(levers.Levers(fused_adam=True)):
        assert torch.backends.cuda.mem_efficient_sdp_enabled()


def test_the_arguments_with_levers_ask_for_them_and_leave_the_users_alone(tmp_path):
    args = TreeLangTrainingArguments(output_dir=str(tmp_path), report_to="none")
    assert with_levers(args, levers.Levers()) is args
    both = with_levers(args, levers.Levers(fused_adam=True, compiled=True))
    assert both.optim_name == "adamw_torch_fused" and both.torch_compile and both.torch_compile_backend == "inductor"
    assert both.step_mode == "cuda_graph"  # a compiled model is captured only when the graph is asked for by name
    assert args.optim_name == "adamw_torch" and not args.torch_compile and args.step_mode == "auto"


def test_the_measured_table_shows_every_lever_faster_and_its_compile_time():
    table = levers.measured_gpu()
    assert table["device"] and table["date"] and table["compiled_tasks"] == ["root"]
    for row in table["single"]:
        if "fused_steps_per_s" in row:
            assert row["fused_steps_per_s"] > row["steps_per_s"]
        if "compiled_steps_per_s" in row:
            assert row["compiled_steps_per_s"] > row["fused_steps_per_s"] and row["compile_seconds"] > 0
    for row in table["stacked"]:
        if "compiled_member_steps_per_s" in row:
            assert row["compiled_member_steps_per_s"] > row["member_steps_per_s"] and row["compile_seconds"] > 0


def test_measured_rates_interpolate_in_log_parameters_and_hold_outside():
    assert levers.measured_rate(10**5, TABLE) == 1000.0
    assert levers.measured_rate(10**6, TABLE) == pytest.approx(500.0)
    middle = levers.measured_rate(int(10**5.5), TABLE)
    assert middle == pytest.approx(math.sqrt(1000.0 * 500.0), rel=1e-6)  # geometric between the two
    assert levers.measured_rate(10**7, TABLE) == 500.0 and levers.measured_rate(10, TABLE) == 1000.0
    assert levers.measured_rate(10**6, TABLE, key="compiled_steps_per_s") == pytest.approx(1000.0)
    # stacked: the single rate times the stacked-over-single ratio measured at the largest size
    assert levers.measured_rate(10**6, TABLE, members=16) == pytest.approx(2000.0)
    assert levers.measured_rate(10**5, TABLE, members=16, key="compiled_member_steps_per_s") == pytest.approx(
        2000.0 * 4000.0 / 1000.0)


def test_auto_seconds_are_the_chosen_steps_time_plus_the_compilation():
    assert levers.auto_seconds(1000, 10**6, TABLE) == pytest.approx(1000 / 625)  # short: fused, not compiled
    assert levers.auto_seconds(10**6, 10**6, TABLE) == pytest.approx(10**6 / 1000 + 24.0)
    assert levers.auto_seconds(10**6, 10**6, TABLE, members=16) == pytest.approx(16 * 10**6 / 4000 + 32.0)
    assert levers.auto_seconds(10**6, 10**6, TABLE, optim="muon") == pytest.approx(10**6 / 1000 + 24.0)


def test_the_fused_adam_lever_is_the_same_update_as_the_foreach_step():
    torch.manual_seed(0)
    start = [torch.randn(7, 5), torch.randn(5)]
    runs = []
    for fused in (False, True):
        params = [p.clone().requires_grad_() for p in start]
        optimizer = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.0, fused=fused, foreach=None if fused else True)
        generator = torch.Generator().manual_seed(1)
        for _ in range(20):
            for p in params:
                p.grad = torch.randn(p.shape, generator=generator)
            optimizer.step()
        runs.append(params)
    for foreach_param, fused_param in zip(*runs):
        assert torch.allclose(foreach_param, fused_param, atol=1e-6)


def test_the_committed_table_is_what_gpu_measured_writes_from_the_committed_checks(tmp_path):
    import json
    import runpy
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    committed = levers.measured_gpu()
    sources = [root / "benchmarks" / "results" / name.strip() for name in
               committed["about"].split("tabulated by `python benchmarks/gpu_measured.py` from ")[1]
               .split(" (benchmarks/results/)")[0].split(",")]
    script = runpy.run_path(str(root / "benchmarks" / "gpu_measured.py"), run_name="gpu_measured")
    assert script["main"]([*map(str, sources), "--out", str(tmp_path / "table.json")]) == 0
    assert json.loads((tmp_path / "table.json").read_text()) == committed
