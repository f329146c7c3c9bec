import itertools
import warnings

import numpy as np
import pytest
import torch

from enumeration import EnumeratedModel
from hf_treelang import BeliefPropagation, Grammar, sample_trees
from hf_treelang.core import bp as bp_module
from hf_treelang.core.oracle import predicted_marginals, task_inputs

PAPER = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)
TOLERANCE = 1e-12


def dense_grammar(q, seed):
    rng = np.random.default_rng(seed)
    M = rng.gamma(0.7, size=(q, q, q))
    return Grammar(M / M.sum((1, 2), keepdims=True), root_prior=rng.dirichlet(np.ones(q)))


# (grammar, depth): q**nodes stays small enough to enumerate every tree.
CASES = [("paper-q4", PAPER, 2), ("dense-q3", dense_grammar(3, 0), 2), ("dense-q2", dense_grammar(2, 1), 3)]


def evidence(grammar, depth, data_level, seed, num=6):
    """Sequences drawn at ``data_level`` (so mismatched when BP assumes another k), with masks in all patterns:
    none, one, several, and every leaf masked."""
    q, length = grammar.num_symbols, 2**depth
    leaves = sample_trees(grammar, n=num, depth=depth, filter_level=data_level, sampling_seed=seed).leaves.copy()
    rng = np.random.default_rng(seed)
    for row in range(1, num - 1):
        leaves[row, rng.choice(length, size=row % length or 1, replace=False)] = q
    leaves[num - 1] = q
    return leaves


@pytest.mark.parametrize("name,grammar,depth", CASES, ids=[c[0] for c in CASES])
def test_marginals_and_likelihood_match_enumeration(name, grammar, depth):
    q = grammar.num_symbols
    for k, data_level in itertools.product(range(depth + 1), repeat=2):  # matched and mismatched
        exact = EnumeratedModel(grammar, depth, k)
        leaves = evidence(grammar, depth, data_level, seed=10 * k + data_level)
        result = BeliefPropagation(grammar, depth, k).infer(leaves)
        for row, sequence in enumerate(leaves):
            likelihood, marginals = exact.posterior(sequence, mask_id=q)
            assert result.log_likelihood[row].item() == pytest.approx(np.log(likelihood), abs=TOLERANCE)
            np.testing.assert_allclose(result.root[row].numpy(), marginals[0][0], atol=TOLERANCE)
            for m, table in marginals.items():
                np.testing.assert_allclose(result.levels[m][row].numpy(), table, atol=TOLERANCE, err_msg=f"k={k} m={m}")
            np.testing.assert_allclose(result.leaves[row].numpy(), marginals[depth], atol=TOLERANCE)
        assert all(result.levels[m] is None for m in range(1, k))
        assert not result.impossible.any()


@pytest.mark.parametrize("k", range(3))
def test_zero_rows_give_results_with_no_rows(k):
    grammar = Grammar.random(num_symbols=3, sigma=1.0, grammar_seed=0)
    result = BeliefPropagation(grammar, depth=2, filter_level=k).infer(np.zeros((0, 4), dtype=np.int64))
    assert result.root.shape == (0, 3) and result.log_likelihood.shape == (0,) and result.impossible.shape == (0,)
    assert result.leaves.shape == (0, 4, 3)


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_likelihoods_of_all_sequences_sum_to_one(k):
    grammar, depth = dense_grammar(2, 3), 3
    q = grammar.num_symbols
    every_sequence = np.array(list(itertools.product(range(q), repeat=2**depth)))
    log_likelihood = BeliefPropagation(grammar, depth, k).log_likelihood(every_sequence)
    assert torch.logsumexp(log_likelihood, 0).item() == pytest.approx(0.0, abs=TOLERANCE)


