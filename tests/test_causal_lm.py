"""The causal language model `TreeLangForCausalLM` (next-leaf prediction) as a transformers model: causal masking
under every attention path, equivalence to torch's encoder with a causal mask, the loss aligned with the exact oracle
`next_leaf_distributions`, `generate`, saving and loading (with `trust_remote_code` too).

Layout: `input_ids = [BOS, x_0, ..., x_{T-2}]` (BOS = q), `labels = [x_0, ..., x_{T-1}]`, logits row i = P(x_i | x_<i).
Tiny configs (q=4, depth 3, hidden 32, 2 layers, 2 heads). Tolerances: 1e-6 between two runs of the same kernels,
1e-5 between eager and SDPA attention and against torch's encoder; 1e-5 relative for the float32 loss vs the oracle.
"""

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from transformers import AutoModel, AutoModelForCausalLM, GenerationMixin

import hf_treelang
from hf_treelang import (
    BeliefPropagation,
    Grammar,
    TreeLangConfig,
    TreeLangForCausalLM,
    TreeLangForMaskedLM,
    sample_trees,
)
from hf_treelang.core.next_leaf import next_leaf_distributions
from hf_treelang.models.loading import load_pretrained
from hf_treelang.models.modeling_treelang import TreeLangSelfAttention, sinusoidal_positional_encoding

Q, DEPTH, L = 4, 3, 8  # L = 2**DEPTH leaves
BOS = Q
IMPLEMENTATIONS = ("eager", "sdpa")


def tiny_config(**overrides) -> TreeLangConfig:
    kwargs = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    kwargs.update(overrides)
    return TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH, **kwargs)


def tiny_model(seed=0, **overrides) -> TreeLangForCausalLM:
    torch.manual_seed(seed)
    return TreeLangForCausalLM(tiny_config(**overrides)).eval()


def leaves(batch=5, seed=0) -> torch.Tensor:
    """(batch, 2**ℓ) symbols in [0, q)."""
    return torch.randint(0, Q, (batch, L), generator=torch.Generator().manual_seed(seed))


def with_bos(x: torch.Tensor) -> torch.Tensor:
    """[BOS, x_0, ..., x_{L-2}] (batch, L): the input whose row i predicts x_i."""
    return torch.cat([torch.full_like(x[:, :1], BOS), x[:, :-1]], dim=1)


# ---------------------------------------------------------------- config and shapes


def test_the_causal_model_has_causal_attention_and_leaves_the_callers_config_as_it_was():
    config = tiny_config()
    model = TreeLangForCausalLM(config)
    assert config.is_causal is False  # a copy was made
    assert model.config.is_causal is True and model.config.bos_token_id == BOS == model.config.vocab_size - 2
    assert all(layer.attention.is_causal for layer in model.treelang.layers)
    assert TreeLangSelfAttention.is_causal is False  # the class default stays bidirectional
    assert model.next_leaf_head.out_features == Q and model.get_input_embeddings().num_embeddings == Q + 1


def test_is_causal_must_be_a_bool():
    with pytest.raises(ValueError, match=r"`is_causal` must be True .* or False .*got 1"):
        tiny_config(is_causal=1)


@pytest.mark.parametrize("length", [1, 2, 5, L])
def test_logits_have_one_row_per_position_for_every_prefix_length(length):
    model = tiny_model()
    x = with_bos(leaves())[:, :length]
    output = model(x, labels=leaves()[:, :length])
    assert tuple(output.logits.shape) == (5, length, Q + 2) and output.loss.shape == ()  # symbols, [MASK], [PAD]


def test_a_prefix_gives_the_rows_of_the_full_sequence():
    # position t gets sinusoid row t whatever T is, and causal rows never see what comes after them
    model = tiny_model()
    x = with_bos(leaves())
    with torch.no_grad():
        full = model(x).logits
        for length in (1, 3, 6):
            assert torch.allclose(model(x[:, :length]).logits, full[:, :length], atol=1e-6)


