"""Configuration of the TreeLang encoder (the transformer of Sec. 3.1 and App. C of the paper).

Glossary: `q` symbols (`num_symbols`), `l` depth (ℓ, sequences have `2**l` leaves, `s**l` for trees of arity `s`),
`k` filter level, `d` hidden size,
`d'` feed-forward size. The vocabulary has `q + 2` ids (`vocab_size`), as every TreeLang tokenizer: the symbols
`0..q-1`, the mask token `q` (for the causal language model, `is_causal=True`, the same id `q` is the
beginning-of-sequence token) and the padding token `q + 1`.

This file depends on `transformers` only: it is copied next to saved checkpoints so that they load with
`trust_remote_code=True` where `hf_treelang` is not installed.
"""

import math

from transformers import PreTrainedConfig

# The limits of hf_treelang.core.params.LIMITS, restated because this file must load with transformers alone;
# tests/test_layers.py keeps the two equal.
MAX_NUM_SYMBOLS = 256
MAX_DEPTH = 16
MAX_ARITY = 16
MAX_LEAVES = 2**MAX_DEPTH  # positions of one sequence, arity**depth, at any arity
MAX_SIGMA = 1000.0
MAX_GRAMMAR_SEED = 2**32 - 1
ACTIVATIONS = ("relu", "gelu")
POOLINGS = ("concat", "mean")
INITIALIZERS = ("torch", "torch_cloned_layers", "xavier")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def num_labels_message(num_labels, num_symbols: int) -> str:
    """Why `num_labels` cannot differ from q, and what to do instead (the config and the model both say it)."""
    if _is_int(num_labels) and 2 <= num_labels <= MAX_NUM_SYMBOLS:
        other_data = f"TreeLangConfig.from_data(num_symbols={num_labels}, ...)"
    else:
        other_data = "TreeLangConfig.from_data(num_symbols=...)"
    return (
        f"`num_labels` must equal the number of symbols q = {num_symbols}, got {num_labels!r}: the root classifier "
        f"predicts the root symbol, one of the q symbols, so TreeLang derives num_labels (and id2label) from "
        f"vocab_size = q + 2. For data with another number of symbols build the config with {other_data}; "
        f"for another set of classes, put your own head on the states of TreeLangModel."
    )


