"""The memory and time a command will need, estimated before any work, and the refusal of what does not fit.

One home for the machine's available memory (:func:`available_memory`: the one function tests replace with a stand-in
size), the working sets every estimate is built from, and the two checks every command calls:

* :func:`check_memory` refuses a value whose estimated peak memory exceeds :data:`MEMORY_FRACTION` of the memory
  available now, in one line naming the flag and the largest value that fits;
* :func:`check_time` refuses an estimated time over a stated bound the same way.

The estimates are upper bounds of what the commands hold at once, written from the arrays they build (never from a
measurement of one machine); each is a sum of working sets, per sequence unless said otherwise. Glossary: ℓ the depth,
s the arity, ``L = s**ℓ`` leaves, ``N = (s**(ℓ+1) - 1) / (s - 1)`` nodes of a tree (``2**(ℓ+1) - 1`` for the
paper's binary trees), q symbols, ``d`` the hidden size, ``d'`` the feed-forward size, ``n_L`` layers, ``h`` heads.

* a sampled tree, every level as int64 (the sampler's working set): :func:`tree_bytes` = 8 N;
* BP messages of one direction, float64 over q for every node: :func:`message_bytes` = 8 q N;
* one sequence through one layer (float32: the hidden state, the attention's inputs and output, the feed-forward
  layer and the h attention maps): :func:`layer_bytes` = 4 L (4 d + d' + 2 h L); inference holds one layer at a time
  (plus what it returns: every layer's attention maps or hidden states, :func:`inference_bytes`), a training step
  every layer with its gradients (:func:`training_step_bytes`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .params import check_real

MEMORY_FRACTION = 0.8  # of the available memory: the rest is left to the interpreter, the libraries and the system
TRAINING_STEP_FACTOR = 3  # a training step: the forward activations, their gradients and the optimizer's temporaries
DEFAULT_MAX_HOURS = 24.0  # the default time bound of an analysis that estimates its time (--max-hours)


def available_memory() -> int | None:
    """Bytes of memory this process can still use: the system's ``MemAvailable`` (Linux), lowered to what a cgroup
    memory limit leaves; None where neither can be read (then nothing is refused)."""
    available = None
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, OSError, ValueError):
            pass
    try:
        with open("/sys/fs/cgroup/memory.max") as limit, open("/sys/fs/cgroup/memory.current") as used:
            text = limit.read().strip()
            if text != "max":
                left = int(text) - int(used.read().strip())
                available = left if available is None else min(available, left)
    except (OSError, ValueError):
        pass
    return available


def memory_budget() -> int | None:
    """The bytes a command may plan to use: :data:`MEMORY_FRACTION` of :func:`available_memory` (None: unknown)."""
    available = available_memory()
    return None if available is None else int(available * MEMORY_FRACTION)


def num_nodes(depth: int, arity: int = 2) -> int:
    """N, the nodes of a tree of depth ℓ and arity s: (s**(ℓ+1) - 1) / (s - 1)."""
    return (arity ** (depth + 1) - 1) // (arity - 1)


def tree_bytes(depth: int, arity: int = 2) -> int:
    """One sampled tree, every level as int64: 8 N bytes."""
    return 8 * num_nodes(depth, arity)


def message_bytes(depth: int, num_symbols: int, arity: int = 2) -> int:
    """BP's messages of one direction for one tree: float64 over q for every node, 8 q N bytes."""
    return 8 * num_symbols * num_nodes(depth, arity)


def _shape(config) -> tuple:
    """(ℓ, s, q, L) of a config (``arity`` 2 when it has none)."""
    depth, arity = int(config.depth), int(getattr(config, "arity", 2) or 2)
    return depth, arity, int(config.num_symbols), arity**depth


@dataclass(frozen=True)
class ModelSizes:
    """What the estimates read of a model: ℓ, q, s and its sizes (d, d', n_L, h)."""

    depth: int
    num_symbols: int
    arity: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    classifier_hidden_size: int = 0
    parameters: int | None = None  # the exact count where it is known (another architecture, counted on meta)


def model_sizes(config, depth: int, num_symbols: int, arity: int | None = None,
                parameters: int | None = None) -> ModelSizes:
    """The :class:`ModelSizes` of a model config of any architecture on data of depth ℓ, arity s and q symbols, read
    under transformers' common names (``hidden_size``, ``intermediate_size``, ``num_hidden_layers``,
    ``num_attention_heads``; GPT-2's ``n_inner``); a feed-forward size the config does not name is taken as 4 d, a
    layer or head count as 1, an arity not given as the config's ``arity`` (2 without one). ``parameters``: the
    model's exact parameter count, where known (:func:`parameter_count` then returns it)."""
    hidden = int(getattr(config, "hidden_size", None) or getattr(config, "d_model", None) or 0)
    return ModelSizes(
        depth=int(depth), num_symbols=int(num_symbols), arity=int(arity or getattr(config, "arity", 2) or 2),
        hidden_size=hidden,
        intermediate_size=int(getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None)
                              or 4 * hidden),
        num_hidden_layers=int(getattr(config, "num_hidden_layers", None) or 1),
        num_attention_heads=int(getattr(config, "num_attention_heads", None) or 1),
        classifier_hidden_size=int(getattr(config, "classifier_hidden_size", 0) or 0),
        parameters=None if parameters is None else int(parameters))


