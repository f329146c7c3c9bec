"""The MLM training options of issue 33's search: block masks that follow the tree, a falling mask rate, the
warm-up-stable-decay schedule, Muon, AdEMAMix and Grokfast-EMA. Each is checked in both training engines, for
determinism and an exact resume, and refused in one line when out of range.

Tiny sizes (ℓ = 2 or 4, q = 3 or 4, 12 steps).
"""

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from hf_treelang.core.masking import IGNORE_INDEX, TrainingMasking, mask_training_batch
from hf_treelang.train.arguments import PRESETS, parse_command_line
from hf_treelang.train.collators import MaskedLeafCollator
from hf_treelang.train.device_data import TrainingStream
from hf_treelang.train.optimizers import AdEMAMix, GrokfastAdamW, Muon, build_optimizer, parameter_groups
from hf_treelang.train.run import identity_config, resolve
from tiny_run import run_tiny

ROOT = Path(__file__).resolve().parents[1]


def _leaves(n=64, length=16, q=4, seed=0):
    return np.random.default_rng(seed).integers(0, q, size=(n, length))


def _is_aligned_block(row: torch.Tensor, sizes) -> bool:
    """Whether the masked leaves of ``row`` (bool, (T,)) are one aligned block of a size in ``sizes``."""
    where = torch.nonzero(row).ravel().tolist()
    size = len(where)
    return size in sizes and where[0] % size == 0 and where == list(range(where[0], where[0] + size))


# ---------------------------------------------------------------- block masks


def test_block_masks_are_whole_aligned_blocks_of_the_listed_sizes_in_that_fraction_of_rows():
    masking = TrainingMasking(block_fraction=0.5, block_sizes=(2, 4, 8))
    draws = masking.draw(4000, 16, torch.Generator().manual_seed(0))
    blocked = draws.blocks.any(-1)  # (b,)
    assert abs(blocked.float().mean().item() - 0.5) < 0.03
    sizes = draws.blocks[blocked].sum(-1)
    assert set(sizes.tolist()) == {2, 4, 8}
    assert all(_is_aligned_block(row, (2, 4, 8)) for row in draws.blocks[blocked][:300])
    masked, labels = mask_training_batch(_leaves(4000), 4, draws.positions, draws.draws, draws.blocks)
    assert torch.equal((masked == 4)[blocked], draws.blocks[blocked])  # a block row masks its block, nothing else
    assert (masked == 4)[~blocked].sum(-1).eq(1).all()  # the other rows: the paper's single leaf
    assert torch.equal(labels != IGNORE_INDEX, masked == 4)


@pytest.mark.parametrize("engine", ["device", "dataloader"])
def test_both_engines_mask_a_fraction_of_rows_by_one_aligned_block(engine):
    leaves = _leaves(256)
    masking = TrainingMasking(block_fraction=0.5, block_sizes=(2, 4))
    if engine == "device":
        stream = TrainingStream("mlm", leaves, seeds=[3], num_symbols=4, batch_size=32, masking=masking)
        masked = stream.single().epoch(0).inputs == 4  # (256, 16)
    else:
        collate = MaskedLeafCollator(4, seed=3, masking=masking)
        masked = torch.cat([collate([{"input_ids": row, "example_index": 32 * start + i}
                                     for i, row in enumerate(leaves[32 * start: 32 * (start + 1)].tolist())])
                            ["input_ids"] == 4 for start in range(8)])
    counts = masked.sum(-1)
    assert 0.35 < counts.gt(1).float().mean().item() < 0.65
    assert all(_is_aligned_block(row, (2, 4)) for row in masked[counts > 1])
    assert counts.ge(1).all()


def test_the_default_rule_draws_what_the_paper_and_mask_rate_always_drew():
    generator, reference = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    draws = TrainingMasking(0.4).draw(5, 16, generator)
    positions = torch.randint(0, 16, (5,), generator=reference)
    assert torch.equal(draws.positions, positions)
    assert torch.equal(draws.draws, torch.rand((5, 16), generator=reference) < 0.4) and draws.blocks is None


# ---------------------------------------------------------------- a falling mask rate


def test_the_rate_falls_linearly_from_mask_rate_to_mask_rate_final_over_the_steps():
    masking = TrainingMasking(0.4, 0.1, total_steps=10)
    assert torch.allclose(masking.rates(torch.tensor([0, 5, 10, 20])).ravel(),
                          torch.tensor([0.4, 0.25, 0.1, 0.1], dtype=torch.float64))


