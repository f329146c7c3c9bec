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
