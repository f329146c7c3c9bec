"""The ``hf-treelang`` command: the argparse front end of every sub-command, and the top layer (nothing imports it).

A sub-command's arguments are parsed here before anything heavy is imported, so that ``hf-treelang --help``,
``hf-treelang --version``, ``hf-treelang COMMAND --help`` and usage errors answer at once, without torch,
transformers or datasets. Only then is the command's module imported and its ``run(args)`` called with the parsed
namespace. :func:`run_command` runs one sub-command from an argument list (what the tests call): it parses with the
same parser as the console script.

Imports at module level stay within the standard library and the package's light modules (``version``,
``help_format``, ``train.paper_settings``, ``train.laptop_settings``, ``train.folders``, ``reproduce.presets``);
``tests/test_imports.py`` checks that none of the above imports torch, and ``tests/test_layers.py`` that no module of
the package imports this one.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from hf_treelang import register
from hf_treelang.help_format import HelpFormatter
from hf_treelang.progress import quiet_progress_bars_off_terminal
from hf_treelang.reproduce.presets import PRESETS, PUBLIC_PRESETS, step_names
from hf_treelang.train import laptop_settings as laptop
from hf_treelang.train import paper_settings as paper
from hf_treelang.train.folders import check_output_folder
from hf_treelang.version import __version__

PROG = "hf-treelang"

# The choices of the library functions, repeated here so that --help can list them without importing the modules
# that define them (which import torch); tests/test_imports.py checks that they stay equal.
CONVERT_TASKS = ("root", "mlm")  # hf_treelang.models.convert.TASKS
CALIBRATION_TASKS = ("mlm", "root")  # hf_treelang.core.oracle.TASKS
PROBE_POSITIONS = ("all", "ends")  # hf_treelang.analysis.probing.POSITION_MODES
SAMPLE_COMPLEXITY_ARMS = ("scratch", "frozen", "finetuned")  # hf_treelang.analysis.sample_complexity.ARMS
PSTAR_EPSILON, PSTAR_DELTA = 0.02, 0.01  # hf_treelang.analysis.pstar.EPSILON, DELTA
PROBE_MAX_HOURS = 24.0  # hf_treelang.core.resources.DEFAULT_MAX_HOURS


def _convert_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("state_dict", help="state dict file saved by the paper's code")
    parser.add_argument("output_dir", help="checkpoint folder to write")
    parser.add_argument("--task", choices=CONVERT_TASKS, required=True, help="root classification or masked LM")
    parser.add_argument("--depth", type=int, required=True, help="tree depth ℓ (sequences of 2**depth tokens)")
    parser.add_argument("--heads", type=int, default=1, help="attention heads of the original model")


def _publish_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", help="output directory (written atomically; must not exist unless --overwrite)")
    parser.add_argument("--seeds", "--seed", dest="seeds", type=int, nargs="+", default=None,
                        help="grammar seeds of the grid, e.g. --seeds 0 1 15 31 (default: 0, the paper's)")
    parser.add_argument("--sigmas", "--sigma", dest="sigmas", type=float, nargs="+", default=None,
                        help="σ values of the grid, log-normal widths of the rule weights (default: 1.0)")
    parser.add_argument("--filter-levels", dest="filter_levels", type=int, nargs="+", default=None,
                        help="k values of the grid; one config per (seed, σ, k) (default: every k = 0 .. ℓ)")
    parser.add_argument("--configs", nargs="+", default=None,
                        help="config names instead of a grid, e.g. --configs seed15-sigma1.0-k2 k0; 'k<k>' takes "
                             "a single --seed / --sigma, else 0 and 1.0 (default: none, the grid)")
    parser.add_argument("--num-symbols", "--vocab-size", dest="num_symbols", type=int, default=None,
                        help="q (an RHM's v), the number of symbols; --vocab-size is its former name (default: the "
                             "config name's, else 4)")
    parser.add_argument("--depth", type=int, default=None,
                        help="ℓ (an RHM's L), the tree depth (default: the config name's, else 4)")
    parser.add_argument("--num-train", type=int, default=2**18, help="training examples (default: 2**18)")
    parser.add_argument("--num-validation", type=int, default=10**4, help="validation examples (default: 10**4)")
    parser.add_argument("--num-test", type=int, default=10**4, help="test examples (default: 10**4)")
    parser.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")


def _calibration_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a checkpoint folder (MLM or root classification): TreeLang's, or a "
                                           "run of another architecture (--model_type)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--task", choices=CALIBRATION_TASKS, default=None,
                        help="require this task (default: the checkpoint's own)")
    parser.add_argument("--num-samples", type=int, default=10_000, help="sequences per input set (default: 10^4)")
    parser.add_argument("--seed", type=int, default=20_240_601, help="seed of the inputs and mask positions")
    parser.add_argument("--batch-size", type=int, default=1024, help="inference batch size")
    parser.add_argument("--device", default="cpu", help="torch device")


def _attention_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoints", nargs="+",
                        help="one or more checkpoint folders (rows of the grid; TreeLang's or runs of another "
                             "architecture with attention); with --template, one training run folder")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--template", action="store_true",
                        help="compare every layer of every checkpoint of the run (checkpoint-<step> folders, then the "
                             "final model) with App. F's BP attention templates: attention_template.png / .json")
    parser.add_argument("--num-samples", type=int, default=10_000,
                        help="inputs averaged over (default: 10^4; per checkpoint with --template)")
    parser.add_argument("--seed", type=int, default=20_240_602, help="seed of the inputs")
    parser.add_argument("--mask", choices=["auto", "yes", "no"], default="auto",
                        help="mask one leaf per input (auto: for MLM checkpoints only)")
    parser.add_argument("--batch-size", type=int, default=512, help="inference batch size")
    parser.add_argument("--device", default="cpu", help="torch device")


def _probe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a checkpoint folder (an MLM model in the paper; TreeLang's, or a run of "
                                           "another architecture, read through output_hidden_states)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--target", choices=("ancestors", "messages"), default="ancestors",  # probing.PROBE_TARGETS
                        help="ancestors: the ancestor symbols (Fig. 3b, probe.png/json); messages: the BP upward "
                             "messages of the level-m ancestor and of the level-m complementary subtree (App. F), "
                             "KL to the exact message (probe_messages.png/json)")
    parser.add_argument("--levels", type=int, nargs="+", default=None,
                        help="ancestor levels to probe, 0 = root (default: every level < depth the data have)")
    parser.add_argument("--data-filter-level", type=int, default=None,
                        help="filter level k of the probing data (default: the checkpoint's k_train)")
    parser.add_argument("--positions", choices=PROBE_POSITIONS, default="all",
                        help="train on all positions, or on the first and last only (App. E.7)")
    parser.add_argument("--layers", type=int, nargs="+", default=None,
                        help="layers to probe, 0 = embedding, n_L = the complete encoding (default: every layer)")
    parser.add_argument("--num-train", type=int, default=paper.PROBE_TRAIN,
                        help="labelled training sequences (default: 2^14)")
    parser.add_argument("--num-validation", type=int, default=paper.PROBE_VALIDATION,
                        help="sequences on which each probe's best epoch is chosen (default: 10^4, the authors')")
    parser.add_argument("--num-test", type=int, default=2**12,
                        help="held-out sequences the accuracies are reported on (default: 2^12)")
    parser.add_argument("--epochs", type=int, default=paper.PROBE_EPOCHS, help="training epochs (App. E.6)")
    parser.add_argument("--batch-size", type=int, default=paper.PROBE_BATCH_SIZE,
                        help="sequences per step (the authors' notebook)")
    parser.add_argument("--learning-rate", type=float, default=paper.PROBE_LEARNING_RATE,
                        help="Adam learning rate (the authors' notebook)")
    parser.add_argument("--probe-hidden", type=int, default=paper.PROBE_HIDDEN,
                        help="hidden units of each readout (App. E.6: 64; 0: a linear readout)")
    parser.add_argument("--seed", type=int, default=20_240_603, help="seed of data, initialisation and batches")
    parser.add_argument("--max-hours", type=float, default=PROBE_MAX_HOURS,
                        help="refuse, before the hidden states are computed, a run whose printed time estimate is "
                        f"longer than this many hours, naming the most --epochs that fit (default: {PROBE_MAX_HOURS:g})")
    parser.add_argument("--device", default="cpu", help="torch device")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads, >= 1: torch.set_num_threads (default: torch's own setting)")


def _dynamics_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", nargs="+",
                        help="a training output folder, its trainer_state.json, or the BP-KL history JSON; several "
                             "(e.g. one training over several model seeds) for their spread")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--name", default="dynamics", help="base name of the output files")
    parser.add_argument("--title", default="", help="figure title (default: none)")


def _compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+",
                        help="training output folders of run_mlm.py, run_clm.py or run_root.py, of any --model_type; "
                             "runs that differ only in --seed are aggregated as mean ± std")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--title", default="", help="figure title (default: none)")
    parser.add_argument("--reevaluate", action="store_true",
                        help="recompute the last evaluation of runs whose history lacks the paired standard errors "
                             "of the KL to each BP_k less the closest's (no eval_kl_gap_se_bp_k* keys), from their "
                             "saved weights, so that the table says which levels the closest BP_k is not told apart "
                             "from (default: off; builds each distinct data set once)")


def _prune_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", help="finished training run folders (each checked before any is pruned)")


# The construction's ranges, repeated here so that --help can state them without importing the module that defines
# them (hf_treelang.models.configuration_bp_transformer, which imports transformers); tests/test_bp_transformer.py
# checks that they stay equal.
CONSTRUCT_MAX_NUM_SYMBOLS = 16  # MAX_NUM_SYMBOLS
CONSTRUCT_MAX_DEPTH = 10  # MAX_DEPTH
CONSTRUCT_BETA_RANGE = (30.0, 1000.0)  # (MIN_BETA, MAX_BETA)


def _construct_arguments(parser: argparse.ArgumentParser) -> None:
    low, high = CONSTRUCT_BETA_RANGE
    parser.add_argument("out", help="output folder, new or empty (it becomes a finished run folder that every "
                                    "analysis reads)")
    parser.add_argument("--task", choices=("mlm", "root"), default="mlm",
                        help="mlm: every leaf's BP_0 marginal given the others; root: BP_0's root posterior (default: mlm)")
    parser.add_argument("--num-symbols", type=int, default=4,
                        help=f"q, in [2, {CONSTRUCT_MAX_NUM_SYMBOLS}] (default: 4)")
    parser.add_argument("--depth", type=int, default=4,
                        help=f"ℓ, in [1, {CONSTRUCT_MAX_DEPTH}]: the model's attention layers (default: 4)")
    parser.add_argument("--sigma", type=float, default=1.0, help="σ of the grammar (default: 1.0)")
    parser.add_argument("--grammar-seed", type=int, default=0, help="the grammar's seed (default: 0)")
    parser.add_argument("--beta", type=float, default=40.0,
                        help=f"the attention's inverse temperature β, in [{low:g}, {high:g}] (default: 40; the "
                             "weight it leaks off the target leaves, at most 2**ℓ exp(-2β), leaves the output BP_0's "
                             "to float64's resolution)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace OUT if it holds an earlier construction (and nothing else; default: off, a "
                             "non-empty OUT is refused)")


GENERATE_MAX_SAMPLES = 10**6  # hf_treelang.analysis.generation.MAX_SAMPLES


def _generate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="a TreeLangForCausalLM training run or checkpoint folder, or a causal run of "
                                    "another architecture (run_clm.py --model_type gpt2|llama|mamba|...)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--num-samples", type=int, default=10_000,
                        help=f"N generated and N true sequences, 1 .. {GENERATE_MAX_SAMPLES:,} (default: 10^4)")
    parser.add_argument("--seed", type=int, default=20_240_604,
                        help="seed of the model's samples; the true sequences use seed + 1")
    parser.add_argument("--batch-size", type=int, default=4096, help="sequences per generate / forward / BP pass")
    parser.add_argument("--device", default="cpu", help="torch device of the model")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads, >= 1: torch.set_num_threads (default: torch's own setting)")


def _parse_sizes(text: str) -> list:
    """``"256,1024"`` or ``"2^8,2^10"`` as a list of ints (argparse reports a ValueError as an invalid value)."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        value = 2 ** int(part[2:]) if part.startswith("2^") else int(part)
        sizes.append(value)
    return sizes


