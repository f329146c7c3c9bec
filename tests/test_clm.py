"""Next-leaf prediction (training/run_clm.py): a causal run end to end on both engines, the BP-KL callback's causal
metrics against an exact model, byte-identical resume, and bad input refused before any work."""

import json
import math
import shutil
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.next_leaf import next_leaf_distributions
from hf_treelang.core.sampling import sample_trees
from hf_treelang.train.arguments import PRESETS, parse_command_line
from hf_treelang.train.callbacks import BPKLCallback
from hf_treelang.train.collators import NextLeafCollator
from hf_treelang.train.device_data import TrainingStream
from hf_treelang.train.loop import main, train
from hf_treelang.train.run import runs_from_command_line
from tiny_run import TINY, run_tiny

ENGINES = ("device", "dataloader")


# ---------------------------------------------------------------- data: [BOS, x_0 .. x_{L-2}] -> the leaves


def test_both_engines_feed_the_leaves_shifted_behind_bos_with_the_leaves_as_labels():
    leaves = torch.tensor([[2, 0, 1, 1], [0, 0, 2, 1]])
    batch = NextLeafCollator(num_symbols=3)([{"input_ids": row.tolist()} for row in leaves])
    assert batch["input_ids"].tolist() == [[3, 2, 0, 1], [3, 0, 0, 2]] and torch.equal(batch["labels"], leaves)
    epoch = TrainingStream("clm", leaves, seeds=[0], num_symbols=3, batch_size=2).single().epoch(0)
    rows = epoch.labels  # (2, 4): the leaves in the epoch's order
    assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, leaves.tolist()))
    assert torch.equal(epoch.inputs[:, 0], torch.full((2,), 3)) and torch.equal(epoch.inputs[:, 1:], rows[:, :-1])


# ---------------------------------------------------------------- a tiny run end to end


@pytest.mark.parametrize("engine", ENGINES)
def test_a_tiny_causal_run_writes_the_bp_kl_curves_and_the_excess_loss(tmp_path, engine):
    result = run_tiny("clm", tmp_path, "--train_engine", engine)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["task"] == "clm" and metrics["global_step"] == 12
    for entry in [metrics["final"], *metrics["history"]]:
        assert {f"eval_kl_bp_k{k}" for k in range(3)} | {"eval_excess_loss", "eval_acc_ktest0",
                                                         "eval_bp_acc_ktest2"} <= set(entry)
    assert [entry["step"] for entry in metrics["history"]] == [0, 1, 3, 12]
    assert metrics["exact_loss_per_leaf"] > 0 and result.final_metrics["eval_excess_loss"] > 0
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["TreeLangForCausalLM"] and config["is_causal"] is True
    card = (tmp_path / "README.md").read_text()
    assert "pipeline_tag: text-generation" in card and "AutoModelForCausalLM" in card and "Excess loss" in card
    assert (tmp_path / "curves.png").is_file() and (tmp_path / "kl_curves.png").is_file()
    assert (tmp_path / "run_complete.json").is_file()


def test_a_tiny_causal_run_logs_the_kl_per_position_whose_mean_is_the_matched_kl(tmp_path):
    """ℓ = 2: four positions per evaluation, averaging to eval_kl_bp_k{k_train} within 1e-12."""
    k_train = 1
    run_tiny("clm", tmp_path, "--num_evaluations", "2", "--k_train", str(k_train))
    history = json.loads((tmp_path / "eval_history.json").read_text())["history"]
    assert len(history) >= 2
    for entry in history:
        positions = sorted(key for key in entry if key.startswith("eval_kl_position"))
        assert positions == [f"eval_kl_position{i}" for i in range(4)]
        mean = sum(entry[key] for key in positions) / 4
        assert mean == pytest.approx(entry[f"eval_kl_bp_k{k_train}"], rel=0, abs=1e-12)


# ---------------------------------------------------------------- the callback against the exact model


class ExactNextLeafModel(torch.nn.Module):
    """A causal 'model' whose logits are log P_k(x_i | x_<i) of BP_k: row i reads only BOS and x_0 .. x_{i-1}."""

    def __init__(self, bp: BeliefPropagation):
        super().__init__()
        self.bp = bp
        self.unused = torch.nn.Parameter(torch.zeros(1))  # the callback reads the device from the parameters

    def forward(self, input_ids):
        # the last leaf is never an input; any symbol stands in for it (row i does not depend on x_i .. x_{L-1})
        leaves = torch.cat([input_ids[:, 1:], torch.zeros_like(input_ids[:, :1])], 1)  # (b, L)
        probabilities = next_leaf_distributions(self.bp, leaves).probabilities  # (b, L, q)
        return SimpleNamespace(logits=torch.log(probabilities))


class UniformModel(torch.nn.Module):
    """Logits 0 everywhere: every next leaf uniform over the q = 3 symbols."""

    def __init__(self):
        super().__init__()
        self.unused = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        return SimpleNamespace(logits=torch.zeros(*input_ids.shape, 3))  # (b, L, q)