@pytest.mark.parametrize("engine", ["device", "dataloader"])
def test_both_engines_mask_more_leaves_early_than_late_with_a_falling_rate(engine):
    leaves = _leaves(512)
    masking = TrainingMasking(0.9, 0.05, total_steps=16)
    if engine == "device":
        stream = TrainingStream("mlm", leaves, seeds=[0], num_symbols=4, batch_size=32, masking=masking)
        epoch = stream.single().epoch(0)
        first, last = (epoch.batch(step)["input_ids"] == 4 for step in (0, 15))
    else:
        collate = MaskedLeafCollator(4, seed=0, masking=masking)
        batch = [{"input_ids": row, "example_index": i} for i, row in enumerate(leaves[:32].tolist())]
        collate.start_epoch(0, first_step=0)
        first = collate(batch)["input_ids"] == 4
        collate.start_epoch(0, first_step=15)  # what MaskEpochCallback sets on a run resumed at step 15
        last = collate(batch)["input_ids"] == 4
    assert first.float().mean() > 0.8 and last.float().mean() < 0.15


# ---------------------------------------------------------------- runs: resume, identity, refusals

OPTIONS = ["--mask_rate", "0.5", "--mask_rate_final", "0.1", "--block_mask_fraction", "0.5",
           "--block_mask_sizes", "2", "4"]


@pytest.mark.parametrize("engine", ["device", "dataloader"])
def test_a_run_with_block_masks_and_a_falling_rate_resumes_byte_identically(tmp_path, engine):
    full = run_tiny("mlm", tmp_path / "full", *OPTIONS, "--train_engine", engine)
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-3", resumed_dir / "checkpoint-3")
    resumed = run_tiny("mlm", resumed_dir, *OPTIONS, "--train_engine", engine,
                       "--resume_from_checkpoint", str(resumed_dir / "checkpoint-3"))
    assert resumed.global_step == full.global_step == 12
    first, second = load_file(tmp_path / "full" / "model.safetensors"), load_file(resumed_dir / "model.safetensors")
    assert all(torch.equal(first[key], second[key]) for key in first)


def test_the_options_enter_the_identity_only_when_given(tmp_path):
    plain = identity_config(*_resolved(tmp_path / "a", mask_rate=0.4))
    assert not {"mask_rate_final", "block_mask_fraction", "block_mask_sizes"} & set(plain["data_args"])
    given = identity_config(*_resolved(tmp_path / "b", mask_rate=0.4, block_mask_fraction=0.5))
    assert given["data_args"]["block_mask_fraction"] == 0.5
    laptop = identity_config(*_resolved(tmp_path / "c"))  # the laptop preset's falling rate is part of the run
    assert (laptop["data_args"]["mask_rate"], laptop["data_args"]["mask_rate_final"]) == (0.4, 0.15)


def test_the_laptop_preset_falls_from_0_4_to_0_15_unless_the_user_gives_a_rate():
    laptop = PRESETS["mlm"]["laptop"]
    assert (laptop["mask_rate"], laptop["mask_rate_final"]) == (0.4, 0.15)
    data_args = parse_command_line("mlm", [])[0]
    assert (data_args.mask_rate, data_args.mask_rate_final) == (0.4, 0.15)
    assert data_args.training_masking(100).scheduled
    long = parse_command_line("mlm", ["--preset", "laptop_long"])[0]  # 40 epochs at the constant rate
    assert (long.mask_rate, long.mask_rate_final) == (0.4, None)
    assert not long.training_masking(100).scheduled
    constant = parse_command_line("mlm", ["--mask_rate", "0.3"])[0]  # a rate given alone stays constant
    assert (constant.mask_rate, constant.mask_rate_final) == (0.3, None)
    single = parse_command_line("mlm", ["--mask_rate", "0"])[0]  # the paper's single leaf, not refused
    assert (single.mask_rate, single.mask_rate_final) == (None, None)
    given = parse_command_line("mlm", ["--mask_rate", "0.5", "--mask_rate_final", "0.2"])[0]
    assert (given.mask_rate, given.mask_rate_final) == (0.5, 0.2)
    assert parse_command_line("mlm", ["--mask_rate_final", "0.2"])[0].mask_rate_final == 0.2
    assert parse_command_line("mlm", ["--preset", "paper"])[0].mask_rate_final is None
    for task in ("root", "clm", "finetune"):
        assert "mask_rate_final" not in PRESETS[task]["laptop"]


