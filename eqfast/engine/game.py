"""One game from a deal the caller gives: `generate_eq_game(oracle, hands, decl, n_samples)`.

The commands play deals drawn from game seeds (eqfast/engine/games.py); a researcher who
wants the records of one particular deal (a hand from a real game, a constructed problem)
calls this instead. It runs the reference Engine (the same code path as eqfast-generate's
CPU pipeline) on that one deal and returns its 28 decision records (dataset schema,
docs/DATASET.md), ordered by decision, invariants checked.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..data.schema import DecisionRecords, require_invariants
from ..rules.tables import HAND_SIZE, N_DECLS, N_SEATS, N_TILES
from .policy import ExplorationConfig
from .posterior import PosteriorConfig


def _check_deal(hands, decl: int, leader: int) -> np.ndarray:
    """hands as a sorted [4, 7] int64 array; ValueError naming the problem."""
    try:
        arr = np.asarray(hands, dtype=np.int64)
    except (TypeError, ValueError):
        raise ValueError(f"hands must be 4 lists of {HAND_SIZE} tile ids, got {hands!r}") \
            from None
    if arr.shape != (N_SEATS, HAND_SIZE):
        raise ValueError(f"hands must be 4 lists of {HAND_SIZE} tile ids (shape "
                         f"{(N_SEATS, HAND_SIZE)}), got shape {arr.shape}")
    if ((arr < 0) | (arr >= N_TILES)).any():
        bad = sorted(set(arr[(arr < 0) | (arr >= N_TILES)].tolist()))
        raise ValueError(f"tile ids run 0..{N_TILES - 1}, got {bad}")
    if len(set(arr.ravel().tolist())) != N_TILES:
        dup = sorted(t for t in set(arr.ravel().tolist()) if (arr == t).sum() > 1)
        raise ValueError(f"the four hands must hold the 28 tiles once each; repeated: {dup}")
    if not 0 <= int(decl) < N_DECLS:
        raise ValueError(f"decl must be 0..{N_DECLS - 1}, got {decl}")
    if not 0 <= int(leader) < N_SEATS:
        raise ValueError(f"leader (the declarer's seat) must be 0..3, got {leader}")
    return np.sort(arr, axis=1)


def generate_eq_game(oracle, hands: Sequence[Sequence[int]], decl: int, n_samples: int = 100,
                     *, leader: int = 0, game_seed: int = 0, seed: int = 0,
                     posterior: PosteriorConfig | None = None,
                     exploration: ExplorationConfig | None = None,
                     device="cpu") -> DecisionRecords:
    """The 28 decision records of one game on the deal `hands` (4 lists of 7 tile ids,
    seat 0 first; ids as in docs/RULES.md), declaration `decl` (0..9) and first leader
    `leader` (the declarer's seat), each decision labelled with N = `n_samples` worlds.

    oracle: an oracle object (eqfast.oracle) or a spec string ('default', 'accurate',
    'exact', a weights path). game_seed and seed key the world and policy draws (the same
    values give the same records); posterior / exploration as in EngineConfig (None:
    uniform weights, greedy play). ValueError names a bad deal or setting."""
    from ..engine.factory import build_engine
    from ..engine.pipeline import EngineConfig
    from ..oracle.factory import oracle_from_spec

    arr = _check_deal(hands, decl, leader)
    if isinstance(oracle, str):
        oracle, _ = oracle_from_spec(oracle, device)
    cfg = EngineConfig(n_samples=int(n_samples), seed=int(seed), posterior=posterior,
                       exploration=exploration or ExplorationConfig())
    engine = build_engine(oracle, cfg, pipeline="reference", device=device)
    deals = (arr[None], np.array([int(decl)]), np.array([int(leader)]))
    records = engine.play([int(game_seed)], deals=deals)
    return require_invariants(records, [int(game_seed)])


__all__ = ["generate_eq_game"]
