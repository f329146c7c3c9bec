"""Behaviour of the TreeLang encoder and its heads as transformers models (issue 3)."""

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
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

from hf_treelang import (
    TreeLangConfig,
    TreeLangForMaskedLM,
    TreeLangForSequenceClassification,
    TreeLangModel,
)
from hf_treelang.models.modeling_treelang import sinusoidal_positional_encoding

Q, DEPTH, T = 4, 3, 8
HEADS = (TreeLangModel, TreeLangForSequenceClassification, TreeLangForMaskedLM)


def tiny_config(**overrides) -> TreeLangConfig:
    kwargs = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    kwargs.update(overrides)
    return TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH, **kwargs)


def tiny_model(cls, seed=0, **overrides):
    torch.manual_seed(seed)
    return cls(tiny_config(**overrides)).eval()


def tokens(batch=5, seed=0, depth=DEPTH, q=Q):
    """Symbols in [0, q) with some mask tokens q."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, q + 1, (batch, 2**depth), generator=generator)


def main_output(output):
    return output.last_hidden_state if hasattr(output, "last_hidden_state") else output.logits


# ---------------------------------------------------------------- config


def test_default_config_is_the_paper_model():
    config = TreeLangConfig()
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (128, 4, 1)
    assert (config.intermediate_size, config.hidden_act, config.layer_norm_eps) == (2048, "relu", 1e-5)
    assert (config.vocab_size, config.num_symbols, config.mask_token_id, config.pad_token_id) == (6, 4, 4, 5)
    assert (config.depth, config.max_position_embeddings, config.num_labels) == (4, 16, 4)
    assert config.classifier_pooling == "concat"


def test_from_data_sets_vocabulary_to_q_plus_two_and_records_the_data():
    config = TreeLangConfig.from_data(num_symbols=6, depth=5, filter_level=2, sigma=0.5, grammar_seed=7)
    assert (config.vocab_size, config.num_symbols, config.mask_token_id, config.num_labels) == (8, 6, 6, 6)
    assert (config.depth, config.max_position_embeddings) == (5, 32)
    assert (config.filter_level, config.sigma, config.grammar_seed) == (2, 0.5, 7)


def test_config_round_trips_through_json(tmp_path):
    config = tiny_config(filter_level=1, sigma=0.3, grammar_seed=3)
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, TreeLangConfig)
    assert loaded.to_diff_dict() == config.to_diff_dict()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(hidden_size=30, num_attention_heads=4), "divisible"),
        (dict(vocab_size=2), "vocab_size"),
        (dict(classifier_pooling="max"), "classifier_pooling"),
        (dict(classifier_hidden_size=-1), r"`classifier_hidden_size` must be an integer >= 0 .*got -1"),
        (dict(classifier_hidden_size=2.5), r"`classifier_hidden_size` must be an integer >= 0 .*got 2.5"),
        (dict(depth=0), "depth"),
        (dict(num_labels=3), "num_labels"),
    ],
)
def test_invalid_config_raises_naming_the_parameter(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TreeLangConfig(**kwargs)


def test_num_labels_is_q_and_cannot_be_set_to_another_value():
    config = tiny_config()
    assert config.num_labels == Q and len(config.id2label) == Q
    with pytest.raises(ValueError, match="`num_labels` must equal the number of symbols q = 4, got 3: the root"):
        config.num_labels = 3
    assert config.num_labels == Q and config.id2label == {i: f"symbol_{i}" for i in range(Q)}
    config.num_labels = Q  # the one value that agrees with the head
    assert config.id2label == {i: f"symbol_{i}" for i in range(Q)}
    model = TreeLangForSequenceClassification(config)
    assert model.classifier.out_features == config.num_labels == len(model.config.id2label)


def test_from_pretrained_with_another_num_labels_says_why_and_what_instead(tmp_path):
    tiny_model(TreeLangForSequenceClassification).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"predicts the root symbol.*from_data\(num_symbols=3, \.\.\.\)"):
        TreeLangForSequenceClassification.from_pretrained(tmp_path, num_labels=3)
    loaded = TreeLangForSequenceClassification.from_pretrained(tmp_path, num_labels=Q)
    assert loaded.classifier.out_features == Q


def test_classifier_refuses_an_id2label_of_another_length():
    config = tiny_config()
    config.id2label = {0: "a", 1: "b"}
    with pytest.raises(ValueError, match="config.id2label has 2 labels"):
        TreeLangForSequenceClassification(config)


def test_problem_type_other_than_single_label_is_refused():
    with pytest.raises(ValueError, match="problem_type"):
        tiny_config(problem_type="multi_label_classification")


def test_from_data_rejects_fewer_than_two_symbols():
    with pytest.raises(ValueError, match="num_symbols"):
        TreeLangConfig.from_data(num_symbols=1)


# ---------------------------------------------------------------- shapes and outputs


@pytest.mark.parametrize(
    "cls, shape",
    [
        (TreeLangModel, (5, T, 32)),
        (TreeLangForSequenceClassification, (5, Q)),
        (TreeLangForMaskedLM, (5, T, Q + 2)),  # the symbols, then [MASK] and [PAD] far below them
    ],
)
def test_output_shapes_per_head(cls, shape):
    output = tiny_model(cls)(tokens())
    assert tuple(main_output(output).shape) == shape


def test_mean_pooling_classifier_reads_a_d_vector():
    model = tiny_model(TreeLangForSequenceClassification, classifier_pooling="mean")
    assert model.classifier.in_features == 32
    assert tuple(model(tokens()).logits.shape) == (5, Q)


def test_concat_classifier_reads_all_tokens_position_wise():
    model = tiny_model(TreeLangForSequenceClassification)
    assert model.classifier.in_features == 32 * T
    x = tokens()
    with torch.no_grad():
        states = model.treelang(x).last_hidden_state  # (b, T, d)
        expected = states.reshape(5, -1) @ model.classifier.weight.T + model.classifier.bias
        assert torch.allclose(model(x).logits, expected, atol=1e-6)


def test_hidden_states_are_embedding_plus_every_layer():
    model = tiny_model(TreeLangModel)
    x = tokens()
    output = model(x, output_hidden_states=True)
    assert len(output.hidden_states) == 3
    assert all(tuple(h.shape) == (5, T, 32) for h in output.hidden_states)
    assert torch.equal(output.hidden_states[0], model.embeddings(x))
    assert torch.equal(output.hidden_states[-1], output.last_hidden_state)


def test_attentions_are_real_maps_under_sdpa():
    model = tiny_model(TreeLangModel)
    assert model.config._attn_implementation == "sdpa"
    output = model(tokens(), output_attentions=True, output_hidden_states=True)
    assert len(output.attentions) == 2
    for layer, maps in zip(model.layers, output.attentions):
        assert tuple(maps.shape) == (5, 2, T, T)
        assert torch.allclose(maps.sum(-1), torch.ones(5, 2, T), atol=1e-6)
    # Recompute the first layer's maps by hand from its input.
    attention = model.layers[0].attention
    q, k, _ = attention.in_proj(output.hidden_states[0]).view(5, T, 3, 2, 16).permute(2, 0, 3, 1, 4)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(16), dim=-1)  # (b, heads, T, T)
    assert torch.allclose(output.attentions[0], expected, atol=1e-6)


def test_eager_and_sdpa_outputs_agree():
    sdpa = tiny_model(TreeLangForMaskedLM, attn_implementation="sdpa")
    eager = tiny_model(TreeLangForMaskedLM, attn_implementation="eager")
    assert eager.config._attn_implementation == "eager"
    x = tokens()
    with torch.no_grad():
        assert torch.allclose(sdpa(x).logits, eager(x).logits, atol=1e-5)
        assert torch.allclose(sdpa(x, output_attentions=True).logits, sdpa(x).logits, atol=1e-5)


def test_tuple_and_dict_returns_agree():
    model = tiny_model(TreeLangForSequenceClassification)
    x, roots = tokens(), torch.tensor([0, 1, 2, 3, 0])
    as_dict = model(x, labels=roots, output_hidden_states=True)
    as_tuple = model(x, labels=roots, output_hidden_states=True, return_dict=False)
    assert torch.equal(as_tuple[0], as_dict.loss)
    assert torch.equal(as_tuple[1], as_dict.logits)
    assert all(torch.equal(a, b) for a, b in zip(as_tuple[2], as_dict.hidden_states))


def test_eval_mode_is_deterministic():
    model = tiny_model(TreeLangForMaskedLM)
    x = tokens()
    assert torch.equal(model(x).logits, model(x).logits)


def test_batched_outputs_equal_per_sample_outputs():
    model = tiny_model(TreeLangForSequenceClassification)
    x = tokens(batch=6)
    with torch.no_grad():
        batched = model(x).logits
        single = torch.cat([model(x[i : i + 1]).logits for i in range(6)])
    assert torch.allclose(batched, single, atol=1e-5)


def test_zero_dropout_training_equals_eval():
    model = tiny_model(TreeLangForMaskedLM, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    x = tokens()
    with torch.no_grad():
        evaluated = model.eval()(x).logits
        trained = model.train()(x).logits
    assert torch.allclose(evaluated, trained, atol=1e-6)


def test_get_input_embeddings_is_the_token_embedding():
    for cls in HEADS:
        embedding = tiny_model(cls).get_input_embeddings()
        assert isinstance(embedding, nn.Embedding)
        assert tuple(embedding.weight.shape) == (Q + 1, 32)  # the symbols and the mask: [PAD] is never an input
        assert embedding.num_embeddings == tiny_config().num_embeddings


def test_positional_encoding_is_fixed_sinusoidal_buffer():
    model = tiny_model(TreeLangModel)
    pe = model.embeddings.positional_encoding
    assert all(parameter is not pe for parameter in model.parameters())
    assert torch.allclose(pe[3, 0], torch.tensor(math.sin(3.0)))
    assert torch.allclose(pe[3, 1], torch.tensor(math.cos(3.0)))
    assert torch.allclose(pe[5, 2], torch.tensor(math.sin(5 / 10000 ** (2 / 32))))


@pytest.mark.parametrize("cls", [TreeLangForSequenceClassification, TreeLangForMaskedLM])
def test_gradient_reaches_every_parameter_in_train_mode(cls):
    model = tiny_model(cls).train()
    x = tokens()
    labels = torch.tensor([0, 1, 2, 3, 0]) if cls is TreeLangForSequenceClassification else x.clamp(max=Q - 1)
    model(x, labels=labels).loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_mlm_loss_averages_cross_entropy_over_masked_positions_only():
    model = tiny_model(TreeLangForMaskedLM)
    x = tokens()
    labels = torch.full_like(x, -100)
    labels[:, 2] = 1
    labels[0, 5] = 3
    output = model(x, labels=labels)
    picked = torch.cat([output.logits[:, 2], output.logits[0:1, 5]])  # (6, q)
    expected = nn.functional.cross_entropy(picked, torch.tensor([1, 1, 1, 1, 1, 3]))
    assert torch.allclose(output.loss, expected, atol=1e-6)


def test_freeze_encoder_leaves_only_the_head_trainable():
    model = tiny_model(TreeLangForSequenceClassification).train()
    model.freeze_encoder()
    assert not any(p.requires_grad for p in model.treelang.parameters())
    model(tokens(), labels=torch.tensor([0, 1, 2, 3, 0])).loss.backward()
    assert all(p.grad is None for p in model.treelang.parameters())
    assert model.classifier.weight.grad is not None
    model.freeze_encoder(False)
    assert all(p.requires_grad for p in model.treelang.parameters())


# ---------------------------------------------------------------- fidelity to torch.nn.TransformerEncoder


def test_matches_torch_transformer_encoder_with_identical_weights():
    torch.manual_seed(0)
    config = TreeLangConfig()  # paper sizes: d=128, 4 layers, 1 head, d'=2048
    model = TreeLangModel(config).eval()
    layer = nn.TransformerEncoderLayer(128, 1, 2048, 0.1, batch_first=True, norm_first=False)
    reference = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).eval()
    with torch.no_grad():
        for ours, theirs in zip(model.layers, reference.layers):
            theirs.self_attn.in_proj_weight.copy_(ours.attention.in_proj.weight)
            theirs.self_attn.in_proj_bias.copy_(ours.attention.in_proj.bias)
            theirs.self_attn.out_proj.load_state_dict(ours.attention.out_proj.state_dict())
            theirs.linear1.load_state_dict(ours.linear1.state_dict())
            theirs.linear2.load_state_dict(ours.linear2.state_dict())
            theirs.norm1.load_state_dict(ours.attention_norm.state_dict())
            theirs.norm2.load_state_dict(ours.feed_forward_norm.state_dict())
        x = tokens(batch=8, depth=4)
        embedded = model.get_input_embeddings()(x) + sinusoidal_positional_encoding(16, 128)  # (b, 16, d)
        expected = reference(embedded)
        actual = model(x).last_hidden_state
    assert torch.allclose(actual, expected, atol=1e-6), (actual - expected).abs().max()


# ---------------------------------------------------------------- saving and loading


@pytest.mark.parametrize("cls", HEADS)
def test_save_load_save_round_trip_gives_identical_outputs(cls, tmp_path):
    model = tiny_model(cls)
    x = tokens()
    model.save_pretrained(tmp_path / "a")
    loaded = cls.from_pretrained(tmp_path / "a").eval()
    loaded.save_pretrained(tmp_path / "b")
    reloaded = cls.from_pretrained(tmp_path / "b").eval()
    assert torch.equal(main_output(model(x)), main_output(loaded(x)))
    assert torch.equal(main_output(model(x)), main_output(reloaded(x)))
    first, second = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def test_save_writes_safetensors_code_and_complete_auto_map(tmp_path):
    tiny_model(TreeLangForMaskedLM).save_pretrained(tmp_path)
    files = set(os.listdir(tmp_path))
    assert {"model.safetensors", "config.json", "configuration_treelang.py", "modeling_treelang.py"} <= files
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "configuration_treelang.TreeLangConfig",
        "AutoModel": "modeling_treelang.TreeLangModel",
        "AutoModelForMaskedLM": "modeling_treelang.TreeLangForMaskedLM",
        "AutoModelForSequenceClassification": "modeling_treelang.TreeLangForSequenceClassification",
        "AutoModelForCausalLM": "modeling_treelang.TreeLangForCausalLM",
    }
    for name in ("modeling_treelang.py", "configuration_treelang.py"):
        code = (tmp_path / name).read_text()
        assert "import hf_treelang" not in code and "from hf_treelang" not in code


def test_auto_classes_resolve_to_treelang_classes(tmp_path):
    config = tiny_config()
    assert type(AutoModel.from_config(config)) is TreeLangModel
    assert type(AutoModelForMaskedLM.from_config(config)) is TreeLangForMaskedLM
    assert type(AutoModelForSequenceClassification.from_config(config)) is TreeLangForSequenceClassification
    tiny_model(TreeLangForMaskedLM).save_pretrained(tmp_path)
    assert type(AutoModelForMaskedLM.from_pretrained(tmp_path)) is TreeLangForMaskedLM


def test_from_pretrained_on_meta_device_loads_every_weight(tmp_path):
    model = tiny_model(TreeLangForSequenceClassification)
    model.save_pretrained(tmp_path)
    loaded, info = TreeLangForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    saved = load_file(tmp_path / "model.safetensors")
    state = loaded.state_dict()
    assert saved.keys() == state.keys()
    assert all(torch.equal(saved[key], state[key]) for key in saved)
    # The non-persistent sinusoidal table is rebuilt after the meta-device construction.
    assert torch.equal(loaded.treelang.embeddings.positional_encoding, sinusoidal_positional_encoding(T, 32))
    with torch.device("meta"):
        on_meta = TreeLangForSequenceClassification(tiny_config())
    assert all(p.is_meta for p in on_meta.parameters())
    on_meta.load_state_dict(saved, assign=True)
    on_meta.treelang.embeddings.positional_encoding = sinusoidal_positional_encoding(T, 32)
    assert torch.equal(on_meta.eval()(tokens()).logits, model(tokens()).logits)


def test_mlm_checkpoint_loads_into_classifier_keeping_the_encoder(tmp_path):
    mlm = tiny_model(TreeLangForMaskedLM)
    mlm.save_pretrained(tmp_path)
    classifier, info = TreeLangForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert set(info["missing_keys"]) == {"classifier.weight", "classifier.bias"}
    encoder = mlm.treelang.state_dict()
    assert all(torch.equal(value, classifier.treelang.state_dict()[key]) for key, value in encoder.items())
    assert classifier.classifier.weight.abs().sum() > 0


def test_two_layer_root_readout_is_built_from_the_config_and_reloads_with_auto_classes(tmp_path):
    model = tiny_model(TreeLangForSequenceClassification, classifier_hidden_size=5)
    head = model.classifier
    assert (head.dense.in_features, head.dense.out_features, head.out_proj.out_features) == (32 * T, 5, Q)
    x = tokens()
    expected = head.out_proj(torch.relu(head.dense(model.treelang(x).last_hidden_state.flatten(1))))  # (B, q)
    assert torch.equal(model(x).logits, expected)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["classifier_hidden_size"] == 5
    loaded, info = AutoModelForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert set(load_file(tmp_path / "model.safetensors")) >= {"classifier.dense.weight", "classifier.out_proj.bias"}
    assert torch.equal(loaded.eval()(x).logits, model(x).logits)


def test_linear_checkpoint_without_the_hidden_size_key_loads_unchanged(tmp_path):
    # a checkpoint saved before `classifier_hidden_size` existed: config.json lacks the key
    model = tiny_model(TreeLangForSequenceClassification)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["classifier_hidden_size"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert set(load_file(tmp_path / "model.safetensors")) >= {"classifier.weight", "classifier.bias"}
    loaded, info = TreeLangForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert type(loaded.classifier) is nn.Linear and loaded.config.classifier_hidden_size == 0
    assert torch.equal(loaded.eval()(tokens()).logits, model(tokens()).logits)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_from_pretrained_refuses_a_bad_classifier_hidden_size_before_building(bad, tmp_path):
    tiny_model(TreeLangForMaskedLM).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=rf"`classifier_hidden_size` must be an integer >= 0 .*got {bad!r}"):
        TreeLangForSequenceClassification.from_pretrained(tmp_path, classifier_hidden_size=bad)


def test_mlm_checkpoint_loads_into_a_two_layer_readout_keeping_the_encoder(tmp_path):
    mlm = tiny_model(TreeLangForMaskedLM)
    mlm.save_pretrained(tmp_path)
    classifier, info = TreeLangForSequenceClassification.from_pretrained(
        tmp_path, classifier_hidden_size=6, output_loading_info=True
    )
    assert set(info["missing_keys"]) == {f"classifier.{layer}.{p}" for layer in ("dense", "out_proj")
                                         for p in ("weight", "bias")}
    encoder = mlm.treelang.state_dict()
    assert all(torch.equal(value, classifier.treelang.state_dict()[key]) for key, value in encoder.items())
    dense = classifier.classifier.dense
    bound = 1 / math.sqrt(dense.in_features)  # nn.Linear's default: U(±1/√fan_in), weight and bias
    assert 0 < dense.weight.abs().max() <= bound and 0 < dense.bias.abs().max() <= bound


def test_folder_loads_with_remote_code_where_hf_treelang_is_not_importable(tmp_path):
    model = tiny_model(TreeLangForSequenceClassification)
    x = tokens()
    model.save_pretrained(tmp_path / "ckpt")
    torch.save({"x": x, "logits": model(x).logits.detach()}, tmp_path / "io.pt")
    script = textwrap.dedent(
        f"""
        import importlib.util, sys
        sys.meta_path[:] = [f for f in sys.meta_path if "hf_treelang" not in getattr(f, "__module__", "")
                            and "hf_treelang" not in type(f).__module__]
        sys.path[:] = [p for p in sys.path if p not in ("", ".") and "/work/main" not in p]
        assert importlib.util.find_spec("hf_treelang") is None, "hf_treelang is still importable"
        import torch
        from transformers import AutoModelForSequenceClassification
        model = AutoModelForSequenceClassification.from_pretrained({str(tmp_path / "ckpt")!r}, trust_remote_code=True)
        assert "hf_treelang" not in type(model).__module__, type(model).__module__
        io = torch.load({str(tmp_path / "io.pt")!r})
        logits = model.eval()(io["x"]).logits
        assert torch.allclose(logits, io["logits"], atol=1e-6), (logits - io["logits"]).abs().max()
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


