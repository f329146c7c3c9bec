"""The TreeLang encoder: the vanilla post-LN transformer encoder of the paper (Sec. 3.1, App. C) and its heads.

Glossary: `B` batch, `T = 2**l` sequence length (l = depth ℓ), `C` hidden size d, `nh` heads, `hs = C // nh`,
`q` symbols (the vocabulary has `V = q + 2` ids: the symbols, the mask token q and the padding token q + 1).

    x⁽⁰⁾ = W_E x + p                       learned token embedding + fixed sinusoidal encoding (Vaswani et al.)
    x̃ = LayerNorm(x + SelfAttention(x))    post-LN, with biases, exactly as torch.nn.TransformerEncoderLayer
    x  = LayerNorm(x̃ + W_2 relu(W_1 x̃))      (batch_first=True, norm_first=False)

Heads: root classification reads the final tokens concatenated position-wise (a `d * 2**l` vector) with one linear
layer to q logits (or, with `classifier_hidden_size` H >= 1, the authors' fine-tuning head: d * 2**l -> H -> q with a
ReLU); masked language modelling applies one linear layer d -> q to every token. The causal language model
(`TreeLangForCausalLM`, next-leaf prediction) runs the same blocks with causal self-attention on
`[BOS, x_0, ..., x_{T-2}]` (BOS = q, T <= 2**l) and applies one linear layer d -> q to every position: row i of its
logits is the model's P(x_i | x_<i), aligned with the exact oracle `hf_treelang.core.next_leaf`'s rows.

One vocabulary. `config.vocab_size` is q + 2, the tokenizer's ids, and the two language-model heads return logits
over all of them (`special_logits.vocabulary_logits`): the q symbols' scores, then `[MASK]` and `[PAD]` a fixed
`special_logits.SPECIAL_LOGIT_GAP` nats below the row's least likely symbol, finite in every dtype. Their losses are
the cross-entropy over the q symbols (the targets are always symbols), so the training, its gradients and its
numbers are those of the q-way readout. The embedding holds a row for each id the data hold, the symbols and the
mask (q + 1 rows, `config.num_embeddings`): TreeLang sequences all have 2**l leaves, so `[PAD]`, which the tokenizer
needs to pad a batch, is never an input, and an input that holds it is refused, saying why.

Attention goes through transformers' attention interface (`config._attn_implementation`: "sdpa" by default, "eager",
or any registered kernel), so `attn_implementation=` and `set_attn_implementation` take effect; `output_attentions=True`
always computes the maps on the eager path. With `config.is_causal` the attention modules carry `is_causal = True`:
SDPA (and the fused kernels) take their causal path with no mask tensor, the eager path masks the future itself.
The layers are `GradientCheckpointingLayer`s.

Input checks and host syncs. `forward` reads no tensor value on the host when it runs on an accelerator or under
`torch.compile` / `torch.export`, so the whole forward is one graph and never waits for the device. It checks only
what needs no value: types, dtypes (named in the error) and shapes. The value ranges (ids in `[0, q]`, labels in
`[0, q)` or -100, an all-ones `attention_mask`) are checked by the public `check_input_ids`, `check_labels` and
`check_attention_mask`, which the collators and the training data path call, so bad data fails with a clear error
before training starts. `forward` also calls them itself in plain eager mode on CPU tensors, where reading a value
costs no device sync; on CUDA or under compile/export bad values are not detected by the model.

This file depends on torch and transformers only (it is copied next to checkpoints for `trust_remote_code=True`).
"""

import contextlib
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationConfig, GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput, MaskedLMOutput, SequenceClassifierOutput
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .configuration_treelang import TreeLangConfig, num_labels_message
from .special_logits import vocabulary_logits

IGNORE_INDEX = -100
INPUT_ID_DTYPES = (torch.int64, torch.int32)
LABEL_DTYPES = (torch.int64, torch.int32)
# The initialiser of the paper's code: every encoder block a copy of one `torch.nn.TransformerEncoderLayer`.
CLONED_LAYERS = "torch_cloned_layers"
# `torch.nn.TransformerEncoderLayer`'s parameter names -> `TreeLangLayer`'s (the cloned initialiser copies along it).
TORCH_LAYER_PARAMETERS = {
    "self_attn.in_proj_weight": "attention.in_proj.weight",
    "self_attn.in_proj_bias": "attention.in_proj.bias",
    "self_attn.out_proj.weight": "attention.out_proj.weight",
    "self_attn.out_proj.bias": "attention.out_proj.bias",
    "linear1.weight": "linear1.weight",
    "linear1.bias": "linear1.bias",
    "linear2.weight": "linear2.weight",
    "linear2.bias": "linear2.bias",
    "norm1.weight": "attention_norm.weight",
    "norm1.bias": "attention_norm.bias",
    "norm2.weight": "feed_forward_norm.weight",
    "norm2.bias": "feed_forward_norm.bias",
}


# ---------------------------------------------------------------- input checks


def _check_integer_tensor(name: str, tensor, dtypes: tuple, expected_shape: str) -> None:
    """Type and dtype only (no value is read): the error names the dtype received."""
    allowed = " or ".join(str(dtype) for dtype in dtypes)
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a tensor of dtype {allowed} and shape {expected_shape}, got a "
                        f"{type(tensor).__name__}")
    if tensor.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {allowed}, got dtype {tensor.dtype} (shape {tuple(tensor.shape)})")


def _value_range(values: torch.Tensor) -> str:
    return f"[{int(values.min())}, {int(values.max())}]"


