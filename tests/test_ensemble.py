"""Ensembles: a member is its single run; stacked weights are the members' models; bad ensembles fail early.

Tiny sizes (ℓ = 2, q = 3, d = 32, 12 steps), dropout 0 (so that a member and its single run are the same
computation), one thread. Tolerances: weights 1e-5 (the attention's key bias excepted: its gradient is zero in exact
arithmetic, since softmax ignores a shift shared by every score, so Adam turns the rounding noise of that zero into
steps of ±lr; the key bias is checked at 1e-3 and the logits, which it cannot change, at 1e-5), evaluation metrics
1e-5.
"""

import dataclasses
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM, set_seed

import hf_treelang  # noqa: F401  (registers the Auto classes)
from hf_treelang.models import TreeLangConfig, TreeLangForMaskedLM, TreeLangForSequenceClassification
from hf_treelang.train import loop, outputs
from hf_treelang.train.loop import choose_ensemble_mode
from hf_treelang.train.run import runs_from_command_line
from hf_treelang.models.stacked import (StackedAffine, StackedDropout, StackedLinear, StackedTreeLang,
                                        clip_grad_norm_per_member)

TINY = ["--depth", "2", "--num_symbols", "3", "--hidden_size", "32", "--num_hidden_layers", "2",
        "--intermediate_size", "32", "--num_train", "96", "--num_eval", "20", "--num_test", "16",
        "--per_device_train_batch_size", "8", "--num_train_epochs", "1", "--num_evaluations", "2",
        "--num_checkpoints", "1", "--disable_tqdm", "true", "--report_to", "none", "--cpu_threads", "1",
        "--use_dataset_builder", "false", "--hidden_dropout_prob", "0", "--attention_probs_dropout_prob", "0"]
COMPARED = ("eval_loss", "eval_accuracy", "eval_num_examples", "eval_kl_bp_k0", "eval_kl_bp_k1", "eval_kl_bp_k2",
            "eval_match_bp", "eval_spearman_bp", "eval_acc_ktest0", "eval_acc_ktest2", "eval_bp_acc_ktest1")


def _runs(task, output_dir, *extra):
    return runs_from_command_line(task, TINY + ["--output_dir", str(output_dir), *extra])


def _train(task, output_dir, *extra):
    runs, ensemble = _runs(task, output_dir, *extra)
    if not ensemble.requested:
        return loop.train(runs[0])
    return loop.train_together(runs, mode=ensemble.ensemble_mode, ensemble_dir=ensemble.output_dir,
                               resume_from_checkpoint=ensemble.resume_from_checkpoint)


def _touch_curves(history, depth, k_train, test_levels, path_all, path_kl, **kwargs):
    """Stands in for outputs.plot_curves: matplotlib is most of a tiny run's time (the curves are tested elsewhere)."""
    for path in (path_all, path_kl):
        open(path, "wb").close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """MLM: one seed, two k_train, stacked; root: two seeds, one k_train, stacked; and the matching single runs."""
    root = tmp_path_factory.mktemp("ensembles")
    calls = []
    original, plot_curves = loop.bp_callback_for, outputs.plot_curves

    def counting(*args, **kwargs):
        calls.append(args[1].k_train)
        return original(*args, **kwargs)

    loop.bp_callback_for = counting
    outputs.plot_curves = _touch_curves
    try:
        out = {
            "mlm": _train("mlm", root / "mlm", "--ensemble_seeds", "1", "--ensemble_k_train", "0", "2",
                          "--ensemble_mode", "stacked"),
            "root": _train("root", root / "root", "--ensemble_seeds", "0", "1", "--ensemble_k_train", "1",
                           "--ensemble_mode", "stacked"),
        }
        out["bp_callbacks_built"] = list(calls)  # by the two ensembles
        for task, seed, k_train in (("mlm", 1, 0), ("mlm", 1, 2), ("root", 1, 1)):
            out[(task, seed, k_train)] = _train(task, root / f"single-{task}-{seed}-{k_train}", "--seed", str(seed),
                                                "--k_train", str(k_train))
    finally:
        loop.bp_callback_for = original
        outputs.plot_curves = plot_curves
    out["dir"] = root
    return out


