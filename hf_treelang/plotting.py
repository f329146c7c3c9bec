"""Plotting shared by training outputs and analyses (matplotlib only, loaded on use): a headless pyplot,
reproducible PNGs and the paper's colours.

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


def save_figure(fig, path) -> Path:
    """Save a matplotlib figure as PNG without time-stamped metadata (same inputs => same bytes)."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return path


def level_color(k: int, depth: int):
    """The paper's colour of BP_k / k_test = k: k = 0 black, then light green (k = 1) to purple (k = ℓ)."""
    import matplotlib

    if k == 0:
        return "black"
    return matplotlib.colormaps["viridis_r"](0.15 + 0.85 * (k - 1) / max(1, depth - 1))
