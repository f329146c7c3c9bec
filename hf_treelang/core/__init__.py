"""The math core (numpy and torch only): the grammar, the sampler, exact BP_k, the masked-position streams, the oracle
of a task and the comparison metrics, with :mod:`~hf_treelang.core.params` as the one table of names and limits."""

from .attention_template import template_attention, template_similarity, uniform_similarity
from .bp import BeliefPropagation, BPResult
from .grammar import Grammar
from .masking import evaluation_positions, mask_single_leaf
from .next_leaf import NextLeafResult, next_leaf_distributions
from .oracle import TaskInputs, bp_accuracy, predicted_marginals, task_inputs
from .sampling import TreeSample, sample_trees, uniform_sequences

__all__ = [
    "BPResult",
    "BeliefPropagation",
    "Grammar",
    "NextLeafResult",
    "TaskInputs",
    "TreeSample",
    "bp_accuracy",
    "evaluation_positions",
    "mask_single_leaf",
    "next_leaf_distributions",
    "predicted_marginals",
    "sample_trees",
    "task_inputs",
    "template_attention",
    "template_similarity",
    "uniform_sequences",
    "uniform_similarity",
]
