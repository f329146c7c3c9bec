"""BP-message probes (App. F): the upward messages against enumeration, and probes of them on a model built to carry
them exactly (KL ≈ 0) and on a random model (KL near the mean-message baseline)."""

import argparse
import json

import numpy as np
import pytest
import torch

from enumeration import EnumeratedModel
from hf_treelang import BeliefPropagation, Grammar, TreeLangConfig, TreeLangForMaskedLM, sample_trees
from hf_treelang.analysis import probing
from hf_treelang.cli import run_command

TOLERANCE = 1e-12
PAPER = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)
DEPTH, Q = 3, 4


def dense_grammar(q, seed):
    rng = np.random.default_rng(seed)
    M = rng.gamma(0.7, size=(q, q, q))
    return Grammar(M / M.sum((1, 2), keepdims=True), root_prior=rng.dirichlet(np.ones(q)))


CASES = [("paper-q4", PAPER, 2), ("dense-q3", dense_grammar(3, 0), 2), ("dense-q2", dense_grammar(2, 1), 3)]


def enumerated_upward(exact: EnumeratedModel, sequence, mask_id):
    """{m: (2**m, q)} P(observed leaves under node a | node a = s), normalised over s, by enumeration."""
    depth, q = exact.depth, exact.q
    out = {}
    for m, columns in exact.levels.items():
        table = np.zeros((len(columns), q))
        width = 1 << (depth - m)
        for a, column in enumerate(columns):
            under = np.arange(a * width, (a + 1) * width)
            observed = under[sequence[under] != mask_id]
            consistent = np.all(exact.leaves[:, observed] == sequence[observed], axis=1)
            prior = np.bincount(exact.assignments[:, column], weights=exact.prob, minlength=q)  # P(node a = s)
            joint = np.bincount(exact.assignments[:, column], weights=exact.prob * consistent, minlength=q)
            assert np.all(prior > 0), "the enumeration defines the message only where P(node a = s) > 0"
            likelihood = joint / prior
            table[a] = likelihood / likelihood.sum()
        out[m] = table
    return out


