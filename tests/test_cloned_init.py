"""`initializer="torch_cloned_layers"`: identical initial blocks, drawn as the authors' model draws them.

The reference is the authors' module, rebuilt below as it is in their repository: `TransformerClassifier`, `FFNN` and
`PositionalEncoding` of `modules/models.py` in github.com/emanuele-moscato/tree-language (branch paper-submission,
commit 8d7c9b8), cut to what the paper's scripts use (no batch norm, no dropout in the readout). Their root script
(`scripts/Transformer_RootInference.py`) builds it with `vocab_size=q, embedding_agg='flatten'`, their MLM script
(`scripts/Transformer_MLM.py`) with `vocab_size=q + 1, n_special_tokens=1, embedding_agg=None`.

Equalities are exact (`torch.equal`): both models draw the same numbers from the same generator.
"""

import numpy as np
import pytest
import torch
from torch import nn

from hf_treelang import TreeLangConfig, TreeLangForMaskedLM, TreeLangForSequenceClassification, TreeLangModel
from hf_treelang.models.modeling_treelang import TORCH_LAYER_PARAMETERS
from hf_treelang.train.arguments import parse_values
from hf_treelang.train.run import identity_config, run_identity

Q, DEPTH, T, D, LAYERS, HEADS, D_FF = 4, 3, 8, 32, 3, 2, 64
SEED = 1234


# ---------------------------------------------------------------- the authors' module (modules/models.py)


class FFNN(nn.Module):
    """`FFNN` of their modules/models.py: linear layers `dims[i] -> dims[i + 1]`, ReLU between them."""

    def __init__(self, dims):
        super().__init__()
        self.linear_layers = nn.ModuleList([nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1)])
        self.activations = nn.ModuleList([nn.ReLU() for _ in range(len(dims) - 2)] + [nn.Identity()])

    def forward(self, x):
        for layer, activation in zip(self.linear_layers, self.activations):
            x = activation(layer(x))
        return x


class PositionalEncoding(nn.Module):
    """`PositionalEncoding` of their modules/models.py (the PyTorch tutorial's), a persistent (1, 5000, d) buffer."""

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-np.log(10000.0) / d_model))
        pe = torch.zeros(1, max_len, d_model)
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return self.dropout(x + self.pe[:, : x.size(1), :])


class MeanAggLayer(nn.Module):
    """`MeanAggLayer` of their modules/models.py: the mean over the tokens (no parameters)."""

    def __init__(self, seq_len):
        super().__init__()
        self.avg_pool = nn.AvgPool1d(kernel_size=seq_len)

    def forward(self, x):
        return self.avg_pool(torch.permute(x, dims=(0, 2, 1))).squeeze()


class TransformerClassifier(nn.Module):
    """`TransformerClassifier` of their modules/models.py, its modules built in their order."""

    def __init__(self, seq_len, embedding_size, n_tranformer_layers, n_heads, vocab_size,
                 encoder_dim_feedforward=2048, n_special_tokens=0, embedding_agg="flatten", decoder_hidden_sizes=()):
        super().__init__()
        self.input_embedding = nn.Embedding(vocab_size, embedding_size)
        self.positional_embedding = PositionalEncoding(d_model=embedding_size, dropout=0.1, max_len=5000)
        self.encoder_layer = nn.TransformerEncoderLayer(
            d_model=embedding_size, nhead=n_heads, dim_feedforward=encoder_dim_feedforward, batch_first=True
        )
        self.transformer_encoder = nn.TransformerEncoder(self.encoder_layer, num_layers=n_tranformer_layers)
        if embedding_agg == "flatten":
            self.embedding_agg_layer = nn.Flatten(start_dim=-2, end_dim=-1)
            decoder_input_dim = seq_len * embedding_size
        elif embedding_agg == "mean":
            self.embedding_agg_layer = MeanAggLayer(seq_len=seq_len)
            decoder_input_dim = embedding_size
        else:  # None: masked language modelling, one readout per token
            self.embedding_agg_layer = nn.Identity()
            decoder_input_dim = embedding_size
        self.decoder = FFNN([decoder_input_dim, *decoder_hidden_sizes, vocab_size - n_special_tokens])

    def forward(self, x):
        x = self.transformer_encoder(self.positional_embedding(self.input_embedding(x)))
        return self.decoder(self.embedding_agg_layer(x))


# ---------------------------------------------------------------- builders


def config(initializer="torch_cloned_layers", **overrides) -> TreeLangConfig:
    kwargs = dict(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=D_FF,
                  initializer=initializer)
    kwargs.update(overrides)
    return TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH, **kwargs)


