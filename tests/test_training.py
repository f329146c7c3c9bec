"""Training with Trainer: collator, arguments, output folder, finetuning, resuming, bad input, 2-process accelerate."""

from dataclasses import replace
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForSequenceClassification

import hf_treelang  # noqa: F401  (registers the Auto classes)
from hf_treelang.train.collators import MaskedLeafCollator, RootClassificationCollator
from hf_treelang.train.loop import main
from hf_treelang.core.masking import mask_training_batch
from hf_treelang.train.arguments import PRESETS, parse_command_line
from hf_treelang.train.run import resolve
from tiny_run import TINY, run_tiny

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------- collator


def test_collator_masks_exactly_one_leaf_and_ignores_the_others():
    features = [{"input_ids": list(np.arange(8) % 3)} for _ in range(50)]
    batch = MaskedLeafCollator(mask_token_id=3, seed=0)(features)
    masked = batch["input_ids"] == 3
    assert masked.sum(-1).eq(1).all()
    assert torch.equal(batch["labels"] != -100, masked)
    original = torch.tensor([f["input_ids"] for f in features])
    assert torch.equal(batch["labels"][masked], original[masked])
    assert torch.equal(batch["input_ids"][~masked], original[~masked])
    assert len(set(masked.float().argmax(-1).tolist())) > 4  # positions vary


def test_collator_is_deterministic_per_seed():
    features = [{"input_ids": [0, 1, 2, 0, 1, 2, 0, 1]} for _ in range(32)]
    first = MaskedLeafCollator(3, seed=7)(features)["input_ids"]
    assert torch.equal(first, MaskedLeafCollator(3, seed=7)(features)["input_ids"])
    assert not torch.equal(first, MaskedLeafCollator(3, seed=8)(features)["input_ids"])


def test_collator_mask_rate_masks_that_fraction_and_at_least_one_leaf():
    features = [{"input_ids": [1] * 16} for _ in range(400)]
    batch = MaskedLeafCollator(3, mask_rate=0.25, seed=0)(features)
    masked = batch["input_ids"] == 3
    assert masked.sum(-1).min() >= 1
    assert abs(masked.float().mean().item() - 0.25) < 0.03
    assert torch.equal(batch["labels"] != -100, masked)
    with pytest.raises(ValueError, match="mask_rate"):
        MaskedLeafCollator(3, mask_rate=1.5)


def test_root_collator_and_premasked_examples():
    batch = RootClassificationCollator()([{"input_ids": [0, 1], "labels": 1}, {"input_ids": [1, 1], "labels": 0}])
    assert batch["labels"].tolist() == [1, 0] and batch["input_ids"].shape == (2, 2)
    premasked = MaskedLeafCollator(3)([{"input_ids": [3, 1], "labels": [2, -100]}])
    assert premasked["input_ids"].tolist() == [[3, 1]] and premasked["labels"].tolist() == [[2, -100]]


# ---------------------------------------------------------------- arguments


