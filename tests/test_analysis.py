"""The paper's analyses (hf_treelang.analysis) on tiny randomly initialised checkpoints: numbers and files."""

import json

import numpy as np
import pytest
import torch

from hf_treelang import BeliefPropagation, Grammar, TreeLangConfig, TreeLangForMaskedLM, TreeLangForSequenceClassification
from hf_treelang.analysis import attention, calibration, dynamics, probing, sample_complexity
from hf_treelang.analysis import compare_distributions, load_checkpoint
from hf_treelang.cli import run_command
from hf_treelang.core.sampling import sample_trees

DEPTH, Q = 3, 4


def _save(folder, head, filter_level=0, seed=0):
    torch.manual_seed(seed)
    config = TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH, filter_level=filter_level, hidden_size=32,
                                      num_hidden_layers=2, intermediate_size=64, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0)
    head(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    return {
        "mlm": _save(root / "mlm", TreeLangForMaskedLM),
        "root": _save(root / "root", TreeLangForSequenceClassification),
        "mlm_k2": _save(root / "mlm_k2", TreeLangForMaskedLM, filter_level=2, seed=1),
    }


def test_bp_compared_with_itself_has_zero_kl_and_perfect_agreement():
    grammar = Grammar.random(Q, 1.0, 0)
    leaves = sample_trees(grammar, 200, DEPTH, 0, sampling_seed=3).leaves.copy()
    leaves[:, 2] = Q  # mask one leaf
    marginals = BeliefPropagation(grammar, DEPTH, 0).leaf_marginals(leaves)[:, 2].numpy()
    comparison = compare_distributions(marginals, marginals)
    assert np.all(comparison.kl == 0.0)
    assert comparison.argmax_match.all()
    finite = np.isfinite(comparison.spearman)
    assert finite.any() and np.allclose(comparison.spearman[finite], 1.0)


@pytest.mark.parametrize("task, filter_level", [("mlm", 0), ("mlm", 2), ("root", 1)])
def test_a_predictor_that_outputs_bp_is_perfectly_calibrated(task, filter_level):
    grammar = Grammar.random(Q, 1.0, 0)
    bp = BeliefPropagation(grammar, DEPTH, filter_level, on_impossible="flag")

    def predict(ids, positions):
        if task == "root":
            return bp.root_marginals(ids).numpy()
        return bp.leaf_marginals(ids)[torch.arange(len(ids)), torch.as_tensor(positions)].numpy()

    result = calibration.calibrate_predictor(predict, grammar, task=task, depth=DEPTH, filter_level=filter_level,
                                             num_samples=300, seed=5)
    for name in ("in_sample", "uniform"):
        metrics = result.sets[name].metrics
        assert metrics["kl_mean"] < 1e-12
        assert metrics["argmax_match"] == 1.0
        assert metrics["model_accuracy"] == metrics["bp_accuracy"]
    if task == "root" and filter_level == 0:
        assert result.in_sample.metrics["bp_accuracy"] == 1.0  # the full hierarchy determines its root


def test_calibration_command_writes_scatter_and_sane_metrics(checkpoints, tmp_path, capsys):
    out = tmp_path / "calibration"
    assert run_command("calibration", [str(checkpoints["mlm"]), "--out", str(out), "--num-samples", "300"]) == 0
    printed = capsys.readouterr().out
    assert "None" not in printed and "uniform: " in printed and "accuracy n/a (no true symbol)" in printed
    assert (out / "calibration.png").stat().st_size > 1000
    report = json.loads((out / "calibration.json").read_text())
    assert report["task"] == "mlm" and report["depth"] == DEPTH
    for metrics in report["sets"].values():
        assert metrics["kl_mean"] > 0  # a random model is not BP
        assert 0.0 <= metrics["argmax_match"] <= 1.0
        assert -1.0 <= metrics["spearman_mean"] <= 1.0
        assert metrics["num_sequences"] == 300


def test_calibration_is_deterministic(checkpoints):
    first = calibration.calibrate(checkpoints["root"], num_samples=200, seed=9).to_dict()
    second = calibration.calibrate(checkpoints["root"], num_samples=200, seed=9).to_dict()
    assert first == second


def test_masked_symbol_calibration_of_a_root_classifier_is_refused_before_writing(checkpoints, tmp_path, capsys):
    out = tmp_path / "never"
    assert run_command("calibration", [str(checkpoints["root"]), "--out", str(out), "--task", "mlm"]) == 2
    error = capsys.readouterr().err
    assert "root classification" in error and "TreeLangForMaskedLM" in error
    assert not out.exists()


@pytest.mark.parametrize("kind", ["missing", "empty", "not_treelang"])
def test_every_analysis_names_what_it_expected_for_a_bad_folder(kind, tmp_path, capsys):
    folder = tmp_path / "ckpt"
    if kind != "missing":
        folder.mkdir()
    if kind == "not_treelang":
        (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    out = tmp_path / "out"
    for command in ("calibration", "attention", "probe"):
        assert run_command(command, [str(folder), "--out", str(out)]) == 2
        error = capsys.readouterr().err
        assert "TreeLang checkpoint folder" in error and str(folder) in error
    assert not out.exists()
    with pytest.raises(ValueError, match="config.json|does not exist|model_type"):
        load_checkpoint(folder)


@pytest.mark.parametrize("name, value", [("sigma", 2.0), ("grammar_seed", 7)])
def test_a_grammar_file_of_another_run_is_refused_naming_the_value(tmp_path, name, value):
    import hf_treelang
    from hf_treelang.core import Grammar

    config = hf_treelang.TreeLangConfig.from_data(num_symbols=3, depth=2, hidden_size=8, num_hidden_layers=1,
                                                  intermediate_size=8)
    hf_treelang.TreeLangForMaskedLM(config).save_pretrained(tmp_path / "run")
    grammar = {"num_symbols": 3, "sigma": 1.0, "grammar_seed": 0, name: value}
    Grammar.random(**grammar).save(tmp_path / "run" / "grammar.json")
    with pytest.raises(ValueError, match=f"grammar.json has {name}={value} but the model was trained on {name}="):
        load_checkpoint(tmp_path / "run")


def test_average_attention_rows_sum_to_one_with_one_row_per_model(checkpoints, tmp_path):
    out = tmp_path / "attention"
    code = run_command("attention", [str(checkpoints["mlm"]), str(checkpoints["mlm_k2"]), "--out", str(out),
                                     "--num-samples", "200"])
    assert code == 0
    assert (out / "attention.png").stat().st_size > 1000
    models = json.loads((out / "attention.json").read_text())["models"]
    assert [m["filter_level"] for m in models] == [0, 2]
    for model in models:
        maps = np.array(model["maps"])
        assert maps.shape == (2, 1, 2**DEPTH, 2**DEPTH)  # (layers, heads, L, L)
        assert np.all(maps >= 0)
        assert np.allclose(maps.sum(-1), 1.0, atol=1e-5)
        assert model["masked"] is True  # MLM inputs carry one mask, as in training


def test_attention_grid_rows_name_their_checkpoint(tmp_path):
    from hf_treelang.analysis.attention import AttentionResult
    from hf_treelang.plotting import pyplot

    maps = np.full((1, 1, 4, 4), 0.25)
    rows = [AttentionResult(maps, str(tmp_path / "run" / name), "mlm", 2, 0, 10, True)
            for name in ("checkpoint-100", "checkpoint-2000", "run")]
    assert [row.label for row in rows] == ["MLM, k_train=0, step 100", "MLM, k_train=0, step 2000",
                                           "MLM, k_train=0, run"]
    figure = attention.plot_attention(rows)
    try:
        assert [figure.axes[i].get_ylabel().splitlines()[0] for i in range(3)] == [row.label for row in rows]
    finally:
        pyplot().close(figure)


def test_probe_reads_the_leaf_symbol_off_the_embedding_and_reports_probabilities(checkpoints, tmp_path):
    result = probing.probe(checkpoints["mlm"], levels=[0, 2, 3], num_train=256, num_test=128, epochs=8,
                           batch_size=32, learning_rate=3e-3, seed=1, progress=False)
    assert result.accuracy.shape == (3, 3)  # (embedding + 2 layers, levels)
    assert np.all((result.accuracy >= 0) & (result.accuracy <= 1))
    assert result.accuracy[0, 2] > 0.95  # level ℓ is the token itself: its embedding identifies it
    assert np.allclose(result.bp_accuracy[2], 1.0)  # an observed leaf is known exactly
    paths = probing.write_outputs(result, tmp_path)
    saved = json.loads(paths["json"].read_text())
    assert saved["levels"] == [0, 2, 3] and np.array(saved["accuracy"]).shape == (3, 3)
    assert paths["figure"].stat().st_size > 1000


def test_probe_on_first_and_last_positions_writes_its_own_files(checkpoints, tmp_path):
    code = run_command("probe", [str(checkpoints["mlm"]), "--out", str(tmp_path), "--positions", "ends",
                                 "--num-train", "64", "--num-test", "32", "--epochs", "1"])
    assert code == 0
    saved = json.loads((tmp_path / "probe_ends.json").read_text())
    assert saved["positions"] == "ends" and saved["levels"] == [0, 1, 2]


def test_probe_of_a_causal_run_says_probes_need_an_mlm_or_root_run(tmp_path, capsys):
    from hf_treelang import TreeLangForCausalLM

    causal = _save(tmp_path / "causal", TreeLangForCausalLM)
    capsys.readouterr()  # save_pretrained's progress bars
    assert run_command("probe", [str(causal), "--out", str(tmp_path / "never")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "causal language model" in error and "probes need an MLM" in error, error
    assert "beginning-of-sequence" not in error and not (tmp_path / "never").exists()


def test_probe_draws_its_progress_bars_only_on_a_terminal(checkpoints, tmp_path, capsys):
    arguments = [str(checkpoints["mlm"]), "--out", str(tmp_path), "--levels", "0", "--num-train", "8",
                 "--num-validation", "8", "--num-test", "8", "--epochs", "2"]
    assert run_command("probe", arguments) == 0
    assert "probe epochs" not in capsys.readouterr().err  # stderr is captured here: not a terminal


def test_probe_levels_the_data_do_not_have_are_refused(checkpoints, tmp_path, capsys):
    with pytest.raises(ValueError, match=r"level 4 is outside \[0, depth=3\]"):
        probing.probe(checkpoints["mlm"], levels=[4], num_train=8, num_test=8, epochs=1)
    # data of filter level 2 have no level 1; the model trained on them probes its own data by default
    assert run_command("probe", [str(checkpoints["mlm_k2"]), "--out", str(tmp_path / "x"), "--levels", "1"]) == 2
    assert "no level 1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert probing.check_levels(None, DEPTH, 2) == [0, 2]


def test_ancestor_labels_follow_the_tree():
    trees = sample_trees(Grammar.random(Q, 1.0, 0), 50, DEPTH, 0, sampling_seed=2)
    labels = probing.probe_targets(trees, [0, 1, DEPTH])  # (n, L, 3)
    assert np.array_equal(labels[..., 0], np.repeat(trees.roots[:, None], 2**DEPTH, 1))
    assert np.array_equal(labels[..., 1][:, : 2 ** (DEPTH - 1)], np.repeat(trees.levels[1][:, :1], 4, 1))
    assert np.array_equal(labels[..., 2], trees.leaves)


def _history(prefix=""):
    """Synthetic BP-KL log: the model is closest to BP_2, then BP_1, then BP_0, as in Fig. 1c/d."""
    centre = {2: 0, 1: 1, 0: 2}
    entries = []
    for t in range(3):
        entry = {"step": 10**t, "epoch": float(t)}
        for k in range(3):
            entry[f"{prefix}kl_bp_k{k}"] = 0.1 + abs(centre[k] - t)
            entry[f"{prefix}acc_ktest{k}"] = 0.3 + 0.2 * t
            entry[f"{prefix}bp_acc_ktest{k}"] = 0.9
            entry[f"{prefix}match_bp_k{k}"] = 1.0 / (1.0 + abs(centre[k] - t))
        entries.append(entry)
    return entries


def test_dynamics_finds_the_sequential_alignment_and_writes_curves(tmp_path):
    (tmp_path / "run").mkdir()
    state = {"log_history": [{"step": 1, "loss": 2.0}, *_history("eval_")]}
    (tmp_path / "run" / "trainer_state.json").write_text(json.dumps(state))
    assert run_command("dynamics", [str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 0
    saved = json.loads((tmp_path / "out" / "dynamics.json").read_text())
    assert saved["alignment_sequence"] == [2, 1, 0]
    assert saved["steps"] == [1, 10, 100]
    assert saved["bp_accuracy_ktest"] == {"k0": 0.9, "k1": 0.9, "k2": 0.9}
    assert (tmp_path / "out" / "dynamics.png").stat().st_size > 1000


def test_dynamics_refuses_a_folder_without_history(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "other.json").write_text(json.dumps({"loss": 1}))
    assert run_command("dynamics", [str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 2
    assert "kl_bp_k" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_dynamics_reads_the_callback_history_file_of_a_run_folder(tmp_path):
    (tmp_path / "eval_history.json").write_text(json.dumps({"history": _history("eval_")}))
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": []}))
    result = dynamics.learning_dynamics(tmp_path)
    assert result.source.endswith("eval_history.json")
    assert sorted(result.kl) == sorted(result.match) == [0, 1, 2]
    assert result.closest_bp == [2, 1, 0]
    assert list(result.match[0]) == [1 / 3, 1 / 2, 1.0]


def test_sample_complexity_runs_three_arms_per_size_from_the_mlm_checkpoint(checkpoints, tmp_path):
    specs = []

    def fake_train(run):
        specs.append(run)
        return {"accuracy": min(1.0, run.data_args.num_train / 512), "bp_accuracy": 1.0}

    result = sample_complexity.sample_complexity_sweep(checkpoints["mlm"], [64, 256], tmp_path / "runs",
                                                       train=fake_train, progress=False)
    assert [(r.data_args.num_train, r.task, r.model_args.freeze_encoder) for r in specs] == [
        (64, "root", False), (64, "finetune", True), (64, "finetune", False), (256, "root", False),
        (256, "finetune", True), (256, "finetune", False)]
    assert all(r.data_args.depth == DEPTH and r.data_args.test_levels() == [0] for r in specs)
    assert result.accuracy == {"scratch": [0.125, 0.5], "frozen": [0.125, 0.5], "finetuned": [0.125, 0.5]}
    paths = sample_complexity.write_outputs(result, tmp_path)
    assert json.loads(paths["json"].read_text())["sizes"] == [64, 256]
    assert paths["figure"].stat().st_size > 1000


def test_sample_complexity_needs_an_mlm_checkpoint_and_sizes(checkpoints, tmp_path, capsys):
    assert run_command("sample-complexity", [str(checkpoints["root"]), "--out", str(tmp_path / "x")]) == 2
    assert "TreeLangForMaskedLM" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="sizes"):
        sample_complexity.sample_complexity_sweep(checkpoints["mlm"], [], tmp_path / "y", train=lambda s: {})


def test_attention_maps_have_position_ticks_a_colour_bar_each_and_faint_block_boundaries(checkpoints):
    from hf_treelang.plotting import pyplot

    result = attention.average_attention(checkpoints["mlm"], num_samples=50)
    figure = attention.plot_attention([result])
    try:
        maps = [ax for ax in figure.axes if ax.images]
        assert len(maps) == 2 and len(figure.axes) == 4  # one colour bar per layer's map
        for ax in maps:
            assert list(ax.get_xticks()) == list(range(2**DEPTH)) == list(ax.get_yticks())
            vertical = sorted(line.get_xdata()[0] for line in ax.lines if line.get_xdata()[0] == line.get_xdata()[1])
            assert vertical == [1.5, 3.5, 5.5]  # level 1 (between the halves), then level 2 (quarters)
            assert all(line.get_alpha() <= 0.5 for line in ax.lines)
    finally:
        pyplot().close(figure)


def test_dynamics_draws_the_paper_colours_and_states_the_sizes_of_the_run(tmp_path):
    from matplotlib.colors import to_rgba

    from hf_treelang.plotting import level_color, pyplot

    (tmp_path / "eval_history.json").write_text(json.dumps({"history": _history("eval_")}))
    (tmp_path / "metrics.json").write_text(json.dumps({"num_test": 256, "bp_reference_size": {"0": 2000, "1": 2000,
                                                                                            "2": 2000}}))
    result = dynamics.learning_dynamics(tmp_path)
    assert result.num_test == 256 and result.reference_sizes == {0: 2000, 1: 2000, 2: 2000}
    figure = dynamics.plot_dynamics(result)
    try:
        kl, accuracy = figure.axes[:2]
        assert [to_rgba(line.get_color()) for line in kl.lines] == [to_rgba(level_color(k, 2)) for k in range(3)]
        assert "model on 256, BP on 2000" in accuracy.get_title()
        # curves that coincide stay visible: BP_0 above BP_1 above BP_2, each with its own marker
        assert [line.get_zorder() for line in kl.lines] == sorted((line.get_zorder() for line in kl.lines),
                                                                  reverse=True)
        assert len({line.get_marker() for line in kl.lines}) == 3
    finally:
        pyplot().close(figure)


def _causal_history(num_leaves=8):
    """Synthetic causal log (ℓ = 3): position i's KL halves by step 10 for even i, by step 100 for odd i but 7."""
    entries = _history("eval_")
    for t, entry in enumerate(entries):
        for i in range(num_leaves):
            halved = t >= (1 if i % 2 == 0 else 2) and i != num_leaves - 1
            entry[f"eval_kl_position{i}"] = 1.0 + i if not halved else (1.0 + i) / 4
    return entries


def test_dynamics_of_a_causal_run_draws_the_kl_per_position_and_writes_the_matrix(tmp_path, capsys):
    (tmp_path / "eval_history.json").write_text(json.dumps({"history": _causal_history()}))
    assert run_command("dynamics", [str(tmp_path / "eval_history.json"), "--out", str(tmp_path / "out")]) == 0
    saved = json.loads((tmp_path / "out" / "dynamics.json").read_text())
    assert np.array(saved["kl_position"]).shape == (3, 8)
    assert saved["kl_position"][0] == [1.0 + i for i in range(8)] and saved["kl_position"][2][0] == 0.25
    assert saved["half_kl_step_per_position"] == [10, 100, 10, 100, 10, 100, 10, None]
    assert (tmp_path / "out" / "dynamics_positions.png").stat().st_size > 1000
    out = capsys.readouterr().out
    assert "first at step 10 (positions 0,2,4,6), last at step 100 (positions 1,3,5); 1 of 8 positions never" in out


def test_the_position_heat_map_marks_the_block_boundaries_of_the_tree(tmp_path):
    from hf_treelang.plotting import pyplot

    (tmp_path / "eval_history.json").write_text(json.dumps({"history": _causal_history()}))
    figure = dynamics.plot_positions(dynamics.learning_dynamics(tmp_path / "eval_history.json"))
    try:
        ax = figure.axes[0]
        assert ax.images[0].get_array().shape == (3, 8)
        vertical = sorted(line.get_xdata()[0] for line in ax.lines)
        assert vertical == [1.5, 3.5, 5.5]  # ℓ = 3: level 1 (the halves), level 2 (the quarters); no horizontal line
        assert [label.get_text() for label in ax.get_yticklabels()] == ["1", "10", "100"]
    finally:
        pyplot().close(figure)


def test_dynamics_of_a_run_without_positions_draws_no_heat_map(tmp_path):
    (tmp_path / "eval_history.json").write_text(json.dumps({"history": _history("eval_")}))
    result = dynamics.learning_dynamics(tmp_path / "eval_history.json")
    assert result.kl_position is None
    paths = dynamics.write_outputs(result, tmp_path / "out")
    assert "positions" not in paths and not (tmp_path / "out" / "dynamics_positions.png").exists()
    saved = json.loads(paths["json"].read_text())
    assert saved["kl_position"] is None and saved["half_kl_step_per_position"] is None


# ---------------------------------------------------------------- bounded analyses: memory and time before any work


@pytest.fixture
def small_machine(monkeypatch):
    """A stand-in machine with 2 GB of available memory (the analyses' budget: 80% of it)."""
    from hf_treelang.core import resources

    monkeypatch.setattr(resources, "available_memory", lambda: 2 * 10**9)
    return resources


def _never(*args, **kwargs):
    pytest.fail("the command started its work")


@pytest.mark.parametrize("command, module", [("attention", attention), ("calibration", calibration)])
def test_an_analysis_over_the_machines_memory_is_refused_before_any_work(checkpoints, small_machine, monkeypatch,
                                                                         tmp_path, capsys, command, module):
    monkeypatch.setattr(module, "sample_trees", _never)
    out = tmp_path / "never"
    assert run_command(command, [str(checkpoints["mlm"]), "--out", str(out), "--num-samples", "100000000"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and error.startswith(f"hf-treelang {command}: error: --num-samples 100000000 needs about")
    assert "1.6 GB (80% of the memory available)" in error
    largest = int(error.rsplit(" ", 1)[-1])
    from hf_treelang.core import resources

    config = load_checkpoint(checkpoints["mlm"]).config
    peak = getattr(resources, f"{command}_bytes")
    batch = 512 if command == "attention" else 1024
    assert peak(largest, batch, config) <= small_machine.memory_budget() < peak(largest + 1, batch, config)
    assert not out.exists()


def test_the_template_comparison_checks_every_checkpoints_memory_before_running_one(checkpoints, small_machine,
                                                                                   monkeypatch):
    monkeypatch.setattr(attention, "sample_trees", _never)
    with pytest.raises(ValueError, match="--num-samples 100000000 needs about"):
        attention.attention_grid([checkpoints["mlm"], checkpoints["root"]], num_samples=10**8)


def test_probe_over_the_machines_memory_is_refused_naming_the_largest_size(checkpoints, small_machine, monkeypatch,
                                                                          tmp_path, capsys):
    monkeypatch.setattr(probing, "sample_trees", _never)
    assert run_command("probe", [str(checkpoints["mlm"]), "--out", str(tmp_path / "never"), "--num-train",
                                 "100000000"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "error: --num-train 100000000 needs about" in error
    assert "the largest --num-train that fits is" in error and not (tmp_path / "never").exists()


def test_probe_estimated_over_its_time_bound_is_refused_before_training(checkpoints, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(probing, "_fit", _never)
    args = [str(checkpoints["mlm"]), "--out", str(tmp_path / "never"), "--num-train", "64", "--num-validation",
            "32", "--num-test", "32", "--epochs", "100000000"]
    assert run_command("probe", args) == 2
    captured = capsys.readouterr()
    assert "estimated time: about" in captured.out  # the estimate is printed first, as before
    error = captured.err.strip()
    assert "\n" not in error and "error: --epochs 100000000 is estimated to take about" in error
    assert "over the 24-hour bound (--max-hours)" in error and "or raise --max-hours" in error
    largest = int(error.split("the largest --epochs within it is ")[1].split(",")[0])
    assert 1 <= largest < 100000000 and not (tmp_path / "never").exists()
    assert run_command("probe", args[:-1] + ["1", "--max-hours", "0"]) == 2
    assert "`max_hours` must be a real number > 0, got 0.0" in capsys.readouterr().err


def test_the_memory_check_names_what_fits_when_one_flag_is_not_enough(small_machine):
    budget = small_machine.memory_budget()

    def peak(sizes):  # a batch term that alone exceeds the budget at any batch, and a data term
        return sizes["--batch"] * budget + sizes["--data"] * 1000

    with pytest.raises(ValueError, match=r"^--batch 8 needs about .*: lower the other sizes$"):
        small_machine.check_memory({"--batch": 8, "--data": 10}, peak, what="a test")
    with pytest.raises(ValueError, match=r"^--data 10000000 needs about .*: the largest --data that fits is 1600$"):
        small_machine.check_memory({"--data": 10**7}, lambda s: s["--data"] * 10**6, what="a test")
    small_machine.check_memory({"--data": 1600}, lambda s: s["--data"] * 10**6, what="a test")  # fits: no error
    with pytest.raises(ValueError, match=r"^--data 10000000 needs .*: the largest --batch that fits with --data 1 "
                                         r"is 1$"):
        small_machine.check_memory({"--batch": 2, "--data": 10**7},  # no --data fits at --batch 2: both are lowered
                                   lambda s: s["--batch"] * 8 * 10**8 + s["--data"] * 10**6, what="a test")


def test_the_memory_estimates_count_the_nodes_of_trees_of_any_arity():
    from hf_treelang.core import resources

    assert [resources.num_nodes(depth, 2) for depth in (0, 1, 4)] == [1, 3, 31]
    assert resources.num_nodes(2, 3) == 1 + 3 + 9
    binary = resources.model_sizes(TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH), DEPTH, Q)
    ternary = resources.model_sizes(TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH), DEPTH, Q, arity=3)
    assert binary.arity == 2 and ternary.arity == 3
    assert resources.calibration_bytes(10, 10, ternary) > resources.calibration_bytes(10, 10, binary)
