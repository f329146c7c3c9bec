"""The ``datasets`` builder of the treelang data, installed as ``hf_treelang.dataset_builder``.

``load_dataset("treelang", ...)`` resolves to :class:`TreeLang` once ``hf_treelang`` is imported (see
``hf_treelang.data``).
"""

from .treelang import DATASET_NAME, SPLITS, TreeLang, TreeLangBuilderConfig, chunk_ranges, generate_table, split_seed

__all__ = ["DATASET_NAME", "SPLITS", "TreeLang", "TreeLangBuilderConfig", "chunk_ranges", "generate_table", "split_seed"]
