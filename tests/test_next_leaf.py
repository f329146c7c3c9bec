"""The next-leaf oracle P_k(x_i | x_<i): against brute-force enumeration, the chain rule against BP's likelihood, and
its contracts (rows sum to one, row 0 is the first leaf's marginal, batching changes nothing, errors name the
parameter)."""

import itertools

import numpy as np
import pytest
import torch

from enumeration import EnumeratedModel, enumerated_next_leaf, leaf_distribution
from hf_treelang import BeliefPropagation, Grammar, sample_trees
from hf_treelang.core import NextLeafResult, next_leaf_distributions
from hf_treelang.core import next_leaf as next_leaf_module

PAPER = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)
TOLERANCE = 1e-12  # float64 against enumeration
CHAIN_RULE_TOLERANCE = 1e-10  # the chain-rule sum against BP's log-likelihood, float64


def dense_grammar(q, seed):
    rng = np.random.default_rng(seed)
    M = rng.gamma(0.7, size=(q, q, q))
    return Grammar(M / M.sum((1, 2), keepdims=True), root_prior=rng.dirichlet(np.ones(q)))


# (grammar, depth) small enough to enumerate every tree: q <= 3 or ℓ <= 2.
CASES = [("paper-q4-l2", PAPER, 2), ("dense-q3-l2", dense_grammar(3, 0), 2), ("dense-q2-l3", dense_grammar(2, 1), 3),
         ("paper-q2-l3", Grammar.random(2, 1.0, 0), 3)]
IDS = [case[0] for case in CASES]


def data(grammar, depth, data_level, n, seed):
    return sample_trees(grammar, n=n, depth=depth, filter_level=data_level, sampling_seed=seed).leaves


@pytest.mark.parametrize("name,grammar,depth", CASES, ids=IDS)
def test_next_leaf_distributions_match_enumeration(name, grammar, depth):
    # Every k of BP, on data of every level: matched (k = data level) and mismatched.
    q = grammar.num_symbols
    for k in range(depth + 1):
        sequences, probabilities = leaf_distribution(grammar, depth, k)
        bp = BeliefPropagation(grammar, depth, k, on_impossible="flag")
        for data_level in range(depth + 1):
            leaves = data(grammar, depth, data_level, n=5, seed=10 * k + data_level)
            result = next_leaf_distributions(bp, leaves)
            for row, sequence in enumerate(leaves):
                index = np.flatnonzero(np.all(sequences == sequence, axis=1))
                if not index.size:  # a sequence that P_k cannot produce (mismatched BP on a sparse grammar)
                    assert result.impossible[row]
                    continue
                expected = enumerated_next_leaf(sequences, probabilities, sequence, q)
                np.testing.assert_allclose(result.probabilities[row].numpy(), expected, atol=TOLERANCE, rtol=0,
                                           err_msg=f"k={k} data level={data_level} row={row}")
                log_likelihood = np.log(probabilities[index[0]])
                assert result.log_likelihood[row].item() == pytest.approx(log_likelihood, abs=TOLERANCE)


