"""Training reliability: byte-identical resume for both tasks, no mixed output folders, a completion marker that the
analyses require, and every bad input refused first (parameter, value, allowed range), leaving no folder behind."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from hf_treelang.train.arguments import parse_arguments
from hf_treelang.train.collators import EXAMPLE_INDEX, MaskedLeafCollator, MaskEpochCallback
from hf_treelang.train.loop import train

# 48 sequences / batch 8 = 6 steps per epoch, 2 epochs; checkpoints every 3 steps (mid-epoch 0, end of epoch 0,
# mid-epoch 1, end) and an evaluation every 3 steps. Dropout 0.1 stays on, so the restored torch RNG matters too.
TINY = ["--depth", "2", "--num_symbols", "3", "--hidden_size", "16", "--num_hidden_layers", "1",
        "--intermediate_size", "16", "--num_train", "48", "--num_eval", "16", "--num_test", "8", "--k_test", "0",
        "--per_device_train_batch_size", "8", "--num_train_epochs", "2", "--num_evaluations", "0",
        "--num_checkpoints", "0", "--save_strategy", "steps", "--save_steps", "3", "--eval_strategy", "steps",
        "--eval_steps", "3", "--logging_steps", "1000", "--disable_tqdm", "true", "--report_to", "none",
        "--cpu_threads", "1", "--use_dataset_builder", "false"]
TIMINGS = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second")


def _train(task, output_dir, *extra):
    data_args, model_args, training_args = parse_arguments(task, TINY + ["--output_dir", str(output_dir), *extra])
    return train(task, data_args, model_args, training_args)


def _evaluations_after(history, step):
    return [{k: v for k, v in entry.items() if k not in TIMINGS} for entry in history if entry["step"] > step]


# ---------------------------------------------------------------- resuming


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """One uninterrupted run per task, shared by the resume tests."""
    runs = {}
    for task in ("root", "mlm"):
        folder = tmp_path_factory.mktemp(f"full_{task}")
        runs[task] = (folder, _train(task, folder / "run"))
    return runs


@pytest.mark.parametrize("task, step", [("root", 3), ("mlm", 3), ("mlm", 9)],
                         ids=["root-mid-epoch-0", "mlm-mid-epoch-0", "mlm-mid-epoch-1"])
def test_a_resumed_run_ends_with_the_same_bytes_and_evaluations_as_the_uninterrupted_run(
        tmp_path, uninterrupted, task, step):
    folder, full = uninterrupted[task]
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(folder / "run" / f"checkpoint-{step}", resumed_dir / f"checkpoint-{step}")
    resumed = _train(task, resumed_dir, "--resume_from_checkpoint", str(resumed_dir / f"checkpoint-{step}"))
    assert resumed.global_step == full.global_step == 12
    first = load_file(folder / "run" / "model.safetensors")
    second = load_file(resumed_dir / "model.safetensors")
    assert first.keys() == second.keys()
    different = [key for key in first if not torch.equal(first[key], second[key])]
    assert not different, f"weights differ after resuming from step {step}: {different}"
    after = _evaluations_after(full.history, step)
    assert [e["step"] for e in after] == [s for s in (3, 6, 9, 12) if s > step]
    assert _evaluations_after(resumed.history, step) == after


def test_keyed_masks_depend_on_seed_epoch_and_examples_only():
    features = [{"input_ids": [0, 1, 2, 0, 1, 2, 0, 1], EXAMPLE_INDEX: i} for i in range(64)]
    collate = MaskedLeafCollator(3, seed=5)
    torch.manual_seed(0)
    first = collate(features)["input_ids"]
    torch.manual_seed(1)  # the global generator (dropout's) plays no part
    assert torch.equal(collate(features)["input_ids"], first)
    assert torch.equal(MaskedLeafCollator(3, seed=5)(features)["input_ids"], first)
    assert not torch.equal(MaskedLeafCollator(3, seed=6)(features)["input_ids"], first)
    collate.epoch = 1
    assert not torch.equal(collate(features)["input_ids"], first)
    other_examples = [{**f, EXAMPLE_INDEX: f[EXAMPLE_INDEX] + 64} for f in features]
    collate.epoch = 0
    assert not torch.equal(collate(other_examples)["input_ids"], first)
    with pytest.raises(ValueError, match="seed"):
        MaskedLeafCollator(3)(features)


def test_the_mask_epoch_callback_sets_the_epoch_about_to_run():
    from transformers import TrainerControl, TrainerState

    collate = MaskedLeafCollator(3, seed=0)
    callback = MaskEpochCallback(collate)
    for epoch, expected in ((0.0, 0), (1.0, 1), (1.5, 1), (2.0, 2)):  # 1.5: a run resumed in the middle of epoch 1
        callback.on_epoch_begin(None, TrainerState(epoch=epoch), TrainerControl())
        assert collate.epoch == expected