def can_read_values(tensor: torch.Tensor) -> bool:
    """Whether `forward` may read `tensor`'s values: plain eager mode on a CPU tensor (no device sync, no graph break)."""
    return (
        isinstance(tensor, torch.Tensor)
        and tensor.device.type == "cpu"
        and not torch.compiler.is_compiling()
        and not torch.jit.is_tracing()
        and not torch.jit.is_scripting()
    )


def check_input_ids(
    input_ids: torch.Tensor,
    num_symbols: int,
    sequence_length: int | None = None,
    *,
    allow_mask: bool = True,
    check_values: bool = True,
) -> None:
    """Check token ids: an int64/int32 tensor (batch, 2**ℓ) with values in `[0, q]` (`[0, q)` if not `allow_mask`).

    Args:
        input_ids: (batch, 2**ℓ) token ids; q is the mask id (the padding id q + 1 is never an input: TreeLang
            sequences all have 2**ℓ leaves).
        num_symbols: q, the number of symbols (`config.num_symbols`).
        sequence_length: 2**ℓ (`config.sequence_length`), or None to accept any length.
        allow_mask: whether the mask id q may appear (False for unmasked leaves).
        check_values: False checks only type, dtype and shape, which read no value (what `forward` does on an
            accelerator or under compile/export).

    Raises:
        TypeError: not a tensor, or a dtype other than int64/int32 (the message names the dtype).
        ValueError: another shape, or a value out of range (the message gives the range received).
    """
    shape = f"(batch, {sequence_length})" if sequence_length is not None else "(batch, 2**depth)"
    _check_integer_tensor("input_ids", input_ids, INPUT_ID_DTYPES, shape)
    if input_ids.dim() != 2 or (sequence_length is not None and input_ids.shape[1] != sequence_length):
        binary = sequence_length is None or sequence_length & (sequence_length - 1) == 0
        depth = f" for depth={sequence_length.bit_length() - 1}" if sequence_length is not None and binary else ""
        tokens = "2**depth" if binary else "arity**depth"
        raise ValueError(f"input_ids must have shape (batch, {tokens}) = {shape}{depth}, got {tuple(input_ids.shape)}")
    if input_ids.shape[0] == 0:
        raise ValueError(f"input_ids must hold at least one sequence (batch >= 1), got shape {tuple(input_ids.shape)}")
    if not check_values:
        return
    high = num_symbols if allow_mask else num_symbols - 1
    if int(input_ids.min()) < 0 or int(input_ids.max()) > high:
        allowed = f"[0, q] = [0, {num_symbols}] (q is the mask token)" if allow_mask else (
            f"[0, q) = [0, {num_symbols}) (the symbols; the mask id q is added by masking)"
        )
        padded = "" if not bool((input_ids == num_symbols + 1).any()) else (
            f" with the padding id [PAD] = q + 1 = {num_symbols + 1}: every TreeLang sequence has exactly "
            f"{input_ids.shape[1]} tokens and none is padded (a batch padded to its longest holds a shorter one)")
        raise ValueError(f"input_ids must lie in {allowed}, got values in {_value_range(input_ids)}{padded}")


def check_causal_input_ids(
    input_ids: torch.Tensor,
    num_symbols: int,
    max_length: int,
    *,
    check_values: bool = True,
) -> None:
    """Check the causal language model's input: int64/int32 `(batch, T)`, `1 <= T <= 2**ℓ`, laid out as
    `[BOS, x_0, ..., x_{T-2}]`: the beginning-of-sequence id q at position 0 and symbols in `[0, q)` after it.

    Args:
        input_ids: (batch, T) token ids.
        num_symbols: q (`config.num_symbols`); q is also the BOS id.
        max_length: 2**ℓ (`config.sequence_length`), the most positions (BOS and the first 2**ℓ - 1 leaves).
        check_values: False checks only type, dtype and shape, which read no value.

    Raises:
        TypeError: not a tensor, or a dtype other than int64/int32 (the message names the dtype).
        ValueError: another shape, or a value out of place (the message gives the values received).
    """
    shape = f"(batch, T) with 1 <= T <= 2**depth = {max_length}"
    _check_integer_tensor("input_ids", input_ids, INPUT_ID_DTYPES, shape)
    if input_ids.dim() != 2 or not 1 <= input_ids.shape[1] <= max_length:
        raise ValueError(
            f"input_ids must have shape {shape} ([BOS, x_0, ..., x_(T-2)]: the BOS id q and at most "
            f"2**depth - 1 leaves), got {tuple(input_ids.shape)}"
        )
    if input_ids.shape[0] == 0:
        raise ValueError(f"input_ids must hold at least one sequence (batch >= 1), got shape {tuple(input_ids.shape)}")
    if not check_values:
        return
    first, leaves = input_ids[:, 0], input_ids[:, 1:]
    if not bool((first == num_symbols).all()):
        raise ValueError(
            f"input_ids[:, 0] must be the beginning-of-sequence id q = {num_symbols} (the layout is "
            f"[BOS, x_0, ..., x_(T-2)]), got values in {_value_range(first)}"
        )
    if leaves.numel() and (int(leaves.min()) < 0 or int(leaves.max()) >= num_symbols):
        doubled = bool((leaves[:, 0] == num_symbols).any())
        raise ValueError(
            f"input_ids[:, 1:] must be leaves, symbols in [0, q) = [0, {num_symbols}) (only position 0 holds the "
            f"BOS id q), got values in {_value_range(leaves)}"
            + (" with BOS again at position 1: a causal run's tokenizer adds BOS itself, so a text prompt holds "
               "leaves only (the empty prompt \"\" for a whole sequence)" if doubled else "")
        )


