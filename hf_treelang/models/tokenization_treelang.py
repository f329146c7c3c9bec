"""The TreeLang tokenizer: symbols as readable tokens, for every architecture trained on TreeLang data, built with the
``tokenizers`` library so that a run folder's tokenizer loads in stock transformers (and in ``tokenizers`` alone).

A sequence is its symbols written as numbers separated by spaces, ``"3 0 1 [MASK] 2 ..."``; the ids follow
:class:`hf_treelang.core.vocabulary.Vocabulary` (symbol ``i`` is id ``i``, ``[MASK]`` is q, ``[PAD]`` is q + 1):
``len(tokenizer)`` is q + 2, the ``vocab_size`` of every model's config.

The tokenizer is a ``tokenizers.Tokenizer`` (:func:`treelang_tokenizer_object`): a ``WordLevel`` model over the q
symbols and the two special tokens, a ``WhitespaceSplit`` pre-tokenizer (spaces only: the special tokens are matched
as added tokens, so ``"3 0[MASK]1"`` reads as ``3 0 [MASK] 1``), a decoder, and for a causal run a
``TemplateProcessing`` post-processor that puts the beginning-of-sequence token, ``[MASK]`` (id q), in front of
every sequence (next-leaf prediction reads ``[BOS, x_0 .. x_{L-2}]``, so the prompt ``"3 0"`` becomes ``[q, 3, 0]``
and ``generate`` continues it with leaves; a prompt holds leaves only, and the empty prompt ``""`` is BOS alone, from
which ``pipeline("text-generation")`` samples a whole sequence).

Decoding joins the tokens with spaces, so that one token decodes to itself (``"3"``: fill-mask's ``token_str``);
a causal run's tokenizer writes every token after a space instead (``" 3 0"``), so that a continuation decoded
alone appends to its prompt (``pipeline("text-generation")`` writes the prompt text, then the new tokens decoded).

Every run folder holds it as ``tokenizer.json`` with a ``tokenizer_config.json`` naming ``PreTrainedTokenizerFast``
(:func:`save_tokenizer`), so that ``AutoTokenizer.from_pretrained(RUN)`` and ``pipeline("fill-mask" |
"text-generation" | "text-classification", model=RUN)`` work offline without hf_treelang, in transformers 5 and 4.
A word that is not a symbol below q nor a special token has no id: :class:`TreeLangTokenizer` refuses it naming it;
a stock fast tokenizer read from the folder stops on it with the ``tokenizers`` library's own
``Exception: WordLevel error: Missing [UNK] token from the vocabulary`` (there is no unknown token, so that no word
silently becomes an id).

Example:
    >>> tokenizer = TreeLangTokenizer(num_symbols=4)
    >>> tokenizer("3 0 [MASK] 1")["input_ids"]
    [3, 0, 4, 1]
    >>> tokenizer.decode([3, 0, 4, 1]), tokenizer.decode([3])  # tokens joined by spaces
    ('3 0 [MASK] 1', '3')
    >>> causal = TreeLangTokenizer(num_symbols=4, causal=True)
    >>> causal("3 0")["input_ids"], causal.decode([1, 2], skip_special_tokens=True)  # a continuation of "3 0"
    ([4, 3, 0], ' 1 2')
"""

from __future__ import annotations

import json
import os

from tokenizers import AddedToken as RawAddedToken
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from hf_treelang.core.vocabulary import Vocabulary

MASK_TOKEN = "[MASK]"
PAD_TOKEN = "[PAD]"
STOCK_CLASS = "PreTrainedTokenizerFast"  # what tokenizer_config.json names: transformers 4 and 5 both read it


def treelang_tokenizer_object(num_symbols: int, causal: bool = False) -> Tokenizer:
    """The ``tokenizers.Tokenizer`` of q = ``num_symbols`` symbols (ids as :class:`Vocabulary`); ``causal``: every
    encoded sequence starts with ``[MASK]`` as the beginning-of-sequence token, and every decoded token follows a
    space (module docstring)."""
    vocabulary = Vocabulary(num_symbols)
    vocab = {str(i): i for i in range(vocabulary.num_symbols)}
    vocab.update({MASK_TOKEN: vocabulary.mask_token_id, PAD_TOKEN: vocabulary.pad_token_id})
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))  # no unknown token: a bad word is an error
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens([RawAddedToken(MASK_TOKEN, special=True, normalized=False),
                                  RawAddedToken(PAD_TOKEN, special=True, normalized=False)])
    if causal:
        tokenizer.decoder = decoders.Replace(Regex("^"), " ")  # each token after a space: continuations append
    else:
        tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # tokens joined by spaces (none has "##")
    if causal:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{MASK_TOKEN} $A", special_tokens=[(MASK_TOKEN, vocabulary.bos_token_id)])
    return tokenizer


