"""The one BibTeX entry of the paper, used by the README, the dataset and model cards and the evaluate metric."""

BIBTEX = r"""@inproceedings{garnierbrun2025hierarchical,
  title     = {How Transformers Learn Structured Data: Insights From Hierarchical Filtering},
  author    = {Garnier-Brun, J{\'e}r{\^o}me and M{\'e}zard, Marc and Moscato, Emanuele and Saglietti, Luca},
  booktitle = {Proceedings of the 42nd International Conference on Machine Learning (ICML)},
  year      = {2025}
}
"""
