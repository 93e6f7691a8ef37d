"""Named stage ranges: NVTX for Nsight, wall-time totals for the per-stage tables.

    with stage("sample"):   # NVTX range "eqfast/sample" + time added to STAGE_TIMES
        ...

NVTX comes from the `nvtx` package (`torch.cuda.nvtx` fails on CPU builds); without a
profiler attached a range costs a few hundred nanoseconds. Wall times are host times: on
CUDA they measure launch cost unless `sync=True` (profiling runs only: a sync per stage
serializes the pipeline).
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import nvtx
import torch

STAGE_TIMES: dict[str, float] = defaultdict(float)
STAGE_CALLS: dict[str, int] = defaultdict(int)
_SYNC = {"on": False}
_DOMAIN = nvtx.get_domain("eqfast")


def set_sync(on: bool) -> None:
    """Synchronize CUDA at every stage boundary so wall times are device times."""
    _SYNC["on"] = bool(on)


def reset_stage_times() -> None:
    STAGE_TIMES.clear()
    STAGE_CALLS.clear()


@contextmanager
def stage(name: str):
    attrs = _DOMAIN.get_event_attributes(message=f"eqfast/{name}")
    rng = _DOMAIN.start_range(attrs)
    sync = _SYNC["on"] and torch.cuda.is_available()
    if sync:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    try:
        yield
    finally:
        if sync:
            torch.cuda.synchronize()
        STAGE_TIMES[name] += time.perf_counter() - t0
        STAGE_CALLS[name] += 1
        _DOMAIN.end_range(rng)


def stage_table() -> str:
    """A text table of the accumulated stage times, largest first."""
    total = sum(STAGE_TIMES.values()) or 1.0
    lines = [f"{'stage':<14}{'calls':>8}{'seconds':>10}{'share':>8}"]
    for name, t in sorted(STAGE_TIMES.items(), key=lambda kv: -kv[1]):
        lines.append(f"{name:<14}{STAGE_CALLS[name]:>8}{t:>10.3f}{100 * t / total:>7.1f}%")
    return "\n".join(lines)
