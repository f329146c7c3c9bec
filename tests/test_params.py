"""One table of limits and one wording (hf_treelang.core.params) at every entry point, and the renamed arguments.

Every public way in — the grammar, the samplers, BP, the split seeds and masked positions, the ``datasets`` builder,
the model config and the training arguments — refuses an out-of-range ``depth``, ``num_symbols`` or ``sigma`` with
the message of ``core.params``, e.g. "`depth` must be an integer in [1, 16], got 17". Keyword arguments renamed in
0.2 keep working for one release with a FutureWarning and give the same result; passing the old and the new name
together is a TypeError.
"""

from __future__ import annotations

import json
import math
import re
import warnings

import datasets
import numpy as np
import pytest

import hf_treelang  # noqa: F401  (registers load_dataset("treelang"))
from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.masking import evaluation_positions
from hf_treelang.core.params import LIMITS, MAX_DEPTH, MAX_NUM_SYMBOLS, MAX_SIGMA
from hf_treelang.core.sampling import sample_trees, split_seed, uniform_sequences
from hf_treelang.dataset_builder.treelang import TreeLangBuilderConfig
from hf_treelang.models.configuration_treelang import TreeLangConfig
from hf_treelang.train.arguments import DataArguments, parse_command_line

GRAMMAR = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)
SIZES = dict(num_train=8, num_eval=8, num_test=8)
DEPTH_MESSAGE = "`depth` must be an integer in [1, 16], got 17"
NUM_SYMBOLS_MESSAGE = "`num_symbols` must be an integer in [2, 256], got 1"


def _load_builder(tmp_path, **kwargs):
    return datasets.load_dataset_builder("treelang", "k0", cache_dir=str(tmp_path), **kwargs)


def test_the_messages_here_are_the_ones_of_the_table():
    assert (LIMITS["depth"].low, LIMITS["depth"].high) == (1, MAX_DEPTH) == (1, 16)
    assert (LIMITS["num_symbols"].low, LIMITS["num_symbols"].high) == (2, MAX_NUM_SYMBOLS) == (2, 256)
    assert LIMITS["sigma"].high == MAX_SIGMA == 1000.0
    assert f"`depth` must be {LIMITS['depth'].describe()}, got 17" == DEPTH_MESSAGE
    assert f"`num_symbols` must be {LIMITS['num_symbols'].describe()}, got 1" == NUM_SYMBOLS_MESSAGE


# ---------------------------------------------------------------- depth = 17

DEPTH_ENTRY_POINTS = {
    "sample_trees": lambda tmp: sample_trees(GRAMMAR, 2, 17),
    "uniform_sequences": lambda tmp: uniform_sequences(4, 2, 17),
    "BeliefPropagation": lambda tmp: BeliefPropagation(GRAMMAR, 17),
    "split_seed": lambda tmp: split_seed(0, 4, 1.0, 17, 0, "test"),
    "evaluation_positions": lambda tmp: evaluation_positions(0, 2, 17),
    "TreeLangBuilderConfig": lambda tmp: TreeLangBuilderConfig(name="k0", depth=17),
    "load_dataset_builder": lambda tmp: _load_builder(tmp, depth=17),
    "TreeLangConfig": lambda tmp: TreeLangConfig(depth=17),
    "TreeLangConfig.from_data": lambda tmp: TreeLangConfig.from_data(depth=17),
    "DataArguments.validate": lambda tmp: DataArguments(depth=17, k_test=[0], **SIZES).validate(),
}


@pytest.mark.parametrize("entry_point", sorted(DEPTH_ENTRY_POINTS))
def test_depth_17_is_refused_with_the_one_message(entry_point, tmp_path):
    with pytest.raises(ValueError, match=f"^{re.escape(DEPTH_MESSAGE)}$"):
        DEPTH_ENTRY_POINTS[entry_point](tmp_path)


# ---------------------------------------------------------------- num_symbols = 1