def test_the_laptop_preset_is_the_default_and_explicit_flags_win():
    data_args, model_args, args = parse_command_line("root", [])[:3]
    assert args.preset == "laptop"
    laptop = PRESETS["root"]["laptop"]
    assert model_args.hidden_size == laptop["hidden_size"]
    assert model_args.intermediate_size == laptop["intermediate_size"]
    assert args.learning_rate == laptop["learning_rate"]
    assert model_args.hidden_dropout_prob == laptop["hidden_dropout_prob"]
    assert data_args.num_train == laptop["num_train"] and args.num_train_epochs == laptop["num_train_epochs"]
    assert (args.weight_decay, args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (0.0, 0.9, 0.999, 1e-8)
    assert data_args.test_levels() == [0, 1, 2, 3, 4]
    assert (data_args.sigma, data_args.num_symbols, data_args.depth, data_args.grammar_seed) == (1.0, 4, 4, 0)
    _, model_args, args = parse_command_line("mlm", ["--hidden_size", "32", "--learning_rate", "3e-4",
                                                  "--lr_scheduler_type", "linear"])[:3]
    assert (model_args.hidden_size, args.learning_rate, str(args.lr_scheduler_type.value)) == (32, 3e-4, "linear")
    _, _, args = parse_command_line("root", ["--preset", "default"])[:3]  # the laptop preset's former name
    assert args.preset == "laptop"
    with pytest.raises(ValueError, match="`preset` must be one of"):
        parse_command_line("root", ["--preset", "huge"])[:3]


def test_mask_rate_comes_from_the_preset_and_zero_is_the_papers_single_leaf(tmp_path):
    laptop_rate = PRESETS["mlm"]["laptop"].get("mask_rate")
    assert parse_command_line("mlm", [])[0].mask_rate == laptop_rate
    assert parse_command_line("mlm", ["--preset", "paper"])[0].mask_rate is None  # the authors' single_mask=True
    single = parse_command_line("mlm", ["--mask_rate", "0"])[0]
    assert single.mask_rate is None  # 0 names the single leaf where None cannot be written
    assert parse_command_line("mlm", ["--mask_rate", "0.3"])[0].mask_rate == 0.3
    # a run asking for rate 0 is the run with one masked leaf per sequence: one identity
    zero = resolve("mlm", {"preset": "paper", "mask_rate": 0}, tmp_path / "a")
    assert zero.identity == resolve("mlm", {"preset": "paper"}, tmp_path / "b").identity
    for task in ("root", "clm", "finetune"):
        assert "mask_rate" not in PRESETS[task]["laptop"]
    with pytest.raises(ValueError, match="mask_rate"):
        parse_command_line("mlm", ["--mask_rate", "1.5"])
    # the rule at rate 0 masks the single random leaf of each row, the same batch as no rate
    leaves = torch.arange(32).reshape(2, 16) % 4
    positions = torch.tensor([3, 9])
    none = mask_training_batch(leaves, 4, positions)
    zero_draws = mask_training_batch(leaves, 4, positions, torch.rand(2, 16) < 0.0)
    assert all(torch.equal(a, b) for a, b in zip(none, zero_draws))


def test_the_long_mlm_preset_is_the_laptop_run_trained_longer():
    laptop = parse_command_line("mlm", [])
    long = parse_command_line("mlm", ["--preset", "laptop_long"])
    assert long[2].num_train_epochs == 40.0 > laptop[2].num_train_epochs
    assert long[1] == laptop[1]  # the same model
    # the same data but for the mask schedule: 40 epochs at the constant rate 0.4, 12 falling from it to 0.15
    assert (long[0].mask_rate, long[0].mask_rate_final, laptop[0].mask_rate_final) == (0.4, None, 0.15)
    assert replace(long[0], mask_rate_final=laptop[0].mask_rate_final) == laptop[0]
    assert (long[2].learning_rate, long[2].lr_scheduler_type) == (laptop[2].learning_rate, laptop[2].lr_scheduler_type)
    with pytest.raises(ValueError, match="`preset` must be one of"):
        parse_command_line("root", ["--preset", "laptop_long"])


def test_paper_preset_is_the_papers_model_and_optimiser_and_explicit_flags_win():
    for task in ("root", "mlm"):
        data_args, model_args, args = parse_command_line(task, ["--preset", "paper"])[:3]
        assert (args.learning_rate, args.weight_decay, args.warmup_steps) == (1e-4, 0.0, 0)
        assert str(args.lr_scheduler_type.value) == "constant"
        assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (0.9, 0.999, 1e-8)
        assert args.per_device_train_batch_size == 32
        assert (model_args.hidden_size, model_args.intermediate_size, model_args.num_attention_heads) == (128, 2048, 1)
        assert (model_args.hidden_dropout_prob, model_args.attention_probs_dropout_prob) == (0.1, 0.1)
    data_args, _, args = parse_command_line("root", ["--preset", "paper"])[:3]
    assert (data_args.num_train, data_args.num_test) == (2**17, 10**4)
    data_args, _, args = parse_command_line("mlm", ["--preset", "paper", "--num_test", "5", "--num_train_epochs", "2"])[:3]
    assert (data_args.num_train, data_args.num_test, args.num_train_epochs) == (2**18, 5, 2.0)


def test_a_json_file_gives_the_same_arguments_as_flags(tmp_path):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"depth": 3, "k_train": 2, "k_test": [0, 3], "output_dir": str(tmp_path / "o"),
                                "num_train": 64}))
    from_json = parse_command_line("root", [str(path)])[:3]
    from_flags = parse_command_line("root", ["--depth", "3", "--k_train", "2", "--k_test", "0", "3", "--output_dir",
                                          str(tmp_path / "o"), "--num_train", "64"])[:3]
    assert from_json[0] == from_flags[0] and from_json[1] == from_flags[1]
    assert from_json[2].output_dir == from_flags[2].output_dir


