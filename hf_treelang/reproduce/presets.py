"""The presets of ``hf-treelang reproduce``: the sizes of one reproduction (data, model, training, analyses).

``quick`` (the training scripts' laptop runs, :mod:`hf_treelang.train.laptop_settings`, plus one MLM on filtered
data and the analyses; at most 45 minutes on a 2-core CPU), ``laptop_long`` (the same with the 40-epoch MLM of
``run_mlm.py --preset laptop_long``, which gets closer to BP_0; over an hour), ``paper`` (the authors' settings,
figure by figure; weeks of GPU time for every sweep) and ``tiny`` (the smoke test of the test suite, every step at toy sizes).
The ``paper`` values and their sources (the authors' scripts) are listed in ``training/README.md``, "Paper vs code".
With the step names, this module imports nothing but ``dataclasses`` and the two settings modules of
:mod:`hf_treelang.train`:
``hf-treelang reproduce --help`` lists presets and steps from it without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hf_treelang.train import laptop_settings as laptop
from hf_treelang.train import paper_settings as paper

# The steps of every reproduction, in order; the functions are in :mod:`hf_treelang.reproduce.steps`.
BASE_STEPS = ("data", "bp", "train_root", "train_mlm", "dynamics", "calibration", "attention", "probe",
              "sample_complexity")
# Steps of the sweeps, after the base steps; a preset has those whose sizes it sets (:meth:`Preset.figure_steps`):
# Fig. 2a / 8 (root accuracy vs P per k_train), 6 (per n_L), 7 (per grammar), 11 (classifier attention maps) and
# 12 right (probes of the k_train MLM models).
FIGURE_STEPS = ("root_sweep", "layers_sweep", "seed_sweep", "classifier_attention", "probe_filtered")


def step_names(attention_filter_levels=(), figure_steps=FIGURE_STEPS) -> list:
    """The ordered step names of a reproduction with these ``attention_filter_levels`` and ``figure_steps``.

    One extra MLM training, ``train_mlm_k<k>``, per level k (for the attention grid and the k_train probes) follows
    ``train_mlm``; the ``figure_steps`` (a subset of :data:`FIGURE_STEPS`) come last, in that order.
    """
    after = BASE_STEPS.index("train_mlm") + 1
    figures = [name for name in FIGURE_STEPS if name in figure_steps]
    return [*BASE_STEPS[:after], *(f"train_mlm_k{k}" for k in attention_filter_levels), *BASE_STEPS[after:],
            *figures]


@dataclass(frozen=True)
class Preset:
    """Sizes of one reproduction (data: q, ℓ, σ, grammar seed, k_train; model; training; analyses; sweeps).

    Attributes (beyond the obvious): ``root_checkpoint_epochs`` / ``mlm_checkpoint_epochs`` evaluate and save the
    main runs at the end of those epochs; ``sweep_filter_levels`` the k_train of Figs. 2a / 8 (``sweep_sizes`` the
    P for k_train = 0, ``sweep_sizes_filtered`` for k_train > 0, ``sweep_epochs`` each); ``layer_counts`` the n_L of
    Fig. 6 (``layer_sizes`` its P; empty: the k_train = 0 sweep's); ``grammar_seeds`` the other grammars of Fig. 7
    (``seed_sweep_levels`` its k_train, empty: the sweep's; ``seed_sweep_sizes`` its P, empty: each k_train's sweep
    sizes); ``probe_*`` the probes of Figs. 3b / 12
    (``filtered_probe_hidden`` the readout of the k_train probes, 0 = linear); ``finetune_classifier_hidden_size`` the
    hidden units of the new root readout of Fig. 1f's pre-trained arms (0 = linear, as Sec. 3.2). An empty sweep
    setting leaves its step out of the preset. ``training_preset`` is the training scripts' preset the runs start
    from: ``"laptop"`` makes the main root and MLM runs *be* the scripts' default runs (only the data, k_train and
    k_test are given; everything else comes from :mod:`hf_treelang.train.laptop_settings`), ``"paper"`` gives every
    size and setting of this preset explicitly on top of the paper's model and optimiser. ``mlm_training_preset``
    is the scripts' preset of the main MLM run when it differs (``"laptop_long"``: ``run_mlm.py --preset
    laptop_long``). ``filtered_mlm_epochs`` shortens the MLM runs on filtered data (``attention_filter_levels``;
    None: the main MLM's epochs). ``main_num_eval`` / ``main_num_test`` size the in-sample (validation) and test
    sets of the main root and MLM runs, ``sweep_num_eval`` / ``sweep_num_test`` those of the sweep runs (None: the
    training preset's). ``sweep_patience`` trains every sweep run by the validation stopping rule
    (:mod:`hf_treelang.train.stopping`: a check of the validation accuracy every ``sweep_check_steps`` steps, stop
    after ``sweep_patience`` checks without an improvement, never before ``sweep_min_steps`` steps (None: no floor), at
    most ``sweep_max_steps`` steps) instead of for ``sweep_epochs``. ``workers`` > 0 trains every run of the preset
    first, that many side by side on one thread each (the sweep runner), then runs the analyses on the finished runs;
    0 trains each run when its step needs it.
    ``grammar_file`` (``reproduce --grammar_file``; :func:`hf_treelang.reproduce.steps.with_grammar_file`) trains
    every run and builds the data on the grammar in that file instead of the generated one (q and, for rules per
    level, ℓ are then the file's), ``grammar_sha256`` the sha256 of its content, so that a step done with another
    grammar under the same name is done again.
    """

    name: str
    description: str
    depth: int = 4
    num_symbols: int = 4
    sigma: float = 1.0
    grammar_seed: int = 0
    filter_level: int = 0
    model: dict = field(default_factory=dict)
    root_train: int = 2**14
    root_epochs: float = 5.0
    root_checkpoint_epochs: tuple = ()
    mlm_train: int = 2**14
    mlm_epochs: float = 10.0
    mlm_checkpoint_epochs: tuple = ()
    num_test: int = 2048
    num_evaluations: int = 12
    batch_size: int = 32
    learning_rate: float = 1e-4
    analysis_samples: int = 10_000
    probe_train: int = 2**13
    probe_validation: int = 2**11
    probe_test: int = 2**11
    probe_epochs: int = 10
    probe_batch_size: int = 32
    probe_learning_rate: float = 1e-4
    probe_hidden: int = 64
    filtered_probe_hidden: int = 0
    sample_sizes: tuple = (2**7, 2**9, 2**11)
    sample_epochs: float = 20.0
    sample_max_steps: int | None = None
    finetune_classifier_hidden_size: int = 0
    attention_filter_levels: tuple = ()
    sweep_filter_levels: tuple = ()
    sweep_sizes: tuple = ()
    sweep_sizes_filtered: tuple = ()
    sweep_epochs: float = 5.0
    layer_counts: tuple = ()
    layer_sizes: tuple = ()
    grammar_seeds: tuple = ()
    seed_sweep_levels: tuple = ()
    seed_sweep_sizes: tuple = ()
    use_dataset_builder: bool = True
    cpu_threads: int | None = None
    main_num_eval: int | None = None
    main_num_test: int | None = None
    sweep_num_eval: int | None = None
    sweep_num_test: int | None = None
    sweep_patience: int | None = None
    sweep_check_steps: int | None = None
    sweep_min_steps: int | None = None
    sweep_max_steps: int | None = None
    workers: int = 0
    training_preset: str = "paper"
    mlm_training_preset: str | None = None
    filtered_mlm_epochs: float | None = None
    grammar_file: str | None = None
    grammar_sha256: str | None = None

    def figure_steps(self) -> tuple:
        """The :data:`FIGURE_STEPS` this preset runs (those whose sweep it sizes)."""
        has = {
            "root_sweep": bool(self.sweep_filter_levels),
            "layers_sweep": bool(self.layer_counts),
            "seed_sweep": bool(self.grammar_seeds and self.sweep_filter_levels),
            "classifier_attention": bool(self.sweep_filter_levels),
            "probe_filtered": bool(self.attention_filter_levels),
        }
        return tuple(name for name in FIGURE_STEPS if has[name])

    @property
    def sweep_budget(self) -> str:
        """How long a sweep run trains, in words: ``"5 epochs"``, or by the validation stopping rule with its cap."""
        if self.sweep_patience is None:
            return f"{self.sweep_epochs:g} epochs"
        return f"until the validation accuracy stops improving (at most {self.sweep_max_steps:,} steps)"

    def sweep_sizes_of(self, filter_level: int) -> tuple:
        """P of the root-classification sweep at k_train = ``filter_level`` (Fig. 2a: 2^9..2^17, or 2^20 if k > 0)."""
        return self.sweep_sizes if filter_level == 0 or not self.sweep_sizes_filtered else self.sweep_sizes_filtered


# The paper's figures by their numbers, the one naming of a figure in the package (the plan, the report, the findings):
# figure -> (where it is in the paper, what it shows). The appendix's figures are numbered on: B = 5, E.1 = 6,
# E.2 = 7, E.3 = 8 and 9, E.4 = 10, E.5 = 11, E.7 = 12, F = 13 (E.6 describes the probes of Fig. 3b; it has none).
PAPER_FIGURES = {
    "1a": ("Sec. 1", "the filtered hierarchical model"),
    "1b": ("Sec. 1", "MLM predictions vs BP marginals, in- and out-of-sample"),
    "1c": ("Sec. 1", "root classification: KL to every BP_k along training"),
    "1d": ("Sec. 1", "MLM: KL to every BP_k along training"),
    "1e": ("Sec. 1", "attention maps of the MLM model"),
    "1f": ("Sec. 1", "root accuracy vs P: scratch, frozen and fine-tuned MLM encoder"),
    "2a": ("Sec. 3.2", "root accuracy along training for P and k_train"),
    "2b": ("Sec. 3.2", "root accuracy per k_test along training"),
    "3a": ("Sec. 3.3", "MLM accuracy per k_test along training"),
    "3b": ("Sec. 3.3", "ancestor probes per layer"),
    "4": ("Sec. 4", "attention maps of MLM models trained on filtered data"),
    "5": ("App. B", "the BP messages of a node"),
    "6": ("App. E.1", "root accuracy vs P for several numbers of layers"),
    "7": ("App. E.2", "root accuracy vs P for other grammars"),
    "8": ("App. E.3", "in-sample root accuracy vs P on filtered data"),
    "9": ("App. E.3", "KL to BP vs P on filtered data, in-sample and on uniform inputs"),
    "10": ("App. E.4", "MLM argmax agreement and Spearman correlation with BP_k"),
    "11": ("App. E.5", "attention maps of the root classifiers"),
    "12": ("App. E.7", "further probes (ends of the sequence, filtered data)"),
    "13": ("App. F", "the complementary-subtree attention of the BP implementation"),
}


def check_figures(figures) -> tuple:
    """``figures`` as a tuple, each a key of :data:`PAPER_FIGURES` (a ValueError names the first that is not)."""
    for figure in figures:
        if figure not in PAPER_FIGURES:
            raise ValueError(f"figure {figure!r} is not one of the paper's figures {tuple(PAPER_FIGURES)}")
    return tuple(figures)


QUICK_FILTER_LEVEL = 2  # the one MLM on filtered data of the quick preset (Fig. 4, Fig. 12 right) ...
QUICK_FILTERED_EPOCHS = 4.0  # ... trained for 4 of the laptop MLM's epochs: its blocks of 2^(ℓ-k) leaves are local


def _laptop_description(mlm: dict, budget: str) -> str:
    root, model = laptop.ROOT, laptop.MODEL
    return (f"the training scripts' laptop runs (ℓ=4, q=4, d={model['hidden_size']}, d'={model['intermediate_size']}, "
            f"4 layers; root P=2^{root['num_train'].bit_length() - 1}, {root['num_train_epochs']:g} epochs; MLM "
            f"P=2^{mlm['num_train'].bit_length() - 1}, {mlm['num_train_epochs']:g} epochs) and one MLM on data "
            f"filtered at k={QUICK_FILTER_LEVEL} ({QUICK_FILTERED_EPOCHS:g} epochs), then the analyses; {budget} on a "
            "2-core CPU; no sweeps (Figs. 2a, 6, 7, 8, 9 and 11 need --preset paper)")


PRESETS = {
    "quick": Preset(
        name="quick",
        description=_laptop_description(laptop.MLM, "at most 45 min"),
        model={**laptop.MODEL, "num_hidden_layers": 4, "num_attention_heads": 1},
        root_train=laptop.ROOT["num_train"], root_epochs=laptop.ROOT["num_train_epochs"],
        mlm_train=laptop.MLM["num_train"], mlm_epochs=laptop.MLM["num_train_epochs"],
        num_test=laptop.EVALUATION["num_test"], num_evaluations=laptop.EVALUATION["num_evaluations"],
        batch_size=laptop.OPTIMISER["per_device_train_batch_size"], learning_rate=laptop.OPTIMISER["learning_rate"],
        analysis_samples=10_000, probe_train=2**13, probe_validation=2**11, probe_test=2**11, probe_epochs=8,
        probe_batch_size=64, probe_learning_rate=1e-3,
        sample_sizes=(2**7, 2**9, 2**11), sample_epochs=20.0, sample_max_steps=400,
        attention_filter_levels=(QUICK_FILTER_LEVEL,), filtered_mlm_epochs=QUICK_FILTERED_EPOCHS,
        training_preset="laptop",
    ),
    "paper": Preset(
        name="paper",
        description="the authors' settings: ℓ=4, q=4, d=128, d'=2048, n_L=4; root P=2^17 for 200 epochs, MLM "
        "P=2^18 for 2000 epochs (checkpoints at the authors' epochs), 10^4 test inputs; Figs. 2a / 8 k_train=0..4 "
        "at P=2^9..2^17 (k=0) or 2^20 (k>0), 200 epochs each; Fig. 6 n_L=1..4; Fig. 7 grammar seeds 1, 15, 31; probes "
        "on 2^14 sequences, 100 epochs, best of 10^4 validation sequences; no gradient clipping",
        model={"hidden_size": paper.MODEL["hidden_size"], "num_hidden_layers": 4,
               "num_attention_heads": paper.MODEL["num_attention_heads"],
               "intermediate_size": paper.MODEL["intermediate_size"]},
        root_train=paper.ROOT_TRAIN, root_epochs=float(paper.ROOT_EPOCHS),
        root_checkpoint_epochs=paper.ROOT_CHECKPOINT_EPOCHS,
        mlm_train=paper.MLM_TRAIN, mlm_epochs=float(paper.MLM_EPOCHS),
        mlm_checkpoint_epochs=paper.MLM_CHECKPOINT_EPOCHS,
        num_test=paper.NUM_TEST, num_evaluations=paper.NUM_EVALUATIONS, analysis_samples=10_000,
        probe_train=paper.PROBE_TRAIN, probe_validation=paper.PROBE_VALIDATION, probe_test=2**12,
        probe_epochs=paper.PROBE_EPOCHS, probe_batch_size=paper.PROBE_BATCH_SIZE,
        probe_learning_rate=paper.PROBE_LEARNING_RATE, probe_hidden=paper.PROBE_HIDDEN,
        filtered_probe_hidden=paper.FILTERED_PROBE_HIDDEN,
        sample_sizes=(2**7, 2**9, 2**11, 2**13, 2**15, 2**17), sample_epochs=float(paper.FINETUNE_EPOCHS),
        finetune_classifier_hidden_size=0,
        attention_filter_levels=(1, 2, 3, 4),
        sweep_filter_levels=paper.SWEEP_FILTER_LEVELS, sweep_sizes=paper.SWEEP_SIZES,
        sweep_sizes_filtered=paper.SWEEP_SIZES_FILTERED, sweep_epochs=float(paper.SWEEP_EPOCHS),
        layer_counts=paper.LAYER_COUNTS, grammar_seeds=paper.GRAMMAR_SEEDS,
    ),
    "tiny": Preset(
        name="tiny",
        description="smoke test: ℓ=3, q=4, d=32, 2 layers, a few hundred sequences, every step and sweep",
        depth=3,
        model={"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 1, "intermediate_size": 64},
        root_train=128, root_epochs=1.0, root_checkpoint_epochs=(1,), mlm_train=128, mlm_epochs=1.0,
        num_test=64, num_evaluations=1, analysis_samples=64, probe_train=64, probe_validation=32, probe_test=32,
        probe_epochs=2, sample_sizes=(64,), sample_epochs=1.0,
        finetune_classifier_hidden_size=paper.FINETUNE_HIDDEN,
        attention_filter_levels=(2,), sweep_filter_levels=(0, 2), sweep_sizes=(64, 128), sweep_epochs=1.0,
        layer_counts=(1, 2), grammar_seeds=(1,), use_dataset_builder=False, cpu_threads=1,
    ),
}
# quick with the MLM of `run_mlm.py --preset laptop_long`, the laptop run that gets to the top of the hierarchy
# (Figs. 1b, 10 and 12 left need an MLM at BP_0); its root run and filtered MLM are quick's.
PRESETS["laptop_long"] = replace(
    PRESETS["quick"], name="laptop_long", description=_laptop_description(laptop.MLM_LONG, "over an hour"),
    mlm_train=laptop.MLM_LONG["num_train"], mlm_epochs=laptop.MLM_LONG["num_train_epochs"],
    mlm_training_preset="laptop_long")
# laptop_long with every sweep at laptop size, evaluation sets sized to decide, and its runs trained two side by side:
# the preset that decides every finding of the paper on a 2-core CPU (sizes and why: laptop_settings.FULL).
def _powers(sizes) -> str:
    return ", ".join(f"2^{size.bit_length() - 1}" for size in sizes)


PRESETS["laptop_full"] = replace(
    PRESETS["laptop_long"], name="laptop_full",
    description=_laptop_description(laptop.MLM_LONG, "several hours (--plan gives this machine's estimate)").replace(
        "; no sweeps (Figs. 2a, 6, 7, 8, 9 and 11 need --preset paper)",
        f"; evaluation sets of {laptop.FULL['main_num_eval']:,} in-sample and {laptop.FULL['main_num_test']:,} test "
        f"sequences per k_test; the sweeps of Figs. 2a / 8 / 9 (k_train = 0: P = {_powers(laptop.FULL['sweep_sizes'])}"
        f"; k_train = 1..4: P = {_powers(laptop.FULL['sweep_sizes_filtered'])}), 6 (n_L = "
        f"{', '.join(map(str, laptop.FULL['layer_counts']))} at P = {_powers(laptop.FULL['layer_sizes'])}), 7 "
        f"(grammar seeds {', '.join(map(str, laptop.FULL['grammar_seeds']))}, k_train = "
        f"{', '.join(map(str, laptop.FULL['seed_sweep_levels']))} at P = {_powers(laptop.FULL['seed_sweep_sizes'])}) "
        "and 11, each run trained until its validation accuracy stops improving; two runs at a time"),
    **laptop.FULL)
PUBLIC_PRESETS = ("quick", "laptop_long", "laptop_full", "paper")
