"""Triton `play` (kernels/advance.py) against `BatchedGames.play`, bit for bit: every field of
the new state, at every play of whole games (leads, follows, voids, trick completion and
scoring, finished games left alone), all declarations, shortened deals of 1..7 tiles.

The kernel's outputs are poisoned with 0x55 before every run (no state field holds 85), so
an element it never writes fails. Runs under TRITON_INTERPRET=1 on the CPU (conftest sets
it) and natively on CUDA when present.
"""
from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from conftest import assert_identical, poison, random_games
from eqfast.rules.batched import BatchedGames
from eqfast.rules.tables import POINTS
from eqfast.utils.checks import host_checks_off

import eqfast.kernels
import eqfast.kernels.advance as kernel_module

pytestmark = pytest.mark.interpreter

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
POISON = 0x55


def to_device(games):
    return BatchedGames(**{f.name: getattr(games, f.name).to(DEVICE) for f in fields(games)})


def random_legal_slots(games, gen):
    """A uniformly random legal slot per game (0 for finished games)."""
    legal = games.legal_mask()
    score = torch.rand(legal.shape, generator=gen) + legal.float()
    return torch.where(legal.any(1), score.argmax(1), 0)


@pytest.mark.parametrize("hand_size", [1, 2, 4, 7])
def test_play_kernel_equals_reference_through_whole_games(hand_size, monkeypatch):
    allocate = kernel_module._empty_state
    monkeypatch.setattr(kernel_module, "_empty_state",
                        lambda g: {k: poison(v, POISON) for k, v in allocate(g).items()})
    games = random_games(24, 700 + hand_size, plays=(0, 0), hand_size=hand_size,
                         decl=torch.arange(24) % 10)
    gen = torch.Generator().manual_seed(hand_size)
    voids_seen = 0
    for _ in range(4 * hand_size + 1):          # one play past the end: finished games
        slot = random_legal_slots(games, gen)
        want = games.play(slot)
        got = eqfast.kernels.play(to_device(games), slot.to(DEVICE))
        for f in fields(BatchedGames):
            assert_identical(f.name, getattr(want, f.name), getattr(got, f.name))
        voids_seen += int((want.voids != games.voids).sum())
        games = want
    assert bool(games.is_over.all())
    # every trick scored: 1 a trick plus the points of the tiles in play
    tile_points = torch.as_tensor(POINTS, dtype=torch.int64)[games.hands.clamp(min=0)]
    in_play = torch.where(games.hands >= 0, tile_points, 0).sum((1, 2))
    assert torch.equal(games.points.sum(1), hand_size + in_play)
    if hand_size == 7:
        assert voids_seen > 0


def test_play_kernel_checks_legality_like_the_reference():
    games = random_games(3, 9, plays=(1, 1))
    illegal = (~games.legal_mask()).long().argmax(1)       # an illegal (or gone) slot
    with pytest.raises(ValueError, match="not legal"):
        games.play(illegal)
    with pytest.raises(ValueError, match="not legal"):
        eqfast.kernels.play(to_device(games), illegal.to(DEVICE))
    with pytest.raises(ValueError, match="slot must be"):
        eqfast.kernels.play(to_device(games), torch.zeros(2, dtype=torch.int64, device=DEVICE))
    with host_checks_off():                                  # unchecked: still the same state
        want = games.play(illegal)
        got = eqfast.kernels.play(to_device(games), illegal.to(DEVICE))
    for f in fields(BatchedGames):
        assert_identical(f.name, getattr(want, f.name), getattr(got, f.name))
