"""Ancestor probes on frozen hidden states (paper Fig. 3b, App. E.6 and E.7).

For every (encoder layer, ancestor level) pair a two-layer readout (64 hidden ReLU units by default) is trained to
predict, from the hidden state of leaf i alone, the symbol of its ancestor at level m::

    label(i, m) = levels[m][i >> (ℓ - m)]        (level 0 is the root, level ℓ the leaf itself)

The readout is position independent: one network for all positions of a layer. Layer 0 is the input embedding,
layer j the output of encoder block j. The encoder is frozen: hidden states are computed once, without masks.
All probes are trained at once, as one batched network with independent weights per (layer, level); since the
loss is the sum of the probes' losses and Adam acts per parameter, this is exactly independent training on the same
mini-batches. Variant ``positions="ends"`` (App. E.7, left) trains on the first and last positions only and tests on
all of them. As a reference, the exact BP posterior of each ancestor given the whole sequence gives the best
accuracy any readout could reach.

Dimension glossary: ``n`` sequences, ``L = 2**ℓ`` positions, ``P`` probed layers, ``V`` ancestor levels, ``H`` probe
hidden units, ``d`` model hidden size, ``q`` symbols, ``T`` tokens in a batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.sampling import sample_trees
from hf_treelang.data.metadata import ancestor_labels
from hf_treelang.plotting import pyplot, save_figure

from .activations import batches, run_with_cache
from .checkpoint import as_checkpoint
from .io import check_positive, cli_error, prepare_output, write_json

POSITION_MODES = ("all", "ends")


@dataclass
class ProbeResult:
    """Held-out accuracy of every (layer, ancestor level) probe.

    Attributes:
        accuracy: (P, V) accuracy on held-out sequences, all positions; rows follow ``layers``, columns ``levels``.
        train_accuracy: (P, V) the same on the training sequences (the trained positions only).
        layers: probed layers (0 = the input embedding, j = encoder block j).
        levels: ancestor levels m (0 = the root).
        bp_accuracy: (V,) accuracy of the exact BP posterior of the ancestor given the whole sequence.
        chance: (V,) accuracy of always predicting the most frequent training label.
        positions: ``"all"`` or ``"ends"`` (trained on the first and last positions only).
        depth, model_filter_level, data_filter_level, num_train, num_test, epochs: the setting.
    """

    accuracy: np.ndarray
    train_accuracy: np.ndarray
    layers: list
    levels: list
    bp_accuracy: np.ndarray
    chance: np.ndarray
    positions: str
    checkpoint: str
    depth: int
    model_filter_level: int
    data_filter_level: int
    num_train: int
    num_test: int
    epochs: int

    def to_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint,
            "positions": self.positions,
            "depth": self.depth,
            "model_filter_level": self.model_filter_level,
            "data_filter_level": self.data_filter_level,
            "num_train": self.num_train,
            "num_test": self.num_test,
            "epochs": self.epochs,
            "layers": self.layers,
            "levels": self.levels,
            "accuracy": self.accuracy,
            "train_accuracy": self.train_accuracy,
            "bp_accuracy": self.bp_accuracy,
            "chance": self.chance,
        }


def check_levels(levels, depth: int, data_filter_level: int) -> list:
    """Validate ancestor levels against the depth and the levels that data of filter level k have."""
    available = [m for m in range(depth + 1) if m == 0 or m >= data_filter_level]
    if levels is None:
        return [m for m in available if m < depth]
    levels = [int(m) for m in levels]
    if not levels:
        raise ValueError(f"levels must name at least one ancestor level in {available}, got none")
    for m in levels:
        if m < 0 or m > depth:
            raise ValueError(f"levels: ancestor level {m} is outside [0, depth={depth}] for this checkpoint")
        if m not in available:
            raise ValueError(
                f"levels: data of filter level k={data_filter_level} have no level {m} (levels 1..{data_filter_level - 1}"
                f" are filtered out); available levels: {available}. Probe on unfiltered data with data_filter_level=0"
            )
    if len(set(levels)) != len(levels):
        raise ValueError(f"levels must not repeat, got {levels}")
    return levels


def probe_targets(trees, levels: list) -> np.ndarray:
    """(n, L, V) ancestor symbols of every leaf for each probed level (``hf_treelang.data.ancestor_labels``)."""
    return np.stack([ancestor_labels(trees.levels[m], trees.depth) for m in levels], -1)


def hidden_states(ckpt, input_ids: np.ndarray, *, batch_size: int = 512) -> torch.Tensor:
    """(n, P, L, d) float32 hidden states of every layer (embedding first) of the frozen encoder."""
    return run_with_cache(ckpt, input_ids, logits=False, hidden_states=True, batch_size=batch_size).hidden_states


class _BatchedProbes(torch.nn.Module):
    """P x V independent two-layer readouts d -> H -> q; the first layers of one encoder layer share one matmul."""

    def __init__(self, num_layers: int, num_levels: int, hidden_size: int, probe_hidden: int, num_symbols: int,
                 generator: torch.Generator):
        super().__init__()
        P, V, H, d, q = num_layers, num_levels, probe_hidden, hidden_size, num_symbols

        def uniform(shape, fan_in):  # nn.Linear's default initialisation
            bound = 1.0 / math.sqrt(fan_in)
            return torch.nn.Parameter((torch.rand(shape, generator=generator) * 2 - 1) * bound)

        self.V, self.H = V, H
        self.w1 = uniform((P, d, V * H), d)
        self.b1 = uniform((P, 1, V * H), d)
        self.w2 = uniform((P, V, H, q), H)
        self.b2 = uniform((P, 1, V, q), H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (P, T, d) -> logits (P, T, V, q)."""
        P, T, _ = x.shape
        h = torch.relu(torch.baddbmm(self.b1, x, self.w1)).view(P, T, self.V, self.H)  # (P, T, V, H)
        return torch.einsum("ptvh,pvhc->ptvc", h, self.w2) + self.b2  # (P, T, V, q)


