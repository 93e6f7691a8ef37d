"""Stage 1 of the E[Q] engine: what the acting seat knows about the hidden hands.

For G decisions at once (one per game in `BatchedGames`, actor = `games.current_player`)
`hidden_info(games)` returns a `HiddenInfo`:

    pool     [G, 21] int64  hidden tile ids (dealt, not played, not in the actor's hand),
                            ascending, -1 padded at the end
    n_pool   [G]     int64  number of hidden tiles (== sizes.sum(1))
    allowed  [G, 21] int64  3-bit mask per pool tile: bit j set = hidden seat j may hold it
                            (0 at padding)
    sizes    [G, 3]  int64  remaining hand sizes of the hidden seats
    seats    [G, 3]  int64  absolute seat of hidden seat j: (actor + 1 + j) % 4
    actor    [G]     int64  the acting seat
    decl     [G]     int64  declaration (kept for the later stages)

Hidden seat j = 0, 1, 2 are the actor's left opponent, partner and right opponent.
A seat may not hold a tile that follows a suit it is void in (voids come from
`games.voids`, inferred by `BatchedGames.play`); the tile sets of each void suit are
`FOLLOW_MASK[decl, suit]`. The actor's own voids are irrelevant (its hand is known).

The set of dealt tiles is the union of the four initial hands: all 28 tiles for a full
deal. For shortened endgame setups (`BatchedGames.new` with k < 7 tiles a seat) the set
of tiles in play is treated as public, as in a composed endgame problem.
"""
from __future__ import annotations


import torch


from ..rules.batched import BatchedGames
from ..rules.tables import HAND_SIZE, N_SEATS, N_SUITS, N_TILES, torch_tables
from ..contracts import MAX_POOL, N_HIDDEN, HiddenInfo, check_hidden_sizes  # noqa: F401

def tile_bits(mask: torch.Tensor, n_bits: int = N_TILES) -> torch.Tensor:
    """Bits [..., n_bits] (int64 0/1) of integer masks [...]."""
    return (mask[..., None] >> torch.arange(n_bits, device=mask.device)) & 1


def popcount(mask: torch.Tensor, n_bits: int = N_TILES) -> torch.Tensor:
    """Number of set bits among the low `n_bits` of each mask."""
    return tile_bits(mask, n_bits).sum(-1)


def slots_to_tile_mask(hands: torch.Tensor, slot_mask: torch.Tensor) -> torch.Tensor:
    """28-bit tile masks [...] of the slots `slot_mask` [...] of hands [..., 7] (-1 pads)."""
    in_mask = tile_bits(slot_mask, HAND_SIZE).bool() & (hands >= 0)
    return torch.where(in_mask, 1 << hands.clamp(min=0), torch.zeros_like(hands)).sum(-1)


def solver_positions(games: BatchedGames) -> tuple:
    """(hands [G, 4] 28-bit masks, decl [G], leader [G], trick [G, 3]) numpy arrays on the
    host: the positions of `games` (on any device) as the exact solver's `q_batch` /
    `v_batch` take them (the trick holds its tiles in play order, -1 after them)."""
    masks = slots_to_tile_mask(games.hands, games.remaining)
    return tuple(t.cpu().numpy() for t in (masks, games.decl, games.leader, games.trick[:, :3]))


def played_masks(games: BatchedGames) -> torch.Tensor:
    """28-bit masks [G, 4] of the tiles each seat has played so far (from the transcript)."""
    done = games.tiles >= 0
    bit = torch.where(done, 1 << games.tiles.clamp(min=0), torch.zeros_like(games.tiles))
    seat_hot = games.seats[:, :, None] == torch.arange(N_SEATS, device=games.device)
    return (bit[:, :, None] * seat_hot).sum(1)


def mask_to_sorted_ids(mask: torch.Tensor, width: int) -> torch.Tensor:
    """Ascending tile ids [..., width] of 28-bit masks [...], -1 padded at the end."""
    bits = tile_bits(mask).bool()
    ids = torch.arange(N_TILES, device=mask.device).expand_as(bits)
    # set bits keep their id, others sort to the end as N_TILES
    keyed = torch.where(bits, ids, torch.full_like(ids, N_TILES))
    ordered = keyed.sort(dim=-1).values[..., :width]
    return torch.where(ordered < N_TILES, ordered, torch.full_like(ordered, -1))


def forbidden_masks(voids: torch.Tensor, decl: torch.Tensor) -> torch.Tensor:
    """28-bit masks [...] of the tiles a seat with void suits `voids` [...] cannot hold.

    decl broadcasts against voids. A void in suit s forbids FOLLOW_MASK[decl, s].
    """
    T = torch_tables(voids.device)
    suits = torch.arange(N_SUITS, device=voids.device)
    follow = T["FOLLOW_MASK"][decl[..., None], suits]              # [..., 8]
    void_bit = (voids[..., None] >> suits) & 1
    out = torch.zeros_like(voids)
    for s in range(N_SUITS):  # OR over the 8 suits (torch has no OR-reduction)
        out = out | (follow[..., s] * void_bit[..., s])
    return out


def hidden_info(games: BatchedGames) -> HiddenInfo:
    """The hidden-hand constraints of each game's current decision (see module doc)."""
    dev = games.device
    G = games.batch_size
    rows = torch.arange(G, device=dev)
    actor = games.current_player
    seats = (actor[:, None] + 1 + torch.arange(N_HIDDEN, device=dev)) % N_SEATS   # [G,3]

    dealt = slots_to_tile_mask(games.hands, torch.full_like(games.remaining, (1 << HAND_SIZE) - 1))
    dealt_all = dealt[:, 0] | dealt[:, 1] | dealt[:, 2] | dealt[:, 3]
    played = played_masks(games)
    played_all = played[:, 0] | played[:, 1] | played[:, 2] | played[:, 3]
    own = slots_to_tile_mask(games.hands[rows, actor], games.remaining[rows, actor])
    hidden = dealt_all & ~played_all & ~own

    pool = mask_to_sorted_ids(hidden, MAX_POOL)
    n_pool = (pool >= 0).sum(1)
    sizes = popcount(games.remaining.gather(1, seats), HAND_SIZE)

    forbidden = forbidden_masks(games.voids.gather(1, seats), games.decl[:, None])   # [G,3]
    may_hold = ((forbidden[:, None, :] >> pool.clamp(min=0)[:, :, None]) & 1) == 0   # [G,21,3]
    may_hold = may_hold & (pool >= 0)[:, :, None]
    allowed = (may_hold.long() << torch.arange(N_HIDDEN, device=dev)).sum(-1)
    info = HiddenInfo(pool=pool, n_pool=n_pool, allowed=allowed, sizes=sizes, seats=seats,
                      actor=actor, decl=games.decl)
    check_hidden_sizes(info)
    return info
