"""Configuration of the BP transformer: the encoder whose weights are built, not trained, to compute BP_0 exactly
(paper Sec. 4 and App. F; :mod:`modeling_bp_transformer` holds the construction and its derivation).

Glossary: `q` symbols (`num_symbols`), `l` depth (ℓ, sequences have `2**l` leaves), `d` the token size
`4 q + 2 q² + 2 ℓ` (:func:`token_size`). The vocabulary has `q + 2` ids, as every TreeLang tokenizer: the symbols
`0..q-1`, the mask token `q` and the padding token `q + 1` (never an input: sequences have `2**ℓ` leaves).

This file depends on `transformers` only: it is copied next to saved models so that they load with
`trust_remote_code=True` where `hf_treelang` is not installed.
"""

import math
import numbers

from transformers import PreTrainedConfig

MAX_NUM_SYMBOLS = 16  # the log-sum-exp updates hold q³ terms per token
MAX_DEPTH = 10  # 2**ℓ tokens, each attending to all
# The attention's inverse temperature β. From MIN_BETA up, the weight it leaks off the target leaves, at most
# 2**ℓ exp(-2β) <= 1e-23 at ℓ = MAX_DEPTH, moves no log-message (entries in [-1e4, 0]) by more than float64's
# resolution, so the model computes BP_0; up to MAX_BETA its scores, at most β ℓ, stay within float16's range.
MIN_BETA = 30.0
MAX_BETA = 1000.0


def token_size(num_symbols: int, depth: int) -> int:
    """d = 4q + 2q² + 2ℓ: the leaf's evidence, two slots of the message, the sibling's message, two slots of the
    q × q chain, and two gates per bit of the position (the layout is in :mod:`modeling_bp_transformer`)."""
    return 4 * num_symbols + 2 * num_symbols**2 + 2 * depth


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_construction(num_symbols, depth, beta) -> None:
    """Raise a ValueError naming the first of q, ℓ and β outside the construction's range (the one home of these
    ranges: the config, ``build_bp_transformer`` and ``hf-treelang construct`` check them here)."""
    if not (_is_int(num_symbols) and 2 <= num_symbols <= MAX_NUM_SYMBOLS):
        raise ValueError(f"`num_symbols` must be an integer in [2, {MAX_NUM_SYMBOLS}], got {num_symbols!r}")
    if not (_is_int(depth) and 1 <= depth <= MAX_DEPTH):
        raise ValueError(f"`depth` must be an integer in [1, {MAX_DEPTH}], got {depth!r}")
    if not (_is_real(beta) and MIN_BETA <= beta <= MAX_BETA):
        raise ValueError(f"`beta` must be a real number in [{MIN_BETA:g}, {MAX_BETA:g}] (from {MIN_BETA:g} the "
                         f"attention is exact to float64's resolution, so the model computes BP_0), got {beta!r}")


