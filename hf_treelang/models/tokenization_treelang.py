"""The TreeLang tokenizer: symbols as readable tokens, for every architecture trained on TreeLang data.

A sequence is its symbols written as numbers separated by spaces, ``"3 0 1 [MASK] 2 ..."`` (decoding writes every
token after a space, so that a decoded continuation appends to its prompt); the ids follow
:class:`hf_treelang.core.vocabulary.Vocabulary` (symbol ``i`` is id ``i``, ``[MASK]`` is q, ``[PAD]`` is q + 1).
Every run folder holds one (``tokenizer_config.json``), so that ``AutoTokenizer.from_pretrained(RUN)`` and the
``pipeline("fill-mask" | "text-generation" | "text-classification", model=RUN)`` work offline on a run of any
architecture once ``hf_treelang`` is imported (it registers the class with ``AutoTokenizer``).

The tokenizer of a causal run (``causal=True``) starts every encoded sequence with the beginning-of-sequence
token, which is ``[MASK]`` (id q): next-leaf prediction reads ``[BOS, x_0 .. x_{L-2}]``, so the prompt ``"3 0"``
becomes ``[q, 3, 0]`` and ``generate`` continues it with leaves.

Example:
    >>> tokenizer = TreeLangTokenizer(num_symbols=4)
    >>> tokenizer("3 0 [MASK] 1")["input_ids"]
    [3, 0, 4, 1]
    >>> tokenizer.decode([3, 0, 4, 1])  # each token after a space, as GPT-2's tokenizer writes words
    ' 3 0 [MASK] 1'
    >>> TreeLangTokenizer(num_symbols=4, causal=True)("3 0")["input_ids"]
    [4, 3, 0]
"""

from __future__ import annotations

from transformers.tokenization_python import AddedToken, PreTrainedTokenizer

from hf_treelang.core.vocabulary import Vocabulary

MASK_TOKEN = "[MASK]"
PAD_TOKEN = "[PAD]"


class TreeLangTokenizer(PreTrainedTokenizer):
    """Symbols ``0 .. q-1`` as the tokens ``"0" .. "q-1"``, then ``[MASK]`` (q, also BOS) and ``[PAD]`` (q + 1).

    Args:
        num_symbols: q, the number of symbols of the data.
        causal: start every encoded sequence with the beginning-of-sequence token ``[MASK]`` (the tokenizer of a
            causal run; saved in ``tokenizer_config.json``).
    """

    vocab_files_names: dict = {}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, num_symbols: int = 4, causal: bool = False, **kwargs):
        self.vocabulary = Vocabulary(num_symbols)
        self.causal = bool(causal)
        for name in ("mask_token", "pad_token", "bos_token", "unk_token", "eos_token", "cls_token", "sep_token"):
            kwargs.pop(name, None)  # the special tokens follow from the vocabulary, whatever a saved file says
        mask = AddedToken(MASK_TOKEN, special=True, normalized=False, lstrip=True, rstrip=True)
        pad = AddedToken(PAD_TOKEN, special=True, normalized=False, lstrip=True, rstrip=True)
        self._added_tokens_decoder = {self.vocabulary.mask_token_id: mask, self.vocabulary.pad_token_id: pad}
        super().__init__(num_symbols=self.vocabulary.num_symbols, causal=self.causal,
                         mask_token=mask, pad_token=pad, bos_token=mask if self.causal else None, **kwargs)

    @property
    def vocab_size(self) -> int:
        """The symbols, q (the special tokens are counted by ``len(tokenizer)``, q + 2)."""
        return self.vocabulary.num_symbols

    def get_vocab(self) -> dict:
        vocab = {str(i): i for i in range(self.vocabulary.num_symbols)}
        vocab.update(self.added_tokens_encoder)
        return vocab

    def _tokenize(self, text: str, **kwargs) -> list:
        return text.split()

    def _convert_token_to_id(self, token: str) -> int:
        if token.isascii() and token.isdigit() and int(token) < self.vocabulary.num_symbols:  # not "٣" nor "３"
            return int(token)
        raise ValueError(f"token {token!r} is not a TreeLang token: the symbols are 0 .. "
                         f"{self.vocabulary.num_symbols - 1}, written as numbers, and the special tokens are "
                         f"{MASK_TOKEN} and {PAD_TOKEN}")

    def _convert_id_to_token(self, index: int) -> str:
        if self.vocabulary.is_symbol(index):
            return str(int(index))
        raise ValueError(f"id {index} is not a TreeLang id: the vocabulary has ids 0 .. {self.vocabulary.size - 1}")

    def convert_tokens_to_string(self, tokens: list) -> str:
        # each token after a space, as GPT-2's tokenizer writes words: a continuation decoded on its own (what
        # pipeline("text-generation") appends to its prompt) stays separated from the prompt's last symbol
        return "".join(" " + token for token in tokens)

    def build_inputs_with_special_tokens(self, token_ids_0: list, token_ids_1: list | None = None) -> list:
        if token_ids_1 is not None:
            raise ValueError("TreeLang sequences come one at a time: a pair of sequences has no meaning")
        return ([self.vocabulary.bos_token_id] if self.causal else []) + list(token_ids_0)

    def get_special_tokens_mask(self, token_ids_0: list, token_ids_1: list | None = None,
                                already_has_special_tokens: bool = False) -> list:
        if already_has_special_tokens:
            return super().get_special_tokens_mask(token_ids_0, token_ids_1, already_has_special_tokens=True)
        return ([1] if self.causal else []) + [0] * len(token_ids_0)

    def create_token_type_ids_from_sequences(self, token_ids_0: list, token_ids_1: list | None = None) -> list:
        return [0] * len(self.build_inputs_with_special_tokens(token_ids_0))

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple:
        return ()  # the vocabulary is q alone, saved in tokenizer_config.json


__all__ = ["TreeLangTokenizer"]
