"""World weights scored against the true deal.

In self-play the deal behind every record is known (its `seed`), so the worlds a decision
was labelled with, and their weights, can be scored against it. Uniform weights over the
same worlds (what the engine uses without a posterior) are scored beside them, so the
posterior's effect is a paired difference. Per decision:

- contested tiles: tiles whose owner differs between the decision's worlds (weight > 0),
  the hidden tiles the sample is unsure of;
- P(true): per contested tile, the weight on the seat that really holds it;
- Brier: per contested tile, the sum over seats of (P(seat) - [seat holds it])^2, a proper
  score (lower is better): unlike P(true) it punishes overconfident weights;
- E[Q] error: over the legal moves of a decision with >= 2, (E[Q] - Q)^2 with Q the
  exact value of the move in the true deal. E[Q] under the true posterior minimizes its
  expectation, and the worlds are drawn independently of the true deal, so a weighting
  whose error is lower by D is at least sqrt(D) rms closer to the true posterior's E[Q]
  (of the oracle's Q: its bias against the solver is part of the error). Most of the error
  is the hidden information itself (~17 points rms).

Differences are reported with 95% intervals over games (the tiles and moves of one game
are not independent). Used by `eqfast-validate --truth` and
benchmarks/posterior_truth.py.
"""
from __future__ import annotations

import numpy as np
import torch

from ..engine.public import solver_positions
from ..engine.transcript import current_hand_order
from ..rules.deal import deal_from_seed
from ..solver import ILLEGAL, q_batch
from .validation import ReplayError, replay_to_decision

#: the per-decision sums `decision_scores` returns
SCORE_KEYS = ("p", "brier", "sq")


def true_owner(seed: int) -> np.ndarray:
    """[28] absolute seat holding each tile id in the deal of `seed`."""
    hands = np.asarray(deal_from_seed(seed))
    owner = np.empty(28, dtype=np.int64)
    for seat in range(4):
        owner[hands[seat]] = seat
    return owner