# ---------------------------------------------------------------- bad input


def test_sequence_length_other_than_two_to_the_depth_raises():
    model = tiny_model(TreeLangForSequenceClassification)
    for length in (T - 1, T + 1, 2 * T):
        with pytest.raises(ValueError, match="2\\*\\*depth"):
            model(torch.zeros(2, length, dtype=torch.long))


@pytest.mark.parametrize("bad", [-1, Q + 1])
def test_token_ids_outside_zero_to_q_raise(bad):
    x = tokens()
    x[1, 3] = bad
    with pytest.raises(ValueError, match="input_ids must lie in \\[0, q\\]"):
        tiny_model(TreeLangModel)(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8, torch.int16, torch.bool])
def test_input_ids_of_another_dtype_raise_naming_the_dtype(dtype):
    with pytest.raises(TypeError, match=f"input_ids must have dtype torch.int64 or torch.int32, got dtype {dtype}"):
        tiny_model(TreeLangModel)(tokens().to(dtype))


@pytest.mark.parametrize("model_class", [TreeLangModel, TreeLangForMaskedLM, TreeLangForSequenceClassification])
def test_an_empty_batch_raises_naming_its_shape(model_class):
    with pytest.raises(ValueError, match=r"input_ids must hold at least one sequence \(batch >= 1\), got shape \(0, "):
        tiny_model(model_class)(tokens()[:0])


