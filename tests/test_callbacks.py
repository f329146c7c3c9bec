"""The BP-KL callback, the log-spaced schedule and the JSON history (hf_treelang/callbacks.py)."""

import glob
import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import Trainer

from hf_treelang import BeliefPropagation, Grammar, TreeLangConfig, TreeLangForSequenceClassification, sample_trees
from hf_treelang.core.next_leaf import next_leaf_distributions
from hf_treelang.train.callbacks import (
    BPKLCallback,
    LogSpacedScheduleCallback,
    MetricsHistoryCallback,
    evaluation_history,
    log_spaced_steps,
)
from hf_treelang.train.collators import RootClassificationCollator
from hf_treelang.train.arguments import TreeLangTrainingArguments

DEPTH, Q = 3, 3


class OracleModel(torch.nn.Module):
    """Outputs the log of BP_k's marginals: the root (task "root") or every leaf (task "mlm") as logits."""

    def __init__(self, grammar, depth, filter_level, task):
        super().__init__()
        self.bp = BeliefPropagation(grammar, depth, filter_level)
        self.task = task
        self.anchor = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        marginals = self.bp.root_marginals(input_ids) if self.task == "root" else self.bp.leaf_marginals(input_ids)
        return SimpleNamespace(logits=torch.log(marginals))


class NextLeafBPModel(torch.nn.Module):
    """A causal 'model' whose logits are BP_k's next-leaf distributions: row i reads BOS and x_0 .. x_{i-1} only."""

    def __init__(self, grammar, depth, filter_level):
        super().__init__()
        self.bp = BeliefPropagation(grammar, depth, filter_level)
        self.anchor = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        leaves = torch.cat([input_ids[:, 1:], torch.zeros_like(input_ids[:, :1])], 1)  # (b, L): BOS dropped
        return SimpleNamespace(logits=torch.log(next_leaf_distributions(self.bp, leaves).probabilities))


class Softened(torch.nn.Module):
    """``model``'s logits times ``factor``: its distributions flattened towards uniform."""

    def __init__(self, model, factor):
        super().__init__()
        self.model, self.factor = model, factor

    def forward(self, input_ids):
        return SimpleNamespace(logits=self.factor * self.model(input_ids).logits)


def _callback(task, k_train, grammar):
    in_sample = sample_trees(grammar, 64, DEPTH, k_train, sampling_seed=1)
    tests = {k: (lambda s: (s.leaves, s.roots))(sample_trees(grammar, 48, DEPTH, k, sampling_seed=2)) for k in (0, 2, 3)}
    return BPKLCallback(grammar, DEPTH, k_train, task, in_sample.leaves, tests, seed=0, batch_size=20)


@pytest.mark.parametrize("task", ["root", "mlm"])
def test_matched_bp_oracle_has_zero_kl_and_bp_accuracy(task):
    grammar = Grammar.random(Q, 1.0, 0)
    k_train = 1
    callback = _callback(task, k_train, grammar)
    values = callback.compute(OracleModel(grammar, DEPTH, k_train, task))
    assert values[f"eval_kl_bp_k{k_train}"] == pytest.approx(0.0, abs=1e-12)
    assert values["eval_match_bp"] == 1.0
    assert all(values[f"eval_kl_bp_k{k}"] > 1e-6 for k in range(DEPTH + 1) if k != k_train)
    for k in (0, 2, 3):
        assert values[f"eval_acc_ktest{k}"] == pytest.approx(values[f"eval_bp_acc_ktest{k}"])


