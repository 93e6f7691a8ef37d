"""Action selection (eqfast/engine/policy.py): each mode, the order blunder -> epsilon -> boltzmann,
determinism by key, and the recorded q_gap / entropy."""
import math

import pytest
import torch

from eqfast.engine.policy import (MODE_BLUNDER, MODE_BOLTZMANN, MODE_EPSILON, MODE_GREEDY,
                                  ExplorationConfig, select_actions)

NEG = -99.0


def _rows(values, legal_slots, G):
    e_q = torch.tensor(values, dtype=torch.float32).expand(G, 7).clone()
    legal = torch.zeros(G, 7, dtype=torch.bool)
    legal[:, legal_slots] = True
    return e_q, legal


def test_greedy_ignores_illegal_and_breaks_ties_low():
    e_q, legal = _rows([5.0, 9.0, 7.0, 7.0, 1.0, 0.0, 0.0], [0, 2, 3, 4], 3)   # 9.0 illegal
    sel = select_actions(e_q, legal, ExplorationConfig(), torch.arange(3))
    assert sel.slot.tolist() == [2, 2, 2]
    assert sel.mode.tolist() == [MODE_GREEDY] * 3 and sel.mode.dtype == torch.int8
    assert sel.q_gap.tolist() == [0.0] * 3


def test_entropy_of_temperature_one_softmax():
    e_q, legal = _rows([3.0, 3.0, 3.0, 0.0, 0.0, 0.0, 0.0], [0, 1, 2], 1)
    sel = select_actions(e_q, legal, ExplorationConfig(), torch.tensor([1]))
    assert sel.entropy.item() == pytest.approx(math.log(3), rel=1e-6)
    e_q, legal = _rows([0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0, 1], 1)
    p = torch.softmax(torch.tensor([0.0, 1.0], dtype=torch.float64), 0)
    sel = select_actions(e_q, legal, ExplorationConfig(), torch.tensor([1]))
    assert sel.entropy.item() == pytest.approx(float(-(p * p.log()).sum()), rel=1e-6)


def test_deterministic_given_keys():
    gen = torch.Generator().manual_seed(0)
    e_q = torch.randn(200, 7, generator=gen) * 5
    legal = torch.rand(200, 7, generator=gen) < 0.6
    legal[:, 0] = True
    cfg = ExplorationConfig(temperature=2.0, epsilon=0.2, blunder_rate=0.2)
    keys = torch.arange(1000, 1200)
    a = select_actions(e_q, legal, cfg, keys)
    b = select_actions(e_q, legal, cfg, keys)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    c = select_actions(e_q, legal, cfg, keys + 7)
    assert not torch.equal(a.slot, c.slot)
    # a decision depends on its own key only, not on the batch around it
    d = select_actions(e_q[50:60], legal[50:60], cfg, keys[50:60])
    assert torch.equal(d.slot, a.slot[50:60]) and torch.equal(d.mode, a.mode[50:60])
    assert legal.gather(1, a.slot[:, None]).all()


def test_epsilon_one_is_uniform_over_legal():
    G = 6000
    e_q, legal = _rows([4.0, 0.0, 1.0, 2.0, 3.0, 0.0, 0.0], [0, 2, 4], G)
    sel = select_actions(e_q, legal, ExplorationConfig(epsilon=1.0), torch.arange(G))
    assert (sel.mode == MODE_EPSILON).all()
    counts = torch.bincount(sel.slot, minlength=7)
    assert counts[[1, 3, 5, 6]].sum() == 0
    assert (counts[[0, 2, 4]] - G / 3).abs().max() < 5 * math.sqrt(G / 3)     # ~5 sigma
    torch.testing.assert_close(sel.q_gap, 4.0 - e_q[0, sel.slot])


def test_boltzmann_frequencies_follow_softmax():
    G = 6000
    e_q, legal = _rows([2.0, 0.0, 1.0, NEG, 0.0, 0.0, 0.0], [0, 1, 2], G)
    T = 1.5
    sel = select_actions(e_q, legal, ExplorationConfig(temperature=T), torch.arange(G) + 5)
    assert (sel.mode == MODE_BOLTZMANN).all()
    p = torch.softmax(torch.tensor([2.0, 0.0, 1.0]) / T, 0)
    freq = torch.bincount(sel.slot, minlength=7).double() / G
    assert freq[3:].sum() == 0
    for s in range(3):
        assert abs(freq[s] - p[s]) < 5 * math.sqrt(p[s] * (1 - p[s]) / G)


