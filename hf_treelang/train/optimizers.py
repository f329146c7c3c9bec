"""The optimisers of issue 33's MLM search, beyond transformers' ``--optim`` choices: Muon on the hidden matrices,
AdEMAMix and Grokfast-EMA, and a larger learning rate for the attention's query and key weights.

* ``--optim muon``: :class:`Muon`, ``torch.optim.Muon`` (momentum, then the update orthogonalised by Newton-Schulz
  iterations) with its iterations in float32 and batched over matrices of one shape, on the hidden 2-D weights of the encoder blocks, with the fused attention in-projection split into its query, key and value
  rows (each orthogonalised on its own), and AdamW for the embeddings, norms, biases and readout. Muon's
  ``adjust_lr_fn="match_rms_adamw"`` scales its update to AdamW's RMS, so that one ``--learning_rate`` serves both.
* ``--optim ademamix``: :class:`AdEMAMix` (Pagliardini et al., ICLR 2025): Adam plus a second, slow momentum
  (β3 close to 1) added with weight α, so that gradients that agree over thousands of steps keep pushing.
* ``--optim grokfast_adamw``: :class:`GrokfastAdamW` (Lee et al. 2024, Grokfast-EMA): the gradient's slow EMA,
  amplified by λ, is added to the gradient before an AdamW step.
* ``--qk_learning_rate_multiplier m``: the query and key rows of every in-projection train at m times the rate.

:func:`optimizer_factory` gives the Trainer (either engine) a factory that builds the run's optimiser from the model
placed on its device (transformers calls ``factory()(model, **kwargs)``). The rows of a fused weight are trained as
detached views of it (each a leaf sharing the weight's storage): before each step :class:`CombinedOptimizer` gives
every view the matching rows of the weight's gradient, and the inner optimisers update the views in place.
Every state tensor is in the optimiser's ``state_dict``, so a resumed run steps exactly as the uninterrupted one.

Glossary: ``d`` hidden size; an in-projection is (3d, d), rows [query; key; value].
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch

from hf_treelang.core.params import check_real

CUSTOM_OPTIMIZERS = ("muon", "ademamix", "grokfast_adamw")
IN_PROJECTION = "attention.in_proj.weight"  # the TreeLang encoder's fused [query; key; value] weight, (3d, d)
HIDDEN_PREFIX = "layers."  # the encoder blocks: their 2-D weights are the hidden matrices Muon trains
MUON_MOMENTUM = 0.95  # torch.optim.Muon's default, Keller Jordan's
ADEMAMIX_DEFAULTS = {"beta3": 0.9999, "alpha": 5.0}  # the paper's (Sec. 3, Table 1)
GROKFAST_DEFAULTS = {"alpha": 0.98, "lamb": 2.0}  # the paper's Grokfast-EMA defaults (Alg. 2)


def newton_schulz(updates: torch.Tensor, coefficients: tuple, steps: int, eps: float) -> torch.Tensor:
    """Muon's orthogonalisation (torch's quintic Newton-Schulz iteration, ``torch.optim._muon``) of a stack of
    matrices at once, in float32: ``updates`` is (n, A, B); each matrix is scaled to Frobenius norm 1 (so its spectral
    norm is at most 1) and iterated on its wide orientation. torch iterates in bfloat16, one matrix at a time, which
    a CPU without bfloat16 matrix units runs many times slower than float32, and float32 is the more accurate."""
    a, b, c = coefficients
    x = updates.float()  # (n, A, B)
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT  # (n, small, large)
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.mT  # (n, small, small)
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if tall else x


class Muon(torch.optim.Muon):
    """``torch.optim.Muon`` (the same hyperparameters, state and update: momentum, Nesterov, the orthogonalised update
    scaled by ``adjust_lr_fn``, decoupled weight decay) with the orthogonalisation done by :func:`newton_schulz`: in
    float32, one batched iteration per parameter shape."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, buffers = [], [], []
            self._init_group(group, params, grads, buffers)
            by_shape = defaultdict(list)
            for param, grad, buffer in zip(params, grads, buffers):
                buffer.lerp_(grad, 1 - group["momentum"])
                update = grad.lerp(buffer, group["momentum"]) if group["nesterov"] else buffer
                by_shape[tuple(param.shape)].append((param, update))
            lr = float(group["lr"])
            for shape, items in by_shape.items():
                orthogonal = newton_schulz(torch.stack([update for _, update in items]), group["ns_coefficients"],
                                           group["ns_steps"], group["eps"])  # (n, A, B)
                scaled_lr = torch.optim._muon._adjust_lr(lr, group["adjust_lr_fn"], torch.Size(shape))
                for (param, _), update in zip(items, orthogonal):
                    param.mul_(1 - lr * group["weight_decay"])
                    param.add_(update.to(param.dtype), alpha=-scaled_lr)
        return loss


