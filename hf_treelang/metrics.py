"""Comparison of a network's predicted distributions with the exact BP marginals (paper Sec. 3, App. D and E.4).

The functions work on numpy or torch arrays of shape ``(n, q)``: ``n`` predictions over ``q`` symbols (the root for
classification, the masked leaf for MLM). They are shared by :class:`hf_treelang.callbacks.BPKLCallback` and by
:class:`TreeLangBPMetric`, an ``evaluate.Metric`` that runs offline:

    >>> import evaluate
    >>> metric = evaluate.load("hf_treelang/metrics.py")            # a local path, no Hub access
    >>> metric = TreeLangBPMetric()                                  # or direct instantiation
    >>> metric.compute(predictions=logits, references=bp_marginals)  # {"kl": ..., "argmax_agreement": ..., ...}

With ``config_name="with_labels"`` the metric also takes the true symbols (``labels``) and reports the accuracy of
the network and of BP on the same inputs.

This file imports only numpy, torch, datasets and evaluate, so ``evaluate.load`` can copy it as a standalone script.
"""

from __future__ import annotations

import datasets
import evaluate
import numpy as np
import torch

_CITATION = """\
@inproceedings{garnier2025transformers,
  title={How transformers learn structured data: insights from hierarchical filtering},
  author={Garnier-Brun, J{\\'e}r{\\^o}me and M{\\'e}zard, Marc and Moscato, Emanuele and Saglietti, Luca},
  booktitle={International Conference on Machine Learning},
  year={2025}
}
"""

_DESCRIPTION = """\
Alignment of a network's predicted distributions with exact Belief-Propagation marginals: mean
D_KL(BP || model), argmax agreement, mean per-example Spearman rank correlation, and (config "with_labels") the
accuracy of the network and of BP against the true symbols.
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions: (n, q) the network's outputs, logits by default (see ``from_logits``).
    references: (n, q) the BP marginals (rows sum to 1).
    labels: (n,) the true symbols, only with config_name="with_labels".
    from_logits: True (default) if ``predictions`` are logits, False if they are probabilities.
Returns:
    kl: mean D_KL(references || softmax(predictions)) in nats.
    argmax_agreement: fraction of inputs where argmax(prediction) == argmax(BP marginal).
    spearman: mean Spearman rank correlation between prediction and BP marginal (rows with a constant vector,
        e.g. a one-hot BP marginal with q > 2 ties, are ranked with average ranks; rows whose ranks are constant
        are skipped).
    accuracy, bp_accuracy: (with_labels) accuracy of the network and of BP against ``labels``.
Example:
    >>> metric = TreeLangBPMetric()
    >>> metric.compute(predictions=[[2.0, 0.0]], references=[[0.9, 0.1]])["argmax_agreement"]
    1.0
"""


def _as_float64(values) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values) if not isinstance(values, torch.Tensor) else values).to(torch.float64)


def log_probabilities(predictions, *, from_logits: bool = True) -> torch.Tensor:
    """(n, q) natural-log probabilities from logits (``log_softmax``) or from probabilities (``log``)."""
    values = _as_float64(predictions)
    if from_logits:
        return torch.log_softmax(values, dim=-1)
    return torch.log(values)


def kl_divergence(reference, log_model: torch.Tensor) -> torch.Tensor:
    """Per-example D_KL(reference || model) = Σ_a p[a] (log p[a] - log m[a]) in nats, with 0 log 0 = 0.

    Args:
        reference: (n, q) probabilities (the BP marginals).
        log_model: (n, q) log-probabilities of the model.

    Returns:
        (n,) float64 tensor.
    """
    p = _as_float64(reference)
    log_m = _as_float64(log_model)
    log_p = torch.log(torch.where(p > 0, p, torch.ones_like(p)))
    terms = torch.where(p > 0, p * (log_p - log_m), torch.zeros_like(p))  # (n, q)
    return terms.sum(-1)