def test_input_ids_that_are_not_a_tensor_raise_naming_the_type():
    with pytest.raises(TypeError, match="input_ids must be a tensor .* got a list"):
        tiny_model(TreeLangModel)(tokens().tolist())


def test_int32_ids_and_labels_give_the_int64_outputs():
    model = tiny_model(TreeLangForMaskedLM)
    x = tokens()
    labels = torch.full_like(x, -100)
    labels[:, 1] = x[:, 1].clamp(max=Q - 1)
    wide, narrow = model(x, labels=labels), model(x.int(), labels=labels.int())
    assert torch.equal(wide.logits, narrow.logits) and torch.equal(wide.loss, narrow.loss)


def test_labels_of_another_dtype_raise_naming_the_dtype():
    with pytest.raises(TypeError, match="labels must have dtype .* got dtype torch.float32"):
        tiny_model(TreeLangForSequenceClassification)(tokens(), labels=torch.zeros(5))


@pytest.mark.parametrize("labels", [torch.zeros(5, 1, dtype=torch.long), torch.zeros(4, dtype=torch.long)])
def test_classifier_labels_of_wrong_shape_raise(labels):
    with pytest.raises(ValueError, match="labels must have shape \\(batch,\\)"):
        tiny_model(TreeLangForSequenceClassification)(tokens(), labels=labels)


