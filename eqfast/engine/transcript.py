"""Stage 2 transcript tokens (tokenizer_version "transcript_v1", docs/DATASET.md): public info only.

One sequence per decision, from the acting player's viewpoint:

    position 0             the declaration token
    positions 1 .. h       the actor's current hand, sorted by tile id (h = hand size)
    positions h+1 .. h+P   every play so far, in order (P = plays so far)
    the rest               zeros, up to MAX_TOKENS = 1 + 7 + 28 = 36

Eight features per token (int8):

    0 high pip        1 low pip         2 is_double        3 count_value (0/1/2 = 0/5/10 pts)
    4 relative player 5 is_in_hand      6 decl_id          7 token_type (0 decl, 1 hand, 2 play)

Hand tokens: relative player 0 (the actor), is_in_hand 1, token_type 1. Play tokens:
relative player (seat - actor) mod 4, is_in_hand 0, token_type 2. Every token carries
decl_id. The declaration token has only decl_id set (features 0-5 and 7 are 0), so it
differs from padding only by position (< length) and decl_id.

Per-slot record fields (e_q_mean, e_q_var, legal_mask, action_taken) index the actor's
current hand in the order of its hand tokens: `current_hand_order` gives, for the i-th
hand token, the initial-hand slot it comes from (initial slots are sorted by tile id too,
so this is the ordered list of the slots still in hand).
"""
from __future__ import annotations

import torch

from ..rules.tables import HAND_SIZE, N_SEATS, N_TILES, torch_tables

MAX_TOKENS = 1 + HAND_SIZE + N_TILES        # 36
N_FEATURES = 8
F_HIGH, F_LOW, F_DOUBLE, F_COUNT, F_PLAYER, F_IN_HAND, F_DECL, F_TYPE = range(N_FEATURES)
TYPE_DECL, TYPE_HAND, TYPE_PLAY = 0, 1, 2
TOKENIZER_VERSION = "transcript_v1"


def current_hand_order(games) -> torch.Tensor:
    """slot_of_position [G, 7] int64: initial-hand slot of the i-th current-hand tile, -1 padded."""
    _, in_hand = games.hand_slots(games.current_player)
    slots = torch.arange(HAND_SIZE, device=games.device).expand_as(in_hand)
    # in-hand slots first, each group in slot order: sort on (not in hand, slot)
    order_key = torch.where(in_hand, slots, slots + HAND_SIZE)
    key_sorted, _ = torch.sort(order_key, dim=1)
    return torch.where(key_sorted < HAND_SIZE, key_sorted, torch.full_like(key_sorted, -1))


def _count_value(points: torch.Tensor) -> torch.Tensor:
    return torch.div(points, 5, rounding_mode="floor")          # 0, 5, 10 -> 0, 1, 2


def transcript_tokens(games) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [G, 36, 8] int8, lengths [G] int64) of every game's current decision.

    `games` is a `BatchedGames`; the actor is its current player. Finished games give the
    declaration token and the full transcript (hand empty).
    """
    G, dev = games.batch_size, games.device
    T = torch_tables(dev)
    actor = games.current_player
    slot_of_pos = current_hand_order(games)                          # [G, 7]
    hand_size = (slot_of_pos >= 0).sum(1)
    tiles_initial, _ = games.hand_slots(actor)
    hand_tiles = torch.where(slot_of_pos >= 0,
                             tiles_initial.gather(1, slot_of_pos.clamp(min=0)),
                             torch.full_like(slot_of_pos, -1))

    # place tile, relative player and type at their token positions; column MAX_TOKENS is a
    # dump for the (absent) plays beyond n_plays
    tile_at = torch.full((G, MAX_TOKENS + 1), -1, dtype=torch.int64, device=dev)
    player_at = torch.zeros_like(tile_at)
    type_at = torch.zeros_like(tile_at)
    tile_at[:, 1:HAND_SIZE + 1] = hand_tiles
    type_at[:, 1:HAND_SIZE + 1] = torch.where(hand_tiles >= 0, TYPE_HAND, 0)
    play_j = torch.arange(N_TILES, device=dev)[None, :]
    is_play = play_j < games.n_plays[:, None]
    play_pos = torch.where(is_play, 1 + hand_size[:, None] + play_j,
                           torch.full_like(play_j.expand(G, -1), MAX_TOKENS))
    # plays start right after the hand, overwriting the hand's -1 padding
    tile_at.scatter_(1, play_pos, torch.where(is_play, games.tiles, -1))
    player_at.scatter_(1, play_pos, torch.where(is_play, (games.seats - actor[:, None]) % N_SEATS, 0))
    type_at.scatter_(1, play_pos, torch.where(is_play, TYPE_PLAY, 0))
    tile_at, player_at, type_at = tile_at[:, :MAX_TOKENS], player_at[:, :MAX_TOKENS], type_at[:, :MAX_TOKENS]

    lengths = 1 + hand_size + games.n_plays
    pos = torch.arange(MAX_TOKENS, device=dev)[None, :]
    live = pos < lengths[:, None]
    is_tile = tile_at >= 0
    t = tile_at.clamp(min=0)
    feats = torch.zeros(G, MAX_TOKENS, N_FEATURES, dtype=torch.int64, device=dev)
    feats[..., F_HIGH] = T["HIGH"][t]
    feats[..., F_LOW] = T["LOW"][t]
    feats[..., F_DOUBLE] = T["IS_DOUBLE"][t].long()
    feats[..., F_COUNT] = _count_value(T["POINTS"][t])
    feats[..., :F_PLAYER] *= is_tile[..., None]
    feats[..., F_PLAYER] = player_at
    feats[..., F_IN_HAND] = (type_at == TYPE_HAND).long()
    feats[..., F_DECL] = games.decl[:, None].expand(G, MAX_TOKENS)
    feats[..., F_TYPE] = type_at
    feats = torch.where(live[..., None], feats, torch.zeros_like(feats))
    return feats.to(torch.int8), lengths


def tokenize_transcript(my_hand, plays, decl_id: int, current_player: int) -> torch.Tensor:
    """One sequence [1 + len(my_hand) + len(plays), 8] int8, unpadded: the single-game
    form (my_hand: tile ids; plays: (absolute seat, tile id) pairs). A plain loop, kept as
    the readable reference that tests compare `transcript_tokens` against."""
    from ..rules.tables import HIGH, IS_DOUBLE, LOW, POINTS

    def tile_row(t, player, in_hand, ttype):
        return [int(HIGH[t]), int(LOW[t]), int(IS_DOUBLE[t]), int(POINTS[t]) // 5,
                player, in_hand, decl_id, ttype]

    rows = [[0, 0, 0, 0, 0, 0, decl_id, TYPE_DECL]]
    rows += [tile_row(t, 0, 1, TYPE_HAND) for t in sorted(int(x) for x in my_hand)]
    rows += [tile_row(int(t), (int(p) - current_player) % N_SEATS, 0, TYPE_PLAY) for p, t in plays]
    return torch.tensor(rows, dtype=torch.int8)