def build_both(cls, authors_kwargs: dict, seed=SEED, **overrides):
    """Ours and theirs from the same seed, each with the next number its generator gives after construction."""
    torch.manual_seed(seed)
    ours = cls(config(**overrides)).eval()
    ours_next = torch.rand(4)
    torch.manual_seed(seed)
    theirs = TransformerClassifier(T, D, LAYERS, HEADS, encoder_dim_feedforward=D_FF, **authors_kwargs).eval()
    theirs_next = torch.rand(4)
    return ours, ours_next, theirs, theirs_next


def block_pairs(ours_layer, theirs_layer):
    """(name, ours, theirs) for every parameter of one block, theirs a torch.nn.TransformerEncoderLayer."""
    ours_params = dict(ours_layer.named_parameters())
    return [(name, ours_params[TORCH_LAYER_PARAMETERS[name]], value) for name, value in theirs_layer.named_parameters()]


def assert_blocks_equal_the_authors(ours, theirs):
    encoder = ours.base_model
    assert len(encoder.layers) == len(theirs.transformer_encoder.layers) == LAYERS
    for ours_layer, theirs_layer in zip(encoder.layers, theirs.transformer_encoder.layers):
        for name, mine, reference in block_pairs(ours_layer, theirs_layer):
            assert torch.equal(mine, reference), name
        # their state dict also holds the template `encoder_layer.*`: never called, equal to every copy
        for name, mine, reference in block_pairs(ours_layer, theirs.encoder_layer):
            assert torch.equal(mine, reference), f"encoder_layer.{name}"


ROOT = dict(vocab_size=Q, embedding_agg="flatten")
MLM = dict(vocab_size=Q + 1, n_special_tokens=1, embedding_agg=None)


# ---------------------------------------------------------------- equal to the authors' model


def test_root_classifier_blocks_embedding_and_readout_equal_the_authors_from_the_same_seed():
    ours, ours_next, theirs, theirs_next = build_both(TreeLangForSequenceClassification, ROOT)
    assert_blocks_equal_the_authors(ours, theirs)
    embedding = ours.treelang.embeddings.token_embeddings.weight  # (q + 1, d)
    assert torch.equal(embedding[:Q], theirs.input_embedding.weight)  # their (q, d): the symbols
    assert torch.equal(ours.classifier.weight, theirs.decoder.linear_layers[0].weight)
    assert torch.equal(ours.classifier.bias, theirs.decoder.linear_layers[0].bias)
    # no counterpart: the mask row (their root classifier has no mask token) is zero and draws nothing, so the
    # generator is left where theirs is
    assert torch.count_nonzero(embedding[Q]) == 0
    assert torch.equal(ours_next, theirs_next)


def test_masked_lm_blocks_embedding_and_readout_equal_the_authors_from_the_same_seed():
    ours, ours_next, theirs, theirs_next = build_both(TreeLangForMaskedLM, MLM)
    assert_blocks_equal_the_authors(ours, theirs)
    assert torch.equal(ours.treelang.embeddings.token_embeddings.weight, theirs.input_embedding.weight)  # (q + 1, d)
    assert torch.equal(ours.lm_head.weight, theirs.decoder.linear_layers[0].weight)
    assert torch.equal(ours.lm_head.bias, theirs.decoder.linear_layers[0].bias)
    assert torch.equal(ours_next, theirs_next)


@pytest.mark.parametrize("pooling, agg", [("concat", "flatten"), ("mean", "mean")])
def test_two_layer_root_readout_equals_the_authors_hidden_decoder(pooling, agg):
    ours, ours_next, theirs, theirs_next = build_both(
        TreeLangForSequenceClassification, dict(vocab_size=Q, embedding_agg=agg, decoder_hidden_sizes=[5]),
        classifier_pooling=pooling, classifier_hidden_size=5,
    )
    assert_blocks_equal_the_authors(ours, theirs)
    head, decoder = ours.classifier, theirs.decoder.linear_layers
    for mine, reference in ((head.dense, decoder[0]), (head.out_proj, decoder[1])):
        assert torch.equal(mine.weight, reference.weight) and torch.equal(mine.bias, reference.bias)
    assert torch.equal(ours_next, theirs_next)


def test_positional_table_equals_the_authors_first_positions():
    ours, _, theirs, _ = build_both(TreeLangModel, ROOT)
    # theirs is a (1, 5000, d) buffer saved with the weights; ours the same numbers on the 2**depth positions
    assert torch.equal(ours.embeddings.positional_encoding, theirs.positional_embedding.pe[0, :T])


