"""The paper's analyses of trained checkpoints (Sec. 3-4), each a function returning a typed result and a CLI command.

Shared parts: :mod:`~hf_treelang.analysis.checkpoint` (loading, with clear errors), :mod:`~hf_treelang.analysis.activations`
(the one activation collector, ``run_with_cache``), :mod:`~hf_treelang.analysis.io` (output folders and JSON);
figures use :mod:`hf_treelang.plotting`. A checkpoint is TreeLang's own or a run of any other architecture of
``transformers`` (``--model_type``): the analyses read the q symbols' logits renormalised and report the probability
left on the special ids (``mass_on_special_tokens``).

* :func:`calibrate` — model vs BP probabilities, in-sample and uniform inputs (Fig. 1b): ``hf-treelang calibration``
* :func:`average_attention` / :func:`attention_grid` — average attention per layer (Fig. 4): ``hf-treelang attention``;
  :func:`template_dynamics` — each layer against App. F's attention templates along training (``--template``)
* :func:`probe` — ancestor probes per (layer, level) (Figs. 3b, 12): ``hf-treelang probe``; :func:`probe_messages` —
  probes of BP's upward messages (App. F): ``hf-treelang probe --target messages``
* :func:`learning_dynamics` — KL-to-BP_k curves and the accuracies per k_test (Figs. 1c/d, 2b, 3a, 10):
  ``hf-treelang dynamics``
* :func:`kl_vs_samples` — the sweep runs' KL to BP against P, in sample and on uniform inputs (Fig. 9)
* :func:`score_generation` — a causal model's samples and the true data scored both ways, KL(model ‖ data) and
  KL(data ‖ model) with the exact oracle: ``hf-treelang generate``
* :func:`sample_complexity_sweep` — accuracy vs labelled P, three arms (Fig. 1f): ``hf-treelang sample-complexity``
"""

from hf_treelang.core.metrics import DistributionComparison, compare_distributions

from .activations import Activations, Prediction, predict_distribution, predict_probabilities, run_with_cache
from .checkpoint import Checkpoint, load_checkpoint
from .attention import AttentionResult, TemplateResult, attention_grid, average_attention, template_dynamics
from .calibration import CalibrationResult, CalibrationSet, calibrate, calibrate_predictor
from .dynamics import DynamicsResult, learning_dynamics
from .generation import GenerationResult, score_generation, score_model_generation
from .kl_vs_samples import KLFigure, kl_vs_samples
from .probing import MessageProbeResult, ProbeResult, probe, probe_messages
from .sample_complexity import SampleComplexityResult, sample_complexity_sweep

__all__ = [
    "Activations",
    "AttentionResult",
    "CalibrationResult",
    "CalibrationSet",
    "Checkpoint",
    "DistributionComparison",
    "DynamicsResult",
    "GenerationResult",
    "KLFigure",
    "MessageProbeResult",
    "Prediction",
    "ProbeResult",
    "SampleComplexityResult",
    "TemplateResult",
    "attention_grid",
    "average_attention",
    "calibrate",
    "calibrate_predictor",
    "compare_distributions",
    "kl_vs_samples",
    "learning_dynamics",
    "load_checkpoint",
    "predict_distribution",
    "predict_probabilities",
    "probe",
    "probe_messages",
    "run_with_cache",
    "sample_complexity_sweep",
    "score_generation",
    "score_model_generation",
    "template_dynamics",
]
