"""Host-side integrity checks, and a switch that turns them off inside CUDA-graph capture.

Many stages verify their inputs with a check such as `if bool((total < 1).any()): raise`.
Each such check copies a flag to the host, i.e. synchronizes the device, and a captured
CUDA graph cannot contain one (nor raise). Eager runs keep every check; the graph path
(`eqfast.engine.fast`) runs its step under `host_checks_off()` and validates the batch's
records once, outside the graph, when they reach the host.

`forbid_host_sync()` (tests) makes every implicit device-to-host read raise, so a CPU test
can prove that a step would be capturable: no `bool(tensor)`, `.item()`, `int(tensor)`,
`.tolist()` or data-dependent Python control flow inside it.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import torch

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


@contextmanager
def forbid_host_sync():
    """Make implicit tensor-to-host reads raise HostSyncError (for capture-readiness tests)."""
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
        with host_checks_off():
            yield
    finally:
        for n, f in saved.items():
            setattr(torch.Tensor, n, f)