@pytest.mark.parametrize("task", ["root", "finetune"])
def test_help_shows_each_default_once(task, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option's help
    with pytest.raises(SystemExit):
        parse_command_line(task, ["--help-all"])[:3]
    helps = dict(re.findall(r"^  (--\w+)[^\n]*\n +([^\n]*)$", capsys.readouterr().out, flags=re.MULTILINE))
    assert len(helps) > 100  # every dataclass field, TrainingArguments' included
    assert not [name for name, text in helps.items() if text.count("(default") > 1]
    assert helps["--num_train_epochs"] == "Epochs (default: from --preset)."
    assert helps["--hidden_size"] == "Token dimension d (paper: 128). (default: from --preset; laptop: 64)"
    assert "default" not in helps["--no_use_dataset_builder"]  # a flag: no default to show


# ---------------------------------------------------------------- runs


def test_root_run_writes_a_complete_loadable_output_folder(tmp_path, capsys):
    out = tmp_path / "root"
    assert main("root", TINY[:-2] + ["--output_dir", str(out), "--report_to", "tensorboard"]) == 0
    printed = capsys.readouterr().out
    assert "final: step 12 · " in printed and "acc k_test 0..2 (model/BP_0)" in printed
    for name in ("config.json", "model.safetensors", "trainer_state.json", "metrics.json", "eval_history.json",
                 "curves.png", "kl_curves.png", "README.md", "run_config.json", "grammar.json"):
        assert (out / name).is_file(), name
    assert any((out / "tensorboard").iterdir())
    assert sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*")) == [1, 3, 12]
    metrics = json.loads((out / "metrics.json").read_text())
    assert {f"eval_kl_bp_k{k}" for k in range(3)} | {"eval_acc_ktest2", "eval_bp_acc_ktest2"} <= set(metrics["final"])
    assert [e["step"] for e in metrics["history"]] == [0, 1, 3, 12]
    card = (out / "README.md").read_text()
    front = card.split("---")[1]
    assert card.startswith("---\n") and "library_name: transformers" in front and "model-index:" in front
    assert "pipeline_tag: text-classification" in front
    assert "| 2 |" in card and "kl_curves.png" in card and "${" not in card
    encoder = AutoModel.from_pretrained(out)
    classifier = AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert type(encoder).__name__ == "TreeLangModel"
    logits = classifier(input_ids=torch.zeros(2, 4, dtype=torch.long)).logits
    assert logits.shape == (2, 3)


def test_a_run_without_evaluations_finishes_with_its_final_numbers_and_no_curves(tmp_path):
    result = run_tiny("root", tmp_path / "run", "--num_evaluations", "0", "--num_checkpoints", "0")
    assert result.history == [] and "eval_acc_ktest0" in result.final_metrics  # one evaluation after the last step
    out = tmp_path / "run"
    assert (out / "run_complete.json").is_file() and (out / "metrics.json").is_file()
    assert not (out / "curves.png").exists() and not (out / "kl_curves.png").exists()
    card = (out / "README.md").read_text()
    assert "No curves: the run was not evaluated during training" in card and "kl_curves.png" not in card
    assert "${" not in card


def test_dataset_builder_data_trains_mlm_and_finetune_keeps_a_frozen_encoder(tmp_path):
    mlm = run_tiny("mlm", tmp_path / "mlm", "--use_dataset_builder", "true")
    assert {f"eval_acc_ktest{k}" for k in range(3)} <= set(mlm.final_metrics)
    state = json.loads((tmp_path / "mlm" / "trainer_state.json").read_text())
    assert state["global_step"] == 12
    card = (tmp_path / "mlm" / "README.md").read_text()
    assert "pipeline_tag: fill-mask" in card
    run_tiny("finetune", tmp_path / "ft", "--model_name_or_path", str(tmp_path / "mlm"), "--freeze_encoder", "true")
    before = load_file(tmp_path / "mlm" / "model.safetensors")
    after = load_file(tmp_path / "ft" / "model.safetensors")
    encoder_keys = [key for key in before if key.startswith("treelang.")]
    assert encoder_keys and all(torch.equal(before[key], after[key]) for key in encoder_keys)
    assert "classifier.weight" in after


@pytest.fixture(scope="module")
def finetuned_with_hidden_layer(tmp_path_factory):
    """(MLM model folder, fine-tuning run folder) of a fine-tuning with a 5-unit two-layer root readout."""
    tmp_path = tmp_path_factory.mktemp("finetune_hidden")
    config = hf_treelang.TreeLangConfig.from_data(num_symbols=3, depth=2, hidden_size=32, num_hidden_layers=2,
                                                  intermediate_size=32)
    hf_treelang.TreeLangForMaskedLM(config).save_pretrained(tmp_path / "mlm")
    run_tiny("finetune", tmp_path / "ft", "--model_name_or_path", str(tmp_path / "mlm"), "--classifier_hidden_size", "5",
         "--num_evaluations", "1")
    return tmp_path / "mlm", tmp_path / "ft"


def test_finetuned_two_layer_readout_reloads_with_auto_from_pretrained(finetuned_with_hidden_layer):
    _, run = finetuned_with_hidden_layer
    weights = load_file(run / "model.safetensors")
    assert weights["classifier.dense.weight"].shape == (5, 32 * 4)  # (H, d * 2**depth)
    assert weights["classifier.out_proj.weight"].shape == (3, 5)  # (q, H)
    loaded, info = AutoModelForSequenceClassification.from_pretrained(run, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    # the reference: the saved weights, every one of them, in a model built from the saved config
    reference = hf_treelang.TreeLangForSequenceClassification(loaded.config)
    reference.load_state_dict(weights, strict=True)
    ids = torch.randint(0, 3, (6, 4), generator=torch.Generator().manual_seed(0))
    assert torch.equal(loaded.eval()(input_ids=ids).logits, reference.eval()(input_ids=ids).logits)


def test_resuming_a_finetuning_with_another_readout_is_refused_before_anything(finetuned_with_hidden_layer):
    mlm, run = finetuned_with_hidden_layer
    checkpoint = sorted(run.glob("checkpoint-*"))[0]
    before = sorted(p.name for p in run.iterdir())
    with pytest.raises(ValueError, match=r"was saved with classifier_hidden_size=5; this run has "
                                         r"classifier_hidden_size=0: pass the checkpoint's readout"):
        run_tiny("finetune", run, "--model_name_or_path", str(mlm), "--resume_from_checkpoint", str(checkpoint))
    assert sorted(p.name for p in run.iterdir()) == before


def test_resuming_from_a_checkpoint_continues_the_run(tmp_path):
    full = run_tiny("root", tmp_path / "full")
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-3", resumed_dir / "checkpoint-3")
    resumed = run_tiny("root", resumed_dir, "--resume_from_checkpoint", str(resumed_dir / "checkpoint-3"))
    assert resumed.global_step == full.global_step == 12
    assert [e["step"] for e in resumed.history] == [0, 1, 3, 12]
    first = load_file(tmp_path / "full" / "model.safetensors")
    second = load_file(resumed_dir / "model.safetensors")
    assert all(torch.equal(first[key], second[key]) for key in first)  # byte-identical (test_reliability.py)


@pytest.mark.parametrize(
    "task, extra, message",
    [
        ("root", ["--k_test", "0", "3"], "k_test"),
        ("root", ["--k_train", "5"], "k_train"),
        ("mlm", ["--resume_from_checkpoint", "/nonexistent/checkpoint-7"], "resume_from_checkpoint"),
        ("finetune", ["--model_name_or_path", "/nonexistent/mlm"], "model_name_or_path"),
    ],
)
def test_bad_input_fails_before_writing_anything(tmp_path, task, extra, message):
    out = tmp_path / "never"
    with pytest.raises(ValueError, match=message):
        main(task, TINY + ["--output_dir", str(out), *extra])
    assert not out.exists()


def test_finetune_rejects_a_checkpoint_of_another_depth(tmp_path):
    config = hf_treelang.TreeLangConfig.from_data(num_symbols=3, depth=3, hidden_size=8, num_hidden_layers=1,
                                                  intermediate_size=8)
    hf_treelang.TreeLangForMaskedLM(config).save_pretrained(tmp_path / "mlm_depth3")
    out = tmp_path / "never"
    with pytest.raises(ValueError, match="depth"):
        main("finetune", TINY + ["--output_dir", str(out), "--model_name_or_path", str(tmp_path / "mlm_depth3")])
    assert not out.exists()


def test_accelerate_launch_two_cpu_processes_trains_and_evaluates_every_example_once(tmp_path):
    out = tmp_path / "ddp"
    args = [a if a != "20" else "23" for a in TINY]  # 23 validation examples: not a multiple of 2 x batch
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    import socket

    with socket.socket() as probe:  # a free port: a fixed one may still be held by an earlier process group
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--cpu",
               "--main_process_port", port, os.path.join(REPO, "training", "run_mlm.py"), *args, "--output_dir", str(out),
               "--per_device_eval_batch_size", "4"]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=170)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "find_unused_parameters=True" not in completed.stderr  # every parameter is used: no per-step search
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 6  # 96 sequences / (2 processes x 8)
    evaluations = [e for e in state["log_history"] if "eval_num_examples" in e]
    assert [e["step"] for e in evaluations] == [0, 1, 2, 6]
    assert all(e["eval_num_examples"] == 23 for e in evaluations)
    assert state["log_history"][-1]["train_loss"] > 0


