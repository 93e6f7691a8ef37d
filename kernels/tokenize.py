"""Triton `tokenize_worlds`: oracle tokens of every sampled world, straight from the public
state and the sampled owners, with no intermediate OracleBatch.

Same signature and outputs, bit for bit, as the reference
`eqfast.engine.tokens.tokenize_worlds(games, info, sample) -> (codes [G*N, 28] int64,
slot_tiles [G*N, 7] int64)`, which is `tokenize(build_oracle_batch(...))` (read
`eqfast.oracle.tokenizer` for the code layout: code = (decl*28 + tile)*11 + status).

Where each tile is, seen from the actor of decision g, in world n:
  - in the actor's own hand (remaining slots)  -> status 0         same in every world
  - at position p of a current trick of k tiles -> 4 + k(k-1)/2 + p same in every world
  - played in an earlier trick, or never dealt  -> 10               same in every world
  - a hidden pool tile i, held in world n by hidden seat j = owner[g, n, i]
                                                -> (seats[g, j] - actor) % 4  (= 1 + j)
Only the last line depends on the world. So the work is split:

  per decision (`decision_tables`, one program per decision; the reference is
  `eqfast.engine.tokens.decision_tables`, ~80 small torch ops):
      base  [G, 28] int64  the code of every tile, pool tiles written as if gone (status 10)
      pool  [G, 28] int32  pool index i of tile t, -1 for tiles outside the pool
      rel   [G, 3]  int64  relative seat of hidden seat j
      actor_tiles [G, 7]   the actor's initial hand (it is known, so world-independent)
  kernel (one program per block of BLOCK_N worlds of one decision):
      codes[g*N + n, t] = base[g, t] + (rel[g, owner[g, n, pool[g, t]]] - 10)  for pool tiles
                        = base[g, t]                                           otherwise
      slot_tiles[g*N + n, :] = actor_tiles[g]

Why: the world-independent part needs the transcript (28 plays), the actor's slot masks and
the trick, i.e. a few hundred bytes of reads and a little branching per decision; done per
world it would be repeated N times (N ~ 100-1000). Done once per decision, the per-world
kernel becomes a pure stream: per world it reads the 21-byte owner row and
writes 28 + 7 int64 (280 bytes), so it is bound by the writes. int64 is written directly
(the reference's dtype) rather than int32 plus a cast, which would be a second pass.

Equality with the reference holds for consistent worlds (each hidden seat gets exactly its
remaining hand size, as every `WorldSample` from `sample_worlds` or `true_world` does); an
owner of -1 at a pool tile reads as "gone" in both.

Naming: i_ program ids, o_ offsets, m_ masks, p_ pointers, b_ values in registers.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from eqfast.engine.public import MAX_POOL, HiddenInfo
from eqfast.engine.sampling import WorldSample
from eqfast.oracle.tokenizer import N_STATUS, STATUS_GONE
from eqfast.rules.batched import BatchedGames
from eqfast.rules.tables import HAND_SIZE, N_SEATS, N_TILES

from .public import _hand_tiles, _played_tiles

BLOCK_T = 32         # the 28 tiles padded to a power of two
BLOCK_S = 8          # the 7 hand slots padded to a power of two


@triton.jit
def _decision_tables_kernel(
    hands_ptr, remaining_ptr, tiles_ptr, seats_ptr, trick_ptr,
    actor_ptr, decl_ptr, info_pool_ptr, info_seats_ptr,
    base_ptr, pool_ptr, rel_ptr, actor_tiles_ptr,
    N_TILES: tl.constexpr, N_SEATS: tl.constexpr, HAND_SIZE: tl.constexpr,
    MAX_POOL: tl.constexpr, N_STATUS: tl.constexpr, STATUS_GONE: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    """base[g, t]: tile t's code with pool tiles as gone; pool[g, t]: t's index in
    info.pool (-1 if absent); rel[g, j]: relative seat of hidden seat j; actor_tiles[g]: the
    actor's initial hand (its remaining and its played tiles), ascending, 0 padded."""
    i_g = tl.program_id(0).to(tl.int64)
    o_t = tl.arange(0, BLOCK_T)
    m_t = o_t < N_TILES
    b_actor = tl.load(actor_ptr + i_g)
    b_decl = tl.load(decl_ptr + i_g)
    _, own = _hand_tiles(hands_ptr, remaining_ptr, i_g, b_actor, o_t, N_SEATS, HAND_SIZE, N_TILES)
    _, by_actor = _played_tiles(tiles_ptr, seats_ptr, i_g, b_actor, o_t, N_TILES)

    # status: 0 in the actor's hand, 4 + k(k-1)/2 + p at position p of a k-tile trick, else gone
    b_status = tl.where(own, 0, STATUS_GONE).to(tl.int64)
    b_k = tl.zeros([], tl.int64)
    for p in tl.static_range(N_SEATS - 1):
        b_k += (tl.load(trick_ptr + i_g * N_SEATS + p) >= 0).to(tl.int64)
    for p in tl.static_range(N_SEATS - 1):
        b_trick = tl.load(trick_ptr + i_g * N_SEATS + p)
        b_status = tl.where((o_t == b_trick) & (b_trick >= 0), 4 + b_k * (b_k - 1) // 2 + p,
                            b_status)
    b_base = (b_decl * N_TILES + o_t) * N_STATUS + b_status
    tl.store(base_ptr + i_g * N_TILES + o_t, b_base, mask=m_t)

    # pool index of each tile: rows = pool positions, columns = tiles
    o_i = tl.arange(0, BLOCK_T)
    b_pool = tl.load(info_pool_ptr + i_g * MAX_POOL + o_i, mask=o_i < MAX_POOL, other=-1)
    m_at = (b_pool[:, None] == o_t[None, :]) & (b_pool >= 0)[:, None]
    b_index = tl.sum(tl.where(m_at, o_i[:, None], 0), axis=0)
    b_found = tl.max(m_at.to(tl.int32), axis=0) != 0
    tl.store(pool_ptr + i_g * N_TILES + o_t, tl.where(b_found, b_index, -1).to(tl.int32), mask=m_t)

    for j in tl.static_range(N_SEATS - 1):
        b_rel = tl.load(info_seats_ptr + i_g * (N_SEATS - 1) + j) - b_actor
        tl.store(rel_ptr + i_g * (N_SEATS - 1) + j, ((b_rel % N_SEATS) + N_SEATS) % N_SEATS)

    # the actor's initial hand in ascending order: known tiles at their prefix count
    b_known = ((own | by_actor) & m_t).to(tl.int64)
    b_pos = tl.cumsum(b_known, axis=0) - b_known
    p_hand = actor_tiles_ptr + i_g * HAND_SIZE
    tl.store(p_hand + b_pos, o_t.to(tl.int64), mask=(b_known != 0) & (b_pos < HAND_SIZE))
    b_n_known = tl.sum(b_known, axis=0)
    tl.store(p_hand + o_t, tl.zeros([BLOCK_T], tl.int64), mask=(o_t >= b_n_known) & (o_t < HAND_SIZE))


