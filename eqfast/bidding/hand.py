"""The bidder's hand: parse and print "6-6,6-5,..." tile lists (docs/RULES.md "The tiles")."""
from __future__ import annotations

import re

from ..rules.tables import HAND_SIZE, tile_id, tile_name


class HandError(ValueError):
    """A hand that is not 7 distinct tiles of the double-six set."""


_TILE = re.compile(r"^([0-9])\s*[-:/]?\s*([0-9])$")


def parse_hand(text: str) -> tuple[int, ...]:
    """Tile ids (sorted) of a hand written as 7 tiles "h-l" (either pip order, "66" also
    accepted) separated by commas or spaces. HandError names the first problem."""
    if not isinstance(text, str):
        raise HandError(f"a hand is a string of 7 tiles like '6-6,6-5,...', got {text!r}")
    parts = [p for p in re.split(r"[,\s]+", text.strip()) if p]
    tiles, seen = [], {}
    for p in parts:
        m = _TILE.match(p)
        if not m:
            raise HandError(f"cannot read tile {p!r}: write each tile as two pips 0..6, "
                            "like 6-4")
        a, b = int(m.group(1)), int(m.group(2))
        if a > 6 or b > 6:
            raise HandError(f"unknown tile {p!r}: pips run from 0 to 6 (double-six set)")
        t = tile_id(a, b)
        if t in seen:
            raise HandError(f"tile {tile_name(t)} appears twice ({seen[t]!r} and {p!r})")
        seen[t] = p
        tiles.append(t)
    if len(tiles) != HAND_SIZE:
        raise HandError(f"a hand holds {HAND_SIZE} tiles, got {len(tiles)}"
                        + (f": {text!r}" if len(text) < 80 else ""))
    return tuple(sorted(tiles))


def format_hand(tiles) -> str:
    """"6-6,6-5,..." from tile ids, highest tile first."""
    return ",".join(tile_name(int(t)) for t in sorted(tiles, reverse=True))