def _select(states: torch.Tensor, labels: torch.Tensor, positions: torch.Tensor):
    """Tokens of the given positions: states (b, P, L, d) -> (P, b*|pos|, d); labels (b, L, V) -> (b*|pos|, V)."""
    x = states[:, :, positions].permute(1, 0, 2, 3).reshape(states.shape[1], -1, states.shape[-1])
    return x, labels[:, positions].reshape(-1, labels.shape[-1])


@torch.no_grad()
def _accuracy(probes, states, labels, positions, batch_size, device) -> np.ndarray:
    correct = None
    count = 0
    for part in batches(states.shape[0], batch_size):
        x, y = _select(states[part], labels[part], positions)
        x, y = x.to(device), y.to(device)
        hits = (probes(x).argmax(-1) == y[None]).sum(1).double().cpu()  # (P, V)
        correct = hits if correct is None else correct + hits
        count += y.shape[0]
    return (correct / count).numpy()


def probe(
    checkpoint,
    *,
    levels=None,
    data_filter_level: int | None = None,
    positions: str = "all",
    num_train: int = 2**14,
    num_test: int = 2**12,
    epochs: int = 10,
    batch_size: int = 64,
    learning_rate: float = 1e-3,
    probe_hidden: int = 64,
    seed: int = 20_240_603,
    device="cpu",
    progress: bool = True,
) -> ProbeResult:
    """Train the ancestor probes of every (layer, level) on a frozen checkpoint and measure held-out accuracy.

    Args:
        checkpoint: a TreeLang checkpoint folder of any task (MLM in the paper) or a loaded checkpoint.
        levels: ancestor levels m to probe (0 = root); default: every level < ℓ that the data have.
        data_filter_level: filter level k of the probing data; default the checkpoint's k_train (in-sample). Use 0
            to probe a filtered model on the full hierarchy (App. E.7, right).
        positions: ``"all"`` trains on every position (Fig. 3b), ``"ends"`` on the first and last only (App. E.7).
        num_train: labelled training sequences (2^14 in the paper).
        num_test: held-out sequences.
        epochs: passes over the training sequences (100 in the paper; 10 by default to stay quick on a CPU).
        batch_size: sequences per optimisation step.
        learning_rate: Adam learning rate.
        probe_hidden: hidden units of each readout (64 in the paper).
        seed: seed of the data, the initialisation and the batch order.
        progress: show a progress bar over epochs.
    """
    ckpt = as_checkpoint(checkpoint, device=device)
    depth = ckpt.depth
    k_data = ckpt.filter_level if data_filter_level is None else int(data_filter_level)
    if not 0 <= k_data <= depth:
        raise ValueError(f"data_filter_level must be in [0, depth={depth}], got {k_data}")
    levels = check_levels(levels, depth, k_data)
    if positions not in POSITION_MODES:
        raise ValueError(f"positions must be one of {POSITION_MODES}, got {positions!r}")
    num_train = check_positive("num_train", num_train)
    num_test = check_positive("num_test", num_test)
    epochs = check_positive("epochs", epochs)
    batch_size = check_positive("batch_size", batch_size)
    probe_hidden = check_positive("probe_hidden", probe_hidden)
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")

    trees = sample_trees(ckpt.grammar, num_train + num_test, depth, k_data, seed)
    labels = torch.as_tensor(probe_targets(trees, levels))  # (n, L, V)
    states = hidden_states(ckpt, trees.leaves)  # (n, P, L, d)
    num_layers, length = states.shape[1], states.shape[2]
    train = slice(0, num_train)
    test = slice(num_train, num_train + num_test)
    all_positions = torch.arange(length)
    train_positions = all_positions if positions == "all" else torch.tensor(sorted({0, length - 1}))

    generator = torch.Generator().manual_seed(seed)
    probes = _BatchedProbes(num_layers, len(levels), states.shape[-1], probe_hidden, ckpt.num_symbols, generator)
    device = ckpt.device
    probes.to(device)
    optimizer = torch.optim.Adam(probes.parameters(), lr=learning_rate)
    weight = num_layers * len(levels)  # sum, not mean, of the P*V probe losses: independent training
    train_states, train_labels = states[train], labels[train]
    for _ in tqdm(range(epochs), desc="probe epochs", disable=not progress, leave=False):
        order = torch.randperm(num_train, generator=generator)
        for part in batches(num_train, batch_size):
            rows = order[part]
            x, y = _select(train_states[rows], train_labels[rows], train_positions)
            x, y = x.to(device), y.to(device)
            logits = probes(x)  # (P, T, V, q)
            target = y[None].expand(num_layers, -1, -1)  # (P, T, V)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            (loss * weight).backward()
            optimizer.step()

    eval_batch = max(batch_size, 1024)
    test_accuracy = _accuracy(probes, states[test], labels[test], all_positions, eval_batch, device)
    train_accuracy = _accuracy(probes, train_states, train_labels, train_positions, eval_batch, device)

    bp_levels = BeliefPropagation(ckpt.grammar, depth, k_data).level_marginals(trees.leaves[test])
    test_trees_levels = probe_targets(trees, levels)[test]  # (n_test, L, V)
    index = np.arange(length)
    bp_accuracy = np.array([
        float((bp_levels[m].argmax(-1).numpy()[:, index >> (depth - m)] == test_trees_levels[..., v]).mean())
        for v, m in enumerate(levels)
    ])
    train_flat = labels[train].reshape(-1, len(levels)).numpy()
    test_flat = test_trees_levels.reshape(-1, len(levels))
    chance = np.array([
        float((test_flat[:, v] == np.bincount(train_flat[:, v], minlength=ckpt.num_symbols).argmax()).mean())
        for v in range(len(levels))
    ])
    return ProbeResult(
        accuracy=test_accuracy,
        train_accuracy=train_accuracy,
        layers=list(range(num_layers)),
        levels=levels,
        bp_accuracy=bp_accuracy,
        chance=chance,
        positions=positions,
        checkpoint=str(ckpt.path),
        depth=depth,
        model_filter_level=ckpt.filter_level,
        data_filter_level=k_data,
        num_train=num_train,
        num_test=num_test,
        epochs=epochs,
    )