def _empty_tables(G: int, device) -> tuple[torch.Tensor, ...]:
    # one allocation point, so the tests can poison what the kernel must overwrite
    return (torch.empty(G, N_TILES, dtype=torch.int64, device=device),
            torch.empty(G, N_TILES, dtype=torch.int32, device=device),
            torch.empty(G, N_SEATS - 1, dtype=torch.int64, device=device),
            torch.empty(G, HAND_SIZE, dtype=torch.int64, device=device))


def decision_tables(games: BatchedGames, info: HiddenInfo):
    """(base [G,28] int64, pool [G,28] int32, rel [G,3] int64, actor_tiles [G,7] int64) as
    `eqfast.engine.tokens.decision_tables`, bit for bit; one program per decision."""
    G = info.batch_size
    base, pool, rel, actor_tiles = _empty_tables(G, info.device)
    if G > 0:
        _decision_tables_kernel[(G,)](
            games.hands.contiguous(), games.remaining.contiguous(), games.tiles.contiguous(),
            games.seats.contiguous(), games.trick.contiguous(), info.actor.contiguous(),
            info.decl.contiguous(), info.pool.contiguous(),
            info.seats.contiguous(), base, pool, rel, actor_tiles,
            N_TILES=N_TILES, N_SEATS=N_SEATS, HAND_SIZE=HAND_SIZE, MAX_POOL=MAX_POOL,
            N_STATUS=N_STATUS, STATUS_GONE=STATUS_GONE, BLOCK_T=BLOCK_T, num_warps=1,
        )
    return base, pool, rel, actor_tiles