def test_root_classifier_computes_the_authors_logits_at_initialisation():
    ours, _, theirs, _ = build_both(TreeLangForSequenceClassification, ROOT)
    symbols = torch.randint(0, Q, (6, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = theirs(symbols)  # (6, q)
        actual = ours(symbols).logits
    assert torch.allclose(actual, expected, atol=1e-5), (actual - expected).abs().max()


# ---------------------------------------------------------------- identical blocks


def encoder_blocks(model) -> list:
    return [dict(layer.named_parameters()) for layer in model.base_model.layers]


@pytest.mark.parametrize("cls", [TreeLangModel, TreeLangForSequenceClassification, TreeLangForMaskedLM])
def test_cloned_initialiser_starts_every_block_with_identical_weights(cls):
    torch.manual_seed(0)
    first, *others = encoder_blocks(cls(config()))
    for block in others:
        assert block.keys() == first.keys()
        assert all(torch.equal(block[name], first[name]) for name in first)


def test_torch_initialiser_draws_every_block_on_its_own():
    torch.manual_seed(0)
    first, *others = encoder_blocks(TreeLangForSequenceClassification(config(initializer="torch")))
    drawn = ("attention.in_proj.weight", "attention.out_proj.weight", "linear1.weight", "linear1.bias",
             "linear2.weight", "linear2.bias")
    for block in others:
        assert not any(torch.equal(block[name], first[name]) for name in drawn)


def test_blocks_equal_one_pytorch_default_layer_drawn_after_the_embedding():
    torch.manual_seed(SEED)
    model = TreeLangModel(config())
    torch.manual_seed(SEED)
    embedding = nn.Embedding(Q + 1, D)
    layer = nn.TransformerEncoderLayer(D, HEADS, D_FF, batch_first=True)
    assert torch.equal(model.embeddings.token_embeddings.weight, embedding.weight)
    for ours_layer in model.layers:
        for name, mine, reference in block_pairs(ours_layer, layer):
            assert torch.equal(mine, reference), name


# ---------------------------------------------------------------- loading, devices


def test_from_pretrained_keeps_the_loaded_blocks_and_draws_only_the_new_readout(tmp_path):
    torch.manual_seed(0)
    mlm = TreeLangForMaskedLM(config())
    with torch.no_grad():
        for parameter in mlm.parameters():  # "trained": the blocks no longer agree
            parameter.add_(torch.randn_like(parameter))
    mlm.save_pretrained(tmp_path)
    torch.manual_seed(7)
    classifier = TreeLangForSequenceClassification.from_pretrained(tmp_path)
    torch.manual_seed(7)
    readout = nn.Linear(D * T, Q)  # the only draw: nn.Linear's default for the missing readout
    encoder = mlm.treelang.state_dict()
    assert all(torch.equal(value, classifier.treelang.state_dict()[key]) for key, value in encoder.items())
    assert torch.equal(classifier.classifier.weight, readout.weight)
    assert torch.equal(classifier.classifier.bias, readout.bias)


def test_models_built_on_the_meta_device_hold_no_values():
    with torch.device("meta"):
        model = TreeLangForSequenceClassification(config())
    assert all(parameter.is_meta for parameter in model.parameters())


# ---------------------------------------------------------------- config and presets


def test_config_accepts_the_cloned_initialiser_and_round_trips(tmp_path):
    cloned = config()
    cloned.save_pretrained(tmp_path)
    assert TreeLangConfig.from_pretrained(tmp_path).initializer == "torch_cloned_layers"
    with pytest.raises(ValueError, match=r"`initializer` must be one of \('torch', 'torch_cloned_layers', 'xavier'\)"):
        config(initializer="cloned")


@pytest.mark.parametrize("task", ["root", "mlm"])
def test_paper_preset_and_laptop_root_clone_the_layers_and_laptop_mlm_keeps_torch(task):
    paper = parse_values(task, {"preset": "paper"})
    laptop = parse_values(task, {})
    chosen = parse_values(task, {"preset": "paper", "initializer": "torch"})
    assert paper[1].initializer == "torch_cloned_layers"
    assert laptop[1].initializer == {"root": "torch_cloned_layers", "mlm": "torch"}[task]
    assert chosen[1].initializer == "torch"  # a flag given explicitly wins
    assert paper[1].config(paper[0]).initializer == "torch_cloned_layers"
    # the initialiser is part of a run's identity: the two runs are never mistaken for each other
    identities = {run_identity(identity_config(task, *parsed[:3])) for parsed in (paper, chosen)}
    assert len(identities) == 2
