"""Triton `hidden_info`: what the acting seat knows about the hidden hands, one program per
decision.

Same signature and outputs, bit for bit, as the reference
`eqfast.engine.public.hidden_info(games) -> HiddenInfo` (read its module doc for the
fields). The reference builds them from 28-bit tile masks in ~120 small torch ops per
decision step; here one program per game keeps the 28 tiles in the lanes of one block:

    dealt[t]  tile t is in one of the four initial hands       (a [32 x 32] compare)
    own[t]    tile t is in a remaining slot of the actor's hand
    played[t] tile t is in the transcript
    hidden    = dealt & ~played & ~own; its pool index = exclusive prefix count (tl.cumsum)
    allowed   bit j set unless hidden seat j is void in a suit that tile t follows
              (FOLLOW_MASK[decl, suit] rows of the rules tables, one [8 x 32] block)

Naming: i_ program ids, o_ offsets, m_ masks, p_ pointers, b_ values in registers.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from eqfast.contracts import MAX_POOL, N_HIDDEN, HiddenInfo, check_hidden_sizes
from eqfast.rules.batched import BatchedGames
from eqfast.rules.tables import HAND_SIZE, N_SEATS, N_SUITS, N_TILES, torch_tables

BLOCK_T = 32         # the 28 tiles (and the 28 hand slots, and the 21 pool positions)
BLOCK_SUIT = 8


@triton.jit
def _actor(leader_ptr, n_plays_ptr, i_g, N_SEATS: tl.constexpr):
    """The seat to act: (leader + plays in the current trick) % 4."""
    return (tl.load(leader_ptr + i_g) + tl.load(n_plays_ptr + i_g) % N_SEATS) % N_SEATS


@triton.jit
def _hand_tiles(hands_ptr, remaining_ptr, i_g, b_actor, o_t,
                N_SEATS: tl.constexpr, HAND_SIZE: tl.constexpr, N_TILES: tl.constexpr):
    """(dealt[t], own[t]) over tile lanes o_t: t in any initial hand; t in a remaining slot
    of the actor's hand. Hand entries (4 x 7, -1 padded) go down the rows of a 2-D block."""
    o_j = tl.arange(0, 32)                                   # hand entry = seat * 7 + slot
    m_j = o_j < N_SEATS * HAND_SIZE
    b_tile = tl.load(hands_ptr + i_g * (N_SEATS * HAND_SIZE) + o_j, mask=m_j, other=-1)
    b_seat = o_j // HAND_SIZE
    b_rem = tl.load(remaining_ptr + i_g * N_SEATS + b_seat, mask=m_j, other=0)
    b_in = ((b_rem >> (o_j % HAND_SIZE)) & 1) != 0
    b_mine = b_in & (b_seat == b_actor)
    m_hit = (b_tile[:, None] == o_t[None, :]) & (b_tile >= 0)[:, None]
    dealt = tl.max(m_hit.to(tl.int32), axis=0) != 0
    own = tl.max((m_hit & b_mine[:, None]).to(tl.int32), axis=0) != 0
    return dealt, own


@triton.jit
def _played_tiles(tiles_ptr, seats_ptr, i_g, b_actor, o_t, N_TILES: tl.constexpr):
    """(played[t], played_by_actor[t]) from the transcript (tile ids, -1 for plays to come)."""
    o_m = tl.arange(0, 32)
    m_m = o_m < N_TILES
    b_tile = tl.load(tiles_ptr + i_g * N_TILES + o_m, mask=m_m, other=-1)
    b_seat = tl.load(seats_ptr + i_g * N_TILES + o_m, mask=m_m, other=-1)
    m_hit = (b_tile[:, None] == o_t[None, :]) & (b_tile >= 0)[:, None]
    played = tl.max(m_hit.to(tl.int32), axis=0) != 0
    by_actor = tl.max((m_hit & (b_seat == b_actor)[:, None]).to(tl.int32), axis=0) != 0
    return played, by_actor


