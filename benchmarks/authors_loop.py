"""The authors' root-classification training loop, re-created standalone: the baseline of ``gpu_check.py``.

Source: github.com/emanuele-moscato/tree-language, branch paper-submission (8d7c9b8):
``modules/models.py`` (``TransformerClassifier``: ``nn.Embedding``, a sinusoidal positional encoding with dropout 0.1,
``nn.TransformerEncoder`` of post-LN ``nn.TransformerEncoderLayer(d_model=128, nhead=1, dim_feedforward=2048,
batch_first=True)``, the flattened final tokens, one ``Linear`` readout) and ``modules/training.py`` (``train_model``:
``torch.optim.Adam``, a shuffled ``DataLoader`` over tensors already on the device, batch 32; per batch the training
step, then a second forward for the batch's accuracy). The data are random symbols: the timing does not depend on
their values. Their state dict also holds the unused template layer ``encoder_layer.*`` (``nn.TransformerEncoder``
deep-copies it), so it reports more parameters than it trains.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn


class FFNN(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.linear_layers = nn.ModuleList([nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1)])
        self.activations = nn.ModuleList([nn.ReLU() for _ in range(len(dims) - 2)] + [nn.Identity()])

    def forward(self, x):
        out = x
        for layer, activation in zip(self.linear_layers, self.activations):
            out = activation(layer(out))
        return out


class PositionalEncoding(nn.Module):
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
        x = x + self.pe[:, : x.size(1), :]
        return self.dropout(x)


class TransformerClassifier(nn.Module):
    def __init__(self, seq_len, embedding_size, n_tranformer_layers, n_heads, vocab_size,
                 encoder_dim_feedforward=2048):
        super().__init__()
        self.input_embedding = nn.Embedding(vocab_size, embedding_size)
        self.positional_embedding = PositionalEncoding(d_model=embedding_size, dropout=0.1, max_len=5000)
        self.encoder_layer = nn.TransformerEncoderLayer(d_model=embedding_size, nhead=n_heads,
                                                        dim_feedforward=encoder_dim_feedforward, batch_first=True)
        self.transformer_encoder = nn.TransformerEncoder(self.encoder_layer, num_layers=n_tranformer_layers)
        self.embedding_agg_layer = nn.Flatten(start_dim=-2, end_dim=-1)
        self.decoder = FFNN([seq_len * embedding_size, vocab_size])

    def forward(self, x, src_key_padding_mask=None):
        x = self.input_embedding(x)
        x = self.positional_embedding(x)
        x = self.transformer_encoder(x, src_key_padding_mask=src_key_padding_mask)
        x = self.embedding_agg_layer(x)
        return self.decoder(x)


def compute_accuracy(predicted_probs, one_hot_encoded_targets):
    return (torch.argmax(predicted_probs, axis=-1) == torch.argmax(one_hot_encoded_targets, axis=-1)).to(
        dtype=torch.float32).mean()


def training_step(training_data, model, loss_fn, optimizer):
    x_train, y_train = training_data
    y_pred = model(x_train, src_key_padding_mask=None)
    training_loss = loss_fn(y_pred, y_train)
    optimizer.zero_grad()
    training_loss.backward()
    optimizer.step()
    return training_loss.detach(), None


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed_loop(model, loader, loss_fn, optimizer, device, warmup, seconds, with_accuracy=True):
    """Steps/s of the authors' inner loop (one epoch's batches, stopped after `seconds` of timed steps)."""
    losses, accuracies = [], []
    t0 = None
    steps = 0
    for batch in loader:
        if steps == warmup:
            sync(device)
            t0 = time.perf_counter()
        training_batch, training_targets = batch
        loss, _ = training_step((training_batch, training_targets), model, loss_fn, optimizer)
        losses.append(loss)
        if with_accuracy:
            accuracies.append(compute_accuracy(model(training_batch, src_key_padding_mask=None),
                                               training_targets).detach())
        steps += 1
        if t0 is not None and steps % 20 == 0 and time.perf_counter() - t0 >= seconds:
            break
    sync(device)
    elapsed = time.perf_counter() - t0
    return (steps - warmup) / elapsed, steps - warmup, elapsed, losses, accuracies


def measure(device, *, num_train: int = 2**17, seconds: float = 5.0, warmup: int = 30, depth: int = 4,
            num_symbols: int = 4, hidden_size: int = 128, num_layers: int = 4, intermediate_size: int = 2048,
            batch: int = 32) -> dict:
    """Steps/s of the authors' loop on ``device`` (with their per-batch accuracy forward, and without it)."""
    device = torch.device(device)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.integers(0, num_symbols, size=(num_train, 2**depth))).to(device=device).int()
    y = nn.functional.one_hot(torch.from_numpy(rng.integers(0, num_symbols, size=num_train)),
                              num_classes=num_symbols).to(dtype=torch.float32, device=device)
    model = TransformerClassifier(seq_len=2**depth, embedding_size=hidden_size, n_tranformer_layers=num_layers,
                                  n_heads=1, vocab_size=num_symbols,
                                  encoder_dim_feedforward=intermediate_size).to(device=device)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(params=model.parameters(), lr=1e-4)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch, shuffle=True,
                                         drop_last=True)
    rate, steps, _, _, _ = timed_loop(model, loader, loss_fn, optimizer, device, warmup, seconds, with_accuracy=True)
    bare, _, _, _, _ = timed_loop(model, loader, loss_fn, optimizer, device, warmup, seconds, with_accuracy=False)
    trained = sum(p.numel() for name, p in model.named_parameters() if not name.startswith("encoder_layer."))
    return {"steps_per_s": rate, "training_step_only_steps_per_s": bare, "timed_steps": steps,
            "parameters_trained": trained, "batch": batch}
