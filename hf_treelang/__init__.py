"""hf-treelang: filtered hierarchical tree languages, their exact BP oracle, and transformers that learn them.

Importing the package registers the TreeLang model with the ``transformers`` Auto classes and the ``"treelang"``
builder with ``datasets.load_dataset``.
"""

from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

from .analysis import attention_grid, average_attention, calibrate, learning_dynamics, probe, sample_complexity_sweep
from .bp import BeliefPropagation, BPResult
from .callbacks import BPKLCallback, LogSpacedScheduleCallback, MetricsHistoryCallback
from .collator import MaskedLeafCollator, RootClassificationCollator
from .configuration_treelang import TreeLangConfig
from .convert import convert
from .data import ancestor_labels, dataset_params, grammar_from_dataset, register_dataset_builder
from .grammar import Grammar
from .metrics import TreeLangBPMetric
from .modeling_treelang import (
    TreeLangForMaskedLM,
    TreeLangForSequenceClassification,
    TreeLangModel,
    TreeLangPreTrainedModel,
)
from .sampling import TreeSample, sample_trees, uniform_sequences
from .training_args import DataArguments, ModelArguments, TreeLangTrainingArguments

__version__ = "0.1.0"

__all__ = [
    "BPKLCallback",
    "BPResult",
    "BeliefPropagation",
    "DataArguments",
    "Grammar",
    "LogSpacedScheduleCallback",
    "MaskedLeafCollator",
    "MetricsHistoryCallback",
    "ModelArguments",
    "RootClassificationCollator",
    "TreeLangBPMetric",
    "TreeLangConfig",
    "TreeLangForMaskedLM",
    "TreeLangForSequenceClassification",
    "TreeLangModel",
    "TreeLangPreTrainedModel",
    "TreeLangTrainingArguments",
    "TreeSample",
    "ancestor_labels",
    "attention_grid",
    "average_attention",
    "calibrate",
    "convert",
    "dataset_params",
    "grammar_from_dataset",
    "learning_dynamics",
    "probe",
    "sample_complexity_sweep",
    "sample_trees",
    "uniform_sequences",
]

register_dataset_builder()  # datasets.load_dataset("treelang", "k2") now builds our data
AutoConfig.register("treelang", TreeLangConfig, exist_ok=True)
AutoModel.register(TreeLangConfig, TreeLangModel, exist_ok=True)
AutoModelForMaskedLM.register(TreeLangConfig, TreeLangForMaskedLM, exist_ok=True)
AutoModelForSequenceClassification.register(TreeLangConfig, TreeLangForSequenceClassification, exist_ok=True)