def test_masked_leaf_posterior_is_the_ratio_of_likelihoods():
    # P(x_i = s | rest) = P(rest, x_i = s) / P(rest): an identity between two independent BP outputs.
    depth, k = 4, 1
    bp = BeliefPropagation(PAPER, depth, k)
    leaves = sample_trees(PAPER, n=50, depth=depth, filter_level=0, sampling_seed=1).leaves.copy()
    leaves[:, 5] = 4
    posterior = bp.leaf_marginals(leaves)[:, 5]  # (n, q)
    filled = np.repeat(leaves[:, None, :], 4, 1)
    filled[:, :, 5] = np.arange(4)
    joint = bp.log_likelihood(filled.reshape(-1, 16)).reshape(50, 4)
    expected = torch.exp(joint - bp.log_likelihood(leaves)[:, None])
    torch.testing.assert_close(posterior, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("k", [0, 8, 16])
def test_depth_16_is_finite_and_exact(k):
    depth = 16
    sample = sample_trees(PAPER, n=3, depth=depth, filter_level=k, sampling_seed=0)
    leaves = sample.leaves.copy()
    leaves[:, 1000] = 4
    bp = BeliefPropagation(PAPER, depth, k)
    result = bp.infer(leaves)
    assert torch.isfinite(result.log_likelihood).all() and result.log_likelihood.max() < -1000
    assert all(torch.isfinite(lv).all() for lv in result.levels if lv is not None)
    if k == 0:
        np.testing.assert_array_equal(result.root.argmax(1).numpy(), sample.roots)
    filled = np.repeat(leaves[:1], 4, 0)
    filled[:, 1000] = np.arange(4)
    expected = torch.softmax(bp.log_likelihood(filled), 0)
    torch.testing.assert_close(result.leaves[0, 1000], expected, atol=1e-9, rtol=0)


def test_root_is_certain_on_unfiltered_data():
    sample = sample_trees(PAPER, n=2000, depth=4, filter_level=0, sampling_seed=4)
    root = BeliefPropagation(PAPER, 4, 0).root_marginals(sample.leaves)
    np.testing.assert_allclose(root.max(1).values.numpy(), 1.0, atol=1e-12)
    np.testing.assert_array_equal(root.argmax(1).numpy(), sample.roots)


def test_batched_equals_one_by_one_and_torch_equals_numpy():
    leaves = evidence(PAPER, 3, 0, seed=2, num=8)
    bp = BeliefPropagation(PAPER, 3, 1)
    batched = bp.infer(torch.from_numpy(leaves))
    for row in range(8):
        single = bp.infer(leaves[row : row + 1])
        assert torch.equal(single.root[0], batched.root[row])
        assert torch.equal(single.leaves[0], batched.leaves[row])


def test_float32_is_close_to_float64():
    leaves = evidence(PAPER, 4, 2, seed=3, num=20)
    exact = BeliefPropagation(PAPER, 4, 2).infer(leaves)
    single = BeliefPropagation(PAPER, 4, 2, dtype=torch.float32).infer(leaves)
    assert single.leaves.dtype == torch.float32
    torch.testing.assert_close(single.leaves.double(), exact.leaves, atol=1e-5, rtol=0)


def test_custom_mask_id():
    leaves = evidence(PAPER, 3, 0, seed=5)
    custom = np.where(leaves == 4, -1, leaves)
    a = BeliefPropagation(PAPER, 3, 0).infer(leaves)
    b = BeliefPropagation(PAPER, 3, 0, mask_id=-1).infer(custom)
    assert torch.equal(a.leaves, b.leaves)


def sparse_grammar():
    M = np.zeros((2, 2, 2))
    M[0, 0, 0] = 1.0  # 0 -> (0, 0)
    M[1, 1, 1] = 1.0  # 1 -> (1, 1)
    return Grammar(M)


def test_impossible_evidence_raises_by_default():
    bp = BeliefPropagation(sparse_grammar(), 2, 0)
    with pytest.raises(ValueError, match="probability zero"):
        bp.root_marginals(np.array([[0, 0, 0, 0], [0, 1, 0, 0]]))


def test_impossible_evidence_is_flagged_without_nan():
    bp = BeliefPropagation(sparse_grammar(), 2, 0, on_impossible="flag")
    result = bp.infer(np.array([[0, 0, 0, 0], [0, 1, 0, 0], [2, 2, 2, 2]]), downward=True)
    assert result.impossible.tolist() == [False, True, False]
    assert result.log_likelihood[1] == -np.inf and torch.isfinite(result.log_likelihood[[0, 2]]).all()
    for tensor in [result.root, result.leaves] + [lv for lv in result.levels if lv is not None]:
        assert torch.isfinite(tensor).all()
    torch.testing.assert_close(result.root[1], torch.full((2,), 0.5, dtype=torch.float64))
    torch.testing.assert_close(result.root[0], torch.tensor([1.0, 0.0], dtype=torch.float64))


@pytest.mark.parametrize(
    "leaves,error,match",
    [
        (np.zeros((2, 8), dtype=np.int64), ValueError, "shape"),
        (np.zeros(16, dtype=np.int64), ValueError, "shape"),
        (np.zeros((2, 2, 16), dtype=np.int64), ValueError, "shape"),
        (np.zeros((2, 16), dtype=np.float32), TypeError, "integers"),
        (np.full((2, 16), 5), ValueError, r"\[0, 3\]"),
        (np.full((2, 16), -1), ValueError, r"\[0, 3\]"),
        ([[0] * 16], TypeError, "numpy array or a torch tensor"),
    ],
)
def test_bad_leaves_are_rejected(leaves, error, match):
    with pytest.raises(error, match=match):
        BeliefPropagation(PAPER, 4, 0).infer(leaves)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"depth": 0}, "depth"),
        ({"filter_level": 5}, "filter_level"),
        ({"filter_level": -1}, "filter_level"),
        ({"mask_id": 2}, "mask_id"),
        ({"dtype": torch.int64}, "dtype"),
        ({"on_impossible": "ignore"}, "on_impossible"),
    ],
)
def test_bad_parameters_are_rejected(kwargs, match):
    params = {"depth": 4, "filter_level": 0} | kwargs
    with pytest.raises((ValueError, TypeError), match=match):
        BeliefPropagation(PAPER, **params)