def _assert_member_is_single_run(member_dir, single_dir, model_class, inputs):
    member, single = load_file(member_dir / "model.safetensors"), load_file(single_dir / "model.safetensors")
    assert sorted(member) == sorted(single)
    config = json.loads((single_dir / "run_config.json").read_text())
    training = config.get("training_args", config)
    # The key part of in_proj.bias has no gradient in exact arithmetic (adding it shifts every score of a query
    # alike): Adam normalises its rounding noise into steps of up to the learning rate, so the stacked and single
    # runs may drift apart there by at most learning rate x steps; every other parameter agrees to rounding.
    steps = json.loads((single_dir / "eval_history.json").read_text())["history"][-1]["step"]
    drift = float(training["learning_rate"]) * steps
    for name in member:
        tolerance = drift if name.endswith("attention.in_proj.bias") else 1e-5
        assert torch.allclose(member[name], single[name], atol=tolerance, rtol=0), name
    for name in (n for n in member if n.endswith("attention.in_proj.bias")):
        d = member[name].shape[0] // 3
        query_value = torch.cat([member[name][:d], member[name][2 * d :]]), torch.cat([single[name][:d],
                                                                                        single[name][2 * d :]])
        assert torch.allclose(*query_value, atol=1e-5, rtol=0), name
    models = [model_class.from_pretrained(folder).eval() for folder in (member_dir, single_dir)]
    with torch.no_grad():
        logits = [model(input_ids=inputs).logits for model in models]
    assert torch.allclose(logits[0], logits[1], atol=1e-5, rtol=0)
    histories = [json.loads((folder / "eval_history.json").read_text())["history"] for folder in (member_dir, single_dir)]
    assert [e["step"] for e in histories[0]] == [e["step"] for e in histories[1]] == [0, 1, 12]
    for ours, theirs in zip(*histories):
        for key in COMPARED:
            assert ours[key] == pytest.approx(theirs[key], abs=1e-5), key
    metrics = [json.loads((folder / "metrics.json").read_text()) for folder in (member_dir, single_dir)]
    assert metrics[0]["train_loss"] == pytest.approx(metrics[1]["train_loss"], abs=1e-5)
    assert metrics[0]["bp_accuracy"] == metrics[1]["bp_accuracy"]


# ---------------------------------------------------------------- a member is its single run


@pytest.mark.parametrize("k_train", [0, 2])
def test_an_mlm_member_with_dropout_zero_equals_its_single_run(runs, k_train):
    inputs = torch.randint(0, 4, (5, 4))
    _assert_member_is_single_run(runs["dir"] / "mlm" / "members" / f"seed1-k{k_train}",
                                 runs["dir"] / f"single-mlm-1-{k_train}", TreeLangForMaskedLM, inputs)


def test_a_root_member_with_dropout_zero_equals_its_single_run(runs):
    inputs = torch.randint(0, 4, (5, 4))
    _assert_member_is_single_run(runs["dir"] / "root" / "members" / "seed1-k1", runs["dir"] / "single-root-1-1",
                                 TreeLangForSequenceClassification, inputs)


def test_members_with_different_k_train_get_their_own_data(runs):
    members = runs["dir"] / "mlm" / "members"
    configs = [json.loads((members / f"seed1-k{k}" / "run_config.json").read_text()) for k in (0, 2)]
    assert [c["data_args"]["k_train"] for c in configs] == [0, 2]
    assert [c["training_args"]["seed"] for c in configs] == [1, 1]
    weights = [load_file(members / f"seed1-k{k}" / "model.safetensors") for k in (0, 2)]
    assert not torch.equal(weights[0]["lm_head.weight"], weights[1]["lm_head.weight"])  # same init, other data
    assert runs["mlm"].num_data_configs == 2 and runs["root"].num_data_configs == 1
    assert sorted(runs["bp_callbacks_built"]) == [0, 1, 2]  # one BP-KL callback per distinct data config


