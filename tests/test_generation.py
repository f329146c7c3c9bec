"""``hf-treelang generate`` (hf_treelang.analysis.generation): a causal model's samples and the true data scored both
ways with the exact oracle.

A model whose next-leaf rows are BP_k's own (``OracleCausalLM``) is the language: both KLs are 0 to rounding (1e-9
nats), and its samples have the true data's log-likelihood within 4 standard errors. A random model is far from it
(both KLs above 10 standard errors). Sizes: ℓ = 3, q = 4, N <= 2000.
"""

import json
import math

import numpy as np
import pytest
import torch
from transformers.modeling_outputs import CausalLMOutput

from hf_treelang import BeliefPropagation, Grammar, TreeLangConfig, TreeLangForCausalLM, TreeLangForMaskedLM
from hf_treelang.analysis import generation
from hf_treelang.cli import GENERATE_MAX_SAMPLES, run_command
from hf_treelang.core.next_leaf import next_leaf_distributions

DEPTH, Q, L = 3, 4, 8


def tiny_config(filter_level=0):
    return TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH, filter_level=filter_level, hidden_size=32,
                                    num_hidden_layers=2, intermediate_size=64, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0)


class OracleCausalLM(TreeLangForCausalLM):
    """A causal LM whose logits are log BP_k(x_i | x_<i): input [BOS, x_0 .. x_{T-2}] is the leaves x_0 .. x_{T-2}
    followed by masks (T <= 2**ℓ, any prefix generate feeds it), and row i of next_leaf_distributions is the row."""

    def __init__(self, config, bp):
        super().__init__(config)
        self.bp = bp

    def forward(self, input_ids, **kwargs):
        n, length = input_ids.shape  # (n, T)
        leaves = torch.full((n, L), Q, dtype=torch.long)  # (n, L): Q is BP's mask id
        leaves[:, :length - 1] = input_ids[:, 1:]
        rows = next_leaf_distributions(self.bp, leaves).probabilities[:, :length]  # (n, T, q)
        return CausalLMOutput(logits=rows.log())


@pytest.fixture(scope="module")
def grammar():
    return Grammar.random(Q, 1.0, 0)


def test_a_model_that_is_the_oracle_has_zero_kl_both_ways(grammar):
    for k in (0, 2):
        model = OracleCausalLM(tiny_config(k), BeliefPropagation(grammar, DEPTH, k)).eval()
        result = generation.score_model_generation(model, grammar, depth=DEPTH, filter_level=k, num_samples=2000,
                                                   seed=3, batch_size=500)
        for kl in (result.kl_model_data, result.kl_data_model):
            assert abs(kl.estimate) < 1e-9 and kl.standard_error < 1e-9 and kl.num_infinite == 0
        # the samples are draws of the language: their log-likelihood is the true data's, to 4 standard errors
        generated, data = result.log_likelihood("generated"), result.log_likelihood("data")
        error = math.hypot(generated["per_sequence_standard_error"], data["per_sequence_standard_error"])
        assert abs(generated["per_sequence"] - data["per_sequence"]) < 4 * error
        assert result.entropy_rate.estimate == pytest.approx(-data["per_leaf"], rel=1e-12)


def test_a_random_model_has_clearly_positive_kls(grammar):
    torch.manual_seed(0)
    model = TreeLangForCausalLM(tiny_config()).eval()
    result = generation.score_model_generation(model, grammar, depth=DEPTH, filter_level=0, num_samples=1000, seed=1)
    for kl in (result.kl_model_data, result.kl_data_model):
        assert kl.estimate > 10 * kl.standard_error > 0


def test_model_log_probability_is_the_chain_rule_of_its_rows():
    torch.manual_seed(0)
    model = TreeLangForCausalLM(tiny_config()).eval()
    leaves = torch.randint(0, Q, (5, L))
    with torch.no_grad():
        expected = torch.zeros(5, dtype=torch.float64)
        for i in range(L):  # P(x_i | x_<i) from the prefix [BOS, x_0 .. x_{i-1}] alone
            prefix = torch.cat([torch.full((5, 1), Q), leaves[:, :i]], 1)
            expected += model(prefix).logits[:, -1].double().log_softmax(-1).gather(1, leaves[:, i:i + 1])[:, 0]
    actual = generation.sequence_log_probabilities(model, leaves, batch_size=2)
    assert torch.allclose(actual, expected, atol=1e-5)


