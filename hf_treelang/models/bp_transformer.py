"""Build the BP transformer of a grammar (:mod:`hf_treelang.models.modeling_bp_transformer`: an encoder of ℓ layers
whose weights compute BP_0 exactly). :mod:`hf_treelang.analysis.construction` writes it as a folder the analyses read
like a trained run."""

from __future__ import annotations

from hf_treelang.core.grammar import Grammar

from .configuration_bp_transformer import BPTransformerConfig, check_construction
from .modeling_bp_transformer import BPTransformerForMaskedLM, BPTransformerForSequenceClassification

TASK_CLASSES = {"root": BPTransformerForSequenceClassification, "mlm": BPTransformerForMaskedLM}


def bp_transformer_config(grammar: Grammar, depth: int, filter_level: int = 0, beta: float = 40.0
                          ) -> BPTransformerConfig:
    """The config of the construction for a binary ``grammar`` at depth ℓ: its rules per level and root prior, and
    the σ and seed it was drawn with where its ``params`` hold them (``None`` where they do not: a grammar given as an
    array has neither, a Random Hierarchy Model no σ)."""
    check_construction(grammar.num_symbols, depth, beta)
    if grammar.arity != 2:
        raise ValueError(f"the BP transformer is built for binary trees (App. F); this grammar has arity "
                         f"{grammar.arity}")
    if filter_level != 0:
        raise ValueError(f"`filter_level` must be 0: the construction computes BP_0 (the full hierarchy), got "
                         f"{filter_level!r}")
    depth = grammar.check_depth(depth)
    rules = [grammar.rules(level).tolist() for level in range(depth)]
    seed, sigma = grammar.params.get("grammar_seed"), grammar.params.get("sigma")
    return BPTransformerConfig(num_symbols=grammar.num_symbols, depth=depth, rules=rules,
                               root_prior=[float(p) for p in grammar.root_prior], beta=beta, filter_level=0,
                               grammar_seed=None if seed is None else int(seed),
                               sigma=None if sigma is None else float(sigma))


def build_bp_transformer(grammar: Grammar, depth: int, filter_level: int = 0, task: str = "root",
                         beta: float = 40.0, dtype=None):
    """A transformers model of ℓ attention layers whose ``softmax(logits)`` is BP_0's root posterior (``task=
    "root"``, a ``BPTransformerForSequenceClassification``) or every leaf's marginal given the others (``"mlm"``, a
    ``BPTransformerForMaskedLM``), for the binary ``grammar`` at depth ℓ; ``input_ids`` are the symbols 0..q-1 and
    the mask id q. ``config.num_hidden_layers`` = ℓ. It saves and loads back like any model
    (``AutoModelForSequenceClassification`` / ``AutoModelForMaskedLM``; ``trust_remote_code=True`` where hf_treelang
    is absent). ``dtype``: the weights' dtype (default float32), written in it from the grammar's float64 numbers."""
    if task not in TASK_CLASSES:
        raise ValueError(f"`task` must be one of {tuple(TASK_CLASSES)}, got {task!r}")
    model = TASK_CLASSES[task](bp_transformer_config(grammar, depth, filter_level, beta))
    if dtype is not None:
        model = model.to(dtype)
        model.build()
    return model.eval()


__all__ = ["TASK_CLASSES", "bp_transformer_config", "build_bp_transformer"]