# ---------------------------------------------------------------- causal masking


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_changing_leaf_j_changes_no_logit_at_positions_up_to_j(implementation):
    model = tiny_model(attn_implementation=implementation)
    assert model.config._attn_implementation == implementation
    x = leaves()
    with torch.no_grad():
        logits = model(with_bos(x)).logits  # (B, L, q)
        for j in range(L - 1):  # leaf x_j sits at input position j + 1; the last leaf is never an input
            changed = x.clone()
            changed[:, j] = (changed[:, j] + 1) % Q
            other = model(with_bos(changed)).logits
            assert torch.allclose(other[:, : j + 1], logits[:, : j + 1], atol=1e-6), j  # rows 0..j predict x_0..x_j
            assert (other[:, j + 1 :] - logits[:, j + 1 :]).abs().amax() > 1e-4, j  # later rows see it


def test_eager_and_sdpa_logits_agree():
    x = with_bos(leaves())
    with torch.no_grad():
        eager = tiny_model(attn_implementation="eager")(x).logits
        sdpa = tiny_model(attn_implementation="sdpa")(x).logits
    assert torch.allclose(eager, sdpa, atol=1e-5)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_attention_maps_are_lower_triangular_rows_of_probabilities(implementation):
    model = tiny_model(attn_implementation=implementation)
    x = with_bos(leaves())
    with torch.no_grad():
        output = model(x, output_attentions=True, output_hidden_states=True)
        assert torch.allclose(output.logits, model(x).logits, atol=1e-5)
    for maps in output.attentions:
        assert tuple(maps.shape) == (5, 2, L, L)
        assert torch.equal(maps.triu(1), torch.zeros_like(maps))  # nothing on the future
        assert torch.allclose(maps.sum(-1), torch.ones(5, 2, L), atol=1e-6)
    # the first layer's maps by hand: softmax over the past only
    query, key, _ = model.treelang.layers[0].attention.in_proj(output.hidden_states[0]).view(5, L, 3, 2, 16).unbind(2)
    scores = query.transpose(1, 2) @ key.transpose(1, 2).transpose(-2, -1) / math.sqrt(16)  # (B, nh, L, L)
    scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    assert torch.allclose(output.attentions[0], torch.softmax(scores, -1), atol=1e-6)


def test_sdpa_takes_its_causal_path_without_a_mask_tensor(monkeypatch):
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention

    def recording(*args, **kwargs):
        calls.append((kwargs.get("is_causal"), kwargs.get("attn_mask")))
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    with torch.no_grad():
        tiny_model()(with_bos(leaves()))
    assert calls == [(True, None)] * 2  # one per layer


def test_the_encoder_of_a_causal_checkpoint_is_causal_and_masked_lm_stays_bidirectional():
    causal_encoder = AutoModel.from_config(tiny_config(is_causal=True))
    assert all(layer.attention.is_causal for layer in causal_encoder.layers)
    masked_lm = TreeLangForMaskedLM(tiny_config(is_causal=True))
    assert masked_lm.config.is_causal is False
    assert not any(layer.attention.is_causal for layer in masked_lm.treelang.layers)


# ---------------------------------------------------------------- compile and export


def test_compile_fullgraph_matches_eager():
    torch._dynamo.reset()
    model = tiny_model()
    x = leaves()
    compiled = torch.compile(model, fullgraph=True, backend="eager")  # fails on any graph break or host sync
    with torch.no_grad():
        actual, expected = compiled(with_bos(x), labels=x), model(with_bos(x), labels=x)
    assert torch.allclose(actual.logits, expected.logits, atol=1e-6)
    assert torch.allclose(actual.loss, expected.loss, atol=1e-6)


def test_export_matches_eager():
    model = tiny_model()
    x = leaves()
    exported = torch.export.export(model, args=(), kwargs={"input_ids": with_bos(x), "labels": x})
    with torch.no_grad():
        actual, expected = exported.module()(input_ids=with_bos(x), labels=x), model(with_bos(x), labels=x)
    assert torch.allclose(actual.logits, expected.logits, atol=1e-6)
    assert torch.allclose(actual.loss, expected.loss, atol=1e-6)


