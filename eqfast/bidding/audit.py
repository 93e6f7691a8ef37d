"""The network path: bulk values from a Stage 1 network, checked by the exact solver where
a wrong value could change the answer (docs/BIDDING.md, "The network path and its audits").

1. **Targeted audits.** A cell (c, k) is decided by the completions whose network value lies
   near its threshold: |V_net - need| < margin can flip make/set. Rows are audited (solved
   exactly) in order of leverage: the top contracts by mean and by spread first, then by
   distance to the nearest threshold, within a budget of `fraction` of all rows.
2. **Deferral.** Every audited row takes the solver's value, and the near-threshold rows of
   the cells that decide the best bid (its level and the one above, on the chosen contract)
   are all solved, beyond the budget; a cell is `validated` when no near-threshold row of
   it is left unaudited, so its make rate is exact up to the (non-near) rows the network
   placed clearly on one side.
3. **Adversarial search.** From the audited rows with the largest error, local moves (swap
   one hidden tile between two hidden hands; the bidder's hand never changes) are accepted
   when they increase |V_net - V_PI|; the worst discrepancy found and whether it flips
   make/set at the contract's deciding level are reported. Random spot checks miss
   clustered errors; this looks for them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..rules.deal import mix_seeds
from .stopping import best_bid
from .values import exact_values, network_values


@dataclass(frozen=True)
class AuditConfig:
    fraction: float = 0.25       # exact solves for targeted audits, share of all rows
    margin: float = 3.0          # points: a row this close to a threshold may flip it
    top_contracts: int = 2       # leverage: this many by mean and this many by spread
    starts: int = 4              # adversarial: rows the search starts from
    steps: int = 12              # adversarial: rounds of moves per start
    width: int = 8               # adversarial: candidate moves per round (one solver call)
    target: float = 0.5          # make rate that defines the best bid (deferral)
    seed: int = 0

    def __post_init__(self):
        if not 0 <= self.fraction <= 1 or self.margin < 0:
            raise ValueError("audit fraction must be in [0, 1] and margin >= 0")

    def as_dict(self) -> dict:
        return asdict(self)


def audit_network(v_net: np.ndarray, comp: np.ndarray, contracts, needs, network,
                  cfg: AuditConfig, threads=None, progress=None):
    """(audit dict, values with the audited rows replaced by V_PI)."""
    say = progress or (lambda msg: None)
    n, C = v_net.shape
    needs_a = np.asarray(needs, dtype=np.float64)
    dist = np.abs(v_net[:, :, None] - needs_a[None, None, :]).min(2)          # [n, C]
    order_mean = np.argsort(-v_net.mean(0), kind="stable")[:cfg.top_contracts]
    order_sd = np.argsort(-v_net.std(0), kind="stable")[:cfg.top_contracts]
    lever = np.zeros(C, bool)
    lever[order_mean] = lever[order_sd] = True
    near = dist < cfg.margin
    # leverage first, then closeness to a threshold; only near rows are worth a solve
    key = np.where(near, dist - 100.0 * lever[None, :], np.inf).reshape(-1)
    budget = min(int(cfg.fraction * n * C), int(near.sum()))
    pick = np.argsort(key, kind="stable")[:budget]
    audited = np.zeros(n * C, bool)
    audited[pick] = True
    audited = audited.reshape(n, C)

    v_pi = np.full((n, C), np.nan)
    for j, c in enumerate(contracts):
        rows = np.flatnonzero(audited[:, j])
        if len(rows):
            v_pi[rows, j] = exact_values(comp[rows], (c,), threads)[:, 0]
    say(f"audit: {int(audited.sum())} of {n * C} rows solved exactly")
    # deferral: the cells that decide the best bid are never left to the network; their
    # remaining near-threshold rows are solved too (beyond the budget)
    v_used = np.where(audited, v_pi, v_net)
    deferred = 0
    for j, need in _deciding_cells(v_used, needs_a, cfg.target):
        rows = np.flatnonzero((np.abs(v_net[:, j] - need) < cfg.margin) & ~audited[:, j])
        if len(rows):
            v_pi[rows, j] = exact_values(comp[rows], (contracts[j],), threads)[:, 0]
            audited[rows, j] = True
            deferred += len(rows)
    if deferred:
        say(f"audit: {deferred} more rows of the deciding cells solved exactly")
    err = np.abs(v_net - v_pi)                                                 # nan if not audited
    v_used = np.where(audited, v_pi, v_net)

    cells = []
    for j in range(C):
        row = []
        for need in needs_a:
            near_k = np.abs(v_net[:, j] - need) < cfg.margin
            a = audited[:, j]
            flips = a & ((v_net[:, j] >= need) != (v_pi[:, j] >= need))
            checked = near_k & a
            row.append({"audited_fraction": float(a.mean()),
                        "worst_discrepancy_near": float(err[checked, j].max()) if checked.any() else None,
                        "near_threshold": int(near_k.sum()),
                        "near_unaudited": int((near_k & ~a).sum()),
                        "flips_found": int(flips.sum()),
                        "validated": bool(not (near_k & ~a).any())})
        cells.append(row)

    adv = adversarial(v_net, v_pi, err, comp, contracts, v_used, needs_a, network, cfg, threads)
    say(f"adversarial search: worst |V_net - V_PI| {adv['worst_discrepancy']}")
    summary = {
        "config": cfg.as_dict(),
        "audited_fraction": float(audited.mean()),
        "worst_discrepancy_audited": _nanmax(err),
        "mean_abs_error_audited": float(np.nanmean(err)) if audited.any() else None,
        "flips_found": int(sum(x["flips_found"] for r in cells for x in r)),
        "deferred_rows": deferred,
        "adversarial": adv,
        "deferral": "audited rows use the solver's value; unvalidated cells are labelled",
    }
    return {"summary": summary, "cells": cells}, v_used


def _deciding_cells(v: np.ndarray, needs: np.ndarray, target: float):
    """(column, need) of the best bid and the level above it on the max-of-averages
    contract (the cells sequential stopping looks at)."""
    j, k = best_bid(v, needs, target)
    return [(j, float(needs[i])) for i in (k, k + 1) if 0 <= i < len(needs)]


def adversarial(v_net, v_pi, err, comp, contracts, v_used, needs, network, cfg, threads) -> dict:
    """Hill-climb |V_net - V_PI| over hidden-tile swaps from the worst audited rows."""
    flat = np.where(np.isnan(err), -1.0, err).reshape(-1)
    starts = [int(s) for s in np.argsort(-flat, kind="stable")[:cfg.starts] if flat[s] >= 0]
    best = {"worst_discrepancy": _nanmax(err), "solves": 0, "flips_deciding_level": False,
            "found_by_search": False}
    C = v_net.shape[1]
    for s_i, s in enumerate(starts):
        i, j = divmod(s, C)
        c = contracts[j]
        deal = comp[i].astype(np.int64).copy()
        cur = float(err[i, j])
        p = (v_used[:, j, None] >= needs[None, :]).mean(0)
        k = np.flatnonzero(p >= cfg.target)
        deciding = needs[k[-1]] if len(k) else needs[0]
        for step in range(cfg.steps):
            cands = _swaps(deal, cfg.width, mix_seeds(cfg.seed, s_i, step))
            vn = network_values(cands, (c,), network)[:, 0]
            vp = exact_values(cands, (c,), threads)[:, 0]
            best["solves"] += len(cands)
            e = np.abs(vn - vp)
            b = int(np.argmax(e))
            flip = bool((vn[b] >= deciding) != (vp[b] >= deciding))
            if flip:
                best["flips_deciding_level"] = True
            if e[b] > cur:
                deal, cur = cands[b].astype(np.int64), float(e[b])
                if cur > best["worst_discrepancy"]:
                    best.update(worst_discrepancy=cur, found_by_search=True, contract=c,
                                deciding_need=float(deciding), v_net=float(vn[b]),
                                v_pi=int(vp[b]), deal=[[int(t) for t in h] for h in deal])
    return best


def _swaps(deal: np.ndarray, width: int, key: int) -> np.ndarray:
    """`width` neighbours of a deal [4, 7]: one tile of one hidden hand swapped with one of
    another (seats 1..3), each hand sorted again."""
    r = mix_seeds(key, np.arange(width)[:, None], np.arange(4)[None, :])
    out = np.repeat(deal[None], width, axis=0)
    for w in range(width):
        a = 1 + int(r[w, 0] % 3)
        b = 1 + (a + int(r[w, 1] % 2)) % 3  # a seat other than a
        ia, ib = int(r[w, 2] % 7), int(r[w, 3] % 7)
        out[w, a, ia], out[w, b, ib] = deal[b, ib], deal[a, ia]
        out[w, a].sort()
        out[w, b].sort()
    return out.astype(np.int8)


def _nanmax(x):
    return float(np.nanmax(x)) if np.isfinite(x).any() else None
