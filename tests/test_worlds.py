"""Stage 3 of the engine: sampled worlds as oracle positions, now and at past plays."""
from __future__ import annotations

import pytest
import torch

from conftest import random_games
from eqfast.engine.public import hidden_info
from eqfast.engine.sampling import completion_counts, sample_worlds
from eqfast.engine.worlds import (build_oracle_batch, prefix_oracle_batch, true_world,
                                  world_tile_masks)
from eqfast.oracle.protocol import legal_slots
from eqfast.rules.batched import BatchedGames
from eqfast.rules.deal import mix_seed


def sampled(games, n, stream=0):
    info = hidden_info(games)
    counts = completion_counts(info)
    keys = torch.tensor([mix_seed(5, g, int(games.n_plays[g]), stream)
                         for g in range(games.batch_size)])
    return info, sample_worlds(info, counts, keys, n)


def replay(games: BatchedGames, n_plays: int) -> list[BatchedGames]:
    """Snapshots 0..n_plays of games that all made exactly n_plays plays, rebuilt from the
    initial hands and the transcript."""
    assert bool((games.n_plays == n_plays).all())
    k = int((games.hands[0, 0] >= 0).sum())
    first = games.seats[:, 0] if n_plays > 0 else games.leader
    g = BatchedGames.new(games.hands[:, :, :k], games.decl, first)
    out = [g]
    for j in range(n_plays):
        g = g.play_tile(games.tiles[:, j])
        out.append(g)
    return out


@pytest.mark.parametrize("hand_size,plays", [(7, (0, 27)), (7, (20, 27)), (3, (0, 11))],
                         ids=["full", "late", "short3"])
def test_true_world_rebuilds_the_real_position(hand_size, plays):
    games = random_games(48, 40 + hand_size, plays=plays, hand_size=hand_size)
    info = hidden_info(games)
    batch = build_oracle_batch(games, info, true_world(games, info))
    assert torch.equal(batch.hands, games.hands)
    assert torch.equal(batch.remaining, games.remaining)
    assert torch.equal(batch.decl, games.decl) and torch.equal(batch.leader, games.leader)
    assert torch.equal(batch.trick, games.trick[:, :3])
    assert torch.equal(batch.actor, games.current_player)


@pytest.mark.parametrize("hand_size,plays", [(7, (0, 27)), (5, (0, 19))], ids=["full", "short5"])
def test_oracle_batch_invariants(hand_size, plays):
    G, N = 24, 37
    games = random_games(G, 300 + hand_size, plays=plays, hand_size=hand_size)
    info, sample = sampled(games, N)
    batch = build_oracle_batch(games, info, sample)
    assert len(batch) == G * N
    hands = batch.hands.reshape(G, N, 4, 7)
    rem = batch.remaining.reshape(G, N, 4)

    # hands: sorted, -1 only at the end, and together a partition of the dealt tiles
    real = hands >= 0
    assert (real.sum(-1) == hand_size).all()
    assert (hands[..., hand_size:] == -1).all()
    assert (hands[..., 1:hand_size] > hands[..., :hand_size - 1]).all()
    dealt = torch.zeros(G, 28, dtype=torch.long)
    dealt.scatter_(1, games.hands.reshape(G, -1).clamp(min=0), 1)
    per_world = torch.zeros(G, N, 29, dtype=torch.long)
    per_world.scatter_add_(2, hands.reshape(G, N, -1).clamp(min=-1) % 29, real.reshape(G, N, -1).long())
    assert torch.equal(per_world[..., :28], dealt[:, None].expand(G, N, 28))

    # remaining masks: only real slots, sizes match, played tiles are out of hand
    slot_bits = (rem[..., None] >> torch.arange(7)) & 1
    assert not (slot_bits.bool() & ~real).any()
    rows = torch.arange(G)
    n_rem = slot_bits.sum(-1)                                             # [G,N,4]
    assert torch.equal(n_rem.gather(2, info.seats[:, None, :].expand(G, N, 3)),
                       info.sizes[:, None, :].expand(G, N, 3))
    actor_rem = (((games.remaining[rows, info.actor, None] >> torch.arange(7)) & 1).sum(-1))
    assert torch.equal(n_rem[rows, :, info.actor], actor_rem[:, None].expand(G, N))
    for g in range(G):
        for j in range(int(games.n_plays[g])):
            s, t = int(games.seats[g, j]), int(games.tiles[g, j])
            slot = (hands[g, :, s] == t).long().argmax(-1)                # played by s ...
            assert (hands[g, :, s] == t).any(-1).all()
            assert ((rem[g, :, s] >> slot) & 1 == 0).all()                # ... and gone
    # the actor's hand is its real one; legal slots agree with the game's rules
    assert torch.equal(hands[rows, :, info.actor], games.hands[rows, None, info.actor].expand(G, N, 7))
    assert torch.equal(legal_slots(batch).reshape(G, N, 7),
                       games.legal_mask()[:, None].expand(G, N, 7))