def test_mlm_labels_of_wrong_shape_raise():
    with pytest.raises(ValueError, match="labels must have the shape of input_ids"):
        tiny_model(TreeLangForMaskedLM)(tokens(), labels=torch.zeros(5, dtype=torch.long))


def test_mask_token_as_a_target_raises():
    labels = torch.full((5, T), -100)
    labels[0, 0] = Q
    with pytest.raises(ValueError, match="labels must lie in \\[0, q\\)"):
        tiny_model(TreeLangForMaskedLM)(tokens(), labels=labels)


def test_default_initialisation_matches_the_paper_code_pytorch_defaults():
    # The paper's model is nn.Embedding + nn.TransformerEncoderLayer + nn.Linear with PyTorch's default init.
    torch.manual_seed(0)
    config = TreeLangConfig()
    model = TreeLangForSequenceClassification(config)
    reference = torch.nn.TransformerEncoderLayer(128, 1, 2048, batch_first=True)
    layer = model.treelang.layers[0]
    pairs = [
        (layer.attention.in_proj.weight, reference.self_attn.in_proj_weight),
        (layer.attention.out_proj.weight, reference.self_attn.out_proj.weight),
        (layer.linear1.weight, reference.linear1.weight),
        (layer.linear1.bias, reference.linear1.bias),
        (layer.linear2.weight, reference.linear2.weight),
    ]
    for ours, theirs in pairs:
        bound = theirs.abs().max().item()
        assert ours.abs().max().item() <= bound * 1.001
        assert ours.std().item() == pytest.approx(theirs.std().item(), rel=0.05)
    assert torch.count_nonzero(layer.attention.in_proj.bias) == 0
    assert torch.count_nonzero(layer.attention.out_proj.bias) == 0
    assert model.treelang.embeddings.token_embeddings.weight.std().item() == pytest.approx(1.0, rel=0.15)  # N(0, 1)
    xavier = TreeLangForSequenceClassification(TreeLangConfig(initializer="xavier"))
    assert torch.count_nonzero(xavier.treelang.layers[0].linear1.bias) == 0
    with pytest.raises(ValueError, match="initializer"):
        TreeLangConfig(initializer="orthogonal")


