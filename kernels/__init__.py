"""eqfast.kernels: the Triton version of each device stage of the E[Q] engine.

Each function has the same call signature and outputs as its pure-PyTorch reference, so
the pipeline picks a backend by name (`eqfast.engine.pipeline.make_backend`). In the
order of one decision step:

    stage     kernel (module)                          reference
    public    hidden_info (public.py)                  eqfast.engine.public.hidden_info
              legal_mask (public.py)                   eqfast.rules.batched.BatchedGames.legal_mask
              completion_counts (sampling.py)          eqfast.engine.sampling.completion_counts
    sample    sample_worlds (sampling.py)              eqfast.engine.sampling.sample_worlds
    tokenize  tokenize_worlds (tokenize.py)            eqfast.engine.tokens.tokenize_worlds
              tokenize_prefix_worlds (tokenize.py)     eqfast.engine.tokens.tokenize_prefix_worlds
    posterior posterior_log_weights (posterior.py)     eqfast.engine.posterior.posterior_log_weights
    reduce    weighted_moments (moments.py)            eqfast.engine.moments.weighted_moments
    advance   play (advance.py)                        eqfast.rules.batched.BatchedGames.play

The kernels import the stage contracts (types, shape and integrity checks) from
`eqfast.contracts`, never the reference modules, so the references can import this package
without a cycle and a kernel's errors read as its reference's.

Integer and random-number stages match their reference bit for bit; the reduction matches
float64 to a stated tolerance (tests/test_kernel_*.py). Interpreted in the tests, every
load and store is also checked to stay inside the kernel's tensor arguments, and no
element one program stores is touched by another program of the launch
(tests/interpreter_checks.py): a GPU would not report either. This folder is installed as
`eqfast.kernels` (setup.py `package_dir`).

Whether the kernels are interpreted (Triton's CPU interpreter, `TRITON_INTERPRET=1`) or
compiled for a GPU is fixed when this package is first imported: `INTERPRETED` records it.
Compiled kernels accept only CUDA tensors.
"""
import os

# FP fusion (a*b+c as one FMA) on, stated explicitly: Triton warns that its default changes
# in 3.10. The float stages are tested within a tolerance of their float64 references, so
# either setting passes; fused is the faster and what the tolerances were measured with.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _check_interpreter_numpy() -> None:
    """Triton 3.6's interpreter turns kernel scalars into 1-element numpy arrays and takes
    int() of them, which NumPy 2.4 refuses: every kernel with a runtime loop bound would
    fail with an obscure TypeError. Say so at import instead (measured: 3.6 with numpy
    2.3.5 passes the suite, with 2.4.6 fails 51 tests; 3.9 passes with 2.4.6)."""
    import numpy
    import triton

    triton_v = tuple(int(x) for x in triton.__version__.split(".")[:2])
    numpy_v = tuple(int(x) for x in numpy.__version__.split(".")[:2])
    if INTERPRETED and triton_v <= (3, 6) and numpy_v >= (2, 4):
        raise ImportError(
            f"Triton {triton.__version__}'s CPU interpreter (TRITON_INTERPRET=1) does not work "
            f"with NumPy {numpy.__version__}: install numpy<2.4, or Triton >= 3.9")


_check_interpreter_numpy()

# imported after the environment defaults and the check above (hence E402)
from .moments import weighted_moments  # noqa: E402
from .posterior import posterior_log_weights  # noqa: E402
from .advance import play  # noqa: E402
from .public import hidden_info, legal_mask  # noqa: E402
from .sampling import completion_counts, sample_worlds  # noqa: E402
from .tokenize import tokenize_prefix_worlds, tokenize_worlds  # noqa: E402

__all__ = ["INTERPRETED", "hidden_info", "legal_mask", "completion_counts", "sample_worlds", "tokenize_worlds",
           "tokenize_prefix_worlds",
           "posterior_log_weights", "weighted_moments", "play"]
