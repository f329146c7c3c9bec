"""The TreeLang encoder: the vanilla post-LN transformer encoder of the paper (Sec. 3.1, App. C) and its two heads.

Glossary: `B` batch, `T = 2**l` sequence length (l = depth ℓ), `C` hidden size d, `nh` heads, `hs = C // nh`,
`q` symbols (the vocabulary has `q + 1` ids, the last one is the mask token).

    x⁽⁰⁾ = W_E x + p                       learned token embedding + fixed sinusoidal encoding (Vaswani et al.)
    x̃ = LayerNorm(x + SelfAttention(x))    post-LN, with biases, exactly as torch.nn.TransformerEncoderLayer
    x  = LayerNorm(x̃ + W_2 relu(W_1 x̃))      (batch_first=True, norm_first=False)

Heads: root classification reads the final tokens concatenated position-wise (a `d * 2**l` vector) with one linear
layer to q logits; masked language modelling applies one linear layer d -> q to every token.

This file depends on torch and transformers only (it is copied next to checkpoints for `trust_remote_code=True`).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput, SequenceClassifierOutput

from .configuration_treelang import TreeLangConfig

IGNORE_INDEX = -100


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
        self.token_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.register_buffer(
            "positional_encoding",
            sinusoidal_positional_encoding(config.max_position_embeddings, config.hidden_size),
            persistent=False,
        )
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.token_embeddings(input_ids) + self.positional_encoding  # (B, T, C)
        return self.dropout(x)


class AttentionInProjection(nn.Linear):
    """The fused `[W_Q; W_K; W_V]` projection; a type of its own so that it is initialised like `in_proj_weight`."""


class AttentionOutProjection(nn.Linear):
    """The attention output projection; a type of its own so that it is initialised like `out_proj`."""


class TreeLangSelfAttention(nn.Module):
    """Multi-head self-attention with a fused query/key/value projection, as `torch.nn.MultiheadAttention`.

    `in_proj` holds `[W_Q; W_K; W_V]` (3C, C) like `in_proj_weight`; `out_proj` is the output projection.
    """

    def __init__(self, config: TreeLangConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.dropout = config.attention_probs_dropout_prob
        self.in_proj = AttentionInProjection(config.hidden_size, 3 * config.hidden_size)
        self.out_proj = AttentionOutProjection(config.hidden_size, config.hidden_size)

    def forward(self, x: torch.Tensor, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`need_weights=True` runs the eager path and returns the (B, nh, T, T) attention maps; otherwise SDPA."""
        B, T, C = x.shape
        qkv = self.in_proj(x)  # (B, T, 3C)
        q, k, v = qkv.view(B, T, 3, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4)  # 3 x (B, nh, T, hs)
        dropout = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_size)  # (B, nh, T, T)
            weights = torch.softmax(scores, dim=-1)
            y = torch.matmul(F.dropout(weights, p=dropout, training=self.training), v)  # (B, nh, T, hs)
        else:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout)  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.out_proj(y), weights


