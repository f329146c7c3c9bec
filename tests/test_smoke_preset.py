"""The smoke preset (``--preset smoke``): the first run of Getting started, the laptop run of each task cut short on the
same data, with at least two evaluations after step 0, written beside (not into) the long run's folder."""

import dataclasses

import pytest

from hf_treelang.train import laptop_settings as laptop
from hf_treelang.train.arguments import parse_command_line
from hf_treelang.train.callbacks import log_spaced_steps
from hf_treelang.train.device_data import optimizer_steps

SMOKE_TASKS = ("root", "mlm", "clm")


@pytest.mark.parametrize("task", SMOKE_TASKS)
def test_the_smoke_run_is_the_laptop_run_but_for_the_sizes_the_smoke_settings_name(task):
    smoke, long = parse_command_line(task, ["--preset", "smoke"])[:3], parse_command_line(task, [])[:3]
    own = {"preset", "output_dir"}  # its name, and a folder of its own (see below)
    named = set()
    for smoke_part, long_part in zip(smoke, long):  # the data, model and training arguments
        for field in dataclasses.fields(smoke_part):
            value = getattr(smoke_part, field.name)
            if field.name in laptop.SMOKE:
                assert value == laptop.SMOKE[field.name], field.name
                named.add(field.name)
            elif field.name not in own:
                assert value == getattr(long_part, field.name), field.name
    assert named == set(laptop.SMOKE)  # every size the smoke settings name is an argument of the run
    data_args, _, args = smoke
    presentations = data_args.num_train * args.num_train_epochs  # every training sequence, once per epoch
    assert optimizer_steps(args, data_args.num_train) == presentations / args.per_device_train_batch_size


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
    total = optimizer_steps(args, data_args.num_train)
    steps = log_spaced_steps(total, args.num_evaluations)
    assert len(steps) >= 2 and steps[-1] == total  # the last evaluation is the final model's


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
