"""The comparison functions (hf_treelang/core/metrics.py) and the offline `evaluate` metric (hf_treelang/evaluation.py)."""

import os

import evaluate
import numpy as np
import pytest
import torch
from scipy.special import rel_entr
from scipy.stats import rankdata, spearmanr

import hf_treelang
from hf_treelang.core.metrics import (
    average_ranks,
    compare_with_bp,
    kl_divergence,
    log_probabilities,
    spearman_correlation,
)
from hf_treelang.evaluation import TreeLangBPMetric

METRIC_PATH = os.path.join(os.path.dirname(hf_treelang.__file__), "evaluation.py")


def _random_distributions(rng, n, q):
    values = rng.gamma(0.5, size=(n, q))
    return values / values.sum(-1, keepdims=True)


def test_kl_matches_scipy_rel_entr_including_zero_reference_entries():
    rng = np.random.default_rng(0)
    reference = _random_distributions(rng, 50, 4)
    reference[:10, 0] = 0.0
    reference /= reference.sum(-1, keepdims=True)
    model = _random_distributions(rng, 50, 4)
    ours = kl_divergence(reference, torch.log(torch.as_tensor(model))).numpy()
    np.testing.assert_allclose(ours, rel_entr(reference, model).sum(-1), rtol=1e-12, atol=1e-14)


def test_kl_of_a_distribution_with_itself_is_zero():
    rng = np.random.default_rng(1)
    p = _random_distributions(rng, 20, 5)
    assert float(kl_divergence(p, torch.log(torch.as_tensor(p))).abs().max()) < 1e-14


def test_average_ranks_match_scipy_with_ties():
    values = torch.tensor([[0.1, 0.5, 0.5, 0.2], [1.0, 1.0, 1.0, 0.0], [0.3, 0.2, 0.1, 0.0]])
    expected = np.stack([rankdata(row) for row in values.numpy()])
    np.testing.assert_array_equal(average_ranks(values).numpy(), expected)


def test_spearman_matches_scipy_and_is_nan_for_constant_rows():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(30, 6)), rng.normal(size=(30, 6))
    expected = [spearmanr(x, y).statistic for x, y in zip(a, b)]
    np.testing.assert_allclose(spearman_correlation(a, b).numpy(), expected, rtol=1e-12)
    assert torch.isnan(spearman_correlation(np.ones((1, 4)), a[:1, :4]))[0]


def test_compare_with_bp_for_a_perfect_model():
    rng = np.random.default_rng(3)
    p = _random_distributions(rng, 40, 4)
    result = compare_with_bp(torch.log(torch.as_tensor(p)), p)
    assert result["kl"] == pytest.approx(0.0, abs=1e-14)
    assert result["argmax_agreement"] == 1.0
    assert result["spearman"] == pytest.approx(1.0, abs=1e-12)


def test_metric_loaded_from_local_path_equals_direct_instance_and_functions():
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(25, 4))
    marginals = _random_distributions(rng, 25, 4)
    loaded = evaluate.load(METRIC_PATH).compute(predictions=logits, references=marginals)
    direct = TreeLangBPMetric().compute(predictions=logits, references=marginals)
    expected = compare_with_bp(log_probabilities(logits), marginals)
    assert loaded == pytest.approx(direct, rel=1e-12)
    assert direct == pytest.approx(expected, rel=1e-12)


def test_metric_add_batch_accumulates_like_one_compute():
    rng = np.random.default_rng(5)
    logits, marginals = rng.normal(size=(12, 3)), _random_distributions(rng, 12, 3)
    metric = TreeLangBPMetric()
    metric.add_batch(predictions=logits[:5], references=marginals[:5])
    metric.add_batch(predictions=logits[5:], references=marginals[5:])
    assert metric.compute() == pytest.approx(TreeLangBPMetric().compute(predictions=logits, references=marginals))


def test_metric_with_labels_reports_model_and_bp_accuracy():
    predictions = [[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0]]
    marginals = [[0.8, 0.1, 0.1], [0.1, 0.1, 0.8], [0.1, 0.1, 0.8]]
    result = TreeLangBPMetric(config_name="with_labels").compute(
        predictions=predictions, references=marginals, labels=[0, 2, 2]
    )
    assert result["accuracy"] == pytest.approx(2 / 3)
    assert result["bp_accuracy"] == pytest.approx(1.0)
    assert result["argmax_agreement"] == pytest.approx(2 / 3)