class AdEMAMix(torch.optim.Optimizer):
    """AdEMAMix (Pagliardini et al., "The AdEMAMix Optimizer: Better, Faster, Older", ICLR 2025, Alg. 1).

    At step t, with gradient g::

        m1 <- β1 m1 + (1 - β1) g           (Adam's fast momentum, bias-corrected: m1 / (1 - β1^t))
        m2 <- β3(t) m2 + (1 - β3(t)) g     (the slow momentum, not bias-corrected)
        v  <- β2 v + (1 - β2) g²           (bias-corrected: v / (1 - β2^t))
        θ  <- θ - lr (  (m1_hat + α(t) m2) / (sqrt(v_hat) + ε)  +  λ θ )

    with the schedulers of the paper over ``warmup_steps`` T (none when T = 0): α(t) = min(t α / T, α) and
    β3(t) = min(exp(ln β1 ln β3 / ((1 - t/T) ln β3 + (t/T) ln β1)), β3), which start the slow momentum small while
    the weights move fast. α = 0 is AdamW.
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999, 0.9999), alpha: float = 5.0, eps: float = 1e-8,
                 weight_decay: float = 0.0, warmup_steps: int = 0):
        beta1, beta2, beta3 = betas
        for name, value in (("beta1", beta1), ("beta2", beta2), ("beta3", beta3)):
            if check_real(name, value, 0.0, 1.0) == 1.0:
                raise ValueError(f"`{name}` must be a real number in [0, 1), got 1.0")
        check_real("alpha", alpha, 0.0)
        check_real("learning_rate", lr, 0.0)
        super().__init__(params, {"lr": lr, "betas": (beta1, beta2, beta3), "alpha": alpha, "eps": eps,
                                  "weight_decay": weight_decay, "warmup_steps": int(warmup_steps)})

    @staticmethod
    def scheduled(beta1: float, beta3: float, alpha: float, step: int, warmup_steps: int) -> tuple:
        """(β3(t), α(t)) at step t (1-based) of the paper's warm-up over ``warmup_steps``."""
        if warmup_steps <= 0 or step >= warmup_steps:
            return beta3, alpha
        fraction = step / warmup_steps
        log1, log3 = math.log(beta1), math.log(beta3)
        beta = math.exp(log1 * log3 / ((1 - fraction) * log3 + fraction * log1))
        return min(beta, beta3), alpha * fraction

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2, beta3 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad
                state = self.state[param]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float64)
                    state["exp_avg_fast"] = torch.zeros_like(param)
                    state["exp_avg_slow"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                t = int(state["step"])
                beta3_t, alpha_t = self.scheduled(beta1, beta3, group["alpha"], t, group["warmup_steps"])
                fast, slow, square = state["exp_avg_fast"], state["exp_avg_slow"], state["exp_avg_sq"]
                fast.lerp_(grad, 1 - beta1)
                slow.lerp_(grad, 1 - beta3_t)
                square.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denominator = (square / (1 - beta2 ** t)).sqrt_().add_(group["eps"])
                update = (fast / (1 - beta1 ** t)).add_(slow, alpha=alpha_t).div_(denominator)
                if group["weight_decay"]:
                    update.add_(param, alpha=group["weight_decay"])
                param.add_(update, alpha=-group["lr"])
        return loss


class GrokfastAdamW(torch.optim.Optimizer):
    """AdamW on the Grokfast-EMA filtered gradient (Lee et al., "Grokfast: Accelerated Grokking by Amplifying Slow
    Gradients", 2024, Alg. 2)::

        μ <- α μ + (1 - α) g      (μ = g at the first step, as the authors' code)
        g̃ <- g + λ μ
        AdamW on g̃: m <- β1 m + (1 - β1) g̃;  v <- β2 v + (1 - β2) g̃²;
        θ <- θ (1 - lr wd) - lr (m / (1 - β1^t)) / (sqrt(v / (1 - β2^t)) + ε)

    λ = 0 is AdamW (``torch.optim.AdamW``'s update).
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 alpha: float = 0.98, lamb: float = 2.0):
        check_real("grokfast_alpha", alpha, 0.0, 1.0)
        check_real("grokfast_lambda", lamb, 0.0)
        check_real("learning_rate", lr, 0.0)
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "alpha": alpha, "lamb": lamb})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float64)
                    state["grad_ema"] = param.grad.clone()
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                else:
                    state["grad_ema"].lerp_(param.grad, 1 - group["alpha"])
                grad = param.grad + group["lamb"] * state["grad_ema"]  # the amplified slow gradient
                state["step"] += 1
                t = int(state["step"])
                state["exp_avg"].lerp_(grad, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                param.mul_(1 - group["lr"] * group["weight_decay"])
                denominator = (state["exp_avg_sq"] / (1 - beta2 ** t)).sqrt_().add_(group["eps"])
                param.addcdiv_(state["exp_avg"], denominator, value=-group["lr"] / (1 - beta1 ** t))
        return loss


class CombinedOptimizer(torch.optim.Optimizer):
    """Several optimisers stepped as one (one ``param_groups`` list, one ``state``, one ``state_dict``), some of
    whose tensors are row blocks of a model weight (``views``: (view, weight, rows)), fed the matching gradient rows
    before each step. The schedulers see every group; the Trainer and its checkpoints see one optimiser."""

    def __init__(self, optimizers: list, views: list):
        self.optimizers = list(optimizers)
        self.views = list(views)
        super().__init__([p for optimizer in self.optimizers for group in optimizer.param_groups
                          for p in group["params"]], {})
        self._link()

    def _link(self):
        """One state and one group list, shared with the inner optimisers."""
        self.state = defaultdict(dict)
        groups = []
        for optimizer in self.optimizers:
            for key, value in optimizer.state.items():
                self.state.setdefault(key, value)
            optimizer.state = self.state
            groups.extend(optimizer.param_groups)
        self.param_groups = groups

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        start = 0
        for optimizer in self.optimizers:  # the groups rebuilt by the load, handed back in order
            count = len(optimizer.param_groups)
            optimizer.param_groups = self.param_groups[start: start + count]
            optimizer.state = self.state
            start += count

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for view, weight, rows in self.views:
            view.grad = None if weight.grad is None else weight.grad[rows]
        for optimizer in self.optimizers:
            optimizer.step()
        for view, _, _ in self.views:
            view.grad = None
        return loss

    def zero_grad(self, set_to_none: bool = True):
        """Every gradient of the inner optimisers' tensors and of the weights split into row blocks (which no inner
        optimiser holds)."""
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)
        for weight in {id(weight): weight for _, weight, _ in self.views}.values():
            if set_to_none:
                weight.grad = None
            elif weight.grad is not None:
                weight.grad.zero_()


def parameter_groups(model, qk_multiplier: float = 1.0, muon: bool = False) -> tuple:
    """Split ``model``'s trainable parameters: ``(hidden, hidden_qk, other, other_qk, views)``, where ``hidden`` are
    the encoder blocks' 2-D weights (for Muon; empty unless ``muon``), ``*_qk`` the query and key row blocks of the
    in-projections (at ``qk_multiplier`` times the rate), ``other`` the rest, and ``views`` the row blocks' (view,
    weight, rows). An in-projection is split into row blocks when Muon or the multiplier needs it."""
    hidden, hidden_qk, other, other_qk, views = [], [], [], [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        is_hidden = muon and param.dim() == 2 and HIDDEN_PREFIX in name and "embed" not in name
        if name.endswith(IN_PROJECTION) and (muon or qk_multiplier != 1.0):
            width = param.shape[0] // 3
            for index, kind in enumerate(("query", "key", "value")):
                rows = slice(index * width, (index + 1) * width)
                view = param.detach()[rows]  # (d, d): a leaf sharing the weight's storage
                views.append((view, param, rows))
                scaled = kind != "value" and qk_multiplier != 1.0
                target = (hidden_qk if scaled else hidden) if is_hidden else (other_qk if scaled else other)
                target.append(view)
        elif is_hidden:
            hidden.append(param)
        else:
            other.append(param)
    return hidden, hidden_qk, other, other_qk, views


def build_optimizer(model, optim: str, *, learning_rate: float, betas=(0.9, 0.999), eps: float = 1e-8,
                    weight_decay: float = 0.0, qk_multiplier: float = 1.0, total_steps: int = 0):
    """The run's optimiser for ``optim`` (one of :data:`CUSTOM_OPTIMIZERS`, or ``adamw_torch`` with a query/key rate
    multiplier) on ``model``'s parameters; ``total_steps`` is AdEMAMix's α/β3 warm-up (the paper's choice: the
    run)."""
    muon = optim == "muon"
    hidden, hidden_qk, other, other_qk, views = parameter_groups(model, qk_multiplier, muon)

    def groups(plain, scaled):
        return [group for group in ({"params": plain, "lr": learning_rate},
                                    {"params": scaled, "lr": learning_rate * qk_multiplier}) if group["params"]]

    adam = {"lr": learning_rate, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay}
    if optim == "ademamix":
        inner = [AdEMAMix(groups(other, other_qk), betas=(*betas, ADEMAMIX_DEFAULTS["beta3"]),
                          alpha=ADEMAMIX_DEFAULTS["alpha"], eps=eps, weight_decay=weight_decay, lr=learning_rate,
                          warmup_steps=total_steps)]
    elif optim == "grokfast_adamw":
        inner = [GrokfastAdamW(groups(other, other_qk), **adam, **GROKFAST_DEFAULTS)]
    else:
        inner = [torch.optim.AdamW(groups(other, other_qk), **adam, foreach=False)]
        if muon:
            inner.insert(0, Muon(groups(hidden, hidden_qk), lr=learning_rate, weight_decay=weight_decay,
                                             momentum=MUON_MOMENTUM, adjust_lr_fn="match_rms_adamw"))
    return CombinedOptimizer(inner, views)


class TreeLangOptimizerFactory:
    """transformers' optimiser factory (``Trainer(optimizer_cls_and_kwargs=(TreeLangOptimizerFactory, kwargs))``):
    ``TreeLangOptimizerFactory()(model, **kwargs)`` is :func:`build_optimizer`, called once the model is on its
    device."""

    def __call__(self, model, **kwargs):
        return build_optimizer(model, **kwargs)


def optimizer_factory(optim, total_steps: int, *, qk_multiplier: float = 1.0, learning_rate: float,
                      betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0) -> tuple | None:
    """``(TreeLangOptimizerFactory, kwargs)`` for a run whose ``optim`` (the ``--optim`` value) or
    ``qk_multiplier`` needs this module, else None (the Trainer builds its own optimiser, as before these options);
    the other values are the run's ``TrainingArguments``' and ``total_steps`` its optimiser steps."""
    if optim not in CUSTOM_OPTIMIZERS and float(qk_multiplier) == 1.0:
        return None
    name = optim if optim in CUSTOM_OPTIMIZERS else "adamw_torch"  # the multiplier alone: AdamW (checked there)
    return TreeLangOptimizerFactory, {
        "optim": name, "learning_rate": learning_rate, "betas": tuple(betas), "eps": eps,
        "weight_decay": weight_decay, "qk_multiplier": float(qk_multiplier), "total_steps": int(total_steps)}


__all__ = ["AdEMAMix", "CUSTOM_OPTIMIZERS", "CombinedOptimizer", "GrokfastAdamW", "Muon", "TreeLangOptimizerFactory",
           "build_optimizer", "newton_schulz", "optimizer_factory", "parameter_groups"]
