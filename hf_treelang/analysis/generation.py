"""How well a causal model has learned the language, both ways: its samples scored by the exact oracle, and the true
data scored by the model (issue item 4).

Q is the model's distribution over whole sequences x = (x_0 .. x_{L-1}), L = 2**ℓ, by the chain rule of its next-leaf
rows (one forward of ``[BOS, x_0 .. x_{L-2}]``); P is the grammar's, exact, under BP_{k_train}
(:meth:`~hf_treelang.core.bp.BeliefPropagation.log_likelihood`). With N samples x⁽ⁱ⁾ ~ Q (``generate``) and N true
sequences y⁽ⁱ⁾ ~ P (``sample_trees`` at k_train)::

    KL(model ‖ data) = E_Q[log Q(x) − log P(x)]  ≈ (1/N) Σ_i log Q(x⁽ⁱ⁾) − log P(x⁽ⁱ⁾)
    KL(data ‖ model) = E_P[log P(y) − log Q(y)]  ≈ (1/N) Σ_i log P(y⁽ⁱ⁾) − log Q(y⁽ⁱ⁾)

each with its standard error std/√N (sample standard deviation, ddof = 1). KL(data ‖ model) is the model's
cross-entropy minus the entropy of the language (what training minimises); KL(model ‖ data) is large when the model
generates what the grammar never would. A sample of probability zero under the grammar (P = 0) makes KL(model ‖ data)
+inf, reported as such with the count of those samples (likewise a true sequence to which the model gives Q = 0);
nothing is NaN. For comparison: the mean log-likelihood under the grammar per sequence and per leaf of the generated
and of the true sequences, and the exact-oracle entropy-rate estimate −mean log P(y)/L (nats per leaf).

Random streams: the model's samples are drawn by ``generate(do_sample=True)`` under ``torch.manual_seed(seed)``
inside :func:`torch.random.fork_rng` (the caller's global generator is left as it was), batch after batch, so they
depend on ``seed``, ``batch_size`` and the device; the true sequences are ``sample_trees(..., sampling_seed=seed + 1)``.
Sampling uses the model's full next-leaf distribution (temperature 1, no top-k or top-p truncation), so Q is the
distribution the samples come from.

Every causal model's logits cover the vocabulary's special ids too (BOS = q, padding q + 1; a TreeLang model scores
them far below every symbol). Q is its distribution over the q symbols, each next-leaf row renormalised over the
symbols' logits (:func:`hf_treelang.train.callbacks.symbol_log_probabilities`), and the samples come from that Q:
``generate`` suppresses the special ids (``suppress_tokens``, their logits set to −inf), which is the same
renormalisation. What the rows put on the special ids is reported as ``mass_on_special_tokens``, the mean over the
rows of the generated and of the true sequences (at most 2 exp(−``SPECIAL_LOGIT_GAP``) for a TreeLang model, whose
special ids score :data:`hf_treelang.models.special_logits.SPECIAL_LOGIT_GAP` nats below every symbol). A sample
that still holds a special id (a model whose ``generate`` does not apply ``suppress_tokens``) is not a sequence of
the language: it is counted in ``num_special_samples`` and scored log P = log Q = −inf, i.e. as a sample the grammar
cannot produce (KL(model ‖ data) = +inf with its count), never a crash.

Dimension glossary: ``n`` sequences, ``L = 2**ℓ`` leaves, ``q`` symbols (BOS = q).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.noise import mean_error
from hf_treelang.core.oracle import NEXT_LEAF_TASK, next_leaf_inputs
from hf_treelang.core.params import check_int
from hf_treelang.core.resources import check_memory, generation_bytes, model_sizes
from hf_treelang.core.sampling import sample_trees
from hf_treelang.models.architectures import TREELANG
from hf_treelang.plotting import level_color, pyplot, save_figure
from hf_treelang.train.callbacks import symbol_log_probabilities

from .checkpoint import Checkpoint, as_checkpoint, load_causal_checkpoint
from .io import check_positive, cli_error, prepare_output, write_json

MAX_SAMPLES = 10**6  # --num-samples: generated and true sequences each (hf_treelang.cli repeats it for --help)
MAX_SEED = 2**63 - 2  # the true data use seed + 1, a sampling_seed in [0, 2**63 - 1]


@dataclass
class MeanEstimate:
    """A Monte-Carlo mean over sequences (a KL as the mean of log-ratios, or an entropy) and its standard error.

    Attributes:
        estimate: the mean over the sequences; +inf when ``num_infinite`` > 0.
        standard_error: std (ddof = 1) / √n of the finite mean; +inf when the estimate is infinite or n < 2.
        num_sequences: n.
        num_infinite: sequences whose value is +inf (for a KL: probability zero in the denominator).
        finite_estimate: the mean over the other sequences (equal to ``estimate`` when none is infinite; None when
            every one is).
    """

    estimate: float
    standard_error: float
    num_sequences: int
    num_infinite: int
    finite_estimate: float | None

    @classmethod
    def of(cls, log_ratios: np.ndarray) -> "MeanEstimate":
        """From the per-sequence values (n,), each finite or +inf."""
        log_ratios = np.asarray(log_ratios, dtype=np.float64)
        infinite = np.isposinf(log_ratios)
        finite = log_ratios[~infinite]
        finite_mean, finite_error = _mean_and_error(finite)
        if infinite.any():
            return cls(math.inf, math.inf, int(log_ratios.size), int(infinite.sum()), finite_mean)
        return cls(finite_mean, finite_error, int(log_ratios.size), 0, finite_mean)

    def to_dict(self) -> dict:
        return {
            "estimate": self.estimate,  # JSON null when infinite: see "infinite"
            "standard_error": self.standard_error,
            "infinite": math.isinf(self.estimate),
            "num_sequences": self.num_sequences,
            "num_infinite": self.num_infinite,
            "finite_estimate": self.finite_estimate,
        }

    def describe(self, unit: str = "nats", digits: int = 4) -> str:
        """``4.344 ± 0.023 nats`` (``± n/a`` of one sequence), or ``+inf: 193 of 200 sequences have probability zero
        (the other 7: ...)``."""
        if self.num_infinite:
            others = self.num_sequences - self.num_infinite
            finite = ("" if self.finite_estimate is None
                      else f" (the other {others}: {self.finite_estimate:.{digits}g} {unit})")
            return f"+inf: {self.num_infinite} of {self.num_sequences} sequences have probability zero{finite}"
        return f"{self.estimate:.{digits}g} ± {standard_error_text(self.standard_error)} {unit}"


def standard_error_text(error) -> str:
    """A standard error as printed: ``0.023``, or ``n/a`` where there is none (fewer than two finite values), which
    ``generate.json`` holds as null."""
    return f"{error:.2g}" if error is not None and math.isfinite(error) else "n/a"


def _mean_and_error(values: np.ndarray) -> tuple:
    """(mean, std (ddof = 1) / √n) of finite values; (None, inf) for none, (mean, inf) for one."""
    if values.size == 0:
        return None, math.inf
    if values.size == 1:
        return float(values[0]), math.inf
    return float(values.mean()), mean_error(values)


@dataclass
class GenerationResult:
    """Output of :func:`score_generation`: the model's samples and the true sequences, each scored by both.

    Attributes:
        depth, filter_level, num_symbols: ℓ, k_train (the data and the oracle BP_{k_train}), q.
        seed: the seed of the model's samples (the true sequences use seed + 1).
        generated: (n, L) int64 the model's samples (the leaves after BOS).
        generated_log_model / generated_log_grammar: (n,) float64 log Q and log P of ``generated`` (log P = -inf
            where the grammar cannot produce the sample).
        data: (n, L) int64 true sequences of the grammar at k_train.
        data_log_model / data_log_grammar: (n,) float64 log Q and log P of ``data``.
        mass_on_special_tokens: ``{"generated": m, "data": m}``, the mean probability the model's next-leaf rows put
            on ids that are not symbols, over the rows of the generated and of the true sequences (module docstring).
        num_special_samples: generated sequences holding an id that is not a symbol (scored as impossible).
    """

    depth: int
    filter_level: int
    num_symbols: int
    seed: int
    generated: np.ndarray
    generated_log_model: np.ndarray
    generated_log_grammar: np.ndarray
    data: np.ndarray
    data_log_model: np.ndarray
    data_log_grammar: np.ndarray
    mass_on_special_tokens: dict = field(default_factory=lambda: {"generated": 0.0, "data": 0.0})
    num_special_samples: int = 0

    @property
    def num_samples(self) -> int:
        return int(self.generated.shape[0])

    @property
    def length(self) -> int:
        """L = s**ℓ leaves per sequence (2**ℓ for the paper's grammars)."""
        return int(self.generated.shape[1])

    @property
    def num_impossible(self) -> int:
        """Generated sequences of probability zero under the grammar (P = 0)."""
        return int(np.isneginf(self.generated_log_grammar).sum())

    @property
    def kl_model_data(self) -> MeanEstimate:
        """KL(model ‖ data) = E_Q[log Q − log P] over the model's samples."""
        return MeanEstimate.of(_log_ratio(self.generated_log_model, self.generated_log_grammar))

    @property
    def kl_data_model(self) -> MeanEstimate:
        """KL(data ‖ model) = E_P[log P − log Q] over the true sequences."""
        return MeanEstimate.of(_log_ratio(self.data_log_grammar, self.data_log_model))

    @property
    def entropy_rate(self) -> MeanEstimate:
        """−mean log P(y)/L over the true sequences: the language's entropy per leaf (nats), exact-oracle estimate."""
        return MeanEstimate.of(-self.data_log_grammar / self.length)

    def log_likelihood(self, which: str) -> dict:
        """Mean log P under the grammar of the ``"generated"`` or the ``"data"`` sequences, per sequence and per
        leaf, with standard errors (means over the sequences of nonzero probability, whose count is given)."""
        values = {"generated": self.generated_log_grammar, "data": self.data_log_grammar}[which]
        possible = values[np.isfinite(values)]
        mean, error = _mean_and_error(possible)
        per_leaf = None if mean is None else mean / self.length
        return {
            "per_sequence": mean,
            "per_sequence_standard_error": error,
            "per_leaf": per_leaf,
            "per_leaf_standard_error": error / self.length,
            "num_sequences": int(values.size),
            "num_impossible": int(values.size - possible.size),
        }

    def to_dict(self) -> dict:
        return {
            "depth": self.depth,
            "filter_level": self.filter_level,
            "num_symbols": self.num_symbols,
            "num_samples": self.num_samples,
            "seed": self.seed,
            "data_seed": self.seed + 1,
            "units": "nats",
            "kl_model_data": self.kl_model_data.to_dict(),
            "kl_data_model": self.kl_data_model.to_dict(),
            "log_likelihood_generated": self.log_likelihood("generated"),
            "log_likelihood_data": self.log_likelihood("data"),
            "entropy_rate": self.entropy_rate.to_dict(),
            "num_impossible_samples": self.num_impossible,
            "mass_on_special_tokens": dict(self.mass_on_special_tokens),
            "num_special_samples": self.num_special_samples,
        }


def _log_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """log A − log B per sequence, +inf where B = 0 (the numerator is the sampled distribution's, finite)."""
    return np.where(np.isneginf(denominator), np.inf, numerator - np.where(np.isneginf(denominator), 0.0, denominator))


def _num_symbols(model, num_symbols: int | None) -> int:
    """q: given, or the TreeLang model's own (another architecture's config does not say it)."""
    if num_symbols is None:
        if getattr(model.config, "num_symbols", None) is None:
            raise ValueError(f"num_symbols must be given for a {model.config.model_type} model (its config does not "
                             "say q), got None")
        return int(model.config.num_symbols)
    return check_positive("num_symbols", num_symbols, low=2)


def special_token_ids(model, num_symbols: int) -> list:
    """The ids a causal model scores beyond the q symbols (suppressed in its samples): ``q .. vocab_size - 1``."""
    return list(range(num_symbols, int(model.config.vocab_size)))


def _score_sequences(model, leaves, num_symbols: int, batch_size: int) -> tuple:
    """(log Q (n,) float64, the mean probability of the rows off the symbols) of ``leaves`` (n, L); a position that
    holds no symbol has Q = 0 there (module docstring)."""
    leaves = torch.as_tensor(np.asarray(leaves), dtype=torch.long)  # (n, L)
    device = next(model.parameters()).device
    bos = int(model.config.bos_token_id)
    out = torch.empty(leaves.shape[0], dtype=torch.float64)  # (n,)
    off_symbols = 0.0
    with torch.inference_mode():
        for start in range(0, leaves.shape[0], batch_size):
            x = leaves[start:start + batch_size].to(device)  # (b, L)
            inputs = next_leaf_inputs(x, bos)  # (b, L): [BOS, x_0 .. x_{L-2}]
            # row i = log Q(· | x_<i) over the q symbols; mass: the mean probability of the b·L rows off them
            log_rows, mass = symbol_log_probabilities(model(inputs).logits, num_symbols)  # (b, L, q)
            symbol = (x >= 0) & (x < num_symbols)  # (b, L)
            log_leaf = log_rows.gather(-1, torch.where(symbol, x, 0)[..., None])[..., 0]  # (b, L)
            log_leaf = torch.where(symbol, log_leaf, -math.inf)
            out[start:start + batch_size] = log_leaf.sum(1).cpu()
            off_symbols += mass * x.shape[0]
    return out, off_symbols / max(1, leaves.shape[0])


def sequence_log_probabilities(model, leaves, *, batch_size: int = 4096, num_symbols: int | None = None
                               ) -> torch.Tensor:
    """log Q(x) of a causal model: Σ_i log softmax(logits)[i, x_i] from one forward of ``[BOS, x_0 .. x_{L-2}]``.

    Args:
        model: a TreeLangForCausalLM (or any model with its input layout and ``config.bos_token_id``: a causal
            architecture of transformers fitted to the TreeLang vocabulary, whose rows are renormalised over the q
            symbols, module docstring).
        leaves: (n, L) integer symbols in [0, q).
        batch_size: sequences per forward (memory only).
        num_symbols: q; ``None`` reads it from a TreeLang model's config.

    Returns:
        (n,) float64 on the CPU, in nats.
    """
    batch_size = check_positive("batch_size", batch_size)
    return _score_sequences(model, leaves, _num_symbols(model, num_symbols), batch_size)[0]


def generate_samples(model, num_samples: int, *, seed: int, batch_size: int = 4096, num_symbols: int | None = None,
                     length: int | None = None) -> torch.Tensor:
    """``num_samples`` whole sequences of the model, ``generate(BOS, do_sample=True)`` batch after batch.

    Seeded inside :func:`torch.random.fork_rng`: the caller's global generators are left as they were. Sampling is
    from the full softmax (temperature 1, top-k and top-p off), whatever generation_config.json says; for another
    architecture, from its softmax over the q symbols (the special ids suppressed, module docstring).

    Args:
        num_symbols: q; ``None`` reads it from a TreeLang model's config.
        length: L = 2**ℓ leaves per sample; ``None`` reads it from a TreeLang model's config.

    Returns:
        (n, L) int64 on the CPU: the leaves after BOS.
    """
    num_samples = check_int("num_samples", num_samples, 1, MAX_SAMPLES)
    batch_size = check_positive("batch_size", batch_size)
    suppressed = special_token_ids(model, _num_symbols(model, num_symbols))
    device = next(model.parameters()).device
    bos = int(model.config.bos_token_id)
    length = int(model.config.sequence_length) if length is None else check_positive("length", length)
    options = {"suppress_tokens": suppressed} if suppressed else {}
    cuda = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
    batches = []
    with torch.random.fork_rng(devices=cuda), torch.inference_mode():
        torch.manual_seed(seed)
        for start in range(0, num_samples, batch_size):
            size = min(batch_size, num_samples - start)
            prompt = torch.full((size, 1), bos, dtype=torch.long, device=device)  # (b, 1)
            sequences = model.generate(prompt, do_sample=True, max_new_tokens=length, max_length=None,
                                       temperature=1.0, top_k=0, top_p=1.0, **options)  # (b, 1 + L)
            if sequences.shape[1] != 1 + length:
                raise ValueError(f"{model.config.model_type} generated sequences of {sequences.shape[1] - 1} tokens "
                                 f"after BOS, not the {length} leaves asked for (does its generation config stop "
                                 "early?)")
            batches.append(sequences[:, 1:].cpu())
    return torch.cat(batches)  # (n, L)


def score_model_generation(
    model,
    grammar: Grammar,
    *,
    depth: int,
    filter_level: int,
    num_samples: int = 10_000,
    seed: int = 20_240_604,
    batch_size: int = 4096,
) -> GenerationResult:
    """Both KLs for any causal model in TreeLangForCausalLM's layout; :func:`score_generation` loads a checkpoint.

    Args:
        model: the causal model (eval mode; on its device): TreeLang's, or a causal architecture of transformers
            fitted to the TreeLang vocabulary (q from the grammar, s**ℓ leaves from ``depth``).
        grammar: the grammar of the data; P is BP_{filter_level} of it.
        depth: ℓ (the model generates s**ℓ leaves, 2**ℓ for the paper's grammars).
        filter_level: k_train, the level of the true data and of the oracle.
        num_samples: N generated and N true sequences, in [1, MAX_SAMPLES].
        seed: the model's samples; the true sequences use seed + 1. In [0, MAX_SEED].
        batch_size: sequences per generate / forward / BP pass (the samples depend on it, see the module docstring).
    """
    num_samples = check_int("num_samples", num_samples, 1, MAX_SAMPLES)
    seed = check_int("seed", seed, 0, MAX_SEED)
    batch_size = check_positive("batch_size", batch_size)
    treelang = model.config.model_type == TREELANG
    length = grammar.arity**depth  # L = s**l leaves
    if treelang and int(model.config.sequence_length) != length:
        raise ValueError(f"depth must be the model's: it generates {model.config.sequence_length} leaves, and depth "
                         f"{depth} of this grammar of arity {grammar.arity} has {length}")
    q = grammar.num_symbols
    bp = BeliefPropagation(grammar, depth, filter_level, on_impossible="flag")
    generated = generate_samples(model, num_samples, seed=seed, batch_size=batch_size, num_symbols=q,
                                 length=length)  # (n, L)
    data = torch.as_tensor(sample_trees(grammar, num_samples, depth, filter_level, seed + 1).leaves)  # (n, L)
    special = ((generated < 0) | (generated >= q)).any(1)  # (n,) samples holding an id that is not a symbol

    def log_grammar(leaves, outside=None):  # (n,) log P, -inf where P = 0 (and for a sample off the symbols)
        if outside is not None and outside.any():
            leaves = torch.where(outside[:, None], 0, leaves)
        log_p = torch.cat([bp.log_likelihood(leaves[s:s + batch_size]) for s in range(0, len(leaves), batch_size)])
        return log_p if outside is None else torch.where(outside, -math.inf, log_p.double())

    generated_log_model, generated_mass = _score_sequences(model, generated, q, batch_size)
    data_log_model, data_mass = _score_sequences(model, data, q, batch_size)
    return GenerationResult(
        depth=depth,
        filter_level=filter_level,
        num_symbols=grammar.num_symbols,
        seed=seed,
        generated=generated.numpy(),
        generated_log_model=generated_log_model.numpy(),
        generated_log_grammar=log_grammar(generated, special).double().numpy(),
        data=data.numpy(),
        data_log_model=data_log_model.numpy(),
        data_log_grammar=log_grammar(data).double().numpy(),
        mass_on_special_tokens={"generated": generated_mass, "data": data_mass},
        num_special_samples=int(special.sum()),
    )


def score_generation(
    checkpoint,
    *,
    num_samples: int = 10_000,
    seed: int = 20_240_604,
    batch_size: int = 4096,
    device="cpu",
) -> GenerationResult:
    """``hf-treelang generate``: sample a causal checkpoint and score both directions with the exact oracle.

    Args:
        checkpoint: a TreeLangForCausalLM run or model folder, a causal run of another architecture (``run_clm.py
            --model_type``), or a loaded causal :class:`~hf_treelang.analysis.Checkpoint`; its grammar, ℓ and
            k_train define the data and the oracle.
        num_samples: N generated and N true sequences, in [1, MAX_SAMPLES]; checked before anything is loaded,
            and refused after loading (before any sampling) when the estimated peak memory
            (:func:`hf_treelang.core.resources.generation_bytes`) exceeds the machine's.
        seed, batch_size: see :func:`score_model_generation`.
        device: where the model runs (BP runs on the CPU).
    """
    num_samples = check_int("num_samples", num_samples, 1, MAX_SAMPLES)
    seed = check_int("seed", seed, 0, MAX_SEED)
    batch_size = check_positive("batch_size", batch_size)
    if isinstance(checkpoint, Checkpoint):
        ckpt = as_checkpoint(checkpoint, task=NEXT_LEAF_TASK)
    else:
        ckpt = load_causal_checkpoint(checkpoint, device=device, needed_by="generate")
    model = model_sizes(ckpt.config, ckpt.depth, ckpt.num_symbols)
    check_memory({"--num-samples": num_samples},
                 lambda sizes: generation_bytes(sizes["--num-samples"], batch_size, model),
                 what=f"N generated and N true sequences with their BP scores at depth {ckpt.depth}")
    return score_model_generation(ckpt.model, ckpt.grammar, depth=ckpt.depth, filter_level=ckpt.filter_level,
                                  num_samples=num_samples, seed=seed, batch_size=batch_size)


def plot_generation(result: GenerationResult):
    """Histograms of the per-sequence log-ratios of both directions, their means (the KLs) as vertical lines."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.6), squeeze=False)
    panels = (
        ("model samples: log Q − log P", result.generated_log_model, result.generated_log_grammar,
         result.kl_model_data, "KL(model ‖ data)", level_color(result.filter_level, result.depth)),
        ("true sequences: log P − log Q", result.data_log_grammar, result.data_log_model, result.kl_data_model,
         "KL(data ‖ model)", "black"),
    )
    for ax, (xlabel, numerator, denominator, kl, name, color) in zip(axes[0], panels):
        ratios = _log_ratio(numerator, denominator)
        finite = ratios[np.isfinite(ratios)]
        if finite.size:
            ax.hist(finite, bins=min(60, max(10, int(math.sqrt(finite.size)))), color=color, alpha=0.6)
        if kl.finite_estimate is not None:
            ax.axvline(kl.finite_estimate, color=color, lw=1.2, ls="--")
        ax.axvline(0.0, color="grey", lw=0.8, ls=":")
        title = f"{name} = {kl.describe('nats', 3)}"
        if kl.num_infinite:
            title = f"{name} = +inf\n({kl.num_infinite} of {kl.num_sequences} of probability zero, not drawn)"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(f"{xlabel} (nats)")
        ax.set_ylabel("sequences")
    fig.suptitle(f"Generation vs the exact oracle BP$_{{{result.filter_level}}}$ (ℓ={result.depth}, "
                 f"q={result.num_symbols}, N={result.num_samples})", fontsize=10)
    fig.tight_layout()
    return fig


def write_outputs(result: GenerationResult, out_dir) -> dict:
    """Write generate.png and generate.json into ``out_dir``; returns their paths."""
    out = prepare_output(out_dir)
    paths = {"figure": save_figure(plot_generation(result), out / "generate.png")}
    paths["json"] = write_json(out / "generate.json", result.to_dict())
    return paths


def summary_lines(result: GenerationResult) -> list:
    """The two KLs ± standard error, the log-likelihoods for comparison and the counts, one line each."""
    generated, data = result.log_likelihood("generated"), result.log_likelihood("data")

    def per_leaf(entry):
        if entry["per_leaf"] is None:
            return "n/a"
        return f"{entry['per_leaf']:.4f} ± {standard_error_text(entry['per_leaf_standard_error'])}"

    impossible = f", {generated['num_impossible']} of probability zero left out" if generated["num_impossible"] else ""
    mass = result.mass_on_special_tokens
    special = ([f"mass on special tokens (renormalised away): {mass['generated']:.3g} on the generated rows, "
                f"{mass['data']:.3g} on the true rows; {result.num_special_samples} samples held a special id"]
               if any(mass.values()) or result.num_special_samples else [])
    return [
        f"KL(model ‖ data) = {result.kl_model_data.describe('nats per sequence')}  (N = {result.num_samples} "
        "samples of the model)",
        f"KL(data ‖ model) = {result.kl_data_model.describe('nats per sequence')}  (N = {result.num_samples} true "
        f"sequences, k = {result.filter_level})",
        f"log P per leaf: generated {per_leaf(generated)}{impossible}; true {per_leaf(data)}; entropy rate "
        f"{result.entropy_rate.describe('nats per leaf')}",
        *special,
    ]


def run(args) -> int:
    """``hf-treelang generate`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    try:
        check_int("num_samples", args.num_samples, 1, MAX_SAMPLES)
        check_int("seed", args.seed, 0, MAX_SEED)
        check_positive("batch_size", args.batch_size)
        if args.threads is not None:
            torch.set_num_threads(check_positive("threads", args.threads))
        result = score_generation(args.run, num_samples=args.num_samples, seed=args.seed,
                                  batch_size=args.batch_size, device=args.device)
    except (ValueError, TypeError) as error:
        return cli_error("generate", error)
    paths = write_outputs(result, args.out)
    for line in summary_lines(result):
        print(line)
    print(f"wrote {paths['figure']} and {paths['json']}")
    return 0


__all__ = [
    "MAX_SAMPLES",
    "MeanEstimate",
    "GenerationResult",
    "generate_samples",
    "plot_generation",
    "score_generation",
    "score_model_generation",
    "sequence_log_probabilities",
    "special_token_ids",
    "summary_lines",
    "write_outputs",
]
