r"""The BP transformer: an encoder of ℓ attention layers whose weights are built from a grammar, not trained, so
that it computes Belief Propagation BP_0 exactly (the paper's Sec. 4 and App. F, "A possible transformer
implementation of Belief Propagation", made runnable).

Why ℓ layers suffice. Take a binary tree of depth ℓ, rules ``M_l[a, b, c] = P(left = b, right = c | parent = a)`` at
the parents of level l (root: level 0), root prior p0, and leaf evidence ``u_i`` (one-hot of the observed symbol, all
ones for a masked leaf). For leaf i and height h = 0 .. ℓ, let ``anc_h(i)`` be its ancestor h levels up and
``sib_h(i)`` the sibling of ``anc_h(i)`` (the root of the *complementary* subtree of height h: the 2^h leaves j with
``(i XOR j).bit_length() = h + 1``). BP's upward message of a node v is ``up_v(a) ∝ P(leaves under v | v = a)``:

    up_{anc_{h+1}}(a) ∝ Σ_bc M[a, b, c] left(b) right(c),   (left, right) = (up_{anc_h}, up_{sib_h}) or swapped

— *which* of the two is the left child is bit h of i. Both messages are needed at leaf i's token at step h, and every
leaf j of the complementary subtree carries ``up_{sib_h(i)}`` (it is ``anc_h(j)``): an attention that averages
uniformly over those 2^h leaves brings it, whatever the others hold. For the leaf marginals (the masked-leaf task),
define the child-to-parent transfer matrix of step h, ``A_h[y, a] = Σ_c M[a, y, c] up_{sib_h}(c)`` when anc_h(i) is
the left child (``Σ_b M[a, b, y] up_{sib_h}(b)`` when it is the right one): ``A_h[y, a] = P(anc_h = y, leaves under
sib_h | anc_{h+1} = a)``. Then

    P(x_i = x, every other leaf) = Σ_a (A_0 A_1 ... A_{ℓ-1})[x, a] p0(a)

so leaf i's marginal given the others is ``∝ u_i(x) (C π)(x)`` with the chain ``C = A_0 A_1 ... A_{ℓ-1}`` (q × q),
accumulated one factor per step, bottom up, from the same sibling messages. The root posterior is
``∝ p0 ⊙ up_root``. So step h needs, at every token, four things: its ancestor's message, the sibling's message (the
attention), its chain so far and bit h of its position: ℓ layers of one head.

The token (d = 3q + q² + 2ℓ: App. F's d = q² + 2q + ℓ with the leaf's own evidence kept for the marginal and each
bit held as two gates, which makes the routing below exact)::

    [ u (q): the leaf's evidence | o (q): up_{anc_h} | s (q): up_{sib_h} | C (q²): the chain | g (ℓ) | h (ℓ) ]

with ``λ_t = 1`` where anc_t(i) is a left child (bit t of i is 0), ``g_t = λ_t - 1`` and ``h_t = -λ_t`` (each 0
or -1), so that the ±1 bit is ``b_t = g_t - h_t``. Embedding: a symbol x gives ``u = o = e_x``, the mask ``u = 1``,
``o = 1/q``; ``C = I / q``, ``s = 0``; the position table adds g and h.

Layer m + 1 (m = 0 .. ℓ - 1), post-norm like the paper's blocks:

* **attention** (one head, reading positions only): query ``√β (b_{m+1}, .., b_{ℓ-1}, -b_m, 0, .., 0)``, key
  ``√β b``: the score ``β (Σ_{t>m} b_t(i) b_t(j) - b_m(i) b_m(j))`` is largest, ``β (ℓ - m)``, exactly on the
  complementary subtree of height m, and at least 2β lower elsewhere. Value: the o block; output: into the s block.
  With β finite the weight leaking off the 2^m target leaves is at most ``2**ℓ exp(-2 β)`` of the total: 3e-33 at
  the default β = 40 for ℓ = 10, below float64's resolution.
* **feed-forward**, two stages. (1) ReLU units that route the two messages by bit m: ``L = relu(o + g_m) +
  relu(s + h_m)`` is ``o`` where the ancestor is the left child and ``s`` where it is the right one, ``R = relu(o +
  h_m) + relu(s + g_m)`` the other — exactly, since a gate adds 0.0 where it opens and -1 where it closes, and every
  entry of o and s lies in [0, 1] (the messages are normalised); ``S_R = relu(s + g_m)`` is the sibling as a right
  child (zero unless the ancestor is a left one), ``S_L = relu(s + h_m)`` as a left one. (2) Bilinear (gated) units
  with the rules
  of level ℓ - m - 1 as weights: ``o' = Σ_bc M[·, b, c] L(b) R(c)`` and ``C' = C A`` with
  ``A[y, a] = Σ_c M[a, y, c] S_R(c) + Σ_b M[a, b, y] S_L(b)``; the block writes o', clears s, writes C'.
* **norm**: o and C are divided by their sums (a norm layer without parameters, in place of LayerNorm): messages
  are defined up to a factor, and this keeps every entry in [0, 1] at any depth. The residual stream replaces o and
  C by adding ``new - old``, which is exact to the dtype's resolution: an entry below eps times the largest of its
  block rounds to 0 (the norm clamps the -eps it can leave).

Heads: root classification ``logits = log(p0 ⊙ o)`` (token 0: every token holds up_root after ℓ layers); masked
leaf ``logits_i = log(u_i ⊙ C_i p0)`` at every position (one-hot for an observed leaf). ``softmax(logits)`` equals
BP_0's root posterior and leaf marginals to float rounding (tests/test_bp_transformer.py: ≤ 1e-5 in float64, with
any set of masked leaves).

Worked ℓ = 2, q = 2 example (leaves 0, 1 | 2, 3; leaf 1 masked): layer 1 (m = 0) lets leaf 0 and leaf 1 attend to
each other (``0 XOR 1 = 1``), leaf 2 and 3 likewise; leaf 0 is a left child (b_0 = +1), so ``L = o_0 = e_{x_0}``,
``R = s = o_1 = (1/2, 1/2)`` and ``o' ∝ Σ_bc M[·, b, c] e_{x_0}(b) / 2 = up`` of node (1, 0); its chain becomes
``A[y, a] = Σ_c M[a, y, c] / 2``. Leaf 1 (a right child) computes the same o' and ``A[y, a] = M[a, x_0, y]``: the
likelihood of leaf 0 given the parent and leaf 1 = y. Layer 2 (m = 1): leaves 0, 1 attend to 2, 3 (their sibling
subtree), so every token gets the root's up message ``o'' ∝ Σ_bc M[·, b, c] up_(1,0)(b) up_(1,1)(c)``; leaf 1's chain
``C = A_0 A_1`` gives ``P(x_1 = y, x_0, x_2, x_3) ∝ Σ_a C[y, a] p0(a)``, BP's marginal of the masked leaf.

The model follows the transformers single-file layout and depends on torch and transformers only (it is copied next
to saved weights for ``trust_remote_code=True``). ``output_attentions=True`` returns the maps (they are real: the
analyses read them), ``output_hidden_states=True`` the token vectors after the embedding and each layer.

Dimension glossary: ``B`` batch, ``T = 2**ℓ`` positions, ``q`` symbols, ``d = 3q + q² + 2ℓ`` token size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput, SequenceClassifierOutput
from transformers.utils import ModelOutput

from .configuration_bp_transformer import BPTransformerConfig


class Layout:
    """The slices of the token's blocks: u, o, s, C (row-major q × q), and the two gates of every bit, g and h."""

    def __init__(self, q: int, depth: int):
        self.q, self.depth = q, depth
        self.u = slice(0, q)
        self.o = slice(q, 2 * q)
        self.s = slice(2 * q, 3 * q)
        self.chain = slice(3 * q, 3 * q + q * q)
        self.open_left = slice(3 * q + q * q, 3 * q + q * q + depth)  # g_t = λ_t - 1: 0 where anc_t is a left child
        self.open_right = slice(3 * q + q * q + depth, 3 * q + q * q + 2 * depth)  # h_t = -λ_t: 0 where it is right
        self.size = 3 * q + q * q + 2 * depth


