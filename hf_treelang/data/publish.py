"""``hf-treelang publish-dataset OUT --seeds 0 1 15 31 --sigmas 1.0 --filter-levels 0 1 2 3 4``: a Hub-ready dataset.

One config per (grammar seed, σ, k) of the grid (or per name of ``--configs``), each named by its generating
parameters (``seed15-sigma1.0-k2``, see :func:`hf_treelang.dataset_builder.treelang.config_name`) and each with its
grammar, so several grammars travel as one dataset. ``--configs`` also takes Random Hierarchy Model configs
(``rhm-v8-m4-s2-L3``, see :func:`hf_treelang.dataset_builder.treelang.hierarchy_config_name`), alone or beside the
paper's: their v and L come from their names, and the card describes both kinds. Layout of OUT (what
``push_to_hub`` / ``huggingface-cli upload`` take as is)::

    README.md                       dataset card: YAML (configs + dataset_info) and the sections below
    generation.json                 per config: parameters, split seeds, BP accuracies
    data/<config>/grammar.json      the grammar of that config (Grammar.load reads it; plain JSON otherwise)
    data/<config>/<split>-00000-of-00001.parquet

``datasets.load_dataset(OUT, "seed15-sigma1.0-k2")`` loads a config with the stock Parquet builder: hf_treelang is not
needed to read it; ``hf_treelang.grammar_from_dataset(ds, repository=OUT)`` finds that config's grammar. Every
argument is checked before anything is written; the repository is written to a temporary sibling of OUT and renamed
into place at the end, so a failure never leaves a partial OUT.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
from tqdm.auto import tqdm

from hf_treelang.citation import BIBTEX, RANDOM_HIERARCHY_BIBTEX
from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.oracle import bp_accuracy as bp_accuracy_of
from hf_treelang.core.oracle import task_inputs
from hf_treelang.core.params import check_filter_level, check_param, check_sigma
from hf_treelang.core.sampling import sample_trees
from hf_treelang.data.metadata import GENERATION_FILE, GRAMMAR_FILE
from hf_treelang.dataset_builder.treelang import (
    DATASET_FORMAT,
    PAPER_DEPTH,
    SPLITS,
    TreeLangBuilderConfig,
    check_config_keywords,
    chunk_ranges,
    generate_table,
    split_seed,
)
from hf_treelang.processes import owner_tag, stale_owner

_LEAVES_PER_FILE = 1 << 27  # ~128 MiB of uint8 leaves per Parquet file


@dataclass
class BPAccuracy:
    """Bayes-optimal accuracies of the matched BP_k on the test split.

    Attributes:
        root: fraction of test sequences whose root is the argmax of the BP root posterior.
        single_mask: fraction of test sequences, each with one masked leaf (position drawn uniformly), whose masked
            symbol is the argmax of the BP posterior of that leaf.
        num_examples: the test split size.
    """

    root: float
    single_mask: float
    num_examples: int


@dataclass
class PublishResult:
    """What :func:`publish_dataset` wrote.

    Attributes:
        out_dir: the repository folder.
        configs: the canonical config names, in the card's order (the first is the default config).
        files: every file written, relative to ``out_dir``.
        bp_accuracy: ``{config name: BPAccuracy}`` (``None`` for a config without a test split).
    """

    out_dir: Path
    configs: list
    files: list = field(default_factory=list)
    bp_accuracy: dict = field(default_factory=dict)


def bp_accuracy(config, grammar) -> BPAccuracy | None:
    """Root and single-mask accuracies of BP_k (k = ``config.filter_level``) on the test split of ``config``.

    The inputs are :func:`hf_treelang.core.oracle.task_inputs` of the split, so the masked leaves are its fixed
    evaluation positions: the ones the BP-KL training callback and the model card use on the same split.
    """
    n, depth, q = config.num_test, config.depth, config.num_symbols
    if n == 0:
        return None
    seed = split_seed(config, "test")
    trees = sample_trees(grammar, n, depth, config.filter_level, seed)  # the test split, bit-exact
    bp = BeliefPropagation(grammar, depth, config.filter_level)
    accuracy = {
        task: bp_accuracy_of(bp, task_inputs(task, trees.leaves, trees.roots, mask_token_id=q, sampling_seed=seed))
        for task in ("root", "mlm")
    }
    return BPAccuracy(root=accuracy["root"], single_mask=accuracy["mlm"], num_examples=n)


def _write_split(config, grammar, split: str, data_dir: Path) -> tuple[list, int]:
    """Write one split as Parquet shards; return (relative paths, uncompressed Arrow bytes)."""
    n = config.num_examples(split)
    rows_per_file = max(1, _LEAVES_PER_FILE // config.sequence_arity**config.depth)
    num_files = max(1, -(-n // rows_per_file))
    schema = config.features().arrow_schema
    paths, num_bytes = [], 0
    for f in range(num_files):
        path = data_dir / f"{split}-{f:05d}-of-{num_files:05d}.parquet"
        lo, hi = f * rows_per_file, min(n, (f + 1) * rows_per_file)
        with pq.ParquetWriter(path, schema) as writer:
            for start, count in chunk_ranges(hi - lo, config.depth, config.sequence_arity):
                table = generate_table(config, grammar, split, lo + start, count)
                num_bytes += table.nbytes
                writer.write_table(table)
        paths.append(path)
    return paths, num_bytes


def _size_category(n: int) -> str:
    for bound, label in [(10**3, "n<1K"), (10**4, "1K<n<10K"), (10**5, "10K<n<100K"), (10**6, "100K<n<1M"),
                         (10**7, "1M<n<10M")]:
        if n < bound:
            return label
    return "10M<n<100M"


def _distinct(name: str, values, check) -> list:
    """``values`` (a non-empty sequence) with ``check`` applied to each; a repeated value is an error."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"`{name}` must be a list of values, got {values!r}")
    checked = [check(value) for value in values]
    if not checked:
        raise ValueError(f"`{name}` must list at least one value, got {list(values)!r}")
    repeated = sorted({value for value in checked if checked.count(value) > 1})
    if repeated:
        raise ValueError(f"`{name}` must not repeat a value (each config is published once), got {list(values)!r}: "
                         f"{repeated} repeated")
    return checked


