"""Average attention maps (paper Fig. 1e, Fig. 4, App. E.5): every layer's attention matrix averaged over inputs.

The inputs are in-sample: fresh sequences of the checkpoint's own data distribution (grammar, depth ℓ, k_train),
with one masked leaf per sequence at a random position for an MLM checkpoint (as in training) and none for a root
classifier. Several checkpoints give a grid, one row per model (e.g. k_train = 0 … ℓ as in Fig. 4).

Dimension glossary: ``n`` sequences, ``L = 2**ℓ`` positions, ``h`` heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hf_treelang.core.sampling import sample_trees
from hf_treelang.core.masking import mask_evaluation_set
from hf_treelang.plotting import pyplot, save_figure

from .activations import run_with_cache
from .checkpoint import as_checkpoint
from .io import check_positive, cli_error, prepare_output, write_json


@dataclass
class AttentionResult:
    """Average attention of one checkpoint.

    Attributes:
        maps: (layers, heads, L, L) attention averaged over the inputs; ``maps[i, h, a, b]`` is how much position a
            attends to position b in layer i (rows sum to 1).
        checkpoint: the folder it came from.
        task: ``"mlm"``, ``"root"`` or ``None``.
        depth: ℓ.
        filter_level: k_train.
        num_samples: number of averaged inputs.
        masked: whether one leaf per input was masked.
    """

    maps: np.ndarray
    checkpoint: str
    task: str | None
    depth: int
    filter_level: int
    num_samples: int
    masked: bool

    @property
    def label(self) -> str:
        task = {"mlm": "MLM", "root": "root"}.get(self.task, "encoder")
        return f"{task}, k_train={self.filter_level}"

    def to_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint,
            "task": self.task,
            "depth": self.depth,
            "filter_level": self.filter_level,
            "num_samples": self.num_samples,
            "masked": self.masked,
            "maps": np.round(self.maps, 6),
        }


@torch.no_grad()
def average_attention(
    checkpoint,
    *,
    num_samples: int = 10_000,
    seed: int = 20_240_602,
    mask: bool | None = None,
    batch_size: int = 512,
    device="cpu",
) -> AttentionResult:
    """Every layer's attention matrix, averaged over ``num_samples`` in-sample inputs (10^4 in the paper).

    Args:
        checkpoint: a TreeLang checkpoint folder (any task) or a loaded checkpoint.
        num_samples: inputs averaged over.
        seed: seed of the inputs (and of the masked positions).
        mask: mask one leaf per input; ``None`` masks for an MLM checkpoint only, as in its training.
        batch_size: inference batch size.
    """
    ckpt = as_checkpoint(checkpoint, device=device)
    num_samples = check_positive("num_samples", num_samples)
    batch_size = check_positive("batch_size", batch_size)
    masked = ckpt.task == "mlm" if mask is None else bool(mask)
    leaves = sample_trees(ckpt.grammar, num_samples, ckpt.depth, ckpt.filter_level, seed).leaves  # (n, L)
    if masked:
        leaves, _, _ = mask_evaluation_set(leaves, ckpt.mask_token_id, seed)
    cache = run_with_cache(ckpt, leaves, logits=False, attentions=True, batch_size=batch_size)
    return AttentionResult(
        maps=(cache.attention_sum / num_samples).numpy(),  # (layers, h, L, L)
        checkpoint=str(ckpt.path),
        task=ckpt.task,
        depth=ckpt.depth,
        filter_level=ckpt.filter_level,
        num_samples=num_samples,
        masked=masked,
    )


def attention_grid(checkpoints, **kwargs) -> list:
    """:func:`average_attention` of several checkpoints (rows of Fig. 4); all are validated before any runs."""
    if not checkpoints:
        raise ValueError("checkpoints must name at least one TreeLang checkpoint folder, got none")
    loaded = [as_checkpoint(c, device=kwargs.get("device", "cpu")) for c in checkpoints]
    return [average_attention(c, **kwargs) for c in loaded]


def _block_boundaries(ax, depth: int, levels: int = 3) -> None:
    """Faint lines between the subtrees of levels 1 .. ``levels`` (the tree's blocks of 2**(ℓ-m) leaves), fainter
    for deeper levels, on both axes of an attention map."""
    num_leaves = 2**depth
    for m in range(1, min(levels, depth - 1) + 1):
        block = 2 ** (depth - m)
        for edge in range(block, num_leaves, block):
            if edge % (2 * block) == 0 and m > 1:
                continue  # already drawn, stronger, by a higher level
            style = {"color": "white", "lw": 0.8 / m, "alpha": 0.5 / m}
            ax.axvline(edge - 0.5, **style)
            ax.axhline(edge - 0.5, **style)


def plot_attention(results: list):
    """One row per checkpoint, one panel per layer (heads averaged), as the paper's Fig. 4.

    Each panel has its own colour bar (attention weight, rows sum to 1), position ticks and the boundaries of the
    tree's blocks (subtrees of levels 1-3) drawn faintly.
    """
    plt = pyplot()
    rows = len(results)
    cols = max(r.maps.shape[0] for r in results)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.7 * rows + 0.4), squeeze=False)
    for row, result in enumerate(results):
        num_leaves = result.maps.shape[-1]
        ticks = list(range(0, num_leaves, max(1, num_leaves // 8)))
        for layer in range(cols):
            ax = axes[row][layer]
            if layer >= result.maps.shape[0]:
                ax.axis("off")
                continue
            image = ax.imshow(result.maps[layer].mean(0), cmap="viridis", vmin=0.0, interpolation="nearest")
            _block_boundaries(ax, result.depth)
            ax.set_xticks(ticks)
            ax.set_yticks(ticks)
            ax.tick_params(labelsize=6, length=2)
            bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
            bar.ax.tick_params(labelsize=6)
            if row == 0:
                ax.set_title(f"layer {layer + 1}", fontsize=9)
            if row == rows - 1:
                ax.set_xlabel("attended position", fontsize=7)
            if layer == 0:
                ax.set_ylabel(f"{result.label}\nquery position", fontsize=8)
    fig.suptitle(f"Average attention over {results[0].num_samples} in-sample inputs (faint lines: the tree's blocks)",
                 fontsize=10)
    fig.tight_layout()
    return fig


def write_outputs(results: list, out_dir) -> dict:
    """Write attention.png and attention.json (every map, per head) into ``out_dir``."""
    out = prepare_output(out_dir)
    paths = {"figure": save_figure(plot_attention(results), out / "attention.png")}
    paths["json"] = write_json(out / "attention.json", {"models": [r.to_dict() for r in results]})
    return paths


def run(args) -> int:
    """``hf-treelang attention`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    mask = {"auto": None, "yes": True, "no": False}[args.mask]
    try:
        results = attention_grid(args.checkpoints, num_samples=args.num_samples, seed=args.seed, mask=mask,
                                 batch_size=args.batch_size, device=args.device)
    except (ValueError, TypeError) as error:
        return cli_error("attention", error)
    paths = write_outputs(results, args.out)
    print(f"wrote {paths['figure']} and {paths['json']}")
    return 0