def test_the_presets_falling_rate_names_its_way_out_of_the_dataloader_workers(tmp_path):
    workers = {"train_engine": "dataloader", "dataloader_num_workers": 2}
    with pytest.raises(ValueError, match=r"`mask_rate_final` = 0.15 .*laptop preset's.*--mask_rate alone"):
        resolve("mlm", {"num_train": 64, **workers}, tmp_path / "never")
    assert not (tmp_path / "never").exists()
    run = resolve("mlm", {"num_train": 64, "mask_rate": 0.4, **workers}, tmp_path / "constant")
    assert run.data_args.mask_rate_final is None and run.training_args.dataloader_num_workers == 2


def _resolved(output_dir, **arguments):
    run = resolve("mlm", {"num_train": 64, **arguments}, output_dir)
    return run.task, run.data_args, run.model_args, run.training_args


@pytest.mark.parametrize("arguments, message", [
    ({"block_mask_fraction": 0.5, "block_mask_sizes": [3]}, "block_mask_sizes"),
    ({"block_mask_fraction": 0.5, "block_mask_sizes": [32]}, r"\[1, 16\]"),
    ({"block_mask_fraction": 1.5}, "block_mask_fraction"),
    ({"mask_rate_final": 1.5}, "mask_rate_final"),
    ({"mask_rate": 0, "mask_rate_final": 0.1}, "needs a `mask_rate`"),
    ({"mask_rate_final": 0.1, "train_engine": "dataloader", "dataloader_num_workers": 2}, "dataloader_num_workers"),
])
def test_out_of_range_mask_options_are_refused_naming_the_parameter(tmp_path, arguments, message):
    with pytest.raises(ValueError, match=message):
        resolve("mlm", arguments, tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_a_mask_option_is_refused_by_a_task_that_masks_nothing(tmp_path):
    with pytest.raises(ValueError, match="block_mask_fraction.*only used by MLM"):
        resolve("root", {"block_mask_fraction": 0.5}, tmp_path / "never")


def test_the_script_refuses_a_block_size_above_the_tree_in_one_line_with_exit_2(tmp_path):
    from tiny_run import run_script

    code, _, stderr = run_script("mlm", ["--depth", "2", "--block_mask_fraction", "0.5", "--block_mask_sizes", "8",
                                         "--output_dir", tmp_path / "never"])
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1 and "block_mask_sizes" in stderr
    assert not (tmp_path / "never").exists()


# ---------------------------------------------------------------- warm-up, stable, decay


@pytest.mark.parametrize("engine", ["device", "dataloader"])
def test_warmup_stable_decay_passes_through_both_engines(tmp_path, engine):
    run_tiny("mlm", tmp_path / "run", "--lr_scheduler_type", "warmup_stable_decay", "--lr_scheduler_kwargs",
             '{"num_decay_steps": 4, "decay_type": "linear"}', "--warmup_steps", "2", "--logging_steps", "1",
             "--learning_rate", "1e-3", "--num_evaluations", "0", "--num_checkpoints", "0", "--train_engine", engine)
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    rates = [entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry]
    expected = [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.75, 0.5, 0.25]  # warm-up 2, stable 6, decay 4
    assert rates == pytest.approx([1e-3 * rate for rate in expected], abs=1e-12)


@pytest.mark.parametrize("kwargs, message", [
    ("{}", "must give num_decay_steps"),
    ('{"num_decay_steps": 20}', r"num_decay_steps.*\[0, 12\]"),
    ('{"num_decay_steps": 4, "decay_type": "step"}', "decay_type"),
    ('{"num_decay_steps": 4, "decay_steps": 3}', "'decay_steps'"),
])
def test_a_warmup_stable_decay_that_does_not_fit_the_run_is_refused_before_any_work(tmp_path, kwargs, message):
    from tiny_run import tiny_run

    with pytest.raises(ValueError, match=message):
        tiny_run("mlm", tmp_path / "never", "--lr_scheduler_type", "warmup_stable_decay",
                 "--lr_scheduler_kwargs", kwargs)
    assert not (tmp_path / "never").exists()


# ---------------------------------------------------------------- optimisers


def _two_steps(optimizer_class, gradients, **kwargs):
    param = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    optimizer = optimizer_class([param], **kwargs)
    trajectory = []
    for gradient in gradients:
        param.grad = torch.tensor(gradient, dtype=torch.float64)
        optimizer.step()
        trajectory.append(param.detach().clone().tolist())
    return trajectory


def test_ademamix_matches_a_hand_computation_of_two_steps():
    g1, g2 = [0.5, -1.0], [0.1, 0.3]
    lr, b1, b2, b3, alpha, eps, decay = 0.1, 0.9, 0.999, 0.9999, 5.0, 1e-8, 0.01
    got = _two_steps(AdEMAMix, [g1, g2], lr=lr, betas=(b1, b2, b3), alpha=alpha, eps=eps, weight_decay=decay)
    theta, expected = [1.0, -2.0], []
    m1 = m2 = v = [0.0, 0.0]
    for t, g in ((1, g1), (2, g2)):
        m1 = [b1 * a + (1 - b1) * x for a, x in zip(m1, g)]
        m2 = [b3 * a + (1 - b3) * x for a, x in zip(m2, g)]
        v = [b2 * a + (1 - b2) * x * x for a, x in zip(v, g)]
        theta = [p - lr * ((a / (1 - b1 ** t) + alpha * s) / ((w / (1 - b2 ** t)) ** 0.5 + eps) + decay * p)
                 for p, a, s, w in zip(theta, m1, m2, v)]
        expected.append(theta)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    assert got[0] == pytest.approx([1 - 0.1 * (1.0005 + 0.01), -2 + 0.1 * (1.0005 + 0.02)], abs=1e-7)  # by hand


def test_ademamix_warms_its_slow_momentum_up_and_is_adamw_at_alpha_zero():
    assert AdEMAMix.scheduled(0.9, 0.9999, 5.0, 0, 100) == pytest.approx((0.9, 0.0))
    assert AdEMAMix.scheduled(0.9, 0.9999, 5.0, 50, 100)[1] == 2.5
    assert AdEMAMix.scheduled(0.9, 0.9999, 5.0, 100, 100) == (0.9999, 5.0)
    gradients = [[0.5, -1.0], [0.1, 0.3], [-0.2, 0.7]]
    ours = _two_steps(AdEMAMix, gradients, lr=0.1, alpha=0.0, weight_decay=0.01)
    adamw = _two_steps(torch.optim.AdamW, gradients, lr=0.1, weight_decay=0.01)
    np.testing.assert_allclose(ours, adamw, rtol=0, atol=1e-12)


def test_grokfast_adds_the_amplified_gradient_ema_before_adamw_by_hand():
    g1, g2 = [0.5, -1.0], [0.1, 0.3]
    lr, b1, b2, eps, decay, alpha, lamb = 0.1, 0.9, 0.999, 1e-8, 0.01, 0.98, 2.0
    got = _two_steps(GrokfastAdamW, [g1, g2], lr=lr, weight_decay=decay, alpha=alpha, lamb=lamb)
    theta, expected, ema = [1.0, -2.0], [], None
    m = v = [0.0, 0.0]
    for t, g in ((1, g1), (2, g2)):
        ema = list(g) if ema is None else [alpha * e + (1 - alpha) * x for e, x in zip(ema, g)]
        filtered = [x + lamb * e for x, e in zip(g, ema)]
        m = [b1 * a + (1 - b1) * x for a, x in zip(m, filtered)]
        v = [b2 * a + (1 - b2) * x * x for a, x in zip(v, filtered)]
        theta = [p * (1 - lr * decay) - lr * (a / (1 - b1 ** t)) / ((w / (1 - b2 ** t)) ** 0.5 + eps)
                 for p, a, w in zip(theta, m, v)]
        expected.append(theta)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    assert got[0] == pytest.approx([1 * 0.999 - 0.1, -2 * 0.999 + 0.1], abs=1e-7)  # Adam's first step: lr x sign
    plain = _two_steps(GrokfastAdamW, [g1, g2], lr=lr, weight_decay=decay, lamb=0.0)
    adamw = _two_steps(torch.optim.AdamW, [g1, g2], lr=lr, weight_decay=decay)
    np.testing.assert_allclose(plain, adamw, rtol=0, atol=1e-12)


def _tiny_model():
    from tiny_run import tiny_run
    from hf_treelang.train.loop import build_model

    torch.manual_seed(0)
    return build_model(tiny_run("mlm", "/nonexistent/never"))


def _random_gradients(model, seed=1):
    generator = torch.Generator().manual_seed(seed)
    for param in model.parameters():
        param.grad = torch.randn(param.shape, generator=generator)


def test_muon_orthogonalises_query_key_and_value_apart_and_adamw_trains_the_rest():
    model = _tiny_model()
    hidden, _, other, _, views = parameter_groups(model, muon=True)
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)] for p in other} == {n for n, p in model.named_parameters()
                                             if p.dim() == 1 or "embeddings" in n or "lm_head" in n}
    assert len(views) == 3 * 2 and all(view.shape == (32, 32) for view, _, _ in views)  # 2 layers x (q, k, v)
    in_proj = model.treelang.layers[0].attention.in_proj.weight
    before = in_proj.detach().clone()
    optimizer = build_optimizer(model, "muon", learning_rate=1e-2)
    _random_gradients(model)
    reference = torch.nn.Parameter(before[32:64].clone())  # the key rows, as their own matrix
    reference.grad = in_proj.grad[32:64].clone()
    Muon([reference], lr=1e-2, weight_decay=0.0, momentum=0.95, adjust_lr_fn="match_rms_adamw").step()
    optimizer.step()
    torch.testing.assert_close(in_proj.detach()[32:64], reference.detach(), rtol=0, atol=1e-6)
    whole = torch.nn.Parameter(before.clone())  # the fused matrix orthogonalised at once steps otherwise
    whole.grad = in_proj.grad.clone()
    torch.optim.Muon([whole], lr=1e-2, weight_decay=0.0, adjust_lr_fn="match_rms_adamw").step()
    assert not torch.allclose(whole.detach()[32:64], reference.detach(), atol=1e-6)


