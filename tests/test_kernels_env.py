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


def test_kernels_import_only_the_contracts():
    """Kernels build on eqfast.contracts (and the rules), never on the reference stages:
    no `eqfast.engine` import under kernels/ (docstrings may name the references)."""
    import re
    from pathlib import Path

    offending = []
    for path in Path(kernels.__file__).parent.glob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*(from|import)\s+eqfast\.engine\b", line):
                offending.append(f"{path.name}:{n}: {line.strip()}")
    assert not offending, offending