class TreeLangTokenizer(PreTrainedTokenizerFast):
    """The fast tokenizer of q symbols (:func:`treelang_tokenizer_object`): symbols ``0 .. q-1`` as the tokens
    ``"0" .. "q-1"``, then ``[MASK]`` (q, also BOS) and ``[PAD]`` (q + 1).

    Args:
        num_symbols: q, the number of symbols of the data.
        causal: start every encoded sequence with the beginning-of-sequence token ``[MASK]`` (a causal run's).

    Encoding refuses, naming it, a word that is neither a symbol below q nor a special token. Saved with
    :func:`save_tokenizer` (what a run folder holds), it loads as a stock ``PreTrainedTokenizerFast``; a folder of
    the earlier, hand-written ``TreeLangTokenizer`` (``tokenizer_config.json`` naming it, with ``num_symbols`` and
    ``causal``) loads as this class once hf_treelang is imported.
    """

    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, num_symbols: int = 4, causal: bool = False, tokenizer_object: Tokenizer | None = None,
                 tokenizer_file: str | None = None, **kwargs):
        self.vocabulary = Vocabulary(num_symbols)
        self.causal = bool(causal)
        for name in ("mask_token", "pad_token", "bos_token", "unk_token", "eos_token", "cls_token", "sep_token",
                     "added_tokens_decoder", "backend"):
            kwargs.pop(name, None)  # the special tokens follow from the vocabulary, whatever a saved file says
        if tokenizer_object is None:
            tokenizer_object = (Tokenizer.from_file(tokenizer_file) if tokenizer_file and os.path.isfile(tokenizer_file)
                                else treelang_tokenizer_object(self.vocabulary.num_symbols, self.causal))
        super().__init__(tokenizer_object=tokenizer_object, num_symbols=self.vocabulary.num_symbols,
                         causal=self.causal, mask_token=MASK_TOKEN, pad_token=PAD_TOKEN,
                         bos_token=MASK_TOKEN if self.causal else None, **kwargs)

    def check_text(self, text: str) -> None:
        """Raise a ValueError naming the first word of ``text`` that is neither a symbol below q (written in ASCII
        digits) nor a special token."""
        vocabulary = self.vocabulary
        for word in str(text).replace(MASK_TOKEN, f" {MASK_TOKEN} ").replace(PAD_TOKEN, f" {PAD_TOKEN} ").split():
            if word in (MASK_TOKEN, PAD_TOKEN):
                continue
            if not (word.isascii() and word.isdigit() and int(word) < vocabulary.num_symbols):  # not "٣" nor "３"
                raise ValueError(f"token {word!r} is not a TreeLang token: the symbols are 0 .. "
                                 f"{vocabulary.num_symbols - 1}, written as numbers, and the special tokens are "
                                 f"{MASK_TOKEN} and {PAD_TOKEN}")

    def _encode_texts(self, texts) -> None:
        if isinstance(texts, str):
            self.check_text(texts)
        elif isinstance(texts, (list, tuple)):
            for text in texts:
                self._encode_texts(text)

    def __call__(self, text=None, *args, **kwargs):
        self._encode_texts(text)
        if kwargs.get("text_pair") is not None or (args and args[0] is not None):
            raise ValueError("TreeLang sequences come one at a time: a pair of sequences has no meaning")
        return super().__call__(text, *args, **kwargs)

    def encode(self, text, *args, **kwargs):
        self._encode_texts(text)
        return super().encode(text, *args, **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Save as a stock fast tokenizer (:func:`save_tokenizer`)."""
        files = super().save_pretrained(save_directory, *args, **kwargs)
        stock_tokenizer_config(save_directory)
        return files


def stock_tokenizer_config(folder) -> None:
    """Rewrite ``folder/tokenizer_config.json`` so that stock transformers (5 and 4) build a fast tokenizer from
    ``tokenizer.json``: the class ``PreTrainedTokenizerFast`` (transformers 5 writes ``TokenizersBackend``, which 4
    cannot read; this package's class name would need hf_treelang), no ``auto_map``."""
    path = os.path.join(os.fspath(folder), "tokenizer_config.json")
    with open(path) as handle:
        config = json.load(handle)
    config["tokenizer_class"] = STOCK_CLASS
    config.pop("auto_map", None)
    config.pop("backend", None)
    with open(path, "w") as handle:
        json.dump(config, handle, indent=2, sort_keys=True)
        handle.write("\n")


def save_tokenizer(folder, num_symbols: int, causal: bool = False) -> None:
    """Write the tokenizer of q = ``num_symbols`` symbols into ``folder``: ``tokenizer.json`` and a
    ``tokenizer_config.json`` that stock transformers reads (:func:`stock_tokenizer_config`)."""
    TreeLangTokenizer(num_symbols=num_symbols, causal=causal).save_pretrained(os.fspath(folder))


__all__ = ["MASK_TOKEN", "PAD_TOKEN", "TreeLangTokenizer", "save_tokenizer", "stock_tokenizer_config",
           "treelang_tokenizer_object"]
