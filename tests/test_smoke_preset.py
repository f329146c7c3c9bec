"""The smoke preset (``--preset smoke``): the first run of Getting started, the laptop run of each task cut short on the
same data, with at least two evaluations after step 0, written beside (not into) the long run's folder."""

import pytest

from hf_treelang.train import laptop_settings as laptop
from hf_treelang.train.arguments import parse_command_line
from hf_treelang.train.callbacks import log_spaced_steps
from hf_treelang.train.device_data import optimizer_steps

SMOKE_TASKS = ("root", "mlm", "clm")


@pytest.mark.parametrize("task", SMOKE_TASKS)
def test_the_smoke_preset_resolves_to_its_stated_sizes(task):
    data_args, model_args, args = parse_command_line(task, ["--preset", "smoke"])[:3]
    assert (data_args.num_train, args.num_train_epochs) == (2**13, 4.0)
    assert optimizer_steps(args, data_args.num_train) == 1024  # batches of 32
    assert (data_args.num_eval, data_args.num_test, args.num_evaluations, args.cpu_threads) == (1000, 1000, 4, 1)
    assert (model_args.hidden_size, model_args.intermediate_size) == (64, 256)  # the laptop model


@pytest.mark.parametrize("task", SMOKE_TASKS)
def test_the_smoke_preset_is_the_laptop_run_on_the_same_data_and_model(task):
    smoke = parse_command_line(task, ["--preset", "smoke"])
    default = parse_command_line(task, [])
    assert smoke[1] == default[1]  # the same model
    data, laptop_data = smoke[0], default[0]
    assert (data.grammar_seed, data.sigma, data.num_symbols, data.depth, data.k_train) == (0, 1.0, 4, 4, 0)
    for name in ("grammar_seed", "sigma", "num_symbols", "depth", "k_train", "k_test", "mask_rate", "mask_rate_final"):
        assert getattr(data, name) == getattr(laptop_data, name), name
    args, laptop_args = smoke[2], default[2]
    for name in ("learning_rate", "lr_scheduler_type", "per_device_train_batch_size", "warmup_steps"):
        assert getattr(args, name) == getattr(laptop_args, name), name


@pytest.mark.parametrize("task", SMOKE_TASKS)
def test_the_smoke_run_evaluates_at_least_twice_after_step_zero(task):
    data_args, _, args = parse_command_line(task, ["--preset", "smoke"])[:3]
    steps = log_spaced_steps(optimizer_steps(args, data_args.num_train), args.num_evaluations)
    assert len(steps) >= 2 and steps[-1] == 1024


@pytest.mark.parametrize("task", SMOKE_TASKS)
def test_the_smoke_run_writes_beside_the_long_runs_folder_unless_told_otherwise(task):
    smoke = parse_command_line(task, ["--preset", "smoke"])[2].output_dir
    assert smoke == f"outputs/run_{task}_smoke"
    assert smoke != parse_command_line(task, [])[2].output_dir
    assert parse_command_line(task, ["--preset", "smoke", "--output_dir", "elsewhere"])[2].output_dir == "elsewhere"


def test_explicit_flags_win_over_the_smoke_preset():
    data_args, _, args = parse_command_line("root", ["--preset", "smoke", "--num_train", "4096",
                                                     "--cpu_threads", "2"])[:3]
    assert (data_args.num_train, args.cpu_threads, args.num_train_epochs) == (4096, 2, 4.0)


def test_the_smoke_settings_are_the_laptop_settings_with_smaller_sizes():
    pairs = ((laptop.SMOKE_ROOT, laptop.ROOT), (laptop.SMOKE_MLM, laptop.MLM), (laptop.SMOKE_CLM, laptop.CLM))
    for smoke, long in pairs:
        changed = {key for key in smoke if long.get(key) != smoke[key]}
        assert changed <= set(laptop.SMOKE)
        assert smoke["num_train"] * smoke["num_train_epochs"] < long["num_train"] * long["num_train_epochs"]


def test_fine_tuning_has_no_smoke_preset():
    with pytest.raises(ValueError, match="`preset` must be one of"):
        parse_command_line("finetune", ["--preset", "smoke"])