def test_the_exact_next_leaf_model_has_zero_kl_to_the_matched_bp_and_zero_excess_loss():
    grammar, depth, k_train = Grammar.random(3, 1.0, 0), 3, 1
    in_sample = sample_trees(grammar, 40, depth, k_train, 5)
    tests = {k: sample_trees(grammar, 30, depth, k, 10 + k) for k in range(depth + 1)}
    callback = BPKLCallback(grammar, depth, k_train, "clm", in_sample.leaves,
                            {k: (t.leaves, t.roots) for k, t in tests.items()}, batch_size=16)
    bp = BeliefPropagation(grammar, depth, k_train, on_impossible="flag")
    metrics = callback.compute(ExactNextLeafModel(bp))
    assert abs(metrics[f"eval_kl_bp_k{k_train}"]) < 1e-10
    assert abs(metrics["eval_excess_loss"]) < 1e-10
    assert all(abs(metrics[f"eval_kl_position{i}"]) < 1e-10 for i in range(2**depth))
    assert metrics["eval_match_bp"] == 1.0
    assert min(metrics[f"eval_kl_bp_k{k}"] for k in range(depth + 1) if k != k_train) > 1e-3  # the others differ
    for k in range(depth + 1):  # BP's accuracy on the same test sets: the same argmax
        assert metrics[f"eval_acc_ktest{k}"] == metrics[f"eval_bp_acc_ktest{k}"]
    uniform = callback.compute(UniformModel())  # log q per leaf, less the exact loss
    assert uniform["eval_excess_loss"] == pytest.approx(math.log(3) - callback.prepare().exact_loss, abs=1e-12)
    per_position = [uniform[f"eval_kl_position{i}"] for i in range(2**depth)]  # the mean over positions
    assert sum(per_position) / 2**depth == pytest.approx(uniform[f"eval_kl_bp_k{k_train}"], rel=0, abs=1e-12)
    assert len(set(per_position)) > 1  # positions differ: one row per position, not the mean repeated


# ---------------------------------------------------------------- resume


RESUME = ("--num_train_epochs", "2", "--hidden_dropout_prob", "0.1", "--attention_probs_dropout_prob", "0.1",
          "--num_evaluations", "0", "--num_checkpoints", "0", "--save_strategy", "steps", "--save_steps", "6",
          "--eval_strategy", "steps", "--eval_steps", "6", "--logging_steps", "1000")


def _resume_run(output_dir, *extra):
    (run,), _ = runs_from_command_line("clm", TINY + ["--output_dir", str(output_dir), *RESUME, *extra])
    return train(run)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_resumed_causal_run_ends_with_the_same_bytes_and_evaluations(tmp_path, engine):
    """Step 6 is in the middle of epoch 0 (12 steps per epoch); dropout 0.1 is on."""
    full = _resume_run(tmp_path / "full", "--train_engine", engine)
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-6", resumed_dir / "checkpoint-6")
    resumed = _resume_run(resumed_dir, "--train_engine", engine, "--resume_from_checkpoint",
                          str(resumed_dir / "checkpoint-6"))
    assert resumed.global_step == full.global_step == 24
    first, second = load_file(tmp_path / "full" / "model.safetensors"), load_file(resumed_dir / "model.safetensors")
    assert [key for key in first if not torch.equal(first[key], second[key])] == []
    timings = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second")
    after = [[{k: v for k, v in e.items() if k not in timings} for e in result.history if e["step"] > 6]
             for result in (full, resumed)]
    assert [e["step"] for e in after[0]] == [12, 18, 24] and after[1] == after[0]


# ---------------------------------------------------------------- presets and bad input


def test_the_paper_shaped_preset_is_the_papers_model_and_optimiser_on_its_mlm_data():
    data_args, model_args, args = parse_command_line("clm", ["--preset", "paper"])[:3]
    assert (model_args.hidden_size, model_args.intermediate_size, args.learning_rate) == (128, 2048, 1e-4)
    assert (data_args.num_train, args.num_train_epochs) == (PRESETS["mlm"]["paper"]["num_train"],
                                                             PRESETS["mlm"]["paper"]["num_train_epochs"])
    assert args.output_dir == "outputs/run_clm"


@pytest.mark.parametrize("flags, message", [
    (("--model_name_or_path", "outputs/run_mlm"), "model_name_or_path is only used by run_finetune.py"),
    (("--mask_rate", "0.2"), "`mask_rate` is only used by MLM"),
    (("--ensemble_seeds", "0", "1"), "the stacked model has no causal head"),
    (("--k_train", "3"), "k_train"),
])
def test_bad_causal_input_is_one_line_before_any_folder(tmp_path, capsys, flags, message):
    output_dir = tmp_path / "never"
    assert main("clm", TINY + ["--output_dir", str(output_dir), *flags], as_script=True) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not output_dir.exists()


def test_resuming_a_causal_run_from_another_heads_checkpoint_is_refused(tmp_path):
    run_tiny("root", tmp_path / "root", "--num_evaluations", "0", "--num_checkpoints", "1", "--num_train", "8")
    with pytest.raises(ValueError, match="holds a \\['TreeLangForSequenceClassification'\\] model; this clm run "
                                         "trains a TreeLangForCausalLM"):
        runs_from_command_line("clm", TINY + ["--output_dir", str(tmp_path / "clm"), "--resume_from_checkpoint",
                                              str(tmp_path / "root" / "checkpoint-1")])


def test_the_attention_of_a_causal_model_reads_its_input_layout_and_is_lower_triangular(tmp_path):
    from hf_treelang.analysis.attention import average_attention
    from hf_treelang.models.configuration_treelang import TreeLangConfig
    from hf_treelang.models.modeling_treelang import TreeLangForCausalLM

    config = TreeLangConfig.from_data(num_symbols=3, depth=2, hidden_size=8, num_hidden_layers=2, intermediate_size=8)
    TreeLangForCausalLM(config).save_pretrained(tmp_path / "clm")
    result = average_attention(tmp_path / "clm", num_samples=50)
    assert result.task == "clm" and result.masked is False
    assert result.maps.shape == (2, 1, 4, 4)
    assert abs(result.maps[..., 0, 1:]).max() == 0.0 and abs(result.maps[..., 1, 2:]).max() == 0.0  # causal
    assert result.maps.sum(-1) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="a causal .* never a masked leaf"):
        average_attention(tmp_path / "clm", num_samples=50, mask=True)
