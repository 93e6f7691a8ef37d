"""Texas 42 play rules as small lookup tables, built once at import.

Every rule check in eqfast (Python game state, batched torch state, the C solver, the
oracle tokenizer, the Triton kernels) is a lookup into these arrays, so there is one
source of truth. `docs/RULES.md` states the rules in words; this module is their
executable form.

Numbering
---------
Tile id t = high*(high+1)/2 + low, 0 <= low <= high <= 6::

      low→  0  1  2  3  4  5  6
    high 0  0
         1  1  2
         2  3  4  5
         3  6  7  8  9
         4 10 11 12 13 14
         5 15 16 17 18 19 20
         6 21 22 23 24 25 26 27

Declarations (decl id): 0..6 pip trump, 7 doubles trump, 8 doubles as a suit (no trump
power), 9 no trump.

Suits (the "led suit" index, 0..7): 0..6 are pip suits, 7 (CALLED) is the called suit of
the declaration (the pip suit for 0..6, the doubles for 7 and 8; never led under 9).

Rank keys: RANK[d, led, t] = tier*16 + order. Tier 2 is trump (called suit under 0..7),
tier 1 follows the led suit, tier 0 cannot win. Keys of tiers 1 and 2 never tie, so the
trick winner is the argmax of the four keys.
"""
from __future__ import annotations

import functools

import numpy as np

N_TILES = 28
N_DECLS = 10
N_SUITS = 8  # 7 pip suits + the called suit
CALLED = 7
N_SEATS = 4
HAND_SIZE = 7
N_TRICKS = 7
TOTAL_POINTS = 42

DECL_NAMES = (
    "blanks", "ones", "twos", "threes", "fours", "fives", "sixes",
    "doubles-trump", "doubles-suit", "no-trump",
)
SUIT_NAMES = ("blanks", "ones", "twos", "threes", "fours", "fives", "sixes", "called")


def _build_tile_tables():
    high = np.zeros(N_TILES, np.int8)
    low = np.zeros(N_TILES, np.int8)
    for h in range(7):
        for l in range(h + 1):
            t = h * (h + 1) // 2 + l
            high[t], low[t] = h, l
    return high, low


