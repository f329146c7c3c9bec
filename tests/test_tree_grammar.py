"""Tree grammars beyond the paper's (issue 35): arity s, rules per level and the Random Hierarchy Model — the
grammar's definition and checks, the sampler's statistics against exact ones, and BP_k / the next-leaf oracle of
s-ary trees against brute-force enumeration."""

import itertools
import json

import numpy as np
import pytest
import torch

from enumeration import EnumeratedModel, enumerated_next_leaf, leaf_distribution
from hf_treelang import BeliefPropagation, Grammar, sample_trees
from hf_treelang.core import next_leaf_distributions
from hf_treelang.core import next_leaf as next_leaf_module
from hf_treelang.core.grammar import GRAMMAR_FILE_FORMAT, TREE_GRAMMAR_FILE_FORMAT


def dense_rules(q, s, seed, levels=None):
    """Random dense production tensors (q,)*(s+1) (gamma weights, so some rules are small), one or ``levels``."""
    rng = np.random.default_rng(seed)

    def one():
        T = rng.gamma(0.7, size=(q,) * (s + 1))
        return T / T.reshape(q, -1).sum(1).reshape((q,) + (1,) * s)

    return one() if levels is None else [one() for _ in range(levels)]


def per_level_grammar(q, s, depth, seed):
    rng = np.random.default_rng(seed + 100)
    return Grammar(root_prior=rng.dirichlet(np.ones(q)), level_rules=dense_rules(q, s, seed, depth))


def rule_sets(grammar, level):
    """{symbol: set of tuple indices with a non-zero rule} of one level."""
    q, s = grammar.num_symbols, grammar.arity
    table = grammar.rules(level).reshape(q, q**s)
    return {a: set(np.flatnonzero(table[a]).tolist()) for a in range(q)}


# ---------------------------------------------------------------- the grammar


@pytest.mark.parametrize("v,n,m,s,L,seed", [(8, 2, 4, 2, 3, 0), (4, 4, 16, 3, 2, 5), (3, 1, 1, 4, 2, 9), (5, 3, 5, 2, 2, 1)])
def test_random_hierarchy_satisfies_the_rhm_definition(v, n, m, s, L, seed):
    grammar = Grammar.random_hierarchy(num_symbols=v, num_classes=n, num_rules=m, arity=s, depth=L, grammar_seed=seed)
    assert (grammar.num_symbols, grammar.arity, grammar.depth) == (v, s, L)
    assert grammar.M is None and len(grammar.level_rules) == L
    np.testing.assert_array_equal(grammar.root_prior, [1 / n] * n + [0.0] * (v - n))  # n classes, uniform
    for level in range(L):
        sets = rule_sets(grammar, level)
        table = grammar.rules(level).reshape(v, v**s)
        for a in range(v):
            assert len(sets[a]) == m  # m distinct tuples per symbol
            np.testing.assert_array_equal(table[a, sorted(sets[a])], 1.0 / m)  # uniform over its rules
        assert sum(len(t) for t in sets.values()) == len(set().union(*sets.values())) == m * v  # no tuple shared


def reference_sample_rules(v, n, m, s, L, seed):
    """The RHM's reference code (pcsl-epfl/hierarchy-learning ``sample_rules``), as a dict of (symbols, m, s) arrays:
    Python's random.seed(seed), then random.sample over the list of s-tuples in itertools.product order."""
    import random

    state = random.getstate()
    try:
        random.seed(seed)
        tuples = list(itertools.product(range(v), repeat=s))
        rules = {0: np.array(random.sample(tuples, n * m)).reshape(n, m, s)}
        for level in range(1, L):
            rules[level] = np.array(random.sample(tuples, v * m)).reshape(v, m, s)
    finally:
        random.setstate(state)
    return rules


