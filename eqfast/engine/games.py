"""Game setup from a game seed: the deal, the declarer (first leader) and the declaration.

Everything is a pure function of the game seed (stable across versions, see
`eqfast.rules.deal`), so a game can be regenerated from its seed alone:

- deal: `deal_from_seed(game_seed)`
- declarer = first leader: `mix_seed(game_seed, 0xDEC1) % 4`
- declaration, by `decl_mode`:
  - "hand" (default): the declarer's choice by a simple bidding heuristic on its own hand,
    so that trump suits look like real games (long trump, doubles):
      score(pip suit s) = 2 * #tiles holding s + 3 * [holds s-s] + #doubles
      score(7, doubles trump) = 3 * #doubles;   no-trump and doubles-a-suit are never chosen
    ties go to the higher suit. The heuristic is documented, not tuned.
  - "uniform": `mix_seed(game_seed, 0xDEC2) % 10` (every declaration equally often).
  - an int 0..9: that declaration for every game.
"""
from __future__ import annotations

import numpy as np

from ..rules.deal import deal_from_seed, mix_seed
from ..rules.tables import HIGH, IS_DOUBLE, LOW, N_DECLS


def declarer_of(game_seed: int) -> int:
    return mix_seed(game_seed, 0xDEC1) % 4


def heuristic_declaration(hand) -> int:
    hand = [int(t) for t in hand]
    doubles = sum(bool(IS_DOUBLE[t]) for t in hand)
    best, best_score = 0, -1
    for s in range(7):
        holding = sum(HIGH[t] == s or LOW[t] == s for t in hand)
        score = 2 * holding + 3 * any(HIGH[t] == s and LOW[t] == s for t in hand) + doubles
        if score >= best_score:
            best, best_score = s, score
    if 3 * doubles > best_score:
        best = 7
    return best


def parse_decl_mode(decl_mode) -> str | int:
    """'hand', 'uniform' or the declaration 0..9 as an int; ValueError for anything else."""
    if decl_mode in ("hand", "uniform"):
        return decl_mode
    try:
        d = int(decl_mode)
    except (TypeError, ValueError):
        d = -1
    if not 0 <= d < N_DECLS or isinstance(decl_mode, (bool, float)):
        raise ValueError(f"decl_mode must be 'hand', 'uniform' or 0..9, got {decl_mode!r}")
    return d


def declaration_of(game_seed: int, hand, decl_mode="hand") -> int:
    mode = parse_decl_mode(decl_mode)
    if mode == "hand":
        return heuristic_declaration(hand)
    if mode == "uniform":
        return mix_seed(game_seed, 0xDEC2) % N_DECLS
    return mode


def setup_games(game_seeds, decl_mode="hand"):
    """(hands [G,4,7] int64, decl [G], leader [G]) numpy arrays for the game seeds."""
    hands = np.stack([deal_from_seed(s) for s in game_seeds]).astype(np.int64)
    leader = np.array([declarer_of(s) for s in game_seeds], np.int64)
    decl = np.array([declaration_of(s, hands[g, leader[g]], decl_mode)
                     for g, s in enumerate(game_seeds)], np.int64)
    return hands, decl, leader
