"""The BibTeX entries the package cites: the paper's (:data:`BIBTEX`, used by the README, the dataset and model cards
and the evaluate metric) and the Random Hierarchy Model's (:data:`RANDOM_HIERARCHY_BIBTEX`, beside it wherever RHM
data are described)."""

BIBTEX = r"""@inproceedings{garnierbrun2025hierarchical,
  title     = {How Transformers Learn Structured Data: Insights From Hierarchical Filtering},
  author    = {Garnier-Brun, J{\'e}r{\^o}me and M{\'e}zard, Marc and Moscato, Emanuele and Saglietti, Luca},
  booktitle = {Proceedings of the 42nd International Conference on Machine Learning (ICML)},
  year      = {2025}
}
"""

RANDOM_HIERARCHY_BIBTEX = r"""@article{cagnetta2024random,
  title   = {How Deep Neural Networks Learn Compositional Data: The Random Hierarchy Model},
  author  = {Cagnetta, Francesco and Petrini, Leonardo and Tomasini, Umberto M. and Favero, Alessandro and Wyart,
             Matthieu},
  journal = {Physical Review X},
  volume  = {14},
  pages   = {031001},
  year    = {2024},
  doi     = {10.1103/PhysRevX.14.031001}
}
"""