def _float64_newton_schulz(grad, ns_coefficients, ns_steps, eps):
    """torch's iteration (``torch.optim._muon._zeropower_via_newtonschulz``) in float64, as a reference."""
    a, b, c = ns_coefficients
    x = grad.double().T if grad.size(0) > grad.size(1) else grad.double()
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return (x.T if grad.size(0) > grad.size(1) else x).float()


def test_muon_steps_as_torch_muon_with_exact_iterations_and_near_its_bfloat16_ones(monkeypatch):
    generator = torch.Generator().manual_seed(3)
    shapes = [(32, 32), (64, 32), (32, 64), (32, 32), (64, 32)]
    start = [torch.randn(shape, generator=generator) for shape in shapes]
    gradients = [[torch.randn(shape, generator=generator) for shape in shapes] for _ in range(3)]

    def run(optimizer_class):
        params = [torch.nn.Parameter(value.clone()) for value in start]
        optimizer = optimizer_class(params, lr=1e-2, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
        for step in gradients:
            for param, grad in zip(params, step):
                param.grad = grad.clone()
            optimizer.step()
        return [param.detach() for param in params]

    ours, bfloat16 = run(Muon), run(torch.optim.Muon)
    monkeypatch.setattr(torch.optim._muon, "_zeropower_via_newtonschulz", _float64_newton_schulz)
    exact = run(torch.optim.Muon)
    for mine, reference, coarse, first in zip(ours, exact, bfloat16, start):
        torch.testing.assert_close(mine, reference, rtol=0, atol=1e-5)
        moved = (reference - first).abs().max()
        assert (mine - coarse).abs().max() < 0.05 * moved  # the same update, up to bfloat16's rounding
        assert (mine - reference).abs().max() < 1e-3 * moved


@pytest.mark.parametrize("optim", ["muon", "ademamix", "grokfast_adamw"])
def test_an_optimizer_state_saved_and_loaded_steps_as_the_uninterrupted_one(optim):
    first, second = _tiny_model(), _tiny_model()
    one = build_optimizer(first, optim, learning_rate=1e-2, qk_multiplier=2.0, total_steps=10)
    for seed in (1, 2):
        _random_gradients(first, seed)
        one.step()
    second.load_state_dict(first.state_dict())
    two = build_optimizer(second, optim, learning_rate=1e-2, qk_multiplier=2.0, total_steps=10)
    two.load_state_dict(copy.deepcopy(one.state_dict()))  # as from a checkpoint file: no tensor shared
    for model, optimizer in ((first, one), (second, two)):
        _random_gradients(model, 3)
        optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values()))