def _sample_complexity_arguments(parser: argparse.ArgumentParser) -> None:
    full = laptop.FULL
    parser.add_argument("checkpoint", nargs="?", default=None,
                        help="an MLM-pre-trained TreeLang checkpoint folder: Fig. 1f's arms (default: none, the "
                        "learner mode: --model_type trained from scratch on the grammar the options name)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--sizes", type=_parse_sizes, default=None,
                        help="comma-separated P values, e.g. 256,1024 or 2^8,2^10 (default: 2^7,2^9,2^11 with a "
                        "CHECKPOINT; none in the learner mode, which needs them)")
    parser.add_argument("--seeds", "--seed", dest="seeds", type=int, nargs="+", default=[0],
                        help="seeds of the runs, e.g. --seeds 0 1 2: every arm (or the learner) and P once per seed; "
                        "the arms' frozen − scratch gap per P and the learner's P* are reported with their spread "
                        "over the seeds (default: 0)")
    parser.add_argument("--num-test", "--num_test", dest="num_test", type=int, default=None,
                        help=f"test sequences (default: 2048, k_test = k_train, with a CHECKPOINT; "
                        f"{full['sweep_num_test']} of k_test = 0 in the learner mode)")
    parser.add_argument("--max-steps", "--max_steps", dest="max_steps", type=int, default=None,
                        help="cap on the optimizer steps of one run (default: 600 with a CHECKPOINT, <= 15 min on a "
                        f"2-core CPU; {full['sweep_max_steps']} in the learner mode, laptop_full's)")
    parser.add_argument("--batch-size", "--batch_size", dest="batch_size", type=int, default=None,
                        help="batch size (default: 32, the paper's and the laptop preset's)")
    parser.add_argument("--learning-rate", "--learning_rate", dest="learning_rate", type=float, default=None,
                        help="Adam learning rate (default: 1e-4, the paper's, with a CHECKPOINT; in the learner mode "
                        "the rate the architecture comparison tuned for the cell <paper|rhm>-root-<model_type> of "
                        "--rates, refused when it has none)")
    parser.add_argument("--workers", type=int, default=None,
                        help="runs trained at the same time, 0 = in this process (default: one per CPU core)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads per run, >= 1 (default: the CPU cores shared out among the "
                        "workers)")
    parser.add_argument("--force", action="store_true",
                        help="run in an OUT written with other settings (runs of unchanged identity are kept)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    arms = parser.add_argument_group("Fig. 1f's arms (with a CHECKPOINT)")
    arms.add_argument("--arms", nargs="+", choices=SAMPLE_COMPLEXITY_ARMS, default=None,
                      help=f"which arms to run (default: {' '.join(SAMPLE_COMPLEXITY_ARMS)})")
    arms.add_argument("--epochs", type=float, default=None, help="training epochs per run (default: 20)")
    learner = parser.add_argument_group(
        "one learner against BP_0 (no CHECKPOINT)",
        "Root classification from scratch on the full hierarchy, every (P, seed) trained until its validation "
        "accuracy stops improving; writes runs.csv / runs.json (one row per run), pstar.json (P* by accuracy and by "
        "KL, with their spread over seeds), README.md (a dataset card: load_dataset(OUT)), summary.md and the "
        "figures. P* is the smallest P at which the mean test accuracy over the seeds comes within ε of BP_0's, "
        "interpolated linearly in ln P between the grid points around the crossing.")
    learner.add_argument("--model_type", default=None,
                         help="the architecture: treelang or a model type of transformers (default: treelang)")
    learner.add_argument("--config_overrides", default=None,
                         help="its size, 'field=value,...', TreeLang's its own flags of those names (default: the "
                         "architecture comparison's size for the model type, one layer per level)")
    learner.add_argument("--rates", default=None,
                         help="the comparison's tuned rates (default: docs/compare/protocol/rates.json of the "
                         "repository)")
    learner.add_argument("--grammar_seed", type=int, default=None, help="the grammar's seed (default: 0)")
    learner.add_argument("--sigma", type=float, default=None, help="σ of the paper's grammar (default: 1.0)")
    learner.add_argument("--num_symbols", type=int, default=None,
                         help="q, an RHM's v (default: 4 for the paper's grammar, 8 for an RHM)")
    learner.add_argument("--depth", type=int, default=None,
                         help="ℓ, an RHM's L (default: 4 for the paper's grammar, 3 for an RHM)")
    learner.add_argument("--num_rules", type=int, default=None,
                         help="m: train on a Random Hierarchy Model with m rules per symbol (default: none, the "
                         "paper's grammar)")
    learner.add_argument("--num_classes", type=int, default=None, help="an RHM's root classes n_c (default: v)")
    learner.add_argument("--arity", type=int, default=None, help="an RHM's arity s (default: 2)")
    learner.add_argument("--num_eval", type=int, default=None,
                         help=f"validation sequences of the stopping rule and the KL (default: "
                         f"{full['sweep_num_eval']})")
    learner.add_argument("--early_stopping_patience", type=int, default=None,
                         help=f"checks without an improvement that stop a run (default: {full['sweep_patience']})")
    learner.add_argument("--early_stopping_eval_steps", type=int, default=None,
                         help=f"optimizer steps between two checks (default: {full['sweep_check_steps']})")
    learner.add_argument("--early_stopping_min_steps", type=int, default=None,
                         help=f"no check before this step stops a run (default: {full['sweep_min_steps']})")
    learner.add_argument("--early_stopping_threshold", type=float, default=None,
                         help="the improvement a check must exceed (default: 0.0)")
    learner.add_argument("--epsilon", type=float, default=None,
                         help=f"ε of P*, the accuracy gap to BP_0 (default: {PSTAR_EPSILON})")
    learner.add_argument("--delta", type=float, default=None,
                         help=f"δ of P*_KL, the KL to BP_0 in nats (default: {PSTAR_DELTA})")


def _reproduce_arguments(parser: argparse.ArgumentParser) -> None:
    extra = "; ".join(
        f"preset {name}: k = {', '.join(map(str, PRESETS[name].attention_filter_levels))}"
        for name in PUBLIC_PRESETS
        if PRESETS[name].attention_filter_levels
    )
    steps = [f"{step} ({extra})" if step.endswith("<k>") and extra else step
             for step in step_names(attention_filter_levels=("<k>",))]
    parser.add_argument("out", nargs="?", default=None, help="output folder (not with --plan)")
    parser.add_argument("--plan", default=None, metavar="OUT",
                        help="train nothing: write OUT/plan.json (every training run of the preset, the figures it "
                        "feeds, its optimizer steps) and print the total steps and the estimated time on this machine "
                        "and on one GPU (default: none, run the reproduction)")
    parser.add_argument("--preset", default="quick", metavar="{" + ",".join(PUBLIC_PRESETS) + "}",
                        help="quick: the training scripts' laptop runs, one filtered MLM and the analyses, at most "
                        "45 min on a 2-core CPU, no sweeps; laptop_long: the same with the 40-epoch MLM of run_mlm.py "
                        "--preset laptop_long, which gets closer to BP_0 (over an hour); paper: the authors' settings "
                        "for every figure, with the sweeps of Fig. 2a and App. E.1-E.3, E.5, E.7 (GPU-weeks; --only runs "
                        "a part)")
    parser.add_argument("--grammar_file", default=None, metavar="GRAMMAR.json",
                        help="train every run and build the data on the grammar in this file (the JSON Grammar.save "
                        "writes: any q and arity, e.g. a hand-made M or a saved Random Hierarchy Model) instead of the "
                        "preset's generated one; q and, for rules per level, ℓ are the file's, and the sweep over other "
                        "grammar seeds (App. E.2) is left out (default: none, the paper's grammar)")
    parser.add_argument("--only", nargs="+", default=None, metavar="STEP",
                        help=f"run only these steps, of: {', '.join(steps)} (default: every step)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="train every run of the preset first, N side by side on one thread each, then run the "
                        "analyses; 0: each run when its step needs it, in this process (default: the preset's, 2 for "
                        "laptop_full, 0 for the others)")


SWEEP_EXECUTORS = ("local", "slurm")  # hf_treelang.sweep.runner.EXECUTORS


def _sweep_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", nargs="?", default=None,
                        help='the sweep: a JSON (or YAML) file {"task": ..., "base": {run arguments}, "grid": '
                        '{argument: [values]}}')
    parser.add_argument("out", nargs="?", default=None,
                        help="output folder: OUT/runs/<grid point>/ per run, OUT/results.jsonl, OUT/sweep.png")
    parser.add_argument("--status", default=None, metavar="OUT",
                        help="show which runs of the sweep in OUT are done, running, failed or pending, and exit "
                        "(default: none, run the sweep)")
    parser.add_argument("--executor", choices=SWEEP_EXECUTORS, default="local",
                        help="local: worker processes on this machine; slurm: a SLURM job array through submitit "
                        "(pip install 'hf-treelang[cluster]')")
    parser.add_argument("--workers", type=int, default=None,
                        help="local executor: runs trained at the same time, 0 = in this process (default: one per "
                        "CPU core)")
    parser.add_argument("--force", action="store_true",
                        help="run in an OUT written by a different SPEC (runs whose identity is unchanged are kept)")
    parser.add_argument("--slurm-partition", default=None, help="slurm: the partition (default: the cluster's)")
    parser.add_argument("--slurm-time", type=int, default=24 * 60, help="slurm: time limit of a job, in minutes")
    parser.add_argument("--slurm-cpus", type=int, default=4, help="slurm: CPU cores per job")
    parser.add_argument("--slurm-gpus", type=int, default=1, help="slurm: GPUs per job")
    parser.add_argument("--slurm-array-parallelism", type=int, default=None,
                        help="slurm: jobs of the array running at once (default: the cluster's limit)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


# sub-command -> (module whose run(args) implements it, one-line summary, description, argument builder)
COMMANDS = {
    "convert": (
        "hf_treelang.models.convert",
        "turn a state dict of the paper's code into a TreeLang checkpoint",
        "Convert a state dict saved by the paper's code into a TreeLang checkpoint folder.",
        _convert_arguments,
    ),
    "publish-dataset": (
        "hf_treelang.data.publish",
        "write a Hub-ready dataset repository (Parquet + card)",
        "Write a Hub-ready dataset repository: one config per (grammar seed, σ, k), named like seed15-sigma1.0-k2, "
        "with Parquet per split and its grammar.json; README.md card with BP accuracies. --configs also takes Random "
        "Hierarchy Model configs (rhm-v8-m4-s2-L3), alone or beside the paper's.",
        _publish_arguments,
    ),
    "calibration": (
        "hf_treelang.analysis.calibration",
        "model vs BP probabilities (Fig. 1b)",
        "Model probabilities vs exact BP marginals (paper Fig. 1b): masked leaf (MLM) or root, on in-sample and "
        "uniform random sequences; any architecture's logits over the q symbols, renormalised, with the probability "
        "it put on the special ids (mass_on_special_tokens). Writes calibration.png and calibration.json.",
        _calibration_arguments,
    ),
    "attention": (
        "hf_treelang.analysis.attention",
        "average attention maps per layer (Fig. 4)",
        "Every layer's attention averaged over in-sample inputs (paper Fig. 4); several checkpoints give a grid "
        "with one row per model. Writes attention.png and attention.json. With --template, RUN is a training run "
        "folder: every checkpoint's layers are compared with App. F's attention templates (1 - mean total-variation "
        "distance), written as attention_template.png and attention_template.json. Another architecture is read "
        "with its eager attention; one without attention (Mamba, RWKV) is refused.",
        _attention_arguments,
    ),
    "probe": (
        "hf_treelang.analysis.probing",
        "ancestor probes per (layer, level) (Fig. 3b)",
        "Ancestor probes per (encoder layer, ancestor level) on frozen hidden states (paper Fig. 3b, App. "
        "E.6-E.7). Writes probe.png and probe.json (probe_ends.* with --positions ends).",
        _probe_arguments,
    ),
    "compare": (
        "hf_treelang.analysis.compare",
        "runs of any architectures side by side against the exact oracle: a table and a figure",
        "Runs of any architectures (--model_type) side by side: architecture, parameters, steps/s, the closest BP_k "
        "along training and the climb times t_k, the final KL to the matched BP, the accuracy next to BP's per "
        "k_test, the probability on non-symbol ids and a causal run's excess loss; runs that differ only in their "
        "seed as mean ± std. Writes compare.md, compare.json, compare.csv and compare.png.",
        _compare_arguments,
    ),
    "construct": (
        "hf_treelang.analysis.construction",
        "App. F's transformer whose weights compute BP_0 exactly: the analyses' positive control",
        "Build the BP transformer of a grammar (paper Sec. 4, App. F): ℓ attention layers reading positions only, "
        "bilinear feed-forward updates, softmax(logits) = BP_0's leaf marginals (--task mlm) or root posterior "
        "(--task root) to float rounding. Writes OUT as a finished run folder, so that hf-treelang attention, probe "
        "and calibrate run on a model whose right answer is known.",
        _construct_arguments,
    ),
    "dynamics": (
        "hf_treelang.analysis.dynamics",
        "KL-to-BP_k and k_test curves of a run, or the spread over several (Fig. 1c/d, 2b, 3a)",
        "KL-to-BP_k curves (Fig. 1c/d) and the k_test accuracy staircase with BP reference lines (Fig. 2b, 3a) "
        "from a run's BP-KL history. Writes dynamics.png and dynamics.json; for a causal run also "
        "dynamics_positions.png, the KL to the matched BP per leaf position over training. With several runs (one "
        "training over several model seeds): each run's files as dynamics_<i>.*, plus dynamics_seeds.json and "
        "dynamics_seeds.png, the spread of the closest BP_k, the climb times and the final accuracy and KL.",
        _dynamics_arguments,
    ),
    "generate": (
        "hf_treelang.analysis.generation",
        "sample a causal model; KL(model ‖ data) and KL(data ‖ model)",
        "Sample N sequences from a causal run (TreeLang's or any architecture's, over the q symbols) and score them with the exact oracle BP_{k_train}: the "
        "estimated KL(model ‖ data) = E_model[log Q − log P] over the samples and KL(data ‖ model) = E_data[log P − "
        "log Q] over N true sequences, each ± its standard error, with the mean log-likelihoods under the grammar "
        "and the entropy rate. Samples of probability zero under the grammar make KL(model ‖ data) +inf (counted). "
        "Writes generate.png and generate.json.",
        _generate_arguments,
    ),
    "sample-complexity": (
        "hf_treelang.analysis.sample_complexity",
        "accuracy vs P: three arms (Fig. 1f), or any learner against BP_0 with P*",
        "Root accuracy vs P. With an MLM CHECKPOINT: without pre-training, and from the checkpoint frozen or "
        "fine-tuned (paper Fig. 1f), writing sample_complexity.png and sample_complexity.json. Without one: the "
        "learner --model_type (the architecture comparison's size and tuned rate by default) on the paper's grammar "
        "or a Random Hierarchy Model (--num_rules), each (P, seed) trained until its validation accuracy stops "
        "improving, against BP_0, with P*. Prints the estimated time first; the files are redrawn as runs finish. "
        "Each run keeps its folder under OUT/runs (a sweep, see hf-treelang sweep): a rerun reuses a run only when "
        "its identity (arguments, checkpoint content, data format) is unchanged, and refuses an OUT written with "
        "other settings unless --force.",
        _sample_complexity_arguments,
    ),
    "sweep": (
        "hf_treelang.sweep.runner",
        "a grid of training runs, locally or on SLURM, resumable",
        "Train every run of a grid SPEC into OUT/runs/<grid point>/: on worker processes (--executor local) or as a "
        "SLURM job array through submitit (--executor slurm). A rerun skips finished runs of the same identity (a "
        "hash of the resolved arguments, the starting checkpoint and the data format), resumes interrupted ones "
        "from their last checkpoint and trains changed ones again. Results are appended to OUT/results.jsonl and "
        "OUT/sweep.png is redrawn as runs finish; --status OUT shows done / running / failed.",
        _sweep_arguments,
    ),
    "prune": (
        "hf_treelang.train.prune",
        "remove a finished run's checkpoints before sharing it",
        "Remove the checkpoint-<step> folders of finished runs (most of a run's bytes), which a resume and the "
        "attention dynamics over training read: the folder stays a complete run for every analysis, compare and "
        "sweep (run_complete.json lists what remains and the checkpoints removed). Every folder is checked first: a run that is incomplete, damaged or "
        "held by a live process is refused before any is touched.",
        _prune_arguments,
    ),
    "reproduce": (
        "hf_treelang.reproduce",
        "data, BP, training and every analysis, with report.md",
        "Data, BP baselines, training and every analysis of the paper, with OUT/report.md. Resumable: finished "
        "steps (OUT/.done/<step>.json) are skipped when the command is rerun.",
        _reproduce_arguments,
    ),
}


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser of the sub-command ``name`` on its own (prog ``hf-treelang NAME``), as :func:`run_command` uses."""
    if name not in COMMANDS:
        raise ValueError(f"name must be one of {list(COMMANDS)}, got {name!r}")
    _, _, description, add_arguments = COMMANDS[name]
    parser = argparse.ArgumentParser(prog=f"{PROG} {name}", description=description, formatter_class=HelpFormatter,
                                     allow_abbrev=False)  # an abbreviated option is an error, never a guess
    add_arguments(parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The ``hf-treelang`` parser: ``--version`` and one sub-parser per command (the same as :func:`command_parser`)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Filtered hierarchical tree languages, their exact BP oracle, and transformers that learn them.",
        epilog=f"Run '{PROG} COMMAND --help' for the options of a command.",
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    for name, (_, summary, description, add_arguments) in COMMANDS.items():
        add_arguments(commands.add_parser(name, prog=f"{PROG} {name}", help=summary, description=description,
                                          formatter_class=HelpFormatter, allow_abbrev=False))
    return parser


# Commands that call :func:`register` themselves, once they know they need torch (a cached ``reproduce --plan`` does
# not).
REGISTERS_ITSELF = ("reproduce",)


def _run(name: str, args: argparse.Namespace) -> int:
    """Register TreeLang (deferred to here in the console script), import the command's module, run it."""
    if name not in REGISTERS_ITSELF:
        register()
    try:
        _check_common_arguments(args)
    except (ValueError, TypeError) as error:
        sys.stderr.write(f"{PROG} {name}: error: {error}\n")
        return 2
    # no progress bar outside a terminal (a log file, a pipe) or with --no-progress: the libraries' ("Writing model
    # shards", "Loading weights", dataset generation) and the command's own, which read args.no_progress
    args.no_progress = quiet_progress_bars_off_terminal(force=getattr(args, "no_progress", False))
    module = importlib.import_module(COMMANDS[name][0])
    return module.run(args) or 0


def _check_common_arguments(args: argparse.Namespace) -> None:
    """Refuse a bad output folder (``out``: a file, under a file, unwritable) or a torch device this machine lacks
    (``--device``) before the command loads or computes anything."""
    if getattr(args, "out", None) is not None:
        check_output_folder("out", args.out)
    if getattr(args, "device", None) is not None:
        from hf_treelang.analysis.io import check_device  # lazy: hf_treelang.analysis loads torch; --help must not

        check_device(args.device)


def run_command(name: str, argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) as the arguments of the sub-command ``name`` and run it.

    What the tests call (``run_command("calibration", [...])``). Returns the exit status: 0, or 2 after a one-line
    ``hf-treelang NAME: error: ...`` on stderr for bad input; usage errors exit through argparse (status 2).
    """
    args = command_parser(name).parse_args(argv)
    return _run(name, args)


def main(argv: list[str] | None = None) -> int:
    """The ``hf-treelang`` console script: ``hf-treelang COMMAND [ARGS...]``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.command is None:
        parser.print_help()
        return 0
    return _run(args.command, args)


if __name__ == "__main__":
    sys.exit(main())
