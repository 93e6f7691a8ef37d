"""Oracle fidelity metrics against exact labels, and rows/s of a network oracle.

For decisions with exact Q* (actor frame) over the legal slots and predictions Q-hat:
    q_mae        mean |Q-hat - Q*| over legal moves (points)
    q_gap        mean of Q*(best) - Q*(argmax_legal Q-hat) over all decisions (points)
    q_gap_multi  the same over decisions with >= 2 legal moves
    accuracy     share of decisions (>= 2 legal moves) where argmax Q-hat is an optimal move
    blunder_rate share of decisions whose gap exceeds BLUNDER_POINTS (10 points)
each overall and per trick number (1..7; depth // 4 + 1).
"""
from __future__ import annotations

import time

import torch

BLUNDER_POINTS = 10.0


def decision_stats(q_pred: torch.Tensor, q_true: torch.Tensor, legal: torch.Tensor
                   ) -> dict[str, torch.Tensor]:
    """Per-row tensors: abs error sum, legal count, gap, optimal-pick flag."""
    neg = torch.finfo(torch.float32).min
    pred = torch.where(legal, q_pred.float(), torch.full_like(q_pred.float(), neg))
    true = torch.where(legal, q_true.float(), torch.full_like(q_true.float(), neg))
    pick = pred.argmax(dim=1, keepdim=True)
    best = true.max(dim=1).values
    chosen = true.gather(1, pick).squeeze(1)
    gap = best - chosen
    err = ((q_pred.float() - q_true.float()).abs() * legal).sum(dim=1)
    return {"abs_err": err, "n_legal": legal.sum(dim=1), "gap": gap, "optimal": gap <= 1e-6}


def _summary(st: dict[str, torch.Tensor], keep: torch.Tensor) -> dict:
    n = int(keep.sum())
    if n == 0:
        return {"positions": 0}
    multi = keep & (st["n_legal"] >= 2)
    n_multi = int(multi.sum())
    gap = st["gap"]
    return {
        "positions": n,
        "positions_multi": n_multi,
        "q_mae": float(st["abs_err"][keep].sum() / st["n_legal"][keep].sum()),
        "q_gap": float(gap[keep].mean()),
        "q_gap_multi": float(gap[multi].mean()) if n_multi else 0.0,
        "accuracy": float(st["optimal"][multi].float().mean()) if n_multi else 1.0,
        "blunder_rate": float((gap[keep] > BLUNDER_POINTS).float().mean()),
    }


def fidelity(q_pred: torch.Tensor, q_true: torch.Tensor, legal: torch.Tensor,
             depth: torch.Tensor | None = None) -> dict:
    """Overall metrics, plus "per_trick" (list of 7 dicts) when `depth` [N] is given."""
    st = decision_stats(q_pred, q_true, legal)
    out = _summary(st, torch.ones_like(st["gap"], dtype=torch.bool))
    if depth is not None:
        trick = depth.long() // 4
        out["per_trick"] = [_summary(st, trick == k) for k in range(7)]
    return out


def predict(oracle, batch, chunk: int = 8192) -> torch.Tensor:
    """Q [N, 7] of an Oracle over a (possibly large) OracleBatch, `chunk` rows at a time."""
    parts = []
    for start in range(0, len(batch), chunk):
        q, _ = oracle.query(batch.select(slice(start, start + chunk)))
        parts.append(q)
    return torch.cat(parts)


def rows_per_second(oracle, batch, batch_size: int = 1024, min_seconds: float = 1.0) -> float:
    """Oracle throughput (rows/s) querying `batch_size` rows at a time (after one warm-up)."""
    sub = batch.select(slice(0, batch_size))
    oracle.query(sub)
    rows, t0 = 0, time.perf_counter()
    while True:
        oracle.query(sub)
        rows += len(sub)
        dt = time.perf_counter() - t0
        if dt >= min_seconds:
            return rows / dt


def format_report(m: dict) -> str:
    """Readable multi-line table of `fidelity` output."""
    head = (f"{'':>8} {'positions':>9} {'q_mae':>7} {'q_gap':>7} {'gap_multi':>9} "
            f"{'accuracy':>8} {'blunders':>8}")
    line = lambda name, s: (f"{name:>8} {s['positions']:>9} {s['q_mae']:>7.3f} {s['q_gap']:>7.3f} "
                            f"{s['q_gap_multi']:>9.3f} {s['accuracy']:>8.4f} "
                            f"{s['blunder_rate']:>8.4f}")
    rows = [head, line("all", m)]
    for k, s in enumerate(m.get("per_trick", [])):
        if s["positions"]:
            rows.append(line(f"trick {k + 1}", s))
    return "\n".join(rows)
