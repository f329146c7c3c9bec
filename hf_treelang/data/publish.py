"""``hf-treelang publish-dataset OUT --configs k0 k2 ...``: write a Hub-ready dataset repository.

Layout of OUT (what ``push_to_hub`` / ``huggingface-cli upload`` take as is)::

    README.md                       dataset card: YAML (configs + dataset_info) and the sections below
    grammar.json                    the grammar shared by every config (Grammar.load reads it)
    generation.json                 per config: parameters, split seeds, BP accuracies
    data/<config>/<split>-00000-of-00001.parquet

``datasets.load_dataset(OUT, "k2")`` loads it with the stock Parquet builder: hf_treelang is not needed to read it.
The repository is written to a temporary sibling of OUT and renamed into place at the end, so a failure never
leaves a partial OUT.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
from tqdm.auto import tqdm

from hf_treelang.citation import BIBTEX
from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.oracle import bp_accuracy as bp_accuracy_of
from hf_treelang.core.oracle import task_inputs
from hf_treelang.core.sampling import sample_trees

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
    """What :func:`publish_dataset` wrote."""

    out_dir: Path
    configs: list
    files: list = field(default_factory=list)
    bp_accuracy: dict = field(default_factory=dict)


def bp_accuracy(config, grammar) -> BPAccuracy | None:
    """Root and single-mask accuracies of BP_k (k = ``config.filter_level``) on the test split of ``config``.

    The inputs are :func:`hf_treelang.core.oracle.task_inputs` of the split, so the masked leaves are its fixed
    evaluation positions: the ones the BP-KL training callback and the model card use on the same split.
    """
    from hf_treelang.dataset_builder.treelang import split_seed

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
    from hf_treelang.dataset_builder.treelang import chunk_ranges, generate_table

    n = config.num_examples(split)
    rows_per_file = max(1, _LEAVES_PER_FILE >> config.depth)
    num_files = max(1, -(-n // rows_per_file))
    schema = config.features().arrow_schema
    paths, num_bytes = [], 0
    for f in range(num_files):
        path = data_dir / f"{split}-{f:05d}-of-{num_files:05d}.parquet"
        lo, hi = f * rows_per_file, min(n, (f + 1) * rows_per_file)
        with pq.ParquetWriter(path, schema) as writer:
            for start, count in chunk_ranges(hi - lo, config.depth):
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


def _card(configs, infos, accuracies, total_examples: int) -> str:
    """README.md: YAML metadata (configs, dataset_info) and the card body."""
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs
    from huggingface_hub import DatasetCard, DatasetCardData

    card_data = DatasetCardData(
        license="mit",
        pretty_name="Filtered hierarchical tree languages (treelang)",
        task_categories=["text-classification", "fill-mask"],
        tags=["synthetic", "hierarchical", "context-free-grammar", "belief-propagation", "hf-treelang"],
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

    p = configs[0].params

    def accuracy_cells(accuracy):
        return f"{accuracy.root:.4f} | {accuracy.single_mask:.4f} |" if accuracy else "- | - |"

    rows = "\n".join(
        f"| `{c.name}` | {c.filter_level} | {c.num_train} | {c.num_validation} | {c.num_test} | "
        + accuracy_cells(accuracies[c.name])
        for c in configs
    )
    levels = "\n".join(f"- `{c.name}`: " + ", ".join(f"`ancestors_level_{m}`" for m in c.levels()) for c in configs)
    body = f"""
# Filtered hierarchical tree languages (treelang)

## Summary

Synthetic sequences generated by the *filtered hierarchical model* of Garnier-Brun, Mézard, Moscato and Saglietti,
"How transformers learn structured data: insights from hierarchical filtering". A random grammar of q = {p['num_symbols']}
symbols generates full binary trees of depth ℓ = {p['depth']}; the 2**ℓ = {2 ** p['depth']} leaves form a sequence, the
root is its class label. Filtering at level k keeps the branching process below level k and draws the 2**k nodes of
level k independently given the root, which removes the correlations longer than 2**(ℓ-k) leaves. The exact
Bayes-optimal predictor, belief propagation BP_k, is known, so models can be compared with the optimum.

| config | k | train | validation | test | BP root accuracy | BP single-mask accuracy |
|---|---|---|---|---|---|---|
{rows}

## Columns

- `input_ids`: the {2 ** p['depth']} leaves, symbols in [0, {p['num_symbols']}) (use id {p['num_symbols']} as the mask token).
- `root`: the root symbol (ClassLabel), the target of root classification.
- `filter_level`: k, constant within a config (to group mixtures of configs).
- `ancestors_level_m`: the 2**m nodes of level m, left to right, for the levels 0 < m < ℓ the filtered model draws;
  the level-m ancestor of leaf i is `ancestors_level_m[i >> (ℓ - m)]`:
{levels}

