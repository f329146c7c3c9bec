"""BP_k against brute-force enumeration on drawn cases (hypothesis): every grammar, level, mismatch and mask pattern.

A case draws q in {2, 3}, a depth ℓ in {1, 2, 3}, the level k that BP assumes, the level the data were drawn at (a
different one is the mismatched inference of the paper's Fig. 2), a grammar (the paper's ensemble with a drawn seed and
σ, or a dense random tensor), a uniform or a drawn root prior, sequences (sampled, or uniform symbols, which the sparse
grammars often make impossible) and a mask per leaf. BP's root and leaf marginals (and those of every level it has)
and log-likelihood must equal enumeration's within 1e-10; evidence of probability zero must be flagged.

Enumeration lists q**nodes assignments, so only cases with at most ``MAX_ASSIGNMENTS`` of them are drawn.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from enumeration import EnumeratedModel
from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.sampling import sample_trees

TOLERANCE = 1e-10
MAX_ASSIGNMENTS = 40_000
NUM_SEQUENCES = 3
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _num_nodes(depth: int, k: int) -> int:
    """Nodes of the filtered model of level k: the root and the levels max(k, 1) .. ℓ."""
    return 1 + sum(2**m for m in range(max(k, 1), depth + 1))


# (q, ℓ, k assumed by BP) whose enumeration is small enough, drawn uniformly
SHAPES = [(q, depth, k) for q in (2, 3) for depth in (1, 2, 3) for k in range(depth + 1)
          if q ** _num_nodes(depth, k) <= MAX_ASSIGNMENTS]


@st.composite
def grammars(draw, num_symbols: int) -> Grammar:
    """The paper's ensemble (drawn seed and σ), a dense tensor, or a sparse one (zero rules: impossible evidence)."""
    seed = draw(st.integers(0, 2**32 - 1))
    kind = draw(st.sampled_from(["paper", "dense", "sparse"]))
    if kind == "paper":
        sigma = draw(st.floats(0.0, 3.0, allow_nan=False))
        M = Grammar.random(num_symbols=num_symbols, sigma=sigma, grammar_seed=seed).M
    else:
        rng = np.random.default_rng(seed)
        M = rng.gamma(0.5, size=(num_symbols,) * 3)
        if kind == "sparse":
            keep = rng.random(M.shape) < 0.3
            keep[:, 0, 0] |= ~keep.any((1, 2))  # every parent keeps at least one child pair
            M = M * keep
        M = M / M.sum((1, 2), keepdims=True)
    if draw(st.booleans()):
        return Grammar(M)  # uniform root prior, as the paper
    prior = np.random.default_rng(seed + 1).dirichlet(np.full(num_symbols, 0.7))
    return Grammar(M, root_prior=prior / prior.sum())


@st.composite
def cases(draw) -> dict:
    q, depth, k_bp = draw(st.sampled_from(SHAPES))
    k_data = draw(st.integers(0, depth))  # k_data != k_bp: mismatched inference
    grammar = draw(grammars(q))
    length = 2**depth
    if draw(st.booleans()):
        seed = draw(st.integers(0, 2**63 - 1))
        leaves = sample_trees(grammar, NUM_SEQUENCES, depth, k_data, sampling_seed=seed).leaves.copy()
    else:
        symbols = draw(st.lists(st.integers(0, q - 1), min_size=NUM_SEQUENCES * length,
                                max_size=NUM_SEQUENCES * length))
        leaves = np.array(symbols, dtype=np.int64).reshape(NUM_SEQUENCES, length)
    masks = draw(st.lists(st.booleans(), min_size=NUM_SEQUENCES * length, max_size=NUM_SEQUENCES * length))
    leaves[np.array(masks).reshape(NUM_SEQUENCES, length)] = q  # the mask id is q
    return dict(grammar=grammar, depth=depth, k_bp=k_bp, k_data=k_data, leaves=leaves)


# Each parent copies itself (M[a, a, a] = 1): [0, 1, 0, 0] is impossible, [0, 0, 0, 0] and all-masked are not.
COPYING = Grammar(np.stack([np.pad([[1.0]], ((0, 1), (0, 1))), np.pad([[1.0]], ((1, 0), (1, 0)))]))
IMPOSSIBLE = dict(grammar=COPYING, depth=2, k_bp=0, k_data=0, leaves=np.array([[0, 1, 0, 0], [0, 0, 0, 0], [2, 2, 2, 2]]))


def _infer(case):
    bp = BeliefPropagation(case["grammar"], case["depth"], case["k_bp"], on_impossible="flag")
    return bp.infer(case["leaves"])


def _exact(case):
    q = case["grammar"].num_symbols
    enumerated = EnumeratedModel(case["grammar"], case["depth"], case["k_bp"])
    with np.errstate(divide="ignore", invalid="ignore"):  # an impossible sequence divides 0 by 0
        return [enumerated.posterior(sequence, mask_id=q) for sequence in case["leaves"]]


@SETTINGS
@given(cases())
@example(IMPOSSIBLE)
def test_root_marginals_equal_enumeration(case):
    result = _infer(case)
    for row, (likelihood, marginals) in enumerate(_exact(case)):
        if likelihood > 0:
            np.testing.assert_allclose(result.root[row].numpy(), marginals[0][0], rtol=0, atol=TOLERANCE)


@SETTINGS
@given(cases())
@example(IMPOSSIBLE)
def test_leaf_and_level_marginals_equal_enumeration(case):
    result = _infer(case)
    depth, k = case["depth"], case["k_bp"]
    assert all(result.levels[m] is None for m in range(1, k))
    for row, (likelihood, marginals) in enumerate(_exact(case)):
        if likelihood == 0:
            continue
        np.testing.assert_allclose(result.leaves[row].numpy(), marginals[depth], rtol=0, atol=TOLERANCE)
        for m, table in marginals.items():
            np.testing.assert_allclose(result.levels[m][row].numpy(), table, rtol=0, atol=TOLERANCE, err_msg=f"m={m}")


@SETTINGS
@given(cases())
@example(IMPOSSIBLE)
def test_log_likelihood_equals_enumeration_and_impossible_evidence_is_flagged(case):
    result = _infer(case)
    q = case["grammar"].num_symbols
    for row, (likelihood, _) in enumerate(_exact(case)):
        if likelihood > 0:
            assert not bool(result.impossible[row])
            assert result.log_likelihood[row].item() == pytest.approx(np.log(likelihood), rel=0, abs=TOLERANCE)
        else:
            assert bool(result.impossible[row]) and result.log_likelihood[row].item() == -np.inf
            np.testing.assert_allclose(result.root[row].numpy(), np.full(q, 1.0 / q), rtol=0, atol=TOLERANCE)
