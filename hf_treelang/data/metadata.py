"""What a loaded treelang dataset knows about itself: its grammar, its generating parameters, its probe labels.

* :func:`grammar_from_dataset` / :func:`dataset_params` read the grammar and the generating parameters back from a
  dataset built by ``load_dataset("treelang", ...)``, so a dataset alone is enough to run
  :class:`hf_treelang.core.bp.BeliefPropagation`.
* :func:`ancestor_labels` expands the per-node ancestor columns into per-leaf probe labels.
"""

from __future__ import annotations

import json

import numpy as np

from hf_treelang.core.grammar import Grammar
from hf_treelang.core.params import check_param


def _first_split(dataset):
    """A Dataset from a Dataset or a DatasetDict."""
    if hasattr(dataset, "info"):
        return dataset
    if hasattr(dataset, "values"):
        splits = list(dataset.values())
        if splits:
            return splits[0]
    raise TypeError(f"expected a datasets.Dataset or DatasetDict, got {type(dataset).__name__}")


def dataset_metadata(dataset) -> dict:
    """The metadata the builder stored in ``dataset.info.description``: ``params``, ``split_seeds``, ``grammar``."""
    from hf_treelang.dataset_builder.treelang import METADATA_MARKER

    description = _first_split(dataset).info.description or ""
    head, marker, tail = description.partition(METADATA_MARKER)
    if not marker:
        raise ValueError(
            "this dataset carries no hf-treelang metadata (it was not built by load_dataset('treelang', ...)); "
            "for a published copy read grammar.json and generation.json from its repository"
        )
    return json.loads(tail.strip().splitlines()[0])


def dataset_params(dataset) -> dict:
    """The generating parameters: filter_level (k), depth (ℓ), num_symbols (q), sigma (σ), seed, split sizes."""
    return dataset_metadata(dataset)["params"]


def grammar_from_dataset(dataset) -> Grammar:
    """The grammar that generated ``dataset`` (bit-exact), e.g. for ``BeliefPropagation(grammar, depth, k)``."""
    return Grammar.from_dict(dataset_metadata(dataset)["grammar"])


def ancestor_labels(ancestors, depth: int) -> np.ndarray:
    """Per-leaf probe labels from a level column: leaf i gets ``ancestors[:, i >> (depth - m)]``.

    Args:
        ancestors: (n, 2**m) the ``ancestors_level_m`` column (array or list of lists), 0 <= m <= depth.
        depth: ℓ.

    Returns:
        (n, 2**depth) int64, the level-m ancestor of every leaf.
    """
    depth = check_param("depth", depth)
    values = np.asarray(ancestors, dtype=np.int64)
    if values.ndim != 2 or values.shape[1] & (values.shape[1] - 1) or values.shape[1] > 2**depth:
        raise ValueError(f"ancestors must have shape (n, 2**m) with 0 <= m <= depth={depth}, got {values.shape}")
    return np.repeat(values, 2**depth // values.shape[1], axis=1)  # (n, 2**depth)