def _rules(config: BPTransformerConfig) -> torch.Tensor:
    """(ℓ, q, q, q) float64 rules per level; uniform when the config has none (an untrained placeholder)."""
    q, depth = config.num_symbols, config.depth
    if config.rules is None:
        return torch.full((depth, q, q, q), 1.0 / (q * q), dtype=torch.float64)
    return torch.tensor(config.rules, dtype=torch.float64)


def _prior(config: BPTransformerConfig) -> torch.Tensor:
    q = config.num_symbols
    if config.root_prior is None:
        return torch.full((q,), 1.0 / q, dtype=torch.float64)
    return torch.tensor(config.root_prior, dtype=torch.float64)


def _left(depth: int) -> torch.Tensor:
    """(T, ℓ) λ_t(i) = 1 where the ancestor of leaf i at height t is a left child (bit t of i is 0), else 0."""
    positions = torch.arange(2**depth)
    return (1 - ((positions.unsqueeze(1) >> torch.arange(depth)) & 1)).to(torch.float64)


class BPAttention(nn.Module):
    """One head whose query and key read the position gates only (b = g - h); value o, output into s (see the module
    docstring)."""

    def __init__(self, config: BPTransformerConfig, layer: int):
        super().__init__()
        layout = Layout(config.num_symbols, config.depth)
        self.query = nn.Linear(layout.size, config.depth, bias=False)
        self.key = nn.Linear(layout.size, config.depth, bias=False)
        self.value = nn.Linear(layout.size, config.num_symbols, bias=False)
        self.output = nn.Linear(config.num_symbols, layout.size, bias=False)
        self.layer = layer

    @torch.no_grad()
    def build(self, config: BPTransformerConfig) -> None:
        layout, m, root_beta = Layout(config.num_symbols, config.depth), self.layer, math.sqrt(config.beta)
        signs = torch.tensor([1.0 if t > m else -1.0 if t == m else 0.0 for t in range(config.depth)],
                             dtype=self.query.weight.dtype)  # (ℓ,)
        for weight in (self.query.weight, self.key.weight, self.value.weight, self.output.weight):
            weight.zero_()
        rows = torch.arange(config.depth)
        left, right = torch.arange(layout.open_left.start, layout.open_left.stop), \
            torch.arange(layout.open_right.start, layout.open_right.stop)
        for gate, sign in ((left, 1.0), (right, -1.0)):  # b_t = g_t - h_t = 2 λ_t - 1 = ±1
            self.query.weight[rows, gate] = sign * root_beta * signs
            self.key.weight[rows, gate] = sign * root_beta
        q = config.num_symbols
        self.value.weight[torch.arange(q), torch.arange(layout.o.start, layout.o.stop)] = 1.0
        self.output.weight[torch.arange(layout.s.start, layout.s.stop), torch.arange(q)] = 1.0

    def forward(self, hidden: torch.Tensor) -> tuple:
        scores = self.query(hidden) @ self.key(hidden).transpose(1, 2)  # (B, T, T)
        weights = torch.softmax(scores, dim=-1)  # (B, T, T)
        return self.output(weights @ self.value(hidden)), weights  # (B, T, d), (B, T, T)


