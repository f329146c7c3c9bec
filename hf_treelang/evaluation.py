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
