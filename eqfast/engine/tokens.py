"""Stage 3+4 of the E[Q] engine fused: oracle tokens of every sampled world (reference).

    tokenize_worlds(games, info, sample) -> (codes [G*N, 28] int64, slot_tiles [G*N, 7] int64)

Row g*N + i is the current decision of game g in world i of `sample` (as in
`worlds.build_oracle_batch`). `codes` are the Stage 1 oracle tokens
(`eqfast.oracle.tokenizer`, TOKEN_LAYOUT_VERSION 1: one code per tile) and `slot_tiles` the
tile ids of the actor's 7 initial-hand slots (`actor_slot_tiles`: the tiles whose predicted
values are the Q vector).

This reference is, by definition, the composition

    tokenize(build_oracle_batch(games, info, sample)), actor_slot_tiles(...)

so it is right exactly when those two are. It materializes the whole OracleBatch (hands
[G*N,4,7] and remaining slot masks) only to read it back; `eqfast.kernels.tokenize_worlds`
(same signature, equal bit for bit) computes the codes straight from the public state and
the sampled owners instead.
"""
from __future__ import annotations

import torch

from ..oracle.tokenizer import actor_slot_tiles, tokenize_batch
from ..rules.batched import BatchedGames
from ..rules.tables import HAND_SIZE, N_TILES
from .public import HiddenInfo
from .sampling import WorldSample
from .worlds import build_oracle_batch


def tokenize_worlds(games: BatchedGames, info: HiddenInfo,
                    sample: WorldSample) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes [G*N, 28] int64, slot_tiles [G*N, 7] int64) of every world of every decision."""
    G, N = sample.owner.shape[:2]
    if G * N == 0:   # `tokenize` cannot reshape an empty batch; no rows, no codes
        empty = lambda width: torch.empty(0, width, dtype=torch.int64, device=info.device)
        return empty(N_TILES), empty(HAND_SIZE)
    batch = build_oracle_batch(games, info, sample)
    return tokenize_batch(batch), actor_slot_tiles(batch.hands, batch.actor)
