"""One activation collector for every analysis (as TransformerLens' ``run_with_cache``): logits, hidden states and
summed attention maps of a checkpoint over a set of inputs, in batches, without gradients.

Dimension glossary: ``n`` inputs, ``L = 2**ℓ`` positions, ``q`` symbols, ``d`` hidden size, ``P`` layers + 1
(the embedding first), ``H`` attention heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hf_treelang.core.oracle import NEXT_LEAF_TASK
from hf_treelang.train.callbacks import symbol_log_probabilities

from .checkpoint import Checkpoint


@dataclass
class Activations:
    """What :func:`run_with_cache` collected (CPU tensors; a field not asked for is ``None``).

    Attributes:
        logits: (n, V) root logits or (n, L, V) MLM logits, float32: V = q for a TreeLang model, q + 2 ids for
            another architecture (the symbols first).
        hidden_states: (n, P, L, d) float32, the embedding output then every layer's.
        attention_sum: (layers, H, L, L) float64, the attention maps summed over the n inputs.
    """

    logits: torch.Tensor | None = None
    hidden_states: torch.Tensor | None = None
    attention_sum: torch.Tensor | None = None


def batches(n: int, batch_size: int):
    """Slices covering range(n) in order, ``batch_size`` at a time."""
    for start in range(0, n, batch_size):
        yield slice(start, min(n, start + batch_size))


@torch.no_grad()
def run_with_cache(
    checkpoint: Checkpoint,
    input_ids,
    *,
    logits: bool = True,
    hidden_states: bool = False,
    attentions: bool = False,
    batch_size: int = 512,
) -> Activations:
    """Run ``checkpoint`` on ``input_ids`` (n, L) in batches and collect what is asked for (see :class:`Activations`)."""
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long)  # (n, L)
    model, device = checkpoint.model, checkpoint.device
    logit_parts, state_parts, attention_sum = [], [], None
    for part in batches(ids.shape[0], batch_size):
        out = model(input_ids=ids[part].to(device), output_hidden_states=hidden_states, output_attentions=attentions)
        if logits:
            logit_parts.append(out.logits.float().cpu())
        if hidden_states:
            if not getattr(out, "hidden_states", None):
                raise ValueError(_no_hidden_states(checkpoint))
            state_parts.append(torch.stack(out.hidden_states, 1).float().cpu())  # (b, P, L, d)
        if attentions:
            maps = getattr(out, "attentions", None)
            if not maps or any(a is None for a in maps):
                raise ValueError(_no_attentions(checkpoint))
            summed = torch.stack([a.double().sum(0) for a in maps]).cpu()  # (layers, H, L, L)
            attention_sum = summed if attention_sum is None else attention_sum + summed
    return Activations(
        logits=torch.cat(logit_parts) if logit_parts else None,
        hidden_states=torch.cat(state_parts) if state_parts else None,
        attention_sum=attention_sum,
    )


def _no_hidden_states(checkpoint: Checkpoint) -> str:
    return (f"checkpoint {checkpoint.describe()} returns no hidden states with output_hidden_states=True: this "
            f"analysis reads every layer's hidden states, which {checkpoint.model_type} does not give")


def _no_attentions(checkpoint: Checkpoint) -> str:
    return (f"checkpoint {checkpoint.describe()} returns no attention maps with output_attentions=True: "
            f"{checkpoint.model_type} has no attention (a state-space or recurrent model such as Mamba or RWKV), so "
            "there is no attention map to average")


@torch.no_grad()
def check_outputs(checkpoint: Checkpoint, *, hidden_states: bool = False, attentions: bool = False) -> int:
    """Refuse, before any work, a checkpoint that does not return what an analysis reads: one forward of one
    sequence of s**ℓ symbols; a ValueError (one line) when the hidden states or attention maps asked for are missing.

    Returns:
        P - 1, the layers after the embedding in the hidden-state tuple (0 when hidden states were not asked for).
    """
    ids = torch.zeros((1, checkpoint.num_leaves), dtype=torch.long, device=checkpoint.device)  # (1, L)
    if checkpoint.task == NEXT_LEAF_TASK:
        ids[:, 0] = checkpoint.mask_token_id  # a causal model reads [BOS, x_0 .. x_{L-2}], BOS = the mask id q
    try:
        out = checkpoint.model(input_ids=ids, output_hidden_states=hidden_states, output_attentions=attentions)
    except TypeError:  # a forward without those arguments returns neither
        out = None
    if hidden_states and not getattr(out, "hidden_states", None):
        raise ValueError(_no_hidden_states(checkpoint))
    if attentions:
        maps = getattr(out, "attentions", None)
        if not maps or any(a is None for a in maps):
            raise ValueError(_no_attentions(checkpoint))
    return len(out.hidden_states) - 1 if hidden_states else 0


@dataclass
class Prediction:
    """The model's distribution of the predicted variable over the q symbols, and what it put elsewhere.

    Attributes:
        probabilities: (n, q) float64, the symbols' logits renormalised among themselves.
        mass_on_special_tokens: the mean over the n predictions of the probability on ids that are not symbols
            (at most 2 exp(−SPECIAL_LOGIT_GAP) for a TreeLang model, whose special ids score that many nats below
            every symbol, :data:`hf_treelang.models.special_logits.SPECIAL_LOGIT_GAP`).
    """

    probabilities: np.ndarray
    mass_on_special_tokens: float


def predict_distribution(checkpoint: Checkpoint, input_ids, positions=None, *, batch_size: int = 1024) -> Prediction:
    """The model's distribution of the predicted variable: the root for a root checkpoint, the leaf at ``positions``
    (n,) for an MLM checkpoint; over the q symbols (:func:`~hf_treelang.train.callbacks.symbol_log_probabilities`)."""
    logits = run_with_cache(checkpoint, input_ids, batch_size=batch_size).logits  # (n, V) or (n, L, V)
    if checkpoint.task == "mlm":
        logits = logits[torch.arange(logits.shape[0]), torch.as_tensor(np.asarray(positions), dtype=torch.long)]
    classes = getattr(checkpoint.config, "num_classes", None) if checkpoint.task == "root" else None  # n outputs
    log_probabilities, mass = symbol_log_probabilities(logits, checkpoint.num_symbols, classes)  # (n, q)
    return Prediction(log_probabilities.exp().numpy(), mass)


def predict_probabilities(checkpoint: Checkpoint, input_ids, positions=None, *, batch_size: int = 1024) -> np.ndarray:
    """(n, q) float64: the probabilities of :func:`predict_distribution`."""
    return predict_distribution(checkpoint, input_ids, positions, batch_size=batch_size).probabilities