NUM_SYMBOLS_ENTRY_POINTS = {
    "Grammar.random": lambda tmp: Grammar.random(num_symbols=1),
    "uniform_sequences": lambda tmp: uniform_sequences(1, 2, 2),
    "split_seed": lambda tmp: split_seed(0, 1, 1.0, 4, 0, "test"),
    "TreeLangBuilderConfig": lambda tmp: TreeLangBuilderConfig(name="k0", num_symbols=1),
    "load_dataset_builder": lambda tmp: _load_builder(tmp, num_symbols=1),
    "TreeLangConfig.from_data": lambda tmp: TreeLangConfig.from_data(num_symbols=1),
    "DataArguments.validate": lambda tmp: DataArguments(num_symbols=1, **SIZES).validate(),
}


@pytest.mark.parametrize("entry_point", sorted(NUM_SYMBOLS_ENTRY_POINTS))
def test_num_symbols_1_is_refused_with_the_one_message(entry_point, tmp_path):
    with pytest.raises(ValueError, match=f"^{re.escape(NUM_SYMBOLS_MESSAGE)}$"):
        NUM_SYMBOLS_ENTRY_POINTS[entry_point](tmp_path)


@pytest.mark.parametrize("num_symbols", [1, 257])
def test_a_grammar_tensor_of_an_out_of_range_size_is_refused_naming_num_symbols(num_symbols):
    M = np.full((num_symbols,) * 3, 1.0 / num_symbols**2)
    with pytest.raises(ValueError, match=re.escape(f"got {num_symbols}")) as error:
        Grammar(M)
    assert "num_symbols" in str(error.value) and "[2, 256]" in str(error.value)


@pytest.mark.parametrize("vocab_size", [3, 259])
def test_the_model_config_refuses_a_vocab_size_of_q_out_of_range_naming_the_range_of_q(vocab_size):
    # TreeLangConfig.vocab_size is q + 2 (the mask id is q, the padding id q + 1): the message gives both ranges.
    expected = f"`vocab_size` must be an integer in [4, 258] (q + 2 with q in [2, 256]), got {vocab_size}"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        TreeLangConfig(vocab_size=vocab_size)


# ---------------------------------------------------------------- sigma = 1e308, NaN

SIGMA_ENTRY_POINTS = {
    "Grammar.random": lambda tmp, s: Grammar.random(num_symbols=4, sigma=s),
    "split_seed": lambda tmp, s: split_seed(0, 4, s, 4, 0, "test"),
    "TreeLangBuilderConfig": lambda tmp, s: TreeLangBuilderConfig(name="k0", sigma=s),
    "load_dataset_builder": lambda tmp, s: _load_builder(tmp, sigma=s),
    "TreeLangConfig": lambda tmp, s: TreeLangConfig(sigma=s),
    "TreeLangConfig.from_data": lambda tmp, s: TreeLangConfig.from_data(sigma=s),
    "DataArguments.validate": lambda tmp, s: DataArguments(sigma=s, **SIZES).validate(),
}


@pytest.mark.parametrize("sigma", [1e308, math.nan], ids=["1e308", "nan"])
@pytest.mark.parametrize("entry_point", sorted(SIGMA_ENTRY_POINTS))
def test_a_huge_or_nan_sigma_is_refused_naming_sigma(entry_point, sigma, tmp_path):
    expected = f"`sigma` must be a real number in [0, 1000], got {sigma!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        SIGMA_ENTRY_POINTS[entry_point](tmp_path, sigma)


def test_the_model_config_refuses_a_grammar_seed_out_of_the_table_range():
    expected = f"`grammar_seed` must be an integer in [0, {int(LIMITS['grammar_seed'].high)}], got -1"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        TreeLangConfig(grammar_seed=-1)


def test_values_inside_the_limits_are_accepted_everywhere():
    config = TreeLangConfig.from_data(num_symbols=256, depth=16, sigma=1000.0, grammar_seed=2**32 - 1,
                                      hidden_size=8, intermediate_size=8, num_hidden_layers=1)
    assert (config.num_symbols, config.depth, config.sigma) == (256, 16, 1000.0)
    DataArguments(num_symbols=256, depth=16, sigma=1000.0, grammar_seed=2**32 - 1, **SIZES).validate()
    assert TreeLangBuilderConfig(name="k0", num_symbols=256, depth=16, sigma=0.0).num_symbols == 256
    assert Grammar.random(num_symbols=2, sigma=MAX_SIGMA).num_symbols == 2


