"""`hf-treelang reproduce`: the whole pipeline at the hidden tiny preset, its report, resuming, the sweeps of the
missing figures (Fig. 2a, App. E.1-E.3, E.5, E.7 right), and the authors' settings behind the paper preset."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_treelang.analysis import accuracy_curves, probing
from hf_treelang.models import TreeLangForSequenceClassification
from hf_treelang.models.modeling_treelang import TreeLangClassificationHead
from hf_treelang.reproduce import PRESETS, reproduce, steps_of
from hf_treelang.reproduce.presets import FIGURE_STEPS
from hf_treelang.train import paper_settings as paper
from hf_treelang.train.arguments import PRESETS as TRAINING_PRESETS
from hf_treelang import cli
from hf_treelang.train.arguments import DataArguments, ModelArguments, TreeLangTrainingArguments, parse_command_line
from hf_treelang.train.folders import finished_run
from hf_treelang.train.loop import build_model, train
from hf_treelang.train.run import build, check_checkpoint_epochs, check_run, resolve

TINY = PRESETS["tiny"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce") / "out"
    first = reproduce(out, "tiny", progress=False)
    markers = {p.name: p.read_bytes() for p in (out / ".done").iterdir()}
    second = reproduce(out, "tiny", progress=False)
    return out, first, second, markers


def _done(out, name):
    return finished_run(out / "runs" / name)


def test_tiny_preset_runs_every_step_and_embeds_every_figure(tiny_run):
    out, first, _, _ = tiny_run
    names = [name for name, _ in steps_of(TINY)]
    assert set(FIGURE_STEPS) <= set(names)  # the tiny preset sizes every sweep
    assert [r.name for r in first.steps] == names
    assert all(r.status == "ran" for r in first.steps)
    report = first.report.read_text()
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    expected = {"bp/bp_baselines.png", "dynamics/root.png", "dynamics/mlm.png", "calibration/mlm/calibration.png",
                "calibration/root/calibration.png", "attention/mlm/attention.png", "attention/root/attention.png",
                "probe/probe.png", "probe/probe_ends.png", "sample_complexity/sample_complexity.png",
                "accuracy_vs_samples/fig2a_e3.png", "accuracy_vs_samples/e1_layers.png",
                "accuracy_vs_samples/e2_grammar_seeds.png", "attention/classifier/attention.png",
                "probe/probe_filtered.png"}
    assert expected <= set(figures)
    for figure in figures:
        assert (out / figure).stat().st_size > 1000
        assert (out / figure).with_suffix(".json").is_file()  # every figure has its numbers next to it
    assert "| step | status | seconds |" in report and "missing" not in report


def test_report_compares_models_with_bp_on_the_same_inputs(tiny_run):
    out, _, _, _ = tiny_run
    baselines = json.loads((out / "bp" / "bp_baselines.json").read_text())["accuracy"]
    depth = TINY.depth
    assert sorted(baselines) == [str(k) for k in range(depth + 1)]
    assert baselines["0"]["root_optimal"] == 1.0  # the full hierarchy determines its root
    for task in ("root", "mlm"):
        final = _done(out, task)["final"]
        for k, row in baselines.items():
            # the baselines and the training callback's BP reference use the same inputs and masks
            assert row[f"{task}_k_train"] == pytest.approx(final[f"eval_bp_acc_ktest{k}"])
            assert 0.0 <= final[f"eval_acc_ktest{k}"] <= 1.0
        assert baselines["0"][f"{task}_optimal"] == baselines["0"][f"{task}_k_train"]  # k_train = 0: same BP
    report = (out / "report.md").read_text()
    assert re.search(r"\| root \| 0 \| [0-9.]+ \| 1\.000 \| 1\.000 \|", report)


def test_dynamics_records_how_far_apart_the_bp_k_are_on_the_runs_own_inputs(tiny_run):
    """What Fig. 1c/d's and 3a's findings need beyond the history: the in-sample size, BP_k's argmax disagreement
    with BP_k_train there, and the most-frequent-symbol accuracy of every k_test."""
    out, _, _, _ = tiny_run
    for task in ("root", "mlm"):
        summary = json.loads((out / "dynamics" / f"{task}.json").read_text())
        assert summary["num_in_sample"] == json.loads((out / "runs" / task / "metrics.json").read_text())["num_eval"]
        disagreement = summary["bp_argmax_disagreement"]
        assert sorted(disagreement) == [f"k{k}" for k in range(TINY.depth + 1)] and disagreement["k0"] == 0.0
        assert all(0.0 <= v <= 1.0 for v in disagreement.values()) and max(disagreement.values()) > 0
        chance = summary["chance_accuracy_ktest"]
        assert sorted(chance) == [f"k{k}" for k in range(TINY.depth + 1)]
        assert all(1 / TINY.num_symbols <= v <= 1.0 for v in chance.values())  # the most frequent of q symbols
    findings = {f["figure"]: f for f in json.loads((out / "findings.json").read_text())["findings"]}
    assert "no level exempted" not in findings["1d"]["note"]
    assert "taken as reachable" not in findings["3a"]["note"] and "no pair exempted" not in findings["3a"]["note"]


def test_rerun_skips_finished_steps_and_keeps_their_results(tiny_run):
    out, first, second, markers = tiny_run
    assert [r.status for r in second.steps] == ["skipped"] * len(first.steps)
    assert {p.name: p.read_bytes() for p in (out / ".done").iterdir()} == markers
    assert "done earlier" in second.report.read_text()


def test_the_estimate_printed_first_counts_only_the_runs_left_to_train(tiny_run, tmp_path):
    from hf_treelang.reproduce.plan import planned_runs, remaining_lines
    from hf_treelang.reproduce.steps import Context

    out, _, _, _ = tiny_run
    total = len(planned_runs(Context(out, TINY, progress=False)))
    assert remaining_lines(Context(out, TINY, progress=False)) == [
        f"every one of the {total} training runs is finished: only the analyses are left"]
    line, *busy = remaining_lines(Context(tmp_path / "fresh", TINY, progress=False), measure_steps=1)
    assert line.startswith(f"{total} of {total} training runs to train: ") and "optimizer steps, about" in line
    assert all("other work took part of the CPU" in extra for extra in busy)  # a busy machine says so, on one line
    assert len(busy) <= 1


def test_a_reproduction_killed_with_sigterm_records_its_call_and_gives_the_handler_back(tmp_path):
    import os
    import signal

    from hf_treelang.reproduce.timing import TIMING_FILE, Terminated

    before = signal.getsignal(signal.SIGTERM)

    def kill_after_the_first_step(line):
        if line.startswith("data: finished"):
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Terminated):
        reproduce(tmp_path / "out", "tiny", progress=False, only=["data"], log=kill_after_the_first_step)
    (call,) = json.loads((tmp_path / "out" / TIMING_FILE).read_text())["calls"]
    assert call["status"] == "stopped by SIGTERM" and call["steps_ran"] == ["data"] and call["seconds"] > 0
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_folder_of_another_preset_or_an_unknown_preset_is_refused(tmp_path, capsys):
    (tmp_path / "preset.json").write_text(json.dumps({"name": "quick"}))
    with pytest.raises(ValueError, match="preset 'quick'"):
        reproduce(tmp_path, "tiny", progress=False)
    assert cli.run_command("reproduce", [str(tmp_path / "new"), "--preset", "huge"]) == 2
    assert "quick" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


# ---------------------------------------------------------------- the missing figures


def test_fig2a_and_e3_read_every_run_out_of_and_in_sample(tiny_run):
    out, _, _, _ = tiny_run
    figure = json.loads((out / "accuracy_vs_samples" / "fig2a_e3.json").read_text())
    full, in_sample = figure["panels"]
    assert (full["k_test"], in_sample["k_test"]) == ("full", "train")
    assert [c["filter_level"] for c in full["curves"]] == sorted(TINY.sweep_filter_levels)
    for panel, k_test in ((full, lambda k: 0), (in_sample, lambda k: k)):
        for curve in panel["curves"]:
            k = curve["filter_level"]
            assert curve["sizes"] == sorted(TINY.sweep_sizes_of(k))
            finals = [finished_run(run)["final"] for run in curve["runs"]]
            assert curve["accuracy"] == [f[f"eval_acc_ktest{k_test(k)}"] for f in finals]
            assert curve["bp_accuracy"] == finals[-1][f"eval_bp_acc_ktest{k_test(k)}"]
            # the test sequences behind each accuracy: what the rules read as its sampling noise
            assert curve["num_test"] == min(json.loads((Path(run) / "metrics.json").read_text())["num_test"]
                                            for run in curve["runs"])
    # the run with the main root run's settings is the main root run, not a second training
    k0 = full["curves"][0]
    assert k0["runs"][k0["sizes"].index(TINY.root_train)] == str(out / "runs" / "root")
    # BP_0 is exact on the full hierarchy; BP_k of filtered data is not, out of sample
    assert k0["bp_accuracy"] == 1.0 and full["curves"][1]["bp_accuracy"] < 1.0


def test_fig9_kl_figure_holds_the_sweep_runs_in_sample_kl_and_their_kl_on_uniform_inputs(tiny_run):
    from hf_treelang.analysis.kl_vs_samples import uniform_kl

    out, _, _, _ = tiny_run
    assert (out / "accuracy_vs_samples" / "fig9_kl.png").is_file()
    figure = json.loads((out / "accuracy_vs_samples" / "fig9_kl.json").read_text())
    assert sorted({p["filter_level"] for p in figure["points"]}) == sorted(TINY.sweep_filter_levels)
    for point in figure["points"]:
        final = finished_run(point["output_dir"])["final"]
        assert point["kl"]["in_sample"] == final[f"eval_kl_bp_k{point['filter_level']}"]  # the run's own metric
        assert point["kl"]["uniform"] >= 0
    first = figure["points"][0]
    measured, impossible, error = uniform_kl(first["output_dir"], num_samples=TINY.analysis_samples)
    assert measured == pytest.approx(first["kl"]["uniform"], rel=1e-12)
    assert impossible == first["num_impossible_uniform"]
    assert error == pytest.approx(first["kl_standard_error"]["uniform"], rel=1e-12) and error > 0
    final = finished_run(first["output_dir"])["final"]
    assert first["kl_standard_error"]["in_sample"] == final[f"eval_kl_se_bp_k{first['filter_level']}"]
    for curves in figure["curves"].values():  # what Fig. 9's rule reads as the noise of each KL
        assert all(len(curve["kl_standard_error"]) == len(curve["kl"]) for curve in curves.values())


def test_e1_varies_the_encoder_blocks_and_e2_the_grammar(tiny_run):
    out, _, _, _ = tiny_run
    layers = json.loads((out / "accuracy_vs_samples" / "e1_layers.json").read_text())["panels"][0]
    assert [c["num_layers"] for c in layers["curves"]] == list(TINY.layer_counts)
    for curve in layers["curves"]:
        for run in curve["runs"]:
            assert json.loads(Path(run, "config.json").read_text())["num_hidden_layers"] == curve["num_layers"]
    seeds = json.loads((out / "accuracy_vs_samples" / "e2_grammar_seeds.json").read_text())["panels"]
    assert [panel["grammar_seed"] for panel in seeds] == list(TINY.grammar_seeds)
    run = seeds[0]["curves"][0]["runs"][0]
    grammar = json.loads(Path(run, "grammar.json").read_text())
    main = json.loads((out / "runs" / "root" / "grammar.json").read_text())
    assert grammar["params"]["grammar_seed"] == TINY.grammar_seeds[0] and grammar["M"] != main["M"]


def test_e5_shows_the_classifier_of_every_k_train_at_its_largest_p(tiny_run):
    out, _, _, _ = tiny_run
    models = json.loads((out / "attention" / "classifier" / "attention.json").read_text())["models"]
    assert [m["filter_level"] for m in models] == sorted(TINY.sweep_filter_levels)
    assert all(m["task"] == "root" and m["masked"] is False for m in models)
    sizes = json.loads((out / ".done" / "classifier_attention.json").read_text())["summary"]["sizes"]
    assert sizes == [max(TINY.sweep_sizes_of(k)) for k in sorted(TINY.sweep_filter_levels)]
    maps = np.array(models[0]["maps"])  # (layers, heads, L, L)
    assert np.allclose(maps.sum(-1), 1.0, atol=1e-5)


def test_e7_right_probes_the_complete_encoding_of_each_k_train_model(tiny_run):
    out, _, _, _ = tiny_run
    result = json.loads((out / "probe" / "probe_filtered.json").read_text())
    assert result["filter_levels"] == [TINY.filter_level, *TINY.attention_filter_levels]
    n_layers = TINY.model["num_hidden_layers"]
    for model in result["models"]:
        assert model["layers"] == [n_layers] and model["data_filter_level"] == 0
        assert model["probe_hidden"] == TINY.filtered_probe_hidden  # the notebook's linear readout
        assert np.array(model["accuracy"]).shape == (1, len(model["levels"]))


def test_fig1f_pretrained_arms_get_the_preset_readout(tiny_run):
    out, _, _, _ = tiny_run
    runs = json.loads((out / "sample_complexity" / "sample_complexity.json").read_text())["runs"]
    for arm in ("frozen", "finetuned"):
        config = json.loads(Path(runs[arm][0], "config.json").read_text())
        assert config["classifier_hidden_size"] == TINY.finetune_classifier_hidden_size == paper.FINETUNE_HIDDEN
    scratch = json.loads(Path(runs["scratch"][0], "config.json").read_text())
    assert scratch["classifier_hidden_size"] == 0


def test_accuracy_panel_refuses_runs_without_the_k_test_set():
    point = accuracy_curves.SweepPoint(filter_level=2, num_train=64, num_layers=2, grammar_seed=0,
                                       final={"eval_acc_ktest2": 0.5}, output_dir="runs/x")
    with pytest.raises(ValueError, match="no test accuracy on k_test=0"):
        accuracy_curves.accuracy_panel([point], k_test="full", vary="filter_level", title="t")
    with pytest.raises(ValueError, match="k_test must be one of"):
        accuracy_curves.accuracy_panel([point], k_test="all", vary="filter_level", title="t")
    other = accuracy_curves.SweepPoint(2, 128, 2, 1, {"eval_acc_ktest2": 0.6})
    with pytest.raises(ValueError, match="one grammar seed"):
        accuracy_curves.accuracy_panel([point, other], k_test="train", vary="filter_level", title="t")


# ---------------------------------------------------------------- the authors' settings


def test_paper_preset_follows_the_authors_scripts():
    """The numbers of scripts/Transformer_RootInference*.py and Transformer_MLM.py, recomputed from their formulas."""
    p = PRESETS["paper"]
    assert (p.root_train, p.root_epochs, p.mlm_train, p.mlm_epochs, p.num_test) == (2**17, 200, 2**18, 2000, 10**4)
    assert list(p.root_checkpoint_epochs) == np.unique(np.logspace(0, np.log10(200), 12).astype(int)).tolist()
    mlm_epochs = set(np.logspace(0, 3, 8).astype(int).tolist()) | set(range(500, 2001, 500))
    assert list(p.mlm_checkpoint_epochs) == sorted(mlm_epochs)
    assert list(p.sweep_sizes) == (2 ** np.arange(9, 18)).tolist()
    assert list(p.sweep_sizes_filtered) == (2 ** np.arange(9, 21)).tolist()
    assert p.sweep_sizes_of(0)[-1] == 2**17 and p.sweep_sizes_of(3)[-1] == 2**20  # App. E.5's P per k
    assert (p.sweep_epochs, p.layer_counts, p.grammar_seeds) == (200, (1, 2, 3, 4), (1, 15, 31))
    assert (p.probe_train, p.probe_validation, p.probe_epochs, p.probe_batch_size, p.probe_learning_rate) == (
        2**14, 10**4, 100, 32, 1e-4)
    assert p.sample_epochs == p.root_epochs  # Fig. 1f's scratch arm trains like the root runs
    assert set(p.figure_steps()) == set(FIGURE_STEPS)
    for task, epochs in (("root", 200), ("mlm", 2000)):
        training = TRAINING_PRESETS[task]["paper"]
        assert training["num_train_epochs"] == epochs and max(training["checkpoint_epochs"]) == epochs


def test_quick_preset_trains_the_training_scripts_default_runs(tmp_path):
    """One home for the laptop settings: quick's main runs resolve to the identity of `python training/run_root.py`
    and `run_mlm.py` with no arguments (a change of the laptop preset changes both), and its filtered MLM is that
    MLM run at k_train = 2 for the preset's shorter epochs."""
    from hf_treelang.reproduce.plan import planned_runs
    from hf_treelang.reproduce.steps import Context
    from hf_treelang.train import laptop_settings as laptop

    quick = PRESETS["quick"]
    ctx = Context(tmp_path / "out", quick, progress=False)
    for task in ("root", "mlm"):
        assert ctx.spec(task, task).identity == resolve(task, {}, tmp_path / task).identity
    filtered = ctx.spec("mlm", "mlm_k2", 2)
    assert filtered.identity == resolve("mlm", {"k_train": 2, "k_test": [2, 0, 1, 3, 4], "num_train_epochs":
                                                quick.filtered_mlm_epochs}, tmp_path / "k2").identity
    assert filtered.identity != ctx.spec("mlm", "mlm").identity
    assert (quick.root_train, quick.root_epochs) == (laptop.ROOT["num_train"], laptop.ROOT["num_train_epochs"])
    assert (quick.mlm_train, quick.mlm_epochs) == (laptop.MLM["num_train"], laptop.MLM["num_train_epochs"])
    assert TRAINING_PRESETS["root"]["laptop"] is laptop.ROOT and TRAINING_PRESETS["mlm"]["laptop"] is laptop.MLM
    names = [entry["name"] for entry in planned_runs(ctx)]
    assert names[:3] == ["root", "mlm", "mlm_k2"] and quick.figure_steps() == ("probe_filtered",)


