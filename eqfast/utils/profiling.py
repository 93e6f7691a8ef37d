"""Named stage ranges: NVTX for Nsight, wall-time totals for the per-stage tables.

    with stage("sample"):   # NVTX range "eqfast/sample" + time added to STAGE_TIMES
        ...

NVTX ranges come from the `nvtx` package when it is installed (domain `eqfast`), else from
`torch.cuda.nvtx` on a CUDA build of torch (the GPU machines ship the NVTX C library but not
the package), else they are skipped (`torch.cuda.nvtx` raises on CPU builds); without a
profiler attached a range costs a few hundred nanoseconds. Wall times are host times: on
CUDA they measure launch cost unless `sync=True` (profiling runs only: a sync per stage
serializes the pipeline).

`DeviceOpCounter` counts the device work each stage issues: aten ops that compute (views
excluded) and Triton kernel launches. On a GPU each is at least one kernel launch, and at
the small sizes of one decision step a launch costs a few microseconds of device time
whatever it computes, so the count per step is the CPU-measurable proxy for how much of a
captured step is *not* the oracle forward.
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

STAGE_TIMES: dict[str, float] = defaultdict(float)
STAGE_CALLS: dict[str, int] = defaultdict(int)
_SYNC = {"on": False}
_OPEN: list[str] = []      # names of the open stages, innermost last (DeviceOpCounter)


def _nvtx_backend():
    """(push(name) -> handle, pop(handle)) for NVTX ranges: the `nvtx` package, torch's
    binding on a CUDA build, or a no-op."""
    try:
        import nvtx
    except ImportError:
        nvtx = None
    if nvtx is not None:
        domain = nvtx.get_domain("eqfast")
        return (lambda name: domain.start_range(domain.get_event_attributes(message=name)),
                domain.end_range)
    if torch.version.cuda is not None:
        from torch.cuda import nvtx as torch_nvtx
        return (lambda name: torch_nvtx.range_push(name), lambda handle: torch_nvtx.range_pop())
    return (lambda name: None), (lambda handle: None)


_NVTX_PUSH, _NVTX_POP = _nvtx_backend()


@contextmanager
def nvtx_range(name: str):
    """An NVTX range named `name` (no stage timing): see the module doc for the backend."""
    handle = _NVTX_PUSH(name)
    try:
        yield
    finally:
        _NVTX_POP(handle)


def set_sync(on: bool) -> None:
    """Synchronize CUDA at every stage boundary so wall times are device times."""
    _SYNC["on"] = bool(on)


def reset_stage_times() -> None:
    STAGE_TIMES.clear()
    STAGE_CALLS.clear()


@contextmanager
def stage(name: str):
    rng = _NVTX_PUSH(f"eqfast/{name}")
    sync = _SYNC["on"] and torch.cuda.is_available()
    if sync:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    _OPEN.append(name)
    try:
        yield
    finally:
        _OPEN.pop()
        if sync:
            torch.cuda.synchronize()
        STAGE_TIMES[name] += time.perf_counter() - t0
        STAGE_CALLS[name] += 1
        _NVTX_POP(rng)


def stage_table() -> str:
    """A text table of the accumulated stage times, largest first."""
    total = sum(STAGE_TIMES.values()) or 1.0
    lines = [f"{'stage':<14}{'calls':>8}{'seconds':>10}{'share':>8}"]
    for name, t in sorted(STAGE_TIMES.items(), key=lambda kv: -kv[1]):
        lines.append(f"{name:<14}{STAGE_CALLS[name]:>8}{t:>10.3f}{100 * t / total:>7.1f}%")
    return "\n".join(lines)


OUTSIDE = "(outside stages)"

#: aten ops that launch no kernel: allocations without fill, storage plumbing, and the
#: 0-dim CPU wrappers of Python scalars (passed to kernels as arguments)
_NO_LAUNCH = ("aten.empty", "aten.new_empty", "aten.set_", "aten.scalar_tensor",
              "aten.lift_fresh")


class DeviceOpCounter(TorchDispatchMode):
    """`with DeviceOpCounter() as c: ...` then `c.counts`: {stage: device ops} where a
    device op is an aten op that computes something (not a view, not an allocation) or a
    Triton kernel launch; attributed to the innermost open `stage`. The tensor traffic of
    Triton's CPU interpreter inside a launch is not counted (on a GPU it does not exist)."""

    def __init__(self):
        super().__init__()
        self.counts: dict[str, int] = defaultdict(int)
        self._in_kernel = False

    def _add(self):
        self.counts[_OPEN[-1] if _OPEN else OUTSIDE] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not (self._in_kernel or func.is_view or str(func).startswith(_NO_LAUNCH)):
            self._add()
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        # Triton launches are `kernel[grid](...)`: count them at `__getitem__`. Imported
        # here, not at module level: TRITON_INTERPRET must be set before triton is first
        # imported (make_backend sets it on CPU-only machines)
        import triton

        interface = triton.runtime.jit.KernelInterface
        self._getitem = interface.__getitem__
        getitem = self._getitem

        def counted(kernel, grid):
            launch = getitem(kernel, grid)

            def run(*args, **kwargs):
                self._add()
                self._in_kernel = True
                try:
                    return launch(*args, **kwargs)
                finally:
                    self._in_kernel = False
            return run

        interface.__getitem__ = counted
        return super().__enter__()

    def __exit__(self, *exc):
        import triton

        triton.runtime.jit.KernelInterface.__getitem__ = self._getitem
        return super().__exit__(*exc)