def test_a_finished_run_leaves_its_process_group_before_exiting(tmp_path, monkeypatch):
    # exiting with a live gloo group can abort a rank during interpreter finalisation: the script destroys it first
    import torch.distributed as dist

    from hf_treelang.train import launch, loop

    left = []
    monkeypatch.setattr(loop, "leave_process_group", lambda: left.append(dist.is_initialized()))
    assert loop.main("root", TINY + ["--output_dir", str(tmp_path / "run")]) == 0
    assert left == [False]  # called once, after the run (a single process: no group to leave)

    dist.init_process_group("gloo", init_method=(tmp_path / "store").as_uri(), rank=0, world_size=1)
    launch.leave_process_group()
    assert not dist.is_initialized()
    launch.leave_process_group()  # without a group: nothing to do


def test_a_runs_arguments_go_resolve_check_train_write_without_coming_back(tmp_path):
    """Followed from train(run): every hf_treelang function that receives the run or its training arguments, in
    call order (the Trainer's own loop counted as one stay): at most 3 returns to a file already left (today three:
    to loop.py after the folder check in run.py, and twice to trainer.py, after the step mode's rule in arguments.py
    and for ``TreeLangTrainer.train``'s TF32 default)."""
    from transformers import Trainer

    from hf_treelang.train import loop
    from hf_treelang.train.run import Run
    from tiny_run import tiny_run

    run = tiny_run("root", tmp_path / "run", "--num_evaluations", "1", "--num_checkpoints", "0")
    watched = {id(run), id(run.training_args)}
    stays = []

    def holds(value):
        if id(value) in watched:
            return True
        if isinstance(value, Run):
            return id(value.training_args) in watched
        return isinstance(value, Trainer) and id(value.__dict__.get("args")) in watched

    def profile(frame, event, arg):
        path = frame.f_code.co_filename
        if event != "call" or "/hf_treelang/" not in path:
            return
        back = frame.f_back
        while back is not None:
            if back.f_code.co_name == "train" and back.f_code.co_filename.endswith("transformers/trainer.py"):
                path = "(Trainer.train)"
                break
            back = back.f_back
        if (path == "(Trainer.train)" or any(holds(v) for v in frame.f_locals.values())) and (
                not stays or stays[-1] != path):
            stays.append(path)

    sys.setprofile(profile)
    try:
        loop.train(run)
    finally:
        sys.setprofile(None)
    names = [path.split("/hf_treelang/")[-1] for path in stays]
    returns = len(names) - len(set(names))
    assert names[0] == "train/loop.py" and names[-1] == "train/outputs.py", names  # check ... write
    assert names.count("(Trainer.train)") == 1 and returns <= 3, names  # the bound