def test_zero_grad_clears_the_weights_trained_as_row_blocks():
    model = _tiny_model()
    optimizer = build_optimizer(model, "muon", learning_rate=1e-3)
    _random_gradients(model)
    optimizer.zero_grad()  # the device engine's only zeroing: a kept gradient would add into the next step's
    assert all(param.grad is None for param in model.parameters())


def test_the_query_and_key_rows_train_at_the_multiplied_rate():
    model = _tiny_model()
    in_proj = model.treelang.layers[0].attention.in_proj.weight
    before = in_proj.detach().clone()
    optimizer = build_optimizer(model, "adamw_torch", learning_rate=1e-3, qk_multiplier=3.0)
    _random_gradients(model)
    optimizer.step()  # Adam's first step moves every weight by lr x sign(gradient)
    moved = (in_proj.detach() - before).abs()  # (3d, d)
    assert moved[:64].mean().item() == pytest.approx(3e-3, rel=1e-3)  # query and key rows
    assert moved[64:].mean().item() == pytest.approx(1e-3, rel=1e-3)  # value rows


@pytest.mark.parametrize("engine, optim", [("device", "muon"), ("dataloader", "ademamix"),
                                           ("device", "grokfast_adamw")])
def test_a_run_with_a_search_optimizer_resumes_byte_identically(tmp_path, engine, optim):
    flags = ["--optim", optim, "--train_engine", engine, "--qk_learning_rate_multiplier", "2"]
    full = run_tiny("mlm", tmp_path / "full", *flags)
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-3", resumed_dir / "checkpoint-3")
    resumed = run_tiny("mlm", resumed_dir, *flags, "--resume_from_checkpoint", str(resumed_dir / "checkpoint-3"))
    assert resumed.global_step == full.global_step == 12
    first, second = load_file(tmp_path / "full" / "model.safetensors"), load_file(resumed_dir / "model.safetensors")
    assert all(torch.equal(first[key], second[key]) for key in first)


