"""The data of a training run: one path, the builder's split streams, whether or not ``datasets`` builds them.

A run with grammar (``grammar_seed``, q, σ), depth ℓ and training level k_train reads

* ``train`` and ``validation`` from the splits of config ``k<k_train>``;
* the k_test set from the ``test`` split of config ``k<k_test>``, for every k_test;

each split sampled from its own seed, :func:`hf_treelang.dataset_builder.treelang.split_seed`. A Random Hierarchy
Model run (``num_rules`` given) reads the configs ``rhm-v<v>[-n<n>]-m<m>-s<s>-L<L>[-seed<s>]-k<k>`` alike, sequences
of s**ℓ leaves: :func:`dataset_config` is the one map from a run's data arguments to its dataset config. With
``use_dataset_builder`` the splits come from ``load_dataset("treelang", ...)`` (cached Arrow files); without it
:func:`sample_trees` draws the same bytes directly. A ``--grammar_file`` run has no dataset config: its splits are drawn
directly from the file's grammar, each from the seed :func:`grammar_file_split_seed` derives from the grammar's content,
ℓ, the level and the split (:func:`split_sampling_seed` is the one map from a run's data to a split's seed). Either way
the k_test sets never share draws, and the masked positions of every evaluation set are its fixed evaluation positions
(:mod:`hf_treelang.core.masking`), so the dataset card, the BP-KL callback and the model card report BP on identical
inputs.

A run with a σ curriculum (``--sigma_curriculum_start S --sigma_curriculum_epochs E``, :class:`SigmaCurriculum`)
trains its first E epochs on fresh draws of the same grammar seed at σ_e > σ instead of its ``train`` split; the
``validation`` and test splits, and so every evaluation, stay at the run's σ.

Dimension glossary: ``n`` sequences, ``l`` depth (ℓ).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hf_treelang.data.registration import register_dataset_builder
from hf_treelang.dataset_builder.treelang import TreeLangBuilderConfig, config_name, hierarchy_config_name, split_seed
from hf_treelang.models.modeling_treelang import check_input_ids, check_labels
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.masking import mask_evaluation_set
from hf_treelang.core.oracle import next_leaf_inputs
from hf_treelang.core.sampling import SPLITS, TreeSample, sample_trees

from .arguments import DataArguments, grammar_content_hash

CURRICULUM_STREAM_TAG = 0x5C1C  # the σ curriculum's draws: never the same stream as a split's
GRAMMAR_FILE_STREAM_TAG = 0x6F11  # the splits of a grammar file's run: never a generated grammar's streams


@dataclass
class EvaluationSet:
    """A held-out set: sequences, roots, and the sampling seed of its split (which fixes its masked positions).

    Attributes:
        leaves: (n, s**ℓ) int64 (s = 2 for the paper's grammar).
        roots: (n,) int64.
        sampling_seed: the split seed the trees were drawn with.
    """

    leaves: np.ndarray
    roots: np.ndarray
    sampling_seed: int

    def __len__(self) -> int:
        return self.leaves.shape[0]


@dataclass
class RunData:
    """The data of one run as numpy arrays.

    Attributes:
        grammar: the grammar M.
        train: the training split (leaves, roots and its split seed).
        validation: the held-out k_train split (the Trainer's evaluation set and the in-sample BP-KL inputs).
        tests: ``{k_test: EvaluationSet}``, the test split of every k_test config.
    """

    grammar: Grammar
    train: EvaluationSet
    validation: EvaluationSet
    tests: dict


def dataset_config(data_args: DataArguments, level: int, sizes: dict | None = None) -> TreeLangBuilderConfig:
    """The ``treelang`` dataset config of a run's data at filter level ``level``: its name, grammar and split seeds
    are the dataset's (one home), ``seed<s>-sigma<σ>[-q<q>][-depth<ℓ>]-k<level>`` for the paper's grammar or
    ``rhm-v<v>[-n<n>]-m<m>-s<s>-L<L>[-seed<s>][-k<level>]`` for a Random Hierarchy Model (``num_rules`` given)."""
    counts = {f"num_{split}": (sizes or {}).get(split, 0) for split in SPLITS}
    if data_args.is_random_hierarchy:
        name = hierarchy_config_name(data_args.num_symbols, data_args.num_classes, data_args.num_rules,
                                     data_args.arity, data_args.depth, data_args.grammar_seed, level)
    else:
        name = config_name(data_args.grammar_seed, float(data_args.sigma), level, data_args.num_symbols,
                           data_args.depth)
    return TreeLangBuilderConfig(name=name, **counts)


def _from_builder(data_args: DataArguments, level: int, sizes: dict) -> dict:
    """``{split: EvaluationSet}`` of the run's :func:`dataset_config` at ``level`` through
    ``load_dataset("treelang", ...)`` (the name carries every generating parameter, so the progress bars say which
    k_test each test split is)."""
    import datasets  # lazy: datasets takes a second to import; the sampler path never needs it

    register_dataset_builder()
    config = dataset_config(data_args, level, sizes)
    dataset = datasets.load_dataset("treelang", config.name, **{f"num_{split}": config.num_examples(split)
                                                                 for split in SPLITS})
    out = {}
    for split in sizes:
        leaves, roots = read_columns(dataset[split], data_args.num_leaves)
        out[split] = EvaluationSet(leaves, roots, split_seed(config, split))
    return out


def read_columns(split, width: int) -> tuple:
    """``(leaves (n, width), roots (n,))`` of a ``datasets`` split as int64 arrays, read column-wise from its Arrow
    table: no Python loop over rows (datasets' lazy columns format one row at a time: seconds for 2**17 rows)."""
    if split._indices is not None:  # a selected or shuffled view: its rows are not the table's
        split = split.flatten_indices()
    table = split.data.table
    leaves = table.column("input_ids").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    leaves = leaves.astype(np.int64).reshape(len(split), width)  # (n, s**l)
    roots = table.column("root").to_numpy().astype(np.int64)  # (n,)
    return leaves, roots


def grammar_file_split_seed(grammar: Grammar, depth: int, level: int, split: str) -> int:
    """The sampling seed of one split of a grammar file's run: SeedSequence over (tag, the sha256 of the grammar's
    content, ℓ, k, split), 63 bits; as the dataset's split seeds, splits and levels never share draws and enlarging
    a split never changes another, and a copy of the file elsewhere draws the same trees."""
    if split not in SPLITS:
        raise ValueError(f"`split` must be one of {list(SPLITS)}, got {split!r}")
    digest = grammar_content_hash(grammar)
    words = [int(digest[i : i + 8], 16) for i in range(0, len(digest), 8)]  # 8 words of 32 bits
    entropy = [GRAMMAR_FILE_STREAM_TAG, *words, int(depth), int(level), SPLITS.index(split)]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0]) >> 1


def split_sampling_seed(data_args: DataArguments, level: int, split: str) -> int:
    """The sampling seed of ``split`` of a run's data at filter level ``level``: its dataset config's
    (:func:`dataset_config`), or for a ``grammar_file`` run :func:`grammar_file_split_seed`."""
    grammar = data_args.file_grammar()
    if grammar is not None:
        return grammar_file_split_seed(grammar, data_args.depth, level, split)
    return split_seed(dataset_config(data_args, level), split)


def run_grammar(data_args: DataArguments) -> Grammar:
    """The grammar of a run's data: its ``grammar_file``'s, else the one its dataset config names."""
    return data_args.file_grammar() or dataset_config(data_args, data_args.k_train).grammar()


def _from_sampler(data_args: DataArguments, grammar: Grammar, level: int, sizes: dict) -> dict:
    """The same splits drawn directly with :func:`sample_trees` (identical bytes)."""
    out = {}
    for split, n in sizes.items():
        seed = split_sampling_seed(data_args, level, split)
        trees = sample_trees(grammar, n, data_args.depth, level, seed)
        out[split] = EvaluationSet(trees.leaves, trees.roots, seed)
    return out


def load_run_data(data_args: DataArguments) -> RunData:
    """The splits of a run (see the module docstring), identical bytes with or without the dataset builder; a
    ``grammar_file`` run's drawn directly from its grammar."""
    grammar = run_grammar(data_args)

    def splits(level: int, sizes: dict) -> dict:
        if data_args.use_dataset_builder and data_args.grammar_file is None:
            return _from_builder(data_args, level, sizes)
        return _from_sampler(data_args, grammar, level, sizes)

    main = splits(data_args.k_train, {"train": data_args.num_train, "validation": data_args.num_eval})
    tests = {k: splits(k, {"test": data_args.num_test})["test"] for k in data_args.test_levels()}
    return RunData(grammar=grammar, train=main["train"], validation=main["validation"], tests=tests)


@dataclass(frozen=True)
class SigmaCurriculum:
    """The σ curriculum of a training run (issue 33): its first ``epochs`` epochs (E) train on the same grammar with
    sharper rules, annealed to the run's σ; later epochs train on the run's own training set.

    :meth:`Grammar.random` draws the rule logits as σ·z from one normal draw z per grammar seed, so the same
    ``grammar_seed`` at a larger σ is the same grammar with sharper rules and stronger long-range correlations.
    Epoch e < E trains on ``num_train`` (P) trees of ``Grammar.random(q, σ_e, grammar_seed)`` at the run's k_train,
    drawn fresh for the epoch, with σ_e annealed linearly from ``start_sigma`` (S) to the run's σ:
    ``σ_e = S + (σ - S) e / E`` (σ_0 = S, σ_E = σ). Epoch e's trees come from :meth:`sampling_seed` (the run's
    training split seed and e): a function of the run's data and e alone, so a run resumed in the curriculum draws
    exactly the trees the uninterrupted run drew, and every model seed trains on the same ones.

    Example (q = 4, ℓ = 4, σ = 1, S = 3, E = 4): epochs 0, 1, 2, 3 train at σ = 3, 2.5, 2, 1.5, epoch 4 on.

        >>> curriculum = SigmaCurriculum(3.0, 4, sigma=1.0, num_symbols=4, depth=4, filter_level=0, grammar_seed=0,
        ...                              num_train=8, train_seed=1)
        >>> [curriculum.sigma_at(e) for e in range(5)], curriculum.training_set(0).leaves.shape
        ([3.0, 2.5, 2.0, 1.5, None], (8, 16))
    """

    start_sigma: float  # S
    epochs: int  # E
    sigma: float  # the run's σ
    num_symbols: int  # q
    depth: int  # ℓ
    filter_level: int  # k_train
    grammar_seed: int
    num_train: int  # P
    train_seed: int  # the sampling seed of the run's training split

    def sigma_at(self, epoch: int) -> float | None:
        """σ_e of epoch ``epoch``, or None from epoch E on (the run's training set)."""
        if not 0 <= epoch < self.epochs:
            return None
        return self.start_sigma + (self.sigma - self.start_sigma) * epoch / self.epochs

    def sampling_seed(self, epoch: int) -> int:
        """The sampling seed of epoch ``epoch``'s trees: SeedSequence over (tag, training split seed, epoch), 63
        bits."""
        entropy = [CURRICULUM_STREAM_TAG, self.train_seed >> 32, self.train_seed & 0xFFFFFFFF, int(epoch)]
        return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0]) >> 1

    def training_set(self, epoch: int) -> TreeSample | None:
        """Epoch ``epoch``'s training trees, ``leaves`` (P, 2**ℓ) and ``roots`` (P,), or None from epoch E on."""
        sigma = self.sigma_at(epoch)
        if sigma is None:
            return None
        grammar = Grammar.random(self.num_symbols, sigma, self.grammar_seed)
        return sample_trees(grammar, self.num_train, self.depth, self.filter_level, self.sampling_seed(epoch))