# ---------------------------------------------------------------- renamed arguments


def test_sample_trees_seed_is_renamed_sampling_seed_with_a_future_warning_and_the_same_trees():
    with pytest.warns(FutureWarning, match="`seed` is renamed `sampling_seed`"):
        old = sample_trees(GRAMMAR, 6, 3, 1, seed=7)
    new = sample_trees(GRAMMAR, 6, 3, 1, sampling_seed=7)
    np.testing.assert_array_equal(old.leaves, new.leaves)
    np.testing.assert_array_equal(old.roots, new.roots)


def test_uniform_sequences_vocab_size_and_seed_are_renamed_with_future_warnings_and_the_same_sequences():
    with pytest.warns(FutureWarning) as record:
        old = uniform_sequences(vocab_size=3, n=5, depth=2, seed=11)
    messages = [str(w.message) for w in record]
    assert any("`vocab_size` is renamed `num_symbols`" in m for m in messages), messages
    assert any("`seed` is renamed `sampling_seed`" in m for m in messages), messages
    np.testing.assert_array_equal(old, uniform_sequences(num_symbols=3, n=5, depth=2, sampling_seed=11))


def test_grammar_random_vocab_size_and_seed_are_renamed_with_future_warnings_and_the_same_grammar():
    with pytest.warns(FutureWarning) as record:
        old = Grammar.random(vocab_size=3, sigma=0.7, seed=5)
    messages = [str(w.message) for w in record]
    assert any("`vocab_size` is renamed `num_symbols`" in m for m in messages), messages
    assert any("`seed` is renamed `grammar_seed`" in m for m in messages), messages
    new = Grammar.random(num_symbols=3, sigma=0.7, grammar_seed=5)
    assert old == new and old.params == new.params


def test_the_builder_config_vocab_size_is_renamed_num_symbols_with_a_future_warning():
    with pytest.warns(FutureWarning, match="`vocab_size` is renamed `num_symbols`"):
        old = TreeLangBuilderConfig(name="k1", vocab_size=5)
    new = TreeLangBuilderConfig(name="k1", num_symbols=5)
    assert old.config_id == new.config_id and old.params == new.params


@pytest.mark.parametrize(
    "call",
    [
        lambda: sample_trees(GRAMMAR, 2, 2, 0, seed=1, sampling_seed=1),
        lambda: uniform_sequences(vocab_size=3, num_symbols=3, n=2, depth=2),
        lambda: uniform_sequences(3, 2, 2, seed=1, sampling_seed=1),
        lambda: Grammar.random(vocab_size=3, num_symbols=3),
        lambda: Grammar.random(num_symbols=3, seed=1, grammar_seed=1),
    ],
    ids=["sample_trees-seed", "uniform-vocab_size", "uniform-seed", "random-vocab_size", "random-seed"],
)
def test_passing_a_renamed_argument_and_its_new_name_together_is_a_type_error(call):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # refused before any warning is given
        with pytest.raises(TypeError, match=r"got both `\w+` \(renamed\) and `\w+`"):
            call()


def test_the_training_scripts_accept_the_former_vocab_size_flag_with_a_future_warning(tmp_path):
    common = ["--output_dir", str(tmp_path), "--depth", "3", "--num_train", "8"]
    with pytest.warns(FutureWarning, match="vocab_size` is renamed `--num_symbols"):
        old, _, _ = parse_command_line("root", ["--vocab_size", "5", *common])[:3]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        new, _, _ = parse_command_line("root", ["--num_symbols", "5", *common])[:3]
    assert old == new and old.num_symbols == 5


def test_an_argument_file_with_the_former_vocab_size_key_works_with_a_future_warning(tmp_path):
    def write(name, values):
        path = tmp_path / name
        path.write_text(json.dumps({"output_dir": str(tmp_path), "depth": 3, **values}))
        return str(path)

    with pytest.warns(FutureWarning, match="`vocab_size` is renamed `num_symbols`"):
        old, _, _ = parse_command_line("root", [write("old.json", {"vocab_size": 6})])[:3]
    new, _, _ = parse_command_line("root", [write("new.json", {"num_symbols": 6})])[:3]
    assert old == new and old.num_symbols == 6