# ---------------------------------------------------------------- range: rules below float32's smallest number

SIGMA_30 = Grammar.random(num_symbols=4, sigma=30.0, grammar_seed=0)  # smallest rule: M[0, 2, 0] = 4.0e-50


def test_float32_keeps_a_sequence_of_probability_4e_50_possible():
    # Depth 1: the sequence (2, 0) has probability p0[0] M[0, 2, 0] = 1e-50, below float32's 1.4e-45.
    expected = np.log(SIGMA_30.root_prior[0] * SIGMA_30.M[0, 2, 0])
    result = BeliefPropagation(SIGMA_30, 1, 0, dtype=torch.float32).infer(np.array([[2, 0]]))
    assert not result.impossible.any()
    assert result.log_likelihood.dtype == torch.float32
    assert result.log_likelihood[0].item() == pytest.approx(expected, rel=1e-6)
    np.testing.assert_array_equal(result.root[0].numpy(), [1, 0, 0, 0])


@pytest.mark.parametrize("grammar,depth", [(SIGMA_30, 2), (Grammar.random(2, 30.0, 1), 3)], ids=["q4", "q2"])
def test_float32_matches_enumeration_at_sigma_30(grammar, depth):
    # Uniform random symbols and masks: most sequences need rules far below float32's range.
    q = grammar.num_symbols
    leaves = np.random.default_rng(0).integers(0, q + 1, size=(40, 2**depth))
    for k in range(depth + 1):
        exact = EnumeratedModel(grammar, depth, k)
        result = BeliefPropagation(grammar, depth, k, dtype=torch.float32, on_impossible="flag").infer(leaves)
        for row, sequence in enumerate(leaves):
            likelihood, marginals = exact.posterior(sequence, mask_id=q)
            assert bool(result.impossible[row]) == (likelihood == 0), (k, row)
            if likelihood == 0:
                continue
            assert result.log_likelihood[row].item() == pytest.approx(np.log(likelihood), rel=1e-6)
            for m, table in marginals.items():
                np.testing.assert_allclose(result.levels[m][row].double().numpy(), table, atol=1e-5, err_msg=f"k={k}")