class BPFeedForward(nn.Module):
    """The two-stage block of one BP step: ReLU units that route o and s by bit m, then bilinear units weighted by the
    level's rules (the new message and the chain's next factor), written back by a linear map."""

    def __init__(self, config: BPTransformerConfig, layer: int):
        super().__init__()
        q, layout = config.num_symbols, Layout(config.num_symbols, config.depth)
        self.layer = layer
        self.route = nn.Linear(layout.size, 4 * q, bias=False)  # L_own, L_sib (= S_L), R_own, R_sib (= S_R)
        self.rules = nn.Parameter(torch.zeros(q, q, q), requires_grad=False)  # (q, q, q) M of the parents' level
        self.write = nn.Linear(4 * q + q + q * q, layout.size, bias=False)  # [routed, o', C'] -> the token's update

    @torch.no_grad()
    def build(self, config: BPTransformerConfig, rules: torch.Tensor) -> None:
        q, layout, m = config.num_symbols, Layout(config.num_symbols, config.depth), self.layer
        self.rules.copy_(rules.to(self.rules.dtype))
        self.route.weight.zero_()
        left, right = layout.open_left.start + m, layout.open_right.start + m
        sources = [(layout.o, left), (layout.s, right), (layout.o, right), (layout.s, left)]  # relu(x + gate)
        for group, (block, gate) in enumerate(sources):
            rows = torch.arange(group * q, (group + 1) * q)
            self.route.weight[rows, torch.arange(block.start, block.stop)] = 1.0
            self.route.weight[rows, gate] = 1.0
        self.write.weight.zero_()
        routed = 4 * q
        for group, block in enumerate((layout.o, layout.s, layout.o, layout.s)):  # minus o and s: o = L_own + R_own
            self.write.weight[torch.arange(block.start, block.stop), torch.arange(group * q, (group + 1) * q)] = -1.0
        self.write.weight[torch.arange(layout.o.start, layout.o.stop), torch.arange(routed, routed + q)] = 1.0
        self.write.weight[torch.arange(layout.chain.start, layout.chain.stop),
                          torch.arange(routed + q, routed + q + q * q)] = 1.0

    def forward(self, hidden: torch.Tensor, layout: Layout) -> torch.Tensor:
        q = layout.q
        routed = torch.relu(self.route(hidden))  # (B, T, 4q)
        own_left, sib_left, own_right, sib_right = routed.split(q, dim=-1)  # 4 x (B, T, q)
        left, right = own_left + sib_left, own_right + sib_right  # (B, T, q) each
        rules = self.rules.to(hidden.dtype)  # (q, q, q)
        message = torch.einsum("abc,ntb,ntc->nta", rules, left, right)  # (B, T, q)
        chain = hidden[..., layout.chain].unflatten(-1, (q, q))  # (B, T, q, q)
        factor = (torch.einsum("ayc,ntc->ntya", rules, sib_right)
                  + torch.einsum("aby,ntb->ntya", rules, sib_left))  # (B, T, q, q): A[y, a]
        chained = (chain @ factor).flatten(-2)  # (B, T, q²): C A
        old_chain = hidden[..., layout.chain]  # replaced, not added: the write map adds C' and the residual keeps C
        update = self.write(torch.cat([routed, message, chained], dim=-1))  # (B, T, d)
        update[..., layout.chain] -= old_chain
        return update


