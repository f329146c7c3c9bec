"""The data layer: ``load_dataset("treelang", ...)`` registration, dataset metadata, and Hub-ready publishing.

Imports ``datasets`` lazily: ``hf_treelang.data.metadata`` needs only numpy, ``registration`` touches ``datasets``
when :func:`register_dataset_builder` runs, and ``publish`` is the ``hf-treelang publish-dataset`` command.
"""

from .metadata import ancestor_labels, dataset_metadata, dataset_params, grammar_from_dataset
from .registration import DATASET_NAME, register_dataset_builder

__all__ = [
    "DATASET_NAME",
    "ancestor_labels",
    "dataset_metadata",
    "dataset_params",
    "grammar_from_dataset",
    "register_dataset_builder",
]
