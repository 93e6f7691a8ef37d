"""Stage 3 of the E[Q] engine: sampled worlds as oracle positions (spec 000 §4.3, §4.5.0).

Each sampled world fixes every seat's remaining tiles; with the public transcript that
fixes every seat's *initial* hand: initial_p = sort(remaining_p ∪ played_by_p). The
oracle works in slot space (slot = index into the sorted initial hand), so a world
becomes an `OracleBatch` row (hands [.,4,7], remaining 7-bit slot masks, decl, leader,
trick [.,3], actor).

    world_tile_masks(games, info, sample) -> (initial [G,N,4], remaining [G,N,4])
        28-bit tile masks per world and seat. The actor's are its real ones.
    build_oracle_batch(games, info, sample) -> OracleBatch of G*N rows, row = g*N + i:
        the current decision of game g in world i.
    prefix_oracle_batch(games, initial, window) -> PrefixBatch:
        for the last `window` (K) plays j of each game, the decision of that play's actor
        at time j in each world: same initial hands, remaining = initial minus the tiles
        played before j, trick prefix and leader at j, actor = seats[j]. G*N*K rows,
        row = (g*N + i)*K + k, step j = n_plays - K + k (oldest first).
        observed_slot [G,N,K]: slot of the tile actually played at j in that actor's hand in
        world i (-1 if absent: the world contradicts the transcript). valid [G,K] is False
        for steps before the start of the transcript (j < 0); those rows hold the opening
        position (first leader to play, full hands) so every row is a real position, with
        observed_tile = observed_slot = -1; they must be ignored.
    true_world(games, info) -> WorldSample with N = 1 holding the real deal (for tests).

Rows of the same game share decl, leader, trick and actor; only hands/remaining vary.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..oracle.protocol import OracleBatch
from ..rules.batched import BatchedGames
from ..rules.tables import HAND_SIZE, N_SEATS, N_TILES
from .public import N_HIDDEN, HiddenInfo, played_masks, slots_to_tile_mask, tile_bits
from .sampling import WorldSample, make_sample

#: Most plays before the current trick's actor plays: the trick holds at most 3 tiles.
TRICK_SLOTS = N_SEATS - 1


@dataclass(frozen=True)
class PrefixBatch:
    batch: OracleBatch             # G*N*K rows, row = (g*N + i)*K + k
    observed_slot: torch.Tensor    # [G, N, K] int64, -1 where the world lacks the tile
    observed_tile: torch.Tensor    # [G, K] int64 tile played at step j (-1 where invalid)
    step: torch.Tensor             # [G, K] int64 play index j = n_plays - K + k (may be < 0)
    valid: torch.Tensor            # [G, K] bool, False for j < 0


def world_tile_masks(games: BatchedGames, info: HiddenInfo, sample: WorldSample):
    """(initial, remaining) [G, N, 4] int64 28-bit tile masks of every seat in every world."""
    G, N = sample.owner.shape[:2]
    dev = games.device
    rows = torch.arange(G, device=dev)
    pool_bit = torch.where(info.pool >= 0, 1 << info.pool.clamp(min=0),
                           torch.zeros_like(info.pool))[:, None, :]                 # [G,1,21]
    owner = sample.owner.long()
    hidden_rem = torch.stack([(pool_bit * (owner == j)).sum(-1) for j in range(N_HIDDEN)], -1)
    own_rem = slots_to_tile_mask(games.hands[rows, info.actor], games.remaining[rows, info.actor])

    # scatter hidden seat j to absolute seat info.seats[:, j]; the actor keeps its own hand
    remaining = own_rem[:, None, None].expand(G, N, N_SEATS).clone()
    seat_idx = info.seats[:, None, :].expand(G, N, N_HIDDEN)
    remaining.scatter_(2, seat_idx, hidden_rem)
    initial = remaining | played_masks(games)[:, None, :]
    return initial, remaining


def slot_layout(initial: torch.Tensor):
    """(hands [..., 7] sorted tile ids -1 padded, slot_of [..., 28] slot of each tile or -1)
    of 28-bit initial-hand masks [...]."""
    bits = tile_bits(initial)                                          # [...,28]
    slot_of = torch.where(bits.bool(), bits.cumsum(-1) - 1, torch.full_like(bits, -1))
    tiles = torch.arange(N_TILES, device=initial.device).expand_as(bits)
    # tiles not in the hand go to a scratch column HAND_SIZE, dropped afterwards
    hands = torch.full((*initial.shape, HAND_SIZE + 1), -1, dtype=torch.int64, device=initial.device)
    hands.scatter_(-1, torch.where(slot_of >= 0, slot_of, HAND_SIZE),
                   torch.where(slot_of >= 0, tiles, -1))
    return hands[..., :HAND_SIZE], slot_of


def slot_masks(remaining: torch.Tensor, slot_of: torch.Tensor) -> torch.Tensor:
    """7-bit slot masks [...] of 28-bit tile masks remaining [...] (tiles within the hand
    whose slot table is slot_of [..., 28])."""
    bits = tile_bits(remaining) * (slot_of >= 0)
    return (bits << slot_of.clamp(min=0)).sum(-1)


def _repeat(x: torch.Tensor, n: int) -> torch.Tensor:
    """x [G, ...] -> [G*n, ...], row g*n + i = x[g]."""
    return x.repeat_interleave(n, dim=0)


def build_oracle_batch(games: BatchedGames, info: HiddenInfo, sample: WorldSample) -> OracleBatch:
    """The current decision of every game in every world: G*N rows, row = g*N + i."""
    G, N = sample.owner.shape[:2]
    initial, remaining = world_tile_masks(games, info, sample)
    hands, slot_of = slot_layout(initial)
    rem_slots = slot_masks(remaining, slot_of)
    return OracleBatch(
        hands=hands.reshape(G * N, N_SEATS, HAND_SIZE),
        remaining=rem_slots.reshape(G * N, N_SEATS),
        decl=_repeat(games.decl, N),
        leader=_repeat(games.leader, N),
        trick=_repeat(games.trick[:, :TRICK_SLOTS], N),
        actor=_repeat(info.actor, N),
    )


def prefix_oracle_batch(games: BatchedGames, initial: torch.Tensor, window: int) -> PrefixBatch:
    """The actor's decision at each of the last `window` plays, in every world (module doc).

    initial: [G, N, 4] 28-bit initial-hand masks (`world_tile_masks(...)[0]`)."""
    if window < 1:
        raise ValueError(f"window (K) must be >= 1, got {window}")
    G, N = initial.shape[:2]
    K = window
    dev = games.device
    step = games.n_plays[:, None] - K + torch.arange(K, device=dev)          # [G,K]
    valid = step >= 0
    j = step.clamp(min=0)

    # played-before-j masks: tiles are distinct, so a cumulative sum of bits is an OR
    bit = torch.where(games.tiles >= 0, 1 << games.tiles.clamp(min=0), torch.zeros_like(games.tiles))
    before = torch.nn.functional.pad(bit.cumsum(1), (1, 0))                  # [G,29]
    played_before = before.gather(1, j)                                       # [G,K]
    start = j - j % N_SEATS                                                   # trick start
    # invalid steps show the opening position: the first leader to play, nothing observed
    first_leader = torch.where(games.n_plays > 0, games.seats[:, 0], games.leader)[:, None]
    leader = torch.where(valid, games.seats.gather(1, start), first_leader)
    actor = torch.where(valid, games.seats.gather(1, j), first_leader)
    observed = torch.where(valid, games.tiles.gather(1, j), -1)
    pos = start[:, :, None] + torch.arange(TRICK_SLOTS, device=dev)           # [G,K,3]
    trick = games.tiles.gather(1, pos.reshape(G, -1)).reshape(G, K, TRICK_SLOTS)
    trick = torch.where(pos < step[:, :, None], trick, torch.full_like(trick, -1))

    hands, slot_of = slot_layout(initial)                                     # [G,N,4,7], [G,N,4,28]
    remaining = initial[:, :, None, :] & ~played_before[:, None, :, None]     # [G,N,K,4]
    rem_slots = slot_masks(remaining, slot_of[:, :, None])                    # [G,N,K,4]
    actor_slots = slot_of.gather(2, actor[:, None, :, None].expand(G, N, K, N_TILES))
    observed_slot = actor_slots.gather(3, observed.clamp(min=0)[:, None, :, None].expand(G, N, K, 1))[..., 0]
    observed_slot = torch.where(valid[:, None, :], observed_slot, -1)

    rows = G * N * K
    per_game = lambda x: x[:, None].expand(G, N, *x.shape[1:]).reshape(rows, *x.shape[2:])
    batch = OracleBatch(
        hands=hands[:, :, None].expand(G, N, K, N_SEATS, HAND_SIZE).reshape(rows, N_SEATS, HAND_SIZE),
        remaining=rem_slots.reshape(rows, N_SEATS),
        decl=games.decl[:, None, None].expand(G, N, K).reshape(rows),
        leader=per_game(leader),
        trick=per_game(trick),
        actor=per_game(actor),
    )
    return PrefixBatch(batch=batch, observed_slot=observed_slot, observed_tile=observed,
                       step=step, valid=valid)


def true_world(games: BatchedGames, info: HiddenInfo) -> WorldSample:
    """The real deal as a one-world sample (owner [G, 1, 21]); n_worlds/enumerated/total
    are those of a one-world sample and carry no meaning."""
    G = games.batch_size
    rows = torch.arange(G, device=games.device)
    owner = torch.full((G, 1, info.pool.shape[1]), -1, dtype=torch.int8, device=games.device)
    for j in range(N_HIDDEN):
        seat = info.seats[:, j]
        held = slots_to_tile_mask(games.hands[rows, seat], games.remaining[rows, seat])
        has = ((held[:, None] >> info.pool.clamp(min=0)) & 1).bool() & (info.pool >= 0)
        owner[:, 0].masked_fill_(has, j)
    return make_sample(owner, torch.ones(G, dtype=torch.int64, device=games.device), 1)
