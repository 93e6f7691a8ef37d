"""Shared test fixtures and helpers: seeding, poisoning of torch.empty outputs, and random
mid-hand game states from playouts with BatchedGames.

Triton kernels run under the interpreter when no CUDA device is present: TRITON_INTERPRET
must be set before any `triton.jit` function is defined, so it is set here, before any
test module imports eqfast.kernels.
"""
from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

try:  # decide the Triton mode once, before any kernel module is imported
    _HAS_CUDA = torch.cuda.is_available()
except Exception:  # pragma: no cover - broken CUDA install
    _HAS_CUDA = False
if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

from eqfast.rules.batched import BatchedGames  # noqa: E402
from eqfast.rules.deal import deal_from_seed  # noqa: E402


@pytest.fixture(autouse=True)
def seeded():
    """Every test starts from the same global RNG state (tests should still pass seeds)."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill a tensor in place with a value no correct output contains (NaN for floats,
    -1 for integers, True for bools) so an element a kernel never writes shows up."""
    if t.dtype.is_floating_point:
        return t.fill_(float("nan"))
    if t.dtype == torch.bool:
        return t.fill_(True)
    return t.fill_(-1)


def random_games(n_games: int, seed: int, plays=(0, 27), hand_size: int = 7,
                 device="cpu") -> BatchedGames:
    """Games dealt from seeds seed..seed+n_games-1 (random decl and leader), each played
    with uniformly random legal moves for a random number of plays in [plays[0], plays[1]].
    hand_size < 7 deals the first hand_size tiles of each seat (a shortened endgame)."""
    gen = torch.Generator().manual_seed(seed)
    hands = np.stack([deal_from_seed(seed + g)[:, :hand_size] for g in range(n_games)])
    decl = torch.randint(0, 10, (n_games,), generator=gen)
    leader = torch.randint(0, 4, (n_games,), generator=gen)
    games = BatchedGames.new(hands, decl, leader, device=device)
    lo, hi = plays
    hi = min(hi, 4 * hand_size - 1)
    target = torch.randint(lo, hi + 1, (n_games,), generator=gen)
    snapshots = [games]
    for _ in range(hi):
        legal = games.legal_mask().float()
        legal[games.is_over] = 1.0
        slot = torch.multinomial(legal, 1, generator=gen)[:, 0]
        games = games.play(slot.to(games.device))
        snapshots.append(games)
    rows = torch.arange(n_games)
    fields = {f: torch.stack([getattr(s, f) for s in snapshots])[target, rows]
              for f in BatchedGames.__dataclass_fields__}
    return BatchedGames(**fields)
