"""eqfast.kernels: the Triton version of each device stage of the E[Q] engine.

Each kernel module has the same call signature as its pure-PyTorch reference in
`eqfast.engine`, so the pipeline picks a backend by name. This folder is installed as
`eqfast.kernels` (setup.py `package_dir`).
"""
from .moments import weighted_moments
from .public import hidden_info
from .sampling import completion_counts, sample_worlds
from .tokenize import tokenize_worlds

__all__ = ["hidden_info", "completion_counts", "sample_worlds", "tokenize_worlds", "weighted_moments"]
