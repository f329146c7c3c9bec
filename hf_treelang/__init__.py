"""hf-treelang: filtered hierarchical tree languages, their exact BP oracle, and transformers that learn them.

Layers (imports point down only; ``tests/test_layers.py`` enforces it):

* :mod:`hf_treelang.core` — numpy and torch only: grammar, sampling, BP_k, masking, the oracle, metrics, limits;
* :mod:`hf_treelang.models` — transformers only: the config, the encoder and its heads, the converter;
* :mod:`hf_treelang.data` — the ``load_dataset("treelang", ...)`` registration, dataset metadata, publishing;
* :mod:`hf_treelang.train` — arguments, collators, callbacks, the Trainer loop and its outputs;
* :mod:`hf_treelang.analysis` and :mod:`hf_treelang.reproduce` — the paper's figures from trained runs;
* :mod:`hf_treelang.cli` — the ``hf-treelang`` command.

Importing the package runs :func:`register`: the TreeLang model joins the ``transformers`` Auto classes and the
``"treelang"`` builder joins ``datasets.load_dataset``. Every public name (``Grammar``, ``TreeLangConfig``, ...) is
imported on first use, so the import costs no more than that registration — except in the ``hf-treelang`` console
script, which registers only once it runs a sub-command (see :func:`_in_console_script`).
"""

from __future__ import annotations

import os
import sys

from .lazy import heavy_imports, lazy_attributes
from .version import __version__  # noqa: F401  (public)

# public name -> the module that defines it, imported on first access (module __getattr__, PEP 562)
_LAZY = {
    "BPResult": "hf_treelang.core.bp",
    "BeliefPropagation": "hf_treelang.core.bp",
    "Grammar": "hf_treelang.core.grammar",
    "TreeSample": "hf_treelang.core.sampling",
    "sample_trees": "hf_treelang.core.sampling",
    "uniform_sequences": "hf_treelang.core.sampling",
    "TreeLangConfig": "hf_treelang.models.configuration_treelang",
    "TreeLangForCausalLM": "hf_treelang.models.modeling_treelang",
    "TreeLangForMaskedLM": "hf_treelang.models.modeling_treelang",
    "TreeLangForSequenceClassification": "hf_treelang.models.modeling_treelang",
    "TreeLangModel": "hf_treelang.models.modeling_treelang",
    "TreeLangPreTrainedModel": "hf_treelang.models.modeling_treelang",
    "TreeLangTokenizer": "hf_treelang.models.tokenization_treelang",
    "Vocabulary": "hf_treelang.core.vocabulary",
    "convert": "hf_treelang.models.convert",
    "build_bp_transformer": "hf_treelang.models.bp_transformer",
    "BPTransformerConfig": "hf_treelang.models.configuration_bp_transformer",
    "BPTransformerForMaskedLM": "hf_treelang.models.modeling_bp_transformer",
    "BPTransformerForSequenceClassification": "hf_treelang.models.modeling_bp_transformer",
    "ancestor_labels": "hf_treelang.data.metadata",
    "dataset_params": "hf_treelang.data.metadata",
    "grammar_from_dataset": "hf_treelang.data.metadata",
    "register_dataset_builder": "hf_treelang.data.registration",
    "TreeLangBPMetric": "hf_treelang.evaluation",
    "BPKLCallback": "hf_treelang.train.callbacks",
    "LogSpacedScheduleCallback": "hf_treelang.train.callbacks",
    "MetricsHistoryCallback": "hf_treelang.train.callbacks",
    "MaskedLeafCollator": "hf_treelang.train.collators",
    "RootClassificationCollator": "hf_treelang.train.collators",
    "DataArguments": "hf_treelang.train.arguments",
    "ModelArguments": "hf_treelang.train.arguments",
    "TreeLangTrainingArguments": "hf_treelang.train.arguments",
    "attention_grid": "hf_treelang.analysis",
    "average_attention": "hf_treelang.analysis",
    "calibrate": "hf_treelang.analysis",
    "learning_dynamics": "hf_treelang.analysis",
    "probe": "hf_treelang.analysis",
    "sample_complexity_sweep": "hf_treelang.analysis",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)