def test_laptop_long_preset_is_quick_with_the_long_mlm(tmp_path):
    """`reproduce --preset laptop_long`: its main MLM is `run_mlm.py --preset laptop_long` (40 epochs), its root run
    and filtered MLM are quick's very runs (the same identities), so only the MLM and the analyses differ."""
    from hf_treelang.reproduce.steps import Context
    from hf_treelang.train import laptop_settings as laptop

    long, quick = PRESETS["laptop_long"], PRESETS["quick"]
    ctx = Context(tmp_path / "long", long, progress=False)
    quick_ctx = Context(tmp_path / "quick", quick, progress=False)
    mlm = ctx.spec("mlm", "mlm")
    assert mlm.identity == resolve("mlm", {"preset": "laptop_long"}, tmp_path / "mlm").identity
    assert mlm.identity != quick_ctx.spec("mlm", "mlm").identity
    assert mlm.training_args.num_train_epochs == laptop.MLM_LONG["num_train_epochs"] == long.mlm_epochs
    assert ctx.spec("root", "root").identity == quick_ctx.spec("root", "root").identity
    assert ctx.spec("mlm", "mlm_k2", 2).identity == quick_ctx.spec("mlm", "mlm_k2", 2).identity
    assert steps_of(long) and [name for name, _ in steps_of(long)] == [name for name, _ in steps_of(quick)]


