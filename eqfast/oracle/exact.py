"""ExactOracle: the Stage 1 oracle protocol answered by the exact C solver (`eqfast.solver`).

Slow (one solve per row, in Python) but exact: for tests, audits, small runs and the
training labels. The solver works on *remaining* hands in the team-0 frame; this module
converts an `OracleBatch` row (initial hands + slot masks) to that and back to the actor's
7 slots in the actor frame.
"""
from __future__ import annotations

import numpy as np
import torch

from .protocol import OracleBatch

#: Q at illegal slots (the protocol leaves it unspecified; 0 keeps it finite and visible).
ILLEGAL_Q = 0.0


def _solve():
    try:
        from ..solver import solve
    except ImportError as e:  # the C extension is not built
        raise ImportError("ExactOracle needs the C solver: build it with "
                          "`python setup.py build_ext --inplace` in the repo root") from e
    return solve


def remaining_hands(hands: np.ndarray, remaining: np.ndarray) -> list[list[int]]:
    """Remaining tile ids per seat from initial hands [4,7] and 7-bit slot masks [4]."""
    return [[int(hands[s, i]) for i in range(7) if remaining[s] >> i & 1 and hands[s, i] >= 0]
            for s in range(4)]


def solve_row(hands: np.ndarray, remaining: np.ndarray, decl: int, leader: int,
              trick: list[int], actor: int) -> tuple[np.ndarray, np.ndarray]:
    """(q [7] float32 actor frame, legal [7] bool) of one position, exactly."""
    solve = _solve()
    result = solve(remaining_hands(hands, remaining), int(decl), int(leader), tuple(trick),
                   pv=False)
    sign = 1.0 if actor % 2 == 0 else -1.0
    q = np.full(7, ILLEGAL_Q, np.float32)
    legal = np.zeros(7, bool)
    for i, tile in enumerate(hands[actor].tolist()):
        if tile in result.q:
            q[i] = sign * float(result.q[tile])
            legal[i] = True
    return q, legal


class ExactOracle:
    """`Oracle` protocol on the exact solver: q [N,7] float32 actor frame, legal [N,7]."""

    def query(self, batch: OracleBatch) -> tuple[torch.Tensor, torch.Tensor]:
        hands = batch.hands.cpu().numpy()
        remaining = batch.remaining.cpu().numpy()
        decl, leader = batch.decl.cpu().tolist(), batch.leader.cpu().tolist()
        trick, actor = batch.trick.cpu().numpy(), batch.actor.cpu().tolist()
        q = np.zeros((len(batch), 7), np.float32)
        legal = np.zeros((len(batch), 7), bool)
        for n in range(len(batch)):
            expected = (leader[n] + int((trick[n] >= 0).sum())) % 4
            if actor[n] != expected:
                raise ValueError(f"row {n}: actor {actor[n]} is not leader {leader[n]} + "
                                 f"{int((trick[n] >= 0).sum())} trick tiles (expected {expected})")
            q[n], legal[n] = solve_row(hands[n], remaining[n], decl[n], leader[n],
                                       [int(t) for t in trick[n] if t >= 0], actor[n])
        dev = batch.hands.device
        return torch.from_numpy(q).to(dev), torch.from_numpy(legal).to(dev)
