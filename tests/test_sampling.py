import numpy as np
import pytest
from scipy.stats import chisquare

from enumeration import EnumeratedModel
from hf_treelang import Grammar, sample_trees, uniform_sequences

PAPER = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)


def dense_grammar(q, seed):
    """A grammar with every rule allowed (not the paper's ensemble): exercises the general sampler."""
    rng = np.random.default_rng(seed)
    M = rng.gamma(1.0, size=(q, q, q))
    return Grammar(M / M.sum((1, 2), keepdims=True), root_prior=rng.dirichlet(np.ones(q)))


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_result_shapes_and_missing_levels(k):
    sample = sample_trees(PAPER, n=10, depth=3, filter_level=k, sampling_seed=0)
    assert sample.roots.shape == (10,) and sample.leaves.shape == (10, 8)
    for m, level in enumerate(sample.levels):
        if 0 < m < k:
            assert level is None
        else:
            assert level.shape == (10, 2**m) and level.dtype == np.int64
    np.testing.assert_array_equal(sample.levels[0][:, 0], sample.roots)
    np.testing.assert_array_equal(sample.levels[3], sample.leaves)
    assert len(sample) == 10 and sample.depth == 3 and sample.filter_level == k


@pytest.mark.parametrize("k", [0, 2, 4])
def test_same_bytes_whatever_the_chunking(k):
    reference = sample_trees(PAPER, n=9000, depth=4, filter_level=k, sampling_seed=5)
    small_chunks = sample_trees(PAPER, n=9000, depth=4, filter_level=k, sampling_seed=5, chunk_size=7)
    head = sample_trees(PAPER, n=4100, depth=4, filter_level=k, sampling_seed=5)
    tail = sample_trees(PAPER, n=4900, depth=4, filter_level=k, sampling_seed=5, start=4100, chunk_size=50_000)
    for m in range(5):
        if reference.levels[m] is None:
            continue
        assert reference.levels[m].tobytes() == small_chunks.levels[m].tobytes()
        assert reference.levels[m].tobytes() == np.concatenate([head.levels[m], tail.levels[m]]).tobytes()


def test_seeds_and_filter_levels_give_different_streams():
    a = sample_trees(PAPER, n=200, depth=4, filter_level=0, sampling_seed=0).leaves
    b = sample_trees(PAPER, n=200, depth=4, filter_level=0, sampling_seed=1).leaves
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, sample_trees(PAPER, n=200, depth=4, filter_level=0, sampling_seed=0).leaves)


@pytest.mark.parametrize("grammar_name", ["paper", "dense"])
@pytest.mark.parametrize("k", [0, 1, 2])
def test_joint_root_and_leaves_distribution_matches_exact_probabilities(grammar_name, k):
    # Chi-square goodness of fit of P_k(root, leaves) on a depth-2 tree, against brute-force enumeration.
    grammar = PAPER if grammar_name == "paper" else dense_grammar(3, seed=1)
    q, depth, n = grammar.num_symbols, 2, 200_000
    exact = EnumeratedModel(grammar, depth, k).sequence_probabilities()
    sample = sample_trees(grammar, n=n, depth=depth, filter_level=k, sampling_seed=3)
    codes = np.column_stack([sample.roots, sample.leaves]) @ (q ** np.arange(depth**2, -1, -1))
    keys = list(exact)
    key_codes = np.array([sum(v * q**p for v, p in zip(key, range(depth**2, -1, -1))) for key in keys])
    assert np.isin(codes, key_codes).all(), "a sequence of probability zero was sampled"
    observed = np.array([(codes == c).sum() for c in key_codes])
    expected = np.array([exact[key] for key in keys]) * n
    assert abs(expected.sum() - n) < 1e-6 * n
    keep = expected > 5  # chi-square validity; the rare cells are covered by the support check above
    _, p_value = chisquare(observed[keep], expected[keep] * observed[keep].sum() / expected[keep].sum())
    assert p_value > 1e-4