def layer_bytes(config) -> int:
    """One sequence through one layer of a ``TreeLangConfig`` (float32: the hidden state, the attention's inputs and
    output, the feed-forward layer and the h attention maps): 4 L (4 d + d' + 2 h L) bytes."""
    length = _shape(config)[3]
    return 4 * length * (4 * int(config.hidden_size) + int(config.intermediate_size)
                         + 2 * int(config.num_attention_heads) * length)


def inference_bytes(config, *, attentions: bool = False, hidden_states: bool = False) -> int:
    """One sequence through the model without gradients: one layer's working set at a time, plus every layer's
    attention maps (4 n_L h L²) or hidden states (4 (n_L + 1) L d) when they are returned."""
    length, layers = _shape(config)[3], int(config.num_hidden_layers)
    kept = 4 * layers * int(config.num_attention_heads) * length**2 if attentions else 0
    kept += 4 * (layers + 1) * length * int(config.hidden_size) if hidden_states else 0
    return layer_bytes(config) + kept


def training_step_bytes(config) -> int:
    """One sequence of a training step: every layer's working set kept for the backward pass, with their gradients
    and the optimizer's temporaries (:data:`TRAINING_STEP_FACTOR` × (n_L + 1) × :func:`layer_bytes`)."""
    return TRAINING_STEP_FACTOR * (int(config.num_hidden_layers) + 1) * layer_bytes(config)


# ---------------------------------------------------------------- each command's peak, from the working sets above


def attention_bytes(num_samples: int, batch_size: int, config) -> int:
    """``hf-treelang attention``: the n sampled trees, three (n, L) int64 input copies (sampled, masked, shifted),
    one batch through the model with every attention map returned, and the float64 sums of the maps (n_L h L²)."""
    depth, arity, _, length = _shape(config)
    maps = 8 * int(config.num_hidden_layers) * int(config.num_attention_heads) * length**2
    return (num_samples * (tree_bytes(depth, arity) + 3 * 8 * length)
            + min(batch_size, num_samples) * inference_bytes(config, attentions=True) + maps)


def calibration_bytes(num_samples: int, batch_size: int, config) -> int:
    """``hf-treelang calibration``: per sequence, the sampled tree, the uniform sequence and the two sets' (n, L)
    int64 inputs, BP's upward and downward messages and the second upward pass of the impossibility check (three
    message sets), and four (n, q) float64 arrays (model, BP, their comparison); and one batch through the model."""
    depth, arity, q, length = _shape(config)
    per_sequence = tree_bytes(depth, arity) + 3 * 8 * length + 3 * message_bytes(depth, q, arity) + 4 * 8 * q
    return num_samples * per_sequence + min(batch_size, num_samples) * inference_bytes(config)


def probe_bytes(num_sequences: int, batch_size: int, num_probed_layers: int, num_levels: int, messages: bool,
                config) -> int:
    """``hf-treelang probe``: per sequence (training, validation and test together), the sampled tree, every
    layer's float32 hidden states (n_L + 1) L d and the copy of the probed layers P L d, the targets of its V levels
    (int64 symbols L V, or with ``messages`` the float64 messages L 2 V q and BP's upward messages); and one batch
    through the model."""
    depth, arity, q, length = _shape(config)
    width = int(config.hidden_size)
    states = 4 * length * width * (int(config.num_hidden_layers) + 1 + num_probed_layers)
    targets = (8 * length * 2 * num_levels * q + message_bytes(depth, q, arity) if messages
               else 8 * length * num_levels)
    per_sequence = tree_bytes(depth, arity) + states + targets
    return num_sequences * per_sequence + min(batch_size, num_sequences) * inference_bytes(config, hidden_states=True)


def generation_bytes(num_samples: int, batch_size: int, config) -> int:
    """``hf-treelang generate``: per sequence, the generated (n, L + 1) int64 batches and their concatenation, a
    true sampled tree, its BP upward messages and eight float64 scores; and one batch through the model."""
    depth, arity, q, length = _shape(config)
    per_sequence = 2 * 8 * (length + 1) + tree_bytes(depth, arity) + message_bytes(depth, q, arity) + 8 * 8
    return num_samples * per_sequence + min(batch_size, num_samples) * inference_bytes(config)