def plan_configs(configs=None, *, seeds=None, sigmas=None, filter_levels=None, **overrides) -> list:
    """The builder configs a repository holds, checked, in the card's order; nothing is generated.

    Either a grid — every (grammar seed, σ, k) of ``seeds`` x ``sigmas`` x ``filter_levels``, seed-major — or the
    config names ``configs`` (``"seed15-sigma1.0-k2"``, ``"k2"`` whose seed and σ come from a single-valued
    ``seeds`` / ``sigmas``, else 0 and 1.0, or a Random Hierarchy Model's ``"rhm-v8-m4-s2-L3"``), which stay the
    configs' names in the repository. ``overrides`` are builder keywords shared by every config (q, ℓ, split
    sizes; ``seed`` / ``sigma`` as single values).

    Args:
        configs: config names, or ``None`` for the grid.
        seeds: grammar seeds in [0, 2**32 - 1] (default: ``[0]``).
        sigmas: σ values in [0, 1000] (default: ``[1.0]``).
        filter_levels: k values in [0, depth] (default: every k = 0 .. ℓ); grid only.

    Raises ValueError (naming the argument, the value and the allowed range) for a value out of range, a repeated
    value, two spellings of one config, or names and a grid at once.
    """
    check_config_keywords(overrides)
    if "filter_level" in overrides:
        raise ValueError("pass filter_levels= (a list) or config names, not filter_level=")
    seed, sigma = overrides.pop("seed", None), overrides.pop("sigma", None)  # single values (the 0.1 keywords)
    if seed is not None:
        if seeds is not None:
            raise ValueError("pass `seeds` or `seed`, not both")
        seeds = [seed]
    if sigma is not None:
        if sigmas is not None:
            raise ValueError("pass `sigmas` or `sigma`, not both")
        sigmas = [sigma]
    seeds = None if seeds is None else _distinct(
        "seeds", seeds, lambda v: check_param("grammar_seed", v, as_name="seeds"))
    sigmas = None if sigmas is None else _distinct("sigmas", sigmas, lambda v: check_sigma(v, name="sigmas"))

    if configs is not None:
        if filter_levels is not None:
            raise ValueError("pass config names (configs=, --configs) or a grid (filter_levels=, --filter-levels), "
                             "not both")
        for plural, values in (("seeds", seeds), ("sigmas", sigmas)):
            if values is not None and len(values) > 1:
                raise ValueError(f"with config names, `{plural}` gives one value for the names that do not carry "
                                 f"one (e.g. 'k2'), got {values}; for a grid pass filter_levels= instead of names")
        if isinstance(configs, (str, bytes)) or not configs:
            raise ValueError(f"configs must be a non-empty list of config names, e.g. ['seed15-sigma1.0-k2'], "
                             f"got {configs!r}")
        keywords = {**overrides, **({"seed": seeds[0]} if seeds else {}), **({"sigma": sigmas[0]} if sigmas else {})}
        planned = [TreeLangBuilderConfig(name=name, **keywords) for name in configs]
        spellings: dict = {}
        for given, config in zip(configs, planned):
            spellings.setdefault(config.name, []).append(given)
        repeated = {name: given for name, given in spellings.items() if len(given) > 1}
        if repeated:
            raise ValueError(f"configs must name each config once, got {list(configs)!r}: "
                             + "; ".join(f"{given} are all {name!r}" for name, given in repeated.items()))
        for given, config in zip(configs, planned):
            config.name = given  # the repository's config name is the user's: load_dataset(out, "k2")
        return planned

    depth = check_param("depth", overrides.get("depth") if overrides.get("depth") is not None else PAPER_DEPTH)
    seeds = [0] if seeds is None else seeds
    sigmas = [1.0] if sigmas is None else sigmas
    if filter_levels is None:
        filter_levels = list(range(depth + 1))
    filter_levels = _distinct("filter_levels", filter_levels,
                              lambda v: check_filter_level(v, depth, name="filter_levels"))
    return [
        TreeLangBuilderConfig(filter_level=k, seed=seed, sigma=sigma, **overrides)
        for seed in seeds
        for sigma in sigmas
        for k in filter_levels
    ]