def test_the_kl_standard_error_is_the_spread_of_the_per_sequence_kl_over_root_n():
    grammar = Grammar.random(Q, 1.0, 0)
    callback = _callback("root", 1, grammar)
    model = OracleModel(grammar, DEPTH, 3, "root")  # BP_3 as the model: a KL to BP_0 that varies by sequence
    values = callback.compute(model)
    targets = callback.prepare()
    log_model = callback.model_log_probabilities(model, targets.in_sample.inputs, targets.in_sample.positions)
    p = targets.marginals[0]  # (n, q)
    per_sequence = (p * (torch.log(p.clamp_min(1e-300)) - log_model)).sum(-1)  # (n,)
    expected = float(per_sequence.std() / per_sequence.numel() ** 0.5)
    assert values["eval_kl_se_bp_k0"] == pytest.approx(expected, rel=1e-9) and expected > 0
    assert values["eval_kl_bp_k0"] == pytest.approx(float(per_sequence.mean()), rel=1e-9)
    assert values["eval_kl_se_bp_k3"] == pytest.approx(0.0, abs=1e-12)  # the model is BP_3: zero on every sequence


@pytest.mark.parametrize("task", ["root", "clm"])
def test_the_gap_standard_error_is_the_spread_of_the_paired_per_sequence_difference_to_the_closest_bp(task):
    grammar = Grammar.random(Q, 1.0, 0)
    callback = _callback(task, 1, grammar)
    exact = OracleModel(grammar, DEPTH, 2, "root") if task == "root" else NextLeafBPModel(grammar, DEPTH, 2)
    model = Softened(exact, 0.7)  # near BP_2 but at none: every level's KL varies by sequence
    values = callback.compute(model)
    targets = callback.prepare()
    log_model = callback.model_log_probabilities(model, targets.in_sample.inputs, targets.in_sample.positions)
    per_sequence = {}
    for k, p in targets.marginals.items():  # (n, [2**l,] q)
        kl = (p * (torch.log(p.clamp_min(1e-300)) - log_model)).sum(-1)
        per_sequence[k] = kl.reshape(kl.shape[0], -1).mean(-1)  # (n,)
    closest = min(per_sequence, key=lambda k: float(per_sequence[k].mean()))
    assert closest == 2 and values[f"eval_kl_gap_se_bp_k{closest}"] == 0.0 and values["eval_kl_bp_k2"] > 1e-3
    for k in range(DEPTH + 1):
        gap = per_sequence[k] - per_sequence[closest]
        assert values[f"eval_kl_gap_se_bp_k{k}"] == pytest.approx(float(gap.std() / gap.numel() ** 0.5), rel=1e-9)
    # paired, not the two levels' own errors combined (the same sequences behind both means)
    spread = (values["eval_kl_se_bp_k1"] ** 2 + values["eval_kl_se_bp_k2"] ** 2) ** 0.5
    assert values["eval_kl_gap_se_bp_k1"] > 0 and abs(values["eval_kl_gap_se_bp_k1"] / spread - 1) > 0.01


def test_bp_targets_are_computed_once_and_reused():
    grammar = Grammar.random(Q, 1.0, 0)
    callback = _callback("mlm", 0, grammar)
    targets = callback.prepare()
    assert callback.prepare() is targets
    assert set(targets.marginals) == set(range(DEPTH + 1))
    masked = targets.in_sample.inputs == Q
    assert masked.sum(-1).eq(1).all()
    assert torch.equal(masked.float().argmax(-1), targets.in_sample.positions)


def test_callback_rejects_out_of_range_levels():
    grammar = Grammar.random(Q, 1.0, 0)
    leaves = sample_trees(grammar, 4, DEPTH, 0).leaves
    with pytest.raises(ValueError, match="k_train"):
        BPKLCallback(grammar, DEPTH, DEPTH + 1, "root", leaves)
    with pytest.raises(ValueError, match="k_test"):
        BPKLCallback(grammar, DEPTH, 0, "root", leaves, {DEPTH + 1: (leaves, np.zeros(4))})
    with pytest.raises(ValueError, match="task"):
        BPKLCallback(grammar, DEPTH, 0, "parse", leaves)


def test_log_spaced_steps_are_increasing_geometric_and_end_at_max():
    steps = log_spaced_steps(1000, 10)
    assert steps[0] == 1 and steps[-1] == 1000
    assert steps == sorted(set(steps))
    ratios = np.diff(np.log(steps))
    assert ratios.max() < 2 * np.log(1000) / 9
    assert log_spaced_steps(3, 10) == [1, 2, 3]