class BPTransformerConfig(PreTrainedConfig):
    r"""Configuration of the BP transformer of a binary grammar: its rules and root prior are the model's weights.

    Args:
        num_symbols (`int`, defaults to 4): q, in [2, 16].
        depth (`int`, defaults to 4): ℓ, in [1, 10]; the model has ℓ attention layers, one per level of the tree.
        rules (`list`, *optional*): the production tensor of each level, `rules[l][a][b][c] = P(left = b, right = c |
            parent = a)` for the parents of level l = 0 .. ℓ-1 (the root at level 0): ℓ nested (q, q, q) lists. For a
            grammar with one shared tensor M, ℓ copies of it.
        root_prior (`list`, *optional*): p0, the root's distribution (q,); uniform when not given.
        beta (`float`, defaults to 40.0): the attention's inverse temperature β, in [`MIN_BETA`, `MAX_BETA`]; the attention off
            the target leaves is at most `2**ℓ exp(-2 β)`, which leaves the model's output BP_0's to float64's
            resolution over that range.
        filter_level (`int`, defaults to 0): k of the BP it computes (only BP_0 is built).
        grammar_seed (`int`, *optional*), sigma (`float`, *optional*): the seed and σ the grammar was drawn with
            (`Grammar.random`), read by the analyses; `None` for a grammar that has none (given as an array, or a
            Random Hierarchy Model, whose parameters its `grammar.json` keeps).
    """

    model_type = "treelang_bp"

    def __init__(self, num_symbols: int = 4, depth: int = 4, rules: list | None = None,
                 root_prior: list | None = None, beta: float = 40.0, filter_level: int = 0,
                 grammar_seed: int | None = None, sigma: float | None = None, **kwargs):
        self.num_symbols = num_symbols
        self.depth = depth
        self.rules = rules
        self.root_prior = root_prior
        self.beta = beta
        self.filter_level = filter_level
        self.grammar_seed = grammar_seed
        self.sigma = sigma
        self.vocab_size = num_symbols + 2 if _is_int(num_symbols) else num_symbols  # symbols, [MASK], [PAD]
        self.mask_token_id = num_symbols if _is_int(num_symbols) else None
        self.num_hidden_layers = depth
        self.num_attention_heads = 1
        self.max_position_embeddings = 2**depth if _is_int(depth) and 0 < depth <= MAX_DEPTH else None
        self.arity = 2
        self.hidden_size = token_size(num_symbols, depth) if _is_int(num_symbols) and _is_int(depth) else None
        kwargs.setdefault("num_labels", num_symbols if _is_int(num_symbols) and num_symbols >= 2 else 2)
        kwargs.setdefault("is_decoder", False)
        kwargs.pop("vocab_size", None)
        kwargs.pop("num_hidden_layers", None)
        kwargs.pop("hidden_size", None)
        kwargs.pop("max_position_embeddings", None)
        kwargs.pop("num_attention_heads", None)
        kwargs.pop("mask_token_id", None)
        kwargs.pop("arity", None)
        super().__init__(**kwargs)
        self.validate()

    def validate(self) -> None:
        """Raise a ValueError naming the field, its value and the allowed range."""
        q, depth = self.num_symbols, self.depth
        check_construction(q, depth, self.beta)
        if self.grammar_seed is not None and not (_is_int(self.grammar_seed) and self.grammar_seed >= 0):
            raise ValueError(f"`grammar_seed` must be an integer >= 0 or None, got {self.grammar_seed!r}")
        if self.sigma is not None and not (_is_real(self.sigma) and self.sigma >= 0):
            raise ValueError(f"`sigma` must be a finite real number >= 0 or None, got {self.sigma!r}")
        if self.filter_level != 0:
            raise ValueError(f"`filter_level` must be 0: the construction computes BP_0 (the full hierarchy), got "
                             f"{self.filter_level!r}")
        if self.rules is not None:
            if len(self.rules) != depth:
                raise ValueError(f"`rules` must hold one (q, q, q) tensor per level, {depth}, got {len(self.rules)}")
            for level, tensor in enumerate(self.rules):
                for parent, table in enumerate(tensor):
                    total = sum(sum(row) for row in table)
                    if not math.isclose(total, 1.0, rel_tol=0, abs_tol=1e-6) or len(table) != q:
                        raise ValueError(f"`rules[{level}][{parent}]` must be a (q, q) table of probabilities summing "
                                         f"to 1, got a sum of {total!r}")
        if self.root_prior is not None and (len(self.root_prior) != q or not math.isclose(
                sum(self.root_prior), 1.0, rel_tol=0, abs_tol=1e-6) or min(self.root_prior) < 0):
            raise ValueError(f"`root_prior` must be q = {q} probabilities summing to 1, got {self.root_prior!r}")


__all__ = ["BPTransformerConfig", "MAX_BETA", "MAX_DEPTH", "MAX_NUM_SYMBOLS", "MIN_BETA", "check_construction",
           "token_size"]