def test_level_k_nodes_follow_path_matrices_given_root():
    k, n = 3, 400_000
    sample = sample_trees(PAPER, n=n, depth=4, filter_level=k, sampling_seed=11)
    paths = PAPER.path_matrices(k)  # (q, q, 2**k)
    for root in range(4):
        rows = sample.levels[k][sample.roots == root]  # (n_root, 2**k)
        frequencies = np.stack([(rows == b).mean(0) for b in range(4)])  # (q, 2**k)
        tolerance = 5 * np.sqrt(0.25 / rows.shape[0])
        np.testing.assert_allclose(frequencies, paths[root], atol=tolerance)


def test_child_pairs_follow_the_transition_tensor():
    q, n = 4, 100_000
    sample = sample_trees(PAPER, n=n, depth=3, filter_level=0, sampling_seed=2)
    parents = sample.levels[2].reshape(-1)
    left, right = sample.leaves[:, 0::2].reshape(-1), sample.leaves[:, 1::2].reshape(-1)
    for a in range(q):
        sel = parents == a
        counts = np.zeros((q, q))
        np.add.at(counts, (left[sel], right[sel]), 1)
        np.testing.assert_allclose(counts / sel.sum(), PAPER.M[a], atol=5 * np.sqrt(0.25 / sel.sum()))
        assert np.all(counts[PAPER.M[a] == 0] == 0)


def test_root_follows_the_prior():
    grammar = dense_grammar(4, seed=2)
    roots = sample_trees(grammar, n=200_000, depth=1, filter_level=0, sampling_seed=0).roots
    np.testing.assert_allclose(np.bincount(roots, minlength=4) / roots.size, grammar.root_prior, atol=0.005)


def test_large_vocabulary_is_supported():
    grammar = Grammar.random(num_symbols=64, sigma=1.0, grammar_seed=0)
    sample = sample_trees(grammar, n=2000, depth=5, filter_level=2, sampling_seed=0)
    assert sample.leaves.min() >= 0 and sample.leaves.max() < 64
    parents, left, right = sample.levels[4].reshape(-1), sample.leaves[:, 0::2].reshape(-1), sample.leaves[:, 1::2].reshape(-1)
    assert np.all(grammar.M[parents, left, right] > 0)


def test_uniform_sequences_are_uniform_and_reproducible():
    x = uniform_sequences(num_symbols=5, n=40_000, depth=3, sampling_seed=4)
    assert x.shape == (40_000, 8) and x.min() == 0 and x.max() == 4
    np.testing.assert_allclose(np.bincount(x.ravel(), minlength=5) / x.size, 0.2, atol=0.005)
    np.testing.assert_array_equal(x[1000:], uniform_sequences(num_symbols=5, n=39_000, depth=3, sampling_seed=4, start=1000))
    assert not np.array_equal(x, uniform_sequences(num_symbols=5, n=40_000, depth=3, sampling_seed=5))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"n": -1}, r"`n` must be an integer in \[0, 2147483647\], got -1"),
        ({"depth": 0}, "depth"),
        ({"filter_level": 5}, "filter_level"),
        ({"filter_level": -1}, "filter_level"),
        ({"sampling_seed": -3}, "sampling_seed"),
        ({"n": 2.0}, "`n` must"),
        ({"depth": 17}, r"`depth` must be an integer in \[1, 16\], got 17"),
        ({"chunk_size": 0}, "chunk_size"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, match):
    params = {"n": 10, "depth": 4, "filter_level": 0, "sampling_seed": 0} | kwargs
    with pytest.raises((ValueError, TypeError), match=match):
        sample_trees(PAPER, **params)


def test_grammar_must_be_a_grammar():
    with pytest.raises(TypeError, match="grammar"):
        sample_trees(PAPER.M, n=1, depth=2)


def test_zero_samples_is_allowed():
    sample = sample_trees(PAPER, n=0, depth=3, filter_level=1)
    assert sample.leaves.shape == (0, 8) and sample.roots.shape == (0,)
