"""The authors' experimental settings, each with its source: the one home of the numbers behind ``--preset paper``.

Sources are files of the authors' repository (github.com/emanuele-moscato/tree-language, branch paper-submission,
commit 8d7c9b8) and the paper's text; where the two disagree the code wins, and ``training/README.md`` ("Paper vs
code") says so. This module imports nothing, so that the command-line front end and the presets of
``hf-treelang reproduce`` can read it without torch.
"""

# The model and optimiser (App. C, D; modules/models.py and the training scripts): d = 128, d' = 2048, one head,
# torch.nn.TransformerEncoderLayer's dropout 0.1; PyTorch's default initialisation with identical initial blocks
# (nn.TransformerEncoder(encoder_layer, n_layers) deep-copies one layer); Adam lr 1e-4 constant, no warm-up, batches
# of 32.
MODEL = {"hidden_size": 128, "intermediate_size": 2048, "num_attention_heads": 1, "hidden_dropout_prob": 0.1,
         "attention_probs_dropout_prob": 0.1, "initializer": "torch_cloned_layers"}
OPTIMISER = {"learning_rate": 1e-4, "lr_scheduler_type": "constant", "warmup_steps": 0,
             "per_device_train_batch_size": 32}

# Root classification (scripts/Transformer_RootInference.py): P = 2**17, 200 epochs, checkpoints at
# np.unique(np.logspace(0, np.log10(200), 12).astype(int)).
ROOT_TRAIN = 2**17
ROOT_EPOCHS = 200
ROOT_CHECKPOINT_EPOCHS = (1, 2, 4, 6, 11, 17, 29, 47, 76, 123, 200)

# Masked language modelling (scripts/Transformer_MLM.py): P = 2**18 (Fig. 3a's caption says 2**17), n_epochs =
# int(2e3), checkpoint_times = np.logspace(0, 3, 8).astype(int) plus checkpointing_period_epochs = 500.
MLM_TRAIN = 2**18
MLM_EPOCHS = 2000
MLM_CHECKPOINT_EPOCHS = (1, 2, 7, 19, 51, 138, 372, 500, 1000, 1500, 2000)

# Test and validation sets: N_test = N_val = int(1e4) in every script.
NUM_TEST = 10**4
NUM_VALIDATION = 10**4
# Log-spaced evaluations of a paper-sized run (ours: the authors evaluate at their checkpoint epochs, which every
# paper preset adds); one number for the scripts' `--preset paper` and `reproduce --preset paper`.
NUM_EVALUATIONS = 25

# Fig. 2a / App. E.3 (scripts/Transformer_RootInference.py, P = 2**np.arange(9, 18) at k = 0;
# scripts/Transformer_RootInference_factorized.py, P = 2**np.arange(9, 21) at k = 1..4), 200 epochs each.
SWEEP_SIZES = tuple(2**e for e in range(9, 18))
SWEEP_SIZES_FILTERED = tuple(2**e for e in range(9, 21))
SWEEP_FILTER_LEVELS = (0, 1, 2, 3, 4)
SWEEP_EPOCHS = 200

# App. E.1 (the paper's n_L <= 4; scripts/Transformer_wPE.py at commit 4ff95f9 ran n_layers = [2, 3] beside the
# n_L = 4 runs) and App. E.2 (the caption's seed = {1, 15, 31} of the data generation script).
LAYER_COUNTS = (1, 2, 3, 4)
GRAMMAR_SEEDS = (1, 15, 31)

# Probes (App. E.6; notebooks/ancestor_inference.ipynb at commit 1b951ae): 2**14 labelled sequences, Adam 1e-4,
# batches of 32, 100 epochs, the best epoch on N_val = 1e4 validation sequences, a 64-unit two-layer readout for
# Fig. 3b and a linear one (decoder_hidden_dim = [], "probes_accuracies_0HL") for the k_train probes of App. E.7.
PROBE_TRAIN = 2**14
PROBE_VALIDATION = 10**4
PROBE_EPOCHS = 100
PROBE_BATCH_SIZE = 32
PROBE_LEARNING_RATE = 1e-4
PROBE_HIDDEN = 64
FILTERED_PROBE_HIDDEN = 0

# Fine-tuning, Fig. 1f. No script on the paper-submission branch; the authors' history holds three variants, all
# on l = 8 data (labeled_data_fixed_validation_4_8_1.0_*.npy): scripts/root_inference_fine_tuning.py at bde2fcd
# (marked incomplete by its authors) with head_hidden_dim = [64] and N_EPOCHS = 200; the same script at a83bb3a
# with [128, 64, 32] and 25 epochs; notebooks/fine_tuning/fine_tuning_root_inference.ipynb with [32] and 10 epochs.
# Frozen modules are put in eval mode (freeze_encoder_weights). Which one made Fig. 1f is not recorded: the default
# here is the first ([64], 200 epochs), the only one that went into a script the authors committed as a run.
FINETUNE_EPOCHS = 200
FINETUNE_HIDDEN = 64
