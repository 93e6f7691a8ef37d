"""Random playouts, single (`GameState`) and batched (`BatchedGames`) in lockstep.

Invariants asserted at every step (pgx api_test style): legal moves exist until the end,
follow-suit is obeyed, the points so far equal the completed tricks plus their count, and
the batched games equal the single games (legal moves, current player, leader, trick,
points, voids, remaining hands). At the end: every tile played exactly once and 42 points
per full hand (k + count of the dealt tiles for shortened hands).
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from eqfast.rules import BatchedGames, GameState, deal_from_seed
from eqfast.rules.tables import FOLLOWS, LED_SUIT, POINTS


def random_hands(rng: random.Random, k: int) -> list[list[int]]:
    """A seeded deal cut down to k random tiles per seat (k=7: the full deal)."""
    deal = deal_from_seed(rng.getrandbits(63)).tolist()
    return [sorted(rng.sample(hand, k)) for hand in deal]


def check_legal(state: GameState, legal: list[int]) -> None:
    hand = state.hands[state.current_player]
    assert legal and set(legal) <= set(hand)
    if not state.trick:
        assert legal == sorted(hand)  # leading: anything
        return
    led = LED_SUIT[state.decl, state.trick[0]]
    followers = sorted(t for t in hand if FOLLOWS[state.decl, led, t])
    assert legal == (followers or sorted(hand))


def check_points(state: GameState) -> None:
    done = len(state.plays) - len(state.trick)  # plays in completed tricks
    played = [t for _, t in state.plays[:done]]
    assert sum(state.points) == done // 4 + sum(int(POINTS[t]) for t in played)


def check_end(state: GameState, hands: list[list[int]]) -> None:
    k = len(hands[0])
    dealt = sorted(t for h in hands for t in h)
    played = [t for _, t in state.plays]
    assert state.is_over and len(played) == 4 * k
    assert sorted(played) == dealt  # every tile exactly once
    for seat in range(4):
        assert sorted(t for s, t in state.plays if s == seat) == sorted(hands[seat])
    assert sum(state.points) == k + sum(int(POINTS[t]) for t in dealt)
    if k == 7:
        assert sum(state.points) == 42


def play_single(hands, decl, leader, rng) -> GameState:
    s = GameState.new(hands, decl, leader)
    while not s.is_over:
        legal = s.legal_moves()
        check_legal(s, legal)
        s = s.play(rng.choice(legal))
        check_points(s)
    assert s.legal_moves() == []
    check_end(s, hands)
    return s


def test_single_random_games():
    rng = random.Random(20240601)
    totals = []
    for game in range(120):
        s = play_single(random_hands(rng, 7), decl=game % 10, leader=game // 10 % 4, rng=rng)
        totals.append(s.score)
    assert len(set(totals)) > 5  # the games really differ


def void_sets(mask: int) -> set[int]:
    return {s for s in range(8) if mask >> s & 1}


def compare(games: BatchedGames, singles: list[GameState]) -> None:
    legal = games.legal_mask()
    cur = games.current_player.tolist()
    leader = games.leader.tolist()
    points = games.points.tolist()
    voids = games.voids.tolist()
    trick = games.trick.tolist()
    over = games.is_over.tolist()
    hands = games.hands.tolist()
    remaining = games.remaining.tolist()
    for g, s in enumerate(singles):
        assert over[g] == s.is_over, g
        assert leader[g] == s.leader and tuple(points[g]) == s.points, g
        assert [void_sets(m) for m in voids[g]] == s.voids(), g
        assert [t for t in trick[g] if t >= 0] == list(s.trick), g
        for seat in range(4):
            held = [t for i, t in enumerate(hands[g][seat]) if remaining[g][seat] >> i & 1]
            assert held == list(s.hands[seat]), (g, seat)
        if s.is_over:
            assert not legal[g].any(), g
            continue
        assert cur[g] == s.current_player, g
        tiles = hands[g][s.current_player]
        assert sorted(tiles[i] for i in range(7) if legal[g, i]) == s.legal_moves(), g


def run_lockstep(B: int, k: int, seed: int) -> None:
    rng = random.Random(seed)
    deals = [random_hands(rng, k) for _ in range(B)]
    decl = [rng.randrange(10) for _ in range(B)]
    leader = [rng.randrange(4) for _ in range(B)]
    singles = [GameState.new(h, d, l) for h, d, l in zip(deals, decl, leader)]
    games = BatchedGames.new(deals, decl, leader)
    for step in range(4 * k):
        compare(games, singles)
        tiles = []
        for g, s in enumerate(singles):
            legal = s.legal_moves()
            check_legal(s, legal)
            tiles.append(rng.choice(legal))
            singles[g] = s.play(tiles[-1])
            check_points(singles[g])
        games = games.play_tile(torch.tensor(tiles))
    compare(games, singles)
    assert games.is_over.all()
    for g, s in enumerate(singles):
        check_end(s, deals[g])
    # the batched public transcript equals the single game's plays
    n = 4 * k
    assert games.n_plays.tolist() == [n] * B
    for g, s in enumerate(singles):
        assert list(zip(games.seats[g, :n].tolist(), games.tiles[g, :n].tolist())) == list(s.plays)
    assert (games.seats[:, n:] == -1).all() and (games.tiles[:, n:] == -1).all()
    # finished games ignore further plays
    after = games.play(torch.zeros(B, dtype=torch.int64))
    assert torch.equal(after.points, games.points) and torch.equal(after.n_plays, games.n_plays)


def test_batched_equals_single_full_hands():
    run_lockstep(B=200, k=7, seed=7)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 6])
def test_batched_equals_single_shortened_hands(k):
    run_lockstep(B=40, k=k, seed=100 + k)


def test_batched_rejects_illegal_slot():
    hands = deal_from_seed(3)
    games = BatchedGames.new(hands[None], [9], [0]).play(torch.tensor([0]))
    legal = games.legal_mask()[0]
    assert not legal.all(), "the fixture must give seat 1 a forced follow (pick another seed)"
    bad = int(torch.nonzero(~legal)[0])
    with pytest.raises(ValueError, match="not legal"):
        games.play(torch.tensor([bad]))
    with pytest.raises(ValueError):
        games.play(torch.tensor([7]))  # out of range slot
    assert np.array_equal(hands, deal_from_seed(3))
