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

Every quantity is held as its natural logarithm (the log semiring): a product of ℓ rules of a near-deterministic
grammar, or a rule itself (a Dirichlet(0.02) grammar has rules of 1e-90), lies far below float32's smallest number,
while its logarithm is an ordinary float32 number. Probability zero is the finite :data:`LOG_ZERO` (−10⁴, whose exp
is 0 in every dtype): every hidden state and logit is finite in every dtype, float16's range included, and a
log-probability below it is held at it.

The token (d = 4q + 2q² + 2ℓ: App. F's d = q² + 2q + ℓ with the leaf's own evidence kept for the marginal, a second
slot for the message and the chain so that each layer replaces them exactly, and each bit held as two gates)::

    [ u (q) | o (2 × q) | s (q) | C (2 × q²) | g (ℓ) | h (ℓ) ]

u the leaf's log evidence, o the log of ``up_{anc_h}``, s the log of ``up_{sib_h}`` (the attention's output), C the
log of the chain (row-major q × q); ``λ_t = 1`` where anc_t(i) is a left child (bit t of i is 0), ``g_t = λ_t - 1``
and ``h_t = -λ_t`` (each 0 or -1), so that the ±1 bit is ``b_t = g_t - h_t``, and ``λ_t = -h_t``, ``1 - λ_t = -g_t``.
Embedding: a symbol x gives ``u = o = log e_x`` (0 at x, LOG_ZERO elsewhere), the mask ``u = 0``, ``o = -log q``;
``C = log(I / q)``; ``s = 0``; the position table adds g and h. Step m reads slot ``m % 2`` of o and C and writes slot
``(m + 1) % 2``: the residual stream adds ``-old`` to the slot read and ``new`` to the other, which holds 0, and
``x + (-x) = 0``, ``0 + y = y`` exactly in floating point, so no entry is lost to the rounding of a difference.

Layer m + 1 (m = 0 .. ℓ - 1), post-norm like the paper's blocks:

* **attention** (one head, reading positions only): query ``√β (b_{m+1}, .., b_{ℓ-1}, -b_m, 0, .., 0)``, key
  ``√β b``: the score ``β (Σ_{t>m} b_t(i) b_t(j) - b_m(i) b_m(j))`` is largest, ``β (ℓ - m)``, exactly on the
  complementary subtree of height m, and at least 2β lower elsewhere. Value: the o slot read; output: into s. Every
  target leaf holds the same message, so their average is it; with β finite the weight leaking off the 2^m target
  leaves is at most ``2**ℓ exp(-2 β)`` of the total and moves a log-message by at most that times ``|LOG_ZERO|``,
  below float64's resolution for β in the config's range (:data:`~.configuration_bp_transformer.MIN_BETA` and up).
* **feed-forward**, two stages. (1) Gated (bilinear) units route the two messages by bit m: ``L = λ_m o + (1 - λ_m)
  s`` is o where the ancestor is the left child and s where it is the right one, ``R = (1 - λ_m) o + λ_m s`` the
  other (a gate is exactly 0 or 1). (2) Log-sum-exp units with the log-rules of level ℓ - m - 1 as weights:
  ``o'[a] = log Σ_bc exp(log M[a, b, c] + L[b] + R[c])`` and ``C' = log (exp C · exp A)`` (a log-domain matrix
  product) with the transfer matrix ``A = λ_m A_R + (1 - λ_m) A_L``, ``A_R[y, a] = log Σ_c exp(log M[a, y, c] +
  s[c])`` (the sibling is the right child) and ``A_L[y, a] = log Σ_b exp(log M[a, b, y] + s[b])``; each sum is
  shifted by its largest term, so nothing underflows. The block clears the slots read and s, and writes o', C'.
* **norm**: o' and C' are shifted to log-probabilities (minus their log-sum-exp; messages are defined up to a factor)
  and held at LOG_ZERO from below.