def parameter_count(config) -> int:
    """The exact count a :class:`ModelSizes` carries (``parameters``), else an upper bound of a TreeLang model's
    parameters: per layer the attention 4 d² + 4 d, the feed-forward
    2 d d' + d + d' and two layer norms 4 d; the embedding (q + 1) d; the largest head (the root readout of every
    final token, L d q + q, or its hidden layer L d H + H q)."""
    if getattr(config, "parameters", None) is not None:  # counted exactly (another architecture, on meta)
        return int(config.parameters)
    d, ff, q = int(config.hidden_size), int(config.intermediate_size), int(config.num_symbols)
    length, hidden = _shape(config)[3], int(getattr(config, "classifier_hidden_size", 0) or 0)
    head = length * d * hidden + hidden * q + hidden if hidden else length * d * q + q
    return int(config.num_hidden_layers) * (4 * d * d + 2 * d * ff + 9 * d + ff) + (q + 1) * d + head + d * q + q


def training_bytes(*, num_sequences: int, bp_sequences: int, train_batch_size: int, eval_batch_size: int,
                   config) -> int:
    """A training run: its ``num_sequences`` sequences (every split, each a sampled tree and an (L,) int64 copy),
    the BP targets of ``bp_sequences`` (upward and downward messages), one training step
    (:func:`training_step_bytes` per sequence of the batch), one evaluation batch, and the weights, gradients and
    Adam's two moments (16 bytes per :func:`parameter_count`)."""
    depth, arity, q, length = _shape(config)
    return (num_sequences * (tree_bytes(depth, arity) + 8 * length) + bp_sequences * 2 * message_bytes(depth, q, arity)
            + train_batch_size * training_step_bytes(config) + eval_batch_size * inference_bytes(config)
            + 16 * parameter_count(config))


def format_bytes(size: float) -> str:
    """``1.5 GB``-style size (powers of 1000)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} bytes"


def _largest(fits, low: int, high: int) -> int | None:
    """The largest integer v in [low, high] with ``fits(v)`` (``fits`` grows false with v), or None."""
    if not fits(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def check_memory(sizes: dict, bytes_for, *, what: str, otherwise: str = "lower the other sizes") -> None:
    """Raise a ValueError unless ``bytes_for(sizes)`` (the estimated peak bytes of a command whose flags have the
    values ``sizes``, ``{flag: value}``, growing with each) fits :func:`memory_budget`.

    The message names the flag whose share of the estimate is the largest, the estimate, the memory available and
    what fits: the largest value of that flag, or, when even 1 does not fit, the largest value of the next flag with
    the previous ones at 1 (``otherwise`` when no flag alone is enough)."""
    budget = memory_budget()
    need = bytes_for(sizes)
    if budget is None or need <= budget:
        return
    share = {flag: need - bytes_for({**sizes, flag: 0}) for flag in sizes}
    order = sorted(sizes, key=lambda flag: -share[flag])
    lowered, fix = {}, otherwise
    for flag in order:
        others = {**sizes, **lowered}
        largest = _largest(lambda v: bytes_for({**others, flag: v}) <= budget, 1, sizes[flag] - 1) \
            if sizes[flag] > 1 else None
        if largest is not None:
            at_one = f" with {' and '.join(f'{name} 1' for name in lowered)}" if lowered else ""
            fix = f"the largest {flag} that fits{at_one} is {largest}"
            break
        lowered[flag] = 1
    first = order[0]
    raise ValueError(f"{first} {sizes[first]} needs about {format_bytes(need)} of memory ({what}), more than "
                     f"{format_bytes(budget)} ({MEMORY_FRACTION:.0%} of the memory available): {fix}")


def check_time(flag: str, value: int, seconds_for, *, bound_hours: float, bound_flag: str, low: int = 1) -> None:
    """Raise a ValueError unless ``seconds_for(value)`` (the estimated seconds with ``flag`` = ``value``, growing with
    it) is within ``bound_hours`` (set by ``bound_flag``); the message names the flag, the estimate, the bound and
    the largest value of ``flag`` within it."""
    bound_seconds = bound_hours * 3600
    seconds = seconds_for(value)
    if seconds <= bound_seconds:
        return
    largest = _largest(lambda v: seconds_for(v) <= bound_seconds, low, value - 1) if value > low else None
    fix = (f"the largest {flag} within it is {largest}" if largest is not None
           else f"even {flag} {low} takes longer")
    raise ValueError(f"{flag} {value} is estimated to take about {_hours(seconds)}, over the {bound_hours:g}-hour "
                     f"bound ({bound_flag}): {fix}, or raise {bound_flag}")


def check_max_hours(value) -> float:
    """A time bound in hours: a finite real > 0 (an error naming ``max_hours`` otherwise)."""
    hours = check_real("max_hours", value, 0.0)
    if hours == 0:
        raise ValueError("`max_hours` must be a real number > 0, got 0.0")
    return hours


def _hours(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{math.ceil(seconds / 60)} min"


__all__ = ["DEFAULT_MAX_HOURS", "MEMORY_FRACTION", "ModelSizes", "attention_bytes", "available_memory",
           "calibration_bytes", "check_max_hours", "check_memory", "check_time", "format_bytes", "generation_bytes",
           "inference_bytes", "layer_bytes", "memory_budget", "message_bytes", "model_sizes", "num_nodes",
           "parameter_count", "probe_bytes", "training_bytes", "training_step_bytes", "tree_bytes"]