class TreeLangConfig(PreTrainedConfig):
    r"""Configuration of [`TreeLangModel`] and its heads. `TreeLangConfig()` is the paper's model (q=4, ℓ=4).

    Sizes flow from the data into the model: prefer [`TreeLangConfig.from_data`], which takes the number of symbols
    `q` and fills `vocab_size = q + 2`.

    Args:
        vocab_size (`int`, defaults to 6): number of token ids, `q + 2`: the symbols `0 .. q-1`, the mask token `q`
            and the padding token `q + 1` (the tokenizer's ids; the logits of the masked-LM and causal-LM heads cover
            them all); `q >= 2`. The earlier layout, `vocab_size = q + 1`, is told by its mark, `bos_token_id =
            vocab_size - 1` (which every config saved in it carries), and read as the same q symbols, whether the
            config is built from arguments, a dict or a file; without that mark (`bos_token_id` absent, None or q)
            `vocab_size` is q + 2.
        depth (`int`, defaults to 4): depth ℓ of the trees; sequences have exactly `arity**depth` tokens (`2**depth`).
        arity (`int`, defaults to 2): children s of every node of the data's trees (2 for the paper's grammars, any
            s >= 2 for a Random Hierarchy Model); sequences have `arity**depth` <= 65 536 tokens.
        hidden_size (`int`, defaults to 128): token dimension `d`.
        num_hidden_layers (`int`, defaults to 4): number of encoder blocks `n_L` (the paper takes `n_L = ℓ`).
        num_attention_heads (`int`, defaults to 1): attention heads; must divide `hidden_size`.
        intermediate_size (`int`, defaults to 2048): feed-forward size `d'`.
        hidden_act (`str`, defaults to `"relu"`): feed-forward activation, `"relu"` or `"gelu"`.
        hidden_dropout_prob (`float`, defaults to 0.1): dropout after the positional encoding, inside the
            feed-forward block and on both residual branches (as in `torch.nn.TransformerEncoderLayer`).
        attention_probs_dropout_prob (`float`, defaults to 0.1): dropout on the attention probabilities.
        layer_norm_eps (`float`, defaults to 1e-5): epsilon of the post-residual layer norms (any positive value).
        classifier_pooling (`str`, defaults to `"concat"`): root readout input; `"concat"` flattens the final tokens
            position-wise into a `d * 2**depth` vector (the paper), `"mean"` averages them into a `d` vector.
        classifier_hidden_size (`int`, defaults to 0): hidden units H of the root readout. 0 is the paper's linear
            readout (Sec. 3.2), `logits = W x + b`; H >= 1 is the two-layer head of the authors' fine-tuning code
            (`replace_decoder_with_classification_head`, H = 64 in Fig. 1f), `logits = W₂ relu(W₁ x + b₁) + b₂`.
        initializer (`str`, defaults to `"torch"`): weight initialisation. `"torch"` gives every parameter PyTorch's
            default (`nn.Embedding` N(0, 1); attention in-projection Xavier uniform, zero attention biases; other
            linear layers Kaiming uniform with a = √5 and uniform biases), each encoder block drawn on its own.
            `"torch_cloned_layers"` is what the paper's code builds: the same distributions, but
            `nn.TransformerEncoder(layer, n_L)` deep-copies one layer, so all n_L blocks start with identical
            weights; the parameters are drawn in the order of the authors' construction, so that from one torch seed
            the initial state is theirs (see [`TreeLangPreTrainedModel.initialize_weights`] for the parts that
            have no counterpart). `"xavier"` draws every matrix and the embedding Xavier uniform with zero biases
            (what the paper's App. D says).
        filter_level (`int`, defaults to 0): filter level k of the data the checkpoint was trained on (metadata).
        sigma (`float`, *optional*, defaults to 1.0): grammar parameter σ of the training data (metadata); `None`
            for a grammar that has no σ (a Random Hierarchy Model, a grammar given by its rules).
        grammar_seed (`int`, *optional*, defaults to 0): seed of the grammar of the training data (metadata); `None`
            for a grammar drawn from no seed (one given by its rules).
        num_classes (`int`, *optional*): n, the root's classes `0 .. n-1` when they are fewer than the q symbols (a
            Random Hierarchy Model's root takes n <= q of its symbols): the root classifier then has n outputs
            (`num_labels` = n). `None` (the default, the paper's grammars): every symbol is a class, `num_labels` = q.
        bos_token_id (`int`, defaults to q): the causal language model's beginning-of-sequence id, q (the mask
            token's id; no head uses both). Assignable like every config attribute; `validate()` (which
            `save_pretrained` runs) requires q.
        is_causal (`bool`, defaults to False): causal self-attention (position i attends to positions <= i), the
            attention of [`TreeLangForCausalLM`], whose config always has it True; the masked-LM and root heads
            always have it False. A bare [`TreeLangModel`] follows it: with True it is the causal model's encoder
            and reads its input layout (`[BOS, x_0, ..., x_{T-2}]`, BOS = q, 1 <= T <= 2**depth).

    `num_labels` is not a free parameter: the root classifier predicts the root symbol, so `num_labels` is q, or the
    data's `num_classes` n (`id2label` names the symbols `symbol_0 .. symbol_{num_labels-1}`). Passing or setting
    another value raises, also through `from_pretrained(..., num_labels=k)`; for data with k symbols build the config
    with `from_data(num_symbols=k)`.
    `problem_type` can only be `None` or `"single_label_classification"`.
    """

    model_type = "treelang"

    vocab_size: int = 6
    depth: int = 4
    arity: int = 2
    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 1
    intermediate_size: int = 2048
    hidden_act: str = "relu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-5
    classifier_pooling: str = "concat"
    classifier_hidden_size: int = 0
    initializer: str = "torch"
    filter_level: int = 0
    sigma: float | None = 1.0
    grammar_seed: int | None = 0
    num_classes: int | None = None
    is_causal: bool = False
    bos_token_id: int | None = None

    def __post_init__(self, **kwargs):
        # A derived size saved by `to_dict` of older files or passed by callers must agree with `depth`.
        max_positions = kwargs.pop("max_position_embeddings", None)
        num_labels = kwargs.pop("num_labels", None)
        if _is_int(self.vocab_size) and _is_int(self.bos_token_id) and self.bos_token_id == self.vocab_size - 1:
            self.vocab_size += 1  # the earlier layout, q + 1 ids with BOS = q: the same q symbols, [PAD] added
        # Checked before the base class runs: its `__post_init__` sets `num_labels`, which reads `vocab_size`.
        self._check()
        if num_labels is not None:
            self.num_labels = num_labels  # refused unless it is q, see the `num_labels` setter
        if max_positions is not None and max_positions != self.sequence_length:
            raise ValueError(
                f"max_position_embeddings must equal {self.arity}**depth = {self.sequence_length}, got {max_positions}"
            )
        if self.bos_token_id is None:
            self.bos_token_id = self.num_symbols
        super().__post_init__(**kwargs)
        if self.id2label is None or len(self.id2label) != self.num_labels:
            self._name_symbol_labels()

    def to_dict(self) -> dict:
        """transformers' dict, without `num_classes` when it is unset (the paper's configs keep their files)."""
        output = super().to_dict()
        if output.get("num_classes") is None:
            output.pop("num_classes", None)
        return output

    def validate(self):
        """transformers' validation (run by `save_pretrained`), then `validate_bos_token_id`."""
        super().validate()
        self.validate_bos_token_id()

    def validate_bos_token_id(self):
        """The causal language model's beginning-of-sequence id is q, the mask token's id (no head uses both)."""
        if self.bos_token_id != self.num_symbols:
            raise ValueError(f"`bos_token_id` must be q = {self.num_symbols} (the mask id, which the causal "
                             f"language model reads as the beginning of sequence), got {self.bos_token_id!r}")

    def _name_symbol_labels(self) -> None:
        # The root classifier predicts one of the q symbols (of the n classes, the symbols 0 .. n-1).
        self.id2label = {i: f"symbol_{i}" for i in range(self.num_labels)}
        self.label2id = {label: i for i, label in self.id2label.items()}

    @property
    def num_labels(self) -> int:
        """Number of classes of the root classifier: the number of symbols q, or the data's `num_classes` n (derived,
        not stored).

        The root head predicts the root symbol, one of the q symbols (of the n classes), so `num_labels` follows
        `vocab_size = q + 2` and `num_classes`. Setting it to that value is accepted (and names the labels
        `symbol_i`); any other value raises, rather than leaving `id2label` out of step with the head.
        """
        return self.num_symbols if getattr(self, "num_classes", None) is None else self.num_classes

    @num_labels.setter
    def num_labels(self, num_labels: int) -> None:
        if num_labels != self.num_labels:
            if getattr(self, "num_classes", None) is not None:
                raise ValueError(f"`num_labels` must equal num_classes = {self.num_classes}, the root classes of the "
                                 f"data (TreeLangConfig.from_data(num_classes=...)), got {num_labels!r}")
            raise ValueError(num_labels_message(num_labels, self.num_symbols))
        if self.id2label is None or len(self.id2label) != self.num_labels:
            self._name_symbol_labels()

    def _check(self):
        def positive_int(value):
            return isinstance(value, int) and not isinstance(value, bool) and value >= 1

        rules = [
            ("vocab_size", positive_int(self.vocab_size) and 4 <= self.vocab_size <= MAX_NUM_SYMBOLS + 2,
             f"an integer in [4, {MAX_NUM_SYMBOLS + 2}] (q + 2 with q in [2, {MAX_NUM_SYMBOLS}])"),
            ("depth", positive_int(self.depth) and self.depth <= MAX_DEPTH, f"an integer in [1, {MAX_DEPTH}]"),
            ("arity", _is_int(self.arity) and 2 <= self.arity <= MAX_ARITY, f"an integer in [2, {MAX_ARITY}]"),
            ("hidden_size", positive_int(self.hidden_size), "an integer >= 1"),
            ("num_hidden_layers", positive_int(self.num_hidden_layers), "an integer >= 1"),
            ("num_attention_heads", positive_int(self.num_attention_heads), "an integer >= 1"),
            ("intermediate_size", positive_int(self.intermediate_size), "an integer >= 1"),
            ("hidden_act", self.hidden_act in ACTIVATIONS, f"one of {ACTIVATIONS}"),
            ("layer_norm_eps", _is_real(self.layer_norm_eps) and self.layer_norm_eps > 0.0,
             "a positive finite real number"),
            ("hidden_dropout_prob", 0.0 <= self.hidden_dropout_prob < 1.0, "in [0, 1)"),
            ("attention_probs_dropout_prob", 0.0 <= self.attention_probs_dropout_prob < 1.0, "in [0, 1)"),
            ("classifier_pooling", self.classifier_pooling in POOLINGS, f"one of {POOLINGS}"),
            ("classifier_hidden_size", _is_int(self.classifier_hidden_size) and self.classifier_hidden_size >= 0,
             "an integer >= 0 (0: the linear readout; H >= 1: a hidden layer of H units)"),
            ("initializer", self.initializer in INITIALIZERS, f"one of {INITIALIZERS}"),
            ("problem_type", self.problem_type in (None, "single_label_classification"),
             'None or "single_label_classification" (the root head is a q-way classifier)'),
            ("filter_level", isinstance(self.filter_level, int) and 0 <= self.filter_level <= self.depth,
             f"an integer in [0, {self.depth}] (depth)"),
            ("sigma", self.sigma is None or (_is_real(self.sigma) and 0.0 <= self.sigma <= MAX_SIGMA),
             f"a real number in [0, {MAX_SIGMA:g}]"),  # or None: a grammar without σ
            ("grammar_seed", self.grammar_seed is None or (_is_int(self.grammar_seed)
                                                           and 0 <= self.grammar_seed <= MAX_GRAMMAR_SEED),
             f"an integer in [0, {MAX_GRAMMAR_SEED}]"),  # or None: a grammar drawn from no seed
            ("num_classes", self.num_classes is None or (_is_int(self.num_classes)
                                                         and 1 <= self.num_classes <= self.num_symbols),
             f"None (every symbol is a class) or an integer in [1, {self.num_symbols}] (q)"),
            ("is_causal", isinstance(self.is_causal, bool),
             "True (causal attention, the causal language model) or False (every leaf attends to every leaf)"),
        ]
        for name, ok, allowed in rules:
            if not ok:
                raise ValueError(f"`{name}` must be {allowed}, got {getattr(self, name)!r}")
            if name == "arity" and self.arity**self.depth > MAX_LEAVES:  # the positions a sequence needs
                largest = max(d for d in range(1, MAX_DEPTH + 1) if self.arity**d <= MAX_LEAVES)
                raise ValueError(
                    f"`depth` must be an integer in [1, {largest}] with arity = {self.arity}: sequences of "
                    f"arity**depth = {self.arity**self.depth} tokens exceed the {MAX_LEAVES} positions the model holds, "
                    f"got {self.depth}"
                )
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads})"
            )

    @classmethod
    def from_data(
        cls,
        num_symbols: int = 4,
        depth: int = 4,
        filter_level: int = 0,
        sigma: float | None = 1.0,
        grammar_seed: int | None = 0,
        arity: int = 2,
        num_classes: int | None = None,
        **model_kwargs,
    ) -> "TreeLangConfig":
        """Config for data with `num_symbols` symbols (q) on trees of depth ℓ and arity s (`arity**depth` tokens),
        filter level k, grammar (σ, seed; None for a grammar without them), and root classes (`num_classes` n <= q,
        None: all q symbols).

        `model_kwargs` set the architecture (e.g. `hidden_size=32, num_hidden_layers=2`).
        """
        if isinstance(num_symbols, bool) or not isinstance(num_symbols, int) or not 2 <= num_symbols <= MAX_NUM_SYMBOLS:
            raise ValueError(f"`num_symbols` must be an integer in [2, {MAX_NUM_SYMBOLS}], got {num_symbols!r}")
        return cls(
            vocab_size=num_symbols + 2,
            depth=depth,
            arity=arity,
            num_classes=num_classes,
            filter_level=filter_level,
            sigma=sigma,
            grammar_seed=grammar_seed,
            **model_kwargs,
        )

    @property
    def num_symbols(self) -> int:
        """Number of symbols q (the vocabulary without the mask and padding tokens)."""
        return self.vocab_size - 2

    @property
    def mask_token_id(self) -> int:
        """Id of the mask token, q."""
        return self.vocab_size - 2

    @property
    def num_embeddings(self) -> int:
        """Rows of the token embedding, q + 1: a row per id the data hold, the symbols and the mask token (the
        padding id q + 1 is never an input, so it has none)."""
        return self.vocab_size - 1

    @property
    def pad_token_id(self) -> int:
        """Id of the padding token, q + 1 (TreeLang sequences all have `arity**depth` leaves: none is padded)."""
        return self.vocab_size - 1

    @pad_token_id.setter
    def pad_token_id(self, pad_token_id) -> None:
        if pad_token_id is not None and pad_token_id != self.vocab_size - 1:
            raise ValueError(f"`pad_token_id` must be q + 1 = {self.vocab_size - 1} (the last id of the vocabulary), "
                             f"got {pad_token_id!r}")

    @property
    def max_position_embeddings(self) -> int:
        """Sequence length s**ℓ (2**ℓ for the paper's trees)."""
        return self.arity**self.depth

    @property
    def sequence_length(self) -> int:
        """Sequence length s**ℓ (alias of `max_position_embeddings`)."""
        return self.arity**self.depth


__all__ = ["TreeLangConfig"]
