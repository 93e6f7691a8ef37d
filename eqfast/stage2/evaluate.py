"""How well a Stage 2 model's μ matches the records' E[Q], and how fast it runs.

All figures are over the legal moves of the records of one split, in points:

    mse, mae          mean (μ - E[Q])² and |μ - E[Q]| over legal moves (every decision)
    agreement         over decisions with >= 2 legal moves: the share where the model's
                      argmax μ is a label-best move (its E[Q] within TIE_POINTS of the best
                      legal E[Q], the generator's tie tolerance)
    regret            over the same decisions: mean of best legal E[Q] minus the E[Q] of the
                      model's argmax (label terms: what the move loses if the labels are
                      right); regret_gt1 is the share of those decisions losing > 1 point
    regret_uniform    the same for a uniformly random legal move (a reference point)
    calibration       with a variance head: z = (μ - E[Q]) / sqrt(σ² + s²), σ² the model's
                      exp(log_var) and s² the label's sampling variance (stage2/data.py);
                      within_1sigma / within_2sigma are the shares of |z| <= 1 and <= 2
                      (0.683 / 0.954 for a calibrated Gaussian), mean_z2 is mean z² (1.0)
    decisions_per_s   forward passes per second at a batch size (eager and TorchScript)

Ties in μ go to the lowest slot (torch.argmax's first maximum), as the generator's greedy
policy breaks ties in E[Q].
"""
from __future__ import annotations

import time

import torch

from .model import trim_tokens

#: label moves within this many points of the best are equally good (the generator's
#: greedy tie tolerance, docs/GENERATE.md)
TIE_POINTS = 1e-4


