"""The `search` player (eqfast/play/search.py): its look-ahead is the game played on by
Stage 2 at every seat, valued as the module doc says. Checked against the real deal: with
the sampler stubbed to return the true world, every legal move's value must be what
stepping the real game with Stage 2 gives. (That it reads public information only is part
of tests/test_arena.py's information test.)"""
from __future__ import annotations

import pytest
import torch

from eqfast.engine.worlds import true_world
from eqfast.play import search as search_mod
from eqfast.stage2 import rollout as rollout_mod
from eqfast.play.arena import play_match, setup_games
from eqfast.play.policies import Stage2Policy, policy_from_spec
from eqfast.rules.batched import BatchedGames
from eqfast.stage2.policy import stage2_mu, stage2_slots

SEEDS = list(range(300, 306))


@pytest.fixture(scope="module")
def stage2():
    return Stage2Policy()


def games_at(d: int, mover) -> BatchedGames:
    hands, decl, leader = setup_games(SEEDS)
    games = BatchedGames.new(hands, decl, leader)
    for k in range(d):
        games = games.play(mover.decide(games, SEEDS, k))
    return games


def by_hand(games: BatchedGames, g: int, slot: int, turns: int, model) -> float:
    """Game g: the actor plays `slot`, then Stage 2 plays every seat until the actor's
    `turns`-th next turn (value: points so far + the actor's best μ there) or the end."""
    one = games.select(torch.tensor([g]))
    actor = int(one.current_player[0])
    sign = 1 if actor % 2 == 0 else -1
    start = int(one.score()[0])
    one = one.play(torch.tensor([slot]))
    seen = 0
    while not bool(one.is_over[0]):
        if int(one.current_player[0]) == actor:
            seen += 1
            if seen == turns:
                mu, legal, _ = stage2_mu(model, one)
                return sign * (int(one.score()[0]) - start) + float(mu[0][legal[0]].max())
        one = one.play(stage2_slots(model, one))
    return float(sign * (int(one.score()[0]) - start))


@pytest.mark.parametrize("d,turns", [(0, 1), (5, 2), (9, 7), (22, 1), (22, 7)])
def test_values_in_the_true_world_are_the_game_played_on(stage2, monkeypatch, d, turns):
    def true_sample(info, counts, keys, n):
        assert n == 1
        return true_world(current["games"], info)

    current = {"games": games_at(d, stage2)}
    monkeypatch.setattr(search_mod, "sample_worlds", true_sample)
    player = search_mod.SearchPolicy(n_worlds=1, turns=turns)
    games = current["games"]
    values = player.values(games, SEEDS, d)
    legal = games.legal_mask()
    assert torch.equal(torch.isfinite(values), legal)
    checked = 0
    for g in range(len(SEEDS)):
        for slot in torch.nonzero(legal[g])[:, 0].tolist():
            want = by_hand(games, g, slot, turns, stage2.model)
            assert float(values[g, slot]) == pytest.approx(want, abs=1e-4), (g, slot)
            checked += 1
    assert checked >= len(SEEDS)


def test_chunked_forwards_give_the_same_values(stage2, monkeypatch):
    games = games_at(6, stage2)
    player = search_mod.SearchPolicy(n_worlds=3, turns=2)
    want = player.values(games, SEEDS, 6)
    monkeypatch.setattr(rollout_mod, "CHUNK_ROWS", 7)
    got = player.values(games, SEEDS, 6)
    assert torch.allclose(got, want, atol=1e-4)
    assert bool(torch.isfinite(want).sum() * 3 > 7)     # more rows than one chunk


def test_forward_chunks_by_device():
    """256-row forwards on the CPU, larger ones on a GPU (the values are the same either
    way: the test above)."""
    assert rollout_mod.chunk_rows("cpu") == rollout_mod.CHUNK_ROWS == 256
    assert rollout_mod.chunk_rows(torch.device("cuda", 0)) == rollout_mod.DEVICE_CHUNK_ROWS
    assert rollout_mod.DEVICE_CHUNK_ROWS > rollout_mod.CHUNK_ROWS


def test_a_forced_move_is_played_without_search(stage2):
    """Decision 3 of a trick in which the actor has one legal tile, and every decision of
    the last trick: the only legal slot, whatever the worlds."""
    games = games_at(24, stage2)
    player = policy_from_spec("search:2:1")
    legal = games.legal_mask()
    assert bool((legal.sum(1) == 1).all())
    assert torch.equal(player.decide(games, SEEDS, 24), legal.long().argmax(1))


def test_search_plays_legal_moves_and_is_deterministic():
    a = policy_from_spec("search:2:1", run_seed=5)
    r1 = play_match(a, policy_from_spec("rules"), range(400, 403), batch=3)
    r2 = play_match(policy_from_spec("search:2:1", run_seed=5), policy_from_spec("rules"),
                    range(400, 403), batch=3)
    assert (r1.deal_diffs == r2.deal_diffs).all()


@pytest.mark.parametrize("spec,message", [
    ("search:x", "number of worlds must be a whole number"),
    ("search:4:y", "number of turns must be a whole number"),
    ("search:0", "number of worlds must be >= 1"),
    ("search:4:8", "1..7 of the actor's turns"),
    ("search:4:1:/no/such.safetensors", "does not exist"),
])
def test_bad_search_specs_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        policy_from_spec(spec)