@triton.jit
def _hidden_info_kernel(
    hands_ptr, remaining_ptr, tiles_ptr, seats_ptr, leader_ptr, n_plays_ptr, voids_ptr,
    decl_ptr, follow_mask_ptr,
    pool_ptr, n_pool_ptr, allowed_ptr, sizes_ptr, hseats_ptr, actor_ptr,
    N_TILES: tl.constexpr, N_SEATS: tl.constexpr, HAND_SIZE: tl.constexpr,
    N_SUITS: tl.constexpr, MAX_POOL: tl.constexpr, N_HIDDEN: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_SUIT: tl.constexpr,
):
    i_g = tl.program_id(0).to(tl.int64)
    o_t = tl.arange(0, BLOCK_T)                              # tile id
    m_t = o_t < N_TILES
    b_actor = _actor(leader_ptr, n_plays_ptr, i_g, N_SEATS)
    b_decl = tl.load(decl_ptr + i_g)

    dealt, own = _hand_tiles(hands_ptr, remaining_ptr, i_g, b_actor, o_t,
                             N_SEATS, HAND_SIZE, N_TILES)
    played, _ = _played_tiles(tiles_ptr, seats_ptr, i_g, b_actor, o_t, N_TILES)
    hidden = dealt & ~played & ~own & m_t
    b_hidden = hidden.to(tl.int64)
    b_pos = tl.cumsum(b_hidden, axis=0) - b_hidden           # pool index of a hidden tile
    # at most 21 in a consistent state; an inconsistent one (caught by the host check, or
    # unchecked inside a captured step) is truncated as the reference truncates it
    hidden = hidden & (b_pos < MAX_POOL)
    b_n_pool = tl.minimum(tl.sum(b_hidden, axis=0), MAX_POOL)

    # which hidden seat may hold each tile: not one void in a suit the tile follows
    o_s = tl.arange(0, BLOCK_SUIT)
    m_s = o_s < N_SUITS
    b_follow = tl.load(follow_mask_ptr + b_decl * N_SUITS + o_s, mask=m_s, other=0)
    m_follows = ((b_follow[:, None] >> o_t[None, :].to(tl.int64)) & 1) != 0    # [suit, tile]
    b_allowed = tl.zeros([BLOCK_T], tl.int64)
    for j in tl.static_range(N_HIDDEN):
        b_seat = (b_actor + 1 + j) % N_SEATS
        b_voids = tl.load(voids_ptr + i_g * N_SEATS + b_seat)
        m_void = (((b_voids >> o_s) & 1) != 0) & m_s
        forbidden = tl.max((m_follows & m_void[:, None]).to(tl.int32), axis=0) != 0
        b_allowed += tl.where(forbidden, 0, 1 << j).to(tl.int64)
        b_rem = tl.load(remaining_ptr + i_g * N_SEATS + b_seat)    # popcount of the slot bits
        b_size = tl.sum(tl.where(o_t < HAND_SIZE, (b_rem >> o_t) & 1, 0), axis=0)
        tl.store(sizes_ptr + i_g * N_HIDDEN + j, b_size)
        tl.store(hseats_ptr + i_g * N_HIDDEN + j, b_seat)

    # pool tiles ascending at their index, -1 / 0 after the last one
    p_pool = pool_ptr + i_g * MAX_POOL
    p_allowed = allowed_ptr + i_g * MAX_POOL
    tl.store(p_pool + b_pos, o_t.to(tl.int64), mask=hidden)
    tl.store(p_allowed + b_pos, b_allowed, mask=hidden)
    m_pad = (o_t >= b_n_pool) & (o_t < MAX_POOL)
    tl.store(p_pool + o_t, tl.full([BLOCK_T], -1, tl.int64), mask=m_pad)
    tl.store(p_allowed + o_t, tl.zeros([BLOCK_T], tl.int64), mask=m_pad)
    tl.store(n_pool_ptr + i_g, b_n_pool)
    tl.store(actor_ptr + i_g, b_actor)


def _empty_outputs(G: int, device) -> dict[str, torch.Tensor]:
    # one allocation point, so the tests can poison what the kernel must overwrite
    new = lambda *shape: torch.empty(*shape, dtype=torch.int64, device=device)
    return {"pool": new(G, MAX_POOL), "n_pool": new(G), "allowed": new(G, MAX_POOL),
            "sizes": new(G, N_HIDDEN), "seats": new(G, N_HIDDEN), "actor": new(G)}


