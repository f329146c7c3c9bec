"""hf-treelang: filtered hierarchical tree languages, their exact BP oracle, and transformers that learn them."""

from .bp import BeliefPropagation, BPResult
from .grammar import Grammar
from .sampling import TreeSample, sample_trees, uniform_sequences
from .configuration_treelang import TreeLangConfig
from .modeling_treelang import (
    TreeLangForMaskedLM,
    TreeLangForSequenceClassification,
    TreeLangModel,
    TreeLangPreTrainedModel,
)
from .convert import convert
from .data import ancestor_labels, dataset_params, grammar_from_dataset, register_dataset_builder

register_dataset_builder()  # datasets.load_dataset("treelang", "k2") now builds our data
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

AutoConfig.register("treelang", TreeLangConfig, exist_ok=True)
AutoModel.register(TreeLangConfig, TreeLangModel, exist_ok=True)
AutoModelForMaskedLM.register(TreeLangConfig, TreeLangForMaskedLM, exist_ok=True)
AutoModelForSequenceClassification.register(TreeLangConfig, TreeLangForSequenceClassification, exist_ok=True)

__version__ = "0.1.0"