def test_every_member_folder_is_a_complete_loadable_run(runs):
    folder = runs["dir"] / "mlm" / "members" / "seed1-k2"
    for name in ("config.json", "model.safetensors", "run_config.json", "eval_history.json", "metrics.json",
                 "trainer_state.json", "grammar.json", "README.md", "kl_curves.png", "run_complete.json"):
        assert (folder / name).is_file(), name
    assert AutoModelForMaskedLM.from_pretrained(folder).config.filter_level == 2
    metrics = json.loads((folder / "metrics.json").read_text())
    assert {f"eval_kl_bp_k{k}" for k in range(3)} <= set(metrics["final"])
    assert (folder / "checkpoint-12" / "model.safetensors").is_file()
    ensemble = runs["dir"] / "mlm"
    manifest = json.loads((ensemble / "ensemble.json").read_text())
    assert manifest["members"] == ["seed1-k0", "seed1-k2"] and manifest["mode"] == "stacked"
    assert (ensemble / "checkpoint-12" / "ensemble.json").is_file()


# ---------------------------------------------------------------- the stacked model


@pytest.mark.parametrize("task, pooling, activation", [("mlm", "concat", "relu"), ("root", "concat", "gelu"),
                                                       ("root", "mean", "relu")])
def test_stacked_forward_and_gradients_equal_each_members_model(task, pooling, activation):
    model_class = TreeLangForMaskedLM if task == "mlm" else TreeLangForSequenceClassification
    models = []
    for seed in range(3):
        set_seed(seed)
        config = TreeLangConfig.from_data(num_symbols=3, depth=2, filter_level=seed % 3, hidden_size=16,
                                          num_hidden_layers=2, intermediate_size=24, num_attention_heads=2,
                                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                          classifier_pooling=pooling, hidden_act=activation)
        models.append(model_class(config))
    stacked = StackedTreeLang.from_models(models, task)
    inputs = torch.randint(0, 4, (3, 5, 4))
    labels = torch.full((3, 5, 4), -100) if task == "mlm" else torch.randint(0, 3, (3, 5))
    if task == "mlm":
        labels[:, :, 1] = torch.randint(0, 3, (3, 5))
    output = stacked(inputs, labels)
    output.loss.backward()
    for index, model in enumerate(models):
        single = model(input_ids=inputs[index], labels=labels[index])
        single.loss.backward()
        assert torch.allclose(output.logits[index], single.logits, atol=1e-6)
        assert output.member_losses[index].item() == pytest.approx(single.loss.item(), abs=1e-6)
        grads = dict(model.named_parameters())
        for name, parameter in stacked.named_parameters():
            assert torch.allclose(parameter.grad[index], grads[name].grad, atol=1e-6), name
        back = stacked.member_model(index)
        assert back.config.filter_level == index % 3
        assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), model.state_dict().values()))


def test_the_stacked_affine_gradients_are_autograds_in_the_weights_own_layout():
    torch.manual_seed(0)
    flat = torch.randn(3, 7, 5, dtype=torch.float64, requires_grad=True)  # (N, M, in)
    weight = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)  # (N, out, in)
    bias = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)  # (N, out)
    assert torch.autograd.gradcheck(StackedAffine.apply, (flat, weight, bias))
    upstream = torch.randn(3, 7, 4, dtype=torch.float64)
    ours = torch.autograd.grad(StackedAffine.apply(flat, weight, bias), (flat, weight, bias), upstream)
    reference = torch.autograd.grad(torch.baddbmm(bias.unsqueeze(1), flat, weight.transpose(1, 2)),
                                    (flat, weight, bias), upstream)
    for mine, theirs in zip(ours, reference):
        assert torch.allclose(mine, theirs, atol=1e-12)
    assert ours[1].is_contiguous() and not reference[1].is_contiguous()  # autograd's is a transposed view
    layer = StackedLinear(3, 5, 4)
    torch.nn.init.normal_(layer.weight), torch.nn.init.normal_(layer.bias)
    layer(torch.randn(3, 2, 6, 5)).sum().backward()
    assert layer.weight.grad.stride() == layer.weight.stride()


