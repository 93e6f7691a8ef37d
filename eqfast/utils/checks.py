"""Host-side integrity checks, and a switch that turns them off inside CUDA-graph capture.

Many stages verify their inputs with a check such as `if bool((total < 1).any()): raise`.
Each such check copies a flag to the host, i.e. synchronizes the device, and a captured
CUDA graph cannot contain one (nor raise). Eager runs keep every check; the graph path
(`eqfast.engine.fast`) runs its step under `host_checks_off()` and validates the batch's
records once, outside the graph, when they reach the host.

`forbid_host_sync()` (tests) makes every device synchronization raise, so a CPU test can
show that a step would be capturable. It catches two kinds:
- Python-level reads: `bool(tensor)`, `.item()`, `int(tensor)`, `.tolist()`, `.numpy()`,
  hence any data-dependent Python control flow;
- aten ops that read data on the host inside C++ or size their output by the data
  (`SYNC_OPS`: nonzero, masked_select, unique, equal, boolean-mask indexing, ...), seen
  by a `TorchDispatchMode`, plus tensors made from host data (`torch.tensor(list)`),
  which on CUDA would be a pageable host-to-device copy inside the graph.
TorchScript's profiling executor compares constants with `aten.equal` while it optimizes
a frozen module during its first two runs; run a step a few times before checking it (the
graph path warms up three times before capture for the same reason).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_STATE = threading.local()


def host_checks() -> bool:
    """True unless inside `host_checks_off()` (on this thread)."""
    return not getattr(_STATE, "off", False)


@contextmanager
def host_checks_off():
    prev = getattr(_STATE, "off", False)
    _STATE.off = True
    try:
        yield
    finally:
        _STATE.off = prev


class HostSyncError(RuntimeError):
    """A tensor value was read on the host inside a region that must not synchronize."""


#: aten op names (prefixes of `str(op)`) that synchronize the device: they read tensor data
#: on the host or give an output whose shape depends on the data.
SYNC_OPS = ("aten._local_scalar_dense", "aten.is_nonzero", "aten.equal", "aten.nonzero",
            "aten.masked_select", "aten.unique", "aten._unique", "aten.repeat_interleave.Tensor",
            "aten.lift_fresh")


def _bool_index(op_name: str, args) -> bool:
    """True for `x[mask]` / `x[mask] = v` with a boolean mask (lowered to nonzero: a sync)."""
    if not op_name.startswith(("aten.index.", "aten.index_put", "aten._index_put")):
        return False
    return any(t is not None and t.dtype == torch.bool for t in args[1])


class _SyncOpTrap(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name.startswith(SYNC_OPS) or _bool_index(name, args):
            what = "boolean-mask indexing" if _bool_index(name, args) else name
            raise HostSyncError(f"{what} synchronizes the device (host read or data-dependent "
                                "shape) inside a region that must stay on the device")
        return func(*args, **(kwargs or {}))


@contextmanager
def forbid_host_sync():
    """Make device synchronizations raise HostSyncError (for capture-readiness tests): the
    Python-level reads of a tensor's value and the aten ops in `SYNC_OPS`."""
    names = ("__bool__", "item", "tolist", "__int__", "__float__", "__index__", "numpy")
    saved = {n: getattr(torch.Tensor, n) for n in names}

    def trap(name):
        def raiser(self, *a, **k):
            raise HostSyncError(f"host read of a tensor value (Tensor.{name}) inside a "
                                "region that must stay on the device")
        return raiser

    for n in names:
        setattr(torch.Tensor, n, trap(n))
    try:
        with host_checks_off(), _SyncOpTrap():
            yield
    finally:
        for n, f in saved.items():
            setattr(torch.Tensor, n, f)