def test_an_abbreviated_flag_is_refused_not_guessed(tmp_path):
    from hf_treelang import cli
    from hf_treelang.train.run import runs_from_command_line

    with pytest.raises(ValueError, match=r"not used by the HfArgumentParser: \['--learning_r', '0.1'\]"):
        runs_from_command_line("root", TINY + ["--learning_r", "0.1", "--output_dir", str(tmp_path / "x")])
    with pytest.raises(SystemExit):
        cli.command_parser("sweep").parse_args(["--stat", str(tmp_path)])  # --status, abbreviated
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------- every training flag honoured or refused


def _non_default():
    """A value equal to nothing: what a user's non-default setting looks like to the check."""

    class NonDefault:
        def __eq__(self, other):
            return isinstance(other, NonDefault)

        __hash__ = object.__hash__

    return NonDefault()


@pytest.mark.parametrize("engine", ["device", "dataloader"])
def test_every_training_arguments_field_is_honoured_or_refused(engine):
    """Walks the installed TrainingArguments: a field a new transformers release adds is refused until honoured."""
    import dataclasses

    from transformers import TrainingArguments

    from hf_treelang.train.arguments import TreeLangTrainingArguments
    from hf_treelang.train.honoured import HONOURED_FIELDS, HONOURED_VALUES, check_honoured

    names = [f.name for f in dataclasses.fields(TrainingArguments)]
    names += [f.name for f in dataclasses.fields(TreeLangTrainingArguments) if f.name not in names]
    refused = 0
    for name in names:
        args = TreeLangTrainingArguments(output_dir="unused", use_cpu=True, train_engine=engine)
        check_honoured(args)  # every default passes
        if name in HONOURED_VALUES or name == "train_engine":
            continue  # checked by value below; the engine names itself
        setattr(args, name, _non_default())
        if name in HONOURED_FIELDS[engine]:
            check_honoured(args)
        else:
            with pytest.raises(ValueError, match=rf"^`{name}` is not honoured by --train_engine {engine} "):
                check_honoured(args)
            refused += 1
    assert refused >= 30  # the Hub, DeepSpeed, FSDP, NEFTune, Liger, ... (and the loader's options on the device)
    for name, allowed in HONOURED_VALUES.items():
        args = TreeLangTrainingArguments(output_dir="unused", use_cpu=True, train_engine=engine)
        setattr(args, name, "something_new")
        with pytest.raises(ValueError, match=rf"`{name}` 'something_new' is not honoured by --train_engine {engine}"):
            check_honoured(args)