def test_no_gradient_clipping_by_default(tmp_path):
    assert TreeLangTrainingArguments(output_dir=str(tmp_path)).max_grad_norm == 0
    for preset in ("laptop", "paper"):
        _, _, training_args = parse_command_line("root", ["--preset", preset, "--output_dir", str(tmp_path)])[:3]
        assert training_args.max_grad_norm == 0


def test_checkpoint_epochs_evaluate_and_save_at_the_end_of_those_epochs(tmp_path):
    # 64 sequences in batches of 32: 2 steps per epoch, so epochs 1 and 3 end at steps 2 and 6
    run = resolve("root", {"depth": 2, "num_symbols": 3, "num_train": 64, "num_eval": 16, "num_test": 16,
                           "k_test": [0], "hidden_size": 8, "num_hidden_layers": 1, "intermediate_size": 16,
                           "num_train_epochs": 3.0, "num_evaluations": 0, "num_checkpoints": 0,
                           "checkpoint_epochs": [1, 3], "use_dataset_builder": False, "disable_tqdm": True,
                           "report_to": "none"}, tmp_path / "run")
    train(run)
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-6"]
    history = json.loads((tmp_path / "run" / "eval_history.json").read_text())["history"]
    assert {2, 6} <= {entry["step"] for entry in history}


