"""Deterministic deals from an integer seed.

Algorithm (stable across versions; do not change without bumping DEAL_VERSION):

1. Start a SplitMix64 stream at state = seed mod 2**64.
2. Fisher-Yates over the list [0, 1, ..., 27]: for i = 27 down to 1, draw x = next64(),
   j = x mod (i + 1), swap positions i and j.
3. Seat s receives positions 7s .. 7s+6 of the shuffled list, sorted by tile id.

SplitMix64 (Steele, Lea, Flood 2014): state += 0x9E3779B97F4A7C15; z = state;
z = (z ^ z>>30) * 0xBF58476D1CE4E5B9; z = (z ^ z>>27) * 0x94D049BB133111EB; z ^ z>>31.
The mod (i+1) bias is below 2**-58 and irrelevant here.
"""
from __future__ import annotations

import numpy as np

from .tables import HAND_SIZE, N_SEATS, N_TILES

DEAL_VERSION = 1
_M64 = (1 << 64) - 1


def splitmix64(state: int) -> tuple[int, int]:
    """One SplitMix64 step: returns (new_state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & _M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return state, z ^ (z >> 31)


def deal_from_seed(seed: int) -> np.ndarray:
    """The deal of `seed` as an int8 array [4, 7] of tile ids, each seat sorted."""
    state = int(seed) & _M64
    tiles = list(range(N_TILES))
    for i in range(N_TILES - 1, 0, -1):
        state, x = splitmix64(state)
        j = x % (i + 1)
        tiles[i], tiles[j] = tiles[j], tiles[i]
    hands = np.array(tiles, np.int8).reshape(N_SEATS, HAND_SIZE)
    return np.sort(hands, axis=1)


def mix_seeds(*parts) -> np.ndarray:
    """`mix_seed` element-wise over integer arrays (broadcast against each other), as int64:
    the same 63-bit values, computed in numpy uint64 arithmetic (which wraps mod 2**64)."""
    arrays = np.broadcast_arrays(*[np.asarray(p, dtype=np.int64) for p in parts])
    state = np.full(arrays[0].shape, 0x243F6A8885A308D3, np.uint64)
    golden, c1, c2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), \
        np.uint64(0x94D049BB133111EB)
    with np.errstate(over="ignore"):
        for p in arrays:
            z = (state ^ p.astype(np.uint64)) + golden          # splitmix64's state step
            z = (z ^ (z >> np.uint64(30))) * c1
            z = (z ^ (z >> np.uint64(27))) * c2
            state = z ^ (z >> np.uint64(31))                    # its output: the next state
    return (state & np.uint64((1 << 63) - 1)).astype(np.int64)


def mix_seed(*parts: int) -> int:
    """Hash integers into one 63-bit seed (SplitMix64 chain); used to derive stream keys."""
    state = 0x243F6A8885A308D3
    for p in parts:
        state, z = splitmix64(state ^ (int(p) & _M64))
        state = z
    return state & ((1 << 63) - 1)