@pytest.mark.parametrize("task", ["root", "mlm", "clm", "finetune"])
def test_every_preset_sets_only_fields_both_engines_honour(task):
    for preset in PRESETS[task]:
        for engine in ("device", "dataloader"):
            args = parse_command_line(task, ["--preset", preset, "--train_engine", engine])[2]
            args.check_engine()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--label_smoothing_factor", "2"], r"`label_smoothing_factor` must be a real number in \[0, 1\), got 2.0"),
        (["--label_smoothing_factor", "1"], r"`label_smoothing_factor` must be a real number in \[0, 1\), got 1.0"),
        (["--neftune_noise_alpha", "5"], r"`neftune_noise_alpha` is not honoured by --train_engine device"),
        (["--dataloader_num_workers", "2"],
         r"`dataloader_num_workers` is not honoured by --train_engine device .*--train_engine dataloader honours it"),
        (["--train_engine", "dataloader", "--hub_always_push", "true"],
         r"`hub_always_push` is not honoured by --train_engine dataloader"),
        (["--optim", "lomo"], r"`optim` 'lomo' is not honoured by --train_engine device"),
        (["--lr_scheduler_type", "greedy", "--eval_strategy", "steps", "--eval_steps", "5"],
         r"`lr_scheduler_type` .greedy. is not honoured by --train_engine device"),
    ],
)
def test_a_flag_the_engine_would_ignore_is_refused_in_one_line_before_any_work(tmp_path, capsys, extra, message):
    out = tmp_path / "never"
    assert main("root", TINY + ["--output_dir", str(out), *extra], as_script=True) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert not out.exists()


def test_an_evaluation_strategy_is_not_refused_for_the_do_eval_it_derives(tmp_path):
    from hf_treelang.train.run import runs_from_command_line

    (run,), _ = runs_from_command_line("root", TINY + ["--output_dir", str(tmp_path / "x"), "--eval_strategy", "steps",
                                                       "--eval_steps", "3"])
    assert run.training_args.do_eval  # transformers' own consequence of the strategy, which no engine reads
    with pytest.raises(ValueError, match=r"^`do_eval` is not honoured by --train_engine device"):
        runs_from_command_line("root", TINY + ["--output_dir", str(tmp_path / "y"), "--do_eval", "true"])


