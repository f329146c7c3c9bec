import json

import numpy as np
import pytest
from scipy.special import softmax

from hf_treelang import Grammar


def paper_reference_grammar(q, sigma, seed):
    """The procedure of the paper's data-generation script: numpy's legacy global generator, a shuffled list of
    child pairs, one standard normal per allowed rule in order, and scipy's softmax over each parent's q x q table."""
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        pairs = np.array([(b, c) for b in range(q) for c in range(q)])
        np.random.shuffle(pairs)
        logits = np.full((q, q, q), -np.inf)
        for a in range(q):
            for b, c in pairs[a * q : (a + 1) * q]:
                logits[a, b, c] = sigma * np.random.randn()
    finally:
        np.random.set_state(state)
    return np.stack([softmax(logits[a]) for a in range(q)])


@pytest.mark.parametrize("q,sigma,seed", [(4, 1.0, 0), (4, 1.0, 1), (4, 1.0, 15), (4, 1.0, 31), (8, 0.5, 7), (3, 2.0, 42)])
def test_random_grammar_matches_paper_code(q, sigma, seed):
    grammar = Grammar.random(num_symbols=q, sigma=sigma, grammar_seed=seed)
    np.testing.assert_array_equal(grammar.M, paper_reference_grammar(q, sigma, seed))  # bit for bit
    assert grammar.params == {"num_symbols": q, "sigma": sigma, "grammar_seed": seed}


def test_random_grammar_does_not_touch_global_numpy_state():
    np.random.seed(123)
    expected = np.random.rand()
    np.random.seed(123)
    Grammar.random(4, 1.0, 0)
    assert np.random.rand() == expected


def test_random_grammar_is_non_overlapping_and_normalised():
    grammar = Grammar.random(num_symbols=6, sigma=1.0, grammar_seed=3)
    parents_per_pair = (grammar.M > 0).sum(0)  # (q, q): how many parents emit each child pair
    assert np.all(parents_per_pair == 1)
    assert np.all((grammar.M > 0).reshape(6, -1).sum(1) == 6)
    np.testing.assert_allclose(grammar.M.reshape(6, -1).sum(1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(grammar.root_prior, np.full(6, 1 / 6))


def test_sigma_zero_gives_uniform_rules():
    grammar = Grammar.random(num_symbols=4, sigma=0.0, grammar_seed=0)
    assert set(np.unique(grammar.M)) == {0.0, 0.25}


def test_path_matrices_are_products_along_the_path():
    grammar = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)
    ML, MR = grammar.M.sum(2), grammar.M.sum(1)
    np.testing.assert_array_equal(grammar.path_matrices(0)[:, :, 0], np.eye(4))
    paths = grammar.path_matrices(3)
    assert paths.shape == (4, 4, 8)
    for j in range(8):
        bits = [(j >> (2 - t)) & 1 for t in range(3)]  # most significant first
        expected = np.eye(4)
        for bit in bits:
            expected = expected @ (MR if bit else ML)
        np.testing.assert_allclose(paths[:, :, j], expected, atol=1e-15)
    np.testing.assert_allclose(paths.sum(1), 1.0, atol=1e-12)


def test_save_load_round_trip_is_bit_exact(tmp_path):
    grammar = Grammar.random(num_symbols=5, sigma=1.3, grammar_seed=11)
    path = tmp_path / "grammar.json"
    grammar.save(path)
    loaded = Grammar.load(path)
    assert loaded.M.tobytes() == grammar.M.tobytes()
    assert loaded.root_prior.tobytes() == grammar.root_prior.tobytes()
    assert loaded.params == grammar.params
    assert loaded == grammar
    assert json.loads(path.read_text())["num_symbols"] == 5  # human-readable JSON


def test_user_tensor_and_prior_are_accepted():
    M = np.zeros((2, 2, 2))
    M[0, 0, 0] = M[1, 1, 1] = 1.0
    grammar = Grammar(M, root_prior=[0.25, 0.75])
    assert grammar.num_symbols == 2
    np.testing.assert_array_equal(grammar.root_prior, [0.25, 0.75])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_symbols": 1}, r"`num_symbols` must be an integer in \[2, 256\], got 1"),
        ({"num_symbols": 2.5}, "num_symbols"),
        ({"num_symbols": 10_000}, r"`num_symbols` must be an integer in \[2, 256\], got 10000"),
        ({"sigma": -0.1}, "sigma"),
        ({"sigma": float("nan")}, "sigma"),
        ({"sigma": float("inf")}, "sigma"),
        ({"sigma": 1e308}, r"`sigma` must be a real number in \[0, 1000\]"),
        ({"grammar_seed": -1}, "grammar_seed"),
    ],
)
def test_random_rejects_bad_parameters(kwargs, match):
    params = {"num_symbols": 4, "sigma": 1.0, "grammar_seed": 0} | kwargs
    with pytest.raises((ValueError, TypeError), match=match):
        Grammar.random(**params)