def plot_probes(result: ProbeResult):
    """Heat-map of accuracy vs (layer, ancestor level) and the paper's curves: accuracy vs level, one per layer."""
    plt = pyplot()
    fig, (heat, lines) = plt.subplots(1, 2, figsize=(10, 3.8))
    image = heat.imshow(result.accuracy, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for (i, j), value in np.ndenumerate(result.accuracy):
        heat.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8,
                  color="white" if value < 0.6 else "black")
    heat.set_xticks(range(len(result.levels)), [str(m) for m in result.levels])
    heat.set_yticks(range(len(result.layers)), ["emb." if j == 0 else str(j) for j in result.layers])
    heat.set_xlabel("ancestor level (0 = root)")
    heat.set_ylabel("encoder layer")
    fig.colorbar(image, ax=heat, label="held-out accuracy")
    colors = plt.get_cmap("viridis")
    for row, layer in enumerate(result.layers):
        lines.plot(result.levels, result.accuracy[row], marker="o",
                   color=colors(row / max(1, len(result.layers) - 1)),
                   label="embedding" if layer == 0 else f"layer {layer}")
    lines.plot(result.levels, result.bp_accuracy, ls="--", color="black", label="BP (whole sequence)")
    lines.plot(result.levels, result.chance, ls=":", color="grey", label="most frequent symbol")
    lines.set_xticks(result.levels)
    lines.set_xlabel("ancestor level (0 = root)")
    lines.set_ylabel("held-out accuracy")
    lines.set_ylim(0, 1.02)
    lines.legend(fontsize=7)
    where = "all positions" if result.positions == "all" else "first and last positions only"
    fig.suptitle(f"Ancestor probes (trained on {where}; ℓ={result.depth}, k_train={result.model_filter_level}, "
                 f"k_data={result.data_filter_level}, {result.num_train} sequences, {result.epochs} epochs)",
                 fontsize=9)
    fig.tight_layout()
    return fig


