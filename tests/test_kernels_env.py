"""The kernel package refuses, at import, a Triton interpreter that cannot run it."""
from __future__ import annotations

import numpy
import pytest
import triton

import eqfast.kernels as kernels


@pytest.mark.parametrize("triton_v,numpy_v,interpreted,refused", [
    ("3.6.0", "2.4.6", True, True),
    ("3.6.0", "2.3.5", True, False),
    ("3.9.0", "2.4.6", True, False),
    ("3.6.0", "2.4.6", False, False),       # compiled kernels never go through numpy
])
def test_interpreter_numpy_check(monkeypatch, triton_v, numpy_v, interpreted, refused):
    monkeypatch.setattr(triton, "__version__", triton_v)
    monkeypatch.setattr(numpy, "__version__", numpy_v)
    monkeypatch.setattr(kernels, "INTERPRETED", interpreted)
    if refused:
        with pytest.raises(ImportError, match="numpy<2.4"):
            kernels._check_interpreter_numpy()
    else:
        kernels._check_interpreter_numpy()