def check_labels(
    labels: torch.Tensor,
    num_symbols: int,
    shape: tuple | None = None,
    *,
    allow_ignored: bool = False,
    check_values: bool = True,
) -> None:
    """Check targets: an int64/int32 tensor of symbols in `[0, q)`, or -100 where `allow_ignored` (MLM labels).

    Args:
        labels: root labels (batch,) or MLM labels (batch, 2**ℓ).
        num_symbols: q (`config.num_symbols`).
        shape: the expected shape, or None to accept any.
        allow_ignored: whether -100 marks positions without a target (MLM); at least one position must have one.
        check_values: False checks only type, dtype and shape.

    Raises:
        TypeError: not a tensor, or a dtype other than int64/int32 (the message names the dtype).
        ValueError: another shape, a value out of range, or MLM labels with no target at all.
    """
    expected = "(batch, 2**depth) with -100 on unmasked positions" if allow_ignored else "(batch,) of root symbols"
    _check_integer_tensor("labels", labels, LABEL_DTYPES, expected)
    if shape is not None and tuple(labels.shape) != tuple(shape):
        if allow_ignored:
            raise ValueError(
                f"labels must have the shape of input_ids (batch, 2**depth) = {tuple(shape)}, with -100 on "
                f"unmasked positions, got {tuple(labels.shape)}"
            )
        raise ValueError(
            f"labels must have shape (batch,) = {tuple(shape)} holding the root symbols, got {tuple(labels.shape)}"
        )
    if not check_values or labels.numel() == 0:
        return
    targets = labels[labels != IGNORE_INDEX] if allow_ignored else labels
    if allow_ignored and targets.numel() == 0:
        raise ValueError("labels must have at least one position with a target (not -100): nothing to predict")
    if int(targets.min()) < 0 or int(targets.max()) >= num_symbols:
        ignored = " or be -100" if allow_ignored else ""
        raise ValueError(
            f"labels must lie in [0, q) = [0, {num_symbols}){ignored}, got values in {_value_range(targets)}"
        )


def check_attention_mask(
    attention_mask: torch.Tensor, input_shape: tuple, *, check_values: bool = True
) -> None:
    """Tree sequences have no padding: an `attention_mask`, if given, has the shape of input_ids and is all ones
    (every sequence has exactly 2**ℓ tokens, so a batch padded to its longest holds a shorter one)."""
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a tensor of shape {tuple(input_shape)}, got a "
                        f"{type(attention_mask).__name__}")
    if tuple(attention_mask.shape) != tuple(input_shape):
        raise ValueError(
            f"attention_mask must have the shape of input_ids {tuple(input_shape)}, got {tuple(attention_mask.shape)}"
        )
    if check_values and attention_mask.numel() and not bool((attention_mask == 1).all()):
        lengths = sorted({int(length) for length in attention_mask.sum(-1).tolist()})
        raise ValueError(
            f"attention_mask must be all ones: every TreeLang sequence has exactly {input_shape[-1]} tokens and none "
            f"is padded, got sequences of {', '.join(map(str, lengths))} tokens padded to {input_shape[-1]}"
        )