_PRETTY_NAMES = {  # (holds paper configs, holds Random Hierarchy Model configs) -> the card's title
    (True, False): "Filtered hierarchical tree languages (treelang)",
    (False, True): "Random Hierarchy Model data (treelang)",
    (True, True): "Filtered hierarchical tree languages and Random Hierarchy Model data (treelang)",
}
_PAPER_NAMES = "`seed<grammar seed>-sigma<σ>[-q<q>][-depth<ℓ>]-k<k>`"
_HIERARCHY_NAMES = "`rhm-v<v>[-n<n>]-m<m>-s<s>-L<L>[-seed<grammar seed>][-k<k>]`"


def _grammar_key(config) -> tuple:
    """The parameters a config's grammar is a function of (see ``TreeLangBuilderConfig.grammar``): (seed, q, σ) for
    the paper's, (seed, v, n, m, s, L) for a Random Hierarchy Model. Configs with one key share one grammar."""
    if config.is_random_hierarchy:
        return (config.seed, config.num_symbols, config.num_classes, config.num_rules, config.arity, config.depth)
    return (config.seed, config.num_symbols, config.sigma)


def _card(configs, infos, accuracies, total_examples: int) -> str:
    """README.md: YAML metadata (configs, dataset_info) and the card body.

    A repository may hold configs of the paper's grammars (``seed<seed>-sigma<σ>...``: s = 2, one rule tensor M shared
    by every level) and of Random Hierarchy Models (``rhm-...``: arity s, rules per level); the card describes the
    kinds it holds, and a repository of the paper's configs only gets the paper's card.
    """
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs
    from huggingface_hub import DatasetCard, DatasetCardData

    paper = [c for c in configs if not c.is_random_hierarchy]
    hierarchy = [c for c in configs if c.is_random_hierarchy]
    card_data = DatasetCardData(
        license="mit",
        pretty_name=_PRETTY_NAMES[(bool(paper), bool(hierarchy))],
        task_categories=["text-classification", "fill-mask"],
        tags=["synthetic", "hierarchical", "context-free-grammar", "belief-propagation", "hf-treelang",
              *(["random-hierarchy-model"] if hierarchy else [])],
        size_categories=[_size_category(total_examples)],
    )
    metadata_configs = MetadataConfigs(
        {
            c.name: {
                "data_files": [
                    {"split": split, "path": f"data/{c.name}/{split}-*.parquet"}
                    for split in ("train", "validation", "test")
                    if c.num_examples(split) > 0
                ],
                **({"default": True} if i == 0 else {}),
            }
            for i, c in enumerate(configs)
        }
    )
    metadata_configs.to_dataset_card_data(card_data)
    DatasetInfosDict(infos).to_dataset_card_data(card_data)

    def accuracy_cells(c):
        accuracy = accuracies[c.name]
        return f"{accuracy.root:.4f} | {accuracy.single_mask:.4f} |" if accuracy else "- | - |"

    def values(key, some=configs):
        return ", ".join(str(v) for v in dict.fromkeys(c.params[key] for c in some))

    grammars: dict = {}
    for c in configs:
        grammars.setdefault(_grammar_key(c), []).append(c)

    def grammar_lines(kind):
        return "\n".join(f"  - `{_grammar_call(members[0])}`: " + ", ".join(f"`{c.name}`" for c in members)
                         for members in grammars.values() if members[0].is_random_hierarchy == kind)

    summaries, tables, generation = [], [], []
    if paper:
        rows = "\n".join(
            f"| `{c.name}` | {c.seed} | {c.sigma} | {c.num_symbols} | {c.depth} | {c.filter_level} | {c.num_train} | "
            f"{c.num_validation} | {c.num_test} | " + accuracy_cells(c)
            for c in paper
        )
        summaries.append(f"""Synthetic sequences generated by the *filtered hierarchical model* of Garnier-Brun, Mézard, Moscato and Saglietti,
"How transformers learn structured data: insights from hierarchical filtering". A random grammar of q symbols
(here q = {values('num_symbols', paper)}) generates full binary trees of depth ℓ (here ℓ = {values('depth', paper)}); the 2**ℓ leaves
form a sequence, the root is its class label. Filtering at level k keeps the branching process below level k and
draws the 2**k nodes of level k independently given the root, which removes the correlations longer than 2**(ℓ-k)
leaves. The exact Bayes-optimal predictor, belief propagation BP_k, is known, so models can be compared with the
optimum.""")
        tables.append(f"""| config | grammar seed | σ | q | ℓ | k | train | validation | test | BP root accuracy | BP single-mask accuracy |
|---|---|---|---|---|---|---|---|---|---|---|
{rows}""")
        generation.append(f"""- Grammars (paper App. A: log-normal weights of width σ on q non-overlapping sets of q child pairs; a grammar depends
  only on (seed, q, σ), so the configs of one grammar share it):
{grammar_lines(False)}""")
    if hierarchy:
        rows = "\n".join(
            f"| `{c.name}` | {c.num_symbols} | {c.num_classes} | {c.num_rules} | {c.arity} | {c.depth} | {c.seed} | "
            f"{c.filter_level} | {c.num_train} | {c.num_validation} | {c.num_test} | " + accuracy_cells(c)
            for c in hierarchy
        )
        here = {key: values(key, hierarchy) for key in ("arity", "depth", "num_symbols", "num_rules", "num_classes")}
        summaries.append(f"""Synthetic sequences generated by the *Random Hierarchy Model* (RHM) of Cagnetta, Petrini, Tomasini, Favero and
Wyart, "How deep neural networks learn compositional data: the Random Hierarchy Model" (PRX 2024). Trees of arity s
(here s = {here['arity']}) have L levels of rules (here L = {here['depth']}), each level its own, over v symbols
(here v = {here['num_symbols']}): each symbol rewrites, with probability 1/m, into one of m distinct s-tuples of the next
level's symbols (here m = {here['num_rules']}), and no tuple belongs to two symbols of the same level. The root is one of n
classes, uniformly (here n = {here['num_classes']}); the s**L leaves form a sequence, the root is its class label. Filtering
at level k draws the s**k nodes of level k independently given the root, as for the filtered hierarchical model;
BP_k is exact on these trees too.""")
        tables.append(f"""| config | v | n | m | s | L | grammar seed | k | train | validation | test | BP root accuracy | BP single-mask accuracy |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
{rows}""")
        generation.append(f"""- Grammars (Random Hierarchy Model: the rules of its reference code, pcsl-epfl/hierarchy-learning
  `sample_rules(v, n, m, s, L, seed)`; a grammar depends only on (v, n, m, s, L, seed), so the configs that differ
  only in k share it):
{grammar_lines(True)}""")

    levels = "\n".join(f"  - `{c.name}`: " + (", ".join(f"`ancestors_level_{m}`" for m in c.levels()) or "none")
                       for c in configs)
    first = configs[0].name
    if not hierarchy:
        naming = f"""A config is named by its generating
parameters, {_PAPER_NAMES} (q and ℓ are left out at the paper's 4)."""
        columns = f"""- `input_ids`: the 2**ℓ leaves, symbols in [0, q) (use id q as the mask token).
- `root`: the root symbol (ClassLabel), the target of root classification.
- `filter_level`: k, constant within a config (to group mixtures of configs).
- `ancestors_level_m`: the 2**m nodes of level m, left to right, for the levels 0 < m < ℓ the filtered model draws;
  the level-m ancestor of leaf i is `ancestors_level_m[i >> (ℓ - m)]`:
{levels}"""
        grammar_file = """The grammar of a config is `data/<config>/grammar.json` (JSON: the rule tensor `M[a, b, c]` = P(a -> b c) and the
root prior). With hf-treelang installed, `hf_treelang.grammar_from_dataset(ds, repository="path/or/repo-id")` reads it
for the loaded config, `hf_treelang.BeliefPropagation(grammar, depth, filter_level)` gives the exact posteriors, and"""
        trees = """- Trees: `hf_treelang.sample_trees(grammar, n, depth, filter_level, seed)` with one sampling seed per split, derived
  from (seed, q, σ, ℓ, k, split) with a numpy `SeedSequence` (listed in `generation.json`): splits never share draws."""
        citation = BIBTEX.strip()
    else:
        naming = f"""A config is named by its generating parameters,
{_HIERARCHY_NAMES} (n is left out when n = v, the seed and k when they are 0)"""
        if paper:
            naming += f""",
or {_PAPER_NAMES} for the paper's grammars (q and ℓ are left out at the paper's 4)"""
        naming += "."
        paper_columns = (";\n  for the paper's configs s = 2, L = ℓ and v = q" if paper else "",
                         "; over the q symbols for the paper's configs" if paper else "")
        columns = f"""- `input_ids`: the s**L leaves, symbols in [0, v) (use id v as the mask token){paper_columns[0]}.
- `root`: the root (a ClassLabel over the n classes{paper_columns[1]}),
  the target of root classification.
- `filter_level`: k, constant within a config (to group mixtures of configs).
- `ancestors_level_m`: the s**m nodes of level m, left to right, for the levels max(1, k) <= m < L the filtered model
  draws; the level-m ancestor of leaf i is `ancestors_level_m[i // s**(L - m)]`:
{levels}"""
        paper_format = ("\n- `hf-treelang-grammar/1` (the paper's configs): the rule tensor `M[a, b, c]` = P(a -> b c), "
                        "shared by every level;" if paper else "")
        grammar_file = f"""The grammar of a config is `data/<config>/grammar.json`: JSON with the root prior `root_prior` (one number per
symbol), `params` (the arguments of the call that drew it, below) and the rules, in the format named by `format`:{paper_format}
- `hf-treelang-grammar/2` (the RHM configs): `arity` s and `level_rules`, one tensor of shape (v,)*(s+1) per level
  l = 0 .. L-1 (the root at level 0), `level_rules[l][a][b_1]...[b_s]` = P(a -> b_1 .. b_s) for a node of level l:
  1/m for each of the m tuples of a, 0 otherwise; `root_prior` is 1/n on the classes 0 .. n-1, 0 on the other symbols.

With hf-treelang installed, `hf_treelang.grammar_from_dataset(ds, repository="path/or/repo-id")` reads it for the
loaded config (`hf_treelang.Grammar.load` reads the file), `hf_treelang.BeliefPropagation(grammar, depth,
filter_level)` with depth = L gives the exact posteriors, and"""
        paper_seeds = ", from (seed, q, σ, ℓ, k, split) for the paper's" if paper else ""
        trees = f"""- Trees: `hf_treelang.sample_trees(grammar, n, depth, filter_level, seed)` with one sampling seed per split, derived
  with a numpy `SeedSequence` from (seed, v, n, m, s, L, k, split) for an RHM config{paper_seeds}
  (listed in `generation.json`): splits never share draws."""
        citation = f"{BIBTEX.strip()}\n\n{RANDOM_HIERARCHY_BIBTEX.strip()}"
    summary, table, grammar_generation = "\n\n".join(summaries), "\n\n".join(tables), "\n".join(generation)
    body = f"""
# {card_data.pretty_name}

## Summary

{summary}

This repository holds {len(configs)} config(s) of {len(grammars)} grammar(s). {naming}

{table}

## Columns

{columns}

## Usage

```python
from datasets import load_dataset
ds = load_dataset("path/or/repo-id", "{first}")
```

{grammar_file}
`load_dataset("treelang", "{first}", ...)` regenerates the config locally (bit-identical with the sizes above:
example i of a split does not depend on the split sizes).

## Generation

{grammar_generation}
{trees}
- BP accuracies: the matched BP_k on the test split; root = argmax of the root posterior, single-mask = one leaf per
  sequence masked at a uniformly drawn position, predicted by the argmax of its posterior. These are the
  Bayes-optimal accuracies a trained model can approach (test-set estimates).

## Limitations

Synthetic data: no natural language. The grammars are the {len(grammars)} listed above; accuracies are estimates on
the test splits ({values('num_test')} sequences per config).

## Citation

```bibtex
{citation}
```
"""
    return str(DatasetCard(f"---\n{card_data.to_yaml()}\n---\n{body}"))