@pytest.mark.parametrize("n_plays", [0, 3, 9, 26])
def test_prefix_batch_of_true_world_matches_replay(n_plays):
    G, K = 16, 8
    games = random_games(G, 500 + n_plays, plays=(n_plays, n_plays))
    info = hidden_info(games)
    initial, _ = world_tile_masks(games, info, true_world(games, info))
    pre = prefix_oracle_batch(games, initial, K)
    snaps = replay(games, n_plays)
    b = pre.batch
    assert len(b) == G * K
    for k in range(K):
        j = n_plays - K + k
        rows = torch.arange(G) * K + k
        assert bool((pre.valid[:, k] == (j >= 0)).all())
        assert bool((pre.step[:, k] == j).all())
        if j < 0:
            assert bool((pre.observed_slot[:, 0, k] == -1).all())
            assert bool((b.trick[rows] == -1).all())
            continue
        s = snaps[j]
        assert torch.equal(b.hands[rows], s.hands)
        assert torch.equal(b.remaining[rows], s.remaining)
        assert torch.equal(b.leader[rows], s.leader)
        assert torch.equal(b.trick[rows], s.trick[:, :3])
        assert torch.equal(b.actor[rows], s.current_player)
        assert torch.equal(b.decl[rows], s.decl)
        # the observed slot is the one the real game played
        played = s.hands[torch.arange(G), s.current_player, pre.observed_slot[:, 0, k]]
        assert torch.equal(played, games.tiles[:, j])


def test_prefix_batch_of_sampled_worlds_explains_the_transcript():
    # in every consistent world each observed play is in the actor's hand and legal
    G, N, K = 20, 30, 8
    games = random_games(G, 900, plays=(1, 27))
    info, sample = sampled(games, N)
    initial, _ = world_tile_masks(games, info, sample)
    pre = prefix_oracle_batch(games, initial, K)
    b = pre.batch
    slot = pre.observed_slot                                              # [G,N,K]
    valid = pre.valid[:, None, :].expand(G, N, K)
    assert (slot[valid] >= 0).all() and (slot[~valid] == -1).all()
    hands = b.hands.reshape(G, N, K, 4, 7)
    actor = b.actor.reshape(G, N, K)
    tile_at = hands.gather(3, actor[..., None, None].expand(G, N, K, 1, 7))[..., 0, :]
    got = tile_at.gather(3, slot.clamp(min=0)[..., None])[..., 0]
    want = pre.observed_tile[:, None, :].expand(G, N, K)
    assert torch.equal(got[valid], want[valid])
    legal = legal_slots(b).reshape(G, N, K, 7)
    assert legal.gather(3, slot.clamp(min=0)[..., None])[..., 0][valid].all()
    # the observed tile is still in hand at its step, and hands match the current batch
    rem = b.remaining.reshape(G, N, K, 4).gather(3, actor[..., None])[..., 0]
    assert ((rem >> slot.clamp(min=0)) & 1)[valid].bool().all()
    now = build_oracle_batch(games, info, sample)
    assert torch.equal(hands[:, :, 0], now.hands.reshape(G, N, 4, 7))


def test_prefix_window_validation():
    games = random_games(2, 1, plays=(3, 3))
    info = hidden_info(games)
    initial, _ = world_tile_masks(games, info, true_world(games, info))
    with pytest.raises(ValueError, match="window"):
        prefix_oracle_batch(games, initial, 0)
