"""``TreeLangBPMetric``: the network against BP marginals as an ``evaluate.Metric`` (offline).

    >>> metric = TreeLangBPMetric()
    >>> logits = [[2.0, 0.0, -1.0], [0.0, 1.5, 0.5]]        # the network's outputs for the predicted variable, (n, q)
    >>> bp_marginals = [[0.7, 0.2, 0.1], [0.1, 0.6, 0.3]]  # BP's marginals of the same variable, (n, q)
    >>> result = metric.compute(predictions=logits, references=bp_marginals)
    >>> sorted(result), result["argmax_agreement"], result["spearman"]
    (['argmax_agreement', 'kl', 'spearman'], 1.0, 1.0)

``evaluate.load`` takes this file as a local path (no Hub access)::

    metric = evaluate.load("hf_treelang/evaluation.py")

The references are BP's marginals of the predicted variable, from :func:`hf_treelang.core.oracle.predicted_marginals`;
the quantities are those of :mod:`hf_treelang.core.metrics`. With ``config_name="with_labels"`` the metric also takes
the true symbols (``labels``) and reports the accuracy of the network and of BP on the same inputs.

This module imports ``evaluate`` (seconds): ``import hf_treelang`` loads it only when ``TreeLangBPMetric`` is first used.
"""

from __future__ import annotations

import datasets
import evaluate
import numpy as np

from hf_treelang.citation import BIBTEX
from hf_treelang.core.metrics import accuracy, compare_with_bp, log_probabilities

_CITATION = BIBTEX

_DESCRIPTION = """\
Alignment of a network's predicted distributions with exact Belief-Propagation marginals: mean
D_KL(BP || model), argmax agreement, mean per-example Spearman rank correlation, and (config "with_labels") the
accuracy of the network and of BP against the true symbols.
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions: (n, q) the network's outputs, logits by default (see ``from_logits``); finite.
    references: (n, q) the BP marginals: non-negative rows summing to 1 within 1e-5.
    labels: (n,) the true symbols in [0, q), only with config_name="with_labels".
    from_logits: True (default) if ``predictions`` are logits, False if they are probabilities (then checked as
        ``references`` are).
    Inputs outside these ranges raise a ValueError naming the argument, the row and the value.
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
        if not isinstance(from_logits, (bool, np.bool_)):
            raise TypeError(f"from_logits must be True or False, got {from_logits!r}")
        predictions = _as_matrix("predictions", predictions)  # (n, q)
        references = _as_matrix("references", references)  # (n, q)
        if predictions.shape != references.shape:
            raise ValueError(
                f"predictions and references must both have shape (n, q), got {predictions.shape} and "
                f"{references.shape}"
            )
        if predictions.shape[0] == 0 or predictions.shape[1] < 2:
            raise ValueError(f"predictions must have n >= 1 rows of q >= 2 values, got shape {predictions.shape}")
        _check_distributions("references", references)  # BP's marginals
        if not from_logits:
            _check_distributions("predictions", predictions)
        if labels is not None:
            _check_labels(labels, predictions.shape)
        log_model = log_probabilities(predictions, from_logits=from_logits)
        result = compare_with_bp(log_model, references)
        if labels is not None:
            result["accuracy"] = accuracy(log_model, labels)
            result["bp_accuracy"] = accuracy(references, labels)
        return result


DISTRIBUTION_TOLERANCE = 1e-5  # |Σ_a p[a] - 1| allowed per row: float32 marginals and softmax outputs pass


def _as_matrix(name: str, values) -> np.ndarray:
    """``values`` as a finite float64 (n, q) array, or a ValueError naming ``name``."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be an (n, q) array of numbers: {error}") from None
    if array.ndim != 2:
        raise ValueError(f"{name} must have shape (n, q), got {array.shape}")
    bad = np.argwhere(~np.isfinite(array))
    if bad.size:
        row, column = bad[0]
        raise ValueError(f"{name} must be finite, got {float(array[row, column])} at row {row}, column {column}")
    return array


def _check_distributions(name: str, values: np.ndarray) -> None:
    """Every row of ``values`` (n, q) a probability distribution: entries in [0, 1], sums within the tolerance."""
    negative = np.argwhere(values < 0)
    if negative.size:
        row, column = negative[0]
        raise ValueError(
            f"{name} must be probability distributions (entries >= 0), got {float(values[row, column]):.6g} at row {row}, "
            f"column {column}"
        )
    sums = values.sum(1)  # (n,)
    off = np.flatnonzero(np.abs(sums - 1.0) > DISTRIBUTION_TOLERANCE)
    if off.size:
        row = off[0]
        raise ValueError(
            f"{name} must be probability distributions (rows summing to 1 within {DISTRIBUTION_TOLERANCE:g}), got "
            f"row {row} summing to {float(sums[row]):.6g}"
        )


def _check_labels(labels, shape: tuple) -> None:
    """``labels`` (n,) integer symbols in [0, q)."""
    n, q = shape
    array = np.asarray(labels)
    if array.shape != (n,):
        raise ValueError(f"labels must have shape (n,) = ({n},), got {array.shape}")
    if array.dtype.kind not in "iu":
        if array.dtype.kind != "f" or not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            raise ValueError(f"labels must be integer symbols in [0, {q - 1}], got dtype {array.dtype}")
    outside = np.flatnonzero((array < 0) | (array >= q))
    if outside.size:
        row = outside[0]
        raise ValueError(f"labels must be symbols in [0, {q - 1}], got {array[row].item()} at row {row}")