Heads: root classification ``logits = log p0 + o`` (token 0: every token holds up_root after ℓ layers); masked
leaf ``logits_i[x] = u_i[x] + log Σ_a exp(C_i[x, a] + log p0[a])`` at every position (LOG_ZERO but at the symbol of an
observed leaf). ``softmax(logits)`` equals BP_0's root posterior and leaf marginals, and ``log_softmax(logits)``
BP_0's log-probabilities, to the dtype's rounding relative to their size (tests/test_bp_transformer.py states the
tolerances, in float64 and float32, on the paper's grammars and near-deterministic ones). Evidence of probability
zero under the grammar (where BP_0 is undefined) gives a finite output that means nothing.

Worked ℓ = 2, q = 2 example, in probabilities (the tokens hold their logarithms; leaves 0, 1 | 2, 3; leaf 1 masked): layer 1 (m = 0) lets leaf 0 and leaf 1 attend to
each other (``0 XOR 1 = 1``), leaf 2 and 3 likewise; leaf 0 is a left child (b_0 = +1), so ``L = o_0 = e_{x_0}``,
``R = s = o_1 = (1/2, 1/2)`` and ``o' ∝ Σ_bc M[·, b, c] e_{x_0}(b) / 2 = up`` of node (1, 0); its chain becomes
``A[y, a] = Σ_c M[a, y, c] / 2``. Leaf 1 (a right child) computes the same o' and ``A[y, a] = M[a, x_0, y]``: the
likelihood of leaf 0 given the parent and leaf 1 = y. Layer 2 (m = 1): leaves 0, 1 attend to 2, 3 (their sibling
subtree), so every token gets the root's up message ``o'' ∝ Σ_bc M[·, b, c] up_(1,0)(b) up_(1,1)(c)``; leaf 1's chain
``C = A_0 A_1`` gives ``P(x_1 = y, x_0, x_2, x_3) ∝ Σ_a C[y, a] p0(a)``, BP's marginal of the masked leaf.

The model follows the transformers single-file layout and depends on torch and transformers only (it is copied next
to saved weights for ``trust_remote_code=True``). ``output_attentions=True`` returns the maps (they are real: the
analyses read them), ``output_hidden_states=True`` the token vectors after the embedding and each layer.

Dimension glossary: ``B`` batch, ``T = 2**ℓ`` positions, ``q`` symbols, ``d = 4q + 2q² + 2ℓ`` token size, ``N``
the B T tokens of a batch taken as rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput, SequenceClassifierOutput
from transformers.utils import ModelOutput

from .configuration_bp_transformer import BPTransformerConfig, token_size
from .special_logits import vocabulary_logits


LOG_ZERO = -1.0e4  # the log of probability zero: finite in every dtype (float16 included), exp() = 0 in all


def _log(values: torch.Tensor) -> torch.Tensor:
    """Elementwise natural log with probability zero (and anything below exp(LOG_ZERO)) held at LOG_ZERO."""
    return torch.log(values.clamp_min(0.0)).clamp_min(LOG_ZERO)


class Layout:
    """The slices of the token's blocks: u, the two slots of o, s, the two slots of C (row-major q × q), and the two
    gates of every bit, g and h. Step m reads slot ``m % 2`` of o and C and writes the other."""

    def __init__(self, q: int, depth: int):
        self.q, self.depth = q, depth
        self.u = slice(0, q)
        self.o = (slice(q, 2 * q), slice(2 * q, 3 * q))
        self.s = slice(3 * q, 4 * q)
        self.chain = (slice(4 * q, 4 * q + q * q), slice(4 * q + q * q, 4 * q + 2 * q * q))
        gates = 4 * q + 2 * q * q
        self.open_left = slice(gates, gates + depth)  # g_t = λ_t - 1: 0 where anc_t is a left child
        self.open_right = slice(gates + depth, gates + 2 * depth)  # h_t = -λ_t: 0 where it is a right child
        self.size = gates + 2 * depth
        assert self.size == token_size(q, depth)


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


def _held(log_values: torch.Tensor) -> torch.Tensor:
    """Log-values held at LOG_ZERO from below (a sum of LOG_ZERO terms is still probability zero)."""
    return log_values.clamp_min(LOG_ZERO)


class BPAttention(nn.Module):
    """One head whose query and key read the position gates only (b = g - h); value the o slot the step reads,
    output into s (see the module docstring)."""

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
        q, read = config.num_symbols, layout.o[m % 2]
        self.value.weight[torch.arange(q), torch.arange(read.start, read.stop)] = 1.0
        self.output.weight[torch.arange(layout.s.start, layout.s.stop), torch.arange(q)] = 1.0

    def forward(self, hidden: torch.Tensor) -> tuple:
        scores = self.query(hidden) @ self.key(hidden).transpose(1, 2)  # (B, T, T)
        weights = torch.softmax(scores, dim=-1)  # (B, T, T)
        return self.output(weights @ self.value(hidden)), weights  # (B, T, d), (B, T, T)


ROWS_PER_CHUNK_ELEMENTS = 2**24  # the log-sum-exp units hold q³ terms per token: at most this many at once


class BPFeedForward(nn.Module):
    """The two-stage block of one BP step: gated units that route o and s by bit m, then log-sum-exp units weighted
    by the level's log-rules (the new message and the chain's next factor); a linear map reads the token and another
    writes the update (each row of both has a single ±1, so both are exact)."""

    def __init__(self, config: BPTransformerConfig, layer: int):
        super().__init__()
        q, layout = config.num_symbols, Layout(config.num_symbols, config.depth)
        self.layer = layer
        self.read = nn.Linear(layout.size, 2 * q + q * q + 2, bias=False)  # [o, s, C, λ_m, 1 - λ_m]
        self.log_rules = nn.Parameter(torch.zeros(q, q, q), requires_grad=False)  # (q, q, q) log M of the level
        self.write = nn.Linear(2 * q + q * q + q + q * q, layout.size, bias=False)  # [o, s, C, o', C'] -> update

    @torch.no_grad()
    def build(self, config: BPTransformerConfig, rules: torch.Tensor) -> None:
        q, layout, m = config.num_symbols, Layout(config.num_symbols, config.depth), self.layer
        read, written = m % 2, (m + 1) % 2
        self.log_rules.copy_(_log(rules).to(self.log_rules.dtype))
        self.read.weight.zero_()
        sources = [layout.o[read], layout.s, layout.chain[read]]
        row = 0
        for block in sources:
            size = block.stop - block.start
            self.read.weight[torch.arange(row, row + size), torch.arange(block.start, block.stop)] = 1.0
            row += size
        self.read.weight[row, layout.open_right.start + m] = -1.0  # λ_m = -h_m
        self.read.weight[row + 1, layout.open_left.start + m] = -1.0  # 1 - λ_m = -g_m
        self.write.weight.zero_()
        targets = [(layout.o[read], -1.0), (layout.s, -1.0), (layout.chain[read], -1.0),  # cleared: x + (-x) = 0
                   (layout.o[written], 1.0), (layout.chain[written], 1.0)]  # written into slots holding 0
        column = 0
        for block, sign in targets:
            size = block.stop - block.start
            self.write.weight[torch.arange(block.start, block.stop), torch.arange(column, column + size)] = sign
            column += size

    def forward(self, hidden: torch.Tensor, layout: Layout) -> torch.Tensor:
        q = layout.q
        read = self.read(hidden)  # (B, T, 2q + q² + 2)
        own, sibling, chain, gates = read.split([q, q, q * q, 2], dim=-1)
        flat = [part.reshape(-1, part.shape[-1]) for part in (own, sibling, chain, gates)]  # (N, ·) each
        step = max(1, ROWS_PER_CHUNK_ELEMENTS // q**3)
        updates = [self._update(*(part[start : start + step] for part in flat)) for start in range(0, len(flat[0]),
                                                                                                   step)]
        message, chained = (torch.cat(parts).reshape(*read.shape[:2], -1) for parts in zip(*updates))
        return self.write(torch.cat([own, sibling, chain, message, chained], dim=-1))  # (B, T, d)

    def _update(self, own, sibling, chain, gates) -> tuple:
        """(o', C') of N tokens from their o, s (N, q), C (N, q²) and gates [λ_m, 1 - λ_m] (N, 2), in log space."""
        q = own.shape[-1]
        rules = self.log_rules.to(own.dtype)  # (q, q, q): log M[a, b, c]
        left_gate, right_gate = gates[:, :1], gates[:, 1:]  # (N, 1): λ_m, 1 - λ_m, each exactly 0 or 1
        left = left_gate * own + right_gate * sibling  # (N, q): the left child's message
        right = right_gate * own + left_gate * sibling  # (N, q)
        # o'[a] = log Σ_bc exp(log M[a,b,c] + left[b] + right[c])
        message = _held(torch.logsumexp(rules + left[:, None, :, None] + right[:, None, None, :], dim=(-2, -1)))
        # A_R[y,a] = log Σ_c exp(log M[a,y,c] + s[c]);  A_L[y,a] = log Σ_b exp(log M[a,b,y] + s[b])
        as_right = _held(torch.logsumexp(rules + sibling[:, None, None, :], dim=-1)).transpose(1, 2)  # (N, q, q)
        as_left = _held(torch.logsumexp(rules + sibling[:, None, :, None], dim=-2)).transpose(1, 2)  # (N, q, q)
        factor = left_gate[..., None] * as_right + right_gate[..., None] * as_left  # (N, q, q): A[y, a]
        # C'[y,a] = log Σ_z exp(C[y,z] + A[z,a])
        chained = _held(torch.logsumexp(chain.view(-1, q, q, 1) + factor[:, None], dim=-2))  # (N, q, q)
        return message, chained.flatten(1)


class BlockNorm(nn.Module):
    """Shift the o and C slots written by step m to log-probabilities (minus their log-sum-exp: messages are
    defined up to a factor), held at LOG_ZERO from below."""

    def __init__(self, layer: int):
        super().__init__()
        self.layer = layer

    def forward(self, hidden: torch.Tensor, layout: Layout) -> torch.Tensor:
        written = (self.layer + 1) % 2
        out = hidden.clone()
        for block in (layout.o[written], layout.chain[written]):
            part = hidden[..., block]  # (B, T, q) or (B, T, q²)
            out[..., block] = _held(part - torch.logsumexp(part, dim=-1, keepdim=True))
        return out


class BPLayer(nn.Module):
    """One BP step: attention, feed-forward, norm (post-norm)."""

    def __init__(self, config: BPTransformerConfig, layer: int):
        super().__init__()
        self.attention = BPAttention(config, layer)
        self.feed_forward = BPFeedForward(config, layer)
        self.norm = BlockNorm(layer)

    def forward(self, hidden: torch.Tensor, layout: Layout) -> tuple:
        attended, weights = self.attention(hidden)
        hidden = hidden + attended  # (B, T, d): s held 0, so it now holds the average exactly
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
        one_hot = _log(torch.eye(q, dtype=torch.float64))  # (q, q): log e_x
        tokens = torch.zeros(q + 1, layout.size, dtype=torch.float64)
        tokens[:q, layout.u] = one_hot  # u = log e_x; the mask's u = 0: no evidence
        tokens[:q, layout.o[0]] = one_hot  # o = log e_x
        tokens[q, layout.o[0]] = -math.log(q)  # the mask: the uniform message
        tokens[:, layout.chain[0]] = (one_hot - math.log(q)).clamp_min(LOG_ZERO).flatten()  # C = log(I / q)
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
        self.log_root_prior = nn.Parameter(torch.zeros(config.num_symbols), requires_grad=False)  # log p0
        self.post_init()
        self.build()

    @torch.no_grad()
    def build(self) -> None:
        """Write every weight from the config's grammar, in the model's current dtype (after ``.double()``, so that
        a float64 model holds the grammar's float64 numbers)."""
        self.bp.build()
        self.log_root_prior.copy_(_log(_prior(self.config)))


class BPTransformerForSequenceClassification(BPTransformerWithPrior):
    """Root classification: ``logits = log p0 + o`` of token 0 after ℓ layers, BP_0's root posterior."""

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                output_attentions: bool | None = None, output_hidden_states: bool | None = None,
                return_dict: bool | None = None, **unused):
        layout = Layout(self.config.num_symbols, self.config.depth)
        encoded = self.bp(input_ids, output_attentions=output_attentions, output_hidden_states=output_hidden_states)
        root = encoded.last_hidden_state[:, 0, layout.o[self.config.depth % 2]]  # (B, q): log up_root, every token
        logits = _held(self.log_root_prior.to(root.dtype) + root)  # (B, q)
        loss = None if labels is None else nn.functional.cross_entropy(logits, labels.long())
        output = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=encoded.hidden_states,
                                          attentions=encoded.attentions)
        return output if return_dict is not False else output.to_tuple()


