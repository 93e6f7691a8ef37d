"""Plain full-width minimax over GameState: the correctness reference for eqfast.solver.

No pruning, no move ordering, no C: every legal move of every position is expanded with
`GameState.play` (the rules as tables.py defines them). Positions are memoized on (hands,
leader, trick), which determine the value to go, so each is expanded once. Use it on
endgames (a few tricks left); a full deal would take hours.
"""
from __future__ import annotations

from eqfast.rules.state import GameState


def position_key(state: GameState):
    """What the value to go depends on: remaining hands, the trick's leader and tiles."""
    return state.hands, state.leader, state.trick


def solve_tree(root: GameState) -> dict:
    """Every position reachable from `root` (game over excluded): key -> (state, Q, V).

    Q maps each legal move to the points it scores (nonzero when it ends a trick) plus V of
    the next position; V is the max (seats 0, 2) or min (seats 1, 3) of Q. Team-0 frame.
    """
    table: dict = {}
    _expand(root, table)
    return table


def q_and_v(state: GameState) -> tuple[dict[int, int], int]:
    """(Q of every legal move, V) of one position."""
    if state.is_over:
        return {}, 0
    return solve_tree(state)[position_key(state)][1:]


def _expand(state: GameState, table: dict) -> int:
    if state.is_over:
        return 0
    key = position_key(state)
    if key not in table:
        q = {}
        for a in state.legal_moves():
            nxt = state.play(a)
            q[a] = (nxt.score - state.score) + _expand(nxt, table)
        maximize = state.current_player % 2 == 0
        table[key] = (state, q, max(q.values()) if maximize else min(q.values()))
    return table[key][2]
