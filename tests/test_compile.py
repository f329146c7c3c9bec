"""The TreeLang model captured whole: torch.compile(fullgraph=True), torch.export, the attention interface, gradient
checkpointing with a real Trainer, and the value checks that moved out of `forward` (issue 11 item 1, issue 12).

Tiny configs (depth 3, hidden 32, 2 layers, 2 heads) keep every test to a few seconds on a CPU. Tolerances: outputs of
a compiled or exported graph equal eager to 1e-6 (same kernels, same order); eager and SDPA attention agree to 1e-5.
"""

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from hf_treelang import TreeLangConfig, TreeLangForMaskedLM, TreeLangForSequenceClassification, TreeLangModel
from hf_treelang.models.modeling_treelang import (
    TreeLangSelfAttention,
    check_input_ids,
    check_labels,
    eager_attention_forward,
)
from hf_treelang.train.collators import MaskedLeafCollator, PremaskedCollator, RootClassificationCollator
from hf_treelang.train.data import EvaluationSet, RunData, to_datasets

Q, DEPTH, T, HIDDEN, HEADS = 4, 3, 8, 32, 2


def tiny_config(**overrides) -> TreeLangConfig:
    kwargs = dict(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=HEADS, intermediate_size=64)
    kwargs.update(overrides)
    return TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH, **kwargs)


def tiny_model(cls, seed=0, **overrides):
    torch.manual_seed(seed)
    return cls(tiny_config(**overrides)).eval()


