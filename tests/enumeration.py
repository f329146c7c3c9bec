"""Brute-force reference for the filtered tree model: enumerate every assignment of every node of the tree.

Used as the judge of the sampler and of BP on tiny trees (q**nodes assignments, kept below ~1e5).
"""


import numpy as np


class EnumeratedModel:
    """All assignments of the filtered model of level k, with their exact probabilities.

    Node order: the root, then the nodes of level k (if k > 0), then levels k+1 .. ℓ; ``levels[m]`` gives the
    columns of level m in ``assignments``. Any arity s (level m has s**m nodes) and rules shared or per level.
    """

    def __init__(self, grammar, depth, filter_level):
        q, l, k = grammar.num_symbols, depth, filter_level
        s = grammar.arity
        self.q, self.depth, self.filter_level = q, l, k
        present = [0] + list(range(max(k, 1), l + 1))
        self.levels, column = {}, 0
        for m in present:
            self.levels[m] = list(range(column, column + s**m))
            column += s**m
        num_nodes = column
        assert q**num_nodes <= 2_000_000, "enumeration too large"
        # every assignment, in itertools.product order (the last node fastest)
        self.assignments = np.indices((q,) * num_nodes, dtype=np.int64).reshape(num_nodes, -1).T
        x = self.assignments
        prob = grammar.root_prior[x[:, 0]].copy()
        paths = grammar.path_matrices(k)
        if k > 0:
            for j, col in enumerate(self.levels[k]):
                prob *= paths[x[:, 0], x[:, col], j]
        for m in range(k, l):
            rules = grammar.rules(m)
            for i, col in enumerate(self.levels[m]):
                children = [x[:, self.levels[m + 1][s * i + d]] for d in range(s)]
                prob *= rules[(x[:, col], *children)]
        self.prob = prob

    @property
    def leaves(self):
        return self.assignments[:, self.levels[self.depth]]

    def posterior(self, sequence, mask_id):
        """(likelihood P(observed leaves), {m: (2**m, q) marginals of level m}) for one sequence."""
        sequence = np.asarray(sequence)
        observed = sequence != mask_id
        consistent = np.all(self.leaves[:, observed] == sequence[observed], axis=1)
        weights = self.prob * consistent
        likelihood = weights.sum()
        marginals = {}
        for m, cols in self.levels.items():
            table = np.zeros((len(cols), self.q))
            for i, col in enumerate(cols):
                table[i] = np.bincount(self.assignments[:, col], weights=weights, minlength=self.q)
            marginals[m] = table / likelihood
        return likelihood, marginals

    def sequence_probabilities(self):
        """Exact P(root, leaves) as a dict {(root, leaves tuple): probability} over the support."""
        out = {}
        for row, p in zip(np.column_stack([self.assignments[:, 0], self.leaves]), self.prob):
            if p > 0:
                key = tuple(row.tolist())
                out[key] = out.get(key, 0.0) + p
        return out


def leaf_distribution(grammar, depth, k):
    """(sequences (S, s**ℓ), probabilities (S,)): the exact distribution of the leaf sequences of P_k, every tree
    enumerated and the trees of the same leaves summed."""
    exact = EnumeratedModel(grammar, depth, k)
    sequences, inverse = np.unique(exact.leaves, axis=0, return_inverse=True)
    return sequences, np.bincount(inverse.ravel(), weights=exact.prob, minlength=len(sequences))


def enumerated_next_leaf(sequences, probabilities, sequence, q):
    """(L, q) P(x_i = s | x_<i) of one sequence by summing the enumerated sequences that share its prefix."""
    rows = []
    for i in range(len(sequence)):
        consistent = np.all(sequences[:, :i] == sequence[:i], axis=1)  # (S,)
        weights = np.bincount(sequences[consistent, i], weights=probabilities[consistent], minlength=q)
        rows.append(weights / weights.sum())
    return np.array(rows)
