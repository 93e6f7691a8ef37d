"""eqfast.stage2.behaviour.window_values: every (world, window step) value equals the Stage 2
model's μ on that world's game rebuilt alone from its deal and replayed play by play, put
in the actor's initial-hand slots by hand; the acting player's own past plays get the same
values in every world; steps before the first play are empty; each distinct actor's hand is
evaluated once; games at different decisions are refused."""
from __future__ import annotations

import pytest
import torch

from conftest import random_games

from eqfast.engine import sampling
from eqfast.engine.public import hidden_info
from eqfast.engine.transcript import current_hand_order
from eqfast.engine.worlds import world_tile_masks
from eqfast.rules.batched import BatchedGames
from eqfast.stage2 import load_stage2
from eqfast.stage2.behaviour import window_values
from eqfast.stage2.policy import stage2_mu

K, N = 6, 5


@pytest.fixture(scope="module")
def model():
    return load_stage2()


def _at_decision(seed: int, plays: int, G: int = 3) -> BatchedGames:
    games = random_games(G, seed, plays=(plays, plays))
    assert bool((games.n_plays == plays).all())
    return games


def _worlds(games: BatchedGames) -> torch.Tensor:
    info = hidden_info(games)
    counts = sampling.completion_counts(info)
    keys = torch.arange(games.batch_size, dtype=torch.int64) + 17
    sample = sampling.sample_worlds(info, counts, keys, N)
    return world_tile_masks(games, info, sample)[0]                      # [G, N, 4]


def _alone(model, games, initial, g: int, w: int, j: int):
    """μ and legal [7] in initial-hand slots at play j of world w of game g, computed on
    that one world's game replayed from its deal."""
    hands = [[t for t in range(28) if (int(initial[g, w, s]) >> t) & 1] for s in range(4)]
    first = int(games.seats[g, 0])
    one = BatchedGames.new([hands], games.decl[g:g + 1], torch.tensor([first]))
    for i in range(j):
        one = one.play_tile(games.tiles[g, i:i + 1])
    mu, legal, slot_of_pos = stage2_mu(model, one)
    out_mu, out_legal = torch.zeros(7), torch.zeros(7, dtype=torch.bool)
    for pos in range(7):
        slot = int(slot_of_pos[0, pos])
        if slot >= 0:
            out_mu[slot], out_legal[slot] = mu[0, pos], legal[0, pos]
    assert torch.equal(current_hand_order(one)[0], slot_of_pos[0])
    return out_mu, out_legal


@pytest.mark.parametrize("plays", [3, 13])
def test_each_value_equals_the_world_replayed_alone(model, plays):
    games = _at_decision(40 + plays, plays)
    initial = _worlds(games)
    mu, legal = window_values(model, games, initial, K)
    assert mu.shape == (3, N, K, 7) and legal.shape == (3, N, K, 7)
    for g in range(3):
        for w in (0, N - 1):
            for k in range(K):
                j = plays - K + k
                if j < 0:
                    assert not legal[g, w, k].any() and not mu[g, w, k].any()
                    continue
                want_mu, want_legal = _alone(model, games, initial, g, w, j)
                assert torch.equal(legal[g, w, k], want_legal)
                assert want_legal.any()
                torch.testing.assert_close(mu[g, w, k], want_mu, rtol=1e-5, atol=1e-4)


def test_own_past_plays_weigh_every_world_alike(model):
    games = _at_decision(7, 14)
    initial = _worlds(games)
    mu, legal = window_values(model, games, initial, K)
    actor = games.current_player
    checked = 0
    for g in range(3):
        for k in range(K):
            j = 14 - K + k
            if int(games.seats[g, j]) == int(actor[g]):
                assert torch.equal(legal[g, :, k], legal[g, :1, k].expand(N, 7))
                torch.testing.assert_close(mu[g, :, k], mu[g, :1, k].expand(N, 7),
                                           rtol=1e-5, atol=1e-4)
                checked += 1
    assert checked >= 3


def test_each_distinct_actor_hand_is_evaluated_once(model):
    """The forward runs once per (game, window step, actor's hand in the world): the count
    equals the distinct triples listed by hand, and the acting player's own steps take one
    row per game."""
    plays = 14
    games = _at_decision(9, plays)
    initial = _worlds(games)
    counts = {}
    window_values(model, games, initial, K, counts)
    distinct = set()
    for g in range(3):
        for j in range(plays - K, plays):
            seat = int(games.seats[g, j])
            distinct |= {(g, j, int(initial[g, w, seat])) for w in range(N)}
    assert counts["rows"] == len(distinct) < 3 * N * K
    actor = games.current_player
    own = [(g, j) for g in range(3) for j in range(plays - K, plays)
           if int(games.seats[g, j]) == int(actor[g])]
    assert own and all(sum(1 for t in distinct if t[:2] == gj) == 1 for gj in own)


def test_games_at_different_decisions_are_refused(model):
    games = random_games(2, 3, plays=(2, 9))
    if int(games.n_plays[0]) == int(games.n_plays[1]):
        games = random_games(2, 4, plays=(2, 9))
    assert int(games.n_plays[0]) != int(games.n_plays[1])
    with pytest.raises(ValueError, match="one decision"):
        window_values(model, games, torch.zeros(2, N, 4, dtype=torch.int64), K)