@torch.no_grad()
def predict(model, tokens: torch.Tensor, lengths: torch.Tensor, device="cpu",
            chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """(mu, log_var) [R, 7] on the CPU for all rows, in row order: the rows sorted by
    length, `chunk` rows per forward on tokens cut to the chunk's longest."""
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    n = tokens.shape[0]
    mu_all, lv_all = torch.zeros(n, 7), torch.zeros(n, 7)
    order = torch.sort(lengths, stable=True).indices
    for s in range(0, n, chunk):
        rows = order[s:s + chunk]
        part = lengths[rows]
        mu, lv = model(trim_tokens(tokens[rows], part).to(device).long(), part.to(device))
        mu_all[rows] = mu.float().cpu()
        lv_all[rows] = lv.float().cpu()
    if was_training:
        model.train()
    return mu_all, lv_all


def masked_argmax(values: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """Slot [R] of the largest value among the legal slots (the lowest slot on ties)."""
    return torch.where(legal, values, torch.full_like(values, float("-inf"))).argmax(1)


def metrics(mu: torch.Tensor, log_var: torch.Tensor | None, rows: dict) -> dict:
    """The figures of the module docstring (log_var None: no calibration)."""
    q, legal = rows["q"], rows["legal"]
    err = (mu - q)[legal]
    out = {"records": int(q.shape[0]), "legal_moves": int(err.numel()),
           "mse": float((err ** 2).mean()), "mae": float(err.abs().mean())}
    multi = legal.sum(1) >= 2
    best = torch.where(legal, q, torch.full_like(q, float("-inf"))).max(1).values
    choice = masked_argmax(mu, legal)
    regret = best - q.gather(1, choice[:, None])[:, 0]
    mean_legal = (q * legal).sum(1) / legal.sum(1).clamp(min=1)
    out.update(decisions_multi=int(multi.sum()),
               agreement=float((regret[multi] <= TIE_POINTS).float().mean()),
               regret=float(regret[multi].mean()),
               regret_gt1=float((regret[multi] > 1.0).float().mean()),
               regret_uniform=float((best - mean_legal)[multi].mean()))
    if log_var is not None:
        v = log_var.exp() + rows["s2"]
        z = ((mu - q) / v.sqrt())[legal]
        out.update(within_1sigma=float((z.abs() <= 1).float().mean()),
                   within_2sigma=float((z.abs() <= 2).float().mean()),
                   mean_z2=float((z ** 2).mean()),
                   sigma_median=float(log_var.exp().sqrt()[legal].median()))
    return out


@torch.no_grad()
def decisions_per_second(model, tokens: torch.Tensor, lengths: torch.Tensor, batch: int = 1024,
                         device="cpu", min_seconds: float = 1.0) -> float:
    """Forward passes per second over batches of `batch` rows (after one warm-up call),
    the tokens cut to the batch's longest length as the player and `predict` run them."""
    n = min(batch, tokens.shape[0])
    t = trim_tokens(tokens[:n], lengths[:n]).to(device).long()
    ln = lengths[:n].to(device)
    model(t, ln)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    sync()
    calls, start = 0, time.perf_counter()
    while True:
        model(t, ln)
        calls += 1
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds and calls >= 3:
            return calls * n / elapsed


def metrics_by(mu: torch.Tensor, rows: dict, group: torch.Tensor, n_groups: int) -> list[dict]:
    """Where the regret is: per group g < n_groups of the rows (group [R] int64; e.g. the
    trick, decision_idx // 4, or the place in the trick, decision_idx % 4), over its
    decisions with >= 2 legal moves: their count, μ's MSE, agreement, regret, the uniform
    move's regret, and the group's share of all the regret (the points the model loses
    there over the points it loses in all)."""
    q, legal = rows["q"], rows["legal"]
    multi = legal.sum(1) >= 2
    best = torch.where(legal, q, torch.full_like(q, float("-inf"))).max(1).values
    choice = masked_argmax(mu, legal)
    regret = best - q.gather(1, choice[:, None])[:, 0]
    mean_legal = (q * legal).sum(1) / legal.sum(1).clamp(min=1)
    sq = torch.where(legal, (mu - q) ** 2, torch.zeros_like(q)).sum(1)
    total = float(regret[multi].sum())
    out = []
    for g in range(n_groups):
        sel = multi & (group == g)
        n = int(sel.sum())
        row = {"group": g, "decisions_multi": n}
        if n:
            row.update(mse=float(sq[sel].sum() / legal[sel].sum()),
                       agreement=float((regret[sel] <= TIE_POINTS).float().mean()),
                       regret=float(regret[sel].mean()),
                       regret_uniform=float((best - mean_legal)[sel].mean()),
                       regret_share=float(regret[sel].sum()) / total if total > 0 else 0.0)
        out.append(row)
    return out


def format_by(rows: list[dict], label: str, names=None) -> str:
    """A small table of `metrics_by` rows; `names` labels the groups (default: 1-based)."""
    lines = [f"{label:<10} {'decisions':>9} {'MSE':>7} {'agree':>6} {'regret':>7} "
             f"{'uniform':>7} {'share':>6}"]
    for r in rows:
        name = names[r["group"]] if names else str(r["group"] + 1)
        if not r["decisions_multi"]:
            lines.append(f"{name:<10} {0:>9}")
            continue
        lines.append(f"{name:<10} {r['decisions_multi']:>9} {r['mse']:>7.2f} "
                     f"{r['agreement']:>6.3f} {r['regret']:>7.3f} {r['regret_uniform']:>7.3f} "
                     f"{r['regret_share']:>6.1%}")
    return "\n".join(lines)


#: names of decision_idx % 4, the actor's place in the trick
PLACES = ("lead", "2nd", "3rd", "4th")


def format_report(m: dict) -> str:
    lines = [f"{m['records']} records, {m['legal_moves']} legal moves, "
             f"{m['decisions_multi']} decisions with >= 2 legal moves",
             f"mu vs E[Q] over legal moves: MSE {m['mse']:.3f} points^2, MAE {m['mae']:.3f} points",
             f"argmax agreement {m['agreement']:.4f}; regret {m['regret']:.4f} points "
             f"(> 1 point: {m['regret_gt1']:.4f}); uniformly random legal move: regret "
             f"{m['regret_uniform']:.4f}"]
    if "mean_z2" in m:
        lines.append(f"calibration: |z| <= 1: {m['within_1sigma']:.3f}, |z| <= 2: "
                     f"{m['within_2sigma']:.3f}, mean z^2 {m['mean_z2']:.3f} "
                     f"(median sigma {m['sigma_median']:.3f} points)")
    return "\n".join(lines)
