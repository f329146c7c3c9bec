"""The filtered hierarchical tree data as a ``datasets`` builder: ``load_dataset("treelang", "k2")``.

One :class:`TreeLangBuilderConfig` per (filter level k, depth ℓ, num_symbols q, sigma σ, seed, split sizes); here
``seed`` is the grammar seed (``grammar_seed`` everywhere else in hf-treelang), because the user's card asks for
"a config per (seed, k, σ)".
The named configs ``k0`` .. ``k4`` are the paper's defaults (grammar seed 0, σ = 1, q = 4, ℓ = 4); every other
combination is reached with keyword overrides, e.g.
``load_dataset("treelang", "k2", seed=15, sigma=0.5, num_symbols=8, depth=6, num_train=2**14)``.

Randomness:

* the grammar depends only on (seed, q, σ) through :meth:`Grammar.random`, so the configs k0 .. kℓ of one
  (seed, q, σ) share it (out-of-sample tests need this);
* each split samples from its own stream, seeded by :func:`split_seed` from
  (seed, q, σ, ℓ, k, split) through a numpy ``SeedSequence``: no split reuses another split's draws, and example i of
  a split depends only on the config and i (never on the split sizes, the chunking or ``num_proc``).

Columns of one example (ℓ = 2, k = 0, q = 4; the tree of the sampling module's worked example)::

    {"input_ids": [1, 1, 3, 0],       # the 2**ℓ leaves, left to right
     "root": 3,                       # ClassLabel over the q symbols
     "filter_level": 0,               # k, so that mixtures of configs can be grouped at evaluation
     "ancestors_level_1": [0, 2]}     # the 2**m nodes of level m, for every level 0 < m < ℓ the model draws

Ancestors are stored once per node (``ancestors_level_m`` has 2**m entries, the layout of ``BPResult.levels``),
not once per leaf: the per-leaf form costs ℓ times the leaves on disk (1 GiB at ℓ = 10, P = 2**16). The probe label
of leaf i at level m is ``ancestors_level_m[i >> (ℓ - m)]``; :func:`hf_treelang.data.ancestor_labels` expands it.
Levels 1 .. k-1 do not exist in the filtered model and have no column.

The builder is an ``ArrowBasedBuilder`` rather than a ``GeneratorBasedBuilder``: it writes one Arrow table per
chunk of trees instead of one Python dict per example, 25x faster (measured: 0.2 s instead of 5 s for 2**18 trees
at ℓ = 4), which is what keeps ℓ = 10 data within the speed target.

Dimension glossary: ``n`` trees, ``l`` depth (ℓ), ``k`` filter level, ``q`` symbols, level ``m`` has ``2**m`` nodes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa

from hf_treelang.citation import BIBTEX
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.params import check_int, check_param, check_sigma, warn_renamed
from hf_treelang.core.sampling import SPLITS, sample_trees
from hf_treelang.core.sampling import split_seed as core_split_seed

DATASET_NAME = "treelang"
DATASET_FORMAT = "hf-treelang-dataset/1"
METADATA_MARKER = "hf-treelang metadata (JSON):"
NAMED_FILTER_LEVELS = range(0, 5)  # the configs k0 .. k4 of the paper's ℓ = 4
_LEAVES_PER_CHUNK = 1 << 20  # bounded memory: ~2**20 leaves (~40 MiB of int64 levels) per generated table
_CONFIG_NAME = re.compile(r"k(\d+)")

CITATION = BIBTEX


def _check_size(name: str, value) -> int:
    return check_param("num_sequences", value, as_name=name)


@dataclasses.dataclass
class TreeLangBuilderConfig(datasets.BuilderConfig):
    """The generating parameters of one treelang dataset.

    Args:
        name: ``"k<filter_level>"``; set from ``filter_level`` when left empty.
        filter_level: k in [0, depth]; 0 the full hierarchy, ``depth`` leaves independent given the root.
        depth: ℓ in [1, 16]; sequences have 2**depth symbols.
        num_symbols: q in [2, 256], the number of symbols (``vocab_size``, its former name, still works for one
            release with a FutureWarning).
        sigma: σ >= 0, the log-normal width of the grammar's rule weights.
        seed: the grammar seed in [0, 2**32 - 1] (``Grammar.random``); the split streams are derived from it.
        num_train / num_validation / num_test: split sizes (>= 0; a split of size 0 is left out). The default
            training set is the paper's largest, 2**18; validation and test have 10**4 sequences, the paper's test size.
    """

    name: str = ""
    version: datasets.Version | str | None = datasets.Version("1.0.0")
    filter_level: int | None = None
    depth: int = 4
    num_symbols: int | None = None  # 4 when not given
    sigma: float = 1.0
    seed: int = 0
    num_train: int = 2**18
    num_validation: int = 10**4
    num_test: int = 10**4
    vocab_size: int | None = None  # renamed num_symbols in 0.2

    def __post_init__(self):
        if self.vocab_size is not None:
            if self.num_symbols is not None:
                raise TypeError("TreeLangBuilderConfig got both `vocab_size` (renamed) and `num_symbols`; pass `num_symbols`")
            warn_renamed("vocab_size", "num_symbols", "TreeLangBuilderConfig")
            self.num_symbols, self.vocab_size = self.vocab_size, None
        if self.num_symbols is None:
            self.num_symbols = 4
        if self.data_dir is not None or self.data_files is not None:
            raise ValueError("treelang generates its data: data_dir and data_files must not be given")
        self.depth = check_param("depth", self.depth)
        from_name = _filter_level_from_name(self.name) if self.name else None
        if self.filter_level is None and from_name is None:
            raise ValueError("filter_level (k) is missing: name a config 'k0' .. 'k4' or pass filter_level=")
        if self.filter_level is not None and from_name is not None and self.filter_level != from_name:
            raise ValueError(f"filter_level={self.filter_level!r} contradicts the config name {self.name!r}")
        k = self.filter_level if self.filter_level is not None else from_name
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k > self.depth:
            raise ValueError(
                f"filter_level (k) must be in [0, depth={self.depth}], got {k}: "
                f"k > ℓ has no level k (pass depth >= {k} for config 'k{k}')"
            )
        self.filter_level = check_int("filter_level", k, 0, self.depth)
        self.name = f"k{self.filter_level}"
        self.num_symbols = check_param("num_symbols", self.num_symbols)
        self.sigma = check_sigma(self.sigma)
        self.seed = check_param("grammar_seed", self.seed, as_name="seed")
        for split in SPLITS:
            setattr(self, f"num_{split}", _check_size(f"num_{split}", getattr(self, f"num_{split}")))
        super().__post_init__()

    @property
    def params(self) -> dict:
        """The generating parameters, JSON-ready, in a fixed order."""
        return {
            "filter_level": self.filter_level,
            "depth": self.depth,
            "num_symbols": self.num_symbols,
            "sigma": self.sigma,
            "seed": self.seed,
            "num_train": self.num_train,
            "num_validation": self.num_validation,
            "num_test": self.num_test,
        }

    @property
    def config_id(self) -> str:
        """The cache key: every parameter, readable (so different configs never share a cache entry)."""
        return (
            f"{self.name}-depth{self.depth}-q{self.num_symbols}-sigma{self.sigma!r}-seed{self.seed}"
            f"-n{self.num_train}.{self.num_validation}.{self.num_test}"
        )

    def num_examples(self, split: str) -> int:
        return getattr(self, f"num_{split}")

    def grammar(self) -> Grammar:
        """The grammar of this config: a function of (seed, num_symbols, sigma) only."""
        return Grammar.random(num_symbols=self.num_symbols, sigma=self.sigma, grammar_seed=self.seed)

    def levels(self) -> list:
        """The ancestor levels m (0 < m < ℓ) that the filtered model draws, i.e. max(1, k) <= m < ℓ."""
        return list(range(max(1, self.filter_level), self.depth))

    def features(self) -> datasets.Features:
        symbol = datasets.Value("uint8")
        features = {
            "input_ids": datasets.List(symbol, length=2**self.depth),
            "root": datasets.ClassLabel(names=[str(a) for a in range(self.num_symbols)]),
            "filter_level": datasets.Value("int8"),
        }
        for m in self.levels():
            features[f"ancestors_level_{m}"] = datasets.List(symbol, length=2**m)
        return datasets.Features(features)

    def metadata(self) -> dict:
        """Everything needed to rebuild the data and run BP: parameters, split seeds, grammar."""
        return {
            "format": DATASET_FORMAT,
            "params": self.params,
            "split_seeds": {split: split_seed(self, split) for split in SPLITS},
            "grammar": self.grammar().to_dict(),
        }

    def dataset_description(self) -> str:
        p = self.params
        return (
            f"Filtered hierarchical tree language (Garnier-Brun et al.), filtering level k={p['filter_level']}, "
            f"depth ℓ={p['depth']}, q={p['num_symbols']} symbols, σ={p['sigma']}, grammar seed {p['seed']}. "
            "input_ids are the 2**ℓ leaves, root the root symbol, ancestors_level_m the 2**m nodes of level m.\n\n"
            f"{METADATA_MARKER}\n{json.dumps(self.metadata(), separators=(',', ':'))}\n"
        )


def _filter_level_from_name(name: str) -> int:
    match = _CONFIG_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"config name must be 'k<filter_level>' (named configs: k0 .. k4), got {name!r}")
    return int(match.group(1))


def split_seed(config: TreeLangBuilderConfig, split: str) -> int:
    """The sampling seed of one split (:func:`hf_treelang.core.sampling.split_seed` of the config's parameters)."""
    return core_split_seed(config.seed, config.num_symbols, config.sigma, config.depth, config.filter_level, split)


def chunk_ranges(num_examples: int, depth: int) -> list:
    """(start, count) ranges covering [0, num_examples): 2**20 leaves each (a power of two of trees, so that chunks
    stay aligned with the sampler's power-of-two random streams)."""
    rows = max(1, _LEAVES_PER_CHUNK >> depth)
    return [(start, min(rows, num_examples - start)) for start in range(0, num_examples, rows)]


def _fixed_size_lists(values: np.ndarray) -> pa.Array:
    """(n, w) int array -> Arrow fixed_size_list<uint8>[w] without a Python loop."""
    n, w = values.shape
    return pa.FixedSizeListArray.from_arrays(pa.array(values.astype(np.uint8).reshape(-1)), w)


def generate_table(config: TreeLangBuilderConfig, grammar: Grammar, split: str, start: int, count: int) -> pa.Table:
    """Examples ``start .. start + count - 1`` of ``split``, an Arrow table with the schema of ``config.features()``."""
    trees = sample_trees(grammar, count, config.depth, config.filter_level, split_seed(config, split), start=start)
    columns = {
        "input_ids": _fixed_size_lists(trees.leaves),  # (n, 2**l)
        "root": pa.array(trees.roots, type=pa.int64()),  # (n,)
        "filter_level": pa.array(np.full(count, config.filter_level, dtype=np.int8)),
    }
    for m in config.levels():
        columns[f"ancestors_level_{m}"] = _fixed_size_lists(trees.levels[m])  # (n, 2**m)
    return pa.Table.from_pydict(columns, schema=config.features().arrow_schema)


def source_hash() -> str:
    """Hash of the code that determines the bytes (this builder, the limits, the grammar, the sampler).

    Part of the cache directory and of the fingerprint: it is the same on every machine running the same code, and
    changes, so that stale caches are never reused, whenever that code changes.
    """
    import hf_treelang.core.grammar
    import hf_treelang.core.params
    import hf_treelang.core.sampling

    digest = hashlib.sha256()
    modules = (hf_treelang.core.params, hf_treelang.core.grammar, hf_treelang.core.sampling)
    for path in (__file__, *(module.__file__ for module in modules)):
        digest.update(Path(path).read_bytes().replace(b"\r\n", b"\n"))
    return digest.hexdigest()[:16]


class TreeLang(datasets.ArrowBasedBuilder):
    """Builder of the filtered hierarchical tree data (see the module docstring)."""

    BUILDER_CONFIG_CLASS = TreeLangBuilderConfig
    BUILDER_CONFIGS = [TreeLangBuilderConfig(name=f"k{k}") for k in NAMED_FILTER_LEVELS]
    DEFAULT_CONFIG_NAME = None

    def _create_builder_config(self, config_name=None, custom_features=None, config_id=None, **config_kwargs):
        # Every config, named or not, is rebuilt (and so validated) from its keywords, and its cache key lists every
        # parameter: the base class would setattr overrides unvalidated and key the cache by the overrides given.
        if custom_features is not None:
            raise ValueError("treelang defines its own features: features= must not be given")
        fields = {f.name for f in dataclasses.fields(TreeLangBuilderConfig)} - {"version", "description"}
        unknown = sorted(set(config_kwargs) - fields)
        if unknown:
            allowed = sorted(fields - {"name", "data_dir", "data_files"})
            raise ValueError(f"unknown treelang keyword(s) {unknown}; allowed: {allowed}")
        if config_name is None and config_kwargs.get("filter_level") is None:
            names = [c.name for c in self.BUILDER_CONFIGS]
            raise ValueError(f"config name is missing: pick one of {names} or pass filter_level=, e.g. "
                             "load_dataset('treelang', 'k2')")
        config = TreeLangBuilderConfig(name=config_name or "", **config_kwargs)
        return config, config.config_id

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(
            description=self.config.dataset_description(),
            features=self.config.features(),
            citation=CITATION,
            homepage="https://arxiv.org/abs/2408.15138",
            license="mit",
        )

    def _split_generators(self, dl_manager):
        return [
            datasets.SplitGenerator(
                name=split,
                gen_kwargs={"split": split, "chunks": chunk_ranges(self.config.num_examples(split), self.config.depth)},
            )
            for split in SPLITS
            if self.config.num_examples(split) > 0  # datasets cannot read back an empty split: leave it out
        ]

    def _generate_tables(self, split: str, chunks: list):
        # `chunks` is a contiguous slice of the split's ranges when num_proc > 1; every range is generated from its
        # own start index, so the bytes do not depend on how the ranges are shared between processes.
        grammar = self.config.grammar()
        for index, (start, count) in enumerate(chunks):
            yield datasets.builder.Key(index, 0), generate_table(self.config, grammar, split, start, count)
