"""Stage 3+4 of the E[Q] engine fused: oracle tokens of every sampled world (reference).

    tokenize_worlds(games, info, sample) -> (codes [G*N, 28] int64, slot_tiles [G*N, 7] int64)
    tokenize_prefix_worlds(games, info, sample, K) -> PrefixTokens   (the posterior's rows)

Row g*N + i is the current decision of game g in world i of `sample` (as in
`worlds.build_oracle_batch`). `codes` are the Stage 1 oracle tokens
(`eqfast.oracle.tokenizer`, TOKEN_LAYOUT_VERSION 1: one code per tile) and `slot_tiles` the
tile ids of the actor's 7 initial-hand slots (`actor_slot_tiles`: the tiles whose predicted
values are the Q vector).

This reference is, by definition, the composition

    tokenize(build_oracle_batch(games, info, sample)), actor_slot_tiles(...)

so it is right exactly when those two are. It materializes the whole OracleBatch (hands
[G*N,4,7] and remaining slot masks) only to read it back.

`tokenize_worlds_split` (pure PyTorch, equal bit for bit, tested) and the Triton kernel
`eqfast.kernels.tokenize_worlds` compute the codes straight from the public state and the
sampled owners instead: only the hidden pool tiles differ between the worlds of a
decision, so `decision_tables` builds each decision's world-independent codes once and the
per-world work is one gather of the owners (1.76M against 0.47M rows/s for the composition
on this CPU, one thread, 64 mid-hand games x 1000 worlds).
The "reference" backend of the pipeline uses the split form.
"""
from __future__ import annotations

import torch

from ..contracts import PrefixTokens
from ..oracle.protocol import legal_slots
from ..oracle.tokenizer import N_STATUS, STATUS_GONE, actor_slot_tiles, tokenize_batch
from ..rules.batched import BatchedGames
from ..rules.tables import HAND_SIZE, N_SEATS, N_TILES
from .public import (MAX_POOL, HiddenInfo, mask_to_sorted_ids, played_masks, slots_to_tile_mask,
                     tile_bits)
from .sampling import WorldSample
from .worlds import build_oracle_batch, prefix_oracle_batch, world_tile_masks


def tokenize_worlds(games: BatchedGames, info: HiddenInfo,
                    sample: WorldSample) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes [G*N, 28] int64, slot_tiles [G*N, 7] int64) of every world of every decision."""
    G, N = sample.owner.shape[:2]
    if G * N == 0:   # `tokenize` cannot reshape an empty batch; no rows, no codes
        empty = lambda width: torch.empty(0, width, dtype=torch.int64, device=info.device)
        return empty(N_TILES), empty(HAND_SIZE)
    batch = build_oracle_batch(games, info, sample)
    return tokenize_batch(batch), actor_slot_tiles(batch.hands, batch.actor)


def decision_tables(games: BatchedGames, info: HiddenInfo):
    """(base [G,28] int64, pool [G,28] int32, rel [G,3] int64, actor_tiles [G,7] int64):
    the world-independent part of every decision's codes: every tile's code with the pool
    tiles written as gone (status 10), each tile's pool index (-1 outside the pool), the
    relative seat of each hidden seat, and the actor's initial hand."""
    G = info.batch_size
    dev = info.device
    rows = torch.arange(G, device=dev)
    actor = info.actor
    tiles = torch.arange(N_TILES, device=dev)

    own = slots_to_tile_mask(games.hands[rows, actor], games.remaining[rows, actor])
    status = torch.full((G, N_TILES + 1), STATUS_GONE, dtype=torch.int64, device=dev)
    status[:, :N_TILES] = torch.where(tile_bits(own).bool(), 0, STATUS_GONE)   # rel seat 0
    # the current trick (the actor plays next, so at most 3 tiles); column 28 eats -1 pads
    trick = games.trick[:, :N_SEATS - 1]
    k = (trick >= 0).sum(1)
    for p in range(N_SEATS - 1):
        col = torch.where(trick[:, p] >= 0, trick[:, p], N_TILES)
        status.scatter_(1, col[:, None], (4 + k * (k - 1) // 2 + p)[:, None])
    base = (info.decl[:, None] * N_TILES + tiles) * N_STATUS + status[:, :N_TILES]

    pool = torch.full((G, N_TILES + 1), -1, dtype=torch.int32, device=dev)
    pool_col = torch.where(info.pool >= 0, info.pool, N_TILES)
    index = torch.arange(MAX_POOL, dtype=torch.int32, device=dev).expand(G, MAX_POOL)
    pool.scatter_(1, pool_col, index)

    rel = (info.seats - actor[:, None]) % N_SEATS
    known = own | played_masks(games)[rows, actor]
    actor_tiles = mask_to_sorted_ids(known, HAND_SIZE).clamp(min=0)
    return base, pool[:, :N_TILES].contiguous(), rel.contiguous(), actor_tiles.contiguous()


def tokenize_worlds_split(games: BatchedGames, info: HiddenInfo,
                          sample: WorldSample) -> tuple[torch.Tensor, torch.Tensor]:
    """`tokenize_worlds` computed as the Triton kernel does (module doc): per-decision tables,
    then codes[g, n, t] = base[g, t] + rel[g, owner[g, n, pool[g, t]]] - 10 at pool tiles."""
    G, N = sample.owner.shape[:2]
    base, pool, rel, actor_tiles = decision_tables(games, info)
    in_pool = (pool >= 0)[:, None, :]                                          # [G,1,28]
    owner = sample.owner.long().gather(2, pool.long().clamp(min=0)[:, None, :].expand(G, N, N_TILES))
    held = in_pool & (owner >= 0)
    seat_rel = rel.gather(1, owner.clamp(min=0).reshape(G, N * N_TILES)).view(G, N, N_TILES)
    codes = base[:, None, :] + torch.where(held, seat_rel - STATUS_GONE, torch.zeros_like(seat_rel))
    return (codes.reshape(G * N, N_TILES),
            actor_tiles[:, None, :].expand(G, N, HAND_SIZE).reshape(G * N, HAND_SIZE))


def tokenize_prefix_worlds(games: BatchedGames, info: HiddenInfo, sample: WorldSample,
                           window: int) -> PrefixTokens:
    """For every world and each of the last `window` plays, the position of that play's
    actor just before it (`worlds.prefix_oracle_batch`, read its doc), tokenized for the
    network, with the actor's legal slots and the slot of the tile it played.

    The reference is the composition of `world_tile_masks`, `prefix_oracle_batch`,
    `tokenize_batch`, `actor_slot_tiles` and `legal_slots`;
    `eqfast.kernels.tokenize_prefix_worlds` computes the same straight from the transcript
    and the sampled owners."""
    initial, _ = world_tile_masks(games, info, sample)
    prefix = prefix_oracle_batch(games, initial, window)
    b = prefix.batch
    return PrefixTokens(tokenize_batch(b), actor_slot_tiles(b.hands, b.actor), legal_slots(b),
                        prefix.observed_slot, prefix.valid)
