"""The laptop preset: the one home of the settings each script runs with no arguments, and of ``reproduce --preset
quick``'s main runs; and the smoke preset (``--preset smoke``), the first run of Getting started.

They were found by the search of ``training/README.md`` ("The laptop preset") so that every default run shows the
paper's findings on a 2-core CPU in at most 15 minutes; the data are the paper's (q = 4, ℓ = 4, σ = 1, grammar seed 0,
k_train = 0), the model and optimiser are smaller and faster. Like :mod:`hf_treelang.train.paper_settings`, this
module imports nothing, so that the presets of ``hf-treelang reproduce`` read it without torch.
"""

# d = 64, d' = 256 (n_L = ℓ, one head), no dropout (a third of a small model's CPU step), PyTorch's default
# initialisation drawn block by block.
MODEL = {"hidden_size": 64, "intermediate_size": 256, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
# Adam 1e-3, batches of 32 (the paper's batch: the most steps per second on a CPU), no warm-up, no clipping.
OPTIMISER = {"learning_rate": 1e-3, "lr_scheduler_type": "constant", "warmup_steps": 0,
             "per_device_train_batch_size": 32}
# 1000 in-sample and 1000 test sequences per k_test, 16 log-spaced evaluations.
EVALUATION = {"num_eval": 1000, "num_test": 1000, "num_evaluations": 16}
# A checkpoint every 2,048 steps (about a minute on one core) only to resume from: a stopped run loses at most that,
# not the steps since its last log-spaced checkpoint (hours, late in a 40-epoch MLM); removed when the run ends.
RESUMABLE = {"resume_checkpoint_steps": 2048}

# Root classification: P = 2**17, 12 epochs (49,152 steps) at a constant rate; identical initial blocks (the
# authors' initialisation, "torch_cloned_layers"), with which the run reaches BP_0 an evaluation earlier.
ROOT = {**MODEL, **OPTIMISER, **EVALUATION, **RESUMABLE, "initializer": "torch_cloned_layers", "num_train": 2**17,
        "num_train_epochs": 12.0}
# Masked language modelling: P = 2**17, 12 epochs, the rate decayed to 0 on a cosine, and each leaf masked with a
# probability that falls linearly from 0.4 at the first step to 0.15 at the last (a row with none drawn masks one
# random leaf) instead of the paper's one leaf per sequence: many masked leaves per step early, when a masked leaf
# whose neighbours are masked too can only be predicted from higher levels of the tree, then inputs closer to the
# evaluation's (the falling rate of the search, ahead of the constant 0.4 in each of 5 seeds). Evaluation masks
# one leaf per sequence, as the paper.
MLM = {**MODEL, **OPTIMISER, **EVALUATION, **RESUMABLE, "lr_scheduler_type": "cosine", "mask_rate": 0.4,
       "mask_rate_final": 0.15, "num_train": 2**17, "num_train_epochs": 12.0}
# The named MLM preset "laptop_long": the same run for 40 epochs (163,840 steps, about an hour on 2 cores), long
# enough to bring the last step of Fig. 1d, from BP_2 to the top of the hierarchy, that the 15-minute run leaves
# under way (training/README.md, "A longer MLM preset": not in every seed). Its mask rate stays at 0.4: over 40
# epochs the rate falling to 0.15 ended further from BP_0 than the constant rate on the seed measured.
MLM_LONG = {**{key: value for key, value in MLM.items() if key != "mask_rate_final"}, "num_train_epochs": 40.0}
# Next-leaf prediction (not in the paper): P = 2**16, 4 epochs, cosine.
CLM = {**MODEL, **OPTIMISER, **EVALUATION, **RESUMABLE, "lr_scheduler_type": "cosine", "num_train": 2**16,
       "num_train_epochs": 4.0}
# The smoke preset (root, MLM and next-leaf runs): each task's laptop run on the same data, model and optimiser, cut to
# P = 2**13 sequences and 4 epochs (1,024 steps), 1000 in-sample and 1000 test sequences per k_test and 4 log-spaced
# evaluations after step 0 (steps 1, 10, 102, 1024), on one thread (a model this small gains nothing from a second);
# the whole run, data and BP targets included, within two minutes on a 2-core CPU. It shows what a run prints and
# writes, not the paper's findings: after 1,024 steps the model is still closest to BP_ℓ (or BP_ℓ-1).
SMOKE = {"num_train": 2**13, "num_train_epochs": 4.0, "num_eval": 1000, "num_test": 1000, "num_evaluations": 4,
         "cpu_threads": 1}
SMOKE_ROOT = {**ROOT, **SMOKE}
SMOKE_MLM = {**MLM, **SMOKE}
SMOKE_CLM = {**CLM, **SMOKE}
# Fine-tuning from an MLM checkpoint (the architecture is the checkpoint's): P = 2**11 labelled sequences, 10 epochs.
FINETUNE = {**OPTIMISER, "num_train": 2**11, "num_eval": 512, "num_test": 256, "num_train_epochs": 10.0,
            "num_evaluations": 8}
# ``reproduce --preset laptop_full``: laptop_long's runs with evaluation sets sized so that sampling noise does not
# decide a verdict (in-sample 2**15, test 2**14 per k_test; the probes tested on 2**14 sequences), and the sweeps of
# Figs. 2a / 6 / 7 / 8 / 9 / 11 at the laptop model's size: every sweep run trained until its validation accuracy
# (2**12 held-out sequences) has not improved for 16 checks of 128 steps, never stopped before step 8,192, at most
# 24,576 steps, tested on 2**13 sequences per k_test. The floor: a root classifier's accuracy first sits on a plateau
# near chance (on grammar seed 0 it leaves it between steps ~1,800 and ~3,600 at every P; on grammar seed 1 it stays
# there past step 20,000 at P = 2**16), and a rule without a floor stopped runs on it; the patience: on grammar seed 15
# the accuracy climbs slowly (about 0.01 per 500 steps) through the checks' noise. The full hierarchy (k_train = 0)
# needs more data than the filtered ones, so its P start and end one doubling higher; Figs. 6 and 7 take three of
# those P (and Fig. 7 three k_train); the runs trained two at a time, one thread each.
FULL = {
    "main_num_eval": 2**15, "main_num_test": 2**14, "probe_validation": 2**12, "probe_test": 2**14,
    "sweep_filter_levels": (0, 1, 2, 3, 4),
    "sweep_sizes": (2**11, 2**12, 2**13, 2**14, 2**15, 2**16),
    "sweep_sizes_filtered": (2**10, 2**11, 2**12, 2**13, 2**14, 2**15),
    "layer_counts": (1, 2, 3, 4), "layer_sizes": (2**12, 2**14, 2**16),
    "grammar_seeds": (1, 15), "seed_sweep_levels": (0, 2, 4), "seed_sweep_sizes": (2**12, 2**14, 2**16),
    "sweep_num_eval": 2**12, "sweep_num_test": 2**13,
    "sweep_patience": 16, "sweep_check_steps": 128, "sweep_min_steps": 8192, "sweep_max_steps": 24_576,
    "cpu_threads": 1, "workers": 2,
}
