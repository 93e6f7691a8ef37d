"""Sequential stopping: how many completions are enough for this hand.

Completions are added in rounds (`step` at a time, completion i always the same draw, so a
round only extends the sample). After each round the matrix is summarized and the run stops
at the first of:

1. **decided**: the deciding intervals are narrow enough. The deciding cells are those of
   the chosen contract c* (max over contracts of the mean score) at the best bid k* (the
   highest level with p_upper >= target) and the level above it. Each must have a Wilson
   95% interval that excludes `target` (the side of the target is known) or is narrower
   than `width`; and c* must beat the runner-up contract: the paired 95% interval of
   mean(c*) - mean(runner-up) over the same completions excludes 0 or is narrower than
   `tie_points` (then the two are a tie for this purpose).
2. **stable**: the best bid (c*, k*) has been the same in the last `patience` rounds.
3. **maximum**: `max_n` completions.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .stats import paired_difference, wilson


@dataclass(frozen=True)
class StoppingRule:
    start: int = 100
    step: int = 100
    max_n: int = 2000
    target: float = 0.5
    width: float = 0.10
    tie_points: float = 1.0
    patience: int = 3

    def __post_init__(self):
        if not 1 <= self.start <= self.max_n or self.step < 1:
            raise ValueError(f"stopping needs 1 <= start <= max_n and step >= 1, got "
                             f"start={self.start}, step={self.step}, max_n={self.max_n}")
        if not 0 < self.target < 1 or not 0 < self.width <= 1 or self.patience < 1:
            raise ValueError("stopping needs 0 < target < 1, 0 < width <= 1, patience >= 1")

    def as_dict(self) -> dict:
        return asdict(self)


def best_bid(v: np.ndarray, needs, target: float) -> tuple[int, int]:
    """(c*, k*): column of the max-of-averages contract and index of the highest level whose
    make rate reaches `target` on it (-1: not even the lowest level does)."""
    c = int(np.argmax(v.mean(0)))
    p = (v[:, c, None] >= np.asarray(needs)[None, :]).mean(0)
    ok = np.flatnonzero(p >= target)
    return c, int(ok[-1]) if len(ok) else -1


def decided(v: np.ndarray, needs, rule: StoppingRule) -> tuple[bool, dict]:
    """Rule 1 on the values so far, with the figures it looked at."""
    n = len(v)
    c, k = best_bid(v, needs, rule.target)
    cells = []
    for j in (k, k + 1):
        if 0 <= j < len(needs):
            made = int(np.count_nonzero(v[:, c] >= needs[j]))
            lo, hi = wilson(made, n)
            cells.append({"level_index": j, "ci95": [lo, hi],
                          "ok": not lo <= rule.target <= hi or hi - lo < rule.width})
    ranking = {"ok": True}
    if v.shape[1] > 1:
        order = np.argsort(-v.mean(0), kind="stable")
        diff = paired_difference(v[:, order[0]], v[:, order[1]])
        ranking = {"runner_up_column": int(order[1]), **diff,
                   "ok": diff["mean"] - diff["half_width"] > 0
                   or 2 * diff["half_width"] < rule.tie_points}
    ok = all(x["ok"] for x in cells) and ranking["ok"]
    return ok, {"best_column": c, "best_level_index": k, "cells": cells, "ranking": ranking}