def test_the_stacked_affine_under_autocast_gives_autocasts_gradients_in_the_tensors_types():
    torch.manual_seed(1)
    flat = torch.randn(2, 6, 8, requires_grad=True)
    weight = torch.randn(2, 3, 8, requires_grad=True)
    bias = torch.randn(2, 3, requires_grad=True)
    upstream = torch.randn(2, 6, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours_out = StackedAffine.apply(flat, weight, bias)
        theirs_out = torch.baddbmm(bias.unsqueeze(1), flat, weight.transpose(1, 2))
    assert ours_out.dtype == theirs_out.dtype == torch.bfloat16
    assert torch.equal(ours_out, theirs_out)
    ours = torch.autograd.grad(ours_out, (flat, weight, bias), upstream.to(torch.bfloat16))
    theirs = torch.autograd.grad(theirs_out, (flat, weight, bias), upstream.to(torch.bfloat16))
    for mine, reference in zip(ours, theirs):
        assert mine.dtype == reference.dtype == torch.float32
        assert torch.allclose(mine, reference, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_stacked_dropout_keeps_each_entry_with_probability_one_minus_p_scaled(p):
    dropout = StackedDropout(p)
    x = torch.ones(2, 1000, 1000)  # two members
    torch.manual_seed(0)
    y = dropout(x)
    kept = y != 0
    scale = torch.tensor(1.0 / (1.0 - p))  # the inverted-dropout scale of nn.Dropout, in float32
    assert torch.all(y[kept] == scale)
    n = kept.numel()
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * (p * (1 - p) / n) ** 0.5
    # the two members' masks and neighbouring entries are independent: the correlation is ~0 (5 sigma)
    a, b = kept[0].flatten().float(), kept[1].flatten().float()
    assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < 5 / (n / 2) ** 0.5
    assert abs(torch.corrcoef(torch.stack([a[:-1], a[1:]]))[0, 1].item()) < 5 / (n / 2) ** 0.5
    torch.manual_seed(0)
    assert torch.equal(dropout(x), y)  # the global generator's stream, like nn.Dropout
    x.requires_grad_(True)
    dropout(x).sum().backward()
    assert set(x.grad.unique().tolist()) <= {0.0, scale.item()}
    assert torch.equal(dropout.eval()(x), x)
    assert torch.equal(StackedDropout(1.0).train()(x), torch.zeros_like(x))


def test_gradient_clipping_is_per_member():
    models = []
    for seed in range(3):
        set_seed(seed)
        models.append(TreeLangForSequenceClassification(TreeLangConfig.from_data(
            num_symbols=3, depth=2, hidden_size=8, num_hidden_layers=1, intermediate_size=8,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)))
    stacked = StackedTreeLang.from_models(models, "root")
    inputs, labels = torch.randint(0, 4, (3, 6, 4)), torch.randint(0, 3, (3, 6))
    stacked(inputs, labels).loss.backward()
    for parameter in stacked.parameters():
        parameter.grad[1] *= 1000.0  # a member with a huge gradient must not shrink the others' steps
    expected = []
    for index, model in enumerate(models):
        model(input_ids=inputs[index], labels=labels[index]).loss.backward()
        if index == 1:
            for parameter in model.parameters():
                parameter.grad *= 1000.0
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        expected.append((norm, {name: p.grad for name, p in model.named_parameters()}))
    norms = clip_grad_norm_per_member(list(stacked.parameters()), 0.5, 3)
    for index, (norm, grads) in enumerate(expected):
        assert norms[index].item() == pytest.approx(norm.item(), rel=1e-5)
        for name, parameter in stacked.named_parameters():
            assert torch.allclose(parameter.grad[index], grads[name], atol=1e-6), name


def test_the_auto_mode_stacks_small_models_and_gpus_and_runs_large_cpu_models_in_sequence():
    quick = TreeLangConfig.from_data(num_symbols=4, depth=4, hidden_size=64, intermediate_size=256)
    paper = TreeLangConfig.from_data(num_symbols=4, depth=4, hidden_size=128, intermediate_size=2048)
    assert choose_ensemble_mode(quick, 32, "cpu") == "stacked"
    assert choose_ensemble_mode(paper, 32, "cpu") == "sequential"
    assert choose_ensemble_mode(paper, 32, "cuda") == "stacked"


# ---------------------------------------------------------------- bad ensembles


@pytest.fixture()
def no_data(monkeypatch):
    """Fail the test if any data are built."""
    import hf_treelang.train.data as data

    def refuse(*args, **kwargs):
        raise AssertionError("data were built before the ensemble was checked")

    monkeypatch.setattr(data, "load_run_data", refuse)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--ensemble_seeds", "0", "0"], "ensemble_seeds.*repeat"),
        (["--ensemble_k_train", "1", "3"], "k_train"),
        (["--ensemble_seeds", "0", "--train_engine", "dataloader"], "train_engine"),
        (["--ensemble_seeds", "0", "1", "--ensemble_mode", "parallel"], "ensemble_mode"),
    ],
)
def test_bad_ensemble_arguments_fail_before_any_data(tmp_path, no_data, extra, message):
    with pytest.raises(ValueError, match=message):
        _train("root", tmp_path / "never", *extra)
    assert not (tmp_path / "never").exists()


