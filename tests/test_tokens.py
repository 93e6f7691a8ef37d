"""The pure-PyTorch split tokenizer (the CPU backend's) equals the definitional reference
tokenize(build_oracle_batch(...)) bit for bit."""
from __future__ import annotations

import pytest
import torch

from conftest import random_games
from eqfast.engine.public import hidden_info
from eqfast.engine.sampling import completion_counts, sample_worlds
from eqfast.engine.tokens import tokenize_worlds, tokenize_worlds_split
from eqfast.engine.worlds import true_world


@pytest.mark.parametrize("plays", [0, 1, 2, 3, 6, 13, 22, 27])
@pytest.mark.parametrize("n", [1, 7, 100])
def test_split_equals_reference(plays, n):
    games = random_games(6, seed=100 + plays, plays=(plays, plays))
    info = hidden_info(games)
    counts = completion_counts(info)
    sample = sample_worlds(info, counts, torch.arange(6, dtype=torch.int64) * 7919 + plays, n)
    codes_ref, slots_ref = tokenize_worlds(games, info, sample)
    codes, slots = tokenize_worlds_split(games, info, sample)
    assert torch.equal(codes, codes_ref)
    assert torch.equal(slots, slots_ref)


def test_split_on_the_true_world_and_shortened_hands():
    for hand_size in (3, 7):
        games = random_games(5, seed=7, plays=(2, 2), hand_size=hand_size)
        info = hidden_info(games)
        sample = true_world(games, info)
        assert torch.equal(tokenize_worlds_split(games, info, sample)[0],
                           tokenize_worlds(games, info, sample)[0])