@pytest.mark.parametrize("name,grammar,depth", CASES, ids=IDS)
def test_log_domain_kernels_match_enumeration(name, grammar, depth):
    # The kernels that the rows at risk of underflow are run with, forced on every row.
    q = grammar.num_symbols
    for k in range(depth + 1):
        sequences, probabilities = leaf_distribution(grammar, depth, k)
        bp = BeliefPropagation(grammar, depth, k)
        leaves = data(grammar, depth, k, n=4, seed=k)
        result, log_conditionals, fragile = next_leaf_module._next_leaf(bp, bp._validate(leaves), log_domain=True)
        assert not fragile.any()
        for row, sequence in enumerate(leaves):
            expected = enumerated_next_leaf(sequences, probabilities, sequence, q)
            np.testing.assert_allclose(result[row].numpy(), expected, atol=TOLERANCE, rtol=0, err_msg=f"k={k}")
            chosen = np.log(expected[np.arange(len(sequence)), sequence])
            np.testing.assert_allclose(log_conditionals[row].numpy(), chosen, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("depth,levels", [(4, range(5)), (7, (0, 1, 4, 6, 7))], ids=["l4", "l7"])
def test_chain_rule_equals_bp_log_likelihood(depth, levels):
    for k, data_level in itertools.product(levels, [0, depth]):
        leaves = data(PAPER, depth, data_level, n=20, seed=k)
        bp = BeliefPropagation(PAPER, depth, k, dtype=torch.float64, on_impossible="flag")
        result = next_leaf_distributions(bp, leaves)
        assert result.log_likelihood.dtype == torch.float64
        torch.testing.assert_close(result.log_conditionals.sum(1), result.log_likelihood, atol=0, rtol=0)
        torch.testing.assert_close(result.log_likelihood, bp.log_likelihood(leaves), atol=CHAIN_RULE_TOLERANCE, rtol=0)


def test_chain_rule_with_masked_leaves_equals_the_likelihood_of_the_observed_leaves():
    depth, q = 4, PAPER.num_symbols
    leaves = data(PAPER, depth, 0, n=30, seed=3).copy()
    rng = np.random.default_rng(3)
    leaves[rng.random(leaves.shape) < 0.3] = q
    leaves[-1] = q  # every leaf masked: log P(nothing observed) = 0
    for k in range(depth + 1):
        bp = BeliefPropagation(PAPER, depth, k)
        result = next_leaf_distributions(bp, leaves)
        torch.testing.assert_close(result.log_likelihood, bp.log_likelihood(leaves), atol=CHAIN_RULE_TOLERANCE, rtol=0)
        assert (result.log_conditionals[torch.from_numpy(leaves == q)] == 0).all()


def test_each_row_is_the_leaf_marginal_of_its_prefix_with_the_rest_masked():
    # Row i against BP run on the sequence whose leaves >= i are masked: 2**ℓ runs where next_leaf makes one.
    depth, q, n = 5, PAPER.num_symbols, 6
    length = 2**depth
    leaves = data(PAPER, depth, 1, n=n, seed=4)
    prefixes = np.repeat(leaves[:, None, :], length, 1)  # (n, L, L): copy i keeps the leaves < i
    prefixes[:, np.arange(length)[:, None] <= np.arange(length)[None, :]] = q
    for k in (0, 2, 5):
        bp = BeliefPropagation(PAPER, depth, k)
        result = next_leaf_distributions(bp, leaves)
        marginals = bp.leaf_marginals(prefixes.reshape(n * length, length)).reshape(n, length, length, q)
        expected = marginals[:, np.arange(length), np.arange(length)]  # (n, L, q): leaf i of copy i
        torch.testing.assert_close(result.probabilities, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("k", [0, 1, 2, 3, 4])
def test_rows_sum_to_one(k):
    leaves = data(PAPER, 4, 2, n=200, seed=5)
    probabilities = next_leaf_distributions(BeliefPropagation(PAPER, 4, k, on_impossible="flag"), leaves).probabilities
    assert (probabilities >= 0).all()
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(200, 16, dtype=torch.float64), atol=1e-13, rtol=0)


@pytest.mark.parametrize("k", [0, 1, 2, 3, 4])
def test_first_row_is_the_first_leaf_marginal_of_an_all_masked_sequence(k):
    bp = BeliefPropagation(PAPER, 4, k)
    leaves = data(PAPER, 4, k, n=10, seed=6)
    first = next_leaf_distributions(bp, leaves).probabilities[:, 0]  # (n, q)
    marginal = bp.leaf_marginals(np.full((1, 16), PAPER.num_symbols))[0, 0]  # (q,)
    torch.testing.assert_close(first, marginal.expand(10, -1), atol=1e-14, rtol=0)


def test_results_do_not_depend_on_the_batch_size():
    leaves = data(PAPER, 5, 1, n=23, seed=7)
    bp = BeliefPropagation(PAPER, 5, 2)
    whole = next_leaf_distributions(bp, leaves)
    for batch_size in (1, 5, 23, 100):
        part = next_leaf_distributions(bp, leaves, batch_size=batch_size)
        torch.testing.assert_close(part.probabilities, whole.probabilities, atol=1e-15, rtol=0)
        torch.testing.assert_close(part.log_likelihood, whole.log_likelihood, atol=1e-13, rtol=0)


def test_node_slices_do_not_change_the_results(monkeypatch):
    leaves = data(PAPER, 4, 1, n=9, seed=8)
    bp = BeliefPropagation(PAPER, 4, 1)
    ids = bp._validate(leaves)
    whole = [next_leaf_module._next_leaf(bp, ids, log_domain) for log_domain in (False, True)]
    monkeypatch.setattr(next_leaf_module, "WORKING_SET_BYTES", 1)  # one node per slice
    sliced = [next_leaf_module._next_leaf(bp, ids, log_domain) for log_domain in (False, True)]
    for one, other in zip(sliced, whole):
        torch.testing.assert_close(one[0], other[0], atol=1e-15, rtol=0)
        torch.testing.assert_close(one[1], other[1], atol=1e-15, rtol=0)


def test_float32_is_close_to_float64():
    leaves = data(PAPER, 6, 2, n=50, seed=9)
    exact = next_leaf_distributions(BeliefPropagation(PAPER, 6, 2), leaves)
    single = next_leaf_distributions(BeliefPropagation(PAPER, 6, 2, dtype=torch.float32), leaves)
    assert single.probabilities.dtype == torch.float32 and single.log_likelihood.dtype == torch.float32
    torch.testing.assert_close(single.probabilities.double(), exact.probabilities, atol=1e-5, rtol=0)
    torch.testing.assert_close(single.log_likelihood.double(), exact.log_likelihood, atol=0, rtol=1e-5)


# ---------------------------------------------------------------- range: rules far below the dtype's smallest number


def log_joint_table(grammar, depth, k):
    """(leaves of every tree (T, 2**ℓ), log P_k of every tree (T,)) by enumeration in the log domain: exact where the
    float64 products of EnumeratedModel underflow."""
    exact = EnumeratedModel(grammar, depth, k)
    x = exact.assignments
    with np.errstate(divide="ignore"):
        log_M, log_paths = np.log(grammar.M), np.log(grammar.path_matrices(k))
        log_p = np.log(grammar.root_prior)[x[:, 0]]
    if k > 0:
        for j, col in enumerate(exact.levels[k]):
            log_p = log_p + log_paths[x[:, 0], x[:, col], j]
    for m in range(k, depth):
        for i, col in enumerate(exact.levels[m]):
            left, right = exact.levels[m + 1][2 * i : 2 * i + 2]
            log_p = log_p + log_M[x[:, col], x[:, left], x[:, right]]
    return exact.leaves, log_p


def log_next_leaf(table, sequence, q):
    """((L, q) P(x_i = s | observed x_<i), log P(observed leaves)) of one sequence (masks = q) from a log_joint_table;
    the rows of an impossible prefix are NaN."""
    leaves, log_p = table
    observed = sequence != q
    rows = []
    for i in range(len(sequence)):
        seen = observed[:i]
        consistent = np.all(leaves[:, :i][:, seen] == sequence[:i][seen], axis=1)
        log_joint = np.array([np.logaddexp.reduce(log_p[consistent & (leaves[:, i] == s)]) for s in range(q)])
        total = np.logaddexp.reduce(log_joint)
        rows.append(np.exp(log_joint - total) if total > -np.inf else np.full(q, np.nan))
    log_likelihood = np.logaddexp.reduce(log_p[np.all(leaves[:, observed] == sequence[observed], axis=1)])
    return np.array(rows), log_likelihood


@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-9), (torch.float32, 5e-5)], ids=["f64", "f32"])
@pytest.mark.parametrize("sigma", [30.0, 300.0])
def test_large_sigma_matches_log_domain_enumeration(sigma, dtype, tolerance):
    # σ = 300 has rules down to 1e-300 (σ = 30: 1e-50, below float32's range): the plain kernels would flush them; the
    # rows at risk are marked and computed again with the log-domain kernels.
    rescued = 0  # possible rows that the plain kernels marked fragile: the fallback must be exercised
    for grammar, depth in [(Grammar.random(2, sigma, 2), 3), (Grammar.random(4, sigma, 1), 2)]:
        q = grammar.num_symbols
        rng = np.random.default_rng(2)
        leaves = np.concatenate([data(grammar, depth, 0, n=4, seed=1), data(grammar, depth, depth, n=4, seed=2),
                                 rng.integers(0, q, size=(12, 2**depth))])
        leaves[rng.random(leaves.shape) < 0.2] = q  # some masked leaves
        for k in range(depth + 1):
            table = log_joint_table(grammar, depth, k)
            bp = BeliefPropagation(grammar, depth, k, dtype=dtype, on_impossible="flag")
            result = next_leaf_distributions(bp, leaves)
            rescued += int((next_leaf_module._next_leaf(bp, bp._validate(leaves), False)[2] & ~result.impossible).sum())
            for row, sequence in enumerate(leaves):
                expected, log_likelihood = log_next_leaf(table, sequence, q)
                assert result.log_likelihood[row].item() == pytest.approx(log_likelihood, rel=tolerance, abs=tolerance)
                defined = ~np.isnan(expected[:, 0])
                np.testing.assert_allclose(result.probabilities[row].double().numpy()[defined], expected[defined],
                                           atol=tolerance, rtol=0, err_msg=f"q={q} k={k} row={row}")
    assert rescued > 0 or (sigma, dtype) == (30.0, torch.float64)