def test_checkpoint_epochs_and_readout_out_of_range_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"`checkpoint_epochs` must hold integers in \[1, num_train_epochs=3\], "
                                         r"got 4"):
        check_checkpoint_epochs([1, 4], 3.0)
    data_args, model_args, training_args = parse_command_line("root", ["--output_dir", str(tmp_path / "r")])[:3]
    model_args.classifier_hidden_size = 64
    with pytest.raises(ValueError, match=r"`classifier_hidden_size` must be 0 .* for a root run from scratch, got 64"):
        check_run("root", data_args, model_args, training_args)
    model_args.classifier_hidden_size = -3
    with pytest.raises(ValueError, match=r"`classifier_hidden_size` must be an integer >= 0 .*got -3"):
        check_run("root", data_args, model_args, training_args)
    assert not (tmp_path / "r").exists()


def _finetune_model(out, hidden=paper.FINETUNE_HIDDEN, freeze=True):
    data_args = DataArguments(depth=TINY.depth, num_symbols=TINY.num_symbols, num_train=8, num_eval=8, num_test=8)
    model_args = ModelArguments(model_name_or_path=str(out / "runs" / "mlm"), freeze_encoder=freeze,
                                classifier_hidden_size=hidden)
    training_args = TreeLangTrainingArguments(output_dir=str(out / "finetune"), report_to="none")
    return build_model(build("finetune", data_args, model_args, training_args, {}))


