"""Triton `play`: every game's current player plays its chosen slot, one program per game.

Same semantics and outputs, bit for bit, as the reference `BatchedGames.play(slot)`
(eqfast/rules/batched.py): the tile leaves the hand, joins the trick and the transcript,
a follower who does not follow the led suit becomes void in it, and a fourth play closes
the trick (winner by the RANK table, 1 + the tiles' points to the winner's team, the winner
leads, the trick empties). Finished games are left as they are. The reference issues ~100
small torch ops for this; here a program reads its game's ~70 integers, applies the move
and writes the new state. The rules come from the same tables (LED_SUIT, FOLLOWS, RANK,
POINTS of eqfast/rules/tables.py), passed as tensors.

`play(games, slot)` returns a new BatchedGames (hands and decl shared, as the reference
shares them). The legality check runs as in the reference (on the host, unless inside
`host_checks_off`, e.g. CUDA-graph capture).

Naming: i_ program ids, o_ offsets, m_ masks, p_ pointers, b_ values in registers.
"""
from __future__ import annotations

from dataclasses import replace

import torch
import triton
import triton.language as tl

from eqfast.rules.batched import BatchedGames, check_legal_slots
from eqfast.rules.tables import HAND_SIZE, N_SEATS, N_SUITS, N_TILES, torch_tables

BLOCK_T = 32         # the 28 transcript entries


@triton.jit
def _play_kernel(
    slot_ptr, hands_ptr, decl_ptr, remaining_ptr, trick_ptr, n_plays_ptr, seats_ptr, tiles_ptr,
    points_ptr, voids_ptr, leader_ptr,
    led_suit_ptr, follows_ptr, rank_ptr, tile_points_ptr,
    o_remaining_ptr, o_trick_ptr, o_n_plays_ptr, o_seats_ptr, o_tiles_ptr, o_points_ptr,
    o_voids_ptr, o_leader_ptr,
    N_TILES: tl.constexpr, N_SEATS: tl.constexpr, HAND_SIZE: tl.constexpr,
    N_SUITS: tl.constexpr, BLOCK_T: tl.constexpr,
):
    i_g = tl.program_id(0).to(tl.int64)
    o_p = tl.arange(0, N_SEATS)                       # seat / trick position lanes
    b_decl = tl.load(decl_ptr + i_g)
    b_leader = tl.load(leader_ptr + i_g)
    b_n_plays = tl.load(n_plays_ptr + i_g)
    b_pos = b_n_plays % N_SEATS                       # plays in the current trick so far
    b_seat = (b_leader + b_pos) % N_SEATS             # the current player
    b_remaining = tl.load(remaining_ptr + i_g * N_SEATS + o_p)
    b_live = ~((tl.max(b_remaining, axis=0) == 0) & (b_pos == 0))   # not finished

    b_slot = tl.load(slot_ptr + i_g)
    b_slot_c = tl.minimum(tl.maximum(b_slot, 0), HAND_SIZE - 1)
    b_tile = tl.load(hands_ptr + (i_g * N_SEATS + b_seat) * HAND_SIZE + b_slot_c)
    b_tile_c = tl.maximum(b_tile, 0)

    # the tile leaves the hand and joins the trick
    m_me = (o_p == b_seat) & b_live
    b_remaining = tl.where(m_me, b_remaining & ~(1 << tl.maximum(b_slot, 0)), b_remaining)
    b_trick = tl.load(trick_ptr + i_g * N_SEATS + o_p)
    b_trick = tl.where((o_p == b_pos) & b_live, b_tile, b_trick)

    # and the transcript (entry min(n_plays, 27))
    o_m = tl.arange(0, BLOCK_T)
    m_m = o_m < N_TILES
    b_seats = tl.load(seats_ptr + i_g * N_TILES + o_m, mask=m_m, other=-1)
    b_tiles = tl.load(tiles_ptr + i_g * N_TILES + o_m, mask=m_m, other=-1)
    m_here = (o_m == tl.minimum(b_n_plays, N_TILES - 1)) & b_live
    tl.store(o_seats_ptr + i_g * N_TILES + o_m, tl.where(m_here, b_seat, b_seats), mask=m_m)
    tl.store(o_tiles_ptr + i_g * N_TILES + o_m, tl.where(m_here, b_tile, b_tiles), mask=m_m)

    # void inference: a follower who does not follow the led suit is void in it
    b_lead = tl.sum(tl.where(o_p == 0, b_trick, 0), axis=0)
    b_led = tl.load(led_suit_ptr + b_decl * N_TILES + tl.maximum(b_lead, 0))
    b_followed = tl.load(follows_ptr + (b_decl * N_SUITS + b_led) * N_TILES + b_tile_c) != 0
    b_new_void = b_live & (b_pos > 0) & ~b_followed
    b_voids = tl.load(voids_ptr + i_g * N_SEATS + o_p)
    b_voids = tl.where((o_p == b_seat) & b_new_void, b_voids | (1 << b_led), b_voids)

    # trick completion, computed always and applied where the fourth tile was played
    b_done = b_live & (b_pos == N_SEATS - 1)
    b_trick_c = tl.maximum(b_trick, 0)
    b_rank = tl.load(rank_ptr + (b_decl * N_SUITS + b_led) * N_TILES + b_trick_c)
    b_best = tl.argmax(b_rank, axis=0, tie_break_left=True)
    b_winner = (b_leader + b_best) % N_SEATS
    b_pts = 1 + tl.sum(tl.load(tile_points_ptr + b_trick_c), axis=0)
    b_points = tl.load(points_ptr + i_g * 2 + o_p, mask=o_p < 2, other=0)
    b_points = tl.where((o_p == b_winner % 2) & b_done, b_points + b_pts, b_points)

    tl.store(o_remaining_ptr + i_g * N_SEATS + o_p, b_remaining)
    tl.store(o_trick_ptr + i_g * N_SEATS + o_p, tl.where(b_done, -1, b_trick))
    tl.store(o_n_plays_ptr + i_g, b_n_plays + b_live.to(tl.int64))
    tl.store(o_points_ptr + i_g * 2 + o_p, b_points, mask=o_p < 2)
    tl.store(o_voids_ptr + i_g * N_SEATS + o_p, b_voids)
    tl.store(o_leader_ptr + i_g, tl.where(b_done, b_winner, b_leader))