@pytest.mark.parametrize("name,grammar,depth", CASES + [("sigma-30", SIGMA_30, 2)], ids=[c[0] for c in CASES] + ["s30"])
def test_log_domain_kernels_match_enumeration(name, grammar, depth):
    # The kernels that the rows at risk of underflow are run with, forced on every row.
    q = grammar.num_symbols
    for k in range(depth + 1):
        exact = EnumeratedModel(grammar, depth, k)
        leaves = evidence(grammar, depth, 0, seed=k)
        bp = BeliefPropagation(grammar, depth, k)
        result, fragile = bp._infer(bp._validate(leaves), True, log_domain=True)
        assert not fragile.any()
        for row, sequence in enumerate(leaves):
            likelihood, marginals = exact.posterior(sequence, mask_id=q)
            assert result.log_likelihood[row].item() == pytest.approx(np.log(likelihood), abs=TOLERANCE)
            for m, table in marginals.items():
                np.testing.assert_allclose(result.levels[m][row].numpy(), table, atol=TOLERANCE, err_msg=f"k={k}")


def log_posterior(exact, grammar, sequence):
    """(log P(observed leaves), {m: marginals of level m}) by enumeration in the log domain: exact at any σ, where the
    products of EnumeratedModel underflow float64."""
    k, q, x = exact.filter_level, exact.q, exact.assignments
    with np.errstate(divide="ignore"):
        log_M, log_paths = np.log(grammar.M), np.log(grammar.path_matrices(k))
        log_p = np.log(grammar.root_prior)[x[:, 0]]
    if k > 0:
        for j, col in enumerate(exact.levels[k]):
            log_p = log_p + log_paths[x[:, 0], x[:, col], j]
    for m in range(k, exact.depth):
        for i, col in enumerate(exact.levels[m]):
            children = exact.levels[m + 1][2 * i : 2 * i + 2]
            log_p = log_p + log_M[x[:, col], x[:, children[0]], x[:, children[1]]]
    observed = sequence != q
    log_p = np.where(np.all(exact.leaves[:, observed] == sequence[observed], 1), log_p, -np.inf)
    log_likelihood = np.logaddexp.reduce(log_p)
    weights = np.exp(log_p - log_likelihood) if log_likelihood > -np.inf else np.zeros_like(log_p)
    marginals = {m: np.stack([np.bincount(x[:, col], weights=weights, minlength=q) for col in cols])
                 for m, cols in exact.levels.items()}
    return log_likelihood, marginals


@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-9), (torch.float32, 5e-5)], ids=["f64", "f32"])
@pytest.mark.parametrize("sigma", [100.0, 300.0])
def test_large_sigma_matches_log_domain_enumeration(sigma, dtype, tolerance):
    # Rules down to 1e-300: messages whose entries span more than float64's range, which the plain kernels flush.
    for grammar, depth in [(Grammar.random(2, sigma, 2), 3), (Grammar.random(4, sigma, 1), 2)]:
        q = grammar.num_symbols
        leaves = np.random.default_rng(2).integers(0, q + 1, size=(30, 2**depth))
        for k in range(depth):
            exact = EnumeratedModel(grammar, depth, k)
            result = BeliefPropagation(grammar, depth, k, dtype=dtype, on_impossible="flag").infer(leaves)
            for row, sequence in enumerate(leaves):
                log_likelihood, marginals = log_posterior(exact, grammar, sequence)
                assert bool(result.impossible[row]) == (log_likelihood == -np.inf), (k, row)
                if log_likelihood == -np.inf:
                    continue
                assert result.log_likelihood[row].item() == pytest.approx(log_likelihood, rel=tolerance)
                for m, table in marginals.items():
                    np.testing.assert_allclose(result.levels[m][row].double().numpy(), table, atol=tolerance,
                                               err_msg=f"q={q} k={k} row={row} m={m}")