@pytest.mark.parametrize("flags, message", [
    (["--qk_learning_rate_multiplier", "0"], "qk_learning_rate_multiplier"),
    (["--optim", "muon", "--ensemble_seeds", "0", "1"], "ensemble_mode sequential"),
    (["--optim", "muon", "--step_mode", "cuda_graph"], "cuda_graph"),
    (["--optim", "muonn"], "optim"),
    (["--optim", "sgd", "--qk_learning_rate_multiplier", "2"], "needs --optim adamw_torch"),
])
def test_a_search_optimizer_that_cannot_run_is_refused_before_any_work(tmp_path, flags, message):
    from hf_treelang.train.run import runs_from_command_line
    from tiny_run import TINY

    with pytest.raises(ValueError, match=message):
        runs_from_command_line("mlm", TINY + ["--output_dir", str(tmp_path / "never"), *flags])
    assert not (tmp_path / "never").exists()


def test_the_identity_of_a_run_names_its_search_optimizer(tmp_path):
    plain = identity_config(*_resolved(tmp_path / "a"))["training_args"]
    assert "qk_learning_rate_multiplier" not in plain and plain["optim"] == "adamw_torch"
    muon = identity_config(*_resolved(tmp_path / "b", optim="muon", qk_learning_rate_multiplier=2.0))
    assert muon["training_args"]["optim"] == "muon" and muon["training_args"]["qk_learning_rate_multiplier"] == 2.0


def test_the_search_optimizers_and_the_query_key_rate_are_named_obstacles_to_a_cuda_graph():
    from hf_treelang.train.arguments import parse_command_line

    for flags, named in ((["--optim", "muon"], "optim 'muon'"), (["--optim", "ademamix"], "optim 'ademamix'"),
                         (["--qk_learning_rate_multiplier", "2"], "qk_learning_rate_multiplier 2.0")):
        training_args = parse_command_line("mlm", flags)[2]
        assert any(obstacle.startswith(named) for obstacle in training_args.cuda_graph_obstacles(requested=True))


# ---------------------------------------------------------------- a σ curriculum

# 4 steps per epoch, 3 epochs: epochs 0 and 1 at σ = 3 and 2, epoch 2 on the run's training set (σ = 1)
CURRICULUM = ["--num_train", "32", "--num_train_epochs", "3", "--sigma_curriculum_start", "3",
              "--sigma_curriculum_epochs", "2"]


def _stream(output_dir, task, *flags):
    """The training stream of the tiny run of ``task`` with ``flags``, and the run."""
    from hf_treelang.train.data import load_run_data
    from hf_treelang.train.device_data import optimizer_steps
    from hf_treelang.train.trainer import single_run_stream
    from tiny_run import tiny_run

    run = tiny_run(task, output_dir, *flags)
    steps = optimizer_steps(run.training_args, run.data_args.num_train)
    return single_run_stream(run.model_task, load_run_data(run.data_args), run.data_args, run.training_args,
                             steps), run


def _served_rows(batches, task):
    """The leaves an epoch's rows were drawn from, read back from its batches: (n, T)."""
    if task == "mlm":  # a masked leaf is its label
        return torch.where(batches.labels == IGNORE_INDEX, batches.inputs, batches.labels)
    return batches.labels if task == "clm" else batches.inputs


