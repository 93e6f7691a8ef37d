"""V_PI(d, c): the bidder team's points in completion d under contract c with perfect-
information play on every seat (exact: the C solver; approximate: a Stage 1 network).

The bidder sits at seat 0 and leads the first trick, so its team is team 0 and
V_PI = (max over the bidder's opening leads of team-0 Q + 42) / 2, in 0..42
(docs/RULES.md "Values the engine computes": team 0's points minus team 1's, and the two add up to 42).
"""
from __future__ import annotations

import os

import numpy as np
import torch

from ..rules.tables import N_SEATS, TOTAL_POINTS

BIDDER = 0


def default_threads() -> int:
    """The cores this process may run on (the solver's threads release the GIL)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def hand_masks(completions: np.ndarray) -> np.ndarray:
    """[n, 4] int64 tile bit masks of [n, 4, 7] tile ids."""
    bits = np.left_shift(np.int64(1), completions.astype(np.int64))
    return np.bitwise_or.reduce(bits, axis=2)


def opening_rows(completions: np.ndarray, contracts):
    """The solver's rows (hands, decl, leader, trick) of every (contract, completion)
    opening, contract-major, the bidder to lead: one batch call shares the threads."""
    n, C = len(completions), len(contracts)
    masks = np.repeat(hand_masks(completions)[None], C, axis=0).reshape(C * n, N_SEATS)
    decl = np.repeat(np.asarray(contracts, dtype=np.int64), n)
    return masks, decl, np.full(C * n, BIDDER), np.full((C * n, 3), -1)


def exact_lead_points(completions: np.ndarray, contracts, threads: int | None = None) -> np.ndarray:
    """[n, C, 7] int16: the bidder team's points (0..42) after each opening lead, the
    bidder's tiles in hand order (sorted ids), perfect-information play afterwards. One
    q_batch call for all rows, so the solver's threads share every contract's work."""
    from ..solver import q_batch

    n, C = len(completions), len(contracts)
    if n == 0:
        return np.zeros((0, C, 7), np.int16)
    q = q_batch(*opening_rows(completions, contracts), threads=threads or default_threads())
    # every tile may open a hand, so each of the bidder's 7 tiles has a Q
    lead_tiles = np.tile(completions[:, BIDDER].astype(np.int64), (C, 1))       # [C*n, 7]
    q_lead = np.take_along_axis(q, lead_tiles, axis=1).astype(np.int16)
    return ((q_lead + TOTAL_POINTS) // 2).reshape(C, n, 7).transpose(1, 0, 2)


def exact_values(completions: np.ndarray, contracts, threads: int | None = None) -> np.ndarray:
    """V_PI [n, len(contracts)] int16 points (0..42): the best opening lead's, searched for V
    alone (`v_batch`; 2.2 s against 5.7 s for exact_lead_points' max on 2,000 openings, one
    core). One call for all rows, so the solver's threads share every contract's work."""
    from ..solver import v_batch

    n, C = len(completions), len(contracts)
    if n == 0:
        return np.zeros((0, C), np.int16)
    v = v_batch(*opening_rows(completions, contracts), threads=threads or default_threads())
    return ((v.astype(np.int16) + TOTAL_POINTS) // 2).reshape(C, n).T


def opening_batch(completions: np.ndarray, contracts):
    """OracleBatch of the opening positions (bidder to lead), contract-major rows."""
    from ..oracle.protocol import OracleBatch

    n, C = len(completions), len(contracts)
    hands = torch.from_numpy(np.tile(completions.astype(np.int64), (C, 1, 1)))
    rows = C * n
    return OracleBatch(hands=hands, remaining=torch.full((rows, N_SEATS), 0x7F),
                       decl=torch.as_tensor(np.repeat(np.asarray(contracts), n), dtype=torch.int64),
                       leader=torch.full((rows,), BIDDER), trick=torch.full((rows, 3), -1),
                       actor=torch.full((rows,), BIDDER))


@torch.no_grad()
def network_values(completions: np.ndarray, contracts, oracle, chunk: int = 8192) -> np.ndarray:
    """V_net [n, C] float32 points: the network's max over the bidder's legal opening Q,
    mapped to the bidder team's points like V_PI, rounded to the nearest point and clipped
    to 0..42 (V_PI is an integer in that range; unrounded, a network that says 41.8 for a
    deal worth 42 would miss every mark bid)."""
    n, C = len(completions), len(contracts)
    batch = opening_batch(completions, contracts)
    out = []
    for s in range(0, len(batch), chunk):
        q, legal = oracle.query(batch.select(slice(s, s + chunk)))
        out.append(torch.where(legal, q.float(), -float("inf")).amax(1))
    v = torch.cat(out).numpy() if out else np.zeros(0, np.float32)
    pts = np.clip(np.rint((v + TOTAL_POINTS) / 2), 0, TOTAL_POINTS)
    return pts.reshape(C, n).T.astype(np.float32)
