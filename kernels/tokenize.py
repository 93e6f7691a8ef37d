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

from eqfast.contracts import MAX_POOL, HiddenInfo, PrefixTokens, WorldSample
from eqfast.oracle.tokenizer import N_STATUS, STATUS_GONE
from eqfast.rules.batched import BatchedGames
from eqfast.rules.tables import HAND_SIZE, N_SEATS, N_SUITS, N_TILES, torch_tables

from .public import _hand_tiles, _played_tiles

BLOCK_T = 32         # the 28 tiles padded to a power of two
BLOCK_S = 8          # the 7 hand slots padded to a power of two


@triton.jit
def _pool_index(info_pool_ptr, i_g, o_t, MAX_POOL: tl.constexpr, BLOCK_T: tl.constexpr):
    """(index of each tile o_t in the decision's pool, found): rows = pool positions."""
    o_i = tl.arange(0, BLOCK_T)
    b_pool = tl.load(info_pool_ptr + i_g * MAX_POOL + o_i, mask=o_i < MAX_POOL, other=-1)
    m_at = (b_pool[:, None] == o_t[None, :]) & (b_pool >= 0)[:, None]
    return tl.sum(tl.where(m_at, o_i[:, None], 0), axis=0), tl.max(m_at.to(tl.int32), axis=0) != 0


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

    b_index, b_found = _pool_index(info_pool_ptr, i_g, o_t, MAX_POOL, BLOCK_T)
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
    Not tuned on a GPU."""
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


# ---------------------------------------------------------------------- the posterior's rows

@triton.jit
def _tokenize_prefix_kernel(
    tiles_ptr, seats_ptr, n_plays_ptr, leader_ptr, decl_ptr, hands_ptr, remaining_ptr,
    actor_ptr, info_pool_ptr, info_seats_ptr, owner_ptr, led_suit_ptr, follows_ptr,
    codes_ptr, slots_ptr, legal_ptr, observed_ptr, valid_ptr,
    N, K, n_blocks,
    N_TILES: tl.constexpr, N_SEATS: tl.constexpr, HAND_SIZE: tl.constexpr,
    MAX_POOL: tl.constexpr, N_STATUS: tl.constexpr, STATUS_GONE: tl.constexpr,
    N_SUITS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr,
):
    """Program (g, k, block of worlds): the position before play j = n_plays - K + k of
    game g, seen by that play's actor, in each world of the block (see the wrapper)."""
    i_pid = tl.program_id(0)
    i_gk = i_pid // n_blocks
    i_g = (i_gk // K).to(tl.int64)
    i_k = i_gk % K
    i_b = i_pid % n_blocks
    o_n = i_b.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
    m_n = o_n < N
    o_t = tl.arange(0, BLOCK_T)                              # tile id
    m_t = o_t < N_TILES
    o_m = tl.arange(0, BLOCK_T)                              # transcript position
    m_m = o_m < N_TILES

    # --- the step, from the transcript (world-independent)
    b_n_plays = tl.load(n_plays_ptr + i_g)
    b_step = b_n_plays - K + i_k
    b_valid = b_step >= 0
    b_j = tl.maximum(b_step, 0)
    b_start = b_j - b_j % N_SEATS                             # the step's trick starts here
    b_tr_tile = tl.load(tiles_ptr + i_g * N_TILES + o_m, mask=m_m, other=-1)
    b_tr_seat = tl.load(seats_ptr + i_g * N_TILES + o_m, mask=m_m, other=-1)
    b_first = tl.where(b_n_plays > 0, tl.load(seats_ptr + i_g * N_TILES),
                       tl.load(leader_ptr + i_g))
    b_actor = tl.where(b_valid, tl.sum(tl.where(o_m == b_j, b_tr_seat, 0), axis=0), b_first)
    b_observed = tl.where(b_valid, tl.sum(tl.where(o_m == b_j, b_tr_tile, 0), axis=0), -1)
    b_decl = tl.load(decl_ptr + i_g)

    # per tile: played before j (and where in the step's trick), public holder
    m_hit = (b_tr_tile[:, None] == o_t[None, :]) & (b_tr_tile >= 0)[:, None]   # [m, t]
    b_before = tl.max((m_hit & (o_m < b_j)[:, None]).to(tl.int32), axis=0) != 0
    m_in_trick = m_hit & (o_m >= b_start)[:, None] & (o_m < b_step)[:, None]
    b_in_trick = tl.max(m_in_trick.to(tl.int32), axis=0) != 0
    b_trick_pos = tl.sum(tl.where(m_in_trick, (o_m - b_start)[:, None], 0), axis=0)
    b_k = tl.sum(((o_m >= b_start) & (o_m < b_step) & (b_tr_tile >= 0)).to(tl.int32), axis=0)
    b_played_by = tl.sum(tl.where(m_hit, b_tr_seat[:, None] + 1, 0), axis=0) - 1  # -1: unplayed
    b_lead = tl.sum(tl.where(o_m == b_start, b_tr_tile, 0), axis=0)
    b_lead = tl.where(b_k > 0, b_lead, -1)

    # the current actor's own tiles are public to it; pool tiles are held per world
    b_now = tl.load(actor_ptr + i_g)
    _, b_own = _hand_tiles(hands_ptr, remaining_ptr, i_g, b_now, o_t, N_SEATS, HAND_SIZE,
                           N_TILES)
    b_public = tl.where(b_played_by >= 0, b_played_by, tl.where(b_own, b_now, -1))
    b_pool_idx, b_in_pool = _pool_index(info_pool_ptr, i_g, o_t, MAX_POOL, BLOCK_T)
    b_seat0 = tl.load(info_seats_ptr + i_g * 3 + 0)
    b_seat1 = tl.load(info_seats_ptr + i_g * 3 + 1)
    b_seat2 = tl.load(info_seats_ptr + i_g * 3 + 2)

    # --- per world: who holds each tile initially, then the codes
    m_pool = m_n[:, None] & (b_in_pool & m_t)[None, :]
    b_owner = tl.load(owner_ptr + (i_g * N + o_n)[:, None] * MAX_POOL + b_pool_idx[None, :],
                      mask=m_pool, other=-1).to(tl.int32)
    b_hidden_seat = tl.where(b_owner == 0, b_seat0,
                             tl.where(b_owner == 1, b_seat1, tl.where(b_owner == 2, b_seat2, -1)))
    b_holder = tl.where((b_public >= 0)[None, :], b_public[None, :], b_hidden_seat)  # [n, t]
    b_rel = ((b_holder - b_actor) % N_SEATS + N_SEATS) % N_SEATS
    b_status = tl.where(b_holder >= 0, b_rel, STATUS_GONE)
    b_status = tl.where(b_before[None, :], STATUS_GONE, b_status)
    b_trick_status = 4 + b_k * (b_k - 1) // 2 + b_trick_pos
    b_status = tl.where(b_in_trick[None, :], b_trick_status[None, :], b_status)
    b_codes = (b_decl * N_TILES + o_t[None, :]) * N_STATUS + b_status
    o_row = (i_g * N + o_n) * K + i_k                                   # output row
    m_nt = m_n[:, None] & m_t[None, :]
    tl.store(codes_ptr + o_row[:, None] * N_TILES + o_t[None, :], b_codes, mask=m_nt)

    # --- the step's actor: its initial hand (slots), legal slots, the observed slot
    m_mine = (b_holder == b_actor) & m_t[None, :]
    b_mine = m_mine.to(tl.int32)
    b_rank = tl.cumsum(b_mine, axis=1) - b_mine                         # slot of each tile
    b_count = tl.sum(b_mine, axis=1)
    b_led = tl.load(led_suit_ptr + b_decl * N_TILES + tl.maximum(b_lead, 0))
    b_follows = tl.load(follows_ptr + (b_decl * N_SUITS + b_led) * N_TILES + o_t, mask=m_t,
                        other=0) != 0
    m_in_hand = m_mine & ~b_before[None, :]
    m_follow = m_in_hand & b_follows[None, :] & (b_lead >= 0)
    b_any = tl.max(m_follow.to(tl.int32), axis=1) != 0
    m_legal = tl.where(b_any[:, None], m_follow, m_in_hand)
    m_slot = m_mine & m_n[:, None] & (b_rank < HAND_SIZE)
    p_slot = o_row[:, None] * HAND_SIZE + b_rank
    tl.store(slots_ptr + p_slot, o_t[None, :].to(tl.int64) + tl.zeros([BLOCK_N, BLOCK_T], tl.int64),
             mask=m_slot)
    tl.store(legal_ptr + p_slot, m_legal.to(tl.int8), mask=m_slot)
    o_s = tl.arange(0, 8)
    m_pad = m_n[:, None] & (o_s[None, :] >= b_count[:, None]) & (o_s < HAND_SIZE)[None, :]
    p_pad = o_row[:, None] * HAND_SIZE + o_s[None, :]
    tl.store(slots_ptr + p_pad, tl.zeros([BLOCK_N, 8], tl.int64), mask=m_pad)
    tl.store(legal_ptr + p_pad, tl.zeros([BLOCK_N, 8], tl.int8), mask=m_pad)

    m_obs = m_mine & (o_t[None, :] == b_observed)
    b_found = tl.max(m_obs.to(tl.int32), axis=1) != 0
    b_obs_slot = tl.sum(tl.where(m_obs, b_rank, 0), axis=1)
    tl.store(observed_ptr + (i_g * N + o_n) * K + i_k,
             tl.where(b_found & b_valid, b_obs_slot, -1).to(tl.int64), mask=m_n)
    tl.store(valid_ptr + i_g * K + i_k, b_valid.to(tl.int8), mask=i_b == 0)


def _empty_prefix(G: int, N: int, K: int, device) -> PrefixTokens:
    # one allocation point, so the tests can poison what the kernel must overwrite
    rows = G * N * K
    return PrefixTokens(torch.empty(rows, N_TILES, dtype=torch.int64, device=device),
                        torch.empty(rows, HAND_SIZE, dtype=torch.int64, device=device),
                        torch.empty(rows, HAND_SIZE, dtype=torch.bool, device=device),
                        torch.empty(G, N, K, dtype=torch.int64, device=device),
                        torch.empty(G, K, dtype=torch.bool, device=device))


def tokenize_prefix_worlds(games: BatchedGames, info: HiddenInfo, sample: WorldSample,
                           window: int) -> PrefixTokens:
    """`eqfast.engine.tokens.tokenize_prefix_worlds`, bit for bit, in one kernel: program
    (decision g, window step k, block of worlds) builds the position before play
    j = n_plays - K + k in every world of the block: each tile's initial holder (the seat
    that played it, the current actor for its own tiles, the sampled owner for pool tiles),
    its status seen by the step's actor (gone if played before j, its place in the step's
    trick, else the holder's seat relative to the actor), that actor's sorted initial hand
    (its slots), its legal slots (follow the led suit when it can) and the slot of the tile
    it played."""
    if window < 1:
        raise ValueError(f"window (K) must be >= 1, got {window}")
    owner = sample.owner
    G, N = owner.shape[:2]
    K = window
    out = _empty_prefix(G, N, K, owner.device)
    if G * N == 0:
        return out
    T = torch_tables(games.device)
    block, warps = _launch_config(N)
    n_blocks = triton.cdiv(N, block)
    _tokenize_prefix_kernel[(G * K * n_blocks,)](
        games.tiles.contiguous(), games.seats.contiguous(), games.n_plays.contiguous(),
        games.leader.contiguous(), games.decl.contiguous(), games.hands.contiguous(),
        games.remaining.contiguous(), info.actor.contiguous(), info.pool.contiguous(),
        info.seats.contiguous(), owner.contiguous(), T["LED_SUIT"], T["FOLLOWS"],
        out.codes, out.slot_tiles, out.legal.view(torch.int8), out.observed_slot,
        out.valid.view(torch.int8),
        N, K, n_blocks,
        N_TILES=N_TILES, N_SEATS=N_SEATS, HAND_SIZE=HAND_SIZE, MAX_POOL=MAX_POOL,
        N_STATUS=N_STATUS, STATUS_GONE=STATUS_GONE, N_SUITS=N_SUITS, BLOCK_N=block,
        BLOCK_T=BLOCK_T, num_warps=warps,
    )
    return out
