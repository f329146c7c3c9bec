"""The training layer: ``transformers.Trainer`` runs of the paper's two tasks, with the BP oracle alongside.

* :mod:`~hf_treelang.train.arguments` — the scripts' ``HfArgumentParser`` dataclasses and presets;
* :mod:`~hf_treelang.train.data` — a run's splits, from the builder's split streams;
* :mod:`~hf_treelang.train.collators` — one masked leaf per sequence (MLM) and root labels;
* :mod:`~hf_treelang.train.callbacks` — the BP-KL callback, log-spaced evaluations, the JSON history;
* :mod:`~hf_treelang.train.loop` — :func:`train` and the scripts' ``main``;
* :mod:`~hf_treelang.train.outputs` — run_config, metrics, curves and the model card;
* :mod:`~hf_treelang.train.launch` — the CPU multi-process relaunch under ``accelerate launch --cpu``;
* :mod:`~hf_treelang.train.runs` — a run from a flat :class:`RunSpec`, reused when already finished.

Submodules are imported on use: ``import hf_treelang.train`` loads nothing heavy.
"""