def true_q(games) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q [G, 7] float64, legal [G, 7] bool) of the acting player's initial-hand slots in
    the true deal of each game (`BatchedGames` at the decision): the exact solver's value
    of each legal move in the actor's frame, NaN where not legal. CPU games: the solver
    reads host memory."""
    G = games.batch_size
    q = torch.from_numpy(q_batch(*solver_positions(games)).astype(np.float64))
    actor = games.current_player
    tiles = games.hands[torch.arange(G), actor]                           # [G, 7]
    slot_q = q.gather(1, tiles.clamp(min=0))
    legal = (tiles >= 0) & (slot_q != ILLEGAL)
    sign = torch.where(actor % 2 == 0, 1.0, -1.0).double()
    return torch.where(legal, slot_q * sign[:, None], float("nan")), legal


def decision_scores(weights: torch.Tensor, owner: torch.Tensor, truth: np.ndarray,
                    world_q: torch.Tensor, q: torch.Tensor) -> dict:
    """Sums over one decision under each of V weightings of its worlds: P(true) and Brier
    over its contested tiles, squared E[Q] error over its legal moves when it has >= 2
    (each [V] float64), and the counts they are over (ints).

    weights [V, n], each row normalized, over the worlds with weight > 0; owner [n, 28]
    absolute seats; truth [28] the true owners; world_q [n, 7] Q per slot; q [7] the true
    deal's Q, NaN where not legal (slots in the same order as world_q).
    """
    V = weights.shape[0]
    contested = (owner != owner[:1]).any(0)
    legal = ~torch.isnan(q)
    choice = int(legal.sum()) >= 2
    out = {"tiles": int(contested.sum()), "moves": int(legal.sum()) if choice else 0,
           "p": torch.zeros(V, dtype=torch.float64), "brier": torch.zeros(V, dtype=torch.float64),
           "sq": torch.zeros(V, dtype=torch.float64)}
    if contested.any():
        seats = torch.arange(4)
        hit = seats[None, :] == torch.from_numpy(truth)[contested][:, None]      # [c, 4]
        # products summed over the worlds, not a matmul: each weighting's sums then round
        # alike, so equal weightings score bit for bit the same
        onehot = (owner[:, contested, None] == seats).double()                 # [n, c, 4]
        p = (weights[:, :, None, None] * onehot).sum(1)                          # [V, c, 4]
        out["p"] = p[:, hit].sum(1)
        out["brier"] = ((p - hit.double()) ** 2).sum((1, 2))
    if choice:
        eq = (weights[:, :, None] * world_q[:, legal]).sum(1)                    # [V, m]
        out["sq"] = ((eq - q[legal]) ** 2).sum(1)
    return out


def paired_gain(a: np.ndarray, b: np.ndarray, n: np.ndarray) -> tuple[float, float]:
    """Mean of (a - b) per item and its 95% half-width over games: a, b the per-game sums
    [games, ...], n the per-game item counts (a ratio estimator over games)."""
    d = (a - b).reshape(len(a), -1).sum(1)
    n = n.reshape(len(n), -1).sum(1)
    keep = n > 0
    d, n = d[keep], n[keep]
    if n.sum() == 0:
        return float("nan"), float("nan")
    mean = d.sum() / n.sum()
    resid = d - mean * n
    se = np.sqrt((resid ** 2).sum() * len(n) / max(len(n) - 1, 1)) / n.sum()
    return float(mean), float(1.96 * se)


def records_true_q(records) -> torch.Tensor:
    """[R, 7] the true deal's Q of each record's current-hand slots (its `e_q_mean` order),
    actor frame, NaN where not legal: each game replayed from its seed to the decision
    (`validation.replay_to_decision`) and solved."""
    out = torch.full((len(records), 7), float("nan"), dtype=torch.float64)
    for d in torch.unique(records["decision_idx"]).tolist():
        rows = torch.nonzero(records["decision_idx"] == d)[:, 0]
        games = replay_to_decision(records.select(rows))
        q, legal = true_q(games)
        order = current_hand_order(games).cpu()                           # [B, 7]
        cur = q.gather(1, order.clamp(min=0))
        cur_legal = legal.gather(1, order.clamp(min=0)) & (order >= 0)
        if not torch.equal(cur_legal, records["legal_mask"][rows].bool()):
            raise ReplayError(f"decision {d}: the solver's legal moves in the true deal are "
                              "not the records' legal_mask")
        out[rows] = torch.where(cur_legal, cur, float("nan"))
    return out


def truth_report(records) -> dict:
    """The records' stored world weights against uniform weights over the same worlds,
    scored against each record's true deal (module doc): overall and by trick, the
    uniform and stored figures and the stored weights' gain with its 95% interval over
    games. Needs the stored worlds (`eqfast-generate --store-worlds`)."""
    missing = [k for k in ("world_owner", "world_weight", "world_q") if k not in records]
    if missing:
        raise ValueError(f"scoring against the true deal needs the stored worlds (fields "
                         f"{', '.join(missing)} are missing): generate with --store-worlds")
    q_true = records_true_q(records)
    seeds = records["seed"].tolist()
    games = {s: i for i, s in enumerate(sorted(set(seeds)))}
    tricks = (records["decision_idx"] // 4).tolist()
    keys = [f"{k}:{w}" for k in SCORE_KEYS for w in ("uniform", "stored")] + ["tiles", "moves"]
    sums = {k: np.zeros((len(games), 7)) for k in keys}
    truths = {s: true_owner(s) for s in games}
    for r in range(len(records)):
        w = records["world_weight"][r].double()
        on = w > 0
        if not on.any():
            continue
        g, t = games[seeds[r]], tricks[r]
        stored = w[on] / w[on].sum()
        s = decision_scores(torch.stack([stored, torch.full_like(stored, 1 / len(stored))]),
                            records["world_owner"][r][on].long(), truths[seeds[r]],
                            records["world_q"][r][on].double(), q_true[r])
        for k in SCORE_KEYS:
            sums[f"{k}:stored"][g, t] += float(s[k][0])
            sums[f"{k}:uniform"][g, t] += float(s[k][1])
        sums["tiles"][g, t] += s["tiles"]
        sums["moves"][g, t] += s["moves"]

    def figures(cols) -> dict:
        tiles, moves = sums["tiles"][:, cols], sums["moves"][:, cols]
        nt, nm = tiles.sum(), moves.sum()
        get = lambda k: sums[k][:, cols]
        ratio = lambda k, n: float(get(k).sum() / n) if n else None
        out = {"contested_tiles": int(nt), "moves": int(nm)}
        for w in ("uniform", "stored"):
            out[f"p_true_{w}"] = ratio(f"p:{w}", nt)
            out[f"brier_{w}"] = ratio(f"brier:{w}", nt)
            sq = ratio(f"sq:{w}", nm)
            out[f"eq_rmse_{w}"] = None if sq is None else float(np.sqrt(sq))
        for label, a, b, n in (("p_true_gain", "p:stored", "p:uniform", tiles),
                               ("brier_gain", "brier:uniform", "brier:stored", tiles),
                               ("eq_sq_error_gain", "sq:uniform", "sq:stored", moves)):
            mean, half = paired_gain(get(a), get(b), n)
            out[label] = None if np.isnan(mean) else mean
            out[f"{label}_ci95"] = None if np.isnan(half) else half
        return out

    report = {"n_records": len(records), "n_games": len(games), **figures(slice(None))}
    report["by_trick"] = {str(t + 1): figures([t]) for t in range(7)
                          if sums["tiles"][:, t].sum() + sums["moves"][:, t].sum() > 0}
    return report
