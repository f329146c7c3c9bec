"""One activation collector for every analysis (as TransformerLens' ``run_with_cache``): logits, hidden states and
summed attention maps of a checkpoint over a set of inputs, in batches, without gradients.

Dimension glossary: ``n`` inputs, ``L = 2**ℓ`` positions, ``q`` symbols, ``d`` hidden size, ``P`` layers + 1
(the embedding first), ``H`` attention heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .checkpoint import Checkpoint


@dataclass
class Activations:
    """What :func:`run_with_cache` collected (CPU tensors; a field not asked for is ``None``).

    Attributes:
        logits: (n, q) root logits or (n, L, q) MLM logits, float32.
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
            state_parts.append(torch.stack(out.hidden_states, 1).float().cpu())  # (b, P, L, d)
        if attentions:
            if not out.attentions or any(a is None for a in out.attentions):
                raise ValueError(f"checkpoint {checkpoint.describe()} returned no attention maps with output_attentions=True")
            summed = torch.stack([a.double().sum(0) for a in out.attentions]).cpu()  # (layers, H, L, L)
            attention_sum = summed if attention_sum is None else attention_sum + summed
    return Activations(
        logits=torch.cat(logit_parts) if logit_parts else None,
        hidden_states=torch.cat(state_parts) if state_parts else None,
        attention_sum=attention_sum,
    )


def predict_probabilities(checkpoint: Checkpoint, input_ids, positions=None, *, batch_size: int = 1024) -> np.ndarray:
    """The model's distribution of the predicted variable, (n, q) float64: the root for a root checkpoint, the leaf at
    ``positions`` (n,) for an MLM checkpoint."""
    q = checkpoint.num_symbols
    logits = run_with_cache(checkpoint, input_ids, batch_size=batch_size).logits  # (n, q) or (n, L, q)
    if checkpoint.task == "mlm":
        logits = logits[torch.arange(logits.shape[0]), torch.as_tensor(np.asarray(positions), dtype=torch.long)]
    return torch.softmax(logits[..., :q].double(), -1).numpy()  # (n, q)
