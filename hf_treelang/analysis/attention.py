"""Average attention maps (paper Fig. 1e, Fig. 4, App. E.5): every layer's attention matrix averaged over inputs.

The inputs are in-sample: fresh sequences of the checkpoint's own data distribution (grammar, depth ℓ, k_train),
with one masked leaf per sequence at a random position for an MLM checkpoint (as in training) and none for a root
classifier. Several checkpoints give a grid, one row per model (e.g. k_train = 0 … ℓ as in Fig. 4).

With ``--template`` (:func:`template_dynamics`) the checkpoints of one training run, in step order, are compared with
the attention of App. F's transformer implementation of BP (:mod:`hf_treelang.core.attention_template`: template
layer t makes leaf i attend uniformly to the 2**(t−1) leaves that share its ancestor at tree level ℓ − t but not the
one below): each layer's map, averaged over inputs and heads, gets a similarity to every template, 1 − mean over rows
of the total-variation distance, step by step.

Any architecture with attention reads the same way: a run of another type (``--model_type bert|gpt2|llama|...``) is
loaded with the eager attention implementation, the one that returns its maps (``output_attentions=True``). An
architecture without attention (Mamba, RWKV, ...) is refused in one line before any input is drawn.

Dimension glossary: ``n`` sequences, ``L = 2**ℓ`` positions, ``h`` heads, ``c`` checkpoints of a run, ``t``
template layer in 1 … ℓ.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hf_treelang.core.attention_template import template_attention, template_similarity, uniform_similarity
from hf_treelang.core.resources import attention_bytes, check_memory, model_sizes
from hf_treelang.core.sampling import sample_trees
from hf_treelang.core.masking import mask_evaluation_set
from hf_treelang.core.oracle import NEXT_LEAF_TASK, next_leaf_inputs
from hf_treelang.plotting import draw_block_boundaries, level_color, pyplot, save_figure
from hf_treelang.train.folders import RUN_CONFIG, check_run_complete, checkpoints, is_run_folder

from .activations import check_outputs, run_with_cache
from .checkpoint import as_checkpoint
from .io import check_output_dir, check_positive, cli_error, prepare_output, write_json


@dataclass
class AttentionResult:
    """Average attention of one checkpoint.

    Attributes:
        maps: (layers, heads, L, L) attention averaged over the inputs; ``maps[i, h, a, b]`` is how much position a
            attends to position b in layer i (rows sum to 1).
        checkpoint: the folder it came from.
        task: ``"mlm"``, ``"root"``, ``"clm"`` or ``None``.
        depth: ℓ.
        filter_level: k_train.
        num_samples: number of averaged inputs.
        masked: whether one leaf per input was masked.
        model_type: the architecture (``"treelang"``, ``"bert"``, ``"gpt2"``, ...).
        arity: s, the children of every node (L = s**ℓ; the maps' blocks are s**m leaves).
    """

    maps: np.ndarray
    checkpoint: str
    task: str | None
    depth: int
    filter_level: int
    num_samples: int
    masked: bool
    model_type: str = "treelang"
    arity: int = 2

    @property
    def label(self) -> str:
        """The row's name in a grid: the task, k_train and which checkpoint (``step N`` for a ``checkpoint-N``
        folder, else the folder's name), so that rows of one run's checkpoints are told apart."""
        task = {"mlm": "MLM", "root": "root", NEXT_LEAF_TASK: "causal"}.get(self.task, "encoder")
        if self.model_type != "treelang":
            task = f"{self.model_type} {task}"
        folder = Path(self.checkpoint).name
        match = re.fullmatch(r"checkpoint-(\d+)", folder)
        return f"{task}, k_train={self.filter_level}, " + (f"step {match.group(1)}" if match else folder)

    def to_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint,
            "task": self.task,
            "depth": self.depth,
            "filter_level": self.filter_level,
            "num_samples": self.num_samples,
            "masked": self.masked,
            "model_type": self.model_type,
            **({"arity": self.arity} if self.arity != 2 else {}),  # the paper's trees: the file it always was
            "maps": np.round(self.maps, 6),
        }


@torch.no_grad()
def average_attention(
    checkpoint,
    *,
    num_samples: int = 10_000,
    seed: int = 20_240_602,
    mask: bool | None = None,
    batch_size: int = 512,
    device="cpu",
) -> AttentionResult:
    """Every layer's attention matrix, averaged over ``num_samples`` in-sample inputs (10^4 in the paper).

    Args:
        checkpoint: a checkpoint folder (any task; TreeLang's or a run of another architecture with attention) or a
            loaded checkpoint.
        num_samples: inputs averaged over; refused before any sampling when the estimated peak memory
            (:func:`hf_treelang.core.resources.attention_bytes`) exceeds the machine's.
        seed: seed of the inputs (and of the masked positions).
        mask: mask one leaf per input; ``None`` masks for an MLM checkpoint only, as in its training. A causal
            checkpoint reads its own input layout ``[BOS, x_0 .. x_{L-2}]`` (row i predicts leaf i; no mask).
        batch_size: inference batch size.
    """
    ckpt = as_checkpoint(checkpoint, device=device)
    num_samples = check_positive("num_samples", num_samples)
    batch_size = check_positive("batch_size", batch_size)
    check_outputs(ckpt, attentions=True)
    check_attention_memory(ckpt, num_samples, batch_size)
    causal = ckpt.task == NEXT_LEAF_TASK
    if causal and mask:
        raise ValueError("mask: a causal (next-leaf) model reads whole prefixes, never a masked leaf; leave mask unset")
    masked = ckpt.task == "mlm" if mask is None else bool(mask)
    leaves = sample_trees(ckpt.grammar, num_samples, ckpt.depth, ckpt.filter_level, seed).leaves  # (n, L)
    if masked:
        leaves, _, _ = mask_evaluation_set(leaves, ckpt.mask_token_id, seed)
    if causal:  # [BOS, x_0 .. x_{L-2}]: row i is the attention of the position that predicts leaf i
        leaves = next_leaf_inputs(leaves, ckpt.grammar.num_symbols)  # (n, L)
    cache = run_with_cache(ckpt, leaves, logits=False, attentions=True, batch_size=batch_size)
    return AttentionResult(
        maps=(cache.attention_sum / num_samples).numpy(),  # (layers, h, L, L)
        checkpoint=str(ckpt.path),
        task=ckpt.task,
        depth=ckpt.depth,
        filter_level=ckpt.filter_level,
        num_samples=num_samples,
        masked=masked,
        model_type=ckpt.model_type,
        arity=ckpt.arity,
    )


def attention_grid(checkpoints, **kwargs) -> list:
    """:func:`average_attention` of several checkpoints (rows of Fig. 4); all are validated before any runs."""
    if not checkpoints:
        raise ValueError("checkpoints must name at least one TreeLang checkpoint folder, got none")
    loaded = [as_checkpoint(c, device=kwargs.get("device", "cpu")) for c in checkpoints]
    for ckpt in loaded:  # an architecture without attention, or over the machine's memory: refused before any runs
        check_outputs(ckpt, attentions=True)
        check_attention_memory(ckpt, kwargs.get("num_samples", 10_000), kwargs.get("batch_size", 512))
    return [average_attention(c, **kwargs) for c in loaded]


def check_attention_memory(ckpt, num_samples: int, batch_size: int) -> None:
    """Refuse a ``num_samples`` whose estimated peak memory (:func:`hf_treelang.core.resources.attention_bytes`)
    exceeds the machine's, naming --num-samples and the largest that fits."""
    num_samples = check_positive("num_samples", num_samples)
    batch_size = check_positive("batch_size", batch_size)
    model = model_sizes(ckpt.config, ckpt.depth, ckpt.num_symbols)
    check_memory({"--num-samples": num_samples},
                 lambda sizes: attention_bytes(sizes["--num-samples"], batch_size, model),
                 what=f"{ckpt.num_layers} layers' attention at depth {ckpt.depth}")


def _draw_map(fig, ax, matrix: np.ndarray, depth: int, arity: int = 2) -> None:
    """One (L, L) attention map as every figure here draws it: viridis from 0, position ticks, its own colour bar and
    the tree's blocks (s**m leaves) drawn faintly."""
    num_leaves = matrix.shape[-1]
    ticks = list(range(0, num_leaves, max(1, num_leaves // 8)))
    image = ax.imshow(matrix, cmap="viridis", vmin=0.0, interpolation="nearest")
    draw_block_boundaries(ax, depth, arity=arity)
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.tick_params(labelsize=6, length=2)
    bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
    bar.ax.tick_params(labelsize=6)


def plot_attention(results: list):
    """One row per checkpoint, one panel per layer (heads averaged), as the paper's Fig. 4.

    Each panel has its own colour bar (attention weight, rows sum to 1), position ticks and the boundaries of the
    tree's blocks (subtrees of levels 1-3) drawn faintly.
    """
    plt = pyplot()
    rows = len(results)
    cols = max(r.maps.shape[0] for r in results)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.7 * rows + 0.4), squeeze=False)
    for row, result in enumerate(results):
        for layer in range(cols):
            ax = axes[row][layer]
            if layer >= result.maps.shape[0]:
                ax.axis("off")
                continue
            _draw_map(fig, ax, result.maps[layer].mean(0), result.depth, result.arity)
            if row == 0:
                ax.set_title(f"layer {layer + 1}", fontsize=9)
            if row == rows - 1:
                ax.set_xlabel("attended position", fontsize=7)
            if layer == 0:
                ax.set_ylabel(f"{result.label}\nquery position", fontsize=8)
    fig.suptitle(f"Average attention over {results[0].num_samples} in-sample inputs (faint lines: the tree's blocks)",
                 fontsize=10)
    fig.tight_layout()
    return fig


def write_outputs(results: list, out_dir) -> dict:
    """Write attention.png and attention.json (every map, per head) into ``out_dir``."""
    out = prepare_output(out_dir)
    paths = {"figure": save_figure(plot_attention(results), out / "attention.png")}
    paths["json"] = write_json(out / "attention.json", {"models": [r.to_dict() for r in results]})
    return paths


# ---------------------------------------------------------------- App. F's template along training (--template)

TEMPLATE_FILES = ("attention_template.png", "attention_template.json")
RUN_FOLDER = "a complete training run folder (its checkpoint-<step> folders, trainer_state.json and final model)"


@dataclass
class TemplateResult:
    """Every layer's average attention along one training run, compared with App. F's templates.

    Attributes:
        run: the run folder.
        steps: (c,) the training step of each compared model, increasing; the last is the final model.
        checkpoints: (c,) the folder of each (``checkpoint-<step>``, the run folder for the final model).
        maps: (c, layers, L, L) attention averaged over the inputs and the heads.
        similarity: (c, layers, ℓ): ``[c, i, t - 1]`` = :func:`~hf_treelang.core.template_similarity` of layer
            i + 1's map at step ``steps[c]`` to template layer t.
        task: ``"mlm"``, ``"root"`` or ``None``.
        depth: ℓ.
        filter_level: k_train.
        num_samples: inputs averaged over (the same inputs for every checkpoint).
        seed: seed of the inputs (and of the masked positions).
        masked: whether one leaf per input was masked.
    """

    run: str
    steps: np.ndarray
    checkpoints: list
    maps: np.ndarray
    similarity: np.ndarray
    task: str | None
    depth: int
    filter_level: int
    num_samples: int
    seed: int
    masked: bool

    @property
    def best_template(self) -> np.ndarray:
        """(c, layers) the template layer t in 1 … ℓ each layer's map is most similar to."""
        return self.similarity.argmax(-1) + 1

    @property
    def settled_steps(self) -> list:
        """Per layer: the first step from which its best template stays the final one to the end."""
        best = self.best_template  # (c, layers)
        settled = []
        for layer in range(best.shape[1]):
            c = len(self.steps) - 1
            while c > 0 and best[c - 1, layer] == best[-1, layer]:
                c -= 1
            settled.append(int(self.steps[c]))
        return settled

    def final_layers(self) -> list:
        """Per layer at the final step: the closest template, its similarity, since when it is the closest, whether
        it beats the uniform map's similarity to that template (a near-uniform map is "closest" to template ℓ, at ½),
        and App. F's own template of that layer (t = the layer's index) with its similarity."""
        best, settled = self.best_template, self.settled_steps
        final = []
        for layer in range(self.maps.shape[1]):
            own = layer + 1 if layer < self.depth else None  # App. F's layer m + 1 uses template m + 1
            final.append({
                "layer": layer + 1,
                "best_template": int(best[-1, layer]),
                "similarity": float(self.similarity[-1, layer, best[-1, layer] - 1]),
                "best_since_step": settled[layer],
                "above_uniform": bool(self.similarity[-1, layer, best[-1, layer] - 1]
                                      > uniform_similarity(self.depth, int(best[-1, layer]))),
                "app_f_template": own,
                "app_f_similarity": None if own is None else float(self.similarity[-1, layer, own - 1]),
            })
        return final

    def to_dict(self) -> dict:
        best = self.best_template
        return {
            "run": self.run,
            "task": self.task,
            "depth": self.depth,
            "filter_level": self.filter_level,
            "num_samples": self.num_samples,
            "seed": self.seed,
            "masked": self.masked,
            "similarity": "1 - mean over rows of the total-variation distance to template_attention(depth, t)",
            "templates": [{"layer": t, "level": self.depth - t, "attended_leaves": 2 ** (t - 1),
                           "uniform_similarity": uniform_similarity(self.depth, t)} for t in range(1, self.depth + 1)],
            "checkpoints": [{"step": int(step), "checkpoint": path, "maps": np.round(self.maps[c], 6),
                             "similarity": self.similarity[c], "best_template": best[c]}
                            for c, (step, path) in enumerate(zip(self.steps, self.checkpoints))],
            "final": self.final_layers(),
        }


def _final_step(folder: Path) -> int:
    try:
        return int(json.loads((folder / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"run {str(folder)!r} must be {RUN_FOLDER}: its trainer_state.json is missing or has no "
                         "global_step") from None


def run_checkpoints(run) -> list:
    """The models of a training run in step order: [(step, folder)], every ``checkpoint-<step>`` then the final
    model (the run folder itself, at trainer_state.json's global step; a checkpoint of that same step is left out).
    A finished folder of a model built rather than trained (``hf-treelang construct``: no checkpoints, no
    trainer_state.json) is its one model, at step 0."""
    if run is None or str(run) == "":
        raise ValueError(f"run must be {RUN_FOLDER}, got {run!r}")
    folder = Path(run)
    if not folder.is_dir():
        raise ValueError(f"run {str(folder)!r} must be {RUN_FOLDER}, but it "
                         f"{'is a file' if folder.exists() else 'does not exist'}")
    if not is_run_folder(folder):
        raise ValueError(f"run {str(folder)!r} must be {RUN_FOLDER}, but it has no {RUN_CONFIG} (a model or checkpoint "
                         "folder: compare its maps without --template)")
    check_run_complete(folder, "run")
    if not (folder / "trainer_state.json").is_file() and not checkpoints(folder):
        return [(0, folder)]  # a model built, not trained (hf-treelang construct): itself, at step 0
    final = _final_step(folder)
    return [*((step, path) for step, path in checkpoints(folder) if step != final), (final, folder)]


@torch.no_grad()
def template_dynamics(
    run,
    *,
    num_samples: int = 10_000,
    seed: int = 20_240_602,
    mask: bool | None = None,
    batch_size: int = 512,
    device="cpu",
) -> TemplateResult:
    """Every layer's average attention at every checkpoint of ``run``, and its similarity to App. F's templates.

    Every checkpoint is loaded (and so validated) before any is run; all see the same ``num_samples`` inputs, drawn
    from the run's grammar (a ``checkpoint-<step>`` folder reads its run folder's grammar.json). A run of another
    arity than 2 is refused in one line: App. F's construction is for binary trees.

    Args:
        run: a complete training run folder (``training/run_mlm.py`` / ``run_root.py``'s ``--output_dir``).
        num_samples, seed, mask, batch_size, device: as :func:`average_attention`.
    """
    steps, folders = zip(*run_checkpoints(run))
    final = as_checkpoint(folders[-1], device=device)
    if final.arity != 2:
        raise ValueError(f"run {str(final.path)!r} has trees of arity {final.arity}: App. F's templates are its "
                         "construction of BP on binary trees (each leaf's path a string of left/right turns); compare "
                         "the maps without --template")
    check_outputs(final, attentions=True)
    loaded = [as_checkpoint(f, device=device) for f in folders[:-1]]  # each with its run's grammar.json
    loaded.append(final)
    for ckpt in loaded:
        if (ckpt.depth, ckpt.filter_level, ckpt.num_layers) != (final.depth, final.filter_level, final.num_layers):
            raise ValueError(f"checkpoint {ckpt.describe()} does not match the run's final model "
                             f"{final.describe()} ({final.num_layers} layers)")
        check_attention_memory(ckpt, num_samples, batch_size)
    results = [average_attention(c, num_samples=num_samples, seed=seed, mask=mask, batch_size=batch_size)
               for c in loaded]
    maps = np.stack([r.maps.mean(1) for r in results])  # (c, layers, L, L), heads averaged
    return TemplateResult(
        run=str(final.path),
        steps=np.array(steps, dtype=np.int64),
        checkpoints=[str(c.path) for c in loaded],
        maps=maps,
        similarity=template_similarity(maps, final.depth),  # (c, layers, ℓ)
        task=final.task,
        depth=final.depth,
        filter_level=final.filter_level,
        num_samples=results[-1].num_samples,
        seed=seed,
        masked=results[-1].masked,
    )


def describe_template(layer: int, depth: int) -> str:
    """Words for template layer t: the leaves a leaf attends to."""
    if layer == 1:
        return "the sibling leaf"
    if layer == depth:
        return f"the other half, {2 ** (layer - 1)} leaves"
    return f"the other {2 ** (layer - 1)} leaves under the level-{depth - layer} ancestor"


def plot_template_dynamics(result: TemplateResult):
    """Three rows: App. F's templates, the final model's maps (drawn alike), and each layer's similarity to every
    template over training (one panel per model layer, one line per template in the colour of BP_k, k = ℓ − t; App.
    F's own template of the layer drawn thicker; dotted: the similarity of the uniform map, 2**(t−1) / 2**ℓ). The
    step axis is logarithmic, step 0 (a model built, not trained: ``hf-treelang construct``) drawn at 0.5."""
    plt = pyplot()
    depth, layers = result.depth, result.maps.shape[1]
    steps = np.where(np.asarray(result.steps) > 0, result.steps, 0.5)  # (c,) step 0 drawn at 0.5 on the log axis
    cols = max(depth, layers)
    fig, axes = plt.subplots(3, cols, figsize=(3.0 * cols, 8.6), squeeze=False,
                             gridspec_kw={"height_ratios": [1.0, 1.0, 1.15]})
    for col in range(cols):
        if col < depth:
            _draw_map(fig, axes[0][col], template_attention(depth, col + 1), depth)
            axes[0][col].set_title(f"App. F layer {col + 1}: level {depth - col - 1}", fontsize=9)
        else:
            axes[0][col].axis("off")
        if col >= layers:
            axes[1][col].axis("off")
            axes[2][col].axis("off")
            continue
        _draw_map(fig, axes[1][col], result.maps[-1, col], depth)
        axes[1][col].set_title(f"model layer {col + 1}, step {result.steps[-1]}", fontsize=9)
        ax = axes[2][col]
        for t in range(1, depth + 1):
            color = level_color(depth - t, depth)
            ax.plot(steps, result.similarity[:, col, t - 1], marker="o", ms=3, color=color,
                    lw=2.2 if t == col + 1 else 1.1, label=f"template {t} (level {depth - t})")
            ax.axhline(uniform_similarity(depth, t), color=color, ls=":", lw=0.8, alpha=0.6)
        ax.set_xscale("log")
        ax.set_ylim(0.0, 1.02)
        ax.set_xlabel("training step (step 0 at 0.5)" if 0 in result.steps else "training step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_title(f"layer {col + 1} vs App. F templates", fontsize=9)
        if col == 0:
            ax.set_ylabel("1 − mean TV distance", fontsize=8)
            ax.legend(fontsize=6)
    axes[0][0].set_ylabel("template\nquery position", fontsize=8)
    axes[1][0].set_ylabel("model\nquery position", fontsize=8)
    task = {"mlm": "MLM", "root": "root"}.get(result.task, "encoder")
    fig.suptitle(f"Attention vs App. F's BP construction ({task}, k_train={result.filter_level}, ℓ={depth}; "
                 f"{result.num_samples} in-sample inputs per checkpoint)", fontsize=10)
    fig.tight_layout()
    return fig


def write_template_outputs(result: TemplateResult, out_dir) -> dict:
    """Write attention_template.png and attention_template.json into ``out_dir``."""
    out = prepare_output(out_dir)
    paths = {"figure": save_figure(plot_template_dynamics(result), out / TEMPLATE_FILES[0])}
    paths["json"] = write_json(out / TEMPLATE_FILES[1], result.to_dict())
    return paths


def template_summary_lines(result: TemplateResult) -> list:
    """What the console says: per layer, the template it ends closest to, since when, and App. F's own."""
    steps = result.steps
    lines = [f"{len(steps)} models of {result.run} (steps {steps[0]} … {steps[-1]}), {result.num_samples} in-sample "
             "inputs each; similarity = 1 − mean total-variation distance to App. F's template"]
    for entry in result.final_layers():
        t, own = entry["best_template"], entry["app_f_template"]
        which = ("App. F's own: " if own == t else "") + describe_template(t, result.depth)
        uniform = f"a uniform map: {uniform_similarity(result.depth, t):.3f}"
        if not entry["above_uniform"]:
            uniform += ", no closer"
        line = (f"layer {entry['layer']}: closest to template {t} ({which}): similarity "
                f"{entry['similarity']:.3f} at step {steps[-1]} ({uniform}), closest since step "
                f"{entry['best_since_step']}")
        if own is not None and own != t:
            line += (f"; App. F's template {own} ({describe_template(own, result.depth)}): "
                     f"{entry['app_f_similarity']:.3f}")
        lines.append(line)
    return lines


def _run_template(args, mask) -> int:
    """``hf-treelang attention RUN --template``."""
    try:
        if len(args.checkpoints) != 1:
            raise ValueError(f"--template reads one training run folder, got {len(args.checkpoints)} paths: "
                             f"{', '.join(map(str, args.checkpoints))}")
        check_output_dir(args.out)
        result = template_dynamics(args.checkpoints[0], num_samples=args.num_samples, seed=args.seed, mask=mask,
                                   batch_size=args.batch_size, device=args.device)
    except (ValueError, TypeError) as error:
        return cli_error("attention", error)
    paths = write_template_outputs(result, args.out)
    for line in template_summary_lines(result):
        print(line)
    print(f"wrote {paths['figure']} and {paths['json']}")
    return 0


def run(args) -> int:
    """``hf-treelang attention`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    mask = {"auto": None, "yes": True, "no": False}[args.mask]
    if args.template:
        return _run_template(args, mask)
    try:
        results = attention_grid(args.checkpoints, num_samples=args.num_samples, seed=args.seed, mask=mask,
                                 batch_size=args.batch_size, device=args.device)
    except (ValueError, TypeError) as error:
        return cli_error("attention", error)
    paths = write_outputs(results, args.out)
    print(f"wrote {paths['figure']} and {paths['json']}")
    return 0