def sigma_curriculum(data_args: DataArguments) -> SigmaCurriculum | None:
    """The run's :class:`SigmaCurriculum`, or None without ``--sigma_curriculum_start``."""
    if data_args.sigma_curriculum_start is None:
        return None
    return SigmaCurriculum(float(data_args.sigma_curriculum_start), int(data_args.sigma_curriculum_epochs),
                           float(data_args.sigma), data_args.num_symbols, data_args.depth, data_args.k_train,
                           data_args.grammar_seed, data_args.num_train,
                           split_sampling_seed(data_args, data_args.k_train, "train"))


def check_split(name: str, split: EvaluationSet, num_symbols: int) -> None:
    """Leaves (n, s**ℓ) and roots (n,) of a split must be symbols in [0, q): the error names the split.

    The model reads no value in its forward on an accelerator or under compile, so the data path checks them here,
    before training starts.
    """
    leaves, roots = torch.as_tensor(split.leaves), torch.as_tensor(split.roots)
    try:
        check_input_ids(leaves, num_symbols, allow_mask=False)
        check_labels(roots, num_symbols, (leaves.shape[0],))
    except (TypeError, ValueError) as error:
        raise type(error)(f"the {name} split: {error}") from None


def to_datasets(task: str, data: RunData, mask_token_id: int):
    """``datasets.Dataset`` objects for the Trainer: ``(train, validation)``.

    The MLM validation set is premasked at its fixed evaluation positions; root tasks carry the root as ``labels``;
    the causal task (``"clm"``) keeps the leaves alone, which its collator shifts behind BOS
    (:class:`~hf_treelang.train.collators.NextLeafCollator`). Every split is checked first (:func:`check_split`, with
    q = ``mask_token_id``).
    """
    import datasets

    for name, split in [("train", data.train), ("validation", data.validation)] + [
        (f"k_test={k} test", test) for k, test in data.tests.items()
    ]:
        check_split(name, split, mask_token_id)
    if task == "clm":
        train = datasets.Dataset.from_dict({"input_ids": data.train.leaves})
        validation = datasets.Dataset.from_dict({"input_ids": data.validation.leaves})
    elif task == "mlm":
        train = datasets.Dataset.from_dict({"input_ids": data.train.leaves})
        masked, labels, _ = mask_evaluation_set(data.validation.leaves, mask_token_id, data.validation.sampling_seed)
        validation = datasets.Dataset.from_dict({"input_ids": masked.numpy(), "labels": labels.numpy()})
    else:
        train = datasets.Dataset.from_dict({"input_ids": data.train.leaves, "labels": data.train.roots})
        validation = datasets.Dataset.from_dict({"input_ids": data.validation.leaves, "labels": data.validation.roots})
    return train, validation


def validation_tensors(task: str, validation, num_symbols: int) -> tuple:
    """``(input_ids, labels)`` of a run's validation set (:func:`to_datasets`) as its evaluation reads them, int64
    tensors: the causal task's leaves behind BOS (:func:`hf_treelang.core.oracle.next_leaf_inputs`, labels the
    leaves, as :class:`~hf_treelang.train.collators.NextLeafCollator` makes them); the other tasks' columns."""
    columns = validation.with_format("numpy")
    inputs = torch.as_tensor(np.asarray(columns["input_ids"]), dtype=torch.int64)  # (n, 2**l)
    if task == "clm":
        return next_leaf_inputs(inputs, num_symbols), inputs
    return inputs, torch.as_tensor(np.asarray(columns["labels"]), dtype=torch.int64)


__all__ = ["EvaluationSet", "RunData", "SigmaCurriculum", "check_split", "dataset_config", "grammar_file_split_seed",
           "load_run_data", "read_columns", "run_grammar", "sigma_curriculum", "split_sampling_seed", "to_datasets",
           "validation_tensors"]