def test_samples_of_probability_zero_make_kl_infinite_and_are_counted():
    # a grammar whose rules put symbol 0 only in left children: a random model soon writes what it cannot produce
    M = np.zeros((Q, Q, Q))
    M[:, 0, :] = 1.0 / Q
    grammar = Grammar(M)
    torch.manual_seed(0)
    model = TreeLangForCausalLM(tiny_config()).eval()
    result = generation.score_model_generation(model, grammar, depth=DEPTH, filter_level=0, num_samples=200, seed=0)
    kl = result.kl_model_data
    assert kl.estimate == math.inf and kl.num_infinite == result.num_impossible > 0
    assert kl.finite_estimate is None or math.isfinite(kl.finite_estimate)
    report = result.to_dict()
    assert report["kl_model_data"]["infinite"] and report["num_impossible_samples"] == kl.num_infinite
    assert not any(isinstance(v, float) and math.isnan(v) for v in _leaves_of(report))
    assert math.isfinite(result.kl_data_model.estimate)


def _leaves_of(tree):
    if isinstance(tree, dict):
        for value in tree.values():
            yield from _leaves_of(value)
    else:
        yield tree


def test_samples_are_reproducible_and_leave_the_global_generator_alone():
    torch.manual_seed(0)
    model = TreeLangForCausalLM(tiny_config()).eval()
    state = torch.get_rng_state()
    first = generation.generate_samples(model, 50, seed=7, batch_size=20)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first, generation.generate_samples(model, 50, seed=7, batch_size=20))
    assert tuple(first.shape) == (50, L) and first.min() >= 0 and first.max() < Q


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("generate")
    torch.manual_seed(0)
    TreeLangForCausalLM(tiny_config()).save_pretrained(root / "causal")
    TreeLangForMaskedLM(tiny_config()).save_pretrained(root / "mlm")
    return root


def test_generate_command_writes_figure_and_json(folders, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_command("generate", [str(folders / "causal"), "--out", str(out), "--num-samples", "300",
                                    "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    assert "KL(model ‖ data) = " in printed and "KL(data ‖ model) = " in printed and "±" in printed
    assert (out / "generate.png").stat().st_size > 1000
    report = json.loads((out / "generate.json").read_text())
    assert report["num_samples"] == 300 and report["depth"] == DEPTH
    assert report["kl_model_data"]["estimate"] > 0 and report["kl_data_model"]["estimate"] > 0


def test_one_sample_prints_no_standard_error_as_the_json_holds_none(folders, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_command("generate", [str(folders / "causal"), "--out", str(out), "--num-samples", "1",
                                    "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "generate.json").read_text())
    assert report["kl_data_model"]["standard_error"] is None and report["kl_model_data"]["standard_error"] is None
    assert "inf" not in printed and "± n/a" in printed, printed


@pytest.mark.parametrize("value", ["0", str(GENERATE_MAX_SAMPLES + 1)])
def test_a_bad_number_of_samples_is_refused_naming_it_and_the_range(folders, tmp_path, capsys, value):
    out = tmp_path / "never"
    assert run_command("generate", [str(folders / "causal"), "--out", str(out), "--num-samples", value]) == 2
    error = capsys.readouterr().err
    assert "num_samples" in error and value in error and f"{GENERATE_MAX_SAMPLES}" in error.replace(",", "")
    assert not out.exists()


def test_a_non_causal_run_is_refused_naming_what_it_holds(folders, tmp_path, capsys):
    out = tmp_path / "never"
    assert run_command("generate", [str(folders / "mlm"), "--out", str(out), "--num-samples", "10"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "masked language modelling" in error and "TreeLangForCausalLM" in error
    assert not out.exists()


def test_the_command_line_limit_is_the_librarys():
    assert GENERATE_MAX_SAMPLES == generation.MAX_SAMPLES


def test_generation_over_the_machines_memory_is_refused_before_any_sampling(folders, tmp_path, capsys, monkeypatch):
    from hf_treelang.analysis import generation
    from hf_treelang.core import resources

    monkeypatch.setattr(resources, "available_memory", lambda: 10**6)  # a stand-in machine of 1 MB
    monkeypatch.setattr(generation, "score_model_generation", lambda *a, **k: pytest.fail("sampled"))
    out = tmp_path / "never"
    assert run_command("generate", [str(folders / "causal"), "--out", str(out), "--num-samples", "100000"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "error: --num-samples 100000 needs about" in error
    assert "the largest --num-samples that fits is" in error and not out.exists()
