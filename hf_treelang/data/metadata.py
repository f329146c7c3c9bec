"""What a loaded treelang dataset knows about itself: its grammar, its generating parameters, its probe labels.

* :func:`grammar_from_dataset` / :func:`dataset_params` read the grammar and the generating parameters back from a
  dataset, so a dataset alone is enough to run :class:`hf_treelang.core.bp.BeliefPropagation`:

  - built by ``load_dataset("treelang", ...)``: from the metadata the builder writes into ``info.description``;
  - loaded from a published copy (``load_dataset(repository, "seed15-sigma1.0-k2")``, written by
    ``hf-treelang publish-dataset``): its Parquet files carry no hf-treelang metadata and the loaded dataset does not
    remember where it came from, so pass the same ``repository`` (a local folder or a Hub dataset id); the config's
    entry of ``generation.json`` and its ``data/<config>/grammar.json`` are read, found by the dataset's
    ``info.config_name`` (a repository may hold several grammars).
* :func:`ancestor_labels` expands the per-node ancestor columns into per-leaf probe labels.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from hf_treelang.core.grammar import Grammar
from hf_treelang.core.params import check_depth, check_param

GENERATION_FILE = "generation.json"  # the index of a published repository: per config, params, seeds, BP accuracies
GRAMMAR_FILE = "data/{config}/grammar.json"  # the grammar of one config of a published repository


def _first_split(dataset):
    """A Dataset from a Dataset or a DatasetDict."""
    if hasattr(dataset, "info"):
        return dataset
    if hasattr(dataset, "values"):
        splits = list(dataset.values())
        if splits:
            return splits[0]
    raise TypeError(f"expected a datasets.Dataset or DatasetDict, got {type(dataset).__name__}")


def _read_repository_json(repository, filename: str) -> dict:
    """``filename`` of a published repository: a local folder, else a Hub dataset repository id."""
    local = Path(os.fspath(repository)) / filename
    if Path(os.fspath(repository)).is_dir():
        if not local.is_file():
            raise ValueError(f"repository {str(repository)!r} has no {filename}: is it a folder written by "
                             "`hf-treelang publish-dataset`?")
        return json.loads(local.read_text(encoding="utf-8"))
    from huggingface_hub import hf_hub_download

    try:
        path = hf_hub_download(repo_id=str(repository), filename=filename, repo_type="dataset")
    except (OSError, ValueError) as error:
        raise ValueError(f"repository {str(repository)!r} is neither a local folder nor a readable Hub dataset "
                         f"repository with {filename}: {error}") from None
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _published_metadata(split, repository) -> dict:
    """The metadata of a dataset loaded from a published ``repository``, found by its config name."""
    from hf_treelang.dataset_builder.treelang import DATASET_FORMAT  # lazy: imports datasets; metadata needs numpy

    name = split.info.config_name
    generation = _read_repository_json(repository, GENERATION_FILE)
    if generation.get("format") != DATASET_FORMAT:
        raise ValueError(f"{GENERATION_FILE} of {str(repository)!r} has format {generation.get('format')!r}, "
                         f"expected {DATASET_FORMAT!r}")
    configs = generation.get("configs", {})
    if name not in configs:
        raise ValueError(f"this dataset's config {name!r} is not in repository {str(repository)!r}, whose configs "
                         f"are {sorted(configs)}")
    entry = configs[name]
    meta = {"format": DATASET_FORMAT, "params": entry["params"], "split_seeds": entry["split_seeds"],
            "grammar": _read_repository_json(repository, GRAMMAR_FILE.format(config=name))}
    features, params = split.features, entry["params"]
    shape = (features["root"].num_classes, features["input_ids"].length)
    # the root's classes: q, or an RHM's n; the leaves: s**ℓ (s = 2 but for an RHM)
    expected = (params.get("num_classes", params["num_symbols"]), params.get("arity", 2) ** params["depth"])
    if shape != expected:
        raise ValueError(f"this dataset ({shape[0]} root classes, {shape[1]} leaves) is not config {name!r} of "
                         f"repository {str(repository)!r} ({expected[0]} root classes, {expected[1]} leaves)")
    return meta


def dataset_metadata(dataset, repository=None) -> dict:
    """The generating metadata of ``dataset``: ``params``, ``split_seeds``, ``grammar`` (a ``Grammar.to_dict()``).

    Args:
        dataset: a ``datasets.Dataset`` or ``DatasetDict`` of treelang data.
        repository: for data loaded from a published copy, the folder or Hub dataset id it was loaded from
            (ignored for data built by ``load_dataset("treelang", ...)``, which carry their own metadata).
    """
    from hf_treelang.dataset_builder.treelang import METADATA_MARKER  # lazy: imports datasets; see above

    split = _first_split(dataset)
    _, marker, tail = (split.info.description or "").partition(METADATA_MARKER)
    if marker:
        return json.loads(tail.strip().splitlines()[0])
    if repository is None:
        raise ValueError(
            f"this dataset (config {split.info.config_name!r}) carries no hf-treelang metadata: it was not built by "
            "load_dataset('treelang', ...). For a copy published with `hf-treelang publish-dataset`, pass the folder "
            "or Hub id it was loaded from: repository='path/or/repo-id'"
        )
    return _published_metadata(split, repository)


def dataset_params(dataset, repository=None) -> dict:
    """The generating parameters: filter_level (k), depth (ℓ), num_symbols (q), sigma (σ), seed, split sizes.

    ``repository``: see :func:`dataset_metadata`.
    """
    return dataset_metadata(dataset, repository)["params"]


def grammar_from_dataset(dataset, repository=None) -> Grammar:
    """The grammar that generated ``dataset`` (bit-exact), e.g. for ``BeliefPropagation(grammar, depth, k)``.

    ``repository``: for data loaded from a published copy, the folder or Hub dataset id it was loaded from; the
    grammar of the dataset's own config is read (see :func:`dataset_metadata`).
    """
    return Grammar.from_dict(dataset_metadata(dataset, repository)["grammar"])


def ancestor_labels(ancestors, depth: int, arity: int = 2) -> np.ndarray:
    """Per-leaf probe labels from a level column: leaf i gets ``ancestors[:, i // s**(depth - m)]``
    (``i >> (depth - m)`` for the paper's s = 2).

    Args:
        ancestors: (n, s**m) the ``ancestors_level_m`` column (array or list of lists), 0 <= m <= depth.
        depth: ℓ.
        arity: s, the children of every node (2, or an RHM's s).

    Returns:
        (n, s**depth) int64, the level-m ancestor of every leaf.
    """
    arity = check_param("arity", arity)
    depth = check_depth(depth, arity)
    values = np.asarray(ancestors, dtype=np.int64)
    widths = [arity**m for m in range(depth + 1)]
    if values.ndim != 2 or values.shape[1] not in widths:
        raise ValueError(f"ancestors must have shape (n, {arity}**m) with 0 <= m <= depth={depth}, got {values.shape}")
    return np.repeat(values, arity**depth // values.shape[1], axis=1)  # (n, s**depth)
