"""The paper's analyses of trained checkpoints (Sec. 3-4), each a function returning a typed result and a CLI command.

* :func:`calibrate` — model vs BP probabilities, in-sample and uniform inputs (Fig. 1b): ``hf-treelang calibration``
* :func:`average_attention` / :func:`attention_grid` — average attention per layer (Fig. 4): ``hf-treelang attention``
* :func:`probe` — ancestor probes per (layer, level) (Fig. 3b, App. E.6-E.7): ``hf-treelang probe``
* :func:`learning_dynamics` — KL-to-BP_k curves and the k_test staircase (Fig. 1c/d, 2b, 3a): ``hf-treelang dynamics``
* :func:`sample_complexity_sweep` — accuracy vs labelled P, three arms (Fig. 1f): ``hf-treelang sample-complexity``
"""

from ._common import Checkpoint, DistributionComparison, compare_distributions, load_checkpoint
from .attention import AttentionResult, attention_grid, average_attention
from .calibration import CalibrationResult, CalibrationSet, calibrate, calibrate_predictor
from .dynamics import DynamicsResult, learning_dynamics
from .probing import ProbeResult, probe
from .sample_complexity import SampleComplexityResult, sample_complexity_sweep

__all__ = [
    "AttentionResult",
    "CalibrationResult",
    "CalibrationSet",
    "Checkpoint",
    "DistributionComparison",
    "DynamicsResult",
    "ProbeResult",
    "SampleComplexityResult",
    "attention_grid",
    "average_attention",
    "calibrate",
    "calibrate_predictor",
    "compare_distributions",
    "learning_dynamics",
    "load_checkpoint",
    "probe",
    "sample_complexity_sweep",
]
