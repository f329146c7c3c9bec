"""The analyses read a run of any architecture: calibration, generate, probe, attention and dynamics on tiny BERT,
GPT-2 and Mamba runs (ℓ = 2, q = 3), over the q symbols' logits renormalised, with the probability off the symbols
reported, and the one-line refusals where an architecture lacks what an analysis reads."""

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from transformers.modeling_outputs import MaskedLMOutput

from hf_treelang.analysis import calibrate, learning_dynamics, load_checkpoint, probe, score_generation
from hf_treelang.analysis.attention import average_attention
from hf_treelang.analysis.checkpoint import load_causal_checkpoint
from hf_treelang.cli import main as cli
from hf_treelang.core.oracle import next_leaf_inputs
from hf_treelang.core.sampling import sample_trees
from hf_treelang.train.loop import main

Q, DEPTH = 3, 2
TINY = ["--depth", str(DEPTH), "--num_symbols", str(Q), "--num_train", "64", "--num_eval", "16", "--num_test", "16",
        "--per_device_train_batch_size", "8", "--max_steps", "4", "--num_evaluations", "2", "--num_checkpoints", "1",
        "--disable_tqdm", "true", "--report_to", "none", "--cpu_threads", "1", "--use_dataset_builder", "false"]
SIZES = {"bert": "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,intermediate_size=32",
         "gpt2": "n_embd=16,n_layer=2,n_head=1", "mamba": "hidden_size=16,num_hidden_layers=1"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One tiny run per (task, architecture), trained once for the module."""
    root = tmp_path_factory.mktemp("architecture_runs")
    out = {}
    for task, model_type in (("mlm", "bert"), ("clm", "gpt2"), ("clm", "mamba"), ("root", "mamba")):
        folder = root / f"{task}_{model_type}"
        assert main(task, [*TINY, "--model_type", model_type, "--config_overrides", SIZES[model_type],
                           "--output_dir", str(folder)], as_script=True) == 0
        out[task, model_type] = folder
    return out


def _symbol_softmax(logits: torch.Tensor) -> tuple:
    """(the q symbols' probabilities renormalised, the probability off them), written out for the test."""
    full = torch.softmax(logits.double(), -1)  # (..., V)
    inside = full[..., :Q].sum(-1, keepdim=True)
    return full[..., :Q] / inside, 1 - inside[..., 0]


# ---------------------------------------------------------------- loading


def test_a_run_of_another_architecture_loads_with_its_setting_from_run_config(runs):
    ckpt = load_checkpoint(runs["mlm", "bert"])
    assert (ckpt.task, ckpt.model_type, ckpt.num_symbols, ckpt.depth, ckpt.filter_level) == ("mlm", "bert", Q, DEPTH, 0)
    assert ckpt.mask_token_id == Q and not ckpt.is_treelang
    assert ckpt.model.config._attn_implementation == "eager"  # the implementation that returns attention maps
    assert ckpt.grammar.num_symbols == Q
    root = load_checkpoint(runs["root", "mamba"])
    assert type(root.model).__name__ == "MambaForRootClassification" and root.task == "root"
    step = next(p for p in runs["clm", "gpt2"].iterdir() if p.name.startswith("checkpoint-"))
    assert load_checkpoint(step).depth == DEPTH  # a checkpoint-N reads its run folder's run_config.json


def test_a_model_folder_of_another_architecture_without_run_config_is_refused(runs, tmp_path):
    ckpt = load_checkpoint(runs["mlm", "bert"])
    ckpt.model.save_pretrained(tmp_path / "bare")
    with pytest.raises(ValueError, match=r"model_type 'bert' but no run_config.json.*gives q, the depth and k_train"):
        load_checkpoint(tmp_path / "bare")


def test_a_causal_analysis_refuses_a_masked_lm_run_in_one_line(runs):
    with pytest.raises(ValueError, match="holds a bert masked language modelling model.*generate needs a causal-LM"):
        load_causal_checkpoint(runs["mlm", "bert"], needed_by="generate")


# ---------------------------------------------------------------- calibration


def test_calibration_of_bert_renormalises_the_symbols_and_reports_the_mass_off_them(runs):
    result = calibrate(runs["mlm", "bert"], num_samples=32, seed=5)
    ckpt = load_checkpoint(runs["mlm", "bert"])
    trees = sample_trees(ckpt.grammar, 32, DEPTH, 0, 5)
    from hf_treelang.core.oracle import task_inputs

    data = task_inputs("mlm", trees.leaves, trees.roots, mask_token_id=Q, sampling_seed=6)
    with torch.no_grad():
        logits = ckpt.model(input_ids=data.inputs).logits[torch.arange(32), data.positions]  # (n, V = q + 2)
    expected, mass = _symbol_softmax(logits)
    assert logits.shape[-1] == Q + 2
    np.testing.assert_allclose(result.in_sample.model_probs, expected.numpy(), rtol=0, atol=1e-6)
    assert result.in_sample.metrics["mass_on_special_tokens"] == pytest.approx(float(mass.mean()), abs=1e-6)
    assert 0 < result.in_sample.metrics["mass_on_special_tokens"] < 1  # an untrained head spreads over q + 2 ids
    assert math.isfinite(result.in_sample.metrics["kl_mean"])


def test_calibration_of_a_pooled_mamba_root_classifier_has_no_mass_off_the_symbols(runs):
    result = calibrate(runs["root", "mamba"], num_samples=16)
    assert result.task == "root" and result.in_sample.model_probs.shape == (16, Q)
    assert result.in_sample.metrics["mass_on_special_tokens"] == 0.0  # its head has exactly q classes


def test_the_calibration_command_writes_the_mass_into_its_json(runs, tmp_path):
    assert cli(["calibration", str(runs["mlm", "bert"]), "--num-samples", "16", "--out", str(tmp_path)]) == 0
    sets = json.loads((tmp_path / "calibration.json").read_text())["sets"]
    assert all(0 < sets[name]["mass_on_special_tokens"] < 1 for name in ("in_sample", "uniform"))


# ---------------------------------------------------------------- generate


@pytest.mark.parametrize("model_type", ["gpt2", "mamba"])
def test_generate_scores_a_causal_architectures_samples_with_the_oracle(runs, model_type):
    result = score_generation(runs["clm", model_type], num_samples=12, seed=3, batch_size=8)
    assert result.generated.shape == (12, 2**DEPTH) and ((0 <= result.generated) & (result.generated < Q)).all()
    assert result.num_special_samples == 0  # the special ids are suppressed: the samples come from Q
    ckpt = load_causal_checkpoint(runs["clm", model_type])
    inputs = next_leaf_inputs(torch.as_tensor(result.data), Q)  # [BOS = q, x_0 .. x_{L-2}]
    with torch.no_grad():
        symbols, mass = _symbol_softmax(ckpt.model(input_ids=inputs).logits)  # (n, L, q), (n, L)
    log_q = symbols.log().gather(-1, torch.as_tensor(result.data)[..., None])[..., 0].sum(1)
    np.testing.assert_allclose(result.data_log_model, log_q.numpy(), rtol=0, atol=1e-9)
    assert result.mass_on_special_tokens["data"] == pytest.approx(float(mass.mean()), abs=1e-9)
    assert 0 < result.mass_on_special_tokens["generated"] < 1
    assert np.isfinite(result.generated_log_model).all()
    again = score_generation(runs["clm", model_type], num_samples=12, seed=3, batch_size=8)
    np.testing.assert_array_equal(again.generated, result.generated)  # seeded


def test_a_generated_special_id_is_counted_as_an_impossible_sample_not_a_crash(runs):
    ckpt = load_causal_checkpoint(runs["clm", "gpt2"])
    generate = ckpt.model.generate

    def generate_with_a_pad(*args, **kwargs):  # a model whose generate ignores suppress_tokens
        sequences = generate(*args, **kwargs).clone()
        sequences[0, 2] = Q + 1
        return sequences

    ckpt.model.generate = generate_with_a_pad
    result = score_generation(ckpt, num_samples=6, seed=1)
    assert result.num_special_samples == 1 and result.generated[0, 1] == Q + 1
    assert result.generated_log_grammar[0] == -math.inf and result.generated_log_model[0] == -math.inf
    assert result.kl_model_data.num_infinite >= 1 and math.isinf(result.kl_model_data.estimate)
    summary = result.to_dict()
    assert summary["num_special_samples"] == 1 and not any(np.isnan(result.generated_log_grammar))


def test_the_generate_command_writes_the_mass_into_its_json(runs, tmp_path):
    assert cli(["generate", str(runs["clm", "gpt2"]), "--num-samples", "8", "--out", str(tmp_path)]) == 0
    written = json.loads((tmp_path / "generate.json").read_text())
    assert set(written["mass_on_special_tokens"]) == {"generated", "data"} and written["num_special_samples"] == 0


# ---------------------------------------------------------------- probe


def test_probe_reads_every_hidden_state_the_architecture_returns(runs):
    blocks = load_checkpoint(runs["mlm", "bert"]).model.config.num_hidden_layers
    result = probe(runs["mlm", "bert"], num_train=16, num_validation=8, num_test=8, epochs=1, batch_size=8)
    assert list(result.layers) == list(range(blocks + 1))  # the embedding and every block's output
    assert np.asarray(result.accuracy).shape == (blocks + 1, DEPTH)  # ancestor levels 0 .. ℓ-1


def test_probe_refuses_a_causal_run_of_any_architecture_before_loading_it(runs):
    with pytest.raises(ValueError, match="probes need an MLM") as error:
        probe(runs["clm", "gpt2"], num_train=16, num_validation=8, num_test=8, epochs=1)
    assert "\n" not in str(error.value)


class _NoHiddenStates(torch.nn.Module):
    """A model whose forward gives logits only."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.config = model, model.config

    def forward(self, input_ids=None, **kwargs):
        return MaskedLMOutput(logits=self.inner(input_ids=input_ids).logits)


def test_probe_refuses_a_model_without_hidden_states_in_one_line(runs):
    ckpt = load_checkpoint(runs["mlm", "bert"])
    bare = dataclasses.replace(ckpt, model=_NoHiddenStates(ckpt.model))
    with pytest.raises(ValueError, match="returns no hidden states with output_hidden_states=True") as error:
        probe(bare, num_train=8, num_validation=8, num_test=8, epochs=1)
    assert "\n" not in str(error.value)


# ---------------------------------------------------------------- attention


def test_attention_of_gpt2_is_eager_causal_and_row_stochastic(runs):
    result = average_attention(runs["clm", "gpt2"], num_samples=8)
    length = 2**DEPTH
    assert result.maps.shape == (2, 1, length, length) and result.model_type == "gpt2"
    np.testing.assert_allclose(result.maps.sum(-1), 1.0, atol=1e-6)
    assert np.triu(result.maps[0, 0], 1).max() == 0.0  # position a sees only b <= a
    assert result.label.startswith("gpt2 causal")


def test_attention_on_mamba_says_it_has_none_in_one_line_exit_2(runs, tmp_path, capsys):
    out = tmp_path / "attention"
    assert cli(["attention", str(runs["clm", "mamba"]), "--num-samples", "4", "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "mamba has no attention" in error
    assert not out.exists()  # nothing written


# ---------------------------------------------------------------- dynamics


def test_dynamics_reads_another_architectures_history_with_its_mass_curve(runs, tmp_path):
    result = learning_dynamics(runs["clm", "mamba"])
    assert result.kl and result.mass_on_special_tokens is not None
    assert len(result.mass_on_special_tokens) == len(result.steps)
    assert np.all((0 < result.mass_on_special_tokens) & (result.mass_on_special_tokens < 1))
    assert cli(["dynamics", str(runs["mlm", "bert"]), "--out", str(tmp_path)]) == 0
    written = json.loads((tmp_path / "dynamics.json").read_text())
    assert len(written["mass_on_special_tokens"]) == len(written["steps"])