def test_the_paper_grammar_stays_on_the_plain_kernels():
    # σ = 1 (the paper's figures): no row needs the slower log-domain kernels, matched or mismatched, masks or not.
    depth = 6
    for k, data_level in itertools.product([0, 3, 6], [0, depth]):
        leaves = data(PAPER, depth, data_level, n=50, seed=k).copy()
        leaves[25:, ::3] = PAPER.num_symbols
        bp = BeliefPropagation(PAPER, depth, k, on_impossible="flag")
        ids = bp._validate(leaves)
        _, log_conditionals, fragile = next_leaf_module._next_leaf(bp, ids, log_domain=False)
        impossible = ~torch.isfinite(log_conditionals.sum(1))  # zero messages are fragile by BP's own watch
        assert not (fragile & ~impossible).any(), (k, data_level)


# ---------------------------------------------------------------- impossible sequences


def sparse_grammar():
    M = np.zeros((2, 2, 2))
    M[0, 0, 0] = 1.0  # 0 -> (0, 0)
    M[1, 1, 1] = 1.0  # 1 -> (1, 1)
    return Grammar(M)


def test_impossible_sequence_raises_by_default():
    bp = BeliefPropagation(sparse_grammar(), 2, 0)
    with pytest.raises(ValueError, match=r"probability zero .*first row 1, whose leaf 1"):
        next_leaf_distributions(bp, np.array([[0, 0, 0, 0], [0, 1, 0, 0]]))


