"""gridml: hyperparameter campaigns for HEP neural networks on one machine, HPC and the grid."""

__version__ = "0.1.0"