@pytest.mark.parametrize("task", ["mlm", "root", "clm"])
def test_the_curriculum_epochs_train_on_the_same_grammar_at_the_annealed_sigma(tmp_path, task):
    from hf_treelang.core.grammar import Grammar
    from hf_treelang.core.sampling import sample_trees
    from hf_treelang.train.data import sigma_curriculum
    from hf_treelang.train.device_data import epoch_generator

    stream, run = _stream(tmp_path / "curriculum", task, *CURRICULUM)
    plain, _ = _stream(tmp_path / "plain", task, *CURRICULUM[:4])
    curriculum = sigma_curriculum(run.data_args)
    for epoch, sigma in ((0, 3.0), (1, 2.0)):
        order = torch.randperm(32, generator=epoch_generator(run.training_args.seed, epoch))
        seed = curriculum.sampling_seed(epoch)
        trees = sample_trees(Grammar.random(3, sigma, 0), 32, 2, 0, seed)  # same grammar seed, sharper rules
        at_one = sample_trees(Grammar.random(3, 1.0, 0), 32, 2, 0, seed)
        assert not np.array_equal(trees.leaves, at_one.leaves)  # σ changes the draw
        batches, reference = stream.epoch(epoch), plain.epoch(epoch)
        assert torch.equal(_served_rows(batches, task), torch.as_tensor(trees.leaves)[order])
        if task == "root":
            assert torch.equal(batches.labels, torch.as_tensor(trees.roots)[order])
        if task == "mlm":  # the same masked positions as the plain run: only the rows differ
            assert torch.equal(batches.labels != IGNORE_INDEX, reference.labels != IGNORE_INDEX)
        assert not torch.equal(batches.inputs, reference.inputs)
    last, reference = stream.epoch(2), plain.epoch(2)  # after the curriculum: the run's own training set
    assert torch.equal(last.inputs, reference.inputs) and torch.equal(last.labels, reference.labels)


def test_the_curriculum_draws_are_fresh_each_epoch_and_the_same_for_every_model_seed(tmp_path):
    from hf_treelang.train.data import sigma_curriculum

    first = sigma_curriculum(_stream(tmp_path / "a", "mlm", *CURRICULUM)[1].data_args)
    other = sigma_curriculum(_stream(tmp_path / "b", "mlm", *CURRICULUM, "--seed", "5")[1].data_args)
    assert [first.sigma_at(e) for e in range(3)] == [3.0, 2.0, None]
    assert first.sampling_seed(0) != first.sampling_seed(1)
    assert np.array_equal(first.training_set(1).leaves, other.training_set(1).leaves)
    assert first.training_set(2) is None


def test_a_curriculum_run_evaluates_at_the_runs_sigma(tmp_path):
    plain = run_tiny("mlm", tmp_path / "plain", *CURRICULUM[:4])
    curriculum = run_tiny("mlm", tmp_path / "curriculum", *CURRICULUM)
    timing = ("runtime", "per_second")
    start, reference = ({key: value for key, value in result.history[0].items() if not key.endswith(timing)}
                        for result in (curriculum, plain))
    assert start["step"] == 0 and "eval_kl_bp_k0" in start and start == reference
    first = load_file(tmp_path / "plain" / "model.safetensors")
    second = load_file(tmp_path / "curriculum" / "model.safetensors")
    assert not all(torch.equal(first[key], second[key]) for key in first)  # it trained on other data


def test_a_run_resumed_in_the_curriculum_equals_the_uninterrupted_one(tmp_path):
    full = run_tiny("mlm", tmp_path / "full", *CURRICULUM)
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-3", resumed_dir / "checkpoint-3")  # in epoch 0, at σ = 3
    resumed = run_tiny("mlm", resumed_dir, *CURRICULUM, "--resume_from_checkpoint", str(resumed_dir / "checkpoint-3"))
    assert resumed.global_step == full.global_step == 12
    first, second = load_file(tmp_path / "full" / "model.safetensors"), load_file(resumed_dir / "model.safetensors")
    assert all(torch.equal(first[key], second[key]) for key in first)


def test_the_curriculum_enters_the_identity_only_when_given(tmp_path):
    plain = identity_config(*_resolved(tmp_path / "a"))
    assert not {"sigma_curriculum_start", "sigma_curriculum_epochs"} & set(plain["data_args"])
    given = identity_config(*_resolved(tmp_path / "b", sigma_curriculum_start=2, sigma_curriculum_epochs=3))
    assert given["data_args"]["sigma_curriculum_start"] == 2.0 and given["data_args"]["sigma_curriculum_epochs"] == 3


