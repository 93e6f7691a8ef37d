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
    """`Oracle` protocol on the exact solver: q [N,7] float32 actor frame, legal [N,7].

    All rows go to the solver in one C call (`eqfast.solver.q_batch`), in batch order, so
    consecutive rows of one deal share the transposition table; the conversion from slot
    space (hands + 7-bit masks) to tile masks and back is vectorized.

    threads: C threads solving the rows of a call in parallel; None follows
    torch.get_num_threads() at each query, so eqfast-generate's --threads (which sets
    torch's thread count) sets it too. Q is exact, hence identical for every thread count."""

    def __init__(self, threads: int | None = None):
        if threads is not None and not 1 <= threads <= 64:
            raise ValueError(f"threads must be 1..64 or None, got {threads}")
        self.threads = threads

    def query(self, batch: OracleBatch) -> tuple[torch.Tensor, torch.Tensor]:
        from ..solver import ILLEGAL, q_batch

        dev = batch.hands.device
        n_trick = (batch.trick >= 0).sum(1)
        expected = (batch.leader + n_trick) % 4
        if bool((batch.actor != expected).any()):
            n = int(torch.nonzero(batch.actor != expected)[0])
            raise ValueError(f"row {n}: actor {int(batch.actor[n])} is not leader "
                             f"{int(batch.leader[n])} + {int(n_trick[n])} trick tiles "
                             f"(expected {int(expected[n])})")
        hands = batch.hands.cpu()
        bits = (batch.remaining.cpu()[..., None] >> torch.arange(7)) & 1            # [N,4,7]
        tile_bit = torch.where(hands >= 0, 1 << hands.clamp(min=0), torch.zeros_like(hands))
        masks = (tile_bit * bits).sum(-1)                                             # [N,4]
        threads = self.threads or min(max(torch.get_num_threads(), 1), 64)
        q28 = torch.from_numpy(q_batch(masks.numpy(), batch.decl.cpu().numpy(),
                                       batch.leader.cpu().numpy(), batch.trick.cpu().numpy(),
                                       threads=threads))
        rows = torch.arange(len(batch))
        actor = batch.actor.cpu()
        slot_tiles = hands[rows, actor]                                               # [N,7]
        q = q28.long().gather(1, slot_tiles.clamp(min=0))
        legal = (q != ILLEGAL) & (slot_tiles >= 0)
        sign = torch.where(actor % 2 == 0, 1.0, -1.0)[:, None]
        q = torch.where(legal, q.float() * sign, torch.full_like(q, ILLEGAL_Q, dtype=torch.float32))
        return q.to(dev), legal.to(dev)


class HybridOracle:
    """The network early in the hand, the exact solver late: rows with at most
    `exact_tricks` tricks left (counting the current one) go to the solver.

    Why: the network's error shrinks through the hand but is not zero (docs/ORACLE.md: q_mae
    3.9 / 2.6 / 0.8 points in tricks 5 / 6 / 7), while the solver's cost collapses there
    (a position with 3 tricks left is a few hundred nodes). Late-hand labels become exact
    for a small share of the time. Same protocol as both parts."""

    def __init__(self, network, exact_tricks: int = 3, threads: int | None = None):
        if not 0 <= exact_tricks <= 7:
            raise ValueError(f"exact_tricks must be 0..7, got {exact_tricks}")
        self.network = network
        self.exact = ExactOracle(threads)
        self.exact_tricks = exact_tricks

    def query(self, batch: OracleBatch) -> tuple[torch.Tensor, torch.Tensor]:
        in_hands = ((batch.remaining[..., None] >> torch.arange(7, device=batch.remaining.device))
                    & 1).sum((1, 2))
        tiles_left = in_hands + (batch.trick >= 0).sum(1)       # tiles of this and later tricks
        late = tiles_left <= 4 * self.exact_tricks
        q = torch.empty(len(batch), 7, dtype=torch.float32, device=batch.hands.device)
        legal = torch.empty(len(batch), 7, dtype=torch.bool, device=batch.hands.device)
        for part, oracle in ((late, self.exact), (~late, self.network)):
            if bool(part.any()):
                q[part], legal[part] = oracle.query(batch.select(part))
        return q, legal
