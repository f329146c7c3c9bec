"""A learner's sample complexity as runs: one grammar, one architecture, a grid of P and seeds, every run trained until
its validation accuracy stops improving; and the campaign of every root architecture on the paper's grammar and on
Random Hierarchy Models.

A **curve** (:class:`Curve`) is a grammar (:class:`CurveGrammar`: the paper's log-normal grammar, or a Random
Hierarchy Model), a learner (:class:`Learner`: an architecture at a size and a learning rate), the numbers P of
training sequences and the model seeds. Each (P, seed) is one root-classification run (``OUT/runs/<grammar>/
<architecture>-P<P>-seed<s>``) on the full hierarchy (k_train = 0, whose optimum is BP_0), trained by the validation
stopping rule (:mod:`hf_treelang.train.stopping`) with the defaults of ``reproduce --preset laptop_full``'s sweeps
(:class:`Stopping`: a check of the accuracy on 2**12 held-out sequences every 128 steps, stop after 8 checks without
an improvement, at most 24,576 steps), tested on 2**13 sequences of k_test = 0 where BP_0's accuracy is logged on the
same inputs. Every run also checkpoints every :data:`RESUME_CHECKPOINT_STEPS` steps only to resume from, keeps no
other checkpoint and evaluates once more at its last step.

A learner's default size is the comparison's for its architecture (:func:`hf_treelang.sweep.comparison.architecture`:
the laptop TreeLang model's parameter count, one layer per level) and its default rate the one the comparison tuned
for the cell of the same grammar family, task and architecture (``paper-root-<architecture>`` or
``rhm-root-<architecture>`` of ``docs/compare/protocol/rates.json``, read with
:func:`~hf_treelang.sweep.comparison.read_rates`; :func:`tuned_rate`); a cell with no tuned rate is refused in one line
unless a rate is given.

**The campaign** (:func:`campaign_curves`, ``training/sample_complexity_campaign.py``): the comparison's six root
architectures on the paper's grammar at P = 2^10 … 2^16 with three seeds; four of them (TreeLang, GPT-2, Llama, RWKV:
an encoder, two causal decoders and a recurrent model) on the Random Hierarchy Models v = 8, s = 2 with m ∈ {2, 3, 4}
and L ∈ {2, 3}, each at P = n_c m^L / 8 … 8 n_c m^L in doublings (around the theory's P* ≈ n_c m^L) with two seeds.
The runs train through the sweep engine (resumable, identity-checked), two one-thread runs at a time, curve by curve
(every P and seed of one grammar and architecture before the next), so that a campaign stopped part-way has whole
curves to publish; :func:`plan_campaign` counts them and bounds their time before any is trained.

Glossary: P training sequences, ℓ (L) depth, v symbols, n_c root classes, m rules per symbol, s arity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hf_treelang.core.params import check_int, check_real
from hf_treelang.dataset_builder.treelang import config_name, hierarchy_config_name
from hf_treelang.train import laptop_settings as laptop
from hf_treelang.models.architectures import TREELANG

from . import comparison
from .runner import execute_runs, plan_runs, sweep_run

TASK = "root"
PATIENCE = laptop.FULL["sweep_patience"]  # checks in a row without an improvement that stop a run
CHECK_STEPS = laptop.FULL["sweep_check_steps"]  # optimizer steps between two checks
MAX_STEPS = laptop.FULL["sweep_max_steps"]  # the longest a run trains
MIN_STEPS = laptop.FULL["sweep_min_steps"]  # no check before this step stops a run (the plateau before learning)
THRESHOLD = 0.0  # the improvement a check must exceed (the rule's default, as laptop_full's)
NUM_VALIDATION = laptop.FULL["sweep_num_eval"]  # the held-out sequences the checks (and the KL to BP_0) read
NUM_TEST = laptop.FULL["sweep_num_test"]  # the test sequences of k_test = 0
RESUME_CHECKPOINT_STEPS = comparison.RESUME_CHECKPOINT_STEPS
RATES_FILE = Path(__file__).resolve().parents[2] / "docs" / "compare" / "protocol" / "rates.json"


def _check_grid(name: str, values, low: int) -> tuple:
    """``values`` (a non-empty list of integers >= ``low`` without repeats) as a tuple."""
    if isinstance(values, (int, str)) or not values:
        raise ValueError(f"`{name}` must list at least one integer >= {low}, got {values!r}")
    checked = tuple(check_int(name, value, low) for value in values)
    if len(set(checked)) != len(checked):
        raise ValueError(f"`{name}` must not repeat a value, got {list(checked)}")
    return checked


def check_sizes(sizes) -> tuple:
    """The numbers P of training sequences: a non-empty list of integers >= 1 without repeats."""
    return _check_grid("sizes", sizes, 1)


def check_seeds(seeds) -> tuple:
    """The model seeds: an int, or a non-empty list of integers >= 0 without repeats."""
    return _check_grid("seeds", [seeds] if isinstance(seeds, int) and not isinstance(seeds, bool) else seeds, 0)


def grammar_name(data_args) -> str:
    """The name of a run's grammar (its ``data_args``), also its folder under ``OUT/runs``:
    :attr:`CurveGrammar.name`."""
    return curve_grammar(data_args).name


@dataclass(frozen=True)
class CurveGrammar:
    """The data of a curve: the paper's log-normal grammar (q, ℓ, σ, grammar seed) or a Random Hierarchy Model
    (``num_rules`` m given: v = ``num_symbols``, n_c = ``num_classes``, s = ``arity``, L = ``depth``). Build one with
    :func:`paper_grammar` or :func:`random_hierarchy`; a value out of range is a ValueError naming it."""

    num_symbols: int
    depth: int
    grammar_seed: int = 0
    sigma: float | None = 1.0  # None: a Random Hierarchy Model's (uniform rules)
    num_rules: int | None = None
    num_classes: int | None = None
    arity: int | None = None

    def __post_init__(self):
        self.name  # noqa: B018 - the dataset config names check every parameter, naming the one out of range

    @property
    def is_random_hierarchy(self) -> bool:
        return self.num_rules is not None

    @property
    def family(self) -> str:
        """The comparison's grammar of the same kind (its cells' first word): ``"rhm"`` or ``"paper"``."""
        return "rhm" if self.is_random_hierarchy else "paper"

    def arguments(self) -> dict:
        """The run arguments that fix this grammar (the training scripts' names)."""
        if self.is_random_hierarchy:
            return {"num_symbols": self.num_symbols, "num_rules": self.num_rules, "num_classes": self.num_classes,
                    "arity": self.arity, "depth": self.depth, "grammar_seed": self.grammar_seed}
        return {"num_symbols": self.num_symbols, "depth": self.depth, "grammar_seed": self.grammar_seed,
                "sigma": float(self.sigma)}

    @property
    def name(self) -> str:
        """A Random Hierarchy Model's dataset config name (``rhm-v8-m4-s2-L3``), or ``paper-`` and the paper's
        grammar's (``paper-seed0-sigma1.0``; q and ℓ named where they are not the paper's 4)."""
        if self.is_random_hierarchy:
            return hierarchy_config_name(self.num_symbols, self.num_classes, self.num_rules, self.arity, self.depth,
                                         self.grammar_seed)
        return "paper-" + config_name(self.grammar_seed, self.sigma, 0, self.num_symbols,
                                      self.depth).removesuffix("-k0")

    @property
    def scale(self) -> int | None:
        """n_c m^L, the theory's sample complexity of a Random Hierarchy Model (None for the paper's grammar)."""
        return self.num_classes * self.num_rules**self.depth if self.is_random_hierarchy else None


def paper_grammar(grammar_seed: int = 0, sigma: float = 1.0, num_symbols: int = 4, depth: int = 4) -> CurveGrammar:
    """The paper's log-normal grammar (default: q = 4, ℓ = 4, σ = 1, grammar seed 0)."""
    return CurveGrammar(num_symbols=num_symbols, depth=depth, grammar_seed=grammar_seed, sigma=float(sigma))


def random_hierarchy(num_symbols: int, num_rules: int, depth: int, arity: int = 2, num_classes: int | None = None,
                     grammar_seed: int = 0) -> CurveGrammar:
    """A Random Hierarchy Model: v = ``num_symbols``, m = ``num_rules``, L = ``depth``, s = ``arity``, n_c =
    ``num_classes`` (default v)."""
    return CurveGrammar(num_symbols=num_symbols, depth=depth, grammar_seed=grammar_seed, sigma=None,
                        num_rules=num_rules, num_classes=num_symbols if num_classes is None else num_classes,
                        arity=arity)


def curve_grammar(data_args) -> CurveGrammar:
    """The grammar of a run's ``data_args`` (its Random Hierarchy Model's unset n_c and s at their defaults)."""
    d = data_args
    if d.num_rules is not None:
        return random_hierarchy(d.num_symbols, d.num_rules, d.depth, d.arity or 2, d.num_classes, d.grammar_seed)
    return paper_grammar(d.grammar_seed, d.sigma, d.num_symbols, d.depth)


def tuned_rate(grammar: CurveGrammar, architecture: str, rates_file=RATES_FILE) -> float:
    """The learning rate the comparison chose for ``architecture``'s root classifier on ``grammar``'s family (cell
    ``<paper|rhm>-root-<architecture>`` of ``rates_file``, read by :func:`~hf_treelang.sweep.comparison.read_rates`);
    a ValueError naming the cell and the file when it has none."""
    cell = f"{grammar.family}-{TASK}-{architecture}"
    path = Path(rates_file)
    if not path.is_file():
        raise ValueError(f"no tuned learning rate for {architecture}: the comparison's rates file {str(path)!r} does "
                         f"not exist; give --learning_rate (or --rates FILE)")
    rates = comparison.read_rates(path)
    if cell not in rates:
        tuned = sorted(name for name in rates if name.startswith(f"{grammar.family}-{TASK}-"))
        raise ValueError(f"no tuned learning rate for cell {cell!r} in {str(path)!r} (its {grammar.family} root cells: "
                         f"{', '.join(tuned) or 'none'}); give --learning_rate")
    return float(rates[cell]["chosen"])


def _override_value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def treelang_overrides(config_overrides: str) -> dict:
    """``"hidden_size=16,num_hidden_layers=1"`` as the TreeLang encoder's own run arguments (``{"hidden_size": 16,
    ...}``): TreeLang is sized by its flags, the other architectures by ``--config_overrides``."""
    fields = {}
    for part in config_overrides.split(","):
        name, sign, value = part.partition("=")
        if not sign or not name.strip() or not value.strip():
            raise ValueError(f"`config_overrides` must be 'field=value,...', got {config_overrides!r}")
        fields[name.strip()] = _override_value(value.strip())
    return fields


@dataclass(frozen=True)
class Learner:
    """An architecture (``model_type``: ``"treelang"`` or a model type of transformers), its size and its rate.

    ``config_overrides`` None: the comparison's size for the architecture (with n_L = ℓ); else its fields (for
    TreeLang, its own flags of the same names)."""

    architecture: str
    learning_rate: float
    config_overrides: str | None = None

    def __post_init__(self):
        check_real("learning_rate", self.learning_rate, 0.0)
        if not self.learning_rate > 0:
            raise ValueError(f"`learning_rate` must be a real number > 0, got {self.learning_rate!r}")

    def arguments(self, depth: int) -> dict:
        """The run arguments of this learner on trees of ``depth`` levels."""
        if self.config_overrides is None:
            try:
                sized = comparison.architecture(self.architecture, depth)
            except ValueError as error:
                raise ValueError(f"--model_type {self.architecture!r} has no size in the comparison ({error}); give "
                                 f"--config_overrides") from None
        elif self.architecture == TREELANG:
            sized = treelang_overrides(self.config_overrides)
        else:
            sized = {"model_type": self.architecture, "config_overrides": self.config_overrides}
        return {**sized, "learning_rate": float(self.learning_rate)}


def default_learner(architecture: str, grammar: CurveGrammar, *, learning_rate: float | None = None,
                    config_overrides: str | None = None, rates_file=RATES_FILE) -> Learner:
    """``architecture`` at the comparison's size (or ``config_overrides``) and at ``learning_rate``, else the rate
    tuned for its cell (:func:`tuned_rate`)."""
    if not isinstance(architecture, str) or not architecture.strip():
        raise ValueError(f"`model_type` must name an architecture (treelang, bert, gpt2, ...), got {architecture!r}")
    if config_overrides is None:  # an architecture the comparison does not size is refused before its rate
        Learner(architecture, 1.0).arguments(grammar.depth)
    rate = tuned_rate(grammar, architecture, rates_file) if learning_rate is None else learning_rate
    return Learner(architecture=architecture, learning_rate=rate, config_overrides=config_overrides)


@dataclass(frozen=True)
class Stopping:
    """The validation stopping rule of every run of a curve (:mod:`hf_treelang.train.stopping`): a check every
    ``every`` optimizer steps, stop after ``patience`` checks without an improvement larger than ``threshold``, not
    before step ``min_steps``, at most ``max_steps`` steps. The defaults are ``reproduce --preset laptop_full``'s
    sweeps'."""

    patience: int = PATIENCE
    every: int = CHECK_STEPS
    threshold: float = THRESHOLD
    max_steps: int = MAX_STEPS
    min_steps: int = MIN_STEPS

    def __post_init__(self):
        check_int("early_stopping_patience", self.patience, 1)
        check_int("early_stopping_eval_steps", self.every, 1)
        check_real("early_stopping_threshold", self.threshold, 0.0, 1.0)
        check_int("max_steps", self.max_steps, 1)
        check_int("early_stopping_min_steps", self.min_steps, 0)  # past the cap: every run trains to the cap

    def arguments(self) -> dict:
        floor = {"early_stopping_min_steps": int(self.min_steps)} if self.min_steps else {}
        return {"max_steps": int(self.max_steps), "early_stopping_patience": int(self.patience),
                "early_stopping_eval_steps": int(self.every), "early_stopping_threshold": float(self.threshold),
                **floor}

    @property
    def fewest_steps(self) -> int:
        """The steps of a run whose first check is its best: ``patience`` more checks and the first check at or after
        the floor, or the cap."""
        floor = -(-self.min_steps // self.every) * self.every
        return min(self.max_steps, max((self.patience + 1) * self.every, floor))


@dataclass(frozen=True)
class Curve:
    """One grammar and one learner over the grid ``sizes`` × ``seeds`` (see the module docstring).

    ``extra``: run arguments every run of the curve takes besides (threads, the data's source, ...)."""

    grammar: CurveGrammar
    learner: Learner
    sizes: tuple
    seeds: tuple
    stopping: Stopping = field(default_factory=Stopping)
    num_validation: int = NUM_VALIDATION
    num_test: int = NUM_TEST
    batch_size: int | None = None  # None: the laptop preset's
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "sizes", check_sizes(self.sizes))
        object.__setattr__(self, "seeds", check_seeds(self.seeds))
        check_int("num_validation", self.num_validation, 1)
        check_int("num_test", self.num_test, 1)
        if self.batch_size is not None:
            check_int("batch_size", self.batch_size, 1)

    @property
    def name(self) -> str:
        """``<grammar>-<architecture>``: what ``--only`` selects (by the name or a prefix of it)."""
        return f"{self.grammar.name}-{self.learner.architecture}"

    def run_name(self, size: int, seed: int) -> str:
        return f"{self.grammar.name}/{self.learner.architecture}-P{size}-seed{seed}"

    def arguments(self, size: int, seed: int) -> dict:
        """The run arguments of (P = ``size``, model seed ``seed``): the laptop root preset, this grammar, learner,
        stopping rule and evaluation sizes."""
        return {**self.grammar.arguments(), **self.learner.arguments(self.grammar.depth), "k_train": 0,
                "k_test": [0], "num_train": int(size), "num_eval": int(self.num_validation),
                "num_test": int(self.num_test), **self.stopping.arguments(), "seed": int(seed),
                "num_evaluations": 1, "num_checkpoints": 0, "resume_checkpoint_steps": RESUME_CHECKPOINT_STEPS,
                **({} if self.batch_size is None else {"per_device_train_batch_size": int(self.batch_size)}),
                **self.extra}

    def runs(self, out) -> list:
        """Every run of the curve in ``out`` (P outer, seeds inner), resolved and checked: an argument out of range
        is a ValueError naming the run."""
        return [sweep_run(TASK, self.arguments(size, seed), out, self.run_name(size, seed),
                          point={"curve": self.name, "num_train": size, "seed": seed})
                for size in self.sizes for seed in self.seeds]


# ---------------------------------------------------------------- the campaign

PAPER_SIZES = tuple(2**power for power in range(10, 17))  # around the TreeLang root classifier's transition
PAPER_SEEDS = (0, 1, 2)
RHM_ARCHITECTURES = ("treelang", "gpt2", "llama", "rwkv")
RHM_SYMBOLS, RHM_ARITY = 8, 2
RHM_RULES = (2, 3, 4)  # m
RHM_DEPTHS = (2, 3)  # L
RHM_SEEDS = (0, 1)
RHM_DOUBLINGS = 3  # P from n_c m^L / 2^3 to n_c m^L * 2^3
CAMPAIGN_EXTRA = {"cpu_threads": 1}  # two one-thread runs at a time
CAMPAIGN_WORKERS = 2


def hierarchy_sizes(grammar: CurveGrammar, doublings: int = RHM_DOUBLINGS) -> tuple:
    """P = n_c m^L · 2^j for j = -``doublings`` … ``doublings`` (each at least 1)."""
    return tuple(sorted({max(1, round(grammar.scale * 2.0**power)) for power in range(-doublings, doublings + 1)}))


def campaign_grammars() -> list:
    """The campaign's grammars in training order: the paper's, then the Random Hierarchy Models by n_c m^L."""
    hierarchies = [random_hierarchy(RHM_SYMBOLS, m, depth, RHM_ARITY) for m in RHM_RULES for depth in RHM_DEPTHS]
    return [paper_grammar(), *sorted(hierarchies, key=lambda g: (g.scale, g.depth))]


def campaign_curves(rates_file=RATES_FILE) -> list:
    """The campaign's curves in training order: on the paper's grammar the comparison's six root architectures
    (:data:`~hf_treelang.sweep.comparison.ROOT`) at :data:`PAPER_SIZES` × :data:`PAPER_SEEDS`; on each Random
    Hierarchy Model :data:`RHM_ARCHITECTURES` at :func:`hierarchy_sizes` × :data:`RHM_SEEDS`; every learner at the
    comparison's size and tuned rate."""
    curves = []
    for grammar in campaign_grammars():
        names = RHM_ARCHITECTURES if grammar.is_random_hierarchy else comparison.ROOT
        sizes = hierarchy_sizes(grammar) if grammar.is_random_hierarchy else PAPER_SIZES
        seeds = RHM_SEEDS if grammar.is_random_hierarchy else PAPER_SEEDS
        curves += [Curve(grammar, default_learner(name, grammar, rates_file=rates_file), sizes, seeds,
                         extra=dict(CAMPAIGN_EXTRA)) for name in names]
    return curves


def curve_runs(curves: list, out) -> list:
    """The runs of ``curves`` in ``out``, curve by curve; two curves may not share a name."""
    names = [curve.name for curve in curves]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"two curves share the name {repeated[0]!r} (a grammar and an architecture): give each once")
    return [run for curve in curves for run in curve.runs(out)]


