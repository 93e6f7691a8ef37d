"""An immutable single-hand game state: the pure play rules (state in, state out).

Hands hold the *remaining* tiles of each seat. A state may start with shortened hands
(every seat the same k <= 7 tiles, empty trick) so endgames can be set up directly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .tables import CALLED, FOLLOWS, LED_SUIT, N_DECLS, N_SEATS, N_TILES, POINTS, RANK


def trick_winner(decl: int, leader: int, tiles: Sequence[int]) -> int:
    """Seat that wins a complete trick of 4 `tiles` played in order from `leader`."""
    led = LED_SUIT[decl, tiles[0]]
    keys = [int(RANK[decl, led, t]) for t in tiles]
    return (leader + keys.index(max(keys))) % N_SEATS


def trick_points(tiles: Sequence[int]) -> int:
    """Points a trick is worth: 1 + the count of its tiles."""
    return 1 + sum(int(POINTS[t]) for t in tiles)


def legal_tiles(hand: Sequence[int], decl: int, lead_tile: int | None) -> list[int]:
    """Legal tiles from `hand` when the trick was opened by `lead_tile` (None: leading)."""
    if lead_tile is None:
        return sorted(hand)
    led = LED_SUIT[decl, lead_tile]
    follow = [t for t in hand if FOLLOWS[decl, led, t]]
    return sorted(follow) if follow else sorted(hand)


@dataclass(frozen=True)
class GameState:
    hands: tuple[tuple[int, ...], ...]  # remaining tiles per seat, sorted
    decl: int
    leader: int  # leader of the current trick
    trick: tuple[int, ...] = ()  # tiles of the current trick, in play order
    plays: tuple[tuple[int, int], ...] = ()  # (seat, tile) of every play so far
    points: tuple[int, int] = (0, 0)  # points won so far by team 0 and team 1

    @staticmethod
    def new(hands, decl: int, leader: int = 0) -> "GameState":
        """Start of play from `hands` (4 seats of k tiles each, disjoint)."""
        hands = tuple(tuple(sorted(int(t) for t in h)) for h in hands)
        if len(hands) != N_SEATS:
            raise ValueError(f"need 4 hands, got {len(hands)}")
        sizes = {len(h) for h in hands}
        if len(sizes) != 1 or not 1 <= sizes.pop() <= 7:
            raise ValueError(f"hands must have equal sizes 1..7, got {[len(h) for h in hands]}")
        flat = [t for h in hands for t in h]
        if any(not 0 <= t < N_TILES for t in flat):
            raise ValueError(f"unknown tile id in {flat}")
        if len(set(flat)) != len(flat):
            raise ValueError(f"duplicate tile in {flat}")
        if not 0 <= decl < N_DECLS:
            raise ValueError(f"decl must be 0..9, got {decl}")
        if not 0 <= leader < N_SEATS:
            raise ValueError(f"leader must be 0..3, got {leader}")
        return GameState(hands, int(decl), int(leader))

    @property
    def current_player(self) -> int:
        return (self.leader + len(self.trick)) % N_SEATS

    @property
    def is_over(self) -> bool:
        return not self.trick and not any(self.hands)

    @property
    def led_suit(self) -> int | None:
        """Suit led in the current trick (0..6 pip, 7 called), None when leading."""
        return int(LED_SUIT[self.decl, self.trick[0]]) if self.trick else None

    @property
    def score(self) -> int:
        """Team 0 points minus team 1 points so far."""
        return self.points[0] - self.points[1]

    def legal_moves(self) -> list[int]:
        if self.is_over:
            return []
        return legal_tiles(self.hands[self.current_player], self.decl,
                           self.trick[0] if self.trick else None)

    def play(self, tile: int) -> "GameState":
        seat = self.current_player
        if tile not in self.legal_moves():
            raise ValueError(f"tile {tile} is not legal for seat {seat}: {self.legal_moves()}")
        hands = list(self.hands)
        hands[seat] = tuple(t for t in hands[seat] if t != tile)
        trick = self.trick + (int(tile),)
        plays = self.plays + ((seat, int(tile)),)
        leader, points = self.leader, self.points
        if len(trick) == N_SEATS:
            winner = trick_winner(self.decl, self.leader, trick)
            pts = list(points)
            pts[winner % 2] += trick_points(trick)
            leader, points, trick = winner, (pts[0], pts[1]), ()
        return GameState(tuple(hands), self.decl, leader, trick, plays, points)

    def voids(self) -> list[set[int]]:
        """Suits (0..7) each seat has shown void in, from failed follows in `plays`."""
        void = [set() for _ in range(N_SEATS)]
        for i in range(0, len(self.plays), 1):
            start = i - i % N_SEATS
            lead_tile = self.plays[start][1]
            seat, tile = self.plays[i]
            led = int(LED_SUIT[self.decl, lead_tile])
            if i != start and not FOLLOWS[self.decl, led, tile]:
                void[seat].add(led)
        return void


__all__ = ["GameState", "trick_winner", "trick_points", "legal_tiles", "CALLED"]