def test_finetune_frozen_encoder_runs_in_eval_mode_in_training(tiny_run):
    out, _, _, _ = tiny_run
    ids = torch.randint(0, TINY.num_symbols, (16, 2**TINY.depth))
    frozen = _finetune_model(out).train()  # what Trainer does at every step
    assert torch.equal(frozen(input_ids=ids).logits, frozen(input_ids=ids).logits)  # no dropout anywhere
    assert not frozen.base_model.training and frozen.classifier.training
    trained = _finetune_model(out, freeze=False).train()
    assert not torch.equal(trained(input_ids=ids).logits, trained(input_ids=ids).logits)  # dropout on


def test_finetune_two_layer_readout_saves_and_loads(tiny_run, tmp_path):
    out, _, _, _ = tiny_run
    model = _finetune_model(out).eval()
    head = model.classifier
    assert isinstance(head, TreeLangClassificationHead) and head.dense.out_features == paper.FINETUNE_HIDDEN
    assert head.dense.in_features == TINY.model["hidden_size"] * 2**TINY.depth  # the concatenated tokens
    model.save_pretrained(tmp_path)
    loaded = TreeLangForSequenceClassification.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, TINY.num_symbols, (8, 2**TINY.depth))
    assert isinstance(loaded.classifier, TreeLangClassificationHead)
    assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    assert isinstance(_finetune_model(out, hidden=0).classifier, torch.nn.Linear)