class BlockNorm(nn.Module):
    """Divide the o block and the chain by their sums (messages are defined up to a factor): every entry stays in
    [0, 1] at any depth, which the next layer's ReLU routing needs. A sum of zero (evidence of probability zero
    under the grammar) is kept at the smallest positive number, so the logits say -inf rather than NaN."""

    def forward(self, hidden: torch.Tensor, layout: Layout) -> torch.Tensor:
        tiny = torch.finfo(hidden.dtype).tiny
        out = hidden.clone()
        for block in (layout.o, layout.chain):
            part = hidden[..., block].clamp_min(0.0)  # the residual's rounding can leave -eps where a term is 0
            out[..., block] = part / part.sum(-1, keepdim=True).clamp_min(tiny)
        return out


class BPLayer(nn.Module):
    """One BP step: attention, feed-forward, norm (post-norm)."""

    def __init__(self, config: BPTransformerConfig, layer: int):
        super().__init__()
        self.attention = BPAttention(config, layer)
        self.feed_forward = BPFeedForward(config, layer)
        self.norm = BlockNorm()

    def forward(self, hidden: torch.Tensor, layout: Layout) -> tuple:
        attended, weights = self.attention(hidden)
        hidden = hidden + attended  # (B, T, d)
        hidden = hidden + self.feed_forward(hidden, layout)
        return self.norm(hidden, layout), weights


@dataclass
class BPEncoderOutput(ModelOutput):
    """The encoder's tokens after the last layer, and optionally every layer's tokens and attention maps."""

    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple | None = None
    attentions: tuple | None = None


class BPTransformerPreTrainedModel(PreTrainedModel):
    """Weights built from the config's grammar (:meth:`build`), never drawn: ``_init_weights`` leaves them."""

    config_class = BPTransformerConfig
    base_model_prefix = "bp"
    _no_split_modules = ["BPLayer"]

    def _init_weights(self, module):
        return  # every weight is built from the grammar in `build`

    def _check_inputs(self, input_ids: torch.Tensor) -> None:
        q, length = self.config.num_symbols, 2**self.config.depth
        if input_ids.dim() != 2 or input_ids.shape[1] != length:
            raise ValueError(f"input_ids must have shape (batch, 2**depth) = (batch, {length}), got "
                             f"{tuple(input_ids.shape)}")
        if bool(((input_ids < 0) | (input_ids > q)).any()):
            raise ValueError(f"input_ids must be symbols in [0, {q - 1}] or the mask id {q}")