@pytest.mark.parametrize("arguments, message", [
    ({"sigma_curriculum_start": 1.0, "sigma_curriculum_epochs": 2}, r"sigma_curriculum_start.*\(1, 1000\].*got 1.0"),
    ({"sigma_curriculum_start": 0.5, "sigma_curriculum_epochs": 2}, r"sigma_curriculum_start.*\(1, 1000\]"),
    ({"sigma_curriculum_start": 2000.0, "sigma_curriculum_epochs": 2}, r"sigma_curriculum_start.*\(1, 1000\]"),
    ({"sigma_curriculum_start": float("inf"), "sigma_curriculum_epochs": 2}, r"sigma_curriculum_start.*got inf"),
    ({"sigma_curriculum_start": float("nan"), "sigma_curriculum_epochs": 2}, r"sigma_curriculum_start.*got nan"),
    ({"sigma_curriculum_start": 2.0, "sigma_curriculum_epochs": 0}, r"sigma_curriculum_epochs.*>= 1, got 0"),
    ({"sigma_curriculum_start": 2.0, "sigma_curriculum_epochs": 12}, r"sigma_curriculum_epochs.*\[1, 11\].*got 12"),
    ({"sigma_curriculum_start": 2.0, "sigma_curriculum_epochs": 1, "num_train_epochs": 1.0}, "at least 2 epochs"),
    ({"sigma_curriculum_start": 2.0}, "needs `sigma_curriculum_epochs`"),
    ({"sigma_curriculum_epochs": 2}, "needs `sigma_curriculum_start`"),
    ({"sigma_curriculum_start": 2.0, "sigma_curriculum_epochs": 2, "train_engine": "dataloader"},
     "needs --train_engine device"),
    ({"sigma_curriculum_start": 2.0, "sigma_curriculum_epochs": 2, "num_rules": 2}, "Random Hierarchy Model"),
])
def test_an_out_of_range_curriculum_is_refused_naming_the_parameter(tmp_path, arguments, message):
    with pytest.raises(ValueError, match=message):
        resolve("mlm", arguments, tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_the_script_refuses_a_curriculum_below_sigma_in_one_line_with_exit_2(tmp_path):
    from tiny_run import run_script

    code, _, stderr = run_script("mlm", ["--sigma_curriculum_start", "0.5", "--sigma_curriculum_epochs", "2",
                                         "--output_dir", tmp_path / "never"])
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1 and "sigma_curriculum_start" in stderr
    assert not (tmp_path / "never").exists()


def test_a_stacked_ensemble_serves_each_member_its_single_runs_curriculum_batches(tmp_path):
    from hf_treelang.train.data import sigma_curriculum

    singles = [_stream(tmp_path / f"seed{seed}", "mlm", *CURRICULUM, "--seed", str(seed)) for seed in (0, 1)]
    (_, run), _ = singles
    stacked = TrainingStream("mlm", np.stack([stream.leaves[0].numpy() for stream, _ in singles]), seeds=[0, 1],
                             num_symbols=3, batch_size=8, masking=run.data_args.training_masking(12),
                             curricula=[sigma_curriculum(run.data_args)] * 2)
    for epoch in (0, 2):
        batches = stacked.epoch(epoch)
        for member, (stream, _) in enumerate(singles):
            single = stream.epoch(epoch)
            assert torch.equal(batches.inputs[member], single.inputs)
            assert torch.equal(batches.labels[member], single.labels)


def test_a_stacked_ensemble_gives_each_member_its_curriculum(tmp_path, monkeypatch):
    from hf_treelang.train import loop
    from hf_treelang.train.run import runs_from_command_line
    from tiny_run import TINY

    built = {}

    class Built(Exception):
        pass

    def stream(*args, **kwargs):  # the stacked stream's arguments; the stream itself is tested above
        built.update(kwargs)
        raise Built

    monkeypatch.setattr(loop, "TrainingStream", stream)
    runs, ensemble = runs_from_command_line("mlm", TINY + CURRICULUM + [
        "--ensemble_seeds", "0", "1", "--ensemble_k_train", "0", "1", "--ensemble_mode", "stacked",
        "--output_dir", str(tmp_path / "ensemble")])
    with pytest.raises(Built):
        loop.train_together(runs, mode="stacked", ensemble_dir=ensemble.output_dir)
    curricula = built["curricula"]
    assert [(c.filter_level, c.sigma_at(0), c.sigma_at(1), c.epochs) for c in curricula] == [
        (run.data_args.k_train, 3.0, 2.0, 2) for run in runs]
