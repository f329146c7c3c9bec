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
