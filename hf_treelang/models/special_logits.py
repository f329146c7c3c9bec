"""The scores of the special ids: a model of the q symbols gives every id of its vocabulary a finite logit.

Glossary: ``q`` symbols. A TreeLang vocabulary has ``q + 2`` ids (:class:`hf_treelang.core.vocabulary.Vocabulary`):
the symbols ``0 .. q-1``, then ``[MASK]`` (q, also the beginning-of-sequence id) and ``[PAD]`` (q + 1). A masked or
next leaf is always a symbol, so a head that predicts one (the TreeLang encoder's, the BP transformer's) scores the
q symbols; :func:`vocabulary_logits` writes those scores over the whole vocabulary, so that ``logits.shape[-1] ==
config.vocab_size == len(tokenizer)`` and every consumer that indexes the logits by token id (transformers'
pipelines, ``generate``, ``LabelSmoother``) finds each id's score.

The special ids score :data:`SPECIAL_LOGIT_GAP` nats below the least likely symbol of their row, and never below
the dtype's most negative finite number: finite in float32, bfloat16 and float16 alike, ranked after every symbol
of finite logit, and with a probability at most ``exp(-SPECIAL_LOGIT_GAP)`` times the least likely symbol's, 0.0
in a float32 softmax. The softmax over the symbols is the head's own, to float rounding. Their scores are constants: no
gradient flows through them, so a loss over the whole vocabulary trains the symbols' logits only.

This file depends on torch only: it is copied next to saved checkpoints with the modelling code that imports it.

Example:
    >>> import torch
    >>> vocabulary_logits(torch.tensor([[2.0, -1.0, 0.5]])).tolist()
    [[2.0, -1.0, 0.5, -129.0, -129.0]]
"""

import torch

SPECIAL_LOGIT_GAP = 128.0  # nats between the least likely symbol and the special ids (exactly representable)
NUM_SPECIAL_TOKENS = 2  # [MASK] (q) and [PAD] (q + 1)


def vocabulary_logits(symbol_logits: torch.Tensor) -> torch.Tensor:
    """``(..., q)`` scores of the symbols as ``(..., q + 2)`` scores of the vocabulary: the symbols, then ``[MASK]``
    (q) and ``[PAD]`` (q + 1), both :data:`SPECIAL_LOGIT_GAP` below the row's least likely symbol (module docstring).
    """
    floor = symbol_logits.detach().amin(dim=-1, keepdim=True) - SPECIAL_LOGIT_GAP  # (..., 1)
    floor = floor.clamp_min(torch.finfo(floor.dtype).min)  # finite even where the least symbol is -inf or near it
    special = floor.expand(*symbol_logits.shape[:-1], NUM_SPECIAL_TOKENS)  # (..., 2)
    return torch.cat([symbol_logits, special], dim=-1)  # (..., q + 2)


__all__ = ["NUM_SPECIAL_TOKENS", "SPECIAL_LOGIT_GAP", "vocabulary_logits"]
