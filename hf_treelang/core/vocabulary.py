"""The TreeLang vocabulary: which token id means what, for every model that reads TreeLang sequences.

Glossary: ``q`` symbols (``num_symbols``). The ids are laid out once, here, and used by the collators, the training
streams, the oracle's evaluation inputs, the tokenizer and the configs of every architecture, the TreeLang model's
included: ``config.vocab_size == len(tokenizer) == logits.shape[-1] ==`` :attr:`Vocabulary.size` for every
language-model head (a root classifier's logits are its classes):

    ids 0 .. q-1   the symbols (a leaf, or a root class of the root classifier)
    id  q          the mask token of masked-leaf prediction, which is also the beginning-of-sequence token of
                   next-leaf prediction (the causal input is ``[BOS, x_0 .. x_{L-2}]``)
    id  q + 1      the padding token (never in TreeLang data, whose sequences all have 2**ℓ leaves; architectures
                   need one to classify a batch, e.g. GPT-2's and Llama's sequence classifiers)

Why one id for mask and BOS: no task uses both, and the TreeLang model has always read id q as either. The padding
id is not a symbol, so that padding never touches a symbol's embedding (BERT's default ``pad_token_id = 0`` would make
symbol 0's embedding a zero row that never trains). A model predicts symbols only: the TreeLang heads score the
special ids far below every symbol (:mod:`hf_treelang.models.special_logits`), and the TreeLang embedding has no row
for the padding id (TreeLang sequences are never padded; an input holding it is refused), so its checkpoints and
training are those of the q + 1 ids the data hold.

Example:
    >>> vocabulary = Vocabulary(num_symbols=4)
    >>> vocabulary.mask_token_id, vocabulary.bos_token_id, vocabulary.pad_token_id, vocabulary.size
    (4, 4, 5, 6)
    >>> vocabulary.special_token_ids
    (4, 5)
"""

from __future__ import annotations

from dataclasses import dataclass

from .params import check_param


@dataclass(frozen=True)
class Vocabulary:
    """The token ids of data with ``num_symbols`` symbols (q): symbols ``0 .. q-1``, then the special tokens.

    Attributes:
        num_symbols: q, in the range of :data:`hf_treelang.core.params.LIMITS` ``["num_symbols"]``.
    """

    num_symbols: int

    def __post_init__(self):
        object.__setattr__(self, "num_symbols", check_param("num_symbols", self.num_symbols))

    @property
    def mask_token_id(self) -> int:
        """The masked leaf's id, q."""
        return self.num_symbols

    @property
    def bos_token_id(self) -> int:
        """The beginning-of-sequence id of next-leaf prediction: q, the mask id (see the module docstring)."""
        return self.num_symbols

    @property
    def pad_token_id(self) -> int:
        """The padding id, q + 1 (a tokenizer pads a batch with it; TreeLang sequences never need it)."""
        return self.num_symbols + 1

    @property
    def size(self) -> int:
        """The number of ids, every model's ``vocab_size``: q + 2 (the symbols, mask/BOS and padding)."""
        return self.num_symbols + 2

    @property
    def special_token_ids(self) -> tuple:
        """The ids that are not symbols, ``(q, q + 1)``: a model's probability on them is no symbol's."""
        return (self.mask_token_id, self.pad_token_id)

    def is_symbol(self, token_id: int) -> bool:
        """Whether ``token_id`` is one of the q symbols."""
        return 0 <= int(token_id) < self.num_symbols


__all__ = ["Vocabulary"]