HIGH, LOW = _build_tile_tables()
IS_DOUBLE = HIGH == LOW
PIP_SUM = (HIGH + LOW).astype(np.int8)
#: Count points of each tile: 5-5 and 6-4 are 10, 5-0, 4-1 and 3-2 are 5.
POINTS = np.zeros(N_TILES, np.int8)
for _h, _l, _p in ((5, 5, 10), (6, 4, 10), (5, 0, 5), (4, 1, 5), (3, 2, 5)):
    POINTS[_h * (_h + 1) // 2 + _l] = _p
assert POINTS.sum() == 35

#: TILE_ID[h, l] for h >= l (and symmetric), -1 never occurs.
TILE_ID = np.zeros((7, 7), np.int8)
for _t in range(N_TILES):
    TILE_ID[HIGH[_t], LOW[_t]] = _t
    TILE_ID[LOW[_t], HIGH[_t]] = _t


def tile_id(high: int, low: int) -> int:
    """Tile id of the tile with pips (high, low), in either order."""
    if not (0 <= high <= 6 and 0 <= low <= 6):
        raise ValueError(f"pips must be 0..6, got ({high}, {low})")
    return int(TILE_ID[high, low])


def tile_name(t: int) -> str:
    """'6-4' style name of a tile id."""
    return f"{HIGH[t]}-{LOW[t]}"


def _has_pip(t: int, pip: int) -> bool:
    return HIGH[t] == pip or LOW[t] == pip


def _build_decl_tables():
    # IN_CALLED[d, t]: tile t belongs to the called suit of declaration d.
    in_called = np.zeros((N_DECLS, N_TILES), bool)
    for d in range(N_DECLS):
        for t in range(N_TILES):
            if d <= 6:
                in_called[d, t] = _has_pip(t, d)
            elif d in (7, 8):
                in_called[d, t] = IS_DOUBLE[t]
    # LED_SUIT[d, t]: the suit led when t opens a trick.
    led_suit = np.where(in_called, CALLED, HIGH[None, :]).astype(np.int8)
    # FOLLOWS[d, s, t]: tile t follows led suit s (a player holding one must play one).
    follows = np.zeros((N_DECLS, N_SUITS, N_TILES), bool)
    for d in range(N_DECLS):
        for s in range(N_SUITS):
            for t in range(N_TILES):
                if s == CALLED:
                    follows[d, s, t] = in_called[d, t]
                else:
                    follows[d, s, t] = _has_pip(t, s) and not in_called[d, t]
    # RANK[d, s, t]: tier*16 + order within the tier; the argmax wins the trick.
    rank = np.zeros((N_DECLS, N_SUITS, N_TILES), np.int8)
    for d in range(N_DECLS):
        trump_power = d <= 7
        for s in range(N_SUITS):
            for t in range(N_TILES):
                if trump_power and in_called[d, t]:
                    tier = 2
                    # doubles trump: by pip value; pip trump: double highest, then pip sum
                    order = HIGH[t] if d == 7 else (15 if IS_DOUBLE[t] else PIP_SUM[t])
                elif follows[d, s, t]:
                    tier = 1
                    if s == CALLED:  # only reachable for decl 8: led doubles by pip value
                        order = HIGH[t]
                    else:
                        order = 15 if IS_DOUBLE[t] else PIP_SUM[t]
                else:
                    tier, order = 0, 0
                rank[d, s, t] = tier * 16 + order
    return in_called, led_suit, follows, rank


IN_CALLED, LED_SUIT, FOLLOWS, RANK = _build_decl_tables()

#: Tiles of each (decl, suit) as a 28-bit mask: the C solver and the kernels use these.
FOLLOW_MASK = (FOLLOWS.astype(np.int64) << np.arange(N_TILES, dtype=np.int64)).sum(-1)


def _check_tables():
    # Within each (decl, led suit), the winning keys (tier >= 1) are distinct.
    for d in range(N_DECLS):
        for s in range(N_SUITS):
            keys = RANK[d, s][RANK[d, s] >= 16]
            assert len(set(keys.tolist())) == len(keys), (d, s)
    # Every tile follows exactly one suit (its own led suit) among those it can lead.
    for d in range(N_DECLS):
        for t in range(N_TILES):
            assert FOLLOWS[d, LED_SUIT[d, t], t]


_check_tables()


def mask_of(tiles) -> int:
    """28-bit mask of an iterable of tile ids."""
    m = 0
    for t in tiles:
        m |= 1 << int(t)
    return m


def tiles_of(mask: int) -> list[int]:
    """Sorted tile ids of a 28-bit mask."""
    return [t for t in range(N_TILES) if mask >> t & 1]


@functools.lru_cache(maxsize=None)
def _torch_tables(device: str):
    import torch

    dev = torch.device(device)
    as_t = lambda a, dt: torch.as_tensor(np.ascontiguousarray(a), dtype=dt, device=dev)
    return {
        "HIGH": as_t(HIGH, torch.int64),
        "LOW": as_t(LOW, torch.int64),
        "IS_DOUBLE": as_t(IS_DOUBLE, torch.bool),
        "POINTS": as_t(POINTS, torch.int64),
        "IN_CALLED": as_t(IN_CALLED, torch.bool),
        "LED_SUIT": as_t(LED_SUIT, torch.int64),
        "FOLLOWS": as_t(FOLLOWS, torch.bool),
        "RANK": as_t(RANK, torch.int64),
        "FOLLOW_MASK": as_t(FOLLOW_MASK, torch.int64),
    }


def torch_tables(device="cpu") -> dict:
    """The same tables as torch tensors on `device` (cached per device; do not mutate)."""
    import torch

    return _torch_tables(str(torch.device(device)))