def test_a_masked_leaf_whose_weight_the_plain_kernels_would_flush_is_counted():
    """σ = 300: a product of two message entries and a rule falls below float64's tiny while every normaliser stays
    large; without the smallest-entry guard the likelihood lost a factor 2 (the masked leaf's two symbols)."""
    grammar, depth, k = Grammar.random(2, 300.0, 19), 3, 1
    exact = EnumeratedModel(grammar, depth, k)
    leaves = np.concatenate([[[0, 2, 2, 0, 0, 2, 1, 0]],
                             np.random.default_rng(19).integers(0, 3, size=(60, 2**depth))])
    bp = BeliefPropagation(grammar, depth, k, on_impossible="flag")
    upward_only, both = bp.log_likelihood(leaves), bp.infer(leaves).log_likelihood  # (the upward pass alone failed)
    for row, sequence in enumerate(leaves):
        log_likelihood, _ = log_posterior(exact, grammar, sequence)
        for result in (upward_only, both):
            assert result[row].item() == pytest.approx(log_likelihood, rel=1e-12), row


# ---------------------------------------------------------------- memory: passes sized by the q² working set


@pytest.mark.parametrize("q,depth,dtype", [(4, 4, torch.float64), (64, 6, torch.float64), (128, 6, torch.float32),
                                           (128, 16, torch.float64)])
def test_default_batch_keeps_the_q_squared_working_set_under_the_budget(q, depth, dtype):
    M = np.full((q, q, q), 1.0 / q**2)  # the size is what matters here, not the rules
    bp = BeliefPropagation(Grammar(M), depth, 0, dtype=dtype)
    batch = bp.default_batch_size()
    itemsize = torch.finfo(dtype).bits // 8
    largest_level = 2 ** (depth - 1) * q * q * itemsize  # bytes of one q x q tensor per node of level ℓ-1
    assert batch == 1 or batch * largest_level <= bp_module.WORKING_SET_BYTES
    assert batch * 2**depth <= 1 << 17
    if q == 4:
        assert batch == 2**13  # small q: unchanged, 2**17 leaves per pass


def test_node_slices_and_passes_do_not_change_the_results(monkeypatch):
    leaves = evidence(PAPER, 4, 1, seed=7, num=9)
    bp = BeliefPropagation(PAPER, 4, 2)
    ids = bp._validate(leaves)
    whole = [bp.infer(leaves), bp._infer(ids, True, log_domain=True)[0]]
    monkeypatch.setattr(bp_module, "WORKING_SET_BYTES", 1)  # one node per slice, one sequence per pass
    assert bp.default_batch_size() == 1
    sliced = [bp.infer(leaves), bp._infer(ids, True, log_domain=True)[0]]
    for one, other in zip(sliced, whole):  # plain kernels, then log-domain kernels
        for m in [0, 2, 3, 4]:
            torch.testing.assert_close(one.levels[m], other.levels[m], atol=1e-15, rtol=0)
        torch.testing.assert_close(one.log_likelihood, other.log_likelihood, atol=1e-12, rtol=0)
    assert sliced[0].leaves is sliced[0].levels[4]


def test_negative_strides_and_read_only_arrays_are_accepted():
    leaves = evidence(PAPER, 3, 0, seed=8)
    expected = BeliefPropagation(PAPER, 3, 0).infer(leaves[:, ::-1].copy()).leaves
    reversed_view = leaves[:, ::-1]  # negative stride: torch.from_numpy refuses it
    torch.testing.assert_close(BeliefPropagation(PAPER, 3, 0).infer(reversed_view).leaves, expected, atol=0, rtol=0)
    read_only = leaves[:, ::-1].copy()
    read_only.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns on non-writable arrays
        BeliefPropagation(PAPER, 3, 0).infer(read_only)


def test_the_oracle_accepts_negative_strides():
    leaves = evidence(PAPER, 3, 0, seed=9)
    bp = BeliefPropagation(PAPER, 3, 0)
    positions = np.arange(len(leaves))[::-1] % 8
    expected = predicted_marginals(bp, leaves[:, ::-1].copy(), positions.copy())
    torch.testing.assert_close(predicted_marginals(bp, leaves[:, ::-1], positions), expected, atol=0, rtol=0)
    roots = np.arange(len(leaves))[::-1] % 4
    assert task_inputs("root", leaves[:, ::-1], roots, mask_token_id=4, sampling_seed=0).labels.tolist() == roots.tolist()