# ---------------------------------------------------------------- probes as App. E.6 and the notebook


@pytest.fixture(scope="module")
def probe_result(tiny_run):
    out, _, _, _ = tiny_run
    return probing.probe(out / "runs" / "mlm", num_train=64, num_validation=48, num_test=32, epochs=4, batch_size=16,
                         learning_rate=3e-3, seed=3, progress=False)


def test_probe_reports_the_best_validation_epoch_and_the_last(probe_result):
    r = probe_result
    assert r.validation_history.shape == (r.epochs + 1, len(r.layers), len(r.levels))  # epoch 0 included
    assert np.array_equal(r.best_epoch, r.validation_history.argmax(0))  # the first epoch of the best accuracy
    assert np.array_equal(r.validation_accuracy, r.validation_history.max(0))
    last = r.best_epoch == r.epochs
    assert np.array_equal(r.accuracy[last], r.final_accuracy[last])  # best = last: the same probe
    assert r.to_dict()["final_accuracy"].shape == r.accuracy.shape


def test_batched_probes_copy_only_the_selected_probes():
    generator = torch.Generator().manual_seed(0)
    for hidden in (0, 5):
        mine = probing._BatchedProbes(3, 2, 4, hidden, 3, generator)
        theirs = probing._BatchedProbes(3, 2, 4, hidden, 3, generator)
        x = torch.randn(3, 7, 4)  # (P, T, d)
        before_mine, before_theirs = mine(x), theirs(x)  # (P, T, V, q)
        improved = torch.tensor([[True, False], [False, False], [False, True]])
        mine.copy_where(theirs, improved)
        after = mine(x)
        for p in range(3):
            for v in range(2):
                expected = before_theirs if improved[p, v] else before_mine
                assert torch.allclose(after[p, :, v], expected[p, :, v])