def test_evaluation_history_merges_entries_of_one_step():
    log = [{"loss": 1.0, "step": 1}, {"eval_loss": 0.5, "step": 2}, {"eval_kl_bp_k0": 0.1, "step": 2}]
    assert evaluation_history(log) == [{"eval_loss": 0.5, "eval_kl_bp_k0": 0.1, "step": 2}]


def test_callback_keys_reach_log_history_json_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    grammar = Grammar.random(Q, 1.0, 0)
    train = sample_trees(grammar, 64, DEPTH, 0, sampling_seed=3)
    validation = sample_trees(grammar, 24, DEPTH, 0, sampling_seed=4)
    to_rows = lambda s: [{"input_ids": x.tolist(), "labels": int(r)} for x, r in zip(s.leaves, s.roots)]
    config = TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH, hidden_size=16, num_hidden_layers=1,
                                      intermediate_size=16)
    torch.manual_seed(0)
    args = TreeLangTrainingArguments(
        output_dir=str(tmp_path), max_steps=6, per_device_train_batch_size=16, report_to="tensorboard",
        num_evaluations=0, disable_tqdm=True, logging_steps=3,
    )
    trainer = Trainer(
        model=TreeLangForSequenceClassification(config), args=args, train_dataset=to_rows(train),
        eval_dataset=to_rows(validation), data_collator=RootClassificationCollator(),
        callbacks=[LogSpacedScheduleCallback(num_evaluations=2, num_checkpoints=0),
                   MetricsHistoryCallback(tmp_path / "history.json")],
    )
    for callback in trainer.callback_handler.callbacks:
        if type(callback).__name__ == "TensorBoardCallback":
            callback.logging_dir = str(tmp_path / "tb")
    tests = {2: (validation.leaves, validation.roots)}
    BPKLCallback(grammar, DEPTH, 0, "root", validation.leaves, tests).attach(trainer)
    trainer.train()
    returned = trainer.evaluate()
    keys = [f"eval_kl_bp_k{k}" for k in range(DEPTH + 1)] + ["eval_acc_ktest2", "eval_bp_acc_ktest2",
                                                                "eval_match_bp", "eval_spearman_bp"]
    assert all(key in returned for key in keys)
    logged_steps = sorted({e["step"] for e in trainer.state.log_history if "eval_kl_bp_k0" in e})
    assert logged_steps == [1, 6]
    history = json.loads((tmp_path / "history.json").read_text())["history"]
    assert [e["step"] for e in history] == [1, 6]
    assert all(key in history[-1] for key in keys + ["eval_loss"])
    events = EventAccumulator(glob.glob(str(tmp_path / "tb" / "events.*"))[0])
    events.Reload()
    assert {"eval/kl_bp_k0", "eval/acc_ktest2", "eval/bp_acc_ktest2"} <= set(events.Tags()["scalars"])
    assert os.path.isfile(tmp_path / "history.json")


# ---------------------------------------------------------------- BP's reference accuracy


def _evaluation_sets(grammar, n, levels, seed=7):
    from hf_treelang.train.data import EvaluationSet

    sets = {}
    for k in levels:
        trees = sample_trees(grammar, n, DEPTH, k, sampling_seed=seed + k)
        sets[k] = EvaluationSet(trees.leaves, trees.roots, seed + k)
    return sets