@dataclass
class CampaignPlan:
    """What a campaign would train: its curves and runs, those finished in ``OUT``, and its optimizer steps and time
    between two bounds (every run stopped at its first chance, every run at its cap).

    Attributes:
        curves, runs: the selected curves and their runs.
        finished: the names of the runs finished in ``OUT`` with today's identity.
        fewest_steps, most_steps: the optimizer steps of the runs left to train at those bounds.
        seconds: ``(fewest, most)`` at the steps/s measured here, ``workers`` runs at a time (None: not measured).
        rates: ``{architecture: steps/s}`` measured (one thread per run).
    """

    curves: list
    runs: list
    finished: list
    fewest_steps: int
    most_steps: int
    workers: int
    seconds: tuple | None = None
    rates: dict = field(default_factory=dict)
    busy_note: str | None = None

    def lines(self) -> list:
        """The plan as lines of text."""
        from hf_treelang.progress import format_duration  # lazy: only a printed plan formats durations

        lines = [f"{len(self.runs)} runs in {len(self.curves)} curves (a grammar and an architecture each), "
                 f"{len(self.finished)} finished in OUT, {len(self.runs) - len(self.finished)} to train, "
                 f"{self.workers} at a time, one thread each"]
        for grammar in dict.fromkeys(curve.grammar.name for curve in self.curves):
            ours = [curve for curve in self.curves if curve.grammar.name == grammar]
            sizes = sorted({size for curve in ours for size in curve.sizes})
            count = sum(len(curve.sizes) * len(curve.seeds) for curve in ours)
            scale = ours[0].grammar.scale
            lines.append(f"  {grammar}{'' if scale is None else f' (n_c m^L = {scale})'}: "
                         f"{', '.join(curve.learner.architecture for curve in ours)} × P = {sizes[0]} … {sizes[-1]} "
                         f"({len(sizes)} values) × {len(ours[0].seeds)} seeds: {count} runs")
        lines.append(f"optimizer steps left: at least {self.fewest_steps:,} (every run stopping at its first chance), "
                     f"at most {self.most_steps:,} (every run at its cap)")
        for name, rate in self.rates.items():
            lines.append(f"  measured here, one thread: {rate:.1f} steps/s for {name}")
        if self.seconds is not None:
            lines.append(f"estimated time here, {self.workers} runs at a time: between "
                         f"{format_duration(self.seconds[0])} and {format_duration(self.seconds[1])} of optimizer "
                         f"steps (evaluations and stopping checks not counted)")
        if self.busy_note:
            lines.append(f"  {self.busy_note}")
        return lines


