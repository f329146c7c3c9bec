"""Plotting shared by training outputs and analyses (matplotlib only, loaded on use): a headless pyplot,
reproducible PNGs, the paper's colours and the tree's block boundaries on a per-position axis.

The paper's colour scheme (Fig. 1c/d, 2b, 3a): BP_k and k_test curves run from light green (k = 1) to purple
(k = ℓ), with the full hierarchy k = 0 in black; :func:`level_color` is the one place that defines it.
"""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, *, crop: bool = True) -> Path:
    """Save a matplotlib figure as PNG without time-stamped metadata (same inputs => same bytes).

    ``crop``: trim the page to what is drawn (``bbox_inches="tight"``, which draws the figure twice); False saves the
    page as laid out, for a figure that ``tight_layout`` already fitted (one draw: a short run's curves come sooner).
    """
    import matplotlib.pyplot as plt

    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight" if crop else None, metadata={"Software": None})
    plt.close(fig)
    return path


def level_color(k: int, depth: int):
    """The paper's colour of BP_k / k_test = k: k = 0 black, then light green (k = 1) to purple (k = ℓ)."""
    import matplotlib

    if k == 0:
        return "black"
    return matplotlib.colormaps["viridis_r"](0.15 + 0.85 * (k - 1) / max(1, depth - 1))


def draw_block_boundaries(ax, depth: int, levels: int = 3, *, horizontal: bool = True, color: str = "white",
                          lw: float = 0.8, alpha: float = 0.5, arity: int = 2) -> None:
    """Faint lines between the subtrees of levels 1 .. ``levels`` (the tree's blocks of s**(ℓ-m) leaves, s =
    ``arity``), level m drawn ``lw / m`` wide at opacity ``alpha / m``, on an axis of leaf positions 0 .. s**ℓ − 1
    drawn at integers (``imshow``): vertical lines, and horizontal ones too for a position × position map
    (attention) when ``horizontal``."""
    num_leaves = arity**depth
    for m in range(1, min(levels, depth - 1) + 1):
        block = arity ** (depth - m)
        for edge in range(block, num_leaves, block):
            if edge % (arity * block) == 0 and m > 1:
                continue  # already drawn, stronger, by a higher level
            style = {"color": color, "lw": lw / m, "alpha": alpha / m}
            ax.axvline(edge - 0.5, **style)
            if horizontal:
                ax.axhline(edge - 0.5, **style)