def _members(tmp_path, changes):
    members, _ = _runs("mlm", tmp_path / "never", "--ensemble_seeds", "0", "1")
    for (kind, name), value in changes.items():
        setattr(getattr(members[1], kind), name, value)
    return members


@pytest.mark.parametrize(
    "changes, message",
    [
        ({("model_args", "hidden_size"): 64}, "architecture.*hidden_size"),
        ({("data_args", "num_train"): 64}, "data.*num_train"),
        ({("training_args", "max_steps"): 5}, "max_steps"),
        ({("training_args", "seed"): 0}, "repeated"),
    ],
)
def test_members_of_different_architectures_sizes_or_steps_or_repeated_fail_before_any_data(
        tmp_path, no_data, changes, message):
    members = _members(tmp_path, changes)
    with pytest.raises(ValueError, match=message):
        loop.train_together(members, ensemble_dir=tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_an_ensemble_cannot_resume_a_single_runs_checkpoint_nor_the_reverse(runs, tmp_path, no_data):
    single_checkpoint = runs["dir"] / "single-mlm-1-0" / "checkpoint-12"
    with pytest.raises(ValueError, match="checkpoint of a single run"):
        _train("mlm", tmp_path / "never", "--ensemble_seeds", "0", "1", "--ensemble_mode", "stacked",
               "--resume_from_checkpoint", str(single_checkpoint))
    ensemble_checkpoint = runs["dir"] / "mlm" / "checkpoint-12"
    with pytest.raises(ValueError, match="checkpoint of an ensemble"):
        _train("mlm", tmp_path / "never", "--resume_from_checkpoint", str(ensemble_checkpoint))
    assert not (tmp_path / "never").exists()


def test_a_finetune_ensemble_is_refused(tmp_path, no_data):
    members, _ = _runs("mlm", tmp_path / "never", "--ensemble_seeds", "0", "1")
    members = [dataclasses.replace(run, task="finetune") for run in members]
    with pytest.raises(ValueError, match="finetune"):
        loop.train_together(members, ensemble_dir=tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_a_stacked_ensemble_resumes_byte_identically_from_its_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(outputs, "plot_curves", _touch_curves)
    extra = ["--ensemble_seeds", "0", "1", "--ensemble_mode", "stacked", "--num_checkpoints", "3",
             "--hidden_dropout_prob", "0.1", "--attention_probs_dropout_prob", "0.1"]
    full = _train("root", tmp_path / "full", *extra)
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-3", resumed_dir / "checkpoint-3")
    capsys.readouterr()
    assert loop.main("root", TINY + ["--output_dir", str(resumed_dir), *extra, "--resume_from_checkpoint",
                                     str(resumed_dir / "checkpoint-3")]) == 0  # the script's checks and summary
    printed = capsys.readouterr().out
    assert "[ensemble, stacked] 2 members, 12 steps" in printed and "\nseed1-k0: step 12 · loss" in printed
    assert full.global_step == 12
    for name in ("seed0-k0", "seed1-k0"):
        first = load_file(tmp_path / "full" / "members" / name / "model.safetensors")
        second = load_file(resumed_dir / "members" / name / "model.safetensors")
        assert all(torch.equal(first[key], second[key]) for key in first), name
        losses = [json.loads((folder / "members" / name / "metrics.json").read_text())["train_loss"]
                  for folder in (tmp_path / "full", resumed_dir)]
        assert losses[1] == pytest.approx(losses[0], rel=1e-6), f"{name}: the mean over every step of the run"


def test_a_stacked_ensemble_stopped_after_a_resume_checkpoint_resumes_to_the_same_members(tmp_path, monkeypatch):
    """A resume-only checkpoint (every 5 steps) is marked in the ensemble's folder and in every member's copy, the
    older one removed; after the resumed run ends, no resume-only checkpoint is left anywhere."""
    from transformers import TrainerCallback

    from hf_treelang.train.callbacks import RESUME_MARKER

    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 11:
                raise KeyboardInterrupt("stopped at step 11")

    monkeypatch.setattr(outputs, "plot_curves", _touch_curves)
    extra = ["--ensemble_seeds", "0", "1", "--ensemble_mode", "stacked", "--num_checkpoints", "3"]
    _train("root", tmp_path / "full", *extra)
    runs, ensemble = _runs("root", tmp_path / "stopped", *extra, "--resume_checkpoint_steps", "5")
    with pytest.raises(KeyboardInterrupt):
        loop.train_together(runs, mode="stacked", ensemble_dir=ensemble.output_dir, callbacks=[StopAt()])
    folders = [tmp_path / "stopped", *(tmp_path / "stopped" / "members" / n for n in ("seed0-k0", "seed1-k0"))]
    for folder in folders:
        assert (folder / "checkpoint-10" / RESUME_MARKER).is_file() and not (folder / "checkpoint-5").exists()
    _train("root", tmp_path / "stopped", *extra, "--resume_checkpoint_steps", "5", "--resume_from_checkpoint",
           str(tmp_path / "stopped" / "checkpoint-10"))
    for name in ("seed0-k0", "seed1-k0"):
        first = load_file(tmp_path / "full" / "members" / name / "model.safetensors")
        second = load_file(tmp_path / "stopped" / "members" / name / "model.safetensors")
        assert all(torch.equal(first[key], second[key]) for key in first), name
    assert not list((tmp_path / "stopped").rglob(RESUME_MARKER))
    assert not any((folder / "checkpoint-10").exists() for folder in folders)


def test_a_stacked_ensemble_trains_on_the_runs_cpu_threads(tmp_path, monkeypatch):
    """--cpu_threads holds for the stacked model as for a single run (two one-thread jobs share two cores)."""
    from transformers import TrainerCallback

    seen = []

    class Threads(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            seen.append(torch.get_num_threads())

    monkeypatch.setattr(outputs, "plot_curves", _touch_curves)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        runs, ensemble = _runs("root", tmp_path / "ens", "--ensemble_seeds", "0", "1", "--ensemble_mode", "stacked",
                               "--num_checkpoints", "0")
        assert runs[0].training_args.cpu_threads == 1
        loop.train_together(runs, mode="stacked", ensemble_dir=ensemble.output_dir, callbacks=[Threads()])
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {1}


def test_a_sequential_ensemble_trains_its_members_as_single_runs_sharing_the_data(tmp_path, monkeypatch):
    monkeypatch.setattr(outputs, "plot_curves", _touch_curves)
    built = []
    original = loop.bp_callback_for
    monkeypatch.setattr(loop, "bp_callback_for", lambda *args, **kwargs: built.append(1) or original(*args, **kwargs))
    result = _train("root", tmp_path / "sequential", "--ensemble_seeds", "0", "1", "--ensemble_mode", "sequential",
                    "--num_evaluations", "1", "--num_checkpoints", "0")
    assert result.mode == "sequential" and sorted(result.members) == ["seed0-k0", "seed1-k0"]
    assert result.num_data_configs == 1 and len(built) == 1  # the data and BP targets built once for both members
    _train("root", tmp_path / "single", "--seed", "1", "--num_evaluations", "1", "--num_checkpoints", "0")
    member = load_file(tmp_path / "sequential" / "members" / "seed1-k0" / "model.safetensors")
    alone = load_file(tmp_path / "single" / "model.safetensors")
    assert all(torch.equal(member[key], alone[key]) for key in member)  # the same computation, bit for bit
    assert (tmp_path / "sequential" / "members" / "seed1-k0" / "run_complete.json").is_file()


def test_with_clipping_a_member_still_equals_its_single_run(tmp_path, monkeypatch):
    monkeypatch.setattr(outputs, "plot_curves", _touch_curves)
    clip = ["--max_grad_norm", "0.05", "--num_evaluations", "1", "--num_checkpoints", "0"]  # clips every step
    _train("root", tmp_path / "ensemble", "--ensemble_seeds", "0", "1", "--ensemble_mode", "stacked", *clip)
    _train("root", tmp_path / "single", "--seed", "1", *clip)
    _assert_member_is_single_run(tmp_path / "ensemble" / "members" / "seed1-k0", tmp_path / "single",
                                 TreeLangForSequenceClassification, torch.randint(0, 4, (5, 4)))
    state = json.loads((tmp_path / "ensemble" / "trainer_state.json").read_text())
    assert any(entry.get("grad_norm", 0) > 0.05 for entry in state["log_history"])  # clipping was active


def test_an_ensemble_refuses_overwriting_and_resuming_at_once_before_any_data(tmp_path, no_data):
    with pytest.raises(ValueError, match="overwrite_output_dir.*resume_from_checkpoint.*exclude each other"):
        _train("root", tmp_path / "never", "--ensemble_seeds", "0", "1", "--overwrite_output_dir", "true",
               "--resume_from_checkpoint", str(tmp_path / "never" / "checkpoint-3"))
    assert not (tmp_path / "never").exists()


def test_overwriting_an_ensemble_removes_the_previous_members(tmp_path, monkeypatch):
    monkeypatch.setattr(outputs, "plot_curves", _touch_curves)
    extra = ["--ensemble_mode", "sequential", "--num_evaluations", "1", "--num_checkpoints", "0"]
    _train("root", tmp_path / "ens", "--ensemble_seeds", "0", "1", *extra)
    _train("root", tmp_path / "ens", "--ensemble_seeds", "2", "--overwrite_output_dir", "true", *extra)
    assert sorted(p.name for p in (tmp_path / "ens" / "members").iterdir()) == ["seed2-k0"]
    assert json.loads((tmp_path / "ens" / "ensemble.json").read_text())["members"] == ["seed2-k0"]