def plan_campaign(out, *, curves: list | None = None, only=None, workers: int = CAMPAIGN_WORKERS,
                  measure: bool = True) -> CampaignPlan:
    """The plan of :func:`run_campaign` with the same arguments; nothing is trained or written. ``measure``: time a
    few optimizer steps of each architecture here (:func:`hf_treelang.sweep.estimate.estimate`) for the time bounds."""
    chosen = comparison.selected(campaign_curves() if curves is None else curves, only, what="curve")
    runs = curve_runs(chosen, out)
    states = plan_runs(runs, out)
    finished = [run.name for run in runs if states[run.name].status == "done"]
    left = [run for run in runs if run.name not in finished]
    stopping = {run.name: curve.stopping for curve in chosen for run in curve.runs(out) if run.name not in finished}
    fewest = sum(stopping[run.name].fewest_steps for run in left)
    most = sum(stopping[run.name].max_steps for run in left)
    plan = CampaignPlan(curves=chosen, runs=runs, finished=finished, fewest_steps=fewest, most_steps=most,
                        workers=workers)
    if measure and left:
        from .estimate import estimate  # lazy: the measurement builds every architecture's model

        measured = estimate(left, workers=workers, threads=1, devices=("cpu",))
        cpu = measured.seconds["cpu"]
        plan.seconds = (cpu * fewest / most, cpu)
        plan.rates = dict(measured.rates.get("cpu", {}))
        plan.busy_note = measured.busy_note()
    return plan