class BPTransformerForMaskedLM(BPTransformerWithPrior):
    """Masked leaf: ``logits_i = u_i + log(exp(C_i) p0)`` at every position, BP_0's marginal of leaf i given the
    others; the logits cover the vocabulary's q + 2 ids (``config.vocab_size``), the symbols' first, then ``[MASK]``
    and ``[PAD]`` below every symbol (``special_logits.vocabulary_logits``)."""

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                output_attentions: bool | None = None, output_hidden_states: bool | None = None,
                return_dict: bool | None = None, **unused):
        q = self.config.num_symbols
        layout = Layout(q, self.config.depth)
        encoded = self.bp(input_ids, output_attentions=output_attentions, output_hidden_states=output_hidden_states)
        hidden = encoded.last_hidden_state
        chain = hidden[..., layout.chain[self.config.depth % 2]].unflatten(-1, (q, q))  # (B, T, q, q): log C
        # logits[x] = u[x] + log Σ_a exp(C[x,a] + log p0[a])
        joint = torch.logsumexp(chain + self.log_root_prior.to(hidden.dtype), dim=-1)  # (B, T, q)
        symbol_logits = _held(hidden[..., layout.u] + joint)  # (B, T, q)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(symbol_logits.reshape(-1, q), labels.long().reshape(-1),
                                               ignore_index=-100)
        # over the vocabulary's q + 2 ids, as the tokenizer's: [MASK] and [PAD] below every symbol
        output = MaskedLMOutput(loss=loss, logits=vocabulary_logits(symbol_logits), hidden_states=encoded.hidden_states,
                                attentions=encoded.attentions)
        return output if return_dict is not False else output.to_tuple()


BPTransformerConfig.register_for_auto_class()
BPTransformerModel.register_for_auto_class("AutoModel")
BPTransformerForMaskedLM.register_for_auto_class("AutoModelForMaskedLM")
BPTransformerForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")

__all__ = ["BPTransformerForMaskedLM", "BPTransformerForSequenceClassification", "BPTransformerModel",
           "BPTransformerPreTrainedModel"]
