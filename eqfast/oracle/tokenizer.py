"""The Stage 1 oracle tokenizer: one integer code per tile, 28 codes per position.

A perfect-information position's value to go depends only on: the declaration, where each
of the 28 tiles is now (in some seat's hand, in the current trick, or gone), and who acts.
Everything is seen from the actor ("relative seat" r = (seat - actor) % 4: 0 me, 1 left
opponent, 2 partner, 3 right opponent), so one network serves all four seats and both teams.

Layout (TOKEN_LAYOUT_VERSION 1). Row n gives codes[n, t] for tile id t = 0..27:

    status(t) = r                       tile in the hand of relative seat r       0..3
              = 4 + k*(k-1)/2 + p       tile at position p (0-based, in play       4..9
                                        order) of the current trick of k tiles
              = 10                      tile played in an earlier trick           10
    codes[n, t] = (decl * 28 + t) * N_STATUS + status(t)          in 0 .. N_CODES-1

(N_STATUS = 11, N_CODES = 10*28*11 = 3080.) The current trick's position p and its length k
together say who played the tile (relative seat (p - k) % 4) and who led; the count of
status-10 tiles says which trick this is. Tiles of padded (shortened) hands, -1 in `hands`,
are simply absent: they read as status 10.

Folding decl and tile id into the code lets the first layer be an embedding *sum*
(`EmbeddingBag`), which equals one-hot(3080) x Linear but costs 28 row-gathers instead of a
3080-wide matmul.

The output side: the network predicts a value for each of the 28 tiles; `actor_slot_tiles`
gives the tile ids of the actor's 7 initial-hand slots, whose values are the Q vector.

Pure PyTorch, batched, no Python loop over rows (the only loop is over the 3 trick
positions); a Triton kernel must reproduce `tokenize` bit for bit.
"""
from __future__ import annotations

import torch

from ..rules.tables import N_DECLS, N_TILES

TOKEN_LAYOUT_VERSION = 1
N_STATUS = 11
STATUS_GONE = 10
N_CODES = N_DECLS * N_TILES * N_STATUS


def trick_status(p: int, k: int) -> int:
    """Status code of the tile at position p of a current trick holding k tiles."""
    if not 0 <= p < k <= 3:
        raise ValueError(f"need 0 <= p < k <= 3, got p={p}, k={k}")
    return 4 + k * (k - 1) // 2 + p


def tokenize(hands: torch.Tensor, remaining: torch.Tensor, decl: torch.Tensor,
             trick: torch.Tensor, actor: torch.Tensor) -> torch.Tensor:
    """Codes [N, 28] int64 of N positions (fields as in `OracleBatch`; the leader is implied).

    hands [N,4,7] initial hands (tile ids, -1 pads), remaining [N,4] 7-bit slot masks,
    decl [N], trick [N,3] (tile ids in play order, -1 padded), actor [N].
    """
    # TorchScript cannot read module globals: literals 4 seats, 7 slots, 28 tiles (+1 dump
    # column), STATUS_GONE = 10, N_STATUS = 11.
    n = hands.shape[0]
    dev = hands.device
    seats = torch.arange(4, device=dev)
    rel_seat = (seats[None, :] - actor[:, None]) % 4                       # [N, 4]
    # slot bits by AND with 2**slot: ONNX has no tensor shifts, and the powers are computed
    # on the device (a tensor built from host values would be a copy inside a CUDA graph)
    slot_bits = torch.pow(torch.full((7,), 2, dtype=remaining.dtype, device=dev),
                          torch.arange(7, dtype=remaining.dtype, device=dev))
    in_hand = (remaining[:, :, None] & slot_bits) != 0
    gone = torch.full_like(hands, 10)
    hand_status = torch.where(in_hand, rel_seat[:, :, None].expand_as(hands), gone)
    # Column 28 is a dump for -1 (padding) indices; it is dropped at the end.
    status = torch.full((n, 29), 10, dtype=torch.int64, device=dev)
    dump = torch.full_like(hands, 28)
    status.scatter_(1, torch.where(hands >= 0, hands, dump).reshape(n, 28),
                    hand_status.reshape(n, 28))
    # Trick tiles are out of every hand (gone above) and get their trick status here.
    k = (trick >= 0).sum(dim=1)
    base = 4 + k * (k - 1) // 2
    for p in range(3):
        tile = trick[:, p]
        col = torch.where(tile >= 0, tile, torch.full_like(tile, 28))
        status.scatter_(1, col[:, None], (base + p)[:, None])
    tile_ids = torch.arange(28, device=dev)
    return (decl[:, None] * 28 + tile_ids[None, :]) * 11 + status[:, :28]


def tokenize_batch(batch) -> torch.Tensor:
    """`tokenize` of an `OracleBatch`."""
    return tokenize(batch.hands, batch.remaining, batch.decl, batch.trick, batch.actor)


def actor_slot_tiles(hands: torch.Tensor, actor: torch.Tensor) -> torch.Tensor:
    """Tile ids [N, 7] of the actor's initial-hand slots (-1 pads clamped to tile 0)."""
    rows = torch.arange(hands.shape[0], device=hands.device)
    return hands[rows, actor].clamp(min=0)