def average_ranks(values: torch.Tensor) -> torch.Tensor:
    """Ranks 1..q along the last axis, ties get their average rank (as scipy.stats.rankdata)."""
    values = _as_float64(values)
    less = (values.unsqueeze(-1) > values.unsqueeze(-2)).sum(-1)  # (n, q): #{j: v_j < v_i}
    equal = (values.unsqueeze(-1) == values.unsqueeze(-2)).sum(-1)  # (n, q): #{j: v_j == v_i}, i included
    return less.to(torch.float64) + (equal.to(torch.float64) + 1.0) / 2.0


def spearman_correlation(first, second) -> torch.Tensor:
    """Per-example Spearman rank correlation between two (n, q) arrays; NaN where either ranking is constant."""
    a = average_ranks(first)
    b = average_ranks(second)
    a = a - a.mean(-1, keepdim=True)
    b = b - b.mean(-1, keepdim=True)
    denominator = torch.sqrt((a * a).sum(-1) * (b * b).sum(-1))  # (n,)
    safe = torch.where(denominator > 0, denominator, torch.ones_like(denominator))
    return torch.where(denominator > 0, (a * b).sum(-1) / safe, torch.full_like(denominator, float("nan")))


def argmax_agreement(first, second) -> torch.Tensor:
    """Per-example 1.0 where argmax(first) == argmax(second), else 0.0 (float64, shape (n,))."""
    return (_as_float64(first).argmax(-1) == _as_float64(second).argmax(-1)).to(torch.float64)


def compare_with_bp(log_model: torch.Tensor, bp_marginals) -> dict:
    """Mean KL, argmax agreement and Spearman correlation of model log-probabilities (n, q) vs BP marginals (n, q)."""
    spearman = spearman_correlation(log_model, bp_marginals)
    valid = ~torch.isnan(spearman)
    return {
        "kl": float(kl_divergence(bp_marginals, log_model).mean()),
        "argmax_agreement": float(argmax_agreement(log_model, bp_marginals).mean()),
        "spearman": float(spearman[valid].mean()) if bool(valid.any()) else float("nan"),
    }


def accuracy(scores, labels) -> float:
    """Fraction of rows where argmax(scores) equals the label; scores (n, q), labels (n,)."""
    labels = torch.as_tensor(np.asarray(labels) if not isinstance(labels, torch.Tensor) else labels)
    return float((_as_float64(scores).argmax(-1) == labels.to(torch.int64)).to(torch.float64).mean())


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TreeLangBPMetric(evaluate.Metric):
    """KL divergence, argmax agreement, Spearman correlation and accuracy of a network against BP marginals.

    Configs: ``"default"`` (predictions, references) and ``"with_labels"`` (predictions, references, labels).
    """

    def _info(self) -> evaluate.MetricInfo:
        features = {
            "predictions": datasets.Sequence(datasets.Value("float64")),
            "references": datasets.Sequence(datasets.Value("float64")),
        }
        if self.config_name == "with_labels":
            features["labels"] = datasets.Value("int64")
        elif self.config_name != "default":
            raise ValueError(f"config_name must be 'default' or 'with_labels', got {self.config_name!r}")
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(features),
        )

    def _compute(self, predictions, references, labels=None, from_logits: bool = True) -> dict:
        predictions = np.asarray(predictions, dtype=np.float64)  # (n, q)
        references = np.asarray(references, dtype=np.float64)  # (n, q)
        if predictions.ndim != 2 or predictions.shape != references.shape:
            raise ValueError(
                f"predictions and references must both have shape (n, q), got {predictions.shape} and "
                f"{references.shape}"
            )
        log_model = log_probabilities(predictions, from_logits=from_logits)
        result = compare_with_bp(log_model, references)
        if labels is not None:
            result["accuracy"] = accuracy(log_model, labels)
            result["bp_accuracy"] = accuracy(references, labels)
        return result