def _grammar_call(config) -> str:
    """The call that builds ``config``'s grammar, as the card shows it."""
    if config.is_random_hierarchy:
        return (f"Grammar.random_hierarchy(num_symbols={config.num_symbols}, num_classes={config.num_classes}, "
                f"num_rules={config.num_rules}, arity={config.arity}, depth={config.depth}, "
                f"grammar_seed={config.seed})")
    return f"Grammar.random(num_symbols={config.num_symbols}, sigma={config.sigma!r}, grammar_seed={config.seed})"


def publish_dataset(
    out_dir,
    configs=None,
    *,
    seeds=None,
    sigmas=None,
    filter_levels=None,
    overwrite: bool = False,
    progress: bool = False,
    **overrides,
) -> PublishResult:
    """Write a repository to ``out_dir``: one config per (seed, σ, k) of the grid, or per name of ``configs``.

    Example: the paper's four grammars, k = 0 .. 4, as one dataset of 20 configs::

        publish_dataset("treelang-paper", seeds=[0, 1, 15, 31], sigmas=[1.0], filter_levels=[0, 1, 2, 3, 4])

    Args:
        out_dir: the repository folder (must not exist unless ``overwrite``).
        configs, seeds, sigmas, filter_levels, overrides: the configs, see :func:`plan_configs` (q, ℓ and the split
            sizes go in ``overrides``: ``num_symbols=``, ``depth=``, ``num_train=`` ...).
        overwrite: replace an existing ``out_dir``.
        progress: a progress bar over the configs.

    Every config is checked before anything is written.
    """
    out_dir = Path(out_dir)
    builder_configs = plan_configs(configs, seeds=seeds, sigmas=sigmas, filter_levels=filter_levels, **overrides)
    if out_dir.exists() and not overwrite:
        raise FileExistsError(f"{out_dir} exists; pass overwrite=True (--overwrite) to replace it")
    if out_dir.exists():
        check_replaceable(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    grammars: dict = {}  # _grammar_key -> Grammar, built once per grammar

    for leftover in out_dir.parent.glob(f".{out_dir.name}.tmp-*"):  # staged by a publish that was killed
        tag = leftover.name[len(f".{out_dir.name}.tmp-"):].rpartition("-")[0]
        if leftover.is_dir() and stale_owner(tag):
            shutil.rmtree(leftover, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-{owner_tag()}-", dir=out_dir.parent))
    try:
        written: list = []  # the configs written so far
        with _disk_full_named(tmp, builder_configs, written):
            return _publish_into(tmp, out_dir, builder_configs, grammars, progress, written)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def check_replaceable(out_dir: Path) -> None:
    """Refuse to replace ``out_dir`` unless it is a repository this command wrote (it holds ``generation.json``) or
    an empty folder: ``--overwrite`` never deletes a user's own files, nor the folder the command runs in."""
    here = Path.cwd().resolve()
    resolved = out_dir.resolve()
    if resolved == here or resolved in here.parents:
        raise ValueError(f"out_dir {str(out_dir)!r} is the current folder or holds it ({here}); --overwrite would "
                         "replace the folder this command runs in: give a folder of its own, e.g. ./treelang-data")
    if not out_dir.is_dir():
        raise ValueError(f"out_dir {str(out_dir)!r} exists and is not a folder; give a folder path")
    entries = sorted(entry.name for entry in out_dir.iterdir())
    if entries and GENERATION_FILE not in entries:
        shown = ", ".join(entries[:5]) + (" ..." if len(entries) > 5 else "")
        raise ValueError(f"out_dir {str(out_dir)!r} holds files that publish-dataset did not write ({shown}; no "
                         f"{GENERATION_FILE}): --overwrite replaces only a repository this command wrote")


@contextlib.contextmanager
def _disk_full_named(tmp: Path, builder_configs: list, written_configs: list):
    """A full disk while publishing becomes one OSError saying how much was written and about how much more the
    repository needs (from the bytes per example written so far), and what is free there."""
    try:
        yield
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        written = sum(path.stat().st_size for path in tmp.rglob("*") if path.is_file())
        done = sum(config.num_train + config.num_validation + config.num_test for config in written_configs)
        total = sum(config.num_train + config.num_validation + config.num_test for config in builder_configs)
        needed = (f"; the repository needs about {_megabytes(written * total / done)} in all" if done else
                  f"; the first of its {len(builder_configs)} configs did not fit")
        raise OSError(errno.ENOSPC, f"out_dir: no space left on the disk of {str(tmp.parent)!r} after writing "
                      f"{_megabytes(written)}{needed}; {_megabytes(shutil.disk_usage(tmp.parent).free)} free "
                      "there") from None


def _megabytes(size: float) -> str:
    return f"{size / 2**20:.1f} MiB"


def _publish_into(tmp: Path, out_dir: Path, builder_configs: list, grammars: dict, progress: bool,
                  written_configs: list) -> PublishResult:
    """Write the repository into the staging folder ``tmp`` and move it to ``out_dir`` once complete (each config
    appended to ``written_configs`` once its files are written)."""
    import datasets

    infos, accuracies, generation, files = {}, {}, {}, []
    for config in tqdm(builder_configs, desc="publish-dataset", unit="config", disable=not progress):
        key = _grammar_key(config)
        if key not in grammars:
            grammars[key] = config.grammar()
        grammar = grammars[key]
        data_dir = tmp / "data" / config.name
        data_dir.mkdir(parents=True)
        grammar_file = GRAMMAR_FILE.format(config=config.name)
        grammar.save(tmp / grammar_file)
        files.append(Path(grammar_file))
        splits = datasets.SplitDict()
        download_size = 0
        for split in SPLITS:
            if config.num_examples(split) == 0:
                continue
            paths, num_bytes = _write_split(config, grammar, split, data_dir)
            files += [p.relative_to(tmp) for p in paths]
            download_size += sum(p.stat().st_size for p in paths)
            splits.add(datasets.SplitInfo(name=split, num_bytes=num_bytes, num_examples=config.num_examples(split)))
        infos[config.name] = datasets.DatasetInfo(
            config_name=config.name,
            features=config.features(),
            splits=splits,
            download_size=download_size,
            dataset_size=sum(s.num_bytes for s in splits.values()),
        )
        accuracies[config.name] = bp_accuracy(config, grammar)
        meta = config.metadata()
        generation[config.name] = {
            "params": meta["params"],
            "split_seeds": meta["split_seeds"],
            "grammar": grammar_file,
            "bp_accuracy": accuracies[config.name].__dict__ if accuracies[config.name] else None,
        }
        written_configs.append(config)
    with open(tmp / GENERATION_FILE, "w", encoding="utf-8") as f:
        json.dump({"format": DATASET_FORMAT, "configs": generation}, f, indent=1)
        f.write("\n")
    total = sum(c.num_train + c.num_validation + c.num_test for c in builder_configs)
    (tmp / "README.md").write_text(_card(builder_configs, infos, accuracies, total), encoding="utf-8")
    files += [Path("README.md"), Path(GENERATION_FILE)]
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.replace(out_dir, old / out_dir.name)
        os.replace(tmp, out_dir)
        shutil.rmtree(old)
    else:
        os.replace(tmp, out_dir)
    return PublishResult(out_dir=out_dir, configs=[c.name for c in builder_configs], files=sorted(files),
                         bp_accuracy=accuracies)


def run(args) -> int:
    """``hf-treelang publish-dataset`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    try:
        result = publish_dataset(
            args.out,
            args.configs,
            seeds=args.seeds,
            sigmas=args.sigmas,
            filter_levels=args.filter_levels,
            overwrite=args.overwrite,
            progress=not args.no_progress,  # hf_treelang.cli: off outside a terminal
            num_symbols=args.num_symbols,
            depth=args.depth,
            num_train=args.num_train,
            num_validation=args.num_validation,
            num_test=args.num_test,
        )
    except (ValueError, TypeError, OSError) as error:
        message = error.strerror if isinstance(error, OSError) and error.errno == errno.ENOSPC else error
        sys.stderr.write(f"hf-treelang publish-dataset: error: {message}\n")
        return 2
    sys.stdout.write(f"wrote {len(result.configs)} configs ({len(result.files)} files) to {result.out_dir}\n")
    for name, accuracy in result.bp_accuracy.items():
        if accuracy is not None:
            sys.stdout.write(f"  {name}: BP root accuracy {accuracy.root:.4f}, single-mask {accuracy.single_mask:.4f}\n")
    return 0