@triton.jit
def _tokenize_worlds_kernel(
    base_ptr, pool_ptr, rel_ptr, actor_tiles_ptr, owner_ptr, codes_ptr, slots_ptr,
    N, n_blocks,
    N_TILES: tl.constexpr, MAX_POOL: tl.constexpr, HAND_SIZE: tl.constexpr,
    STATUS_GONE: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """codes[g*N + n, t] = base[g, t], plus rel[g, j] - STATUS_GONE where tile t is pool
    tile i = pool[g, t] >= 0 held by hidden seat j = owner[g, n, i] in {0, 1, 2};
    slot_tiles[g*N + n, :] = actor_tiles[g, :]."""
    i_pid = tl.program_id(0)
    i_g = (i_pid // n_blocks).to(tl.int64)
    i_b = i_pid % n_blocks
    o_n = i_b.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
    m_n = o_n < N
    o_row = i_g * N + o_n                                    # output row of each world

    # the decision's tables: one row each, shared by the block's worlds
    o_t = tl.arange(0, BLOCK_T)
    m_t = o_t < N_TILES
    b_base = tl.load(base_ptr + i_g * N_TILES + o_t, mask=m_t, other=0)
    b_pool = tl.load(pool_ptr + i_g * N_TILES + o_t, mask=m_t, other=-1)
    b_add0 = tl.load(rel_ptr + i_g * 3 + 0) - STATUS_GONE
    b_add1 = tl.load(rel_ptr + i_g * 3 + 1) - STATUS_GONE
    b_add2 = tl.load(rel_ptr + i_g * 3 + 2) - STATUS_GONE

    # owner of each pool tile, gathered into tile order: [BLOCK_N, BLOCK_T]
    m_pool = m_n[:, None] & (b_pool >= 0)[None, :]
    p_owner = owner_ptr + o_row[:, None] * MAX_POOL + b_pool[None, :]
    b_owner = tl.load(p_owner, mask=m_pool, other=-1)
    b_add = tl.where(b_owner == 0, b_add0,
                     tl.where(b_owner == 1, b_add1, tl.where(b_owner == 2, b_add2, 0)))
    b_codes = b_base[None, :] + b_add
    p_codes = codes_ptr + o_row[:, None] * N_TILES + o_t[None, :]
    tl.store(p_codes, b_codes, mask=m_n[:, None] & m_t[None, :])

    o_s = tl.arange(0, BLOCK_S)
    m_s = o_s < HAND_SIZE
    b_slots = tl.load(actor_tiles_ptr + i_g * HAND_SIZE + o_s, mask=m_s, other=0)
    p_slots = slots_ptr + o_row[:, None] * HAND_SIZE + o_s[None, :]
    tl.store(p_slots, b_slots[None, :] + tl.zeros([BLOCK_N, BLOCK_S], tl.int64),
             mask=m_n[:, None] & m_s[None, :])


def _launch_config(n: int) -> tuple[int, int]:
    """(BLOCK_N, num_warps) for n worlds per decision: a [BLOCK_N, 32] tile of up to 64
    worlds (2048 lanes, 18 KB of output per program) and no larger than n needs (min 2).
    Untuned on a GPU (this session had none)."""
    block = min(64, max(2, triton.next_power_of_2(n)))
    return block, max(1, min(4, block * BLOCK_T // 512))


def _empty_outputs(rows: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    # one allocation point, so the tests can poison what the kernel must overwrite
    return (torch.empty(rows, N_TILES, dtype=torch.int64, device=device),
            torch.empty(rows, HAND_SIZE, dtype=torch.int64, device=device))


def _tokenize_worlds(games: BatchedGames, info: HiddenInfo, owner: torch.Tensor):
    G, N = owner.shape[:2]
    codes, slots = _empty_outputs(G * N, owner.device)
    if G == 0 or N == 0:
        return codes, slots
    base, pool, rel, actor_tiles = decision_tables(games, info)
    block, warps = _launch_config(N)
    n_blocks = triton.cdiv(N, block)
    _tokenize_worlds_kernel[(G * n_blocks,)](
        base, pool, rel, actor_tiles, owner.contiguous(), codes, slots,
        N, n_blocks,
        N_TILES=N_TILES, MAX_POOL=MAX_POOL, HAND_SIZE=HAND_SIZE, STATUS_GONE=STATUS_GONE,
        BLOCK_N=block, BLOCK_T=BLOCK_T, BLOCK_S=BLOCK_S, num_warps=warps,
    )
    return codes, slots


def tokenize_worlds(games: BatchedGames, info: HiddenInfo,
                    sample: WorldSample) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes [G*N, 28] int64, slot_tiles [G*N, 7] int64); equal to the reference
    `eqfast.engine.tokens.tokenize_worlds` bit for bit."""
    owner = sample.owner
    G = info.batch_size
    if games.batch_size != G:
        raise ValueError(f"games has {games.batch_size} decisions but info has {G}")
    if owner.dim() != 3 or owner.shape[0] != G or owner.shape[2] != MAX_POOL:
        raise ValueError(f"sample.owner must be [G={G}, N, {MAX_POOL}], got {tuple(owner.shape)}")
    if owner.dtype != torch.int8:
        raise ValueError(f"sample.owner must be int8, got {owner.dtype}")
    if owner.device != info.device:
        raise ValueError(f"sample.owner is on {owner.device} but info on {info.device}")
    return _tokenize_worlds(games, info, owner)
