"""What every analysis shares: loading a checkpoint with clear errors, batched inference, BP comparison, output files.

Dimension glossary: ``n`` sequences, ``L = 2**ℓ`` positions, ``q`` symbols, ``d`` hidden size.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..collator import mask_single_leaf
from ..grammar import Grammar

# task name -> the head class a checkpoint of that task is saved with
TASK_ARCHITECTURES = {"mlm": "TreeLangForMaskedLM", "root": "TreeLangForSequenceClassification"}
TASK_DESCRIPTIONS = {"mlm": "masked language modelling", "root": "root classification"}
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


@dataclass
class Checkpoint:
    """A TreeLang checkpoint loaded for analysis (eval mode, on ``device``).

    Attributes:
        path: the folder it was loaded from.
        model: the loaded model (a task head, or the bare encoder when the folder holds one).
        task: ``"mlm"``, ``"root"`` or ``None`` for a bare encoder.
        grammar: the grammar the checkpoint's data were drawn from (rebuilt from its config).
    """

    path: Path
    model: torch.nn.Module
    task: str | None
    grammar: Grammar

    @property
    def config(self):
        return self.model.config

    @property
    def depth(self) -> int:
        """ℓ: sequences have 2**depth leaves."""
        return int(self.config.depth)

    @property
    def filter_level(self) -> int:
        """k_train: the filter level of the data the checkpoint was trained on."""
        return int(self.config.filter_level)

    @property
    def num_symbols(self) -> int:
        """q: the number of symbols (the model's vocabulary is q + 1 with the mask)."""
        return int(self.config.num_symbols)

    @property
    def mask_token_id(self) -> int:
        return int(self.config.mask_token_id)

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def describe(self) -> str:
        task = TASK_DESCRIPTIONS.get(self.task, "bare encoder")
        return f"{self.path} ({task}, q={self.num_symbols}, depth={self.depth}, k_train={self.filter_level})"


def _expected_folder() -> str:
    return "a TreeLang checkpoint folder written by save_pretrained (config.json with model_type 'treelang' + weights)"


def read_checkpoint_config(path) -> tuple[Path, dict]:
    """Validate a checkpoint folder without loading it; returns (path, config.json as a dict)."""
    if path is None or str(path) == "":
        raise ValueError(f"checkpoint must be {_expected_folder()}, got {path!r}")
    folder = Path(path)
    if not folder.exists():
        raise ValueError(f"checkpoint {str(folder)!r} does not exist; expected {_expected_folder()}")
    if not folder.is_dir():
        raise ValueError(f"checkpoint {str(folder)!r} is a file, not a folder; expected {_expected_folder()}")
    config_file = folder / "config.json"
    if not config_file.is_file():
        contents = "it is empty" if not any(folder.iterdir()) else "it has no config.json"
        raise ValueError(f"checkpoint {str(folder)!r}: {contents}; expected {_expected_folder()}")
    try:
        config = json.loads(config_file.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"checkpoint {str(folder)!r}: config.json is not valid JSON ({error})") from None
    if config.get("model_type") != "treelang":
        raise ValueError(
            f"checkpoint {str(folder)!r} has model_type {config.get('model_type')!r}; expected {_expected_folder()}"
        )
    if not any((folder / name).is_file() for name in _WEIGHT_FILES):
        raise ValueError(f"checkpoint {str(folder)!r} has a config but no weights (expected one of {_WEIGHT_FILES})")
    return folder, config


def checkpoint_task(config: dict) -> str | None:
    """The task of a checkpoint from its config's ``architectures`` ("mlm", "root" or None for a bare encoder)."""
    architectures = config.get("architectures") or []
    for task, name in TASK_ARCHITECTURES.items():
        if name in architectures:
            return task
    return None


def load_checkpoint(path, *, task: str | None = None, device: str | torch.device = "cpu") -> Checkpoint:
    """Load a TreeLang checkpoint for analysis, checking that it is of the expected task before anything is written.

    Args:
        path: the checkpoint folder.
        task: ``"mlm"`` or ``"root"`` to require that head; ``None`` accepts any TreeLang checkpoint.
        device: where to put the model.
    """
    if task is not None and task not in TASK_ARCHITECTURES:
        raise ValueError(f"task must be one of {sorted(TASK_ARCHITECTURES)} or None, got {task!r}")
    folder, config = read_checkpoint_config(path)
    found = checkpoint_task(config)
    if task is not None and found != task:
        have = TASK_DESCRIPTIONS.get(found, "a bare encoder without a task head")
        raise ValueError(
            f"checkpoint {str(folder)!r} holds {have} ({config.get('architectures')}); this analysis needs a "
            f"{TASK_DESCRIPTIONS[task]} checkpoint ({TASK_ARCHITECTURES[task]})"
        )
    import hf_treelang  # the model classes (and their Auto registration) load lazily with the package

    class_name = TASK_ARCHITECTURES[found] if found is not None else "TreeLangModel"
    model = getattr(hf_treelang, class_name).from_pretrained(folder)
    model.to(device).eval()
    return Checkpoint(path=folder, model=model, task=found, grammar=_grammar_of(folder, model.config))


def _grammar_of(folder: Path, config) -> Grammar:
    """The grammar saved next to the weights (training writes grammar.json), else the one the config names."""
    q = int(config.num_symbols)
    saved = folder / "grammar.json"
    if saved.is_file():
        grammar = Grammar.load(saved)
        if grammar.vocab_size != q:
            raise ValueError(f"checkpoint {str(folder)!r}: grammar.json has q={grammar.vocab_size} symbols but the "
                             f"model was built for q={q}")
        return grammar
    return Grammar.random(vocab_size=q, sigma=float(config.sigma), seed=int(config.grammar_seed))


def as_checkpoint(checkpoint, *, task: str | None = None, device="cpu") -> Checkpoint:
    """Accept a :class:`Checkpoint` or a folder path."""
    if isinstance(checkpoint, Checkpoint):
        if task is not None and checkpoint.task != task:
            raise ValueError(
                f"checkpoint {checkpoint.describe()} is not a {TASK_DESCRIPTIONS[task]} checkpoint "
                f"({TASK_ARCHITECTURES[task]})"
            )
        return checkpoint
    return load_checkpoint(checkpoint, task=task, device=device)


def check_positive(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def batches(n: int, batch_size: int):
    """Slices covering range(n) in order, ``batch_size`` at a time."""
    for start in range(0, n, batch_size):
        yield slice(start, min(n, start + batch_size))


def mask_one_position(input_ids: np.ndarray, mask_id: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Mask one leaf per sequence at a uniformly random position, as the paper's MLM task.

    Returns (masked ids (n, L), masked positions (n,)).
    """
    n, length = input_ids.shape
    positions = np.random.default_rng(seed).integers(0, length, size=n)  # (n,)
    masked, _ = mask_single_leaf(torch.as_tensor(input_ids), mask_id, torch.as_tensor(positions))
    return masked.numpy(), positions


@torch.no_grad()
def predict_probabilities(checkpoint: Checkpoint, input_ids: np.ndarray, positions=None, *, batch_size=1024):
    """Model probabilities, batched: root (n, q) for a root checkpoint, the leaf at ``positions`` (n, q) for MLM."""
    model, q = checkpoint.model, checkpoint.num_symbols
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    out = []
    for part in batches(ids.shape[0], batch_size):
        logits = model(input_ids=ids[part].to(checkpoint.device)).logits.float()
        if checkpoint.task == "mlm":
            rows = torch.arange(logits.shape[0], device=logits.device)
            logits = logits[rows, torch.as_tensor(positions[part], device=logits.device)]  # (b, q)
        out.append(torch.softmax(logits[..., :q], -1).double().cpu())
    return torch.cat(out).numpy()  # (n, q)


@dataclass
class DistributionComparison:
    """Row-wise comparison of reference distributions (BP) with model distributions, both (n, q).

    Attributes:
        kl: (n,) D_KL(reference ‖ model) in nats.
        argmax_match: (n,) bool, whether the two argmaxes agree.
        spearman: (n,) Spearman rank correlation of the two q-vectors (NaN where one is constant).
    """

    kl: np.ndarray
    argmax_match: np.ndarray
    spearman: np.ndarray

    def summary(self) -> dict:
        spearman = self.spearman[np.isfinite(self.spearman)]
        return {
            "kl_mean": float(self.kl.mean()) if self.kl.size else math.nan,
            "kl_median": float(np.median(self.kl)) if self.kl.size else math.nan,
            "argmax_match": float(self.argmax_match.mean()) if self.argmax_match.size else math.nan,
            "spearman_mean": float(spearman.mean()) if spearman.size else math.nan,
        }


def compare_distributions(reference, model) -> DistributionComparison:
    """KL, argmax agreement and Spearman correlation between BP marginals and model probabilities, both (n, q).

    The per-example definitions are those of :mod:`hf_treelang.metrics` (shared with the BP-KL training callback).
    """
    from .. import metrics

    p = np.asarray(reference, dtype=np.float64)
    r = np.asarray(model, dtype=np.float64)
    if p.shape != r.shape or p.ndim != 2:
        raise ValueError(f"reference and model must both have shape (n, q), got {p.shape} and {r.shape}")
    log_model = torch.log(torch.as_tensor(r).clamp_min(1e-300))  # (n, q)
    kl = metrics.kl_divergence(p, log_model).clamp_min(0.0)  # (n,), clipped at 0 against rounding
    return DistributionComparison(
        kl=kl.numpy(),
        argmax_match=metrics.argmax_agreement(p, r).numpy() > 0.5,
        spearman=metrics.spearman_correlation(p, r).numpy(),
    )


def prepare_output(out_dir) -> Path:
    """Create the output folder (after all inputs have been validated)."""
    if out_dir is None or str(out_dir) == "":
        raise ValueError(f"out_dir must be a folder path, got {out_dir!r}")
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise ValueError(f"out_dir {str(path)!r} exists and is not a folder")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(path, data) -> Path:
    """Write JSON deterministically (sorted keys; NaN/inf as null)."""
    path = Path(path)
    path.write_text(json.dumps(_jsonable(data), indent=2, sort_keys=True) + "\n")
    return path


def save_figure(fig, path) -> Path:
    """Save a matplotlib figure as PNG without time-stamped metadata (same inputs => same bytes)."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return path


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def cli_error(command: str, error: Exception) -> int:
    """Report a bad-input error of a sub-command on stderr; returns the exit status 2."""
    sys.stderr.write(f"hf-treelang {command}: error: {error}\n")
    return 2