def test_blunder_picks_bounded_regret_suboptimal_moves():
    G = 3000
    # best 10 (slot 0); regrets: slot 1 -> 1, slot 2 -> 2.5, slot 3 -> 4 (too much), slot 4 tie
    e_q, legal = _rows([10.0, 9.0, 7.5, 6.0, 10.0, 0.0, 0.0], [0, 1, 2, 3, 4], G)
    cfg = ExplorationConfig(blunder_rate=1.0, blunder_max_regret=3.0, epsilon=1.0)
    sel = select_actions(e_q, legal, cfg, torch.arange(G))
    assert (sel.mode == MODE_BLUNDER).all()              # blunder comes before epsilon
    counts = torch.bincount(sel.slot, minlength=7)
    assert counts[[0, 3, 4, 5, 6]].sum() == 0
    assert abs(int(counts[1]) - G / 2) < 5 * math.sqrt(G / 4)
    assert ((sel.q_gap > 0) & (sel.q_gap <= 3.0)).all()


def test_blunder_without_candidates_falls_through():
    G = 50
    # the only suboptimal move has regret 5 > 3: no blunder possible -> greedy
    e_q, legal = _rows([10.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0, 1], G)
    sel = select_actions(e_q, legal, ExplorationConfig(blunder_rate=1.0), torch.arange(G))
    assert (sel.mode == MODE_GREEDY).all() and (sel.slot == 0).all()
    # a forced move: nothing to blunder to either; epsilon then takes over
    e_q, legal = _rows([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0], G)
    sel = select_actions(e_q, legal, ExplorationConfig(blunder_rate=1.0, epsilon=1.0),
                         torch.arange(G))
    assert (sel.mode == MODE_EPSILON).all() and (sel.slot == 0).all()


def test_mixed_rates_hit_each_mode():
    G = 4000
    gen = torch.Generator().manual_seed(1)
    e_q = torch.randn(G, 7, generator=gen)
    legal = torch.ones(G, 7, dtype=torch.bool)
    cfg = ExplorationConfig(temperature=0.5, epsilon=0.2, blunder_rate=0.1, blunder_max_regret=10)
    sel = select_actions(e_q, legal, cfg, torch.arange(G))
    rate = torch.bincount(sel.mode.long(), minlength=4).double() / G
    assert abs(rate[MODE_BLUNDER] - 0.1) < 0.03
    assert abs(rate[MODE_EPSILON] - 0.9 * 0.2) < 0.03
    assert abs(rate[MODE_BOLTZMANN] - 0.72) < 0.03 and rate[MODE_GREEDY] == 0


def test_errors():
    e_q, legal = _rows([1.0] * 7, [], 2)
    legal[0, 0] = True
    with pytest.raises(ValueError, match="decision 1 has no legal move"):
        select_actions(e_q, legal, ExplorationConfig(), torch.arange(2))
    with pytest.raises(ValueError, match="epsilon"):
        ExplorationConfig(epsilon=2.0)


def test_greedy_treats_moves_within_the_tie_tolerance_as_tied():
    """Moves whose E[Q] differ by float rounding only (<= TIE_TOL points) are tied: the
    lowest legal slot wins, so a last-bit difference between backends or devices cannot
    change the move. A tied move is no blunder."""
    from eqfast.engine.policy import TIE_TOL
    assert TIE_TOL == 1e-4
    e_q, legal = _rows([28.000017, 28.000025, 28.000025, 27.9, 0.0, 0.0, 0.0], [0, 1, 2, 3], 4)
    sel = select_actions(e_q, legal, ExplorationConfig(), torch.arange(4))
    assert sel.slot.tolist() == [0] * 4 and sel.mode.tolist() == [MODE_GREEDY] * 4
    assert (sel.q_gap >= 0).all() and (sel.q_gap <= TIE_TOL).all()
    # beyond the tolerance the better move wins
    e_q, legal = _rows([28.0, 28.0002, 0.0, 0.0, 0.0, 0.0, 0.0], [0, 1], 1)
    assert select_actions(e_q, legal, ExplorationConfig(), torch.arange(1)).slot.tolist() == [1]
    # blunders: the tied slots are not suboptimal, only slot 3 (regret 0.1) qualifies
    e_q, legal = _rows([28.000017, 28.000025, 28.000025, 27.9, 0.0, 0.0, 0.0], [0, 1, 2, 3], 200)
    sel = select_actions(e_q, legal, ExplorationConfig(blunder_rate=1.0), torch.arange(200))
    assert (sel.mode == MODE_BLUNDER).all() and (sel.slot == 3).all()