def sinusoidal_positional_encoding(num_positions: int, hidden_size: int) -> torch.Tensor:
    """Fixed encoding of Vaswani et al.: `pe[t, 2i] = sin(t / 10000^(2i/d))`, `pe[t, 2i+1] = cos(...)`.

    Same formula (and float32 rounding) as the PyTorch tutorial's `PositionalEncoding` used by the paper's code.
    Returns a (num_positions, hidden_size) float32 tensor.
    """
    position = torch.arange(num_positions, dtype=torch.float32).unsqueeze(1)  # (T, 1)
    div_term = torch.exp(torch.arange(0, hidden_size, 2, dtype=torch.float32) * (-math.log(10000.0) / hidden_size))
    pe = torch.zeros(num_positions, hidden_size)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term[: hidden_size // 2])
    return pe


class TreeLangEmbeddings(nn.Module):
    """Token embedding plus the fixed sinusoidal positional encoding (a buffer, not a parameter), then dropout."""

    def __init__(self, config: TreeLangConfig):
        super().__init__()
        self.token_embeddings = nn.Embedding(config.num_embeddings, config.hidden_size)  # the symbols and the mask
        self.register_buffer(
            "positional_encoding",
            sinusoidal_positional_encoding(config.max_position_embeddings, config.hidden_size),
            persistent=False,
        )
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        T = input_ids.shape[1]  # 2**ℓ, or fewer for a causal prefix: position t always gets row t
        x = self.token_embeddings(input_ids) + self.positional_encoding[:T]  # (B, T, C)
        return self.dropout(x)


class AttentionInProjection(nn.Linear):
    """The fused `[W_Q; W_K; W_V]` projection; a type of its own so that it is initialised like `in_proj_weight`."""


class AttentionOutProjection(nn.Linear):
    """The attention output projection; a type of its own so that it is initialised like `out_proj`."""


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`softmax(Q Kᵀ · scaling + mask) V`, the eager entry of transformers' attention interface.

    `query`, `key`, `value` are (B, nh, T, hs); returns the output (B, T, nh, hs) and the attention probabilities
    (B, nh, T, T), taken before dropout. `is_causal` (default: `module.is_causal`) without an `attention_mask` masks
    the future, query t attending to keys <= t, as SDPA's `is_causal=True`.
    """
    scores = torch.matmul(query, key.transpose(-2, -1)) * scaling  # (B, nh, T, T)
    if attention_mask is not None:
        scores = scores + attention_mask
    elif getattr(module, "is_causal", False) if is_causal is None else is_causal:
        past = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()  # (T, T): key <= query
        scores = scores.masked_fill(~past, float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)  # (B, nh, T, T)
    y = torch.matmul(F.dropout(weights, p=dropout, training=module.training), value)  # (B, nh, T, hs)
    return y.transpose(1, 2).contiguous(), weights  # (B, T, nh, hs), (B, nh, T, T)


class TreeLangSelfAttention(nn.Module):
    """Multi-head self-attention with a fused query/key/value projection, as `torch.nn.MultiheadAttention`.

    `in_proj` holds `[W_Q; W_K; W_V]` (3C, C) like `in_proj_weight`; `out_proj` is the output projection. The product
    itself is `config._attn_implementation`'s function from transformers' attention interface.
    """

    is_causal = False  # read by the interface's kernels: every leaf attends to every leaf (unless config.is_causal)

    def __init__(self, config: TreeLangConfig):
        super().__init__()
        self.config = config
        self.is_causal = config.is_causal  # the causal LM's blocks: SDPA's causal path, the eager path masks
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_size**-0.5
        self.dropout = config.attention_probs_dropout_prob
        self.in_proj = AttentionInProjection(config.hidden_size, 3 * config.hidden_size)
        self.out_proj = AttentionOutProjection(config.hidden_size, config.hidden_size)

    def forward(
        self, x: torch.Tensor, output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns the attended states (B, T, C) and, with `output_attentions` (eager path), the maps (B, nh, T, T)."""
        B, T, C = x.shape
        qkv = self.in_proj(x)  # (B, T, 3C)
        query, key, value = qkv.view(B, T, 3, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4)  # 3 x (B, nh, T, hs)
        if output_attentions:
            # SDPA and the fused kernels return no maps; the analyses need them whatever the implementation is.
            attention = eager_attention_forward
        else:
            attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        y, weights = attention(
            self, query, key, value, None, dropout=self.dropout if self.training else 0.0, scaling=self.scaling,
            is_causal=self.is_causal,
        )  # (B, T, nh, hs)
        y = y.reshape(B, T, C)  # (B, T, C)
        return self.out_proj(y), weights if output_attentions else None


class TreeLangLayer(GradientCheckpointingLayer):
    """One post-LN encoder block: `x = LN(x + SA(x)); x = LN(x + FC(x))` with the dropouts of torch's layer."""

    def __init__(self, config: TreeLangConfig):
        super().__init__()
        self.attention = TreeLangSelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.linear1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.linear2 = nn.Linear(config.intermediate_size, config.hidden_size)
        self.feed_forward_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.activation = F.relu if config.hidden_act == "relu" else F.gelu
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self, x: torch.Tensor, output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # `x` stays positional: gradient checkpointing passes only positional arguments through the checkpoint.
        attended, weights = self.attention(x, output_attentions=output_attentions)  # (B, T, C)
        x = self.attention_norm(x + self.dropout(attended))
        hidden = self.dropout(self.activation(self.linear1(x)))  # (B, T, C')
        x = self.feed_forward_norm(x + self.dropout(self.linear2(hidden)))
        return x, weights


def _needs_init(parameter: torch.Tensor) -> bool:
    """Whether `parameter` is still to be drawn (`from_pretrained` flags the loaded ones `_is_hf_initialized`)."""
    return not getattr(parameter, "_is_hf_initialized", False)


def _init_linear_as_torch(module: nn.Linear) -> None:
    """`nn.Linear.reset_parameters`: weight Kaiming uniform (a = √5), i.e. U(±1/√fan_in), then bias U(±1/√fan_in)."""
    init.kaiming_uniform_(module.weight, a=math.sqrt(5))
    bound = 1 / math.sqrt(module.in_features)
    init.uniform_(module.bias, -bound, bound)


def _discarded_draws(config: TreeLangConfig):
    """Where a model builds its modules: under `initializer="torch_cloned_layers"`, a forked random generator.

    PyTorch initialises every `nn.Linear` and `nn.Embedding` as it is built, and a sub-model's `post_init` draws its
    weights; the weight init overwrites all of that. Forking the generator of the device the modules are built on
    discards those draws, so that the seeded stream is consumed by the model's `initialize_weights` alone, in the
    authors' order. Under the other initialisers nothing changes (their draws, hence their weights, stay as they were).
    """
    if config.initializer != CLONED_LAYERS:
        return contextlib.nullcontext()
    device = torch.empty(0).device  # the default device, or that of an enclosing `with torch.device(...)`
    if device.type in ("cpu", "meta"):
        return torch.random.fork_rng(devices=[])  # the CPU generator only (meta tensors draw nothing)
    return torch.random.fork_rng(devices=[device], device_type=device.type)


class TreeLangPreTrainedModel(PreTrainedModel):
    """Weight initialisation (PyTorch's defaults, those of the paper's code, or Xavier) and loading."""

    config_class = TreeLangConfig
    config: TreeLangConfig
    base_model_prefix = "treelang"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _no_split_modules = ["TreeLangLayer"]
    # The losses are means over the batch; Trainer must not pass `num_items_in_batch`.
    accepts_loss_kwargs = False
    # Whether the authors' counterpart of this model embeds the mask token: their MLM model does (vocab_size = q + 1),
    # their root classifier does not (vocab_size = q); read by the `"torch_cloned_layers"` initialiser.
    _authors_embed_mask_token = True

    def __init__(self, config: TreeLangConfig, *inputs, **kwargs):
        # A config's values are checked when it is built; `from_pretrained(path, name=value)` sets them afterwards.
        config._check()
        super().__init__(config, *inputs, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """PyTorch's defaults module by module (`initializer="torch"`) or Xavier uniform (`"xavier"`).

        Every linear layer, the two of the root readout's [`TreeLangClassificationHead`] included, gets PyTorch's
        default under `"torch"`: the authors' fine-tuning head is built with `nn.Linear`'s own initialisation. Under
        `"torch_cloned_layers"` only the positional table is set here: [`initialize_weights`] draws the parameters.
        """
        if isinstance(module, TreeLangEmbeddings):
            init.copy_(
                module.positional_encoding,
                sinusoidal_positional_encoding(self.config.max_position_embeddings, self.config.hidden_size),
            )
        if self.config.initializer == CLONED_LAYERS:
            return
        xavier = self.config.initializer == "xavier"
        if isinstance(module, AttentionInProjection):
            # torch.nn.MultiheadAttention: Xavier uniform in-projection, zero bias.
            init.xavier_uniform_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, AttentionOutProjection) and not xavier:
            # MultiheadAttention builds out_proj as an nn.Linear, then zeroes its bias.
            init.kaiming_uniform_(module.weight, a=math.sqrt(5))
            init.zeros_(module.bias)
        elif isinstance(module, nn.Linear):
            if xavier:
                init.xavier_uniform_(module.weight)
                init.zeros_(module.bias)
            else:
                _init_linear_as_torch(module)
        elif isinstance(module, nn.Embedding):
            if xavier:
                init.xavier_uniform_(module.weight)
            else:
                init.normal_(module.weight)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)

    def initialize_weights(self):
        """Initialise every parameter not loaded yet: module by module ([`_init_weights`]), or, under
        `initializer="torch_cloned_layers"`, all at once in the order of the paper's code.

        The paper's model (`TransformerClassifier` in the authors' `modules/models.py`) is built as

            input_embedding = nn.Embedding(vocab_size, d)          N(0, 1)
            encoder_layer = nn.TransformerEncoderLayer(d, ...)     one layer, PyTorch's defaults
            transformer_encoder = nn.TransformerEncoder(encoder_layer, n_L)    n_L deep copies of it
            decoder = FFNN([d * 2**ℓ or d, *hidden, q])            nn.Linear's defaults

        so all n_L blocks start with identical weights. `"torch_cloned_layers"` draws in that order from the
        default generator of the parameters' device (the CPU's for a model built on the CPU, as the authors build
        theirs before `.to(device)`): the embedding, one `torch.nn.TransformerEncoderLayer` (so its
        draws are PyTorch's own: out-projection weight and bias, the bias then zeroed, Xavier in-projection,
        `linear1`, `linear2`) copied into every block, then the heads' linear layers in the order they were built.
        The modules' construction draws on a forked generator (`_discarded_draws`), so from the same
        `torch.manual_seed` every parameter the authors' model has is equal to theirs, and the generator is left
        where theirs is. What has no counterpart:

        - the mask token's row of the root classifier's embedding: the authors' root classifiers have no mask
          token (`vocab_size=q`), so it is set to zero without a draw, as `hf_treelang.models.convert` writes it; no
          input of symbols reads it. Their MLM model embeds `q + 1` ids, drawn as one `(q + 1, d)` block as here.
        - their `encoder_layer.*`: the template registered beside the copies and never called; it equals every
          block at initialisation, and no block is stored twice here.
        - their positional table is a `(1, 5000, d)` buffer saved with the weights; ours is the same formula on
          the `2**ℓ` positions only, recomputed and not saved.

        A bare [`TreeLangModel`] draws the embedding and the blocks only (the authors have no model without a head).
        Parameters loaded by `from_pretrained` are kept and draw nothing; the blocks still to be initialised get
        the same copy.
        """
        super().initialize_weights()
        if self.config.initializer == CLONED_LAYERS:
            self._init_as_the_paper_code()

    @torch.no_grad()
    def _init_as_the_paper_code(self) -> None:
        """The draws of `initialize_weights` under `"torch_cloned_layers"` (see there)."""
        config, encoder = self.config, self.base_model
        embedding = encoder.embeddings.token_embeddings.weight  # (q + 1, d): the symbols and the mask
        drawn_rows = config.num_embeddings if self._authors_embed_mask_token else config.num_symbols
        if _needs_init(embedding):
            init.normal_(embedding[:drawn_rows])  # N(0, 1), as nn.Embedding
            init.zeros_(embedding[drawn_rows:])  # (0, d), or the root classifier's mask row
        blocks = [dict(layer.named_parameters()) for layer in encoder.layers]
        if any(_needs_init(parameter) for block in blocks for parameter in block.values()):
            template = nn.TransformerEncoderLayer(
                config.hidden_size, config.num_attention_heads, config.intermediate_size, batch_first=True,
                device=embedding.device, dtype=blocks[0]["linear1.weight"].dtype,
            )  # draws exactly what the authors' `encoder_layer` draws
            for name, value in template.named_parameters():
                for block in blocks:
                    init.copy_(block[TORCH_LAYER_PARAMETERS[name]], value)
        heads = [] if encoder is self else [child for child in self.children() if child is not encoder]
        for head in heads:  # in the order they were built, as the authors' decoder after the encoder
            for module in head.modules():
                if isinstance(module, nn.Linear):
                    _init_linear_as_torch(module)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Save weights (safetensors), config and the code, with an `auto_map` naming every TreeLang class."""
        self.config.auto_map = dict(AUTO_MAP)
        return super().save_pretrained(save_directory, *args, **kwargs)

    def freeze_encoder(self, frozen: bool = True) -> None:
        """Stop (or with `frozen=False` restart) gradient updates of the encoder; heads stay trainable.

        This is the frozen fine-tuning of Fig. 1f. Parameters with `requires_grad=False` are skipped by optimisers
        built from `filter(lambda p: p.requires_grad, model.parameters())` and receive no gradient.
        """
        for parameter in self.base_model.parameters():
            parameter.requires_grad_(not frozen)

    def _check_inputs(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                      mlm_labels: bool = False) -> None:
        """Types, dtypes and shapes always; value ranges only where no device sync or graph break follows."""
        config = self.config
        if config.is_causal:
            check_causal_input_ids(input_ids, config.num_symbols, config.sequence_length,
                                   check_values=can_read_values(input_ids))
        else:
            check_input_ids(input_ids, config.num_symbols, config.sequence_length,
                            check_values=can_read_values(input_ids))
        if labels is not None:
            shape = tuple(input_ids.shape) if mlm_labels else (input_ids.shape[0],)
            check_labels(labels, config.num_symbols if mlm_labels else config.num_labels, shape,
                         allow_ignored=mlm_labels, check_values=can_read_values(labels))


class TreeLangModel(TreeLangPreTrainedModel):
    """The encoder: returns the final token states (B, 2**ℓ, d), optionally every layer's states and attention maps."""

    def __init__(self, config: TreeLangConfig):
        super().__init__(config)
        with _discarded_draws(config):
            self.embeddings = TreeLangEmbeddings(config)
            self.layers = nn.ModuleList(TreeLangLayer(config) for _ in range(config.num_hidden_layers))
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.token_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.token_embeddings = value

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutput | tuple:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch, 2**depth)`): symbols in `[0, q)` or the mask id `q`
            (int64 or int32; values are checked in eager mode on CPU only, see the module docstring). With
            `config.is_causal` (the causal LM's encoder): `[BOS, x_0, ..., x_{T-2}]`, `1 <= T <= 2**depth`, as
            [`TreeLangForCausalLM`] reads it.
        attention_mask (optional): accepted for API compatibility; tree sequences have no padding, so it must have
            the shape of `input_ids` and be all ones.
        output_attentions: return the attention maps, a tuple over layers of `(batch, heads, 2**depth, 2**depth)`.
            They are computed on the eager path, whatever `attn_implementation` is.
        output_hidden_states: return the embedding output and every layer's output, a tuple of `num_layers + 1`
            tensors `(batch, 2**depth, hidden_size)`.
        """
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        return_dict = self.config.return_dict if return_dict is None else return_dict
        self._check_inputs(input_ids)
        if attention_mask is not None:
            check_attention_mask(attention_mask, input_ids.shape, check_values=can_read_values(attention_mask))

        output_attentions = bool(output_attentions)
        x = self.embeddings(input_ids)  # (B, T, C)
        all_hidden = (x,) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in self.layers:
            x, weights = layer(x, output_attentions=output_attentions)
            if output_hidden_states:
                all_hidden = all_hidden + (x,)
            if output_attentions:
                all_attentions = all_attentions + (weights,)

        output = BaseModelOutput(last_hidden_state=x, hidden_states=all_hidden, attentions=all_attentions)
        return output if return_dict else output.to_tuple()


def _with_attention(config: TreeLangConfig, is_causal: bool) -> TreeLangConfig:
    """`config`, or a copy with `is_causal` set: each head fixes its attention, so that a checkpoint of one head
    loads into another (encoder weights kept, the new head drawn) and the caller's config is left as it was."""
    if config.is_causal == is_causal:
        return config
    config = copy.deepcopy(config)
    config.is_causal = is_causal
    return config


def _encode(model, input_ids, attention_mask, output_attentions, output_hidden_states) -> BaseModelOutput:
    return model.treelang(
        input_ids,
        attention_mask=attention_mask,
        output_attentions=output_attentions,
        output_hidden_states=output_hidden_states,
        return_dict=True,
    )


class TreeLangClassificationHead(nn.Module):
    """The two-layer root readout of the authors' fine-tuning code (`config.classifier_hidden_size` H >= 1):

        logits = out_proj(relu(dense(x)))      x: (B, D) -> (B, H) -> (B, q)

    without dropout, as `replace_decoder_with_classification_head` in the authors' `modules/models.py`.
    """

    def __init__(self, in_features: int, hidden_size: int, num_symbols: int):
        super().__init__()
        self.dense = nn.Linear(in_features, hidden_size)
        self.out_proj = nn.Linear(hidden_size, num_symbols)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.out_proj(F.relu(self.dense(pooled)))  # (B, D) -> (B, H) -> (B, q)


class TreeLangForSequenceClassification(TreeLangPreTrainedModel):
    """Root classification (Sec. 3.2): the final tokens, concatenated position-wise into a `d * 2**ℓ` vector (or
    averaged with `classifier_pooling="mean"`), go through one linear readout to `q` logits (`classifier.weight`,
    `classifier.bias`), or through the authors' two-layer head [`TreeLangClassificationHead`] when
    `config.classifier_hidden_size` is H >= 1 (`classifier.dense.*`, `classifier.out_proj.*`). The config records
    which, so `from_pretrained` builds the head the checkpoint was saved with.

    The classes are the q symbols, so `num_labels` is always q: `from_pretrained(..., num_labels=k)` with k ≠ q
    raises. For data with k symbols build the config with `TreeLangConfig.from_data(num_symbols=k)`; for other
    classes, put your own head on [`TreeLangModel`]'s states.
    """

    _keys_to_ignore_on_load_unexpected = [r"lm_head\..*", r"next_leaf_head\..*"]
    # The authors' root classifiers embed the q symbols only (`vocab_size=q` in scripts/Transformer_RootInference.py).
    _authors_embed_mask_token = False

    def __init__(self, config: TreeLangConfig):
        config = _with_attention(config, is_causal=False)  # every leaf attends to every leaf
        if config.id2label is not None and len(config.id2label) != config.num_labels:
            raise ValueError(f"config.id2label has {len(config.id2label)} labels. "
                             + num_labels_message(len(config.id2label), config.num_labels))
        super().__init__(config)
        positions = config.max_position_embeddings if config.classifier_pooling == "concat" else 1
        readout_in = config.hidden_size * positions  # d * 2**depth (concat) or d (mean)
        with _discarded_draws(config):
            self.treelang = TreeLangModel(config)
            if config.classifier_hidden_size:
                self.classifier = TreeLangClassificationHead(
                    readout_in, config.classifier_hidden_size, config.num_labels
                )
            else:
                self.classifier = nn.Linear(readout_in, config.num_labels)  # q, or the data's n root classes
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.treelang.get_input_embeddings()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> SequenceClassifierOutput | tuple:
        r"""
        labels (`torch.LongTensor` of shape `(batch,)`, optional): root symbols in `[0, q)`; gives a cross-entropy loss.

        Returns `logits` of shape `(batch, q)`.
        """
        return_dict = self.config.return_dict if return_dict is None else return_dict
        self._check_inputs(input_ids, labels)
        encoded = _encode(self, input_ids, attention_mask, output_attentions, output_hidden_states)
        x = encoded.last_hidden_state  # (B, T, C)
        pooled = x.flatten(1) if self.config.classifier_pooling == "concat" else x.mean(dim=1)  # (B, T*C) or (B, C)
        logits = self.classifier(pooled)  # (B, q)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits, labels.long())
        output = SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=encoded.hidden_states, attentions=encoded.attentions
        )
        return output if return_dict else output.to_tuple()


class TreeLangForMaskedLM(TreeLangPreTrainedModel):
    """Masked language modelling (Sec. 3.3): one linear readout d -> q on every token (the mask is never a target);
    its `logits` cover the vocabulary's q + 2 ids (`special_logits.vocabulary_logits`: `[MASK]` and `[PAD]` finite
    and far below every symbol) and its loss is the cross-entropy over the q symbols."""

    _keys_to_ignore_on_load_unexpected = [r"classifier\..*", r"next_leaf_head\..*"]

    def __init__(self, config: TreeLangConfig):
        config = _with_attention(config, is_causal=False)  # every leaf attends to every leaf
        super().__init__(config)
        with _discarded_draws(config):
            self.treelang = TreeLangModel(config)
            self.lm_head = nn.Linear(config.hidden_size, config.num_symbols)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.treelang.get_input_embeddings()

    def get_output_embeddings(self) -> None:
        # The readout has q outputs (the symbols) while the embedding has q + 1 rows: nothing to tie.
        return None

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> MaskedLMOutput | tuple:
        r"""
        labels (`torch.LongTensor` of shape `(batch, 2**depth)`, optional): the true symbol in `[0, q)` at masked
            positions and -100 elsewhere; gives the cross-entropy averaged over masked positions.

        Returns `logits` of shape `(batch, 2**depth, q + 2)` (`config.vocab_size`): the q symbols' scores, then
        `[MASK]` and `[PAD]` `SPECIAL_LOGIT_GAP` nats below the least likely symbol
        (`special_logits.vocabulary_logits`).
        """
        return_dict = self.config.return_dict if return_dict is None else return_dict
        self._check_inputs(input_ids, labels, mlm_labels=True)
        encoded = _encode(self, input_ids, attention_mask, output_attentions, output_hidden_states)
        symbol_logits = self.lm_head(encoded.last_hidden_state)  # (B, T, q)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                symbol_logits.reshape(-1, symbol_logits.shape[-1]), labels.long().reshape(-1),
                ignore_index=IGNORE_INDEX
            )
        output = MaskedLMOutput(
            loss=loss, logits=vocabulary_logits(symbol_logits), hidden_states=encoded.hidden_states,
            attentions=encoded.attentions
        )
        return output if return_dict else output.to_tuple()


class TreeLangForCausalLM(TreeLangPreTrainedModel, GenerationMixin):
    """Next-leaf prediction: the same post-LN blocks with causal self-attention and one linear readout d -> q on every
    position (`next_leaf_head`); `config.is_causal` is always True.

    Input layout. `input_ids = [BOS, x_0, ..., x_{T-2}]` with the beginning-of-sequence id BOS = q (the mask token's
    id) and `1 <= T <= 2**ℓ`; position t has the sinusoid row t, whatever T is. Position i sees BOS and the leaves
    x_0 .. x_{i-1}, so the first q columns of row i of the logits `(B, T, q + 2)` are the model's P(x_i | x_<i): the
    same row as `hf_treelang.core.next_leaf.next_leaf_distributions(bp, leaves).probabilities[:, i]`; the last two,
    `[MASK]` and `[PAD]`, are finite and far below every symbol (`special_logits.vocabulary_logits`). A whole
    sequence of 2**ℓ leaves takes T = 2**ℓ positions (its last leaf is a target, never an input).

    Labels are not shifted (unlike transformers' usual causal LMs, which shift them by one inside the loss): position
    0 holds BOS, so `labels[:, i]` is the leaf x_i predicted at position i, i.e. `labels = leaves[:, :T]`, with -100
    where there is nothing to predict. The loss is the cross-entropy averaged over the labelled positions; with every
    position of B full sequences labelled it is `-Σ_b log P_model(x_b) / (B 2**ℓ)` (nats per leaf).

    Generation. `generate` starts from BOS and adds one leaf per step, recomputing the whole prefix (no key/value
    cache: at most 2**ℓ positions). The model's `generation_config` completes any prompt to a full sequence,
    `max_length = 1 + 2**ℓ`: from the BOS prompt `(n, 1)` the output `(n, 1 + 2**ℓ)` is BOS followed by 2**ℓ leaves,
    whose last forward saw BOS and 2**ℓ - 1 leaves, and a prompt `[BOS, x_0, ..., x_{m-1}]` gets the `2**ℓ - m`
    leaves left (so does `pipeline("text-generation")`, whose prompt text holds leaves: the tokenizer adds BOS).
    `max_new_tokens` takes precedence; asking for more than the positions left raises, naming the length. The
    generation config suppresses `[MASK]` and `[PAD]` (`suppress_tokens`), so every generated token is a symbol in
    [0, q). There is no end-of-sequence token (the length is fixed) and no padding token (nothing is padded;
    generate would otherwise read the BOS prompt as padding)::

        bos = torch.full((n, 1), model.config.bos_token_id)
        sequences = model.generate(bos, do_sample=True)         # (n, 1 + 2**ℓ): samples of the model
        leaves = sequences[:, 1:]                               # (n, 2**ℓ)

    Loading another head's checkpoint works: `TreeLangForCausalLM.from_pretrained(mlm_or_root_folder)` keeps the
    encoder's weights, makes the attention causal and draws a new `next_leaf_head` (the only missing keys; the other
    head's weights are ignored). The BOS id reuses the mask token's embedding row (the root classifier's is zero).
    """

    _keys_to_ignore_on_load_unexpected = [r"lm_head\..*", r"classifier\..*"]

    def __init__(self, config: TreeLangConfig):
        config = _with_attention(config, is_causal=True)
        super().__init__(config)
        with _discarded_draws(config):
            self.treelang = TreeLangModel(config)
            self.next_leaf_head = nn.Linear(config.hidden_size, config.num_symbols)
        # BOS, then 2**ℓ leaves; no eos (fixed length), no pad; every step recomputes the prefix (no cache)
        self.generation_config = GenerationConfig(
            bos_token_id=config.bos_token_id, max_length=1 + config.sequence_length, use_cache=False,
            suppress_tokens=[config.mask_token_id, config.pad_token_id],
        )
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.treelang.get_input_embeddings()

    def get_output_embeddings(self) -> None:
        # The readout has q outputs (the symbols) while the embedding has q + 1 rows: nothing to tie.
        return None

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, **kwargs) -> dict:
        """The whole prefix `(n, T)` at every step (no key/value cache; any cache or mask `generate` made is unused)."""
        inputs = {"input_ids": input_ids}
        for name in ("output_attentions", "output_hidden_states"):
            if kwargs.get(name) is not None:
                inputs[name] = kwargs[name]
        return inputs

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> CausalLMOutput | tuple:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch, T)`, `1 <= T <= 2**depth`): `[BOS, x_0, ..., x_{T-2}]`, the
            BOS id q then symbols in `[0, q)` (values checked in eager mode on CPU only, see the module docstring).
        attention_mask (optional): accepted for API compatibility; nothing is padded, so it must have the shape of
            `input_ids` and be all ones.
        labels (`torch.LongTensor` of shape `(batch, T)`, optional): `labels[:, i]` is the leaf x_i (not shifted: the
            input is shifted by BOS), in `[0, q)`, or -100 where nothing is predicted; gives the cross-entropy
            averaged over the labelled positions.

        Returns `logits` of shape `(batch, T, q + 2)` (`config.vocab_size`): the first q columns of row i are the
        model's P(x_i | x_<i) before the softmax, `[MASK]` and `[PAD]` far below them.
        """
        return_dict = self.config.return_dict if return_dict is None else return_dict
        self._check_inputs(input_ids)
        if labels is not None:
            _check_integer_tensor("labels", labels, LABEL_DTYPES, "(batch, T), the shape of input_ids")
            if tuple(labels.shape) != tuple(input_ids.shape):
                raise ValueError(
                    f"labels must have the shape of input_ids {tuple(input_ids.shape)} (labels[:, i] is the leaf "
                    f"x_i predicted at position i, -100 where nothing is predicted), got {tuple(labels.shape)}"
                )
            check_labels(labels, self.config.num_symbols, allow_ignored=True, check_values=can_read_values(labels))
        encoded = _encode(self, input_ids, attention_mask, output_attentions, output_hidden_states)
        symbol_logits = self.next_leaf_head(encoded.last_hidden_state)  # (B, T, q)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                symbol_logits.reshape(-1, symbol_logits.shape[-1]), labels.long().reshape(-1),
                ignore_index=IGNORE_INDEX
            )
        output = CausalLMOutput(
            loss=loss, logits=vocabulary_logits(symbol_logits), hidden_states=encoded.hidden_states,
            attentions=encoded.attentions
        )
        return output if return_dict else output.to_tuple()


AUTO_MAP = {
    "AutoConfig": "configuration_treelang.TreeLangConfig",
    "AutoModel": "modeling_treelang.TreeLangModel",
    "AutoModelForMaskedLM": "modeling_treelang.TreeLangForMaskedLM",
    "AutoModelForSequenceClassification": "modeling_treelang.TreeLangForSequenceClassification",
    "AutoModelForCausalLM": "modeling_treelang.TreeLangForCausalLM",
}

# Saving copies this file and configuration_treelang.py next to the weights (see `save_pretrained`).
TreeLangConfig.register_for_auto_class()
TreeLangModel.register_for_auto_class("AutoModel")
TreeLangForMaskedLM.register_for_auto_class("AutoModelForMaskedLM")
TreeLangForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
TreeLangForCausalLM.register_for_auto_class("AutoModelForCausalLM")

__all__ = [
    "can_read_values",
    "check_attention_mask",
    "check_causal_input_ids",
    "check_input_ids",
    "check_labels",
    "eager_attention_forward",
    "TreeLangPreTrainedModel",
    "TreeLangModel",
    "TreeLangForMaskedLM",
    "TreeLangClassificationHead",
    "TreeLangForSequenceClassification",
    "TreeLangForCausalLM",
    "sinusoidal_positional_encoding",
    "vocabulary_logits",
]
