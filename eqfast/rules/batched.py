"""Many games at once as torch tensors (any device): the batched twin of `GameState`.

Layout (B games; "slot" = index into a seat's initial hand, sorted by tile id):

    hands     [B, 4, 7] int64  initial hands; -1 pads slots of shortened hands (at the end)
    remaining [B, 4]    int64  7-bit masks of slots still in hand
    decl      [B]       int64
    leader    [B]       int64  leader of the current trick
    trick     [B, 4]    int64  tile ids of the current trick in play order, -1 padded
    n_plays   [B]       int64  plays so far (the current trick has n_plays % 4 of them)
    seats     [B, 28]   int64  seat of play i, -1 padded   (the public transcript)
    tiles     [B, 28]   int64  tile of play i, -1 padded
    points    [B, 2]    int64  points won so far by team 0 / team 1
    voids     [B, 4]    int64  8-bit masks of suits (0..6 pip, 7 called) each seat is void in

`play(slot)` is functional (returns a new object) and a no-op for finished games.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np
import torch

from ..utils.checks import host_checks
from .tables import HAND_SIZE, N_SEATS, N_TILES, torch_tables



@dataclass(frozen=True)
class BatchedGames:
    hands: torch.Tensor
    remaining: torch.Tensor
    decl: torch.Tensor
    leader: torch.Tensor
    trick: torch.Tensor
    n_plays: torch.Tensor
    seats: torch.Tensor
    tiles: torch.Tensor
    points: torch.Tensor
    voids: torch.Tensor

    # ------------------------------------------------------------------ construction
    @staticmethod
    def new(hands, decl, leader, device="cpu") -> "BatchedGames":
        """Games at their start. hands [B,4,k] (k <= 7, each seat sorted), decl/leader [B]."""
        hands = torch.as_tensor(np.asarray(hands), dtype=torch.int64, device=device)
        if hands.dim() != 3 or hands.shape[1] != N_SEATS or not 1 <= hands.shape[2] <= HAND_SIZE:
            raise ValueError(f"hands must be [B, 4, k<=7], got {tuple(hands.shape)}")
        B, _, k = hands.shape
        if bool(((hands < 0) | (hands >= N_TILES)).any()):
            raise ValueError("hands must hold tile ids 0..27 (pass shortened hands unpadded)")
        hands, _ = torch.sort(hands, dim=-1)
        if k < HAND_SIZE:
            pad = torch.full((B, N_SEATS, HAND_SIZE - k), -1, dtype=torch.int64, device=device)
            hands = torch.cat([hands, pad], dim=-1)
        dev = hands.device
        as_b = lambda x: torch.as_tensor(x, dtype=torch.int64, device=dev).expand(B).clone()
        return BatchedGames(
            hands=hands,
            remaining=torch.full((B, N_SEATS), (1 << k) - 1, dtype=torch.int64, device=dev),
            decl=as_b(decl), leader=as_b(leader),
            trick=torch.full((B, N_SEATS), -1, dtype=torch.int64, device=dev),
            n_plays=torch.zeros(B, dtype=torch.int64, device=dev),
            seats=torch.full((B, N_TILES), -1, dtype=torch.int64, device=dev),
            tiles=torch.full((B, N_TILES), -1, dtype=torch.int64, device=dev),
            points=torch.zeros(B, 2, dtype=torch.int64, device=dev),
            voids=torch.zeros(B, N_SEATS, dtype=torch.int64, device=dev),
        )

    # ------------------------------------------------------------------ queries
    @property
    def batch_size(self) -> int:
        return self.hands.shape[0]

    @property
    def device(self) -> torch.device:
        return self.hands.device

    @property
    def trick_len(self) -> torch.Tensor:
        return self.n_plays % N_SEATS

    @property
    def current_player(self) -> torch.Tensor:
        return (self.leader + self.trick_len) % N_SEATS

    @property
    def is_over(self) -> torch.Tensor:
        return (self.remaining == 0).all(dim=1) & (self.trick_len == 0)

    def select(self, index) -> "BatchedGames":
        """Games `index` (a slice, bool mask or index tensor) as a new batch."""
        return BatchedGames(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def _rows(self):
        return torch.arange(self.batch_size, device=self.device)

    def hand_slots(self, seat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(tiles [B,7], in_hand [B,7] bool) of `seat`'s initial hand."""
        rows = self._rows()
        tiles = self.hands[rows, seat]
        bits = (self.remaining[rows, seat, None] >> torch.arange(HAND_SIZE, device=self.device)) & 1
        return tiles, bits.bool()

    def led_suit(self) -> torch.Tensor:
        """Led suit [B] (0..7), -1 where the current player leads."""
        T = torch_tables(self.device)
        lead = self.trick[:, 0]
        led = T["LED_SUIT"][self.decl, lead.clamp(min=0)]
        return torch.where(lead >= 0, led, torch.full_like(led, -1))

    def legal_mask(self) -> torch.Tensor:
        """Legal slots [B,7] of the current player (all False for finished games)."""
        T = torch_tables(self.device)
        tiles, in_hand = self.hand_slots(self.current_player)
        led = self.led_suit()
        follows = T["FOLLOWS"][self.decl[:, None], led.clamp(min=0)[:, None], tiles.clamp(min=0)]
        follows = follows & in_hand & (led >= 0)[:, None]
        must_follow = follows.any(dim=1, keepdim=True)
        return torch.where(must_follow, follows, in_hand)

    # ------------------------------------------------------------------ transition
    def play(self, slot: torch.Tensor) -> "BatchedGames":
        """Each unfinished game's current player plays `slot` [B] (must be legal)."""
        T = torch_tables(self.device)
        rows = self._rows()
        slot = torch.as_tensor(slot, dtype=torch.int64, device=self.device)
        live = ~self.is_over
        check_legal_slots(self, slot)
        seat = self.current_player
        tile = self.hands[rows, seat, slot.clamp(0, HAND_SIZE - 1)]
        pos = self.trick_len

        remaining = self.remaining.clone()
        remaining[rows, seat] = torch.where(live, remaining[rows, seat] & ~(1 << slot.clamp(min=0)),
                                            remaining[rows, seat])
        trick = self.trick.clone()
        trick[rows, pos] = torch.where(live, tile, trick[rows, pos])
        idx = self.n_plays.clamp(max=N_TILES - 1)
        seats, tiles = self.seats.clone(), self.tiles.clone()
        seats[rows, idx] = torch.where(live, seat, seats[rows, idx])
        tiles[rows, idx] = torch.where(live, tile, tiles[rows, idx])

        # void inference: a follower who does not follow the led suit is void in it
        lead = trick[:, 0]
        led = T["LED_SUIT"][self.decl, lead.clamp(min=0)]
        followed = T["FOLLOWS"][self.decl, led, tile.clamp(min=0)]
        new_void = live & (pos > 0) & ~followed
        voids = self.voids.clone()
        voids[rows, seat] = torch.where(new_void, voids[rows, seat] | (1 << led), voids[rows, seat])

        n_plays = self.n_plays + live.long()
        leader, points = self.leader, self.points
        done = live & (pos == N_SEATS - 1)
        # trick completion, computed for every game and applied where the trick is done
        # (branch-free: a host test of `done.any()` would synchronize the device every play)
        keys = T["RANK"][self.decl[:, None], led[:, None], trick.clamp(min=0)]
        winner = (self.leader + keys.argmax(dim=1)) % N_SEATS
        pts = 1 + T["POINTS"][trick.clamp(min=0)].sum(dim=1)
        points = points.clone()
        points[rows, winner % 2] += torch.where(done, pts, torch.zeros_like(pts))
        leader = torch.where(done, winner, leader)
        trick = torch.where(done[:, None], torch.full_like(trick, -1), trick)
        return replace(self, remaining=remaining, trick=trick, n_plays=n_plays, seats=seats,
                       tiles=tiles, points=points, voids=voids, leader=leader)

    def play_tile(self, tile: torch.Tensor) -> "BatchedGames":
        """Like `play`, naming tile ids [B] instead of slots."""
        tile = torch.as_tensor(tile, dtype=torch.int64, device=self.device)
        seat_hand = self.hands[self._rows(), self.current_player]
        match = seat_hand == tile[:, None]
        live = ~self.is_over
        if bool((live & ~match.any(dim=1)).any()):
            bad = int(torch.nonzero(live & ~match.any(dim=1))[0])
            raise ValueError(f"game {bad}: tile {int(tile[bad])} is not in the current hand")
        return self.play(match.long().argmax(dim=1))

    def score(self) -> torch.Tensor:
        """Team 0 points minus team 1 points so far [B]."""
        return self.points[:, 0] - self.points[:, 1]


def check_legal_slots(games: BatchedGames, slot: torch.Tensor) -> None:
    """Raise unless every unfinished game's `slot` [B] is legal for its current player; a
    host read, skipped under `host_checks_off` (shared by `play` and the Triton kernel)."""
    if not host_checks():
        return
    rows = games._rows()
    legal = games.legal_mask()
    ok = legal[rows, slot.clamp(0, HAND_SIZE - 1)] & (slot >= 0) & (slot < HAND_SIZE)
    bad = ~games.is_over & ~ok
    if bool(bad.any()):
        g = int(torch.nonzero(bad)[0])
        raise ValueError(f"game {g}: slot {int(slot[g])} is not legal "
                         f"(legal mask {legal[g].int().tolist()})")