def _empty_state(games: BatchedGames) -> dict[str, torch.Tensor]:
    # one allocation point, so the tests can poison what the kernel must overwrite
    return {name: torch.empty_like(getattr(games, name))
            for name in ("remaining", "trick", "n_plays", "seats", "tiles", "points", "voids",
                         "leader")}


def play(games: BatchedGames, slot: torch.Tensor) -> BatchedGames:
    """`games.play(slot)`, one program per game; equal to the reference bit for bit."""
    slot = torch.as_tensor(slot, dtype=torch.int64, device=games.device)
    if tuple(slot.shape) != (games.batch_size,):
        raise ValueError(f"slot must be [B] = [{games.batch_size}], got {tuple(slot.shape)}")
    check_legal_slots(games, slot)
    out = _empty_state(games)
    if games.batch_size > 0:
        T = torch_tables(games.device)
        _play_kernel[(games.batch_size,)](
            slot.contiguous(), games.hands.contiguous(), games.decl.contiguous(),
            games.remaining.contiguous(), games.trick.contiguous(), games.n_plays.contiguous(),
            games.seats.contiguous(), games.tiles.contiguous(), games.points.contiguous(),
            games.voids.contiguous(), games.leader.contiguous(),
            T["LED_SUIT"], T["FOLLOWS"], T["RANK"], T["POINTS"],
            out["remaining"], out["trick"], out["n_plays"], out["seats"], out["tiles"],
            out["points"], out["voids"], out["leader"],
            N_TILES=N_TILES, N_SEATS=N_SEATS, HAND_SIZE=HAND_SIZE, N_SUITS=N_SUITS,
            BLOCK_T=BLOCK_T, num_warps=1,
        )
    return replace(games, **out)