def sequences_with_masks(grammar, depth, seed, num=5):
    """Fully observed sequences, then one masked leaf, several, and every leaf masked."""
    q, length = grammar.num_symbols, 2**depth
    leaves = sample_trees(grammar, n=num, depth=depth, filter_level=0, sampling_seed=seed).leaves.copy()
    rng = np.random.default_rng(seed)
    leaves[num - 3, rng.choice(length, size=1)] = q
    leaves[num - 2, rng.choice(length, size=length // 2, replace=False)] = q
    leaves[num - 1] = q
    return leaves


@pytest.mark.parametrize("log_domain", [False, True], ids=["plain", "log-domain"])
@pytest.mark.parametrize("name,grammar,depth", CASES, ids=[c[0] for c in CASES])
def test_upward_messages_match_enumeration(name, grammar, depth, log_domain):
    q = grammar.num_symbols
    for k in range(depth + 1):
        exact = EnumeratedModel(grammar, depth, k)
        leaves = sequences_with_masks(grammar, depth, seed=k)
        bp = BeliefPropagation(grammar, depth, k)
        if log_domain:  # the kernels of the rows at risk of underflow, forced on every row
            upward = bp._infer(bp._validate(leaves), False, log_domain=True, keep_upward=True)[0].upward
        else:
            upward = bp.upward_messages(leaves)
        assert [m for m in range(depth + 1) if upward[m] is None] == list(range(1, k))
        for row, sequence in enumerate(leaves):
            for m, table in enumerated_upward(exact, sequence, mask_id=q).items():
                np.testing.assert_allclose(upward[m][row].numpy(), table, atol=TOLERANCE, err_msg=f"k={k} m={m}")


def test_upward_messages_do_not_depend_on_the_batch_or_the_downward_pass():
    leaves = sample_trees(PAPER, n=20, depth=4, filter_level=1, sampling_seed=3).leaves
    bp = BeliefPropagation(PAPER, 4, 1)
    whole = bp.upward_messages(leaves)
    in_passes = bp.infer(leaves, keep_upward=True, batch_size=3).upward
    for m in [0, 1, 2, 3, 4]:
        assert whole[m].shape == (20, 2**m, 4)
        torch.testing.assert_close(in_passes[m], whole[m], rtol=0, atol=0)
    assert bp.infer(leaves).upward is None  # only when asked for


def test_the_root_message_is_the_likelihood_of_the_leaves_given_the_root_without_the_prior():
    # P_k(root | leaves) ∝ p0 * upward[0]: the root's message times the prior is its posterior.
    grammar = dense_grammar(3, 0)
    leaves = sample_trees(grammar, n=8, depth=3, filter_level=2, sampling_seed=0).leaves
    result = BeliefPropagation(grammar, 3, 2).infer(leaves, downward=False, keep_upward=True)
    posterior = result.upward[0][:, 0] * torch.tensor(grammar.root_prior)
    torch.testing.assert_close(posterior / posterior.sum(-1, keepdim=True), result.root, rtol=0, atol=1e-12)


def test_message_targets_are_the_ancestor_and_its_sibling():
    depth, q = 3, 2
    upward = [torch.rand(1, 2**m, q, generator=torch.Generator().manual_seed(m)) for m in range(depth + 1)]
    targets = probing.message_targets(upward, [0, 1, 2], depth)  # (1, 8, 2, 3, q)
    assert targets.shape == (1, 8, 2, 3, q)
    leaf = 5  # binary 101: level-1 ancestor 1 (sibling 0), level-2 ancestor 2 (sibling 3)
    np.testing.assert_array_equal(targets[0, leaf, 0, 1], upward[1][0, 1].numpy())
    np.testing.assert_array_equal(targets[0, leaf, 1, 1], upward[1][0, 0].numpy())
    np.testing.assert_array_equal(targets[0, leaf, 0, 2], upward[2][0, 2].numpy())
    np.testing.assert_array_equal(targets[0, leaf, 1, 2], upward[2][0, 3].numpy())
    np.testing.assert_array_equal(targets[0, :, 0, 0], np.repeat(upward[0][0].numpy(), 8, 0))
    assert np.isnan(targets[0, :, 1, 0]).all()  # the root has no complementary subtree


@pytest.fixture(scope="module")
def random_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("message_probes") / "mlm"
    torch.manual_seed(0)
    config = TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH, filter_level=0, hidden_size=16,
                                      num_hidden_layers=1, intermediate_size=32, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0)
    TreeLangForMaskedLM(config).save_pretrained(folder)
    return folder


# Tiny linear probes, trained fast: 256 sequences of 8 leaves, 20 epochs at a large learning rate.
FAST = dict(num_train=256, num_validation=128, num_test=128, epochs=20, batch_size=32, learning_rate=1e-2,
            probe_hidden=0, seed=1, progress=False)


def test_a_model_carrying_the_exact_messages_is_probed_to_zero_kl(random_checkpoint, monkeypatch):
    # The stand-in of App. F's construction: layer 1 holds the log of every target message of the leaf (layer 0 is
    # noise). Data of filter level 1, so that the root's message is a genuine distribution, not a one-hot.
    levels, k_data = [0, 1, 2], 1

    def carrying(ckpt, leaves, *, batch_size=512):
        upward = BeliefPropagation(ckpt.grammar, ckpt.depth, k_data).upward_messages(leaves)
        targets = np.nan_to_num(probing.message_targets(upward, levels, ckpt.depth), nan=1.0 / Q)  # (n, L, 2, V, q)
        carried = torch.as_tensor(np.log(np.clip(targets, 1e-6, None)).reshape(*targets.shape[:2], -1))  # (n, L, d)
        noise = torch.randn(carried.shape, generator=torch.Generator().manual_seed(0), dtype=carried.dtype)
        return torch.stack([noise, carried], 1).float()  # (n, P, L, d)

    monkeypatch.setattr(probing, "hidden_states", carrying)
    result = probing.probe_messages(random_checkpoint, levels=levels, data_filter_level=k_data, **FAST)
    assert result.kl.shape == (2, 2, 3) and result.baseline_kl.shape == (2, 3)  # (targets, layers, levels)
    assert np.isnan(result.kl[1, :, 0]).all() and np.isnan(result.baseline_kl[1, 0])  # no complement at the root
    exists = np.isfinite(result.baseline_kl)  # (2, V)
    assert np.all(result.kl[:, 1][exists] < 0.02)  # the layer carrying the messages: KL ≈ 0
    assert np.all(result.baseline_kl[exists] > 0.2)
    assert np.all(result.kl[:, 0][exists] > 0.8 * result.baseline_kl[exists])  # the noise layer: about the mean


def test_a_random_model_is_probed_near_the_mean_message_through_the_command(random_checkpoint, tmp_path, capsys):
    argv = [str(random_checkpoint), "--out", str(tmp_path), "--target", "messages", "--levels", "0", "1", "2"]
    for name, value in FAST.items():
        if name not in ("progress",):
            argv += [f"--{name.replace('_', '-')}", str(value)]
    assert run_command("probe", argv) == 0
    assert "complement message:" in capsys.readouterr().out
    saved = json.loads((tmp_path / "probe_messages.json").read_text())
    assert saved["target"] == "messages" and saved["targets"] == ["ancestor", "complement"]
    kl = np.array(saved["kl"], dtype=float)  # (2, P, V), NaN (null) at the root's complement
    baseline = np.array(saved["baseline_kl"], dtype=float)  # (2, V)
    assert kl.shape == (2, 2, 3)
    for target in range(2):  # the root has no complement: level 0 of target 1 is absent
        exists = np.isfinite(baseline[target])  # (V,)
        # The leaf's own symbol tells something of its parent (level 2): a random encoder carries little more.
        assert np.all(kl[target][:, exists] > 0.5 * baseline[target, exists])
        assert np.all(kl[target][:, exists] > 0.3)
    assert (tmp_path / "probe_messages.png").stat().st_size > 1000


def test_an_unknown_probe_target_is_refused_naming_the_choices(random_checkpoint, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_command("probe", [str(random_checkpoint), "--out", str(tmp_path), "--target", "mesages"])
    assert "invalid choice: 'mesages'" in capsys.readouterr().err
    args = argparse.Namespace(target="mesages", threads=None)
    assert probing.run(args) == 2
    assert "target must be one of ('ancestors', 'messages'), got 'mesages'" in capsys.readouterr().err
