"""The MLM training options of issue 33's search: block masks that follow the tree, a falling mask rate, the
warm-up-stable-decay schedule, Muon, AdEMAMix and Grokfast-EMA. Each is checked in both training engines, for
determinism and an exact resume, and refused in one line when out of range.

Tiny sizes (ℓ = 2 or 4, q = 3 or 4, 12 steps).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from hf_treelang.core.masking import IGNORE_INDEX, TrainingMasking, mask_training_batch
from hf_treelang.train.collators import MaskedLeafCollator
from hf_treelang.train.device_data import TrainingStream
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
    plain = identity_config(*_resolved(tmp_path / "a"))
    assert not {"mask_rate_final", "block_mask_fraction", "block_mask_sizes"} & set(plain["data_args"])
    given = identity_config(*_resolved(tmp_path / "b", block_mask_fraction=0.5))
    assert given["data_args"]["block_mask_fraction"] == 0.5


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
    done = subprocess.run([sys.executable, str(ROOT / "training" / "run_mlm.py"), "--depth", "2",
                           "--block_mask_fraction", "0.5", "--block_mask_sizes", "8",
                           "--output_dir", str(tmp_path / "never")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "block_mask_sizes" in done.stderr
    assert not (tmp_path / "never").exists()