__all__ = sorted([*_LAZY, "register"])


def register() -> None:
    """Register TreeLang with the ``transformers`` Auto classes and ``datasets.load_dataset("treelang")``.

    Idempotent. ``import hf_treelang`` runs it, so that ``AutoModel.from_pretrained`` and ``load_dataset`` know the
    names without further ado; the ``hf-treelang`` command runs it just before a sub-command. With a ``datasets``
    release whose internals the ``load_dataset`` hook does not know, the hook alone is skipped, with one warning
    (:func:`hf_treelang.data.registration.register_dataset_builder`): the rest of the package still imports.
    """
    with heavy_imports():
        # lazy: torch, transformers and datasets load when registering, which the console script defers past --help
        from transformers import (
            AutoConfig,
            AutoModel,
            AutoModelForCausalLM,
            AutoModelForMaskedLM,
            AutoModelForSequenceClassification,
            AutoTokenizer,
        )

        from .data.registration import register_dataset_builder
        from .models.architectures import register_pooled_root_classifiers
        from .models.configuration_treelang import TreeLangConfig
        from .models.modeling_treelang import (
            TreeLangForCausalLM,
            TreeLangForMaskedLM,
            TreeLangForSequenceClassification,
            TreeLangModel,
        )
        from .models.configuration_bp_transformer import BPTransformerConfig
        from .models.modeling_bp_transformer import (
            BPTransformerForMaskedLM,
            BPTransformerForSequenceClassification,
            BPTransformerModel,
        )
        from .models.tokenization_treelang import TreeLangTokenizer

    AutoConfig.register("treelang", TreeLangConfig, exist_ok=True)
    AutoModel.register(TreeLangConfig, TreeLangModel, exist_ok=True)
    AutoModelForMaskedLM.register(TreeLangConfig, TreeLangForMaskedLM, exist_ok=True)
    AutoModelForSequenceClassification.register(TreeLangConfig, TreeLangForSequenceClassification, exist_ok=True)
    AutoModelForCausalLM.register(TreeLangConfig, TreeLangForCausalLM, exist_ok=True)
    AutoConfig.register("treelang_bp", BPTransformerConfig, exist_ok=True)  # App. F's construction of BP_0
    AutoModel.register(BPTransformerConfig, BPTransformerModel, exist_ok=True)
    AutoModelForMaskedLM.register(BPTransformerConfig, BPTransformerForMaskedLM, exist_ok=True)
    AutoModelForSequenceClassification.register(BPTransformerConfig, BPTransformerForSequenceClassification,
                                                exist_ok=True)
    # every run folder's tokenizer, whatever its architecture (its tokenizer_config.json names the class)
    AutoTokenizer.register(TreeLangConfig, tokenizer_class=TreeLangTokenizer, exist_ok=True)
    register_pooled_root_classifiers()  # root classification for Mamba, RWKV, ...: no such head in transformers
    register_dataset_builder()  # datasets.load_dataset("treelang", "k2") now builds our data


_CONSOLE_SCRIPT_NAMES = ("hf-treelang", "hf-treelang.exe", "hf-treelang-script.py", "hf-treelang-script.pyw")


def _in_console_script() -> bool:
    """Whether this process is the ``hf-treelang`` console script, which defers :func:`register` to the sub-command.

    The script's launcher runs ``from hf_treelang.cli import main``, and Python imports this package before
    ``hf_treelang.cli``: registering here would import torch, transformers and datasets (seconds) before the command
    line is even parsed, for ``--help`` and usage errors too. :func:`hf_treelang.cli.main` registers instead, right
    before it runs a sub-command. A ``multiprocessing`` spawn (or forkserver) child re-imports the script as
    ``__mp_main__`` without running its ``main``: it registers here as any other process.
    """
    argv = getattr(sys, "argv", None) or [""]
    return os.path.basename(argv[0]) in _CONSOLE_SCRIPT_NAMES and "__mp_main__" not in sys.modules


if not _in_console_script():
    register()