def test_a_flag_only_the_dataloader_engine_honours_is_accepted_there(tmp_path):
    from hf_treelang.train.run import runs_from_command_line

    (run,), _ = runs_from_command_line("root", TINY + ["--output_dir", str(tmp_path / "x"), "--train_engine",
                                                       "dataloader", "--dataloader_num_workers", "2"])
    assert run.training_args.dataloader_num_workers == 2


SHORT = ["--num_train", "16", "--num_evaluations", "0", "--num_checkpoints", "0"]  # two steps of 8


@pytest.mark.parametrize("task, engine", [("root", "device"), ("mlm", "device"), ("clm", "device"),
                                          ("root", "dataloader")])
def test_label_smoothing_changes_the_weights_in_every_task(tmp_path, task, engine):
    plain = run_tiny(task, tmp_path / "plain", *SHORT, "--train_engine", engine)
    smoothed = run_tiny(task, tmp_path / "smoothed", *SHORT, "--train_engine", engine, "--label_smoothing_factor",
                        "0.5")
    assert plain.global_step == smoothed.global_step == 2
    first, second = (load_file(tmp_path / name / "model.safetensors") for name in ("plain", "smoothed"))
    assert any(not torch.equal(first[key], second[key]) for key in first)


@pytest.mark.parametrize("task, engine", [("mlm", "device"), ("clm", "device"), ("mlm", "dataloader")])
def test_label_smoothing_logs_finite_training_and_evaluation_losses(tmp_path, task, engine):
    result = run_tiny(task, tmp_path / "run", "--num_train", "16", "--num_evaluations", "2", "--num_checkpoints", "0",
                      "--train_engine", engine, "--label_smoothing_factor", "0.1")
    losses = [entry["eval_loss"] for entry in result.history] + [result.final_metrics["eval_loss"]]
    assert len(losses) >= 3 and all(np.isfinite(losses)), losses
    trained = [entry["loss"] for entry in json.loads((tmp_path / "run" / "trainer_state.json").read_text())[
        "log_history"] if "loss" in entry]
    assert trained and all(np.isfinite(trained)) and all(loss > 0 for loss in trained), trained


def test_label_smoothing_changes_the_weights_of_another_architectures_causal_run(tmp_path):
    other = ["--depth", "2", "--num_symbols", "3", "--num_eval", "16", "--num_test", "16",
             "--per_device_train_batch_size", "8", "--disable_tqdm", "true", "--report_to", "none", "--cpu_threads",
             "1", "--use_dataset_builder", "false", "--model_type", "gpt2", "--config_overrides",
             "n_embd=16,n_layer=1,n_head=1"]
    for name, extra in (("plain", []), ("smoothed", ["--label_smoothing_factor", "0.5"])):
        assert main("clm", other + SHORT + ["--output_dir", str(tmp_path / name), *extra], as_script=True) == 0
    first, second = (load_file(tmp_path / name / "model.safetensors") for name in ("plain", "smoothed"))
    assert any(not torch.equal(first[key], second[key]) for key in first)


def test_another_architectures_causal_loss_is_label_smoothers_unshifted():
    from transformers.trainer_pt_utils import LabelSmoother

    from hf_treelang.train.loop import next_leaf_cross_entropy

    torch.manual_seed(0)
    logits = torch.randn(4, 8, 5)  # (b, L, V)
    labels = torch.randint(0, 5, (4, 8))  # (b, L)
    labels[:, -1] = -100
    smoothed = next_leaf_cross_entropy({"logits": logits}, labels, label_smoothing=0.3)
    assert torch.isclose(smoothed, LabelSmoother(epsilon=0.3)({"logits": logits}, labels), rtol=0, atol=1e-6)
    assert torch.equal(next_leaf_cross_entropy({"logits": logits}, labels),
                       next_leaf_cross_entropy({"logits": logits}, labels, label_smoothing=0.0))


