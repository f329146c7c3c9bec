"""Conversion of state dicts saved by the paper's code into TreeLang checkpoints (issue 3)."""

import math
import re

import pytest
import torch
from torch import nn
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification

import hf_treelang
from hf_treelang import TreeLangForMaskedLM, TreeLangForSequenceClassification
from hf_treelang.cli import run_command

Q, DEPTH, D, LAYERS, D_FF = 4, 3, 32, 2, 64


class PositionalEncoding(nn.Module):
    """The PyTorch tutorial's table, batch first: a (1, 5000, d) buffer named `pe`."""

    def __init__(self, d: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(1, max_len, d)
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return self.dropout(x + self.pe[:, : x.size(1)])


class Decoder(nn.Module):
    def __init__(self, in_features: int, q: int):
        super().__init__()
        self.linear_layers = nn.ModuleList([nn.Linear(in_features, q)])

    def forward(self, x):
        return self.linear_layers[0](x)


class PaperModel(nn.Module):
    """A stand-in for the paper's module, with exactly its parameter names.

    ``mask_token=False`` is the paper's root classifier (``TransformerClassifier(vocab_size=q, n_special_tokens=0)``):
    an embedding of q rows. ``pooling="mean"`` is its ``embedding_agg="mean"``: the readout sees the average token.
    """

    def __init__(self, task: str, q=Q, depth=DEPTH, d=D, layers=LAYERS, d_ff=D_FF, mask_token=True, pooling="flatten"):
        super().__init__()
        self.task, self.pooling = task, pooling
        self.input_embedding = nn.Embedding(q + 1 if mask_token else q, d)
        self.positional_embedding = PositionalEncoding(d)
        self.encoder_layer = nn.TransformerEncoderLayer(d, 1, d_ff, 0.1, batch_first=True)
        self.transformer_encoder = nn.TransformerEncoder(self.encoder_layer, layers, enable_nested_tensor=False)
        self.decoder = Decoder(d * 2**depth if task == "root" and pooling == "flatten" else d, q)

    def forward(self, x):
        h = self.transformer_encoder(self.positional_embedding(self.input_embedding(x)))  # (b, T, d)
        if self.task == "mlm":
            return self.decoder(h)
        return self.decoder(h.flatten(1) if self.pooling == "flatten" else h.mean(1))


def paper_state_dict_file(tmp_path, task, seed=0):
    torch.manual_seed(seed)
    model = PaperModel(task).eval()
    path = tmp_path / f"paper_{task}.pt"
    torch.save(model.state_dict(), path)
    return model, path


def tokens(batch=6, seed=0):
    return torch.randint(0, Q + 1, (batch, 2**DEPTH), generator=torch.Generator().manual_seed(seed))


def test_fake_paper_model_has_the_documented_keys():
    keys = set(PaperModel("root").state_dict())
    layer_suffixes = {re.sub(r"^transformer_encoder\.layers\.\d+\.", "", k) for k in keys if ".layers." in k}
    assert "input_embedding.weight" in keys and "positional_embedding.pe" in keys
    assert {"decoder.linear_layers.0.weight", "decoder.linear_layers.0.bias"} <= keys
    assert any(k.startswith("encoder_layer.") for k in keys)
    assert layer_suffixes == {
        "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
        "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
        "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias",
    }


@pytest.mark.parametrize(
    "task, auto_class, cls",
    [("root", AutoModelForSequenceClassification, TreeLangForSequenceClassification),
     ("mlm", AutoModelForMaskedLM, TreeLangForMaskedLM)],
)
def test_converted_checkpoint_reproduces_the_paper_model(tmp_path, task, auto_class, cls):
    paper, path = paper_state_dict_file(tmp_path, task)
    hf_treelang.convert(path, tmp_path / "out", task=task, depth=DEPTH)
    converted = auto_class.from_pretrained(tmp_path / "out").eval()
    assert type(converted) is cls
    config = converted.config
    assert (config.num_symbols, config.hidden_size, config.num_hidden_layers) == (Q, D, LAYERS)
    assert (config.intermediate_size, config.depth, config.num_attention_heads) == (D_FF, DEPTH, 1)
    x = tokens()
    with torch.no_grad():
        expected, actual = paper(x), converted(x).logits[..., :Q]  # an MLM's also score [MASK] and [PAD]
    assert torch.allclose(actual, expected, atol=1e-6), (actual - expected).abs().max()


def test_command_line_writes_a_loadable_checkpoint(tmp_path):
    paper, path = paper_state_dict_file(tmp_path, "mlm", seed=1)
    assert run_command("convert", [str(path), str(tmp_path / "cli"), "--task", "mlm", "--depth", str(DEPTH)]) == 0
    converted = TreeLangForMaskedLM.from_pretrained(tmp_path / "cli").eval()
    with torch.no_grad():
        assert torch.allclose(converted(tokens()).logits[..., :Q], paper(tokens()), atol=1e-6)


def test_wrong_depth_for_the_readout_raises(tmp_path):
    _, path = paper_state_dict_file(tmp_path, "root")
    with pytest.raises(ValueError, match="input size"):
        hf_treelang.convert(path, tmp_path / "out", task="root", depth=DEPTH + 1)


def test_a_masked_lm_state_dict_converted_as_a_root_classifier_is_refused(tmp_path):
    """Its (q + 1)-row embedding and one-token readout are an MLM's; a mean-pooled root classifier has q rows."""
    _, path = paper_state_dict_file(tmp_path, "mlm")
    with pytest.raises(ValueError, match="shapes of a masked-LM model.*--task mlm"):
        hf_treelang.convert(path, tmp_path / "out", task="root", depth=DEPTH)
    assert not (tmp_path / "out").exists()


def test_a_head_of_several_layers_is_refused_naming_its_keys(tmp_path):
    paper, _ = paper_state_dict_file(tmp_path, "root")
    state = paper.state_dict()
    state["decoder.linear_layers.1.weight"] = torch.zeros(Q, Q)
    torch.save(state, tmp_path / "two_layer_head.pt")
    with pytest.raises(ValueError, match=r"decoder\.linear_layers\.1\.weight"):
        hf_treelang.convert(tmp_path / "two_layer_head.pt", tmp_path / "out", task="root", depth=DEPTH)


def test_a_depth_the_weights_cannot_fix_is_reported_and_enforced_on_inputs(tmp_path, capsys):
    """An MLM's weights work on any length: the command says the depth is as given, and the converted model refuses
    the training data's sequences when the depth was wrong."""
    _, path = paper_state_dict_file(tmp_path, "mlm")
    assert run_command("convert", [str(path), str(tmp_path / "deeper"), "--task", "mlm", "--depth",
                                   str(DEPTH + 2)]) == 0
    assert f"depth {DEPTH + 2} is as given" in capsys.readouterr().out
    converted = TreeLangForMaskedLM.from_pretrained(tmp_path / "deeper")
    with pytest.raises(ValueError, match=f"input_ids must have shape.*{2 ** (DEPTH + 2)}"):
        converted(tokens())
    _, root_path = paper_state_dict_file(tmp_path, "root")
    assert run_command("convert", [str(root_path), str(tmp_path / "root"), "--task", "root", "--depth",
                                   str(DEPTH)]) == 0
    assert "is as given" not in capsys.readouterr().out  # the concatenated readout's size fixed it


def test_unknown_task_raises(tmp_path):
    _, path = paper_state_dict_file(tmp_path, "root")
    with pytest.raises(ValueError, match="task must be one of"):
        hf_treelang.convert(path, tmp_path / "out", task="ancestors", depth=DEPTH)


def test_non_sinusoidal_positional_table_raises(tmp_path):
    paper, _ = paper_state_dict_file(tmp_path, "mlm")
    state = paper.state_dict()
    state["positional_embedding.pe"] = torch.randn_like(state["positional_embedding.pe"])
    torch.save(state, tmp_path / "learned_pe.pt")
    with pytest.raises(ValueError, match="sinusoidal"):
        hf_treelang.convert(tmp_path / "learned_pe.pt", tmp_path / "out", task="mlm", depth=DEPTH)


# ---------------------------------------------------------------- issue 12: root classifiers without a mask token


def symbols(batch=16, seed=0):
    """Inputs of symbols only (no mask token), as a root classifier sees."""
    return torch.randint(0, Q, (batch, 2**DEPTH), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("pooling", ["flatten", "mean"])
def test_root_classifier_without_mask_token_converts_with_identical_logits(tmp_path, pooling):
    torch.manual_seed(3)
    paper = PaperModel("root", mask_token=False, pooling=pooling).eval()
    assert paper.input_embedding.weight.shape == (Q, D)
    torch.save(paper.state_dict(), tmp_path / "root.pt")
    hf_treelang.convert(tmp_path / "root.pt", tmp_path / "out", task="root", depth=DEPTH)
    converted = AutoModelForSequenceClassification.from_pretrained(tmp_path / "out").eval()
    assert converted.config.vocab_size == Q + 2 and converted.config.num_symbols == Q
    assert converted.config.classifier_pooling == {"flatten": "concat", "mean": "mean"}[pooling]
    embedding = converted.treelang.embeddings.token_embeddings.weight  # (q + 1, d)
    assert torch.equal(embedding[:Q], paper.input_embedding.weight)
    assert torch.equal(embedding[Q], torch.zeros(D))  # the mask row, which a root classifier never sees
    with torch.no_grad():
        expected, actual = paper(symbols()), converted(symbols()).logits
    torch.testing.assert_close(actual, expected, atol=1e-6, rtol=0)


def test_masked_lm_without_mask_token_is_refused(tmp_path):
    torch.manual_seed(0)
    torch.save(PaperModel("mlm", mask_token=False).state_dict(), tmp_path / "mlm.pt")
    with pytest.raises(ValueError, match=r"input_embedding.weight has 4 rows .* expected q \+ 1"):
        hf_treelang.convert(tmp_path / "mlm.pt", tmp_path / "out", task="mlm", depth=DEPTH)
    assert not (tmp_path / "out").exists()


def test_training_checkpoint_of_the_paper_converts(tmp_path):
    # The paper's training loop saves {"model_state_dict": ..., "training_history": ...}.
    paper, _ = paper_state_dict_file(tmp_path, "mlm", seed=2)
    history = {"training_loss": [torch.tensor(1.2), torch.tensor(0.9)], "val_accuracy": [0.5, 0.6]}
    torch.save({"model_state_dict": paper.state_dict(), "training_history": history}, tmp_path / "ckpt.pt")
    converted = hf_treelang.convert(tmp_path / "ckpt.pt", tmp_path / "out", task="mlm", depth=DEPTH)
    with torch.no_grad():
        torch.testing.assert_close(converted(tokens()).logits[..., :Q], paper(tokens()), atol=1e-6, rtol=0)


def test_output_path_that_is_a_file_is_refused_and_left_alone(tmp_path, capsys):
    _, path = paper_state_dict_file(tmp_path, "root")
    target = tmp_path / "afile"
    target.write_text("keep me")
    with pytest.raises(FileExistsError, match="afile exists and is not a folder"):
        hf_treelang.convert(path, target, task="root", depth=DEPTH)
    assert run_command("convert", [str(path), str(target), "--task", "root", "--depth", str(DEPTH)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hf-treelang convert: error: ") and "afile" in err
    assert target.read_text() == "keep me"


def unreadable_files(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello, not weights\n")
    pickled = tmp_path / "numpy.pt"
    torch.save({"input_embedding.weight": __import__("numpy").zeros((5, 2))}, pickled)  # refused by weights_only
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    return [(text, "not a file written by torch.save"), (pickled, "holds objects other than tensors"),
            (empty, "not a file written by torch.save")]


def test_unreadable_files_give_one_clear_error(tmp_path, capsys):
    for path, message in unreadable_files(tmp_path):
        with pytest.raises(ValueError, match=message):
            hf_treelang.convert(path, tmp_path / "out", task="root", depth=DEPTH)
        assert run_command("convert", [str(path), str(tmp_path / "out"), "--task", "root", "--depth", str(DEPTH)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_missing_file_and_bad_arguments_give_one_line_before_any_work(tmp_path, capsys):
    missing = [str(tmp_path / "missing.pt"), str(tmp_path / "out"), "--task", "root"]
    assert run_command("convert", [*missing, "--depth", "3"]) == 2
    assert "no such file" in capsys.readouterr().err
    for depth in ("0", "17"):
        assert run_command("convert", [*missing, "--depth", depth]) == 2
        assert f"`depth` must be an integer in [1, 16], got {depth}" in capsys.readouterr().err
    assert run_command("convert", [*missing, "--depth", "3", "--heads", "0"]) == 2
    assert "`num_attention_heads` must be an integer >= 1, got 0" in capsys.readouterr().err


def test_state_dict_without_positional_encoding_is_refused(tmp_path):
    paper, _ = paper_state_dict_file(tmp_path, "root")
    state = {k: v for k, v in paper.state_dict().items() if k != "positional_embedding.pe"}
    torch.save(state, tmp_path / "no_pe.pt")
    with pytest.raises(ValueError, match="without positional encoding"):
        hf_treelang.convert(tmp_path / "no_pe.pt", tmp_path / "out", task="root", depth=DEPTH)


def test_mismatched_layer_weights_leave_no_partial_folder(tmp_path):
    paper, _ = paper_state_dict_file(tmp_path, "mlm")
    state = paper.state_dict()
    state["transformer_encoder.layers.1.linear2.weight"] = torch.zeros(D, D_FF + 1)
    torch.save(state, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="size mismatch"):
        hf_treelang.convert(tmp_path / "bad.pt", tmp_path / "out", task="mlm", depth=DEPTH)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.pt", "paper_mlm.pt"]