def test_impossible_sequence_is_flagged_with_uniform_undefined_rows():
    bp = BeliefPropagation(sparse_grammar(), 2, 0, on_impossible="flag")
    result = next_leaf_distributions(bp, np.array([[0, 0, 0, 0], [0, 1, 0, 0]]))
    assert result.impossible.tolist() == [False, True]
    assert result.log_likelihood[1] == -np.inf and torch.isfinite(result.log_likelihood[0])
    # Row 1 of the impossible sequence is defined (x0 = 0 forces x1 = 0); its leaf 1 has probability zero, and the
    # rows after it condition on a prefix of probability zero: uniform.
    half = torch.full((2,), 0.5, dtype=torch.float64)
    expected = torch.stack([half, torch.tensor([1.0, 0.0], dtype=torch.float64), half, half])
    torch.testing.assert_close(result.probabilities[1], expected, atol=0, rtol=0)
    assert result.log_conditionals[1].tolist() == [np.log(0.5), -np.inf, -np.inf, -np.inf]
    assert torch.isfinite(result.probabilities).all()


# ---------------------------------------------------------------- inputs


def test_result_shapes_dtypes_and_empty_input():
    bp = BeliefPropagation(PAPER, 3, 1)
    result = next_leaf_distributions(bp, torch.zeros(2, 8, dtype=torch.int64))
    assert isinstance(result, NextLeafResult) and len(result) == 2
    assert result.probabilities.shape == (2, 8, 4) and result.log_conditionals.shape == (2, 8)
    assert result.log_likelihood.shape == (2,) and result.impossible.dtype == torch.bool
    empty = next_leaf_distributions(bp, np.zeros((0, 8), dtype=np.int64))
    assert empty.probabilities.shape == (0, 8, 4) and empty.log_likelihood.shape == (0,) and len(empty) == 0


@pytest.mark.parametrize(
    "leaves,error,match",
    [
        (np.zeros((2, 8), dtype=np.int64), ValueError, r"shape \(n, 2\*\*depth\) = \(n, 16\), got \(2, 8\)"),
        (np.zeros(16, dtype=np.int64), ValueError, "shape"),
        (np.zeros((2, 16), dtype=np.float32), TypeError, "integers"),
        (np.full((2, 16), 5), ValueError, r"symbols in \[0, 3\] or the mask id 4, got 5"),
        (np.full((2, 16), -1), ValueError, r"\[0, 3\].*got -1"),
        ([[0] * 16], TypeError, "numpy array or a torch tensor"),
    ],
)
def test_bad_leaves_are_rejected(leaves, error, match):
    with pytest.raises(error, match=match):
        next_leaf_distributions(BeliefPropagation(PAPER, 4, 0), leaves)


@pytest.mark.parametrize("batch_size,error", [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)])
def test_bad_batch_size_is_rejected(batch_size, error):
    with pytest.raises(error, match=r"`batch_size` must be an integer >= 1, got"):
        next_leaf_distributions(BeliefPropagation(PAPER, 4, 0), np.zeros((2, 16), dtype=np.int64),
                                batch_size=batch_size)


def test_bp_must_be_a_belief_propagation():
    with pytest.raises(TypeError, match="`bp` must be a hf_treelang BeliefPropagation, got Grammar"):
        next_leaf_distributions(PAPER, np.zeros((2, 16), dtype=np.int64))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_results_stay_on_the_device_of_the_leaves():
    leaves = data(PAPER, 6, 2, n=64, seed=11)
    bp = BeliefPropagation(PAPER, 6, 2)
    on_gpu = next_leaf_distributions(bp, torch.from_numpy(leaves).cuda())
    assert on_gpu.probabilities.device.type == "cuda" and on_gpu.log_likelihood.device.type == "cuda"
    on_cpu = next_leaf_distributions(bp, leaves)
    torch.testing.assert_close(on_gpu.probabilities.cpu(), on_cpu.probabilities, atol=1e-12, rtol=0)
    torch.testing.assert_close(on_gpu.log_likelihood.cpu(), on_cpu.log_likelihood, atol=1e-10, rtol=0)