def test_rows_not_summing_to_one_are_rejected():
    M = np.full((3, 3, 3), 1 / 9)
    M[1, 0, 0] += 1e-6
    with pytest.raises(ValueError, match=r"M\[1\]"):
        Grammar(M)


@pytest.mark.parametrize(
    "M,match",
    [
        (np.full((3, 3), 1 / 3), "shape"),
        (np.full((3, 3, 2), 1 / 6), "shape"),
        (np.full((1, 1, 1), 1.0), "num_symbols"),
        (np.where(np.eye(9).reshape(3, 3, 3, 3)[..., 0] > 2, 0, np.nan), "finite"),
    ],
)
def test_malformed_tensors_are_rejected(M, match):
    with pytest.raises(ValueError, match=match):
        Grammar(M)


def test_negative_entries_are_rejected():
    M = np.full((2, 2, 2), 0.25)
    M[0, 0, 0], M[0, 0, 1] = -0.25, 0.75
    with pytest.raises(ValueError, match="non-negative"):
        Grammar(M)


def test_bad_root_prior_is_rejected():
    M = np.full((2, 2, 2), 0.25)
    with pytest.raises(ValueError, match="root_prior"):
        Grammar(M, root_prior=[0.5, 0.6])
    with pytest.raises(ValueError, match="root_prior"):
        Grammar(M, root_prior=[1.0])


def test_renamed_keywords_still_work_with_a_future_warning():
    with pytest.warns(FutureWarning, match="`vocab_size` is renamed `num_symbols`"):
        old = Grammar.random(vocab_size=4, sigma=1.0, seed=0)
    assert old == Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)
    with pytest.warns(FutureWarning, match="`vocab_size` is renamed `num_symbols`"):
        assert old.vocab_size == 4


def test_files_written_before_the_rename_still_load(tmp_path):
    grammar = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=3)
    data = grammar.to_dict()
    data["params"] = {"vocab_size": 4, "sigma": 1.0, "seed": 3}
    assert Grammar.from_dict(data).params == grammar.params


# ---------------------------------------------------------------- issue 12: errors before work


@pytest.mark.parametrize(
    "content,match",
    [
        ('{"format": "hf-treelang-grammar/1", "M": [', r"is not valid JSON: Expecting value at line 1, column 43"),
        ("", "is not valid JSON"),
        ("[1, 2, 3]", "must be a JSON object, got list"),
        ('{"format": "hf-treelang-grammar/1", "root_prior": [0.5, 0.5]}', r"lacks the key\(s\) \['M'\]"),
        ('{"format": "hf-treelang-grammar/1", "M": [[[1, 0], [0, 0]], [[0, 0], [0]]], "root_prior": [0.5, 0.5]}',
         "M is not an array of numbers"),
        ('{"format": "other", "M": [], "root_prior": []}', "format must be"),
    ],
)
def test_load_of_a_malformed_file_names_the_file_and_the_problem(tmp_path, content, match):
    path = tmp_path / "grammar.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=match) as error:
        Grammar.load(path)
    assert str(path) in str(error.value)


def test_load_of_binary_data_is_a_value_error(tmp_path):
    path = tmp_path / "grammar.json"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        Grammar.load(path)


def test_load_refuses_a_num_symbols_that_disagrees_with_M(tmp_path):
    data = Grammar.random(num_symbols=3, sigma=1.0, grammar_seed=0).to_dict()
    data["num_symbols"] = 4
    path = tmp_path / "grammar.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="num_symbols is 4 but M has 3 symbols"):
        Grammar.load(path)


def test_path_matrices_beyond_the_memory_limit_are_refused_before_allocation():
    from hf_treelang import BeliefPropagation
    from hf_treelang.core.grammar import MAX_PATH_MATRICES_BYTES

    M = np.full((128, 128, 128), 1.0 / 128**2)
    grammar = Grammar(M)
    allowed = max(k for k in range(17) if 128 * 128 * 8 << k <= MAX_PATH_MATRICES_BYTES)
    assert allowed == 13
    message = r"`filter_level` must be at most 13 with num_symbols = 128, got 16: .* 8 GiB \(limit 1 GiB\)"
    with pytest.raises(ValueError, match=message):
        grammar.path_matrices(16)
    with pytest.raises(ValueError, match=message):
        BeliefPropagation(grammar, depth=16, filter_level=16)  # at construction, before any table is built
    assert grammar.path_matrices(1).shape == (128, 128, 2)
