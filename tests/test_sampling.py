"""Stages 1-2 of the engine: hidden info and the exact-uniform world sampler.

Brute force here = every assignment of the pool tiles to the 3 hidden seats (3**n_pool,
n_pool <= 9), filtered by hand sizes and voids re-checked straight from the FOLLOWS table.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from conftest import random_games
from eqfast.engine.public import hidden_info
from eqfast.engine.sampling import (completion_counts, rank_worlds, sample_worlds, total_worlds,
                                    unrank)
from eqfast.engine.worlds import true_world
from eqfast.rules.deal import mix_seed
from eqfast.rules.tables import FOLLOWS, N_SUITS


def late_games(n_games, seed, max_pool=9):
    """Late-hand states (at most max_pool hidden tiles), many with voids."""
    games = random_games(n_games, seed, plays=(28 - max_pool - 4, 26))
    info = hidden_info(games)
    keep = torch.nonzero(info.n_pool <= max_pool)[:, 0]
    return games, info, keep


def holds_legally(games, g, seat, tile) -> bool:
    """seat may hold tile in game g: no void suit of seat that tile follows."""
    voids = int(games.voids[g, seat])
    decl = int(games.decl[g])
    return not any(voids >> s & 1 and FOLLOWS[decl, s, tile] for s in range(N_SUITS))


def brute_force_worlds(games, info, g):
    """All consistent owner tuples of game g (hidden seat per pool tile), in rank order."""
    n = int(info.n_pool[g])
    pool = info.pool[g, :n].tolist()
    seats = info.seats[g].tolist()
    sizes = info.sizes[g].tolist()
    worlds = []
    for owner in itertools.product(range(3), repeat=n):  # lexicographic = rank order
        if [owner.count(j) for j in range(3)] != sizes:
            continue
        if all(holds_legally(games, g, seats[o], t) for o, t in zip(owner, pool)):
            worlds.append(owner)
    return worlds


def test_hidden_info_pool_and_sizes():
    games = random_games(64, 11, plays=(0, 27))
    info = hidden_info(games)
    for g in range(64):
        actor = int(games.current_player[g])
        hidden = set()
        for s in range(4):
            slots = [k for k in range(7) if int(games.remaining[g, s]) >> k & 1]
            tiles = {int(games.hands[g, s, k]) for k in slots}
            if s != actor:
                hidden |= tiles
                j = (s - actor - 1) % 4
                assert int(info.sizes[g, j]) == len(tiles)
                assert int(info.seats[g, j]) == s
        n = int(info.n_pool[g])
        assert info.pool[g, :n].tolist() == sorted(hidden)
        assert (info.pool[g, n:] == -1).all() and (info.allowed[g, n:] == 0).all()
        for i, t in enumerate(info.pool[g, :n].tolist()):
            for j in range(3):
                want = holds_legally(games, g, int(info.seats[g, j]), t)
                assert bool(int(info.allowed[g, i]) >> j & 1) == want


def test_counts_equal_brute_force():
    games, info, keep = late_games(48, 21)
    counts = completion_counts(info)
    total = total_worlds(info, counts)
    assert len(keep) >= 20
    assert bool((games.voids[keep] != 0).any()), "cases should include voids"
    for g in keep.tolist():
        assert int(total[g]) == len(brute_force_worlds(games, info, g)), f"game {g}"


def test_counts_table_rows_by_brute_force():
    # every entry counts[g, i, a, b]: assignments of tiles i.. with needs (a, b, rest)
    games, info, keep = late_games(16, 5, max_pool=7)
    counts = completion_counts(info)
    for g in keep[:4].tolist():
        n = int(info.n_pool[g])
        may = [[int(info.allowed[g, i]) >> j & 1 for j in range(3)] for i in range(n)]
        for i in range(n + 1):
            for a in range(8):
                for b in range(8):
                    c = n - i - a - b
                    want = 0
                    if c >= 0:
                        for owner in itertools.product(range(3), repeat=n - i):
                            if [owner.count(j) for j in range(3)] == [a, b, c] and all(
                                    may[i + k][o] for k, o in enumerate(owner)):
                                want += 1
                    assert int(counts[g, i, a, b]) == want, (g, i, a, b)


def test_unrank_is_bijection_onto_consistent_worlds():
    games, info, keep = late_games(32, 33)
    counts = completion_counts(info)
    total = total_worlds(info, counts)
    for g in keep[:10].tolist():
        T = int(total[g])
        sub = lambda x: x[g:g + 1]
        from dataclasses import replace
        one = replace(info, **{f: sub(getattr(info, f)) for f in info.__dataclass_fields__})
        ranks = torch.arange(T)[None, :]
        owner = unrank(one, counts[g:g + 1], ranks)
        n = int(info.n_pool[g])
        listed = [tuple(row) for row in owner[0, :, :n].tolist()]
        assert listed == brute_force_worlds(games, info, g)   # same worlds, same order
        assert (owner[0, :, n:] == -1).all()
        assert torch.equal(rank_worlds(one, counts[g:g + 1], owner), ranks)


def check_worlds(games, info, sample):
    """Every world: sizes exact, voids respected, padding -1."""
    owner = sample.owner.long()
    G, N, _ = owner.shape
    pad = info.pool < 0
    assert (owner[pad[:, None, :].expand_as(owner)] == -1).all()
    assert ((owner >= 0) == ~pad[:, None, :]).all()
    for j in range(3):
        n_j = (owner == j).sum(-1)
        assert torch.equal(n_j, info.sizes[:, j:j + 1].expand(G, N)), f"seat {j} sizes"
        # voids re-checked from the FOLLOWS table, not from info.allowed
        seat = info.seats[:, j]
        voids = games.voids.gather(1, seat[:, None])[:, 0]
        follows = torch.as_tensor(FOLLOWS)[games.decl[:, None], :, info.pool.clamp(min=0)]  # [G,21,8]
        void_bits = (voids[:, None] >> torch.arange(N_SUITS)) & 1                        # [G,8]
        bad_tile = (follows & void_bits[:, None, :].bool()).any(-1)                       # [G,21]
        assert not (bad_tile[:, None, :] & (owner == j)).any(), f"seat {j} void violated"


@pytest.mark.parametrize("plays", [(0, 0), (1, 12), (12, 27)], ids=["opening", "early", "late"])
def test_sampled_worlds_satisfy_constraints(plays):
    games = random_games(40, 100 + plays[0], plays=plays)
    info = hidden_info(games)
    counts = completion_counts(info)
    keys = torch.tensor([mix_seed(1, g, 0, 0) for g in range(40)])
    sample = sample_worlds(info, counts, keys, 300)
    check_worlds(games, info, sample)
    total = sample.total
    assert torch.equal(sample.enumerated, total <= 300)
    assert torch.equal(sample.n_worlds, torch.where(total <= 300, total, 300))
    assert torch.equal(sample.valid.sum(1), sample.n_worlds)
    ranks = rank_worlds(info, counts, sample.owner)
    assert ((ranks >= 0) & (ranks < total[:, None])).all()
    # enumerated decisions list every world once, in rank order, then repeat
    for g in torch.nonzero(sample.enumerated)[:, 0].tolist():
        assert ranks[g].tolist() == [i % int(total[g]) for i in range(300)]


def test_true_world_is_in_support():
    games = random_games(64, 7, plays=(0, 27))
    info = hidden_info(games)
    counts = completion_counts(info)
    truth = true_world(games, info)
    check_worlds(games, info, truth)
    rank = rank_worlds(info, counts, truth.owner)
    assert ((rank >= 0) & (rank < total_worlds(info, counts)[:, None])).all()
    assert torch.equal(unrank(info, counts, rank), truth.owner)


def test_rank_worlds_rejects_inconsistent_world():
    games, info, keep = late_games(32, 3)
    counts = completion_counts(info)
    truth = true_world(games, info).owner.clone()
    g = keep[0].item()
    truth[g, 0, 0] = (truth[g, 0, 0] + 1) % 3        # one seat too many, one too few
    assert rank_worlds(info, counts, truth)[g, 0] == -1


def test_sampling_is_deterministic_by_key_and_varies_with_it():
    games = random_games(8, 1, plays=(4, 8))
    info = hidden_info(games)
    counts = completion_counts(info)
    k1 = torch.tensor([mix_seed(9, g, 4, 0) for g in range(8)])
    a = sample_worlds(info, counts, k1, 50)
    b = sample_worlds(info, counts, k1.clone(), 50)
    c = sample_worlds(info, counts, k1 + 1, 50)
    assert torch.equal(a.owner, b.owner)
    assert not torch.equal(a.owner, c.owner)
    # a world's draw depends only on (key, world index): a prefix of a larger draw
    d = sample_worlds(info, counts, k1, 80)
    assert torch.equal(d.owner[:, :50], a.owner)


def chi_square_p(observed: np.ndarray, expected: float) -> float:
    """Upper-tail p-value of Pearson's chi-square against a flat expectation."""
    stat = float(((observed - expected) ** 2 / expected).sum())
    dof = len(observed) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def test_uniformity_chi_square():
    """Small endgames with voids: draw R decisions x n worlds (n < total, so the random
    path, not enumeration) and compare the world histogram with the exhaustive list.
    Each case fails with probability 1e-3 if the sampler is exactly uniform; seeds are
    fixed so the outcome is deterministic (p-values are printed on failure)."""
    games, info, keep = late_games(64, 77, max_pool=8)
    counts = completion_counts(info)
    total = total_worlds(info, counts)
    cases = [g for g in keep.tolist() if 6 <= int(total[g]) <= 200 and int(games.voids[g].sum()) > 0]
    assert len(cases) >= 3
    for g in cases[:4]:
        T = int(total[g])
        R, n = 400, max(1, T // 2)
        rep = lambda x: x[g:g + 1].expand(R, *x.shape[1:])
        from dataclasses import replace
        many = replace(info, **{f: rep(getattr(info, f)) for f in info.__dataclass_fields__})
        keys = torch.tensor([mix_seed(123, g, r) for r in range(R)])
        sample = sample_worlds(many, rep(counts), keys, n)
        assert not sample.enumerated.any()
        ranks = rank_worlds(many, rep(counts), sample.owner).flatten()
        assert (ranks >= 0).all()
        hist = np.bincount(ranks.numpy(), minlength=T)
        assert len(hist) == T
        p = chi_square_p(hist, R * n / T)
        assert p > 1e-3, f"game {g}: {T} worlds, chi-square p = {p:.2e}"
