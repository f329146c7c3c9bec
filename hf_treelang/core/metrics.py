"""Comparison of a network's predicted distributions with the exact BP marginals (paper Sec. 3, App. D and E.4).

The functions work on numpy or torch arrays of shape ``(n, q)``: ``n`` predictions over ``q`` symbols (the root for
classification, the masked leaf for MLM). One definition of each quantity, shared by the BP-KL training callback,
the ``evaluate`` metric (:mod:`hf_treelang.evaluation`) and the analyses:

* :func:`kl_divergence` — D_KL(BP || model) = Σ_a p[a] (log p[a] - log m[a]), in nats;
* :func:`argmax_agreement` — argmax(model) == argmax(BP);
* :func:`spearman_correlation` — Spearman rank correlation of the two q-vectors (ties get average ranks);
* :func:`accuracy` — argmax against the true symbol.

Dimension glossary: ``n`` predictions, ``q`` symbols.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .noise import mean_error


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

    Example:
        >>> log_model = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64))
        >>> kl_divergence([[1.0, 0.0], [0.5, 0.5]], log_model).tolist()  # log 2, then 0
        [0.6931471805599453, 0.0]
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
    """Mean KL, argmax agreement and Spearman correlation of model log-probabilities (n, q) vs BP marginals (n, q).

    Example:
        >>> compare_with_bp(torch.log(torch.tensor([[0.75, 0.25]], dtype=torch.float64)), [[0.75, 0.25]])
        {'kl': 0.0, 'argmax_agreement': 1.0, 'spearman': 1.0}
    """
    spearman = spearman_correlation(log_model, bp_marginals)
    valid = ~torch.isnan(spearman)
    return {
        "kl": float(kl_divergence(bp_marginals, log_model).mean()),
        "argmax_agreement": float(argmax_agreement(log_model, bp_marginals).mean()),
        "spearman": float(spearman[valid].mean()) if bool(valid.any()) else float("nan"),
    }


def accuracy(scores, labels) -> float:
    """Fraction of rows where argmax(scores) equals the label; scores (n, q), labels (n,).

    Raises a ValueError/TypeError, naming the row where one is to blame, for labels that are not integers in [0, q)
    (booleans and fractions included) or NaN scores (a NaN would count as an argmax of 0; -inf, a log-probability of
    0, is a score).
    """
    labels = torch.as_tensor(np.asarray(labels) if not isinstance(labels, torch.Tensor) else labels)
    scores = _as_float64(scores)  # (n, q)
    if labels.dtype == torch.bool or labels.dtype.is_floating_point or labels.dtype.is_complex:
        raise TypeError(f"`labels` must be integers in [0, q), got dtype {labels.dtype}")
    if scores.dim() != 2 or labels.shape != scores.shape[:1]:
        raise ValueError(f"`scores` must be (n, q) and `labels` (n,), got {tuple(scores.shape)} and "
                         f"{tuple(labels.shape)}")
    outside = ((labels < 0) | (labels >= scores.shape[1])).nonzero()
    if len(outside):
        row = int(outside[0])
        raise ValueError(f"`labels` must be integers in [0, q={scores.shape[1]}), got {int(labels[row])} in row {row}")
    broken = torch.isnan(scores).any(-1).nonzero()
    if len(broken):
        raise ValueError(f"`scores` must not be NaN, got {scores[int(broken[0])].tolist()} in row {int(broken[0])}")
    return float((scores.argmax(-1) == labels.to(torch.int64)).to(torch.float64).mean())


@dataclass
class DistributionComparison:
    """Row-wise comparison of reference distributions (BP) with model distributions, both (n, q).

    Attributes:
        kl: (n,) D_KL(reference ‖ model) in nats.
        argmax_match: (n,) bool, whether the two argmaxes agree.
        spearman: (n,) Spearman rank correlation of the two q-vectors (NaN where one is constant).
    """

    kl: np.ndarray
    argmax_match: np.ndarray
    spearman: np.ndarray

    def summary(self) -> dict:
        """The means, the KL's median, and the standard errors of the mean KL and the mean Spearman correlation
        (sample standard deviation / √n: the sampling noise of the means; NaN with fewer than 2 rows)."""
        spearman = self.spearman[np.isfinite(self.spearman)]
        return {
            "kl_mean": float(self.kl.mean()) if self.kl.size else math.nan,
            "kl_median": float(np.median(self.kl)) if self.kl.size else math.nan,
            "kl_standard_error": mean_error(self.kl),
            "argmax_match": float(self.argmax_match.mean()) if self.argmax_match.size else math.nan,
            "spearman_mean": float(spearman.mean()) if spearman.size else math.nan,
            "spearman_standard_error": mean_error(spearman),
        }


def compare_distributions(reference, model) -> DistributionComparison:
    """Per-example KL, argmax agreement and Spearman correlation of BP marginals vs model probabilities, (n, q) each."""
    p = np.asarray(reference, dtype=np.float64)
    r = np.asarray(model, dtype=np.float64)
    if p.shape != r.shape or p.ndim != 2:
        raise ValueError(f"reference and model must both have shape (n, q), got {p.shape} and {r.shape}")
    log_model = torch.log(torch.as_tensor(r).clamp_min(1e-300))  # (n, q)
    kl = kl_divergence(p, log_model).clamp_min(0.0)  # (n,), clipped at 0 against rounding
    return DistributionComparison(
        kl=kl.numpy(),
        argmax_match=argmax_agreement(p, r).numpy() > 0.5,
        spearman=spearman_correlation(p, r).numpy(),
    )