def hidden_info(games: BatchedGames) -> HiddenInfo:
    """The hidden-hand constraints of each game's current decision; equal to the reference
    `eqfast.engine.public.hidden_info` bit for bit (same consistency check)."""
    G = games.batch_size
    out = _empty_outputs(G, games.device)
    if G > 0:
        T = torch_tables(games.device)
        _hidden_info_kernel[(G,)](
            games.hands.contiguous(), games.remaining.contiguous(), games.tiles.contiguous(),
            games.seats.contiguous(), games.leader.contiguous(), games.n_plays.contiguous(),
            games.voids.contiguous(), games.decl.contiguous(), T["FOLLOW_MASK"],
            out["pool"], out["n_pool"], out["allowed"], out["sizes"], out["seats"], out["actor"],
            N_TILES=N_TILES, N_SEATS=N_SEATS, HAND_SIZE=HAND_SIZE, N_SUITS=N_SUITS,
            MAX_POOL=MAX_POOL, N_HIDDEN=N_HIDDEN, BLOCK_T=BLOCK_T, BLOCK_SUIT=BLOCK_SUIT,
            num_warps=1,
        )
    info = HiddenInfo(decl=games.decl, **out)
    check_hidden_sizes(info)
    return info


@triton.jit
def _legal_mask_kernel(
    hands_ptr, remaining_ptr, trick_ptr, leader_ptr, n_plays_ptr, decl_ptr, led_suit_ptr,
    follows_ptr, legal_ptr,
    N_TILES: tl.constexpr, N_SEATS: tl.constexpr, HAND_SIZE: tl.constexpr,
    N_SUITS: tl.constexpr,
):
    """legal[g, s]: slot s of the current player is in hand and follows the led suit, or
    the player cannot follow (or leads)."""
    i_g = tl.program_id(0).to(tl.int64)
    o_s = tl.arange(0, 8)
    m_s = o_s < HAND_SIZE
    b_actor = _actor(leader_ptr, n_plays_ptr, i_g, N_SEATS)
    b_decl = tl.load(decl_ptr + i_g)
    b_tile = tl.load(hands_ptr + (i_g * N_SEATS + b_actor) * HAND_SIZE + o_s, mask=m_s, other=0)
    b_rem = tl.load(remaining_ptr + i_g * N_SEATS + b_actor)
    b_in_hand = (((b_rem >> o_s) & 1) != 0) & m_s
    b_lead = tl.load(trick_ptr + i_g * N_SEATS)
    b_led = tl.load(led_suit_ptr + b_decl * N_TILES + tl.maximum(b_lead, 0))
    b_follows = tl.load(follows_ptr + (b_decl * N_SUITS + b_led) * N_TILES + tl.maximum(b_tile, 0),
                        mask=m_s, other=0) != 0
    b_follows = b_follows & b_in_hand & (b_lead >= 0)
    b_any = tl.max(b_follows.to(tl.int32), axis=0) != 0
    tl.store(legal_ptr + i_g * HAND_SIZE + o_s, tl.where(b_any, b_follows, b_in_hand).to(tl.int8),
             mask=m_s)


def _empty_legal(G: int, device) -> torch.Tensor:
    # one allocation point, so the tests can poison what the kernel must overwrite
    return torch.empty(G, HAND_SIZE, dtype=torch.bool, device=device)


def legal_mask(games: BatchedGames) -> torch.Tensor:
    """`games.legal_mask()`: legal slots [G, 7] of each current player, bit for bit."""
    out = _empty_legal(games.batch_size, games.device)
    if games.batch_size > 0:
        T = torch_tables(games.device)
        _legal_mask_kernel[(games.batch_size,)](
            games.hands.contiguous(), games.remaining.contiguous(), games.trick.contiguous(),
            games.leader.contiguous(), games.n_plays.contiguous(), games.decl.contiguous(),
            T["LED_SUIT"], T["FOLLOWS"], out.view(torch.int8),
            N_TILES=N_TILES, N_SEATS=N_SEATS, HAND_SIZE=HAND_SIZE, N_SUITS=N_SUITS,
            num_warps=1,
        )
    return out
