"""N TreeLang models as one batched model: stacked weights, one batched kernel per layer for all members.

A declared variant of :mod:`~hf_treelang.models.modeling_treelang` (the same post-LN layer with a member axis);
``tests/test_ensemble.py`` keeps each member equal to its single model.

An ensemble of N members that share the architecture (paper Sec. 3.1: post-LN encoder, fused in-projection, SDPA,
feed-forward, root or masked-leaf readout) is one module whose every weight has a leading member axis: the weight
``W`` (out, in) of a :class:`~hf_treelang.models.TreeLangForMaskedLM` becomes ``W`` (N, out, in), and a layer of all
members is one ``baddbmm``. The names of the weights are the single model's (``treelang.layers.0.linear1.weight``), so
stacking the state dicts of N models and unstacking member ``i`` back into a ``TreeLangFor*`` model are name for name
(:meth:`StackedTreeLang.from_models`, :meth:`StackedTreeLang.member_model`).

Member ``i`` computes exactly its own model's function (to float rounding)::

    x⁽⁰⁾_i = E_i[ids_i] + p                          token embedding of member i + the shared sinusoidal table
    x̃_i = LN_i(x_i + SA_i(x_i));  x_i = LN_i(x̃_i + W2_i relu(W1_i x̃_i))

and the training loss is the *sum* of the members' mean losses, so each member's gradient is the gradient of its
own loss: with the elementwise Adam of the Trainer, every member follows its own single-run trajectory. Nothing
couples the members but the one thing that must not: gradient clipping, which :func:`clip_grad_norm_per_member`
does member by member.

Glossary: ``N`` members, ``B`` batch, ``T = 2**ℓ`` leaves, ``C`` hidden size d, ``F`` feed-forward size d',
``nh`` heads, ``hs = C // nh``, ``q`` symbols (``V = q + 1`` embedded ids, the symbols and the mask, as each member's
embedding; the vocabulary's padding id q + 1 is never an input).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.utils import ModelOutput

from .configuration_treelang import TreeLangConfig
from .modeling_treelang import (
    IGNORE_INDEX,
    TreeLangForMaskedLM,
    TreeLangForSequenceClassification,
    sinusoidal_positional_encoding,
    vocabulary_logits,
)

HEADS = {"mlm": TreeLangForMaskedLM, "root": TreeLangForSequenceClassification}
# Config fields that may differ between members: the data's metadata (k_train, grammar seed, σ). Everything else
# (the architecture and sizes) is shared, since the members are one batched model.
MEMBER_CONFIG_FIELDS = ("filter_level", "grammar_seed", "sigma")


@dataclass
class StackedOutput(ModelOutput):
    """Output of :class:`StackedTreeLang`.

    Attributes:
        loss: the sum over members of their mean losses (what ``backward`` is called on); None without labels.
        member_losses: (N,) each member's mean loss (the number its single run would log).
        logits: (N, B, q) root logits or (N, B, T, q + 2) masked-LM logits over the vocabulary (as
            ``TreeLangForMaskedLM``'s).
    """

    loss: torch.Tensor | None = None
    member_losses: torch.Tensor | None = None
    logits: torch.Tensor | None = None


class StackedAffine(torch.autograd.Function):
    """``y = b + x Wᵀ`` per member (``baddbmm``), whose gradients come out in the layouts of their tensors.

    Autograd's own backward of ``baddbmm(b, x, Wᵀ)`` computes the weight's gradient as ``xᵀ g`` (N, in, out) and hands
    back its transpose, a strided view; the gradient accumulator then copies it into the weight's (N, out, in) layout,
    one transposing copy per weight and step (for the paper's feed-forward weights of 16 members, 16 MB each). Here
    the weight's gradient is ``gᵀ x`` (N, out, in), written directly in the weight's layout by the batched product.

    Under autocast the forward multiplies in the autocast type (as ``baddbmm`` does); the backward multiplies in the
    type of the forward's product and returns each gradient in the type of its input, as autograd's casts would.
    """

    @staticmethod
    def forward(ctx, flat: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        output = torch.baddbmm(bias.unsqueeze(1), flat, weight.transpose(1, 2))  # (N, M, out)
        ctx.save_for_backward(flat, weight)
        ctx.bias_dtype = bias.dtype
        ctx.product_dtype = output.dtype
        return output

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        flat, weight = ctx.saved_tensors  # (N, M, in), (N, out, in)
        grad = grad.to(ctx.product_dtype)  # (N, M, out)
        grad_flat = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_flat = torch.bmm(grad, weight.to(grad.dtype)).to(flat.dtype)  # (N, M, in)
        if ctx.needs_input_grad[1]:
            grad_weight = torch.bmm(grad.transpose(1, 2), flat.to(grad.dtype)).to(weight.dtype)  # (N, out, in)
        if ctx.needs_input_grad[2]:
            grad_bias = grad.sum(dim=1).to(ctx.bias_dtype)  # (N, out)
        return grad_flat, grad_weight, grad_bias


class StackedLinear(nn.Module):
    """N independent linear layers, ``y_n = x_n W_nᵀ + b_n``, as one ``baddbmm`` (:class:`StackedAffine`).

    ``weight`` is (N, out, in) and ``bias`` (N, out); the input is (N, ..., in).
    """

    def __init__(self, members: int, in_features: int, out_features: int):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(members, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(members, out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N = x.shape[0]
        flat = x.reshape(N, -1, self.in_features)  # (N, M, in)
        # y[n] = b[n] + x[n] W[n]ᵀ
        y = StackedAffine.apply(flat, self.weight, self.bias)  # (N, M, out)
        return y.view(*x.shape[:-1], self.out_features)


class StackedLayerNorm(nn.Module):
    """N layer norms over the last axis with their own scale and shift, ``weight`` and ``bias`` (N, C)."""

    def __init__(self, members: int, hidden_size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(members, hidden_size))
        self.bias = nn.Parameter(torch.zeros(members, hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N, C = x.shape[0], x.shape[-1]
        shape = (N,) + (1,) * (x.dim() - 2) + (C,)
        return F.layer_norm(x, (C,), eps=self.eps) * self.weight.view(shape) + self.bias.view(shape)


class StackedDropout(nn.Module):
    """Dropout whose masks come from 32-bit integers, two per 64-bit draw of the generator (on a CPU).

    The same distribution as ``nn.Dropout(p)``: each entry is kept with probability 1 - p (to within 2**-33) and
    scaled by 1 / (1 - p). On a CPU, ``bernoulli_`` draws one number per entry, and a small model's step spent ~30 % of
    its time there; half the draws and one comparison cost about a third of it. Members draw independent masks, as
    the ensemble's semantics ask (with dropout, each member draws its own). On other devices this is ``F.dropout``.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = float(p)
        # keep an entry when its uniform int32 is >= this: P(drop) = round(p * 2**32) / 2**32
        self.threshold = round(self.p * 2**32) - 2**31

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or self.threshold > 2**31 - 1:  # p = 1 (or within 2**-33 of it): no int32 above
            return F.dropout(x, self.p, training=True)
        n = x.numel()
        draws = torch.randint(-2**63, 2**63 - 1, ((n + 1) // 2,), dtype=torch.int64)  # (ceil(n / 2),)
        bits = draws.view(torch.int32)[:n].view(x.shape)  # two uniform int32 per draw, shaped like x
        return x * ((bits >= self.threshold) * (1.0 / (1.0 - self.p))).to(x.dtype)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class StackedTable(nn.Module):
    """A stacked embedding table ``weight`` (N, V, C) (named like ``nn.Embedding.weight``)."""

    def __init__(self, members: int, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, num_embeddings, embedding_dim))


class StackedEmbeddings(nn.Module):
    """The N token embeddings (N, V, C) plus the shared fixed sinusoidal table (T, C), then dropout."""

    def __init__(self, members: int, config: TreeLangConfig):
        super().__init__()
        self.num_embeddings = config.num_embeddings  # V: the rows of each member's table
        self.token_embeddings = StackedTable(members, self.num_embeddings, config.hidden_size)
        self.register_buffer(
            "positional_encoding",
            sinusoidal_positional_encoding(config.max_position_embeddings, config.hidden_size),
            persistent=False,
        )
        self.dropout = StackedDropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        N = input_ids.shape[0]
        table = self.token_embeddings.weight  # (N, V, C)
        # member n reads row ids[n, b, t] of its own table: one lookup in the (N*V, C) concatenation
        offsets = torch.arange(N, device=input_ids.device).view(N, 1, 1) * self.num_embeddings  # (N, 1, 1)
        x = F.embedding(input_ids + offsets, table.reshape(-1, table.shape[-1]))  # (N, B, T, C)
        return self.dropout(x + self.positional_encoding)


class StackedSelfAttention(nn.Module):
    """N self-attentions with fused ``[W_Q; W_K; W_V]`` in-projections (N, 3C, C): one SDPA call for all members."""

    def __init__(self, members: int, config: TreeLangConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.dropout = config.attention_probs_dropout_prob
        self.in_proj = StackedLinear(members, config.hidden_size, 3 * config.hidden_size)
        self.out_proj = StackedLinear(members, config.hidden_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N, B, T, C = x.shape
        qkv = self.in_proj(x)  # (N, B, T, 3C)
        # members and batch rows are independent sequences for the attention kernel
        q, k, v = qkv.view(N * B, T, 3, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4)  # 3 x (N*B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)  # (N*B, nh, T, hs)
        y = y.transpose(1, 2).reshape(N, B, T, C)  # (N, B, T, C)
        return self.out_proj(y)


class StackedLayer(nn.Module):
    """One post-LN block of every member: ``x = LN(x + SA(x)); x = LN(x + W2 act(W1 x))`` with torch's dropouts."""

    def __init__(self, members: int, config: TreeLangConfig):
        super().__init__()
        self.attention = StackedSelfAttention(members, config)
        self.attention_norm = StackedLayerNorm(members, config.hidden_size, config.layer_norm_eps)
        self.linear1 = StackedLinear(members, config.hidden_size, config.intermediate_size)
        self.linear2 = StackedLinear(members, config.intermediate_size, config.hidden_size)
        self.feed_forward_norm = StackedLayerNorm(members, config.hidden_size, config.layer_norm_eps)
        self.activation = F.relu if config.hidden_act == "relu" else F.gelu
        self.dropout = StackedDropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.dropout(self.attention(x)))  # (N, B, T, C)
        hidden = self.dropout(self.activation(self.linear1(x)))  # (N, B, T, F)
        return self.feed_forward_norm(x + self.dropout(self.linear2(hidden)))  # (N, B, T, C)


class StackedEncoder(nn.Module):
    """The N encoders: embeddings, then the blocks (named like ``TreeLangModel``'s)."""

    def __init__(self, members: int, config: TreeLangConfig):
        super().__init__()
        self.embeddings = StackedEmbeddings(members, config)
        self.layers = nn.ModuleList(StackedLayer(members, config) for _ in range(config.num_hidden_layers))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embeddings(input_ids)  # (N, B, T, C)
        for layer in self.layers:
            x = layer(x)
        return x


class StackedTreeLang(nn.Module):
    """N ``TreeLangForMaskedLM`` (task ``"mlm"``) or ``TreeLangForSequenceClassification`` (``"root"``) models.

    Build it with :meth:`from_models` from N models of one architecture; get member ``i`` back as a ``TreeLangFor*``
    model with :meth:`member_model`. ``forward(input_ids (N, B, T), labels)`` returns a :class:`StackedOutput`.

    Args:
        configs: the N members' configs; they may differ only in :data:`MEMBER_CONFIG_FIELDS`.
        task: ``"mlm"`` or ``"root"``.
    """

    def __init__(self, configs: list, task: str):
        super().__init__()
        if task not in HEADS:
            raise ValueError(f"task must be one of {tuple(HEADS)}, got {task!r}")
        if not configs:
            raise ValueError("a stacked model needs at least one member config, got none")
        check_same_architecture(configs)
        self.task = task
        self.configs = list(configs)
        self.config = configs[0]  # the shared architecture (the Trainer and TensorBoard read `model.config`)
        members = len(configs)
        config = configs[0]
        self.treelang = StackedEncoder(members, config)
        if task == "mlm":
            self.lm_head = StackedLinear(members, config.hidden_size, config.num_symbols)
        else:
            concat = config.classifier_pooling == "concat"
            readout_in = config.hidden_size * (config.max_position_embeddings if concat else 1)
            self.classifier = StackedLinear(members, readout_in, config.num_labels)  # q, or n root classes

    @property
    def num_members(self) -> int:
        return len(self.configs)

    @classmethod
    def from_models(cls, models: list, task: str) -> "StackedTreeLang":
        """Stack N ``TreeLangFor*`` models (same architecture) into one module on their device, weights copied."""
        stacked = cls([model.config for model in models], task)
        states = [model.state_dict() for model in models]
        stacked_state = {name: torch.stack([state[name] for state in states]) for name in stacked.state_dict()}
        stacked.load_state_dict(stacked_state)
        return stacked.to(next(models[0].parameters()).device)

    def member_state_dict(self, index: int) -> dict:
        """Member ``index``'s weights under the single model's names (copies)."""
        if not 0 <= index < self.num_members:
            raise ValueError(f"`index` must be in [0, {self.num_members - 1}], got {index}")
        return {name: tensor[index].detach().clone() for name, tensor in self.state_dict().items()}

    def member_model(self, index: int):
        """Member ``index`` as a ``TreeLangFor*`` model (its own config, on this module's device, same mode)."""
        model = HEADS[self.task](self.configs[index])
        model.load_state_dict(self.member_state_dict(index))
        device = next(self.parameters()).device
        return model.to(device).train(self.training)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> StackedOutput:
        """``input_ids`` (N, B, T) and ``labels`` (N, B) root symbols or (N, B, T) with -100 off the masked leaves."""
        N = self.num_members
        if input_ids.dim() != 3 or input_ids.shape[0] != N:
            raise ValueError(f"input_ids must have shape (members, batch, 2**depth) with members={N}, got "
                             f"{tuple(input_ids.shape)}")
        x = self.treelang(input_ids)  # (N, B, T, C)
        B = x.shape[1]
        if self.task == "mlm":
            logits = self.lm_head(x)  # (N, B, T, q)
        else:
            pooled = x.flatten(2) if self.config.classifier_pooling == "concat" else x.mean(dim=2)  # (N, B, T*C)
            logits = self.classifier(pooled)  # (N, B, q)
        shown = vocabulary_logits(logits) if self.task == "mlm" else logits  # as TreeLangForMaskedLM's: q + 2 ids
        if labels is None:
            return StackedOutput(logits=shown)
        q = logits.shape[-1]
        losses = F.cross_entropy(logits.reshape(-1, q), labels.reshape(-1).long(), ignore_index=IGNORE_INDEX,
                                 reduction="none").view(N, -1)  # (N, B) or (N, B*T)
        if self.task == "mlm":
            # each member's loss is the mean over its masked leaves, as cross_entropy(ignore_index=-100) of one model
            counted = (labels.reshape(N, -1) != IGNORE_INDEX).sum(dim=1)  # (N,)
            member_losses = losses.sum(dim=1) / counted  # (N,)
        else:
            member_losses = losses.sum(dim=1) / B  # (N,)
        return StackedOutput(loss=member_losses.sum(), member_losses=member_losses, logits=shown)


def check_same_architecture(configs: list) -> None:
    """Raise a ValueError naming the first field in which two member configs differ (beyond the data's metadata)."""
    reference = configs[0].to_dict()
    for index, config in enumerate(configs[1:], start=1):
        values = config.to_dict()
        for name in sorted(set(reference) | set(values)):
            if name in MEMBER_CONFIG_FIELDS or name in ("transformers_version", "auto_map"):
                continue
            if reference.get(name) != values.get(name):
                raise ValueError(f"ensemble members must share the architecture: `{name}` is {reference.get(name)!r} "
                                 f"for member 0 and {values.get(name)!r} for member {index}")


@torch.no_grad()
def clip_grad_norm_per_member(parameters, max_norm: float, members: int) -> torch.Tensor:
    """Clip each member's gradient to norm ``max_norm`` separately; returns the (N,) norms before clipping.

    The same rule as ``torch.nn.utils.clip_grad_norm_`` on one model (scale by ``min(1, max_norm / (norm + 1e-6))``),
    applied to the slice of every stacked gradient that belongs to a member, so that no member's step depends on
    another member's gradient.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(members)
    # one slice per (member, tensor), member-major: the foreach kernels take the whole list in a few launches
    slices = [g[i] for i in range(members) for g in grads]
    per_slice = torch.stack(torch._foreach_norm(slices)).view(members, len(grads))  # (N, n)
    norms = torch.linalg.vector_norm(per_slice, dim=1)  # (N,)
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)  # (N,)
    for i in range(members):
        torch._foreach_mul_(slices[i * len(grads):(i + 1) * len(grads)], scale[i])
    return norms


__all__ = [
    "HEADS",
    "MEMBER_CONFIG_FIELDS",
    "StackedAffine",
    "StackedLinear",
    "StackedOutput",
    "StackedTreeLang",
    "check_same_architecture",
    "clip_grad_norm_per_member",
]
