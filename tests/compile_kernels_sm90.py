"""Compile every Triton kernel of eqfast for an H100 (sm_90) on a machine without a GPU.

Triton's CPU interpreter runs the kernels' Python, not the compiler: type errors, illegal
casts or unsupported ops that only the real compiler rejects would first show up on a GPU,
whose time is scarce. This script (run in its own process by tests/test_kernels_compile.py,
with TRITON_INTERPRET unset) points Triton at a stand-in driver whose target is sm_90 and
turns every launch into a compile-only warm-up. To give every kernel the argument types,
constexprs and specializations the engine really uses, it plays whole batches through the
fast engine with a backend whose stages call the kernel (compiled, not run: its outputs are
unwritten memory and discarded) and then return the reference stage's result.

Prints one line per compiled kernel variant, then `OK <count>`; exits non-zero on the first
compile error; prints `SKIP <why>` when this Triton build ships no CUDA toolchain (ptxas).
"""
from __future__ import annotations

import os
import sys
from dataclasses import fields

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    raise SystemExit("compile_kernels_sm90: run with TRITON_INTERPRET unset")

import torch  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime import driver  # noqa: E402
from triton.runtime.jit import KernelInterface  # noqa: E402


class _Sm90StandIn:
    """The parts of a Triton driver that compiling needs: a target, a device, a stream."""

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0


COMPILED: list[str] = []


def _compile_only(kernel, grid):
    def warm(*args, **kwargs):
        compiled = kernel.run(*args, grid=grid, warmup=True, **kwargs)
        assert compiled is not None and len(compiled.asm["cubin"]) > 0, kernel.fn.__name__
        name = f"{kernel.fn.__name__} ({compiled.metadata.num_warps} warps, " \
               f"{compiled.metadata.shared} B shared)"
        if name not in COMPILED:
            COMPILED.append(name)
            print("compiled", name, flush=True)
    return warm


def main() -> int:
    try:
        return _play_and_compile()
    except FileNotFoundError as e:             # no ptxas shipped with this triton build
        print("SKIP", e)
        return 0


def _play_and_compile() -> int:
    driver.set_active(_Sm90StandIn())
    KernelInterface.__getitem__ = _compile_only

    from eqfast.engine.fast import FastEngine
    from eqfast.engine.pipeline import Backend, EngineConfig, make_backend
    from eqfast.engine.policy import ExplorationConfig
    from eqfast.engine.posterior import PosteriorConfig
    from eqfast.oracle.network import NetworkOracle, build_network, script_module
    from eqfast.utils.checks import host_checks_off
    import eqfast.kernels as kernels

    reference = make_backend("reference", "cpu")

    def compiled_then_reference(name):
        kernel_fn, reference_fn = getattr(kernels, name), getattr(reference, name)

        def stage(*args, **kwargs):
            with host_checks_off():                 # the kernel's outputs are never written
                kernel_fn(*args, **kwargs)
            return reference_fn(*args, **kwargs)
        return stage

    names = [f.name for f in fields(Backend) if f.name != "name"]
    backend = Backend("compile-check", *[compiled_then_reference(n) for n in names])
    torch.manual_seed(0)
    net = build_network({"arch": "mlp", "hidden": 16, "depth": 1}).eval()
    oracle = NetworkOracle(script_module(net))
    explore = ExplorationConfig(temperature=2.0, epsilon=0.2)
    for posterior, n in ((None, 100), (PosteriorConfig(window_k=8), 24)):
        cfg = EngineConfig(n_samples=n, posterior=posterior, exploration=explore)
        FastEngine(oracle, cfg, backend=backend, graphs=False).play([0, 1, 2])
    print("OK", len(COMPILED))
    return 0


if __name__ == "__main__":
    sys.exit(main())