class TreeLangLayer(nn.Module):
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

    def forward(self, x: torch.Tensor, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.attention(x, need_weights=need_weights)  # (B, T, C)
        x = self.attention_norm(x + self.dropout(attended))
        hidden = self.dropout(self.activation(self.linear1(x)))  # (B, T, C')
        x = self.feed_forward_norm(x + self.dropout(self.linear2(hidden)))
        return x, weights


class TreeLangPreTrainedModel(PreTrainedModel):
    """Weight initialisation (as the paper's code) and loading for the TreeLang models."""

    config_class = TreeLangConfig
    config: TreeLangConfig
    base_model_prefix = "treelang"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    _supports_sdpa = True
    _no_split_modules = ["TreeLangLayer"]
    # The losses are means over the batch; Trainer must not pass `num_items_in_batch`.
    accepts_loss_kwargs = False

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """The initialisation of the paper's code (`initializer="torch"`, PyTorch's defaults) or Xavier uniform."""
        xavier = self.config.initializer == "xavier"
        if isinstance(module, AttentionInProjection):
            # torch.nn.MultiheadAttention: Xavier uniform in-projection, zero bias.
            init.xavier_uniform_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, nn.Linear):
            if xavier:
                init.xavier_uniform_(module.weight)
            else:
                # nn.Linear.reset_parameters: Kaiming uniform (a = √5), i.e. U(±1/√fan_in).
                init.kaiming_uniform_(module.weight, a=math.sqrt(5))
            if xavier or isinstance(module, AttentionOutProjection):  # MultiheadAttention zeroes out_proj.bias
                init.zeros_(module.bias)
            else:
                bound = 1 / math.sqrt(module.in_features)
                init.uniform_(module.bias, -bound, bound)
        elif isinstance(module, nn.Embedding):
            if xavier:
                init.xavier_uniform_(module.weight)
            else:
                init.normal_(module.weight)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, TreeLangEmbeddings):
            init.copy_(
                module.positional_encoding,
                sinusoidal_positional_encoding(self.config.max_position_embeddings, self.config.hidden_size),
            )

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

    def _check_input_ids(self, input_ids: torch.Tensor) -> None:
        T = self.config.max_position_embeddings
        if not isinstance(input_ids, torch.Tensor) or input_ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"input_ids must be an int64/int32 tensor of shape (batch, {T}), got {type(input_ids)}")
        if input_ids.dim() != 2 or input_ids.shape[1] != T:
            raise ValueError(
                f"input_ids must have shape (batch, 2**depth) = (batch, {T}) for depth={self.config.depth}, "
                f"got {tuple(input_ids.shape)}"
            )
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) > self.config.mask_token_id):
            raise ValueError(
                f"input_ids must lie in [0, q] = [0, {self.config.mask_token_id}] (q is the mask token), got values "
                f"in [{int(input_ids.min())}, {int(input_ids.max())}]"
            )


