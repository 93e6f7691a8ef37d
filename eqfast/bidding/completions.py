"""Completion models: distributions over the deals consistent with the bidder's hand.

Every probability the bidding evaluator reports is P_M(make) for a named model M ("P(make)"
is undefined without one), so each model carries a label that goes into every
output.

Completion i of a run is a pure function of (seed, i): growing N (sequential stopping)
keeps the first completions, and every contract is scored on the same completions (common
random numbers: contract comparisons are paired, so their differences have far less noise
than independent samples would give).
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from ..rules.deal import mix_seeds
from ..rules.tables import HAND_SIZE, N_SEATS, N_TILES

#: keeps completion draws apart from other uses of mix_seeds with the same seed
STREAM_COMPLETIONS = 0xB1D0


class CompletionModel(Protocol):
    label: str

    def sample(self, hand, seed: int, start: int, stop: int) -> np.ndarray:
        """Completions start..stop-1: int8 [stop-start, 4, 7], seat 0 = the bidder's hand,
        every seat sorted by tile id."""
        ...


class UniformCompletions:
    """The uniform model (label M1): every partition of the 21 hidden tiles into three hands of 7 is
    equally likely (the bidder opens; no auction evidence shapes the hidden hands)."""

    label = "uniform_consistent"

    def sample(self, hand, seed: int, start: int, stop: int) -> np.ndarray:
        hand = np.sort(np.asarray(hand, dtype=np.int64))
        hidden = np.setdiff1d(np.arange(N_TILES), hand)
        n = max(0, stop - start)
        keys = mix_seeds(seed, STREAM_COMPLETIONS, np.arange(start, start + n))
        # 21 independent 63-bit draws per completion; their ranks are a uniform random
        # permutation (a tie has probability ~2^-55 and would only break by position)
        u = mix_seeds(keys[:, None], np.arange(len(hidden))[None, :])
        shuffled = hidden[np.argsort(u, axis=1, kind="stable")]
        out = np.empty((n, N_SEATS, HAND_SIZE), dtype=np.int8)
        out[:, 0] = hand
        out[:, 1:] = np.sort(shuffled.reshape(n, N_SEATS - 1, HAND_SIZE), axis=2)
        return out


MODELS = {UniformCompletions.label: UniformCompletions}


def completion_model(name: str) -> CompletionModel:
    """The completion model called `name` (see MODELS)."""
    try:
        return MODELS[name]()
    except KeyError:
        raise ValueError(f"unknown completion model {name!r} "
                         f"(known: {', '.join(sorted(MODELS))})") from None