def write_outputs(result: ProbeResult, out_dir, *, name: str | None = None) -> dict:
    """Write probe[_ends].png and probe[_ends].json into ``out_dir``."""
    out = prepare_output(out_dir)
    name = name or ("probe" if result.positions == "all" else "probe_ends")
    paths = {"figure": save_figure(plot_probes(result), out / f"{name}.png")}
    paths["json"] = write_json(out / f"{name}.json", result.to_dict())
    return paths


def run(args) -> int:
    """``hf-treelang probe`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    try:
        result = probe(args.checkpoint, levels=args.levels, data_filter_level=args.data_filter_level,
                       positions=args.positions, num_train=args.num_train, num_test=args.num_test,
                       epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate,
                       probe_hidden=args.probe_hidden, seed=args.seed, device=args.device)
    except (ValueError, TypeError) as error:
        return cli_error("probe", error)
    paths = write_outputs(result, args.out)
    print("held-out accuracy (rows: layers, columns: ancestor levels " + str(result.levels) + ")")
    for layer, row in zip(result.layers, result.accuracy):
        print(f"  layer {layer}: " + "  ".join(f"{a:.3f}" for a in row))
    print("  BP:      " + "  ".join(f"{a:.3f}" for a in result.bp_accuracy))
    print(f"wrote {paths['figure']} and {paths['json']}")
    return 0


def main(argv=None) -> int:
    """``hf-treelang probe`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    from hf_treelang import cli

    return cli.run_command("probe", argv)