def test_forward_reads_no_tensor_value_off_the_cpu():
    # A meta tensor has no values: any host read (int(x.min()), bool(mask.all())) would raise.
    with torch.device("meta"):
        model = TreeLangForCausalLM(tiny_config())
    x = leaves().to("meta")
    output = model(with_bos(x), labels=x, attention_mask=torch.ones(5, L, device="meta"), output_attentions=True)
    assert output.logits.shape == (5, L, Q + 2) and output.loss.shape == ()


# ---------------------------------------------------------------- fidelity to torch.nn.TransformerEncoder


@pytest.mark.parametrize("length", [L, 5])
def test_matches_torch_transformer_encoder_with_a_causal_mask(length):
    model = tiny_model()
    layer = nn.TransformerEncoderLayer(32, 2, 64, 0.1, batch_first=True, norm_first=False)
    reference = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    with torch.no_grad():
        for ours, theirs in zip(model.treelang.layers, reference.layers):
            theirs.self_attn.in_proj_weight.copy_(ours.attention.in_proj.weight)
            theirs.self_attn.in_proj_bias.copy_(ours.attention.in_proj.bias)
            theirs.self_attn.out_proj.load_state_dict(ours.attention.out_proj.state_dict())
            theirs.linear1.load_state_dict(ours.linear1.state_dict())
            theirs.linear2.load_state_dict(ours.linear2.state_dict())
            theirs.norm1.load_state_dict(ours.attention_norm.state_dict())
            theirs.norm2.load_state_dict(ours.feed_forward_norm.state_dict())
        x = with_bos(leaves(batch=8))[:, :length]
        embedded = model.get_input_embeddings()(x) + sinusoidal_positional_encoding(length, 32)  # (B, T, d)
        mask = nn.Transformer.generate_square_subsequent_mask(length)  # (T, T): -inf above the diagonal
        expected = model.next_leaf_head(reference(embedded, mask=mask, is_causal=True))  # (B, T, q)
        actual = model(x).logits[..., :Q]  # the symbols' logits
    assert torch.allclose(actual, expected, atol=1e-5), (actual - expected).abs().max()


# ---------------------------------------------------------------- the loss against the exact oracle


