"""Every Triton kernel compiles for an H100 (sm_90) with the argument types the engine
really passes, on a machine without a GPU (tests/compile_kernels_sm90.py, in a fresh
process with the interpreter off and an empty, private Triton cache)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import eqfast.kernels as kernels

SCRIPT = Path(__file__).with_name("compile_kernels_sm90.py")


def _kernel_names() -> set[str]:
    """The @triton.jit kernels (launched ones end in _kernel) of every kernel module."""
    names = set()
    for path in Path(kernels.__file__).parent.glob("*.py"):
        for line in path.read_text().splitlines():
            if line.startswith("def _") and "_kernel(" in line:
                names.add(line[4:line.index("(")])
    return names


def test_every_kernel_compiles_for_sm90(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if done.stdout.startswith("SKIP"):
        pytest.skip(f"CUDA toolchain not available: {done.stdout[5:].strip()}")
    assert done.stdout.strip().splitlines()[-1].startswith("OK"), done.stdout
    compiled = {line.split()[1] for line in done.stdout.splitlines() if line.startswith("compiled")}
    expected = _kernel_names()
    assert len(expected) >= 10 and compiled == expected, (sorted(expected - compiled),
                                                          sorted(compiled - expected))
