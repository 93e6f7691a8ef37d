"""Stage 3 of the E[Q] engine: sampled worlds as oracle positions (docs/DATASET.md,
"Recomputing a record from its stored worlds").

Each sampled world fixes every seat's remaining tiles; with the public transcript that
fixes every seat's *initial* hand: initial_p = sort(remaining_p ∪ played_by_p). The
oracle works in slot space (slot = index into the sorted initial hand), so a world
becomes an `OracleBatch` row (hands [.,4,7], remaining 7-bit slot masks, decl, leader,
trick [.,3], actor).

    world_hands(games, info, owner) -> hands [G,N,4,7]: initial hands per world and seat.
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
    world_owners(games, info, sample) -> owner [G,N,28] int8: the absolute seat that holds
        each tile id at the deal in every world (the stored form of a world: with the
        transcript it fixes every position of the hand, see docs/DATASET.md).
    true_world(games, info) -> WorldSample with N = 1 holding the real deal (for tests).
    world_games(games, info, owner) -> BatchedGames of G*N rows, row = g*N + i: game g
        with world i's hidden hands and the whole public history (for players that
        continue the game in each world: eqfast.stage2.rollout).

Rows of the same game share decl, leader, trick and actor; only hands/remaining vary.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..oracle.protocol import OracleBatch
from ..rules.batched import BatchedGames
from ..rules.tables import HAND_SIZE, N_SEATS, N_TILES
from .public import (N_HIDDEN, HiddenInfo, mask_to_sorted_ids, played_masks,
                     slots_to_tile_mask)
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


def world_owners(games: BatchedGames, info: HiddenInfo, sample: WorldSample) -> torch.Tensor:
    """Seat [G, N, 28] int8 (absolute, 0..3) holding each tile id at the deal in every world.
    Device work only (the fast path stores it from inside a captured step)."""
    initial, _ = world_tile_masks(games, info, sample)                  # [G,N,4] 28-bit
    tiles = torch.arange(N_TILES, device=initial.device)
    held = (initial[..., None] >> tiles) & 1                             # [G,N,4,28]
    seats = torch.arange(N_SEATS, device=initial.device)[:, None]
    return (held * seats).sum(2).to(torch.int8)


def world_hands(games: BatchedGames, info: HiddenInfo, owner: torch.Tensor) -> torch.Tensor:
    """Initial hands [G, N, 4, 7] (sorted tile ids, -1 padded) of every seat in every world.

    Each seat's hand is its public part (the tiles it played; the actor's whole hand) plus
    the pool tiles the world gives it. Both parts go into an unsorted 8-wide row per seat,
    then one sort of 8 small values per row: ~10x faster than building 28-bit masks and
    expanding them to [.., 28] bits (measured 64k worlds: ~1 s -> ~0.1 s on this CPU).
    """
    G, N = owner.shape[:2]
    dev = games.device
    rows = torch.arange(G, device=dev)
    width = HAND_SIZE + 1                        # 8 = 7 tiles + room for a sorted sentinel
    known = played_masks(games)
    own = slots_to_tile_mask(games.hands[rows, info.actor], games.remaining[rows, info.actor])
    known[rows, info.actor] |= own
    known_ids = mask_to_sorted_ids(known, width)                         # [G,4,8], -1 padded
    n_known = (known_ids >= 0).sum(-1)                                   # [G,4]
    base = torch.where(known_ids >= 0, known_ids, N_TILES).to(torch.int16)
    # one extra column (index 32) swallows the writes of pool padding
    flat = torch.cat([base.reshape(G, N_SEATS * width),
                      torch.full((G, 1), N_TILES, dtype=torch.int16, device=dev)], 1)
    buf = flat[:, None, :].expand(G, N, flat.shape[1]).clone()           # [G,N,33]

    # pool tile i goes to its owner's row, after the known tiles and the owner's earlier
    # pool tiles (the rank of i among them); small dtypes and where-chains over the 3
    # owners instead of one-hot tensors and gathers (2x faster on this CPU)
    is_seat = [owner == j for j in range(N_HIDDEN)]
    first_col = info.seats * width + n_known.gather(1, info.seats)      # [G,3]
    col = torch.full(owner.shape, N_SEATS * width, dtype=torch.int64, device=dev)
    for j in range(N_HIDDEN):
        within = is_seat[j].cumsum(2, dtype=torch.int16) - 1
        col = torch.where(is_seat[j], first_col[:, j, None, None] + within, col)
    buf.scatter_(2, col, info.pool[:, None, :].expand(G, N, -1).to(torch.int16))
    hands = buf[..., :N_SEATS * width].reshape(G, N, N_SEATS, width).sort(-1).values
    hands = hands[..., :HAND_SIZE].long()
    return torch.where(hands < N_TILES, hands, -1)


def remaining_slots(hands: torch.Tensor, gone: torch.Tensor) -> torch.Tensor:
    """7-bit slot masks [...] of the tiles of hands [..., 7] not in the 28-bit masks gone
    [...] (tiles already played)."""
    out = ((gone[..., None] >> hands.clamp(min=0)) & 1) == 0
    out = out & (hands >= 0)
    return (out.long() << torch.arange(HAND_SIZE, device=hands.device)).sum(-1)


def _repeat(x: torch.Tensor, n: int) -> torch.Tensor:
    """x [G, ...] -> [G*n, ...], row g*n + i = x[g]."""
    return x.repeat_interleave(n, dim=0)


def _all_played(games: BatchedGames) -> torch.Tensor:
    p = played_masks(games)
    return p[:, 0] | p[:, 1] | p[:, 2] | p[:, 3]


def build_oracle_batch(games: BatchedGames, info: HiddenInfo, sample: WorldSample) -> OracleBatch:
    """The current decision of every game in every world: G*N rows, row = g*N + i."""
    G, N = sample.owner.shape[:2]
    hands = world_hands(games, info, sample.owner)                       # [G,N,4,7]
    rem = remaining_slots(hands, _all_played(games)[:, None, None])      # [G,N,4]
    return OracleBatch(
        hands=hands.reshape(G * N, N_SEATS, HAND_SIZE),
        remaining=rem.reshape(G * N, N_SEATS),
        decl=_repeat(games.decl, N),
        leader=_repeat(games.leader, N),
        trick=_repeat(games.trick[:, :TRICK_SLOTS], N),
        actor=_repeat(info.actor, N),
    )


def world_games(games: BatchedGames, info: HiddenInfo, owner: torch.Tensor) -> BatchedGames:
    """The G*N games (row g*N + i) of game g's position in its world i (the hidden hands
    `owner` [G, N, 21]); everything public (plays, trick, points, voids) as in `games`."""
    G, N = owner.shape[:2]
    hands = world_hands(games, info, owner)                              # [G,N,4,7]
    rem = remaining_slots(hands, _all_played(games)[:, None, None])      # [G,N,4]
    rep = lambda x: _repeat(x, N)
    return BatchedGames(hands=hands.reshape(G * N, N_SEATS, HAND_SIZE),
                        remaining=rem.reshape(G * N, N_SEATS), decl=rep(games.decl),
                        leader=rep(games.leader), trick=rep(games.trick),
                        n_plays=rep(games.n_plays), seats=rep(games.seats),
                        tiles=rep(games.tiles), points=rep(games.points),
                        voids=rep(games.voids))


def own_play_steps(games: BatchedGames, window: int) -> torch.Tensor:
    """[G, K] bool: window step k (play n_plays - K + k) is a play of the seat now to act
    (the steps `PosteriorConfig(own_plays=False)` leaves out)."""
    step = games.n_plays[:, None] - window + torch.arange(window, device=games.device)
    seat = games.seats.gather(1, step.clamp(min=0))
    return (step >= 0) & (seat == games.current_player[:, None])


def scored_steps(games: BatchedGames, valid: torch.Tensor, own_plays: bool) -> torch.Tensor:
    """The window steps [G, K] the posterior scores: the valid ones, less the actor's own
    plays unless `own_plays` (PosteriorConfig.own_plays)."""
    return valid if own_plays else valid & ~own_play_steps(games, valid.shape[1])


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

    hands = mask_to_sorted_ids(initial, HAND_SIZE)                            # [G,N,4,7]
    rem = remaining_slots(hands[:, :, None], played_before[:, None, :, None])  # [G,N,K,4]
    actor_hand = hands.gather(2, actor[:, None, :, None].expand(G, N, K, HAND_SIZE))  # [G,N,K,7]
    match = actor_hand == observed[:, None, :, None]
    observed_slot = torch.where(match.any(-1) & valid[:, None, :], match.long().argmax(-1), -1)

    rows = G * N * K
    per_game = lambda x: x[:, None].expand(G, N, *x.shape[1:]).reshape(rows, *x.shape[2:])
    batch = OracleBatch(
        hands=hands[:, :, None].expand(G, N, K, N_SEATS, HAND_SIZE).reshape(rows, N_SEATS, HAND_SIZE),
        remaining=rem.reshape(rows, N_SEATS),
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