@pytest.mark.parametrize("task", ["root", "mlm"])
def test_bp_reference_accuracy_comes_from_the_split_stream_continuing_the_test_set(task):
    from hf_treelang.core.oracle import bp_accuracy, task_inputs

    grammar = Grammar.random(Q, 1.0, 0)
    tests = _evaluation_sets(grammar, 40, (0, 3))
    callback = BPKLCallback(grammar, DEPTH, 1, task, tests[0], tests, reference_size=300)
    targets = callback.prepare()
    matched = BeliefPropagation(grammar, DEPTH, 1)
    for k in (0, 3):
        assert targets.reference_sizes[k] == 300
        assert len(targets.tests[k]) == 40  # the network is still evaluated on the run's own test set
        trees = sample_trees(grammar, 300, DEPTH, k, sampling_seed=7 + k)
        expected = task_inputs(task, trees.leaves, trees.roots, mask_token_id=Q, sampling_seed=7 + k)
        assert targets.bp_accuracy[k] == bp_accuracy(matched, expected)
        reference = callback.reference(k, targets.tests[k], 7 + k)
        assert torch.equal(reference.inputs[:40], targets.tests[k].inputs)  # the test set is the prefix
        if task == "mlm":
            assert torch.equal(reference.positions[:40], targets.tests[k].positions)


def test_bp_reference_is_the_test_set_without_reference_size_or_when_the_test_set_is_larger():
    grammar = Grammar.random(Q, 1.0, 0)
    tests = _evaluation_sets(grammar, 50, (2,))
    plain = BPKLCallback(grammar, DEPTH, 0, "root", tests[2], tests).prepare()
    larger = BPKLCallback(grammar, DEPTH, 0, "root", tests[2], tests, reference_size=20).prepare()
    assert plain.reference_sizes == larger.reference_sizes == {2: 50}
    assert plain.bp_accuracy == larger.bp_accuracy


def test_reference_count_is_at_least_the_asked_size_and_bounded_in_leaves_for_deep_trees():
    from hf_treelang.train.callbacks import REFERENCE_SIZE, reference_count

    assert REFERENCE_SIZE >= 2000
    assert reference_count(256, 4, REFERENCE_SIZE) == REFERENCE_SIZE
    assert reference_count(10_000, 4, REFERENCE_SIZE) == 10_000
    assert reference_count(256, 4, None) == 256
    assert reference_count(10, 16, 2000) == 2**24 // 2**16  # 256 sequences of 65536 leaves
    assert reference_count(1000, 16, 2000) == 1000


def test_callback_rejects_a_reference_size_below_one_naming_it():
    grammar = Grammar.random(Q, 1.0, 0)
    leaves = sample_trees(grammar, 4, DEPTH, 0).leaves
    with pytest.raises(ValueError, match="reference_size.*got 0"):
        BPKLCallback(grammar, DEPTH, 0, "root", leaves, reference_size=0)


# ---------------------------------------------------------------- the console


def test_evaluation_line_gives_loss_closest_bp_kl_and_accuracies_in_one_line():
    from hf_treelang.train.callbacks import evaluation_line

    metrics = {"eval_loss": 0.4123, "eval_kl_bp_k0": 0.31, "eval_kl_bp_k1": 0.12, "eval_kl_bp_k2": 0.05,
               "eval_acc_ktest0": 0.81, "eval_bp_acc_ktest0": 0.84, "eval_acc_ktest2": 0.9,
               "eval_bp_acc_ktest2": 0.91, "eval_spearman_bp": 0.5, "epoch": 1.0}
    assert evaluation_line(metrics, step=1200, k_train=0) == (
        "step 1200 · loss 0.412 · closest BP_2 · KL BP_0..2 0.310 0.120 0.050 · "
        "acc k_test 0,2 (model/BP_0) 0.810/0.840 0.900/0.910"
    )


def test_evaluation_line_skips_nan_for_the_closest_bp_and_shows_it_as_n_a():
    from hf_treelang.train.callbacks import evaluation_line

    metrics = {"eval_kl_bp_k0": float("nan"), "eval_kl_bp_k1": 0.00012, "eval_acc_ktest1": 0.5}
    line = evaluation_line(metrics, step=3)
    assert line == "step 3 · closest BP_1 · KL BP_0..1 n/a 1.2e-04 · acc k_test 1 (model/BP) 0.500/n/a"