@pytest.mark.parametrize("task", ["root", "mlm", "clm", "stacked_root", "stacked_mlm"])
def test_the_smoothed_loss_is_label_smoothers_on_a_batch(task):
    """The device engine's loss with ε = 0.3 is transformers' LabelSmoother, checked against torch's own
    ``cross_entropy(label_smoothing=ε)`` (the same definition: (1 - ε) NLL + ε mean_c -log p_c), to 1e-6."""
    import types

    import torch.nn.functional as F
    from transformers.trainer_pt_utils import LabelSmoother

    from hf_treelang.models.stacked import StackedTreeLang
    from hf_treelang.train.loop import MODEL_CLASSES
    from hf_treelang.train.trainer import EnsembleTrainer, TreeLangTrainer

    torch.manual_seed(0)
    config = hf_treelang.TreeLangConfig.from_data(num_symbols=3, depth=2, hidden_size=8, num_hidden_layers=1,
                                                  intermediate_size=8, hidden_dropout_prob=0.0,
                                                  attention_probs_dropout_prob=0.0)
    model_task = task.removeprefix("stacked_")
    b, T, q, epsilon = 6, 4, 3, 0.3
    input_ids = torch.randint(0, q, (b, T))  # (b, T)
    if model_task == "root":
        labels = torch.randint(0, q, (b,))  # (b,)
    else:
        labels = torch.randint(0, q, (b, T))  # (b, T)
        labels[:, ::2] = -100
        if model_task == "clm":
            input_ids[:, 0] = q  # BOS
    stub = types.SimpleNamespace(label_smoother=LabelSmoother(epsilon=epsilon), compute_loss_func=None,
                                 member_loss_sum=torch.zeros(2))
    if task.startswith("stacked"):
        models = [MODEL_CLASSES[model_task](config) for _ in range(2)]
        stacked = StackedTreeLang.from_models(models, model_task)
        loss, logged = EnsembleTrainer.forward_loss(stub, stacked, {"input_ids": torch.stack([input_ids] * 2),
                                                                    "labels": torch.stack([labels] * 2)})
        expected = sum(F.cross_entropy(m(input_ids=input_ids).logits[..., :q].reshape(-1, q), labels.reshape(-1),
                                       label_smoothing=epsilon, ignore_index=-100) for m in models)
    else:
        model = MODEL_CLASSES[model_task](config)
        loss, logged = TreeLangTrainer.forward_loss(stub, model, {"input_ids": input_ids, "labels": labels})
        logits = model(input_ids=input_ids).logits[..., :q]  # smoothing averages over the q symbols
        expected = F.cross_entropy(logits.reshape(-1, q), labels.reshape(-1), label_smoothing=epsilon,
                                   ignore_index=-100)
        assert not torch.isclose(loss, model(input_ids=input_ids, labels=labels).loss)  # it is not the plain loss
    assert torch.isclose(loss, expected, rtol=0, atol=1e-6), (float(loss), float(expected))
    assert loss.requires_grad and not logged.requires_grad


# ---------------------------------------------------------------- bounded runs: memory before any data


@pytest.fixture
def machine_of_8_gb(monkeypatch):
    from hf_treelang.core import resources

    monkeypatch.setattr(resources, "available_memory", lambda: 8 * 10**9)  # a stand-in machine
    import hf_treelang.train.trainer as trainer

    monkeypatch.setattr(trainer, "load_run_data", lambda *a, **k: pytest.fail("the data were built"))
    return resources


def test_a_depth_16_run_is_refused_before_preparing_its_data(machine_of_8_gb, tmp_path, capsys):
    out = tmp_path / "never"
    assert main("root", ["--depth", "16", "--output_dir", str(out), "--cpu_threads", "1"], as_script=True) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "error: --per_device_train_batch_size 32 needs about" in error
    assert "at depth 16" in error and error.endswith("lower --depth (16) or the model's size")
    assert not out.exists()


def test_a_run_over_the_machines_memory_names_the_largest_size_that_fits(machine_of_8_gb, tmp_path, capsys):
    from hf_treelang.train.run import run_memory

    out = tmp_path / "never"
    assert main("root", TINY + ["--depth", "8", "--num_train", "100000000", "--output_dir", str(out)],
                as_script=True) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "error: --num_train 100000000 needs about" in error
    largest = int(error.split("the largest --num_train that fits is ")[1])
    data_args, model_args, args = parse_command_line("root", TINY + ["--depth", "8"])[:3]
    sizes = {"--num_train": largest, "--num_eval": 20, "--num_test": 16, "--per_device_train_batch_size": 8,
             "--per_device_eval_batch_size": args.per_device_eval_batch_size}
    config = model_args.config(data_args)
    budget = machine_of_8_gb.memory_budget()
    assert run_memory(config, sizes, 9) <= budget < run_memory(config, {**sizes, "--num_train": largest + 1}, 9)
    assert not out.exists()
