"""The training layer: ``transformers.Trainer`` runs of the paper's two tasks (and of next-leaf prediction, a causal
LM), with the BP oracle alongside.

* :mod:`~hf_treelang.train.arguments` — the scripts' ``HfArgumentParser`` dataclasses, presets and ensemble flags;
* :mod:`~hf_treelang.train.run` — :class:`~hf_treelang.train.run.Run`: one run, resolved, checked, with its identity;
* :mod:`~hf_treelang.train.folders` — output folders, checkpoints, the completion marker and the identity record;
* :mod:`~hf_treelang.train.data` — a run's splits, from the builder's split streams;
* :mod:`~hf_treelang.train.collators` — one masked leaf per sequence (MLM), root labels, the leaves behind BOS
  (next-leaf prediction);
* :mod:`~hf_treelang.train.callbacks` — the BP-KL callback, log-spaced evaluations, the JSON history;
* :mod:`~hf_treelang.train.trainer` — the Trainers: data on the device, the lean step, CUDA graphs, stacked ensembles;
* :mod:`~hf_treelang.train.device_data` — the training set on the device, shuffled and masked from (seed, epoch);
* :mod:`~hf_treelang.train.loop` — ``train(run)``, ``train_together(runs)`` and the scripts' ``main``;
* :mod:`~hf_treelang.train.outputs` — run_config, metrics, curves and the model card;
* :mod:`~hf_treelang.train.launch` — the CPU multi-process relaunch under ``accelerate launch --cpu``;
* :mod:`~hf_treelang.train.readout` — the frozen encoder kept in eval mode;
* :mod:`~hf_treelang.train.paper_settings` — the authors' settings, each with its source.

Submodules are imported on use: ``import hf_treelang.train`` loads nothing heavy.
"""