def test_loading_the_packages_own_checkpoints_is_quiet_and_checks_the_keys_itself(tmp_path, capfd):
    """No LOAD REPORT table nor progress bar (they fill logs); the keys are checked instead, in one error."""
    from safetensors.torch import load_file, save_file

    from hf_treelang.models.loading import load_pretrained

    tiny_model(TreeLangForMaskedLM).save_pretrained(tmp_path / "mlm")
    capfd.readouterr()
    model = load_pretrained(TreeLangForSequenceClassification, tmp_path / "mlm", expected_missing=("classifier.",))
    captured = capfd.readouterr()
    assert isinstance(model, TreeLangForSequenceClassification)
    assert "LOAD REPORT" not in captured.err + captured.out and "Loading weights" not in captured.err
    with pytest.raises(ValueError, match=r"does not fit TreeLangForSequenceClassification \(missing: "
                                         r"classifier.bias, classifier.weight\)"):
        load_pretrained(TreeLangForSequenceClassification, tmp_path / "mlm")
    weights = load_file(tmp_path / "mlm" / "model.safetensors")
    weights.pop(next(key for key in weights if key.endswith("linear1.weight")))
    save_file(weights, tmp_path / "mlm" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"\(missing: treelang.layers.0.linear1.weight"):
        load_pretrained(TreeLangForMaskedLM, tmp_path / "mlm")