## Usage

```python
from datasets import load_dataset
ds = load_dataset("path/or/repo-id", "{configs[0].name}")
```

With hf-treelang installed, `load_dataset("treelang", "k2", ...)` regenerates any config locally, and
`hf_treelang.Grammar.load("grammar.json")` with `hf_treelang.BeliefPropagation(grammar, depth, filter_level)` gives the
exact posteriors.

## Generation

- Grammar: `Grammar.random(num_symbols={p['num_symbols']}, sigma={p['sigma']}, grammar_seed={p['seed']})` (paper App. A:
  log-normal weights of width σ on q non-overlapping sets of q child pairs), stored in `grammar.json`. It depends
  only on (seed, q, σ), so all configs here share it.
- Trees: `hf_treelang.sample_trees(grammar, n, depth, filter_level, seed)` with one sampling seed per split, derived
  from (seed, q, σ, ℓ, k, split) with a numpy `SeedSequence` (listed in `generation.json`): splits never share draws.
- BP accuracies: the matched BP_k on the test split; root = argmax of the root posterior, single-mask = one leaf per
  sequence masked at a uniformly drawn position, predicted by the argmax of its posterior. These are the
  Bayes-optimal accuracies a trained model can approach (test-set estimates).

## Limitations

Synthetic data: no natural language, and every config of this repository uses a single grammar. Accuracies are
estimates on {configs[0].num_test} test sequences.

## Citation

```bibtex
{BIBTEX.strip()}
```
"""
    return str(DatasetCard(f"---\n{card_data.to_yaml()}\n---\n{body}"))


def publish_dataset(out_dir, configs, *, overwrite: bool = False, progress: bool = False, **overrides) -> PublishResult:
    """Write the repository of the named ``configs`` (e.g. ``["k0", "k2"]``) with keyword ``overrides`` to ``out_dir``.

    Every config is validated before anything is written. ``overwrite`` replaces an existing ``out_dir``.
    """
    import datasets

    from hf_treelang.dataset_builder.treelang import SPLITS, TreeLangBuilderConfig

    out_dir = Path(out_dir)
    if not configs:
        raise ValueError("configs must name at least one config, e.g. ['k0', 'k2']")
    if len(set(configs)) != len(configs):
        raise ValueError(f"configs must be distinct, got {list(configs)}")
    builder_configs = [TreeLangBuilderConfig(name=name, **overrides) for name in configs]
    if out_dir.exists() and not overwrite:
        raise FileExistsError(f"{out_dir} exists; pass overwrite=True (--overwrite) to replace it")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    grammar = builder_configs[0].grammar()

    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        infos, accuracies, generation, files = {}, {}, {}, []
        for config in tqdm(builder_configs, desc="publish-dataset", unit="config", disable=not progress):
            data_dir = tmp / "data" / config.name
            data_dir.mkdir(parents=True)
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
                "bp_accuracy": accuracies[config.name].__dict__ if accuracies[config.name] else None,
            }
        grammar.save(tmp / "grammar.json")
        with open(tmp / "generation.json", "w", encoding="utf-8") as f:
            json.dump({"format": meta["format"], "configs": generation}, f, indent=1)
            f.write("\n")
        total = sum(c.num_train + c.num_validation + c.num_test for c in builder_configs)
        (tmp / "README.md").write_text(_card(builder_configs, infos, accuracies, total), encoding="utf-8")
        files += [Path("README.md"), Path("grammar.json"), Path("generation.json")]
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
            os.replace(out_dir, old / out_dir.name)
            os.replace(tmp, out_dir)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return PublishResult(out_dir=out_dir, configs=list(configs), files=sorted(files), bp_accuracy=accuracies)


def run(args) -> int:
    """``hf-treelang publish-dataset`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    try:
        result = publish_dataset(
            args.out,
            args.configs,
            overwrite=args.overwrite,
            progress=True,
            seed=args.seed,
            sigma=args.sigma,
            num_symbols=args.num_symbols,
            depth=args.depth,
            num_train=args.num_train,
            num_validation=args.num_validation,
            num_test=args.num_test,
        )
    except (ValueError, TypeError, FileExistsError) as error:
        sys.stderr.write(f"hf-treelang publish-dataset: error: {error}\n")
        return 2
    sys.stdout.write(f"wrote {len(result.files)} files to {result.out_dir}\n")
    for name, accuracy in result.bp_accuracy.items():
        if accuracy is not None:
            sys.stdout.write(f"  {name}: BP root accuracy {accuracy.root:.4f}, single-mask {accuracy.single_mask:.4f}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``hf-treelang publish-dataset`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    from hf_treelang import cli

    return cli.run_command("publish-dataset", argv)


if __name__ == "__main__":
    sys.exit(main())