@pytest.mark.parametrize("v,n,m,s,L,seed", [(8, 2, 4, 2, 3, 0), (6, 6, 3, 3, 3, 42), (4, 3, 2, 2, 4, 7)])
def test_random_hierarchy_has_the_reference_codes_rules(v, n, m, s, L, seed):
    grammar = Grammar.random_hierarchy(num_symbols=v, num_classes=n, num_rules=m, arity=s, depth=L, grammar_seed=seed)
    reference = reference_sample_rules(v, n, m, s, L, seed)
    for level in range(L):
        for a, tuples in enumerate(reference[level]):
            expected = {int(np.ravel_multi_index(tuple(t), (v,) * s)) for t in tuples}
            assert rule_sets(grammar, level)[a] == expected, (level, a)


def test_random_hierarchy_is_deterministic_and_seeded():
    draw = lambda seed: Grammar.random_hierarchy(8, 2, 4, 2, 3, grammar_seed=seed)  # noqa: E731
    assert draw(3) == draw(3) and hash(draw(3)) == hash(draw(3))
    assert draw(3) != draw(4)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"arity": 1}, r"`arity` must be an integer in \[2, 16\], got 1"),
        ({"num_rules": 5}, r"`num_rules` must be an integer in \[1, 4\] with num_symbols = 4 and arity = 2 .*got 5"),
        ({"num_rules": 0}, r"`num_rules` must be an integer in \[1, 4\]"),
        ({"num_classes": 5}, r"`num_classes` must be an integer in \[1, 4\], got 5"),
        ({"num_symbols": 1}, r"`num_symbols` must be an integer in \[2, 256\], got 1"),
        ({"depth": 0}, r"`depth` must be an integer in \[1, 16\], got 0"),
        ({"arity": 3, "depth": 11}, r"`depth` must be an integer in \[1, 10\] with arity = 3 .*got 11"),
        ({"num_symbols": 256, "arity": 4},
         r"`num_symbols` must be at most 42 with arity = 4, got 256: a production tensor holds q\*\*\(s\+1\)"),
        ({"grammar_seed": -1}, r"`grammar_seed` must be an integer in \[0, 4294967295\], got -1"),
    ],
)
def test_random_hierarchy_refuses_impossible_parameters_in_one_line(kwargs, match):
    params = {"num_symbols": 4, "num_classes": 2, "num_rules": 2, "arity": 2, "depth": 2} | kwargs
    with pytest.raises((ValueError, TypeError), match=match) as error:
        Grammar.random_hierarchy(**params)
    assert "\n" not in str(error.value)


def test_level_rules_of_the_wrong_shape_are_refused():
    rules = dense_rules(3, 2, 0, levels=2)
    with pytest.raises(ValueError, match=r"level_rules\[1\] must have shape \(3, 3, 3\) like level_rules\[0\], got "
                                         r"\(3, 3, 3, 3\)"):
        Grammar(level_rules=[rules[0], dense_rules(3, 3, 1)])
    with pytest.raises(ValueError, match=r"level_rules\[0\] must have shape"):
        Grammar(level_rules=[np.full((3, 3), 1 / 3)])
    with pytest.raises(ValueError, match="exactly one of `M`"):
        Grammar(rules[0], level_rules=rules)
    with pytest.raises(ValueError, match="exactly one of `M`"):
        Grammar()


def test_level_rules_whose_rows_do_not_sum_to_one_are_refused():
    rules = dense_rules(3, 3, 0, levels=2)
    rules[1] = rules[1].copy()
    rules[1][2, 0, 0, 0] += 1e-6
    with pytest.raises(ValueError, match=r"every level_rules\[1\]\[a\] must sum to 1 .*sum\(level_rules\[1\]\[2\]\)"):
        Grammar(level_rules=rules)
    shared = dense_rules(3, 3, 1)
    shared[0, 1, 1, 1] += 1e-3
    with pytest.raises(ValueError, match=r"sum\(M\[0\]\)"):
        Grammar(shared)


def test_depth_must_match_rules_given_per_level():
    grammar = per_level_grammar(2, 3, 2, seed=0)
    with pytest.raises(ValueError, match=r"`depth` must be 2 for this grammar \(its rules are given per level\), got 3"):
        sample_trees(grammar, 4, depth=3)
    with pytest.raises(ValueError, match=r"`filter_level` must be an integer in \[0, 2\], got 3"):
        grammar.path_matrices(3)