def test_console_prints_one_line_per_evaluation_and_no_raw_dicts(tmp_path, capsys):
    import io

    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from hf_treelang.train.callbacks import ConsoleCallback

    grammar = Grammar.random(Q, 1.0, 0)
    train = sample_trees(grammar, 48, DEPTH, 0, sampling_seed=3)
    validation = sample_trees(grammar, 16, DEPTH, 0, sampling_seed=4)
    to_rows = lambda s: [{"input_ids": x.tolist(), "labels": int(r)} for x, r in zip(s.leaves, s.roots)]
    config = TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH, hidden_size=8, num_hidden_layers=1,
                                      intermediate_size=8)
    torch.manual_seed(0)
    args = TreeLangTrainingArguments(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=16,
                                     report_to="none", num_evaluations=0, disable_tqdm=False, logging_steps=2,
                                     save_strategy="no")
    trainer = Trainer(model=TreeLangForSequenceClassification(config), args=args, train_dataset=to_rows(train),
                      eval_dataset=to_rows(validation), data_collator=RootClassificationCollator(),
                      callbacks=[LogSpacedScheduleCallback(num_evaluations=2, num_checkpoints=0)])
    BPKLCallback(grammar, DEPTH, 0, "root", validation.leaves, {2: (validation.leaves, validation.roots)}).attach(trainer)
    stream = io.StringIO()  # not a terminal: no progress bar although disable_tqdm is False
    console = ConsoleCallback(0, stream=stream).attach(trainer)
    callbacks = trainer.callback_handler.callbacks
    assert not any(isinstance(c, (PrinterCallback, ProgressCallback)) and c is not console for c in callbacks)
    trainer.train()
    text = stream.getvalue()
    assert "{" not in text and "\r" not in text and "\x1b" not in text
    evaluations = [line for line in text.splitlines() if "closest BP_" in line]
    assert [line.split(" · ")[0] for line in evaluations] == ["step 1", "step 4"]
    assert all("acc k_test 2 (model/BP_0)" in line and " loss " in line for line in evaluations)
    assert "step 2 · epoch 0.67 · train loss " in text
    assert capsys.readouterr().out == ""  # nothing else printed


def test_progress_bars_are_turned_off_only_off_a_terminal():
    import io

    import datasets

    from hf_treelang.progress import quiet_progress_bars_off_terminal

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    import transformers.utils.logging as transformers_logging

    was_enabled = datasets.is_progress_bar_enabled(), transformers_logging.is_progress_bar_enabled()
    try:
        datasets.enable_progress_bars()
        transformers_logging.enable_progress_bar()
        assert quiet_progress_bars_off_terminal(Terminal()) is False
        assert datasets.is_progress_bar_enabled() and transformers_logging.is_progress_bar_enabled()
        assert quiet_progress_bars_off_terminal(io.StringIO()) is True
        assert not datasets.is_progress_bar_enabled() and not transformers_logging.is_progress_bar_enabled()
    finally:
        datasets.enable_progress_bars() if was_enabled[0] else datasets.disable_progress_bars()
        transformers_logging.enable_progress_bar() if was_enabled[1] else transformers_logging.disable_progress_bar()


# ---------------------------------------------------------------- what a run writes (hf_treelang/train/outputs.py)


def _history(depth=4, levels=(0, 2, 4)):
    history = []
    for step in (0, 10, 100):
        entry = {"step": step, "eval_loss": 1.5 / (1 + step), "eval_match_bp": 0.5, "eval_spearman_bp": 0.4}
        entry.update({f"eval_kl_bp_k{k}": 0.1 * (k + 1) / (1 + step) for k in range(depth + 1)})
        entry.update({f"eval_acc_ktest{k}": 0.3 + 0.001 * step for k in levels})
        entry.update({f"eval_bp_acc_ktest{k}": 0.7 for k in levels})
        history.append(entry)
    return history


