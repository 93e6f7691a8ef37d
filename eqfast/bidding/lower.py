"""The lower bracket: completions played out by the E[Q] player on every seat.

Each seat, at each of its 7 decisions, samples worlds consistent with what *it* knows (its
own hand, the public transcript, the voids it revealed: `eqfast.engine.public.hidden_info`
of the acting seat), asks the oracle for Q of its legal moves in each world and plays the
move of highest E[Q] (greedy, no exploration). No seat ever sees another seat's hand, so the
play is imperfect-information play and its make rate has no clairvoyance in it.

It is a bracket, not a bound: the opponents also play without clairvoyance, and the E[Q]
player is not optimal, so a hand can score more here than with perfect play on some deals.
The gap p_upper - p_lower measures how much of p_upper depends on knowing the hidden hands.
"""
from __future__ import annotations

import numpy as np
import torch

from ..engine.pipeline import N_DECISIONS, Engine, EngineConfig
from ..rules.batched import BatchedGames
from .values import BIDDER


def lower_engine(oracle, n_worlds: int = 32, seed: int = 0, backend: str = "reference") -> Engine:
    """An E[Q] engine for playouts: uniform world weights, greedy move choice."""
    return Engine(oracle, EngineConfig(n_samples=n_worlds, seed=seed), backend=backend)


def game_seeds(n: int, contracts, start: int = 0) -> np.ndarray:
    """Engine game seeds of completion i under contract c (the keys of the worlds each seat
    draws): distinct per (i, c), the same for every run of the same seed."""
    i = np.arange(start, start + n)
    return (i[None, :] * 16 + np.asarray(contracts)[:, None]).reshape(-1)


def play_out(engine: Engine, completions: np.ndarray, contracts, start: int = 0,
             games_per_batch: int = 256, progress=None) -> np.ndarray:
    """Bidder team points [n, C] when the E[Q] engine plays every seat of completion
    start+j under contract c; rows contract-major inside the engine. progress(done, total)
    is called after each trick, with the games played so far (whole games' worth)."""
    n, C = len(completions), len(contracts)
    hands = np.tile(completions.astype(np.int64), (C, 1, 1))
    decl = np.repeat(np.asarray(contracts, dtype=np.int64), n)
    seeds = game_seeds(n, contracts, start)
    points = np.empty(C * n, np.int64)
    for s in range(0, C * n, games_per_batch):
        sl = slice(s, s + games_per_batch)
        games = BatchedGames.new(hands[sl], decl[sl], BIDDER)
        batch_seeds = [int(x) for x in seeds[sl]]
        idx = torch.as_tensor(seeds[sl])
        with torch.no_grad():
            for d in range(N_DECISIONS):
                _, slot = engine.decide(games, batch_seeds, d, idx)
                games = engine.backend.play(games, slot)
                if progress is not None and d % 4 == 3:       # after each trick
                    progress(s + len(batch_seeds) * (d + 1) // N_DECISIONS, C * n)
        points[sl] = games.points[:, BIDDER % 2].cpu().numpy()
    return points.reshape(C, n).T
