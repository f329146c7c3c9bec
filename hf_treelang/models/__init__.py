"""The model layer (transformers only): the TreeLang encoder, its root-classification, MLM and causal-LM heads, and the
converter of the paper code's state dicts. ``configuration_treelang.py`` and ``modeling_treelang.py`` follow
transformers' single-file layout and are copied next to saved checkpoints for ``trust_remote_code``.
"""

from .configuration_treelang import TreeLangConfig
from .modeling_treelang import (
    TreeLangForCausalLM,
    TreeLangForMaskedLM,
    TreeLangForSequenceClassification,
    TreeLangModel,
    TreeLangPreTrainedModel,
)

__all__ = [
    "TreeLangConfig",
    "TreeLangForCausalLM",
    "TreeLangForMaskedLM",
    "TreeLangForSequenceClassification",
    "TreeLangModel",
    "TreeLangPreTrainedModel",
]