def test_curves_use_the_paper_colours_panel_titles_and_separate_axes_for_loss_and_agreement(tmp_path, monkeypatch):
    from matplotlib.colors import to_rgba

    from hf_treelang.plotting import level_color, pyplot
    from hf_treelang.train import outputs

    figures = []
    monkeypatch.setattr(outputs, "save_figure", lambda fig, path, **options: figures.append(fig))
    outputs.plot_curves(_history(), 4, 0, [0, 2, 4], tmp_path / "curves.png", tmp_path / "kl_curves.png",
                        num_eval=64, num_test=256, reference_sizes={0: 2000, 2: 2000, 4: 2000})
    kl_figure, curves = figures
    try:
        for figure_axes in (kl_figure.axes[0], curves.axes[0]):
            assert [to_rgba(line.get_color()) for line in figure_axes.lines] == [
                to_rgba(level_color(k, 4)) for k in range(5)]
        assert to_rgba(level_color(1, 4))[1] > to_rgba(level_color(4, 4))[1]  # k = 1 light green, k = ℓ purple
        kl, accuracy, loss, agreement = curves.axes
        assert all(ax.get_title() for ax in curves.axes)
        assert [to_rgba(line.get_color()) for line in accuracy.lines[::2]] == [
            to_rgba(level_color(k, 4)) for k in (0, 2, 4)]  # each model curve, then its dashed BP line
        assert "256" in accuracy.get_title() and "2000" in accuracy.get_title()
        assert len(loss.lines) == 1 and "nats" in loss.get_ylabel()
        assert len(agreement.lines) == 2 and "unitless" in agreement.get_ylabel()
    finally:
        for figure in figures:
            pyplot().close(figure)


def test_model_card_states_the_model_and_bp_sizes_with_their_standard_errors(tmp_path):
    from hf_treelang.citation import BIBTEX
    from hf_treelang.train.arguments import DataArguments, ModelArguments
    from hf_treelang.train.outputs import render_model_card

    data_args = DataArguments(num_train=64, num_eval=512, num_test=256, k_test=[0, 2])
    training_args = TreeLangTrainingArguments(output_dir=str(tmp_path), report_to="none")
    final = {"eval_acc_ktest0": 0.5, "eval_bp_acc_ktest0": 0.713, "eval_acc_ktest2": 0.25}
    card = render_model_card("mlm", data_args, ModelArguments(), training_args, final, 1.0, 10,
                             reference_sizes={0: 2000, 2: 2000})
    assert "| k_test | model accuracy (n = 256) | BP_0 accuracy (n = 2000) |" in card
    assert "| 0 | 0.5000 | 0.7130 |" in card and "| 2 | 0.2500 | n/a |" in card
    assert "±0.031 for the network, ±0.011 for BP" in card
    assert BIBTEX.strip() in card and card.count("@inproceedings") == 1
    default = render_model_card("mlm", data_args, ModelArguments(), training_args, final, 1.0, 10)
    assert "BP_0 accuracy (n = 256)" in default  # without reference sizes: BP on the test sets themselves


def test_the_model_card_states_the_runs_own_optimiser_schedule_and_clipping(tmp_path):
    from hf_treelang.train.outputs import render_model_card
    from hf_treelang.train.run import resolve

    run = resolve("mlm", {"depth": 2, "num_symbols": 3, "num_train": 8, "num_eval": 8, "num_test": 8,
                          "lr_scheduler_type": "cosine", "warmup_steps": 7, "learning_rate": 3e-4,
                          "max_grad_norm": 1.0, "use_dataset_builder": False}, tmp_path / "run")
    card = render_model_card("mlm", run.data_args, run.model_args, run.training_args, {}, 1.0, 10)
    assert "learning rate 0.0003 with the `cosine` schedule, warm-up 7 steps" in card
    assert "gradients clipped at norm 1" in card and "constant learning rate" not in card
    assert "`hf_treelang.train`" in card and "hf_treelang.training" not in card
    constant = resolve("root", {"depth": 2, "num_symbols": 3, "num_train": 8, "num_eval": 8, "num_test": 8,
                                "use_dataset_builder": False}, tmp_path / "other")
    card = render_model_card("root", constant.data_args, constant.model_args, constant.training_args, {}, 1.0, 10)
    assert "with the `constant` schedule" in card and "no gradient clipping" in card and "Adam (`adamw_torch`" in card
