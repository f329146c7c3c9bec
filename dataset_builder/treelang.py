"""The filtered hierarchical tree data as a ``datasets`` builder: ``load_dataset("treelang", "seed15-sigma1.0-k2")``.

One :class:`TreeLangBuilderConfig` per (grammar seed, σ, q, ℓ, filter level k, split sizes); here ``seed`` is the
grammar seed (``grammar_seed`` everywhere else in hf-treelang), because the user's card asks for "a config per
(seed, k, σ)".

Config names carry the generating parameters (:func:`config_name`, :func:`parse_config_name`)::

    seed<grammar seed>-sigma<σ>[-q<q>][-depth<ℓ>]-k<k>     e.g. "seed15-sigma1.0-k2", "seed0-sigma0.5-q8-depth6-k3"
    k<k>                                                  the paper's grammar: seed 0, σ = 1 (the 0.1 names)

σ is written as Python writes the float (``1.0``, ``0.5``, ``1e-05``: it reads back bit-exact); any spelling of the
same number is accepted (``sigma1`` is ``sigma1.0``). ``-q<q>`` and ``-depth<ℓ>`` are left out at the paper's q = 4,
ℓ = 4. Keywords still reach every combination, and a keyword that disagrees with the name is an error::

    load_dataset("treelang", "seed15-sigma0.5-k2", num_train=2**14)      # k = 2 of grammar (15, q = 4, σ = 0.5)
    load_dataset("treelang", "k2", seed=15, sigma=0.5, num_symbols=8)     # "k2" fixes k only: the same as
    load_dataset("treelang", "seed15-sigma0.5-q8-k2")                     # ... this name
    load_dataset("treelang", "seed15-sigma0.5-k2", seed=0)                # ValueError: seed=0 contradicts the name

Random Hierarchy Model data (Cagnetta et al., PRX 2024; :meth:`Grammar.random_hierarchy`) have configs of their own::

    rhm-v<v>[-n<n>]-m<m>-s<s>-L<L>[-seed<grammar seed>][-k<k>]     e.g. "rhm-v8-m4-s2-L3", "rhm-v16-n4-m4-s3-L3-k1"

v symbols per level, n root classes (left out when n = v), m rules per symbol, arity s (sequences of s**L symbols),
L levels, grammar seed (left out when 0) and filter level k (left out when 0). Keywords (``num_symbols``,
``num_classes``, ``num_rules``, ``arity``, ``depth``, ``seed``, ``filter_level`` and the split sizes) complete or
repeat the name as for the paper's configs; ``sigma`` is not a parameter of the RHM. Their ``root`` column is a
ClassLabel over the n classes, ``input_ids`` has s**L symbols and ``ancestors_level_m`` s**m.

Whatever name it was asked by, a built dataset's ``info.config_name`` is the canonical name of its parameters.
``get_dataset_config_names("treelang")`` lists ``k0`` .. ``k4`` and the paper's grid (:data:`PAPER_GRAMMAR_SEEDS`
0, 1, 15, 31 x σ = 1.0 x k = 0 .. 4); every other valid name loads as well.

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
from unittest import mock

import datasets
import numpy as np
import pyarrow as pa

from hf_treelang.citation import BIBTEX
from hf_treelang.core import grammar as core_grammar
from hf_treelang.core import params as core_params
from hf_treelang.core import sampling as core_sampling
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.params import check_int, check_param, check_sigma, warn_renamed
from hf_treelang.core.sampling import SPLITS, sample_trees
from hf_treelang.core.sampling import split_seed as core_split_seed

DATASET_NAME = "treelang"
DATASET_FORMAT = "hf-treelang-dataset/1"
METADATA_MARKER = "hf-treelang metadata (JSON):"
PAPER_GRAMMAR_SEEDS = (0, 1, 15, 31)  # the four grammars of the paper's figures
PAPER_SIGMAS = (1.0,)
PAPER_NUM_SYMBOLS = 4  # q, left out of config names
PAPER_DEPTH = 4  # ℓ, left out of config names
NAMED_FILTER_LEVELS = range(PAPER_DEPTH + 1)  # the configs k0 .. k4 of the paper's ℓ = 4
NAME_PATTERNS = (
    "'seed<grammar seed>-sigma<σ>[-q<q>][-depth<ℓ>]-k<filter level>' (e.g. 'seed15-sigma1.0-k2'), "
    "'k<filter level>' (grammar seed 0, σ = 1) or, for a Random Hierarchy Model, "
    "'rhm-v<v>[-n<n>]-m<m>-s<s>-L<L>[-seed<grammar seed>][-k<filter level>]' (e.g. 'rhm-v8-m4-s2-L3')"
)
_LEAVES_PER_CHUNK = 1 << 20  # bounded memory: ~2**20 leaves (~40 MiB of int64 levels) per generated table
_NUMBER = r"[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?"  # a σ spelling: digits, optional decimals, optional exponent
_FULL_NAME = re.compile(
    rf"seed(?P<seed>[0-9]+)-sigma(?P<sigma>{_NUMBER})(?:-q(?P<num_symbols>[0-9]+))?(?:-depth(?P<depth>[0-9]+))?"
    r"-k(?P<filter_level>[0-9]+)"
)
_SHORT_NAME = re.compile(r"k(?P<filter_level>[0-9]+)")
_HIERARCHY_NAME = re.compile(
    r"rhm-v(?P<num_symbols>[0-9]+)(?:-n(?P<num_classes>[0-9]+))?-m(?P<num_rules>[0-9]+)-s(?P<arity>[0-9]+)"
    r"-L(?P<depth>[0-9]+)(?:-seed(?P<seed>[0-9]+))?(?:-k(?P<filter_level>[0-9]+))?"
)
_HIERARCHY_KEYWORDS = ("num_classes", "num_rules", "arity")  # the parameters only Random Hierarchy Models have
_CONFIG_KEYWORDS = ("filter_level", "depth", "num_symbols", "sigma", "seed", "num_train", "num_validation", "num_test",
                    "vocab_size", *_HIERARCHY_KEYWORDS)

CITATION = BIBTEX


def _check_size(name: str, value) -> int:
    return check_param("num_sequences", value, as_name=name)


@dataclasses.dataclass(frozen=True)
class NamedParameters:
    """The generating parameters a config name fixes; ``None``: the name leaves it to a keyword (or its default).

    Attributes:
        filter_level: k.
        seed: the grammar seed (``None`` for a short name ``k<k>``: 0 unless a keyword says otherwise).
        sigma: σ (``None`` for a short name: 1.0 unless a keyword says otherwise).
        num_symbols: q (``None`` when the name has no ``-q<q>``: 4 unless a keyword says otherwise).
        depth: ℓ (``None`` when the name has no ``-depth<ℓ>``: 4 unless a keyword says otherwise).
    """

    filter_level: int | None
    seed: int | None = None
    sigma: float | None = None
    num_symbols: int | None = None
    depth: int | None = None


def config_name(seed, sigma, filter_level, num_symbols=PAPER_NUM_SYMBOLS, depth=PAPER_DEPTH) -> str:
    """The canonical config name of (grammar seed, σ, k[, q, ℓ]).

    σ is ``repr(float(sigma))``, which reads back bit-exact; q and ℓ appear only when they differ from the paper's 4.

    Example:
        >>> config_name(15, 1, 2), config_name(0, 0.5, 3, num_symbols=8, depth=6)
        ('seed15-sigma1.0-k2', 'seed0-sigma0.5-q8-depth6-k3')
    """
    seed = check_param("grammar_seed", seed, as_name="seed")
    sigma = check_sigma(sigma)
    num_symbols = check_param("num_symbols", num_symbols)
    depth = check_param("depth", depth)
    filter_level = check_int("filter_level", filter_level, 0, depth)
    q_part = "" if num_symbols == PAPER_NUM_SYMBOLS else f"-q{num_symbols}"
    depth_part = "" if depth == PAPER_DEPTH else f"-depth{depth}"
    return f"seed{seed}-sigma{sigma!r}{q_part}{depth_part}-k{filter_level}"


def hierarchy_config_name(num_symbols, num_classes, num_rules, arity, depth, seed=0, filter_level=0) -> str:
    """The canonical config name of a Random Hierarchy Model dataset (v, n, m, s, L, grammar seed, k).

    n is left out when it equals v, the seed and k when they are 0.

    Example:
        >>> hierarchy_config_name(8, 8, 4, 2, 3), hierarchy_config_name(16, 4, 4, 3, 3, seed=2, filter_level=1)
        ('rhm-v8-m4-s2-L3', 'rhm-v16-n4-m4-s3-L3-seed2-k1')
    """
    v, n, m, s, L = core_grammar.check_hierarchy_params(num_symbols, num_classes, num_rules, arity, depth)
    seed = check_param("grammar_seed", seed, as_name="seed")
    filter_level = check_int("filter_level", filter_level, 0, L)
    classes = "" if n == v else f"-n{n}"
    return f"rhm-v{v}{classes}-m{m}-s{s}-L{L}" + (f"-seed{seed}" if seed else "") + (
        f"-k{filter_level}" if filter_level else "")


def parse_hierarchy_config_name(name: str) -> dict:
    """The parameters a Random Hierarchy Model config name fixes, {keyword: int} (absent parts left out); a
    ValueError lists the config name forms.

    Example:
        >>> parse_hierarchy_config_name("rhm-v8-m4-s2-L3")
        {'num_symbols': 8, 'num_rules': 4, 'arity': 2, 'depth': 3}
    """
    match = _HIERARCHY_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"unknown treelang config name {name!r}: a config name is {NAME_PATTERNS}")
    return {key: int(value) for key, value in match.groupdict().items() if value is not None}


def parse_config_name(name) -> NamedParameters:
    """The parameters a config name fixes (see the module docstring for the two forms).

    Raises ValueError for a name of neither form (listing them) or a value out of range (naming it).

    Example:
        >>> parse_config_name("seed15-sigma1-k2")
        NamedParameters(filter_level=2, seed=15, sigma=1.0, num_symbols=None, depth=None)
    """
    if not isinstance(name, str):
        raise TypeError(f"config name must be a string {NAME_PATTERNS}, got {name!r} ({type(name).__name__})")
    match = _FULL_NAME.fullmatch(name) or _SHORT_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"unknown treelang config name {name!r}: a config name is {NAME_PATTERNS}")
    groups = {key: value for key, value in match.groupdict().items() if value is not None}
    try:
        return NamedParameters(
            filter_level=int(groups["filter_level"]),
            seed=check_param("grammar_seed", int(groups["seed"]), as_name="seed") if "seed" in groups else None,
            sigma=check_sigma(float(groups["sigma"])) if "sigma" in groups else None,
            num_symbols=check_param("num_symbols", int(groups["num_symbols"])) if "num_symbols" in groups else None,
            depth=check_param("depth", int(groups["depth"])) if "depth" in groups else None,
        )
    except ValueError as error:
        raise ValueError(f"config name {name!r}: {error}") from None


def check_config_keywords(keywords) -> None:
    """Raise a ValueError naming every keyword that is not a treelang config parameter, and the allowed ones."""
    if "data_dir" in keywords or "data_files" in keywords:
        raise ValueError("treelang generates its data: data_dir and data_files must not be given")
    unknown = sorted(set(keywords) - set(_CONFIG_KEYWORDS))
    if unknown:
        allowed = sorted(set(_CONFIG_KEYWORDS) - {"vocab_size"})
        raise ValueError(f"unknown treelang keyword(s) {unknown}; allowed: {allowed}")


@dataclasses.dataclass
class TreeLangBuilderConfig(datasets.BuilderConfig):
    """The generating parameters of one treelang dataset.

    A parameter is given by the config name, by its keyword, or by both when they agree (see the module docstring);
    after construction ``name`` is the canonical :func:`config_name` of the parameters.

    Args:
        name: a config name, ``"seed<seed>-sigma<σ>[-q<q>][-depth<ℓ>]-k<k>"`` or ``"k<k>"``; may be empty when
            ``filter_level`` is given.
        filter_level: k in [0, depth]; 0 the full hierarchy, ``depth`` leaves independent given the root.
        depth: ℓ in [1, 16]; sequences have 2**depth symbols (default 4).
        num_symbols: q in [2, 256], the number of symbols (default 4; ``vocab_size``, its former name, still works
            for one release with a FutureWarning).
        sigma: σ in [0, 1000], the log-normal width of the grammar's rule weights (default 1.0).
        seed: the grammar seed in [0, 2**32 - 1] (``Grammar.random``; default 0); the split streams derive from it.
        num_train / num_validation / num_test: split sizes (>= 0; a split of size 0 is left out). The default
            training set is the paper's largest, 2**18; validation and test have 10**4 sequences, the paper's test size.
    """

    name: str = ""
    version: datasets.Version | str | None = datasets.Version("1.0.0")
    filter_level: int | None = None
    num_classes: int | None = None  # n, Random Hierarchy Models only (default v)
    num_rules: int | None = None  # m, Random Hierarchy Models only
    arity: int | None = None  # s, Random Hierarchy Models only
    depth: int | None = None  # PAPER_DEPTH when neither the name nor a keyword gives it
    num_symbols: int | None = None  # PAPER_NUM_SYMBOLS when neither the name nor a keyword gives it
    sigma: float | None = None  # 1.0 when neither the name nor a keyword gives it
    seed: int | None = None  # 0 when neither the name nor a keyword gives it
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
        if self.data_dir is not None or self.data_files is not None:
            raise ValueError("treelang generates its data: data_dir and data_files must not be given")
        if self.name.startswith("rhm"):
            self._resolve_hierarchy()
            super().__post_init__()
            return
        for key in _HIERARCHY_KEYWORDS:
            if getattr(self, key) is not None:
                raise ValueError(f"{key} is a parameter of the Random Hierarchy Model configs only; name one: "
                                 f"'rhm-v<v>[-n<n>]-m<m>-s<s>-L<L>[-seed<seed>][-k<k>]', e.g. 'rhm-v8-m4-s2-L3'")
        named = parse_config_name(self.name) if self.name else NamedParameters(filter_level=None)  # nothing named
        given = {
            "seed": None if self.seed is None else check_param("grammar_seed", self.seed, as_name="seed"),
            "sigma": None if self.sigma is None else check_sigma(self.sigma),
            "num_symbols": None if self.num_symbols is None else check_param("num_symbols", self.num_symbols),
            "depth": None if self.depth is None else check_param("depth", self.depth),
            "filter_level": None if self.filter_level is None else check_int("filter_level", self.filter_level, 0),
        }
        for key, value in given.items():
            from_name = getattr(named, key)
            if value is not None and from_name is not None and value != from_name:
                raise ValueError(f"{key}={value!r} contradicts the config name {self.name!r} ({key} {from_name!r})")

        def pick(key, default):
            for value in (given[key], getattr(named, key)):
                if value is not None:
                    return value
            return default

        self.seed, self.sigma = pick("seed", 0), pick("sigma", 1.0)
        self.num_symbols, self.depth = pick("num_symbols", PAPER_NUM_SYMBOLS), pick("depth", PAPER_DEPTH)
        k = pick("filter_level", None)
        if k is None:
            raise ValueError(f"filter_level (k) is missing: name a config {NAME_PATTERNS} or pass filter_level=")
        if k > self.depth:
            raise ValueError(
                f"filter_level (k) must be in [0, depth={self.depth}], got {k}: "
                f"k > ℓ has no level k (pass depth >= {k} for config {self.name or f'k{k}'!r})"
            )
        self.filter_level = k
        for split in SPLITS:
            setattr(self, f"num_{split}", _check_size(f"num_{split}", getattr(self, f"num_{split}")))
        self.name = config_name(self.seed, self.sigma, self.filter_level, self.num_symbols, self.depth)
        super().__post_init__()

    def _resolve_hierarchy(self) -> None:
        """The parameters of a Random Hierarchy Model config from its name and keywords (see the module docstring)."""
        if self.sigma is not None:
            raise ValueError(f"sigma is not a parameter of the Random Hierarchy Model config {self.name!r}")
        named = parse_hierarchy_config_name(self.name)
        keys = ("num_symbols", "num_classes", "num_rules", "arity", "depth", "seed", "filter_level")
        for key in keys:
            value = getattr(self, key)
            if value is not None and key in named and value != named[key]:
                raise ValueError(f"{key}={value!r} contradicts the config name {self.name!r} ({key} {named[key]!r})")
        pick = {key: getattr(self, key) if getattr(self, key) is not None else named.get(key) for key in keys}
        v, n, m, s, L = core_grammar.check_hierarchy_params(
            pick["num_symbols"], pick["num_classes"] if pick["num_classes"] is not None else pick["num_symbols"],
            pick["num_rules"], pick["arity"], pick["depth"])
        self.num_symbols, self.num_classes, self.num_rules, self.arity, self.depth = v, n, m, s, L
        self.seed = check_param("grammar_seed", 0 if pick["seed"] is None else pick["seed"], as_name="seed")
        k = 0 if pick["filter_level"] is None else pick["filter_level"]
        self.filter_level = check_int("filter_level", k, 0, L)
        for split in SPLITS:
            setattr(self, f"num_{split}", _check_size(f"num_{split}", getattr(self, f"num_{split}")))
        self.name = hierarchy_config_name(v, n, m, s, L, self.seed, self.filter_level)

    @property
    def is_random_hierarchy(self) -> bool:
        """True for a Random Hierarchy Model config (``rhm-...``)."""
        return self.num_rules is not None

    @property
    def params(self) -> dict:
        """The generating parameters, JSON-ready, in a fixed order."""
        if self.is_random_hierarchy:
            return {
                "ensemble": "random_hierarchy",
                "filter_level": self.filter_level,
                "depth": self.depth,
                "num_symbols": self.num_symbols,
                "num_classes": self.num_classes,
                "num_rules": self.num_rules,
                "arity": self.arity,
                "seed": self.seed,
                "num_train": self.num_train,
                "num_validation": self.num_validation,
                "num_test": self.num_test,
            }
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
        """The cache key: every parameter, readable (so different configs never share a cache entry, and every
        spelling of one config shares its entry)."""
        if self.is_random_hierarchy:
            return (f"rhm-v{self.num_symbols}-n{self.num_classes}-m{self.num_rules}-s{self.arity}-L{self.depth}"
                    f"-seed{self.seed}-k{self.filter_level}-n{self.num_train}.{self.num_validation}.{self.num_test}")
        return (
            f"seed{self.seed}-sigma{self.sigma!r}-q{self.num_symbols}-depth{self.depth}-k{self.filter_level}"
            f"-n{self.num_train}.{self.num_validation}.{self.num_test}"
        )

    def num_examples(self, split: str) -> int:
        return getattr(self, f"num_{split}")

    def grammar(self) -> Grammar:
        """The grammar of this config: a function of (seed, num_symbols, sigma) only (for an RHM, of (seed, v, n, m,
        s, L))."""
        if self.is_random_hierarchy:
            return Grammar.random_hierarchy(self.num_symbols, self.num_classes, self.num_rules, self.arity, self.depth,
                                            grammar_seed=self.seed)
        return Grammar.random(num_symbols=self.num_symbols, sigma=self.sigma, grammar_seed=self.seed)

    def levels(self) -> list:
        """The ancestor levels m (0 < m < ℓ) that the filtered model draws, i.e. max(1, k) <= m < ℓ."""
        return list(range(max(1, self.filter_level), self.depth))

    @property
    def sequence_arity(self) -> int:
        """s, the children of every node (2 for the paper's configs): sequences have s**depth symbols."""
        return self.arity if self.is_random_hierarchy else 2

    def features(self) -> datasets.Features:
        symbol = datasets.Value("uint8")
        s, classes = self.sequence_arity, self.num_classes if self.is_random_hierarchy else self.num_symbols
        features = {
            "input_ids": datasets.List(symbol, length=s**self.depth),
            "root": datasets.ClassLabel(names=[str(a) for a in range(classes)]),
            "filter_level": datasets.Value("int8"),
        }
        for m in self.levels():
            features[f"ancestors_level_{m}"] = datasets.List(symbol, length=s**m)
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
        if self.is_random_hierarchy:
            return (
                f"Random Hierarchy Model (Cagnetta et al., PRX 2024), filtering level k={p['filter_level']}, "
                f"v={p['num_symbols']} symbols, n={p['num_classes']} classes, m={p['num_rules']} rules per symbol, "
                f"arity s={p['arity']}, L={p['depth']} levels, grammar seed {p['seed']}. input_ids are the s**L "
                "leaves, root the class, ancestors_level_m the s**m nodes of level m.\n\n"
                f"{METADATA_MARKER}\n{json.dumps(self.metadata(), separators=(',', ':'))}\n"
            )
        return (
            f"Filtered hierarchical tree language (Garnier-Brun et al.), filtering level k={p['filter_level']}, "
            f"depth ℓ={p['depth']}, q={p['num_symbols']} symbols, σ={p['sigma']}, grammar seed {p['seed']}. "
            "input_ids are the 2**ℓ leaves, root the root symbol, ancestors_level_m the 2**m nodes of level m.\n\n"
            f"{METADATA_MARKER}\n{json.dumps(self.metadata(), separators=(',', ':'))}\n"
        )


def split_seed(config: TreeLangBuilderConfig, split: str) -> int:
    """The sampling seed of one split (:func:`hf_treelang.core.sampling.split_seed` of the config's parameters;
    :func:`~hf_treelang.core.sampling.hierarchy_split_seed` for a Random Hierarchy Model)."""
    if config.is_random_hierarchy:
        return core_sampling.hierarchy_split_seed(config.seed, config.num_symbols, config.num_classes, config.num_rules,
                                                  config.arity, config.depth, config.filter_level, split)
    return core_split_seed(config.seed, config.num_symbols, config.sigma, config.depth, config.filter_level, split)


def chunk_ranges(num_examples: int, depth: int, arity: int = 2) -> list:
    """(start, count) ranges covering [0, num_examples): about 2**20 leaves each (for s = 2 a power of two of trees,
    so that chunks stay aligned with the sampler's power-of-two random streams)."""
    rows = max(1, _LEAVES_PER_CHUNK // arity**depth)
    return [(start, min(rows, num_examples - start)) for start in range(0, num_examples, rows)]


def _fixed_size_lists(values: np.ndarray) -> pa.Array:
    """(n, w) int array -> Arrow fixed_size_list<uint8>[w] without a Python loop."""
    n, w = values.shape
    return pa.FixedSizeListArray.from_arrays(pa.array(values.astype(np.uint8).reshape(-1)), w)


def generate_table(config: TreeLangBuilderConfig, grammar: Grammar, split: str, start: int, count: int) -> pa.Table:
    """Examples ``start .. start + count - 1`` of ``split``, an Arrow table with the schema of ``config.features()``."""
    trees = sample_trees(grammar, count, config.depth, config.filter_level, split_seed(config, split), start=start)
    columns = {
        "input_ids": _fixed_size_lists(trees.leaves),  # (n, s**l)
        "root": pa.array(trees.roots, type=pa.int64()),  # (n,)
        "filter_level": pa.array(np.full(count, config.filter_level, dtype=np.int8)),
    }
    for m in config.levels():
        columns[f"ancestors_level_{m}"] = _fixed_size_lists(trees.levels[m])  # (n, s**m)
    return pa.Table.from_pydict(columns, schema=config.features().arrow_schema)


def source_hash() -> str:
    """Hash of the code that determines the bytes (this builder, the limits, the grammar, the sampler).

    Part of the cache directory and of the fingerprint: it is the same on every machine running the same code, and
    changes, so that stale caches are never reused, whenever that code changes.
    """
    digest = hashlib.sha256()
    modules = (core_params, core_grammar, core_sampling)
    for path in (__file__, *(module.__file__ for module in modules)):
        digest.update(Path(path).read_bytes().replace(b"\r\n", b"\n"))
    return digest.hexdigest()[:16]


def _listed_config(name: str) -> TreeLangBuilderConfig:
    """A config of ``BUILDER_CONFIGS``, listed under ``name`` (``get_dataset_config_names`` shows the listed names;
    the short names ``k<k>`` must stay distinct from the canonical names they load as)."""
    config = TreeLangBuilderConfig(name=name)
    config.name = name
    return config


class TreeLang(datasets.ArrowBasedBuilder):
    """Builder of the filtered hierarchical tree data (see the module docstring)."""

    BUILDER_CONFIG_CLASS = TreeLangBuilderConfig
    BUILDER_CONFIGS = [_listed_config(f"k{k}") for k in NAMED_FILTER_LEVELS] + [
        _listed_config(config_name(seed, sigma, k))
        for seed in PAPER_GRAMMAR_SEEDS
        for sigma in PAPER_SIGMAS
        for k in NAMED_FILTER_LEVELS
    ]
    DEFAULT_CONFIG_NAME = None

    def _create_builder_config(self, config_name=None, custom_features=None, config_id=None, **config_kwargs):
        # Every config, named or not, is rebuilt (and so validated) from its name and keywords, and its cache key
        # lists every parameter: the base class would look the name up in BUILDER_CONFIGS (a finite list), setattr
        # overrides unvalidated and key the cache by the overrides given.
        if custom_features is not None:
            raise ValueError("treelang defines its own features: features= must not be given")
        check_config_keywords(config_kwargs)
        if config_name is None and config_kwargs.get("filter_level") is None:
            raise ValueError(f"config name is missing: pick a name {NAME_PATTERNS}, e.g. "
                             "load_dataset('treelang', 'seed15-sigma1.0-k2'), or pass filter_level=")
        config = TreeLangBuilderConfig(name=config_name or "", **config_kwargs)
        return config, config.config_id

    def _prepare_split(self, split_generator, *args, **kwargs):
        # datasets labels the progress bar "Generating test split" whatever the config; a training run builds one
        # test split per k_test, so the label names the config (and with it k): "Generating test split of
        # treelang seed0-sigma1.0-k3". The label is datasets' own hf_tqdm call, relabelled for this split only.
        plain = f"Generating {split_generator.name} split"
        labelled = f"{plain} of {DATASET_NAME} {self.config.name}"
        original = getattr(datasets.builder, "hf_tqdm", None)
        if original is None:  # a datasets without the hook: keep its label
            return super()._prepare_split(split_generator, *args, **kwargs)

        def hf_tqdm(*tqdm_args, **tqdm_kwargs):
            if tqdm_kwargs.get("desc") == plain:
                tqdm_kwargs["desc"] = labelled
            return original(*tqdm_args, **tqdm_kwargs)

        with mock.patch.object(datasets.builder, "hf_tqdm", hf_tqdm):
            return super()._prepare_split(split_generator, *args, **kwargs)

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
                gen_kwargs={"split": split, "chunks": chunk_ranges(self.config.num_examples(split), self.config.depth,
                                                                   self.config.sequence_arity)},
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
