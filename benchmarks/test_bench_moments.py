"""weighted_moments: float32 reference vs Triton kernel on the same inputs and device.

Run: PYTHONPATH=. python -m pytest benchmarks/test_bench_moments.py --benchmark-enable
Rates are recorded in extra_info: decisions/s (rows/s), worlds/s and GB/s of Q + log-weights
read. On a machine without CUDA the kernel runs under TRITON_INTERPRET=1: that times the
interpreter (numpy, per program), not the kernel, and is not a performance figure.
"""
import importlib.util
import os
import subprocess
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from eqfast.engine.moments import weighted_moments as reference  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _kernel():
    try:
        from eqfast.kernels.moments import weighted_moments
        return weighted_moments
    except ImportError:
        spec = importlib.util.spec_from_file_location("_bench_kmom", ROOT / "kernels" / "moments.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.weighted_moments


def _commit():
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=5).stdout.strip()
    except Exception:
        return "unknown"


BACKENDS = {"reference": lambda: reference, "triton": _kernel}
# the interpreter runs one Python program per decision: keep its G small on the CPU
if DEVICE == "cuda":
    CASES = [(b, G, N) for b in BACKENDS for G, N in [(4096, 100), (1024, 1000)]]
else:
    CASES = [("reference", 32, 100), ("triton", 32, 100), ("reference", 1024, 100)]


@pytest.fixture
def one_thread():
    """One intra-op thread on the CPU: on this shared 2-core machine two threads made the
    G=32 reference 50 ms instead of 0.25 ms (thread contention under load ~7)."""
    saved = torch.get_num_threads()
    if DEVICE == "cpu":
        torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.mark.parametrize("backend,G,N", CASES, ids=[f"{b}-G{g}-N{n}" for b, g, n in CASES])
def test_bench_weighted_moments(benchmark, one_thread, backend, G, N):
    fn = BACKENDS[backend]()
    gen = torch.Generator().manual_seed(0)
    q = (torch.rand(G, N, 7, generator=gen) * 84 - 42).to(DEVICE)
    legal = (torch.rand(G, 7, generator=gen) < 0.6).to(DEVICE)
    logw = torch.randn(G, N, generator=gen).to(DEVICE)

    def run():
        out = fn(q, legal, logw)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        return out

    run()                                                   # compile / warm up
    slow = backend == "triton" and DEVICE == "cpu"
    benchmark.pedantic(run, rounds=5 if slow else 50, iterations=1)
    t = benchmark.stats.stats.median
    bytes_read = q.numel() * 4 + logw.numel() * 4 + legal.numel()
    benchmark.extra_info.update({
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
        "triton_mode": ("interpreter" if os.environ.get("TRITON_INTERPRET") == "1" and
                        backend == "triton" else "compiled" if backend == "triton" else "torch"),
        "commit": _commit(), "torch_threads": torch.get_num_threads(),
        "decisions_per_s": G / t, "worlds_per_s": G * N / t, "GB_per_s": bytes_read / t / 1e9,
    })
