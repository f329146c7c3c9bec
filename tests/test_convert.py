"""Conversion of state dicts saved by the paper's code into TreeLang checkpoints (issue 3)."""

import math
import re

import pytest
import torch
from torch import nn
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification

import hf_treelang
from hf_treelang import TreeLangForMaskedLM, TreeLangForSequenceClassification
from hf_treelang.models.convert import main

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
    """A stand-in for the paper's module, with exactly its parameter names."""

    def __init__(self, task: str, q=Q, depth=DEPTH, d=D, layers=LAYERS, d_ff=D_FF):
        super().__init__()
        self.task = task
        self.input_embedding = nn.Embedding(q + 1, d)
        self.positional_embedding = PositionalEncoding(d)
        self.encoder_layer = nn.TransformerEncoderLayer(d, 1, d_ff, 0.1, batch_first=True)
        self.transformer_encoder = nn.TransformerEncoder(self.encoder_layer, layers, enable_nested_tensor=False)
        self.decoder = Decoder(d * 2**depth if task == "root" else d, q)

    def forward(self, x):
        h = self.transformer_encoder(self.positional_embedding(self.input_embedding(x)))  # (b, T, d)
        return self.decoder(h.flatten(1) if self.task == "root" else h)


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
        expected, actual = paper(x), converted(x).logits
    assert torch.allclose(actual, expected, atol=1e-6), (actual - expected).abs().max()


def test_command_line_writes_a_loadable_checkpoint(tmp_path):
    paper, path = paper_state_dict_file(tmp_path, "mlm", seed=1)
    assert main([str(path), str(tmp_path / "cli"), "--task", "mlm", "--depth", str(DEPTH)]) == 0
    converted = TreeLangForMaskedLM.from_pretrained(tmp_path / "cli").eval()
    with torch.no_grad():
        assert torch.allclose(converted(tokens()).logits, paper(tokens()), atol=1e-6)


def test_wrong_depth_for_the_readout_raises(tmp_path):
    _, path = paper_state_dict_file(tmp_path, "root")
    with pytest.raises(ValueError, match="input size"):
        hf_treelang.convert(path, tmp_path / "out", task="root", depth=DEPTH + 1)


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