def test_binary_only_views_fail_in_one_line_on_other_grammars():
    rhm = Grammar.random_hierarchy(4, 2, 2, 2, 2)
    with pytest.raises(ValueError, match="M_left needs a binary grammar with one shared tensor M .* rules per level"):
        rhm.M_left
    with pytest.raises(ValueError, match="M_right needs .* arity 3"):
        Grammar(dense_rules(2, 3, 0)).M_right


@pytest.mark.parametrize("s,per_level", [(3, False), (3, True), (2, True), (4, True)])
def test_path_matrices_are_products_of_the_child_marginals_along_the_path(s, per_level):
    q, k = 3, 2
    grammar = per_level_grammar(q, s, k, seed=s) if per_level else Grammar(dense_rules(q, s, s))
    paths = grammar.path_matrices(k)
    assert paths.shape == (q, q, s**k)
    for j in range(s**k):
        digits = [(j // s ** (k - 1 - t)) % s for t in range(k)]  # most significant first
        expected = np.eye(q)
        for level, d in enumerate(digits):
            P = grammar.rules(level)
            other = tuple(1 + e for e in range(s) if e != d)
            expected = expected @ P.sum(axis=other)  # (q, q): P(child d = b | parent a)
        np.testing.assert_allclose(paths[:, :, j], expected, atol=1e-14)


@pytest.mark.parametrize(
    "grammar",
    [Grammar.random_hierarchy(8, 3, 4, 2, 3, 11), Grammar.random_hierarchy(3, 2, 2, 3, 2, 1),
     Grammar(dense_rules(3, 3, 0)), per_level_grammar(2, 4, 2, 3)],
    ids=["rhm-s2", "rhm-s3", "shared-s3", "per-level-s4"],
)
def test_grammar_json_round_trips_bit_exactly(tmp_path, grammar):
    path = tmp_path / "grammar.json"
    grammar.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == TREE_GRAMMAR_FILE_FORMAT and data["arity"] == grammar.arity
    loaded = Grammar.load(path)
    assert loaded == grammar and loaded.params == grammar.params and loaded.depth == grammar.depth
    for level in range(grammar.depth or 1):
        assert loaded.rules(level).tobytes() == grammar.rules(level).tobytes()
    assert loaded.root_prior.tobytes() == grammar.root_prior.tobytes()


def test_paper_grammars_keep_the_first_file_format(tmp_path):
    grammar = Grammar.random(4, 1.0, 0)
    assert grammar.to_dict()["format"] == GRAMMAR_FILE_FORMAT and "arity" not in grammar.to_dict()
    assert list(grammar.to_dict()) == ["format", "num_symbols", "params", "root_prior", "M"]
    assert grammar.arity == 2 and grammar.depth is None and grammar.is_shared_binary


def test_a_description_whose_arity_disagrees_with_its_rules_is_refused():
    data = Grammar(dense_rules(2, 3, 0)).to_dict()
    data["arity"] = 2
    with pytest.raises(ValueError, match="arity is 2 but the rules have arity 3"):
        Grammar.from_dict(data)


# ---------------------------------------------------------------- the sampler


def _within_sampling_error(counts, probabilities, total, sigmas=5.0):
    """Every empirical frequency within ``sigmas`` binomial standard deviations (+ 1 count) of the exact one."""
    expected = probabilities * total
    spread = sigmas * np.sqrt(expected * (1 - probabilities)) + 1
    worst = np.max(np.abs(counts - expected) - spread)
    assert worst <= 0, f"a frequency is off by {worst:.1f} counts beyond {sigmas} sigmas"


SAMPLER_CASES = [
    ("shared-s3", Grammar(dense_rules(3, 3, 1)), 3),
    ("per-level-s3", per_level_grammar(3, 3, 3, seed=2), 3),
    ("rhm-s2", Grammar.random_hierarchy(4, 2, 3, 2, 3, 5), 3),
    ("per-level-s4", per_level_grammar(2, 4, 2, seed=4), 2),
]


@pytest.mark.parametrize("name,grammar,depth", SAMPLER_CASES, ids=[c[0] for c in SAMPLER_CASES])
def test_level_statistics_match_the_exact_ones(name, grammar, depth):
    """P(root = a, node j of level m = b) = p0[a] P_m[a, b, j] for every level the filtered model has."""
    q, s, n = grammar.num_symbols, grammar.arity, 20_000
    for k in range(depth + 1):
        trees = sample_trees(grammar, n, depth, filter_level=k, sampling_seed=k)
        assert trees.leaves.shape == (n, s**depth)
        for m in [0] + list(range(max(k, 1), depth + 1)):
            level = trees.levels[m]  # (n, s**m)
            assert level.shape == (n, s**m)
            exact = grammar.root_prior[:, None, None] * grammar.path_matrices(m)  # (q, q, s**m): [a, b, j]
            for j in range(s**m):
                counts = np.bincount(trees.roots * q + level[:, j], minlength=q * q)
                _within_sampling_error(counts, exact[:, :, j].ravel(), n)
        assert all(trees.levels[m] is None for m in range(1, k))


@pytest.mark.parametrize("name,grammar,depth", SAMPLER_CASES, ids=[c[0] for c in SAMPLER_CASES])
def test_child_tuples_follow_the_rules_of_their_level(name, grammar, depth):
    q, s, n = grammar.num_symbols, grammar.arity, 4_000
    trees = sample_trees(grammar, n, depth, filter_level=0, sampling_seed=9)
    for m in range(depth):
        parents = trees.levels[m].ravel()  # (n s**m,)
        children = trees.levels[m + 1].reshape(-1, s)  # (n s**m, s): node i's children are s i .. s i + s - 1
        tuples = np.ravel_multi_index(tuple(children.T), (q,) * s)
        counts = np.bincount(parents * q**s + tuples, minlength=q ** (s + 1)).reshape(q, q**s)
        table = grammar.rules(m).reshape(q, q**s)
        assert np.all(counts[table == 0] == 0), f"a rule of probability zero was drawn at level {m}"
        for a in range(q):
            if counts[a].sum():
                _within_sampling_error(counts[a], table[a], counts[a].sum())


def test_rhm_leaves_are_uniform_over_the_exact_sequences():
    """An RHM gives each of its n m**((s**L - 1)/(s - 1)) sequences probability 1 / that count (non-overlapping
    rules: a sequence has a single tree). Checked against enumeration and by a chi-square on 40 000 samples."""
    v, n, m, s, L = 3, 2, 2, 2, 2
    grammar = Grammar.random_hierarchy(num_symbols=v, num_classes=n, num_rules=m, arity=s, depth=L, grammar_seed=3)
    exact = EnumeratedModel(grammar, L, 0).sequence_probabilities()  # {(root, leaves): probability}
    count = n * m ** ((s**L - 1) // (s - 1))
    assert len(exact) == count == 16
    np.testing.assert_allclose(list(exact.values()), 1 / count, rtol=1e-12)
    assert len({key[1:] for key in exact}) == count  # the leaves determine the tree, the root included
    total = 40_000
    trees = sample_trees(grammar, total, L, sampling_seed=1)
    keys = [tuple(row) for row in np.column_stack([trees.roots, trees.leaves]).tolist()]
    index = {key: i for i, key in enumerate(exact)}
    assert all(key in index for key in keys), "a sequence outside the RHM's support was drawn"
    counts = np.bincount([index[key] for key in keys], minlength=count)
    chi2 = float(((counts - total / count) ** 2 / (total / count)).sum())
    assert chi2 < 45.0  # 15 degrees of freedom: P(chi2 > 45) ~ 7e-5


@pytest.mark.parametrize("k", [0, 1, 2])
def test_s_ary_samples_do_not_depend_on_the_chunking(k):
    grammar = per_level_grammar(3, 3, 2, seed=7)
    whole = sample_trees(grammar, 700, 2, k, sampling_seed=4)
    first = sample_trees(grammar, 300, 2, k, sampling_seed=4, chunk_size=7)
    rest = sample_trees(grammar, 400, 2, k, sampling_seed=4, start=300, chunk_size=64)
    np.testing.assert_array_equal(whole.leaves, np.concatenate([first.leaves, rest.leaves]))
    np.testing.assert_array_equal(whole.roots, np.concatenate([first.roots, rest.roots]))


# ---------------------------------------------------------------- BP_k and the next-leaf oracle on s-ary trees

TOLERANCE = 1e-12  # float64 against enumeration

# (name, grammar, depth, the filter levels small enough to enumerate: q**nodes <= 2e6)
BP_CASES = [
    ("shared-s3-q2", Grammar(dense_rules(2, 3, 0)), 2, (0, 1, 2)),
    ("per-level-s3-q2", per_level_grammar(2, 3, 2, seed=1), 2, (0, 1, 2)),
    ("per-level-s3-q3", per_level_grammar(3, 3, 2, seed=2), 2, (2,)),
    ("per-level-s2-q3", per_level_grammar(3, 2, 2, seed=3), 2, (0, 1, 2)),
    ("per-level-s2-q2-l3", per_level_grammar(2, 2, 3, seed=4), 3, (0, 1, 2, 3)),
    ("rhm-s2", Grammar.random_hierarchy(3, 2, 2, 2, 2, grammar_seed=5), 2, (0, 1, 2)),
    ("rhm-s3", Grammar.random_hierarchy(2, 2, 3, 3, 2, grammar_seed=6), 2, (0, 1, 2)),
    ("rhm-s2-sparse", Grammar.random_hierarchy(4, 3, 1, 2, 2, grammar_seed=7), 2, (0, 1, 2)),
    ("rhm-s3-sparse", Grammar.random_hierarchy(2, 2, 1, 3, 2, grammar_seed=8), 2, (0, 1, 2)),
    ("per-level-s4-q2", per_level_grammar(2, 4, 2, seed=7), 2, (2,)),
    ("per-level-s4-q3-l1", per_level_grammar(3, 4, 1, seed=8), 1, (0, 1)),
]
BP_IDS = [case[0] for case in BP_CASES]


def masked_evidence(grammar, depth, data_level, seed, num=6):
    """Sequences drawn at ``data_level`` with masks in all patterns: none, one, several, every leaf."""
    q, length = grammar.num_symbols, grammar.arity**depth
    leaves = sample_trees(grammar, n=num, depth=depth, filter_level=data_level, sampling_seed=seed).leaves.copy()
    rng = np.random.default_rng(seed)
    for row in range(1, num - 1):
        leaves[row, rng.choice(length, size=row % length or 1, replace=False)] = q
    leaves[num - 1] = q
    return leaves


def assert_matches_enumeration(result, exact, leaves, q, tolerance, where):
    for row, sequence in enumerate(leaves):
        with np.errstate(invalid="ignore"):  # the marginals of an impossible sequence are 0 / 0
            likelihood, marginals = exact.posterior(sequence, mask_id=q)
        if likelihood == 0:  # mismatched BP on a sparse grammar: evidence it cannot produce
            assert result.impossible[row] and result.log_likelihood[row].item() == -np.inf, where
            continue
        assert not result.impossible[row]
        assert result.log_likelihood[row].item() == pytest.approx(np.log(likelihood), abs=tolerance), where
        for m, table in marginals.items():
            np.testing.assert_allclose(result.levels[m][row].double().numpy(), table, atol=tolerance,
                                       err_msg=f"{where} row={row} m={m}")
        np.testing.assert_allclose(result.root[row].double().numpy(), marginals[0][0], atol=tolerance)


@pytest.mark.parametrize("name,grammar,depth,levels", BP_CASES, ids=BP_IDS)
def test_bp_marginals_and_likelihood_match_enumeration(name, grammar, depth, levels):
    q = grammar.num_symbols
    for k in levels:
        exact = EnumeratedModel(grammar, depth, k)
        bp = BeliefPropagation(grammar, depth, k, on_impossible="flag")
        for data_level in sorted({k, 0, depth}):  # matched and mismatched
            leaves = masked_evidence(grammar, depth, data_level, seed=10 * k + data_level)
            result = bp.infer(leaves)
            assert result.leaves.shape == (len(leaves), grammar.arity**depth, q)
            assert all(result.levels[m] is None for m in range(1, k))
            assert_matches_enumeration(result, exact, leaves, q, TOLERANCE, f"k={k} data level={data_level}")
            ids = bp._validate(leaves)
            log_domain = bp._infer(ids, True, log_domain=True)[0]  # the kernels of the rows at risk of underflow
            assert_matches_enumeration(log_domain, exact, leaves, q, TOLERANCE, f"log domain k={k}")


@pytest.mark.parametrize("name,grammar,depth,levels", BP_CASES[:2] + BP_CASES[6:7], ids=BP_IDS[:2] + BP_IDS[6:7])
def test_upward_messages_are_the_likelihoods_of_the_leaves_below(name, grammar, depth, levels):
    """upward[m][:, i, a] ∝ P_k(leaves under node i of level m | node = a), by enumeration."""
    q, s = grammar.num_symbols, grammar.arity
    for k in levels:
        exact = EnumeratedModel(grammar, depth, k)
        leaves = masked_evidence(grammar, depth, k, seed=k)
        upward = BeliefPropagation(grammar, depth, k, on_impossible="flag").upward_messages(leaves)
        for row, sequence in enumerate(leaves[:-1]):
            for m in [0] + list(range(max(k, 1), depth + 1)):
                for i, col in enumerate(exact.levels[m]):
                    below = np.arange(i * s ** (depth - m), (i + 1) * s ** (depth - m))
                    observed = below[sequence[below] != q]
                    consistent = np.all(exact.leaves[:, observed] == sequence[observed], axis=1)
                    node = exact.assignments[:, col]
                    joint = np.bincount(node, weights=exact.prob * consistent, minlength=q)
                    prior = np.bincount(node, weights=exact.prob, minlength=q)
                    likelihood = np.divide(joint, prior, out=np.zeros(q), where=prior > 0)
                    if likelihood.sum() == 0:
                        continue
                    expected = likelihood / likelihood.sum()
                    got = upward[m][row, i].numpy()
                    np.testing.assert_allclose(np.where(prior > 0, got, 0), expected, atol=TOLERANCE,
                                               err_msg=f"k={k} m={m} node={i}")


@pytest.mark.parametrize("name,grammar,depth,levels", BP_CASES, ids=BP_IDS)
def test_next_leaf_distributions_match_enumeration_and_the_chain_rule(name, grammar, depth, levels):
    q = grammar.num_symbols
    for k in levels:
        sequences, probabilities = leaf_distribution(grammar, depth, k)
        bp = BeliefPropagation(grammar, depth, k, on_impossible="flag")
        for data_level in sorted({k, 0, depth}):
            leaves = sample_trees(grammar, 4, depth, data_level, sampling_seed=k + 7 * data_level).leaves
            result = next_leaf_distributions(bp, leaves)
            log_domain = next_leaf_module._next_leaf(bp, bp._validate(leaves), log_domain=True)
            # the chain rule equals BP's log P_k(x)
            torch.testing.assert_close(result.log_likelihood, bp.log_likelihood(leaves), atol=1e-10, rtol=0)
            for row, sequence in enumerate(leaves):
                index = np.flatnonzero(np.all(sequences == sequence, axis=1))
                if probabilities[index].sum() == 0:  # mismatched BP on a sparse grammar: a sequence it cannot produce
                    assert result.impossible[row]
                    continue
                expected = enumerated_next_leaf(sequences, probabilities, sequence, q)
                where = f"k={k} data level={data_level} row={row}"
                np.testing.assert_allclose(result.probabilities[row].numpy(), expected, atol=TOLERANCE, err_msg=where)
                np.testing.assert_allclose(log_domain[0][row].numpy(), expected, atol=TOLERANCE, err_msg=where)
                assert result.log_likelihood[row].item() == pytest.approx(np.log(probabilities[index[0]]), abs=1e-12)


def test_chain_rule_with_masked_leaves_equals_the_likelihood_of_the_observed_leaves():
    grammar = Grammar.random_hierarchy(8, 4, 4, 3, 3, grammar_seed=2)
    for k in (0, 1, 3):
        leaves = sample_trees(grammar, 16, 3, k, sampling_seed=k).leaves.copy()
        leaves[np.random.default_rng(k).random(leaves.shape) < 0.3] = 8
        bp = BeliefPropagation(grammar, 3, k, on_impossible="flag")
        torch.testing.assert_close(next_leaf_distributions(bp, leaves).log_likelihood, bp.log_likelihood(leaves),
                                   atol=1e-10, rtol=0)


def test_products_below_float32s_range_go_to_the_log_domain_and_stay_exact():
    """Rules of 1e-30 (three children per product: 1e-90 and beyond) flush in float32's plain kernels; those rows run
    again in the log domain and match float64 enumeration."""
    q, s, depth = 2, 3, 2
    rules = []
    for level in range(depth):
        T = np.full((q,) * (s + 1), 1e-30)
        T[0, 0, 0, 0] = T[1, 1, 1, 1] = 1.0
        T[0, 1, 0, 1] = 0.3
        rules.append(T / T.reshape(q, -1).sum(1).reshape((q,) + (1,) * s))
    grammar = Grammar(level_rules=rules)
    leaves = np.array([[0, 1, 0, 1, 1, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0, 1, 1, 1], [0, 1, 2, 1, 1, 2, 0, 0, 1]])
    for k in (0, 1):
        exact = EnumeratedModel(grammar, depth, k)
        bp = BeliefPropagation(grammar, depth, k, dtype=torch.float32)
        assert bp._infer(bp._validate(leaves), True, log_domain=False)[1].all()  # every row marked fragile
        result = bp.infer(leaves)
        for row, sequence in enumerate(leaves):
            likelihood, marginals = exact.posterior(sequence, mask_id=q)
            assert result.log_likelihood[row].item() == pytest.approx(np.log(likelihood), rel=1e-5)
            for m, table in marginals.items():
                np.testing.assert_allclose(result.levels[m][row].double().numpy(), table, atol=1e-5, rtol=1e-4)


def test_bp_refuses_sequences_of_the_wrong_length_and_depths_of_other_rules():
    grammar = Grammar.random_hierarchy(4, 2, 2, 3, 2)
    bp = BeliefPropagation(grammar, 2)
    with pytest.raises(ValueError, match=r"leaves must have shape \(n, 3\*\*depth\) = \(n, 9\), got \(1, 8\)"):
        bp.infer(np.zeros((1, 8), dtype=np.int64))
    with pytest.raises(ValueError, match=r"`depth` must be 2 for this grammar"):
        BeliefPropagation(grammar, 3)
    with pytest.raises(ValueError, match=r"`depth` must be an integer in \[1, 10\] with arity = 3"):
        BeliefPropagation(Grammar(dense_rules(2, 3, 0)), 11)


def test_s_ary_node_slices_and_passes_do_not_change_the_results(monkeypatch):
    from hf_treelang.core import bp as bp_module

    grammar = per_level_grammar(3, 3, 3, seed=12)
    leaves = masked_evidence(grammar, 3, 1, seed=3, num=5)
    bp = BeliefPropagation(grammar, 3, 1)
    ids = bp._validate(leaves)
    whole = [bp.infer(leaves), bp._infer(ids, True, log_domain=True)[0], next_leaf_distributions(bp, leaves)]
    monkeypatch.setattr(bp_module, "WORKING_SET_BYTES", 1)
    monkeypatch.setattr(next_leaf_module, "WORKING_SET_BYTES", 1)
    sliced = [bp.infer(leaves), bp._infer(ids, True, log_domain=True)[0], next_leaf_distributions(bp, leaves)]
    for one, other in zip(sliced[:2], whole[:2]):
        for m in (0, 1, 2, 3):
            torch.testing.assert_close(one.levels[m], other.levels[m], atol=1e-15, rtol=0)
        torch.testing.assert_close(one.log_likelihood, other.log_likelihood, atol=1e-12, rtol=0)
    torch.testing.assert_close(sliced[2].probabilities, whole[2].probabilities, atol=1e-15, rtol=0)


def test_levels_with_few_rules_take_the_sparse_plain_kernels_and_the_paper_grammar_never():
    from hf_treelang.core import bp as bp_module

    def sparse_levels(grammar, depth, k=0):
        tables = BeliefPropagation(grammar, depth, k)._grammar_tensors(torch.device("cpu"), torch.float64)
        return [r is not None for r in tables.sparse_rules]

    assert sparse_levels(Grammar.random(4, 1.0, 0), 4) == [False] * 4  # R = q² = q**s / q: dense, as before
    assert sparse_levels(Grammar.random_hierarchy(8, 8, 4, 3, 3), 3) == [True] * 3  # R = 32 of q**s = 512
    assert sparse_levels(Grammar.random_hierarchy(8, 8, 4, 2, 3), 3, k=1) == [False] * 3  # R = 32 of 64: dense
    assert sparse_levels(Grammar.random_hierarchy(4, 3, 1, 2, 2), 2, k=1) == [False, True]  # levels k .. ℓ-1 only
    assert bp_module._SPARSE_RATIO == 4


def test_sparse_and_dense_plain_kernels_agree(monkeypatch):
    from hf_treelang.core import bp as bp_module

    grammar = Grammar.random_hierarchy(8, 4, 4, 3, 3, grammar_seed=1)
    leaves = masked_evidence(grammar, 3, 1, seed=2, num=8)
    run = lambda: [BeliefPropagation(grammar, 3, k, on_impossible="flag") for k in (0, 1)]  # noqa: E731
    sparse = [(bp.infer(leaves), next_leaf_distributions(bp, leaves)) for bp in run()]
    monkeypatch.setattr(bp_module, "_SPARSE_RATIO", 10**9)  # every level dense
    dense = [(bp.infer(leaves), next_leaf_distributions(bp, leaves)) for bp in run()]
    assert not any(bp._grammar_tensors(torch.device("cpu"), torch.float64).sparse_rules[2] for bp in run())
    for (bp_sparse, leaf_sparse), (bp_dense, leaf_dense) in zip(sparse, dense):
        torch.testing.assert_close(bp_sparse.log_likelihood, bp_dense.log_likelihood, atol=1e-12, rtol=0)
        for one, other in zip(bp_sparse.levels, bp_dense.levels):
            if one is not None:
                torch.testing.assert_close(one, other, atol=1e-13, rtol=0)
        torch.testing.assert_close(leaf_sparse.probabilities, leaf_dense.probabilities, atol=1e-13, rtol=0)


def test_the_task_oracle_runs_on_s_ary_trees():
    """The fixed evaluation masks and BP's task accuracies on sequences of s**ℓ leaves: the root of an RHM is
    certain at k = 0 (non-overlapping rules), and the masked leaf's prediction is BP's marginal there."""
    from hf_treelang.core import bp_accuracy, predicted_marginals, task_inputs
    from hf_treelang.core.masking import evaluation_positions

    grammar = Grammar.random_hierarchy(6, 3, 4, 3, 2, grammar_seed=4)
    trees = sample_trees(grammar, 64, 2, 0, sampling_seed=5)
    bp = BeliefPropagation(grammar, 2, 0)
    root = task_inputs("root", trees.leaves, trees.roots, mask_token_id=6, sampling_seed=5)
    assert bp_accuracy(bp, root) == 1.0
    mlm = task_inputs("mlm", trees.leaves, trees.roots, mask_token_id=6, sampling_seed=5)
    positions = evaluation_positions(5, 64, 2, arity=3)  # (64,) in [0, 9)
    np.testing.assert_array_equal(mlm.positions.numpy(), positions)
    assert positions.max() < 9 and len(set(positions.tolist())) > 3
    leaves = trees.leaves.copy()
    leaves[np.arange(64), positions] = 6
    expected = bp.leaf_marginals(leaves)[torch.arange(64), torch.from_numpy(positions)]  # (64, q)
    torch.testing.assert_close(predicted_marginals(bp, mlm.inputs, mlm.positions), expected)