class FixedLogits(nn.Module):
    """A head that returns given logits (B, T, q) whatever the states: the loss is then read against them."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = logits

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        assert states.shape[:2] == self.logits.shape[:2]
        return self.logits


def test_logits_of_the_oracle_give_the_exact_entropy_per_leaf():
    grammar = Grammar.random(num_symbols=Q, sigma=1.0, grammar_seed=0)
    bp = BeliefPropagation(grammar, depth=DEPTH, filter_level=1)
    x = torch.as_tensor(sample_trees(grammar, n=16, depth=DEPTH, filter_level=1, sampling_seed=3).leaves)  # (n, L)
    oracle = next_leaf_distributions(bp, x)  # row i: P_1(x_i | x_<i)
    model = tiny_model()
    model.next_leaf_head = FixedLogits(oracle.probabilities.log().float())  # (n, L, q)
    loss = model(with_bos(x), labels=x).loss
    expected = -oracle.log_likelihood.mean() / L  # -log P(x) / 2**ℓ, averaged over the sequences
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    # one leaf off: the rows are not those of the labels
    shifted = torch.cat([x[:, 1:], x[:, :1]], dim=1)
    assert model(with_bos(x), labels=shifted).loss.item() != pytest.approx(expected.item(), rel=1e-2)


def test_loss_averages_cross_entropy_over_labelled_positions_only():
    model = tiny_model()
    x = leaves()
    labels = torch.full_like(x, -100)
    labels[:, 0] = x[:, 0]
    labels[2, 6] = x[2, 6]
    output = model(with_bos(x), labels=labels)
    picked = torch.cat([output.logits[:, 0], output.logits[2:3, 6]])  # (6, q)
    expected = nn.functional.cross_entropy(picked, torch.cat([x[:, 0], x[2:3, 6]]))
    assert torch.allclose(output.loss, expected, atol=1e-6)


def test_gradient_reaches_every_parameter():
    model = tiny_model().train()
    x = leaves()
    model(with_bos(x), labels=x).loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


# ---------------------------------------------------------------- generate


def test_generation_config_is_bos_then_two_to_the_depth_leaves():
    model = tiny_model()
    assert isinstance(model, GenerationMixin) and model.can_generate()
    config = model.generation_config
    assert (config.bos_token_id, config.max_length, config.use_cache) == (BOS, 1 + L, False)
    assert config.suppress_tokens == [BOS, BOS + 1]  # [MASK] (= BOS) and [PAD] are never generated
    assert config.eos_token_id is None and config.pad_token_id is None


def test_greedy_generation_is_the_argmax_chain():
    model = tiny_model()
    bos = torch.full((6, 1), BOS)
    with torch.no_grad():
        sequences = model.generate(bos, do_sample=False)
        assert tuple(sequences.shape) == (6, 1 + L)
        assert torch.equal(sequences[:, 0], bos[:, 0])
        expected = bos
        for _ in range(L):  # one leaf per step, from the whole prefix
            expected = torch.cat([expected, model(expected).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(sequences, expected)


def test_sampling_gives_symbols_after_bos_and_is_reproducible_under_a_seed():
    model = tiny_model()
    bos = torch.full((20, 1), BOS)

    def sample(seed):
        torch.manual_seed(seed)
        return model.generate(bos, do_sample=True, max_new_tokens=L)

    first, again, other = sample(0), sample(0), sample(1)
    assert tuple(first.shape) == (20, 1 + L)
    assert (first[:, 0] == BOS).all() and first[:, 1:].min() >= 0 and first[:, 1:].max() < Q
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_sampling_follows_the_models_next_leaf_distribution():
    # the first leaves of 4000 samples have the frequencies of softmax(logits) at position 0, to 4 standard errors
    model = tiny_model()
    torch.manual_seed(0)
    sequences = model.generate(torch.full((4000, 1), BOS), do_sample=True)
    with torch.no_grad():
        p0 = model(sequences[:1, :1]).logits[0, 0].softmax(-1)[:Q]  # (q,): [MASK] and [PAD] get 0.0
    frequencies = torch.bincount(sequences[:, 1], minlength=Q) / 4000
    assert torch.allclose(frequencies, p0, atol=4 * math.sqrt(0.25 / 4000))


def test_generating_more_than_two_to_the_depth_leaves_raises_naming_the_length():
    with pytest.raises(ValueError, match=r"1 <= T <= 2\*\*depth = 8 .* got \(2, 9\)"):
        tiny_model().generate(torch.full((2, 1), BOS), max_new_tokens=L + 1)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda x: x.index_fill_(1, torch.tensor([0]), 0), r"input_ids\[:, 0\] must be the beginning-of-sequence id"),
        (lambda x: x.index_fill_(1, torch.tensor([3]), BOS), r"input_ids\[:, 1:\] must be leaves, symbols in \[0, q\)"),
        (lambda x: torch.cat([x, x[:, :1]], 1), r"input_ids must have shape \(batch, T\) with 1 <= T <= 2\*\*depth"),
        (lambda x: x[:, :0], r"input_ids must have shape \(batch, T\) with 1 <= T <= 2\*\*depth"),
    ],
    ids=["no-bos", "bos-later", "too-long", "empty"],
)
def test_input_out_of_layout_raises(edit, message):
    with pytest.raises(ValueError, match=message):
        tiny_model()(edit(with_bos(leaves())))


def test_labels_of_another_shape_or_value_raise():
    model, x = tiny_model(), leaves()
    with pytest.raises(ValueError, match=r"labels must have the shape of input_ids \(5, 8\)"):
        model(with_bos(x), labels=x[:, :-1])
    with pytest.raises(ValueError, match=r"labels must lie in \[0, q\)"):
        model(with_bos(x), labels=x.index_fill(1, torch.tensor([2]), BOS))


# ---------------------------------------------------------------- saving and loading


def test_save_and_auto_class_round_trip(tmp_path):
    model = tiny_model()
    x = with_bos(leaves())
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["TreeLangForCausalLM"] and config["is_causal"] is True
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_treelang.TreeLangForCausalLM"
    assert {"generation_config.json", "modeling_treelang.py", "configuration_treelang.py"} <= set(os.listdir(tmp_path))
    loaded, info = AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert type(loaded) is TreeLangForCausalLM
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert torch.equal(loaded.eval()(x).logits, model(x).logits)
    assert loaded.generation_config.max_length == 1 + L and loaded.generation_config.bos_token_id == BOS
    assert type(AutoModelForCausalLM.from_config(tiny_config())) is TreeLangForCausalLM
    assert hf_treelang.TreeLangForCausalLM is TreeLangForCausalLM


def test_a_masked_lm_checkpoint_loads_its_encoder_with_a_new_head_and_back(tmp_path):
    masked_lm = TreeLangForMaskedLM(tiny_config())
    masked_lm.save_pretrained(tmp_path / "mlm")
    causal = load_pretrained(TreeLangForCausalLM, tmp_path / "mlm", expected_missing=("next_leaf_head.",))
    assert causal.config.is_causal and all(layer.attention.is_causal for layer in causal.treelang.layers)
    encoder = masked_lm.treelang.state_dict()
    assert all(torch.equal(value, causal.treelang.state_dict()[key]) for key, value in encoder.items())
    causal.save_pretrained(tmp_path / "causal")
    back = load_pretrained(TreeLangForMaskedLM, tmp_path / "causal", expected_missing=("lm_head.",))
    assert back.config.is_causal is False and not any(layer.attention.is_causal for layer in back.treelang.layers)
    assert set(load_file(tmp_path / "causal" / "model.safetensors")) >= {"next_leaf_head.weight", "next_leaf_head.bias"}


def test_folder_loads_and_generates_with_remote_code_where_hf_treelang_is_not_importable(tmp_path):
    model = tiny_model()
    x = with_bos(leaves())
    model.save_pretrained(tmp_path / "ckpt")
    torch.save({"x": x, "logits": model(x).logits.detach(), "greedy": model.generate(x[:, :1])}, tmp_path / "io.pt")
    script = textwrap.dedent(
        f"""
        import importlib.util, sys
        sys.meta_path[:] = [f for f in sys.meta_path if "hf_treelang" not in getattr(f, "__module__", "")
                            and "hf_treelang" not in type(f).__module__]
        sys.path[:] = [p for p in sys.path if p not in ("", ".") and "/work/main" not in p]
        assert importlib.util.find_spec("hf_treelang") is None, "hf_treelang is still importable"
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained({str(tmp_path / "ckpt")!r}, trust_remote_code=True).eval()
        assert "hf_treelang" not in type(model).__module__, type(model).__module__
        io = torch.load({str(tmp_path / "io.pt")!r})
        logits = model(io["x"]).logits
        assert torch.allclose(logits, io["logits"], atol=1e-6), (logits - io["logits"]).abs().max()
        assert torch.equal(model.generate(io["x"][:, :1]), io["greedy"])
        assert "hf_treelang" not in sys.modules
        print("OK", type(model).__module__)
        """
    )
    env = dict(os.environ, HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1", PYTHONPATH="")
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK transformers_modules" in result.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_forward_and_backward_never_synchronise():
    model = tiny_model().cuda().train()
    x = leaves().cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        model(with_bos(x), labels=x, attention_mask=torch.ones(5, L, device="cuda")).loss.backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
