"""One training run of :mod:`hf_treelang.train.loop` from a flat description, reusable when already finished.

The sample-complexity sweep and ``hf-treelang reproduce`` run many trainings programmatically; this module turns a
:class:`RunSpec` into the training package's three argument dataclasses, calls :func:`hf_treelang.train.loop.train`,
and marks the folder as finished (``run_done.json``) so that a rerun reads the result instead of training again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

DONE_FILE = "run_done.json"


@dataclass
class RunSpec:
    """A training run.

    Attributes:
        task: ``"root"`` (root classification) or ``"mlm"`` (one masked leaf per sequence).
        output_dir: the run's folder.
        depth, num_symbols, sigma, grammar_seed, filter_level: the data (ℓ, q, σ, grammar seed, k_train).
        num_train: P, the training sequences; ``num_eval`` validation sequences (the in-sample KL inputs);
            ``num_test`` sequences per k_test set in ``k_tests``.
        model_kwargs: the architecture (``hidden_size``, ``num_hidden_layers``, ...).
        init_from: an MLM checkpoint to start a root classifier from (fine-tuning), or None.
        freeze_encoder: with ``init_from``: train the readout only (the frozen encoder in eval mode).
        readout, readout_hidden_size: with ``init_from``: the new root readout, ``"linear"`` or the authors'
            ``"mlp"`` head (:mod:`hf_treelang.train.readout`).
        checkpoint_epochs: also evaluate and save a checkpoint at the end of these epochs.
        epochs, max_steps, batch_size, learning_rate, seed: the optimisation (paper: Adam 1e-4, batch 32).
        num_evaluations: log-spaced evaluations with the BP-KL callback (plus step 0).
        use_dataset_builder: draw the data through ``load_dataset("treelang", ...)`` (True) or ``sample_trees``.
        progress: show the Trainer's progress bar.
    """

    task: str
    output_dir: Path
    depth: int
    num_symbols: int
    sigma: float
    grammar_seed: int
    filter_level: int
    num_train: int
    num_test: int
    k_tests: tuple
    model_kwargs: dict = field(default_factory=dict)
    num_eval: int | None = None
    init_from: Path | None = None
    freeze_encoder: bool = False
    readout: str = "linear"
    readout_hidden_size: int = 64
    checkpoint_epochs: tuple = ()
    epochs: float = 1.0
    max_steps: int | None = None
    batch_size: int = 32
    learning_rate: float = 1e-4
    seed: int = 0
    num_evaluations: int = 3
    use_dataset_builder: bool = True
    progress: bool = True


def run_training(spec: RunSpec) -> dict:
    """Train (or reuse a finished run) and return its final numbers on the first k_test set.

    Returns:
        ``{"accuracy", "bp_accuracy", "final", "output_dir"}``: the model's and the matched BP's accuracy on
        ``k_tests[0]``, and every final metric of the run (``eval_kl_bp_k*``, ``eval_acc_ktest*``, ...).
    """
    output_dir = Path(spec.output_dir)
    done = output_dir / DONE_FILE
    if done.is_file():
        return json.loads(done.read_text())
    from .arguments import ARCHITECTURE_FIELDS, DataArguments, ModelArguments, TreeLangTrainingArguments
    from .loop import train

    unknown = sorted(set(spec.model_kwargs) - set(ARCHITECTURE_FIELDS))
    if unknown:
        raise ValueError(f"`model_kwargs` has unknown architecture fields {unknown}; allowed: {list(ARCHITECTURE_FIELDS)}")

    data_args = DataArguments(
        grammar_seed=int(spec.grammar_seed),
        sigma=float(spec.sigma),
        num_symbols=int(spec.num_symbols),
        depth=int(spec.depth),
        k_train=int(spec.filter_level),
        num_train=int(spec.num_train),
        num_eval=int(spec.num_eval or spec.num_test),
        num_test=int(spec.num_test),
        k_test=[int(k) for k in spec.k_tests],
        use_dataset_builder=bool(spec.use_dataset_builder),
    )
    model_args = ModelArguments(
        **spec.model_kwargs,
        model_name_or_path=None if spec.init_from is None else str(spec.init_from),
        freeze_encoder=bool(spec.freeze_encoder),
        readout=spec.readout,
        readout_hidden_size=spec.readout_hidden_size,
    )
    training_args = TreeLangTrainingArguments(
        output_dir=str(output_dir),
        overwrite_output_dir=True,  # no run_done.json: what the folder holds is an interrupted attempt
        num_train_epochs=float(spec.epochs),
        max_steps=-1 if spec.max_steps is None else int(spec.max_steps),
        per_device_train_batch_size=int(spec.batch_size),
        learning_rate=float(spec.learning_rate),
        seed=int(spec.seed),
        report_to="none",
        num_evaluations=int(spec.num_evaluations),
        num_checkpoints=0,
        checkpoint_epochs=[int(e) for e in spec.checkpoint_epochs] or None,
        logging_steps=10**9,
        disable_tqdm=not spec.progress,
    )
    task = "finetune" if spec.init_from is not None else spec.task
    result = train(task, data_args, model_args, training_args)
    final = {key: value for key, value in result.final_metrics.items() if isinstance(value, (int, float))}
    k = int(spec.k_tests[0])
    summary = {
        "accuracy": final.get(f"eval_acc_ktest{k}"),
        "bp_accuracy": final.get(f"eval_bp_acc_ktest{k}"),
        "final": final,
        "output_dir": str(output_dir),
        "global_step": int(result.global_step),
        "train_runtime_s": float(result.train_runtime),
    }
    done.write_text(json.dumps(summary, indent=1, sort_keys=True))
    return summary