class TreeLangModel(TreeLangPreTrainedModel):
    """The encoder: returns the final token states (B, 2**ℓ, d), optionally every layer's states and attention maps."""

    def __init__(self, config: TreeLangConfig):
        super().__init__(config)
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
        input_ids (`torch.LongTensor` of shape `(batch, 2**depth)`): symbols in `[0, q)` or the mask id `q`.
        attention_mask (optional): accepted for API compatibility; tree sequences have no padding, so it must be
            all ones.
        output_attentions: return the attention maps, a tuple over layers of `(batch, heads, 2**depth, 2**depth)`.
            They are computed on an eager path, whatever `attn_implementation` is.
        output_hidden_states: return the embedding output and every layer's output, a tuple of `num_layers + 1`
            tensors `(batch, 2**depth, hidden_size)`.
        """
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        return_dict = self.config.return_dict if return_dict is None else return_dict
        self._check_input_ids(input_ids)
        if attention_mask is not None and not bool((attention_mask == 1).all()):
            raise ValueError("attention_mask must be all ones: tree sequences have no padding")

        need_weights = bool(output_attentions) or self.config._attn_implementation == "eager"
        x = self.embeddings(input_ids)  # (B, T, C)
        all_hidden = (x,) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in self.layers:
            x, weights = layer(x, need_weights=need_weights)
            if output_hidden_states:
                all_hidden = all_hidden + (x,)
            if output_attentions:
                all_attentions = all_attentions + (weights,)

        output = BaseModelOutput(last_hidden_state=x, hidden_states=all_hidden, attentions=all_attentions)
        return output if return_dict else output.to_tuple()


def _encode(model, input_ids, attention_mask, output_attentions, output_hidden_states) -> BaseModelOutput:
    return model.treelang(
        input_ids,
        attention_mask=attention_mask,
        output_attentions=output_attentions,
        output_hidden_states=output_hidden_states,
        return_dict=True,
    )


class TreeLangForSequenceClassification(TreeLangPreTrainedModel):
    """Root classification (Sec. 3.2): the final tokens, concatenated position-wise into a `d * 2**ℓ` vector (or
    averaged with `classifier_pooling="mean"`), go through one linear readout to `q` logits."""

    _keys_to_ignore_on_load_unexpected = [r"lm_head\..*"]

    def __init__(self, config: TreeLangConfig):
        super().__init__(config)
        self.treelang = TreeLangModel(config)
        positions = config.max_position_embeddings if config.classifier_pooling == "concat" else 1
        readout_in = config.hidden_size * positions  # d * 2**depth (concat) or d (mean)
        self.classifier = nn.Linear(readout_in, config.num_symbols)
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
        if labels is not None and (labels.dim() != 1 or labels.shape[0] != input_ids.shape[0]):
            raise ValueError(
                f"labels must have shape (batch,) = ({input_ids.shape[0]},) holding the root symbols, "
                f"got {tuple(labels.shape)}"
            )
        encoded = _encode(self, input_ids, attention_mask, output_attentions, output_hidden_states)
        x = encoded.last_hidden_state  # (B, T, C)
        pooled = x.flatten(1) if self.config.classifier_pooling == "concat" else x.mean(dim=1)  # (B, T*C) or (B, C)
        logits = self.classifier(pooled)  # (B, q)
        loss = None
        if labels is not None:
            if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= self.config.num_symbols):
                raise ValueError(
                    f"labels must lie in [0, q) = [0, {self.config.num_symbols}), got values in "
                    f"[{int(labels.min())}, {int(labels.max())}]"
                )
            loss = F.cross_entropy(logits, labels)
        output = SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=encoded.hidden_states, attentions=encoded.attentions
        )
        return output if return_dict else output.to_tuple()


class TreeLangForMaskedLM(TreeLangPreTrainedModel):
    """Masked language modelling (Sec. 3.3): one linear readout d -> q on every token (the mask is never a target)."""

    _keys_to_ignore_on_load_unexpected = [r"classifier\..*"]

    def __init__(self, config: TreeLangConfig):
        super().__init__(config)
        self.treelang = TreeLangModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.num_symbols)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.treelang.get_input_embeddings()

    def get_output_embeddings(self) -> None:
        # The readout has q outputs while the vocabulary has q + 1 ids: nothing to tie.
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

        Returns `logits` of shape `(batch, 2**depth, q)`.
        """
        return_dict = self.config.return_dict if return_dict is None else return_dict
        if labels is not None and tuple(labels.shape) != tuple(input_ids.shape):
            raise ValueError(
                f"labels must have the shape of input_ids (batch, 2**depth) = {tuple(input_ids.shape)}, with -100 on "
                f"unmasked positions, got {tuple(labels.shape)}"
            )
        encoded = _encode(self, input_ids, attention_mask, output_attentions, output_hidden_states)
        logits = self.lm_head(encoded.last_hidden_state)  # (B, T, q)
        loss = None
        if labels is not None:
            targets = labels[labels != IGNORE_INDEX]
            if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= self.config.num_symbols):
                raise ValueError(
                    f"labels must lie in [0, q) = [0, {self.config.num_symbols}) or be -100, got values in "
                    f"[{int(targets.min())}, {int(targets.max())}]"
                )
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX
            )
        output = MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=encoded.hidden_states, attentions=encoded.attentions
        )
        return output if return_dict else output.to_tuple()


AUTO_MAP = {
    "AutoConfig": "configuration_treelang.TreeLangConfig",
    "AutoModel": "modeling_treelang.TreeLangModel",
    "AutoModelForMaskedLM": "modeling_treelang.TreeLangForMaskedLM",
    "AutoModelForSequenceClassification": "modeling_treelang.TreeLangForSequenceClassification",
}

# Saving copies this file and configuration_treelang.py next to the weights (see `save_pretrained`).
TreeLangConfig.register_for_auto_class()
TreeLangModel.register_for_auto_class("AutoModel")
TreeLangForMaskedLM.register_for_auto_class("AutoModelForMaskedLM")
TreeLangForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")

__all__ = [
    "TreeLangPreTrainedModel",
    "TreeLangModel",
    "TreeLangForMaskedLM",
    "TreeLangForSequenceClassification",
    "sinusoidal_positional_encoding",
]