class BPTransformerModel(BPTransformerPreTrainedModel):
    """The ℓ-layer encoder of the BP construction (module docstring)."""

    def __init__(self, config: BPTransformerConfig):
        super().__init__(config)
        q, depth = config.num_symbols, config.depth
        layout = Layout(q, depth)
        self.token_embeddings = nn.Embedding(q + 1, layout.size)
        self.position_embeddings = nn.Embedding(2**depth, layout.size)
        self.layers = nn.ModuleList(BPLayer(config, m) for m in range(depth))
        self.post_init()
        self.build()

    @torch.no_grad()
    def build(self) -> None:
        """Write every weight from the config's grammar, in the model's current dtype."""
        config = self.config
        q, depth = config.num_symbols, config.depth
        layout = Layout(q, depth)
        tokens = torch.zeros(q + 1, layout.size, dtype=torch.float64)
        tokens[torch.arange(q), torch.arange(q)] = 1.0  # u = e_x
        tokens[torch.arange(q), layout.o.start + torch.arange(q)] = 1.0  # o = e_x
        tokens[q, layout.u] = 1.0  # the mask: no evidence
        tokens[q, layout.o] = 1.0 / q
        tokens[:, layout.chain] = (torch.eye(q, dtype=torch.float64) / q).flatten()  # C = I / q
        self.token_embeddings.weight.copy_(tokens)
        positions = torch.zeros(2**depth, layout.size, dtype=torch.float64)
        left = _left(depth)  # (T, ℓ)
        positions[:, layout.open_left] = left - 1.0
        positions[:, layout.open_right] = -left
        self.position_embeddings.weight.copy_(positions)
        rules = _rules(config)  # (ℓ, q, q, q), level 0 = the root's
        for m, layer in enumerate(self.layers):
            layer.attention.build(config)
            layer.feed_forward.build(config, rules[depth - m - 1])  # step m builds the parents at level ℓ - m - 1

    def forward(self, input_ids: torch.Tensor, output_attentions: bool | None = None,
                output_hidden_states: bool | None = None, return_dict: bool | None = None, **unused):
        self._check_inputs(input_ids)
        layout = Layout(self.config.num_symbols, self.config.depth)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden = self.token_embeddings(input_ids) + self.position_embeddings(positions)  # (B, T, d)
        states, maps = [hidden], []
        for layer in self.layers:
            hidden, weights = layer(hidden, layout)
            states.append(hidden)
            maps.append(weights.unsqueeze(1))  # (B, 1, T, T): one head
        output = BPEncoderOutput(last_hidden_state=hidden,
                                 hidden_states=tuple(states) if output_hidden_states else None,
                                 attentions=tuple(maps) if output_attentions else None)
        return output if return_dict is not False else output.to_tuple()


class BPTransformerWithPrior(BPTransformerPreTrainedModel):
    """The encoder and the grammar's root prior p0, both built (never trained): the base of the two heads."""

    def __init__(self, config: BPTransformerConfig):
        super().__init__(config)
        self.bp = BPTransformerModel(config)
        self.root_prior = nn.Parameter(torch.zeros(config.num_symbols), requires_grad=False)
        self.post_init()
        self.build()

    @torch.no_grad()
    def build(self) -> None:
        """Write every weight from the config's grammar, in the model's current dtype (after ``.double()``, so that
        a float64 model holds the grammar's float64 numbers)."""
        self.bp.build()
        self.root_prior.copy_(_prior(self.config))


class BPTransformerForSequenceClassification(BPTransformerWithPrior):
    """Root classification: ``logits = log(p0 ⊙ o)`` of token 0 after ℓ layers, BP_0's root posterior."""

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                output_attentions: bool | None = None, output_hidden_states: bool | None = None,
                return_dict: bool | None = None, **unused):
        layout = Layout(self.config.num_symbols, self.config.depth)
        encoded = self.bp(input_ids, output_attentions=output_attentions, output_hidden_states=output_hidden_states)
        root = encoded.last_hidden_state[:, 0, layout.o]  # (B, q): up_root at every token
        logits = torch.log(self.root_prior.to(root.dtype) * root)  # (B, q)
        loss = None if labels is None else nn.functional.cross_entropy(logits, labels.long())
        output = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=encoded.hidden_states,
                                          attentions=encoded.attentions)
        return output if return_dict is not False else output.to_tuple()


class BPTransformerForMaskedLM(BPTransformerWithPrior):
    """Masked leaf: ``logits_i = log(u_i ⊙ C_i p0)`` at every position, BP_0's marginal of leaf i given the others."""

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                output_attentions: bool | None = None, output_hidden_states: bool | None = None,
                return_dict: bool | None = None, **unused):
        q = self.config.num_symbols
        layout = Layout(q, self.config.depth)
        encoded = self.bp(input_ids, output_attentions=output_attentions, output_hidden_states=output_hidden_states)
        hidden = encoded.last_hidden_state
        chain = hidden[..., layout.chain].unflatten(-1, (q, q))  # (B, T, q, q)
        joint = hidden[..., layout.u] * (chain @ self.root_prior.to(hidden.dtype))  # (B, T, q)
        logits = torch.log(joint)  # (B, T, q)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.reshape(-1, q), labels.long().reshape(-1), ignore_index=-100)
        output = MaskedLMOutput(loss=loss, logits=logits, hidden_states=encoded.hidden_states,
                                attentions=encoded.attentions)
        return output if return_dict is not False else output.to_tuple()


BPTransformerConfig.register_for_auto_class()
BPTransformerModel.register_for_auto_class("AutoModel")
BPTransformerForMaskedLM.register_for_auto_class("AutoModelForMaskedLM")
BPTransformerForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")

__all__ = ["BPTransformerForMaskedLM", "BPTransformerForSequenceClassification", "BPTransformerModel",
           "BPTransformerPreTrainedModel"]
