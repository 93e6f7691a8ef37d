"""Exact perfect-information solver for the play of one Texas 42 hand.

Values follow docs/RULES.md ("Values the engine computes"): V(s) is team 0's points minus
team 1's points from state s to the end of the hand under minimax play (team 0 maximizes),
in [-42, 42]; Q(s, a) is the points of the trick `a` completes (if it does) plus V of the next state. Results are in the
team-0 frame unless ``actor_frame=True`` (multiplied by -1 when the actor is seat 1 or 3).

A state is given as the seats' *remaining* tiles: ``hands`` = 4 sequences of tile ids with
the current trick's tiles already removed, ``trick`` = the tiles of the current trick in play
order from ``leader``. Any reachable state is accepted: full deals, mid-trick states and
shortened hands (every seat the same k <= 7 tiles, empty trick).

API
---
``solve(hands, decl, leader, trick=(), actor_frame=False, pv=True) -> SolveResult``
    V, Q of every legal move of the player to act, a principal variation to the end of the
    hand (lowest tile id among equally good moves) and the search's node count.
``solve_state(state, actor_frame=False, pv=True) -> SolveResult``
    The same for a :class:`eqfast.rules.state.GameState` (value to go: points already won
    by ``state`` are not included).
``q_values(hands, decl, leader, trick=(), actor_frame=False) -> dict[int, int]``
    Only Q (no PV): the fast path for labeling one position.
``q_batch(hands, decl, leader, trick, threads=1) -> np.ndarray [N, 28] int8``
    Many positions in one C call (numpy in, numpy out); Q in the team-0 frame of every tile
    the actor may legally play, ``ILLEGAL`` (-128) elsewhere. ``threads`` C worker threads
    share the rows (the GIL is released while they search); Q is exact, so the result does
    not depend on the thread count.

Speed: the transposition table (TT) persists across calls as long as they stay on one deal
(same declaration and no tile changes owner), so labeling the positions of one game in
order reuses the work of the earlier ones; a call on another deal invalidates it in O(1).
Each worker thread owns a TT; calls from several Python threads are serialized by a lock
inside the extension (taken with the GIL released).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..rules import tables as _tables
from ..rules.tables import N_SEATS, N_TILES

try:
    from . import _csolver
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "eqfast.solver._csolver is not built: run `python setup.py build_ext --inplace` "
        "(or `pip install -e .`) in the repository root"
    ) from exc

#: Q value marking tiles the actor may not play, in q_batch's output.
ILLEGAL = -128


def _init_tables() -> None:
    # The C solver knows no rule: it gets the four tables it needs, once, from tables.py.
    _csolver.init_tables(
        np.ascontiguousarray(_tables.FOLLOW_MASK, dtype="<u4").tobytes(),
        np.ascontiguousarray(_tables.RANK, dtype=np.int8).tobytes(),
        np.ascontiguousarray(_tables.LED_SUIT, dtype=np.int8).tobytes(),
        np.ascontiguousarray(_tables.POINTS, dtype=np.int8).tobytes(),
    )


_init_tables()


@dataclass(frozen=True)
class SolveResult:
    """Solution of one position (values in points)."""

    v: int  # value to go (team-0 frame unless actor_frame)
    q: dict[int, int]  # tile id -> Q, for every legal move of the player to act
    pv: list[int] = field(default_factory=list)  # principal variation to the end of the hand
    nodes: int = 0  # tiles played in the search
    actor: int = -1  # seat to act (-1: the hand is over)
    actor_frame: bool = False


def _hand_masks(hands: Sequence[Sequence[int]]) -> list[int]:
    if len(hands) != N_SEATS:
        raise ValueError(f"hands must hold 4 seats, got {len(hands)}")
    masks = []
    for seat, hand in enumerate(hands):
        m = 0
        for t in hand:
            t = int(t)
            if not 0 <= t < N_TILES:
                raise ValueError(f"hands[{seat}]: unknown tile id {t} (ids are 0..27)")
            if m >> t & 1:
                raise ValueError(f"hands[{seat}]: tile {t} appears twice")
            m |= 1 << t
        masks.append(m)
    return masks


def solve(hands, decl: int, leader: int, trick: Sequence[int] = (), actor_frame: bool = False,
          pv: bool = True) -> SolveResult:
    """V, Q of every legal move, and (if ``pv``) a principal variation. See module docs."""
    masks = _hand_masks(hands)
    trick = [int(t) for t in trick]
    actor = (int(leader) + len(trick)) % N_SEATS
    if not trick and not any(masks):
        return SolveResult(0, {}, [], 0, -1, actor_frame)
    v, q, line, nodes = _csolver.solve(masks, int(decl), int(leader), trick, bool(pv))
    sign = -1 if actor_frame and actor % 2 else 1
    return SolveResult(sign * v, {t: sign * x for t, x in q}, line, nodes, actor, actor_frame)


def solve_state(state, actor_frame: bool = False, pv: bool = True) -> SolveResult:
    """`solve` for a GameState: its hands, declaration, leader and current trick."""
    return solve(state.hands, state.decl, state.leader, state.trick, actor_frame, pv)


def q_values(hands, decl: int, leader: int, trick: Sequence[int] = (),
             actor_frame: bool = False) -> dict[int, int]:
    """Q of every legal move (tile id -> points), no principal variation."""
    return solve(hands, decl, leader, trick, actor_frame, pv=False).q


def q_batch(hands, decl, leader, trick, threads: int = 1) -> np.ndarray:
    """Q [N, 28] int8 (team-0 frame) of N positions in one C call; ILLEGAL where not legal.

    hands: [N, 4] hand bit masks (bit t = tile t still in hand) or [N, 4, 28] bool;
    decl, leader: [N]; trick: [N, 3] tile ids in play order from leader, -1 padded.
    threads: C worker threads (1..64) solving the rows in parallel, GIL released.
    Order positions of the same deal consecutively so they share the TT (each thread takes
    runs of 4 consecutive rows).
    """
    return _batch(hands, decl, leader, trick, threads, value_only=False)


def v_batch(hands, decl, leader, trick, threads: int = 1) -> np.ndarray:
    """V [N] int8 (team-0 frame): the value of each position under perfect play, searched for
    V alone (cheaper than the best of q_batch's Q: moves that cannot change V are cut off).
    Arguments as q_batch."""
    return _batch(hands, decl, leader, trick, threads, value_only=True)


def _batch(hands, decl, leader, trick, threads: int, value_only: bool) -> np.ndarray:
    h = np.asarray(hands)
    if h.ndim == 3:
        if h.shape[1:] != (N_SEATS, N_TILES):
            raise ValueError(f"hands as bools must be [N, 4, 28], got {h.shape}")
        h = (h.astype(np.int64) << np.arange(N_TILES, dtype=np.int64)).sum(-1)
    if h.ndim != 2 or h.shape[1] != N_SEATS:
        raise ValueError(f"hands must be [N, 4] masks, got {h.shape}")
    if h.size and (h.min() < 0 or h.max() >= 1 << N_TILES):
        raise ValueError("hands masks must be 28-bit (tiles 0..27)")
    n = h.shape[0]
    d = np.broadcast_to(np.asarray(decl), (n,))
    ld = np.broadcast_to(np.asarray(leader), (n,))
    tr = np.asarray(trick).reshape(n, 3)
    for name, a, hi in (("decl", d, 9), ("leader", ld, 3)):
        if a.size and (a.min() < 0 or a.max() > hi):
            raise ValueError(f"{name} must be 0..{hi}")
    if tr.size and (tr.min() < -1 or tr.max() >= N_TILES):
        raise ValueError("trick tile ids must be -1 (padding) or 0..27")
    q, _nodes = _csolver.q_batch(
        np.ascontiguousarray(h, dtype="<u4").tobytes(),
        np.ascontiguousarray(d, dtype=np.uint8).tobytes(),
        np.ascontiguousarray(ld, dtype=np.uint8).tobytes(),
        np.ascontiguousarray(tr, dtype=np.int8).tobytes(),
        int(threads), bool(value_only),
    )
    out = np.frombuffer(q, dtype=np.int8)
    return (out if value_only else out.reshape(n, N_TILES)).copy()


def clear() -> None:
    """Forget every TT entry (never needed for correctness)."""
    _csolver.clear()


__all__ = ["SolveResult", "solve", "solve_state", "q_values", "q_batch", "v_batch", "clear", "ILLEGAL"]
