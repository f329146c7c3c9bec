"""The presets of ``hf-treelang reproduce``: the sizes of one reproduction (data, model, training, analyses).

``quick`` (a reduced model and data, about 20 minutes on a 2-core CPU), ``paper`` (the paper's sizes; a GPU is
advisable) and ``tiny`` (the smoke test of the test suite). With the step names, this module imports nothing but
``dataclasses``: ``hf-treelang reproduce --help`` lists presets and steps from it without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The steps of every reproduction, in order; the functions are in :mod:`hf_treelang.reproduce.steps`.
BASE_STEPS = ("data", "bp", "train_root", "train_mlm", "dynamics", "calibration", "attention", "probe",
              "sample_complexity")


def step_names(attention_filter_levels=()) -> list:
    """The ordered step names of a reproduction whose preset has these ``attention_filter_levels``.

    One extra MLM training, ``train_mlm_k<k>``, per level k (for the attention grid) follows ``train_mlm``.
    """
    after = BASE_STEPS.index("train_mlm") + 1
    return [*BASE_STEPS[:after], *(f"train_mlm_k{k}" for k in attention_filter_levels), *BASE_STEPS[after:]]


@dataclass(frozen=True)
class Preset:
    """Sizes of one reproduction (data: q, ℓ, σ, grammar seed, k_train; model; training; analyses)."""

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
    mlm_train: int = 2**14
    mlm_epochs: float = 10.0
    num_test: int = 2048
    num_evaluations: int = 12
    batch_size: int = 32
    learning_rate: float = 1e-4
    analysis_samples: int = 10_000
    probe_train: int = 2**13
    probe_test: int = 2**11
    probe_epochs: int = 10
    sample_sizes: tuple = (2**7, 2**9, 2**11)
    sample_epochs: float = 20.0
    sample_max_steps: int | None = None
    attention_filter_levels: tuple = ()
    use_dataset_builder: bool = True
    cpu_threads: int | None = None


PRESETS = {
    "quick": Preset(
        name="quick",
        description="ℓ=4, q=4, a reduced encoder (d=64, d'=256, 4 layers); P=2^14 root (6 epochs), P=2^14 MLM "
        "(20 epochs); 12-20 min on a 2-core CPU",
        model={"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 1, "intermediate_size": 256},
        root_train=2**14, root_epochs=6.0, mlm_train=2**14, mlm_epochs=20.0, num_test=2048, num_evaluations=12,
        analysis_samples=10_000, probe_train=2**13, probe_test=2**11, probe_epochs=8,
        sample_sizes=(2**7, 2**9, 2**11), sample_epochs=20.0, sample_max_steps=400, cpu_threads=1,
    ),
    "paper": Preset(
        name="paper",
        description="the paper's sizes: ℓ=4, q=4, d=128, d'=2048, 4 layers; P=2^17 root (10 epochs), P=2^18 MLM "
        "(1000 epochs), 10^4 test inputs, probes on 2^14 sequences for 100 epochs, MLM models for k_train=0..4",
        model={"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 1, "intermediate_size": 2048},
        root_train=2**17, root_epochs=10.0, mlm_train=2**18, mlm_epochs=1000.0, num_test=10_000,
        num_evaluations=25, analysis_samples=10_000, probe_train=2**14, probe_test=2**12, probe_epochs=100,
        sample_sizes=(2**7, 2**9, 2**11, 2**13, 2**15, 2**17), sample_epochs=50.0,
        attention_filter_levels=(1, 2, 3, 4),
    ),
    "tiny": Preset(
        name="tiny",
        description="smoke test: ℓ=3, q=4, d=32, 2 layers, a few hundred sequences",
        depth=3,
        model={"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 1, "intermediate_size": 64},
        root_train=128, root_epochs=1.0, mlm_train=128, mlm_epochs=1.0, num_test=64, num_evaluations=1,
        analysis_samples=64, probe_train=64, probe_test=32, probe_epochs=1,
        sample_sizes=(64,), sample_epochs=1.0, use_dataset_builder=False, cpu_threads=1,
    ),
}
PUBLIC_PRESETS = ("quick", "paper")
