"""Training speed of TreeLangForSequenceClassification against a plain torch.nn.TransformerEncoder classifier.

Both models have the paper's sizes (q=4, ℓ=4, d=128, 4 layers, 1 head, d'=2048, dropout 0.1) and are trained with
Adam (lr 1e-4) on random data on the CPU. One step = forward + cross-entropy + backward + Adam update. The two models
are timed alternately in the same run (warm-up first, then several repetitions; the median is reported), so that
machine noise affects both alike. Target: ratio (ours / torch) >= 1.0 at both batch sizes.

Usage: python benchmarks/bench_model.py [--batch-sizes 32 256] [--steps 10] [--repeats 5]
"""

import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from hf_treelang import TreeLangConfig, TreeLangForSequenceClassification


class PlainTorchClassifier(nn.Module):
    """What a user would write: embedding + sinusoidal table + nn.TransformerEncoder + linear readout on the concat."""

    def __init__(self, num_symbols: int, depth: int, d: int, layers: int, heads: int, d_ff: int, dropout: float):
        super().__init__()
        T = 2**depth
        self.input_embedding = nn.Embedding(num_symbols + 1, d)
        position = torch.arange(T).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(1, T, d)
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(d, heads, d_ff, dropout, batch_first=True)
        self.transformer_encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.readout = nn.Linear(d * T, num_symbols)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dropout(self.input_embedding(x) + self.pe)  # (B, T, d)
        h = self.transformer_encoder(h)  # (B, T, d)
        return self.readout(h.flatten(1))  # (B, q)


def make_step(model, optimizer, ours: bool):
    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = model(x, labels=y).loss if ours else F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    return step


def steps_per_second(step, x, y, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step(x, y)
    return steps / (time.perf_counter() - start)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--steps", type=int, default=10, help="training steps per timed repetition")
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions per model (median reported)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model before timing")
    args = parser.parse_args(argv)

    q, depth, d, layers, heads, d_ff, dropout = 4, 4, 128, 4, 1, 2048, 0.1
    torch.manual_seed(0)
    config = TreeLangConfig.from_data(
        num_symbols=q, depth=depth, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=d_ff, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
    )
    ours = TreeLangForSequenceClassification(config).train()
    plain = PlainTorchClassifier(q, depth, d, layers, heads, d_ff, dropout).train()
    steps = {
        "torch": make_step(plain, torch.optim.Adam(plain.parameters(), lr=1e-4), ours=False),
        "ours": make_step(ours, torch.optim.Adam(ours.parameters(), lr=1e-4), ours=True),
    }

    sys.stdout.write(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, paper sizes q={q} l={depth} d={d} "
        f"layers={layers} heads={heads} d'={d_ff}; {args.repeats} x {args.steps} steps, median\n"
    )
    sys.stdout.write(f"{'batch':>6} | {'torch steps/s':>13} | {'ours steps/s':>12} | {'ratio':>6}\n")
    sys.stdout.write(f"{'-' * 6}-+-{'-' * 13}-+-{'-' * 12}-+-{'-' * 6}\n")
    generator = torch.Generator().manual_seed(0)
    for batch in args.batch_sizes:
        x = torch.randint(0, q + 1, (batch, 2**depth), generator=generator)
        y = torch.randint(0, q, (batch,), generator=generator)
        for step in steps.values():
            for _ in range(args.warmup):
                step(x, y)
        rates = {name: [] for name in steps}
        for _ in range(args.repeats):
            for name, step in steps.items():
                rates[name].append(steps_per_second(step, x, y, args.steps))
        torch_rate, our_rate = statistics.median(rates["torch"]), statistics.median(rates["ours"])
        sys.stdout.write(f"{batch:>6} | {torch_rate:>13.2f} | {our_rate:>12.2f} | {our_rate / torch_rate:>6.3f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