def test_metric_accepts_probabilities_with_from_logits_false():
    p = [[0.7, 0.2, 0.1]]
    result = TreeLangBPMetric().compute(predictions=p, references=p, from_logits=False)
    assert result["kl"] == pytest.approx(0.0, abs=1e-15)


def test_metric_rejects_mismatched_shapes_and_unknown_config():
    with pytest.raises(ValueError, match="predictions and references"):
        TreeLangBPMetric().compute(predictions=[[1.0, 0.0]], references=[[0.3, 0.3, 0.4]])
    with pytest.raises(ValueError, match="config_name"):
        TreeLangBPMetric(config_name="nope")


# ---------------------------------------------------------------- issue 12: inputs are checked before any result


@pytest.mark.parametrize(
    "references,match",
    [
        ([[5.0, 5.0]], r"references must be probability distributions \(rows summing to 1 within 1e-05\), got row 0 "
                       r"summing to 10"),
        ([[0.5, 0.5], [1.2, -0.2]], r"references must be probability distributions \(entries >= 0\), got -0.2 at row 1"),
        ([[0.5, float("nan")]], "references must be finite, got nan at row 0, column 1"),
        ([[0.6, 0.3]], "row 0 summing to 0.9"),
    ],
)
def test_metric_rejects_references_that_are_not_distributions(references, match):
    predictions = np.zeros((len(references), 2))
    with pytest.raises(ValueError, match=match):
        TreeLangBPMetric().compute(predictions=predictions, references=references)


def test_metric_accepts_float32_marginals():
    marginals = torch.softmax(torch.randn(50, 7, generator=torch.Generator().manual_seed(0)), -1)  # float32 rows
    result = TreeLangBPMetric().compute(predictions=torch.log(marginals).double().numpy(), references=marginals.numpy())
    assert result["kl"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("labels,bad", [([0, 7], "7 at row 1"), ([-1, 0], "-1 at row 0"), ([0, 2], "2 at row 1")])
def test_metric_rejects_labels_out_of_range(labels, bad):
    with pytest.raises(ValueError, match=rf"labels must be symbols in \[0, 1\], got {bad}"):
        TreeLangBPMetric(config_name="with_labels").compute(
            predictions=[[1.0, 0.0], [0.0, 1.0]], references=[[0.9, 0.1], [0.2, 0.8]], labels=labels
        )


def test_metric_rejects_bad_predictions():
    with pytest.raises(ValueError, match="predictions must be finite, got inf"):
        TreeLangBPMetric().compute(predictions=[[float("inf"), 0.0]], references=[[0.5, 0.5]])
    with pytest.raises(ValueError, match="predictions must be probability distributions"):
        TreeLangBPMetric().compute(predictions=[[0.7, 0.7]], references=[[0.5, 0.5]], from_logits=False)
    with pytest.raises(TypeError, match="from_logits must be True or False"):
        TreeLangBPMetric().compute(predictions=[[0.7, 0.3]], references=[[0.5, 0.5]], from_logits="no")


@pytest.mark.parametrize("labels, message", [
    (np.array([0.0, 1.5]), "labels.*integers.*dtype"),
    (np.array([True, False]), "labels.*integers.*dtype"),
    (np.array([0, 3]), r"labels.*\[0, q=3\), got 3 in row 1"),
    (np.array([-1, 0]), r"got -1 in row 0"),
])
def test_accuracy_refuses_labels_that_are_not_symbols(labels, message):
    from hf_treelang.core.metrics import accuracy

    with pytest.raises((TypeError, ValueError), match=message):
        accuracy(np.zeros((2, 3)), labels)


def test_accuracy_refuses_nan_scores_and_takes_log_probabilities_of_zero():
    from hf_treelang.core.metrics import accuracy

    with pytest.raises(ValueError, match="scores.*NaN.*row 1"):
        accuracy(np.array([[0.0, 1.0, 0.0], [np.nan, 0.0, 0.0]]), np.array([1, 0]))
    assert accuracy(np.array([[-np.inf, 0.0, -np.inf], [0.0, -np.inf, -1.0]]), np.array([1, 2])) == 0.5