def inputs(cls, batch=5, seed=0) -> dict:
    """`input_ids` (batch, T) with some mask ids, and the head's labels: roots (batch,) or MLM labels (batch, T)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, Q + 1, (batch, T), generator=generator)
    if cls is TreeLangForSequenceClassification:
        return {"input_ids": input_ids, "labels": torch.randint(0, Q, (batch,), generator=generator)}
    if cls is TreeLangForMaskedLM:
        labels = torch.full((batch, T), -100)
        labels[:, 3] = torch.randint(0, Q, (batch,), generator=generator)
        return {"input_ids": input_ids, "labels": labels}
    return {"input_ids": input_ids}


def main_output(output):
    return output.last_hidden_state if hasattr(output, "last_hidden_state") else output.logits


def assert_outputs_equal(actual, expected, atol=1e-6):
    assert torch.allclose(main_output(actual), main_output(expected), atol=atol)
    if getattr(expected, "loss", None) is not None:
        assert torch.allclose(actual.loss, expected.loss, atol=atol)


CASES = [
    (TreeLangModel, False),
    (TreeLangForMaskedLM, False),
    (TreeLangForMaskedLM, True),
    (TreeLangForSequenceClassification, False),
    (TreeLangForSequenceClassification, True),
]
CASE_IDS = ["encoder", "mlm", "mlm-labels", "root", "root-labels"]


def case_inputs(cls, with_labels, **kwargs) -> dict:
    batch = inputs(cls, **kwargs)
    if not with_labels:
        batch.pop("labels", None)
    return batch


# ---------------------------------------------------------------- torch.compile


@pytest.mark.parametrize("cls, with_labels", CASES, ids=CASE_IDS)
def test_compile_fullgraph_matches_eager(cls, with_labels):
    torch._dynamo.reset()
    model = tiny_model(cls)
    batch = case_inputs(cls, with_labels)
    compiled = torch.compile(model, fullgraph=True, backend="eager")  # fails on any graph break or host sync
    with torch.no_grad():
        assert_outputs_equal(compiled(**batch), model(**batch))


def test_compile_fullgraph_aot_autograd_trains_like_eager():
    torch._dynamo.reset()
    model = tiny_model(TreeLangForSequenceClassification, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    batch = inputs(TreeLangForSequenceClassification)
    model.train()
    model(**batch).loss.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    compiled(**batch).loss.backward()
    for name, parameter in model.named_parameters():
        assert torch.allclose(parameter.grad, expected[name], atol=1e-6), name


def test_compile_with_output_attentions_and_hidden_states_matches_eager():
    torch._dynamo.reset()
    model = tiny_model(TreeLangModel)
    x = inputs(TreeLangModel)["input_ids"]
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        actual = compiled(x, output_attentions=True, output_hidden_states=True)
        expected = model(x, output_attentions=True, output_hidden_states=True)
    assert len(actual.attentions) == 2 and len(actual.hidden_states) == 3
    for a, b in zip(actual.attentions + actual.hidden_states, expected.attentions + expected.hidden_states):
        assert torch.allclose(a, b, atol=1e-6)


def test_compiled_model_still_names_a_bad_dtype():
    torch._dynamo.reset()
    model = tiny_model(TreeLangModel)
    with pytest.raises(TypeError, match="got dtype torch.float32"):
        torch.compile(model, backend="eager")(torch.zeros(2, T))
    # fullgraph turns the error into dynamo's "observed exception", which still carries our message
    with pytest.raises(Exception, match="input_ids must have dtype torch.int64 or torch.int32, got dtype torch.float32"):
        torch.compile(model, fullgraph=True, backend="eager")(torch.zeros(2, T))


# ---------------------------------------------------------------- torch.export


@pytest.mark.parametrize("cls, with_labels", CASES, ids=CASE_IDS)
def test_export_with_static_batch_matches_eager(cls, with_labels):
    model = tiny_model(cls)
    batch = case_inputs(cls, with_labels)
    exported = torch.export.export(model, args=(), kwargs=batch)
    with torch.no_grad():
        assert_outputs_equal(exported.module()(**batch), model(**batch))


WITH_LABELS = [(cls, labels) for cls, labels in CASES if labels or cls is TreeLangModel]


@pytest.mark.parametrize("cls, with_labels", WITH_LABELS, ids=["encoder", "mlm-labels", "root-labels"])
def test_export_with_dynamic_batch_matches_eager_on_another_batch_size(cls, with_labels):
    model = tiny_model(cls)
    batch_dim = torch.export.Dim("batch", min=1, max=4096)
    traced = case_inputs(cls, with_labels, batch=5)
    dynamic_shapes = {name: {0: batch_dim} for name in traced}
    exported = torch.export.export(model, args=(), kwargs=traced, dynamic_shapes=dynamic_shapes)
    for size in (1, 11):
        other = case_inputs(cls, with_labels, batch=size, seed=size)
        with torch.no_grad():
            assert_outputs_equal(exported.module()(**other), model(**other))


def test_forward_reads_no_tensor_value_off_the_cpu():
    # A meta tensor has no values: any host read (int(x.min()), bool(mask.all()), boolean indexing) would raise.
    with torch.device("meta"):
        model = TreeLangForMaskedLM(tiny_config())
    batch = {name: tensor.to("meta") for name, tensor in inputs(TreeLangForMaskedLM).items()}
    output = model(**batch, attention_mask=torch.ones(5, T, device="meta"), output_attentions=True)
    assert output.logits.shape == (5, T, Q + 2) and output.loss.shape == ()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_forward_and_backward_never_synchronise():
    model = tiny_model(TreeLangForMaskedLM).cuda().train()
    batch = {name: tensor.cuda() for name, tensor in inputs(TreeLangForMaskedLM).items()}
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        model(**batch, attention_mask=torch.ones(5, T, device="cuda")).loss.backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")


# ---------------------------------------------------------------- attention interface


class SdpaCalls:
    """Counts calls of torch's scaled_dot_product_attention (the "sdpa" kernel of transformers' interface)."""

    def __init__(self, monkeypatch):
        self.count = 0
        original = torch.nn.functional.scaled_dot_product_attention

        def counted(*args, **kwargs):
            self.count += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counted)


def test_set_attn_implementation_switches_the_kernel_and_keeps_the_outputs(monkeypatch):
    calls = SdpaCalls(monkeypatch)
    model = tiny_model(TreeLangForMaskedLM)
    x = inputs(TreeLangForMaskedLM)["input_ids"]
    assert model.config._attn_implementation == "sdpa"
    with torch.no_grad():
        by_sdpa = model(x).logits
        assert calls.count == 2  # one per layer
        model.set_attn_implementation("eager")
        assert model.config._attn_implementation == "eager"
        assert all(layer.attention.config._attn_implementation == "eager" for layer in model.treelang.layers)
        by_eager = model(x).logits
        assert calls.count == 2  # eager never calls SDPA
        model.set_attn_implementation("sdpa")
        assert torch.equal(model(x).logits, by_sdpa)
        assert calls.count == 4
    assert torch.allclose(by_eager, by_sdpa, atol=1e-5)


def test_from_pretrained_attn_implementation_takes_effect(tmp_path, monkeypatch):
    model = tiny_model(TreeLangForSequenceClassification)
    model.save_pretrained(tmp_path)
    calls = SdpaCalls(monkeypatch)
    eager = TreeLangForSequenceClassification.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert eager.config._attn_implementation == "eager"
    x = inputs(TreeLangForSequenceClassification)["input_ids"]
    with torch.no_grad():
        logits = eager(x).logits
        assert calls.count == 0
        assert torch.allclose(logits, model(x).logits, atol=1e-5)
        assert calls.count == 2


def test_output_attentions_gives_the_maps_whatever_the_implementation():
    model = tiny_model(TreeLangModel)
    x = inputs(TreeLangModel)["input_ids"]
    maps = {}
    for implementation in ("sdpa", "eager"):
        model.set_attn_implementation(implementation)
        output = model(x, output_attentions=True, output_hidden_states=True)
        maps[implementation] = output.attentions
        # the first layer's maps from its input, by hand
        query, key, _ = model.layers[0].attention.in_proj(output.hidden_states[0]).view(5, T, 3, HEADS, 16).unbind(2)
        scores = query.transpose(1, 2) @ key.transpose(1, 2).transpose(-2, -1) / math.sqrt(16)  # (b, heads, T, T)
        assert torch.allclose(output.attentions[0], torch.softmax(scores, -1), atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(maps["sdpa"], maps["eager"]))


def test_a_registered_attention_function_is_used(monkeypatch):
    from transformers import AttentionInterface

    calls = []

    def recording_attention(module, query, key, value, attention_mask, **kwargs):
        calls.append(tuple(query.shape))
        return eager_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("treelang_test_recording", recording_attention)
    model = tiny_model(TreeLangModel)
    x = inputs(TreeLangModel)["input_ids"]
    with torch.no_grad():
        expected = model(x).last_hidden_state
        model.set_attn_implementation("treelang_test_recording")
        actual = model(x).last_hidden_state
    assert calls == [(5, HEADS, T, 16)] * 2
    assert torch.allclose(actual, expected, atol=1e-5)


def test_attention_is_not_causal_under_sdpa():
    # SDPA kernels read `is_causal` from the module: the first leaf must see the last one.
    assert TreeLangSelfAttention.is_causal is False
    model = tiny_model(TreeLangModel)
    x = inputs(TreeLangModel)["input_ids"]
    changed = x.clone()
    changed[:, -1] = (changed[:, -1] + 1) % (Q + 1)
    with torch.no_grad():
        first, first_changed = model(x).last_hidden_state[:, 0], model(changed).last_hidden_state[:, 0]  # (b, d)
    assert (first - first_changed).abs().amax(-1).min() > 1e-4


# ---------------------------------------------------------------- gradient checkpointing


def gradients(checkpointing: bool) -> dict:
    model = tiny_model(TreeLangForMaskedLM).train()  # dropout on: the recomputation must replay the same masks
    if checkpointing:
        model.activation_checkpointing_enable()
    recomputed = []
    model.treelang.layers[0].attention.register_forward_hook(lambda *_: recomputed.append(1))
    torch.manual_seed(1)
    model(**inputs(TreeLangForMaskedLM)).loss.backward()
    assert len(recomputed) == (2 if checkpointing else 1)  # the checkpointed layer runs again in backward
    return {name: parameter.grad for name, parameter in model.named_parameters()}


def test_gradient_checkpointing_gives_the_gradients_of_the_plain_run():
    plain, checkpointed = gradients(False), gradients(True)
    for name, grad in plain.items():
        assert torch.allclose(checkpointed[name], grad, atol=1e-6), name


def test_trainer_with_gradient_checkpointing_trains(tmp_path):
    import datasets
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(0)
    model = TreeLangForMaskedLM(tiny_config())
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    leaves = np.random.default_rng(0).integers(0, Q, (32, T))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # v5 renames it activation_checkpointing
        args = TrainingArguments(
            str(tmp_path), max_steps=3, per_device_train_batch_size=8, gradient_checkpointing=True, use_cpu=True,
            report_to=[], save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0,
        )
        trainer = Trainer(model=model, args=args, train_dataset=datasets.Dataset.from_dict({"input_ids": leaves}),
                          data_collator=MaskedLeafCollator(Q, seed=0))
        result = trainer.train()
    assert all(layer.gradient_checkpointing for layer in model.treelang.layers)
    assert math.isfinite(result.training_loss) and result.training_loss > 0
    assert all(not torch.equal(before[name], parameter) for name, parameter in model.named_parameters())


# ---------------------------------------------------------------- values checked by the collators and the data path


def test_check_input_ids_and_labels_give_the_range_received():
    x = torch.tensor([[0, 1, 2, Q]])
    check_input_ids(x, Q, T // 2)
    with pytest.raises(ValueError, match=r"input_ids must lie in \[0, q\) = \[0, 4\).*got values in \[0, 4\]"):
        check_input_ids(x, Q, allow_mask=False)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, q\) = \[0, 4\) or be -100, got values in \[-3, 1\]"):
        check_labels(torch.tensor([[-100, 1, -3, -100]]), Q, (1, 4), allow_ignored=True)
    with pytest.raises(ValueError, match="at least one position with a target"):
        check_labels(torch.full((1, 4), -100), Q, (1, 4), allow_ignored=True)
    with pytest.raises(TypeError, match="got dtype torch.int16"):
        check_labels(torch.zeros(3, dtype=torch.int16), Q)


@pytest.mark.parametrize(
    "collator, features, error, message",
    [
        (MaskedLeafCollator(Q, seed=0), [{"input_ids": [0, 1, 2, Q]}], ValueError,
         r"input_ids must lie in \[0, q\) = \[0, 4\)"),
        (MaskedLeafCollator(Q, seed=0), [{"input_ids": [0, 1.5, 2, 3]}], TypeError, "got dtype float64"),
        (MaskedLeafCollator(Q, seed=0), [{"input_ids": [0, 1, 2, 3]}, {"input_ids": [0, 1]}], ValueError,
         r"same length, got lengths \[2, 4\]"),
        (MaskedLeafCollator(Q, seed=0), [{"input_ids": [Q, 1], "labels": [Q, -100]}], ValueError,
         r"labels must lie in \[0, q\) = \[0, 4\) or be -100"),
        (PremaskedCollator(Q), [{"input_ids": [Q + 1, 1], "labels": [1, -100]}], ValueError,
         r"input_ids must lie in \[0, q\] = \[0, 4\]"),
        (RootClassificationCollator(num_symbols=Q), [{"input_ids": [0, 1], "labels": Q}], ValueError,
         r"labels must lie in \[0, q\) = \[0, 4\), got values in \[4, 4\]"),
        (RootClassificationCollator(num_symbols=Q), [{"input_ids": [0, -1], "labels": 0}], ValueError,
         r"input_ids must lie in \[0, q\)"),
    ],
)
def test_collators_refuse_bad_values_with_a_clear_error(collator, features, error, message):
    with pytest.raises(error, match=message):
        collator(features)


@pytest.mark.parametrize("task", ["mlm", "root"])
@pytest.mark.parametrize("split, column, value", [("train", "leaves", Q), ("validation", "roots", -1),
                                                  ("test", "leaves", 7)])
def test_the_data_path_refuses_bad_values_before_training(task, split, column, value):
    def evaluation_set(seed):
        rng = np.random.default_rng(seed)
        return EvaluationSet(rng.integers(0, Q, (6, T)), rng.integers(0, Q, 6), seed)

    data = RunData(grammar=None, train=evaluation_set(0), validation=evaluation_set(1), tests={2: evaluation_set(2)})
    to_datasets(task, data, Q)  # good data passes
    bad = {"train": data.train, "validation": data.validation, "test": data.tests[2]}[split]
    getattr(bad, column)[1] = value
    name = "k_test=2 test" if split == "test" else split
    with pytest.raises(ValueError, match=f"the {name} split: (input_ids|labels) must lie in"):
        to_datasets(task, data, Q)


def test_eager_cpu_forward_still_checks_values():
    model = tiny_model(TreeLangForMaskedLM)
    batch = inputs(TreeLangForMaskedLM)
    with pytest.raises(ValueError, match="attention_mask must be all ones"):
        model(**batch, attention_mask=torch.zeros(5, T, dtype=torch.long))
    with pytest.raises(ValueError, match=r"attention_mask must have the shape of input_ids \(5, 8\)"):
        model(**batch, attention_mask=torch.ones(5, T + 1))
    batch["labels"][0, 0] = Q
    with pytest.raises(ValueError, match=r"labels must lie in \[0, q\)"):
        model(**batch)


def test_layer_is_a_gradient_checkpointing_layer():
    from transformers.modeling_layers import GradientCheckpointingLayer

    model = tiny_model(TreeLangModel)
    assert model.supports_gradient_checkpointing
    assert all(isinstance(layer, GradientCheckpointingLayer) for layer in model.layers)
    assert isinstance(model.layers[0].attention.in_proj, nn.Linear)  # weight names unchanged: attention.in_proj