def run_campaign(out, *, curves: list | None = None, only=None, workers: int = CAMPAIGN_WORKERS, log=print):
    """Train the campaign's curves (default :func:`campaign_curves`; ``only``: the curves named so or by a prefix)
    into ``out``, resumable: finished runs of today's identity are skipped, interrupted ones resume, changed ones
    train again. Every check runs before the first run starts. Returns the
    :class:`~hf_treelang.sweep.runner.SweepResult`."""
    chosen = comparison.selected(campaign_curves() if curves is None else curves, only, what="curve")
    runs = curve_runs(chosen, out)
    log(f"sample-complexity campaign: {len(runs)} runs of {len(chosen)} curves, {workers} at a time")
    return execute_runs(runs, out, workers=workers, threads=1, estimate=False, log=log)


def published_runs(curves: list, out) -> tuple:
    """``(complete, partial)``: the curves of ``curves`` whose every run has finished in ``out`` with today's
    identity, as ``[(curve, [(run, summary), ...])]``, and the others as ``[(curve, finished count)]``."""
    from hf_treelang.train.folders import finished_run  # lazy: only publishing reads the run folders

    complete, partial = [], []
    for curve in curves:
        done = [(run, finished_run(run.output_dir, run.identity)) for run in curve.runs(out)]
        finished = [(run, summary) for run, summary in done if summary is not None]
        if len(finished) == len(done):
            complete.append((curve, finished))
        else:
            partial.append((curve, len(finished)))
    return complete, partial


__all__ = ["CAMPAIGN_WORKERS", "CampaignPlan", "Curve", "CurveGrammar", "Learner", "PAPER_SIZES", "RATES_FILE",
           "Stopping", "campaign_curves", "campaign_grammars", "check_seeds", "check_sizes", "curve_grammar",
           "curve_runs", "default_learner", "grammar_name", "hierarchy_sizes", "paper_grammar", "plan_campaign",
           "published_runs", "random_hierarchy", "run_campaign", "treelang_overrides", "tuned_rate"]
