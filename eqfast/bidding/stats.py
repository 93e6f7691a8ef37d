"""Cell and contract statistics of a value matrix v [N completions, C contracts].

Definitions (docs/BIDDING.md "Fields"):
- Wilson score interval for a binomial proportion (no normal approximation: most cells of
  a bidding matrix sit near 0 or 1, where the Wald interval collapses to a point).
- Quantiles are sample quantiles that are observed values: q_a = the smallest v with
  F_N(v) >= a (the inverted empirical CDF), so q10 = 28 means at least 10% of the
  completions score 28 or less.
- CVaR_a = E[V | V <= q_a], the mean of every completion at or below the quantile q_a
  (spec 004 §3, M3): values tied at q_a all count, so with integer scores, which tie often,
  it can exceed the mean of the worst ceil(a N) (V = 20, 30 x 4, 32, ..., a = 0.2: 28.0,
  not 25.0).
"""
from __future__ import annotations

import math

import numpy as np

#: two-sided 95% normal quantile
Z95 = 1.959963984540054
QUANTILES = (0.05, 0.10, 0.50, 0.90)


def wilson(successes, n, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval (lo, hi) for `successes` out of `n`; (0, 1) when n = 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # clip the rounding error at the ends: k = 0 gives lo = 0 and k = n gives hi = 1
    return max(0.0, center - half), min(1.0, center + half)


def sample_quantile(sorted_v: np.ndarray, a: float):
    """The smallest value v with empirical CDF(v) >= a, of an ascending sorted sample."""
    n = len(sorted_v)
    return sorted_v[max(0, math.ceil(a * n) - 1)]


def cvar(sorted_v: np.ndarray, a: float) -> float:
    """E[V | V <= q_a] of an ascending sorted sample: the mean of every value at or below
    sample_quantile(sorted_v, a), ties at the quantile included."""
    sorted_v = np.asarray(sorted_v)
    q = sample_quantile(sorted_v, a)
    return float(np.mean(sorted_v[:np.searchsorted(sorted_v, q, side="right")]))


def contract_summary(v: np.ndarray) -> dict:
    """Score distribution of one contract's values [N] (bidder team points)."""
    s = np.sort(np.asarray(v, dtype=np.float64))
    out = {"mean": float(s.mean()), "sd": float(s.std(ddof=1)) if len(s) > 1 else 0.0}
    for a in QUANTILES:
        out[f"q{round(a * 100):02d}"] = _num(sample_quantile(s, a))
    out["cvar10"] = cvar(s, 0.10)
    out["worst"] = _num(s[0])
    out["best"] = _num(s[-1])
    return out


def cell(made: np.ndarray, marks: int) -> dict:
    """Make rate of one (contract, level) cell from per-completion make flags [N] bool."""
    n = len(made)
    k = int(np.count_nonzero(made))
    p = k / n if n else float("nan")
    lo, hi = wilson(k, n)
    return {"p": p, "ci95": [lo, hi], "makes": k,
            # the stake changes hands either way: +marks when made, -marks when set
            "mark_swing": marks * (2 * p - 1) if n else float("nan"),
            "all_sampled_make": bool(n and k == n)}


def paired_difference(a: np.ndarray, b: np.ndarray, z: float = Z95) -> dict:
    """Mean of a - b over the same completions and its normal 95% half-width."""
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    n = len(d)
    half = z * float(d.std(ddof=1)) / math.sqrt(n) if n > 1 else float("inf")
    return {"mean": float(d.mean()), "half_width": half}


def fusion(v: np.ndarray, needs) -> dict:
    """Max of averages (the valid contract choice) against the fused average of max (a
    different best contract per completion: clairvoyant trump choice, invalid), for the
    mean score and for the make rate at every bid level `needs`."""
    mean = v.mean(0)
    out = {"max_of_averages": float(mean.max()),
           "fused_average_of_max_INVALID": float(v.max(1).mean())}
    out["fusion_points"] = out["fused_average_of_max_INVALID"] - out["max_of_averages"]
    per_level = []
    for need in needs:
        made = v >= need
        per_level.append({"max_of_p": float(made.mean(0).max()),
                          "fused_p_INVALID": float(made.any(1).mean())})
    out["per_level"] = per_level
    return out


def _num(x):
    x = float(x)
    return int(x) if x.is_integer() else x