def test_probe_layers_outside_the_encoder_are_refused(tiny_run, tmp_path):
    out, _, _, _ = tiny_run
    with pytest.raises(ValueError, match=r"layers: layer 3 is outside \[0, 2\]"):
        probing.probe(out / "runs" / "mlm", layers=[3], num_train=8, num_validation=8, num_test=8, epochs=1)
    with pytest.raises(ValueError, match="probe_hidden` must be"):
        probing.probe(out / "runs" / "mlm", probe_hidden=-1, num_train=8, num_validation=8, num_test=8, epochs=1)


def test_the_wall_time_counts_the_calls_made_with_earlier_preset_values_whose_runs_are_reused(tmp_path):
    from hf_treelang.reproduce.timing import record_call, timing_summary

    before, now = {"sweep_patience": 8}, {"sweep_patience": 16}
    record_call(tmp_path, 100.0, preset=before, status="stopped by SIGTERM", steps_ran=[], trained_runs=3)
    record_call(tmp_path, 40.0, preset=now, status="finished", steps_ran=["fig2a"], trained_runs=2)
    summary = timing_summary(tmp_path, now)
    assert (summary["wall_time_s"], summary["calls"]) == (140.0, 2)  # the earlier call trained runs reused now
    assert (summary["wall_time_s_these_values"], summary["calls_these_values"]) == (40.0, 1)
    assert timing_summary(tmp_path)["wall_time_s"] == 140.0 and "calls_these_values" not in timing_summary(tmp_path)
    assert timing_summary(tmp_path / "none", now) == {}
