"""The bidding evaluator (eqfast.bidding, docs/BIDDING.md): hand-checkable hands, the bid
levels, Wilson against published values, common random numbers, decl 8, the exact values
against the solver, the lower bracket's information, sequential stopping, the network
path's audits."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from eqfast.bidding import (AuditConfig, HandError, StoppingRule, UniformCompletions,
                            bid_levels, cvar, evaluate, exact_values, format_table, fusion,
                            contract_summary, parse_hand, sample_quantile, wilson)
from eqfast.bidding.lower import lower_engine, play_out
from eqfast.rules.batched import BatchedGames
from eqfast.rules.deal import deal_from_seed
from eqfast.rules.tables import N_TILES
from eqfast.solver import solve

from fakes import HashOracle

ALL_SIXES = "6-6,6-5,6-4,6-3,6-2,6-1,6-0"
# no six, no double: no trump at all under sixes trump
NO_TRUMP_NO_DOUBLES = "1-0,2-0,2-1,3-0,3-1,4-0,4-2"
MIXED = "6-4,5-5,5-0,4-1,3-2,2-0,1-0"


def col(result, decl):
    return next(c for c in result["contracts"] if c["decl"] == decl)


# ---------------------------------------------------------------- hands and levels
def test_parse_hand_accepts_both_pip_orders_and_rejects_bad_hands():
    assert parse_hand("6-6, 5-6 4-6,63,6-2,6-1,0-6") == tuple(range(21, 28))
    for bad, needle in [("6-6,6-5", "7 tiles, got 2"), (ALL_SIXES + ",5-5", "got 8"),
                        ("6-6,6-6,6-4,6-3,6-2,6-1,6-0", "appears twice"),
                        ("7-1,6-5,6-4,6-3,6-2,6-1,6-0", "unknown tile"),
                        ("x,6-5,6-4,6-3,6-2,6-1,6-0", "cannot read")]:
        with pytest.raises(HandError, match=needle):
            parse_hand(bad)


def test_evaluate_rejects_bad_contracts_and_sizes():
    for contracts in ((), (3, 3), (10,)):
        with pytest.raises(ValueError, match="contracts"):
            evaluate(MIXED, n=2, contracts=contracts)
    with pytest.raises(ValueError, match="n must be"):
        evaluate(MIXED, n=0)


def test_bid_levels_marks_need_all_42_points():
    levels = bid_levels(3)
    assert [lv.label for lv in levels] == [str(k) for k in range(30, 42)] + ["42", "84", "126"]
    assert [lv.need for lv in levels[-3:]] == [42, 42, 42]
    assert [lv.marks for lv in levels[-4:]] == [1, 1, 2, 3]


# ---------------------------------------------------------------- statistics
@pytest.mark.parametrize("k,n,lo,hi", [
    # Newcombe (1998), Statistics in Medicine 17:857, Table II, method 3 (Wilson score)
    (81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718)])
def test_wilson_matches_published_table(k, n, lo, hi):
    got = wilson(k, n)
    assert got == pytest.approx((lo, hi), abs=5e-5)


def test_wilson_closed_forms_at_the_ends():
    z2 = 1.959963984540054 ** 2
    assert wilson(0, 29) == pytest.approx((0.0, z2 / (29 + z2)))     # 0.1170
    assert wilson(29, 29) == pytest.approx((29 / (29 + z2), 1.0))    # 0.8830
    assert wilson(0, 0) == (0.0, 1.0)


def test_quantile_and_cvar_are_observed_lower_tail_figures():
    s = np.arange(1, 21)                       # 1..20
    assert sample_quantile(s, 0.10) == 2       # 2 of 20 values are <= 2
    assert sample_quantile(s, 0.50) == 10
    assert cvar(s, 0.10) == 1.5                # mean of the worst ceil(2) values


def test_fused_average_of_max_is_never_below_max_of_averages():
    v = np.array([[42, 0], [0, 42], [30, 30]])
    f = fusion(v, [30, 42])
    assert f["max_of_averages"] == 24 and f["fused_average_of_max_INVALID"] == 38
    assert f["per_level"][0] == {"max_of_p": 2 / 3, "fused_p_INVALID": 1.0}


# ---------------------------------------------------------------- completions and values
def test_completions_are_consistent_deals_and_a_prefix_of_larger_runs():
    hand = parse_hand(MIXED)
    m = UniformCompletions()
    big = m.sample(hand, 7, 0, 60)
    assert (m.sample(hand, 7, 0, 25) == big[:25]).all()
    assert (m.sample(hand, 7, 25, 60) == big[25:]).all()
    assert (big[:, 0] == np.array(hand)).all()
    assert all(sorted(d.reshape(-1).tolist()) == list(range(N_TILES)) for d in big)
    assert len({d.tobytes() for d in big}) == 60
    assert not (m.sample(hand, 8, 0, 60) == big).all()


def test_uniform_completions_spread_each_hidden_tile_evenly():
    hand = parse_hand(MIXED)
    comp = UniformCompletions().sample(hand, 0, 0, 3000)
    hidden = [t for t in range(N_TILES) if t not in hand]
    for t in hidden[:5]:
        seats = np.nonzero(comp == t)[1]
        counts = np.bincount(seats, minlength=4)[1:]
        assert counts.sum() == 3000 and np.all(np.abs(counts - 1000) < 120), (t, counts)


def test_exact_values_do_not_depend_on_the_thread_count():
    comp = UniformCompletions().sample(parse_hand(MIXED), 9, 0, 12)
    assert (exact_values(comp, range(10), threads=1) == exact_values(comp, range(10), threads=2)).all()


def test_exact_values_equal_the_solver_and_decl_8_is_solved():
    comp = UniformCompletions().sample(parse_hand(MIXED), 3, 0, 4)
    v = exact_values(comp, range(10), threads=2)
    for i, deal in enumerate(comp):
        for decl in range(10):
            r = solve(deal.tolist(), decl, 0, pv=False)
            assert v[i, decl] == (r.v + 42) // 2, (i, decl)
    assert (v[:, 8] != v[:, 7]).any() or (v[:, 8] != v[:, 9]).any()


# ---------------------------------------------------------------- hand-checkable hands
def test_all_sixes_with_sixes_trump_makes_42_in_every_completion():
    r = evaluate(ALL_SIXES, n=24, seed=1, contracts=(6, 9), leads=True)
    six = col(r, 6)
    assert six["score_upper"]["worst"] == 42
    assert all(c["p_upper"]["p"] == 1.0 and c["p_upper"]["all_sampled_make"] for c in six["cells"])
    assert r["choice"]["fusion_points"] == 0
    assert six["first_lead"]["fusion_points"] == 0 and six["first_lead"]["optimal_share"] == 1


def test_no_trump_no_doubles_rarely_makes_30():
    r = evaluate(NO_TRUMP_NO_DOUBLES, n=40, seed=2, contracts=(6,))
    cell30 = col(r, 6)["cells"][0]
    # even with clairvoyant play the partner must hold nearly everything (about 1 in 5)
    assert cell30["level"] == "30" and cell30["p_upper"]["p"] <= 0.3
    assert cell30["p_upper"]["ci95"][1] < 0.45
    assert col(r, 6)["score_upper"]["q50"] < 15


def test_matrix_schema_labels_monotonicity_and_common_random_numbers():
    r = evaluate(MIXED, n=30, seed=5, leads=True)
    assert [c["decl"] for c in r["contracts"]] == list(range(10))      # decl 8 included
    assert col(r, 8)["name"] == "doubles-suit"
    for c in r["contracts"]:
        p = [x["p_upper"]["p"] for x in c["cells"]]
        assert all(a >= b for a, b in zip(p, p[1:])), (c["decl"], p)
        assert p[-1] == p[-2]                            # 42 (1 mark) and 84 (2 marks)
        for x in c["cells"]:
            assert x["completion_model"] == "uniform_consistent" and x["n"] == 30 and x["seed"] == 5
            assert x["p_upper"]["label"].startswith("P_uniform_consistent(make | perfect-information")
            lo, hi = x["p_upper"]["ci95"]
            assert lo <= x["p_upper"]["p"] <= hi
    # common random numbers: a contract's column does not depend on the others evaluated
    alone = evaluate(MIXED, n=30, seed=5, contracts=(8, 2))         # V alone: no lead figures
    assert col(alone, 8)["score_upper"] == col(r, 8)["score_upper"]
    assert "first_lead" not in col(alone, 2)
    assert [x["p_upper"] for x in col(alone, 2)["cells"]] == \
        [x["p_upper"] for x in col(r, 2)["cells"]]
    for c in r["contracts"]:   # one lead for all completions can only lose to the best per completion
        fl = c["first_lead"]
        assert fl["fusion_points"] >= 0 and 0 < fl["optimal_share"] <= 1
        assert fl["mean_points_fixed_lead"] == max(fl["mean_points_by_lead"].values())
        assert all(x["p_upper_fixed_lead"]["p"] <= x["p_upper"]["p"] for x in c["cells"])
    ch = r["choice"]
    assert ch["max_of_averages"] == max(c["score_upper"]["mean"] for c in r["contracts"])
    assert ch["fused_average_of_max_INVALID"] >= ch["max_of_averages"]
    text = format_table(r)
    assert "P_uniform_consistent(make" in text and "INVALID" in text


# ---------------------------------------------------------------- the lower bracket
def _swap_hidden(deal, actor, rng):
    """deal with one unplayed tile swapped between two seats other than `actor`."""
    a, b = rng.choice([s for s in range(4) if s != actor], 2, replace=False)
    out = deal.copy()
    i, j = rng.integers(7), rng.integers(7)
    out[a, i], out[b, j] = deal[b, j], deal[a, i]
    return np.sort(out, axis=1), (int(deal[a, i]), int(deal[b, j]))


def _replay(deal, decl, tiles):
    """The games of `deal` after `tiles` were played, or None if some play is illegal."""
    g = BatchedGames.new(deal[None], decl, 0)
    for t in tiles:
        seat_hand = g.hands[0, int(g.current_player[0])]
        slot = torch.nonzero(seat_hand == t)
        if len(slot) == 0 or not bool(g.legal_mask()[0, int(slot[0])]):
            return None
        g = g.play(slot[0])
    return g


def test_lower_bracket_decides_only_from_the_actors_information():
    """Same public transcript and own hand, different hidden hands: the same move. The fake
    oracle's Q hashes the whole position, so any hidden tile reaching the decision would
    change it (the control below shows it does for a clairvoyant chooser)."""
    engine = lower_engine(HashOracle(), n_worlds=6, seed=3)    # the bracket's player
    rng = np.random.default_rng(0)
    checked = clairvoyant_differs = 0
    for game_seed in (11, 12):
        deal = deal_from_seed(game_seed).astype(np.int64)
        decl = game_seed % 10
        games, played = BatchedGames.new(deal[None], decl, 0), []
        for d in range(20):
            actor = int(games.current_player[0])
            _, slot = engine.decide(games, [game_seed], d, torch.tensor([game_seed]))
            move = int(games.hands[0, actor, int(slot[0])])
            for _ in range(6):
                other, swapped = _swap_hidden(deal, actor, rng)
                if any(t in played for t in swapped):
                    continue
                g2 = _replay(other, decl, played)
                if g2 is None:           # the swap contradicts a revealed void
                    continue
                _, slot2 = engine.decide(g2, [game_seed], d, torch.tensor([game_seed]))
                assert int(g2.hands[0, actor, int(slot2[0])]) == move, (game_seed, d, swapped)
                checked += 1
                truth = HashOracle().query  # control: the true deal's hash does change
                clairvoyant_differs += _clairvoyant(games, truth) != _clairvoyant(g2, truth)
            games = games.play(slot)
            played.append(move)
    assert checked >= 40 and clairvoyant_differs > 0


def _clairvoyant(games, query):
    from eqfast.engine.public import hidden_info
    from eqfast.engine.worlds import build_oracle_batch, true_world
    info = hidden_info(games)
    q, legal = query(build_oracle_batch(games, info, true_world(games, info)))
    return int(torch.where(legal, q, -1e9).argmax(1)[0])


def test_lower_bracket_plays_whole_hands_and_is_reported_beside_p_upper():
    engine = lower_engine(HashOracle(), n_worlds=4, seed=0)
    comp = UniformCompletions().sample(parse_hand(ALL_SIXES), 0, 0, 3)
    pts = play_out(engine, comp, (6, 0))
    assert pts.shape == (3, 2) and ((pts >= 0) & (pts <= 42)).all()
    r = evaluate(MIXED, n=12, contracts=(5, 8), lower_engine=engine, lower_n=6,
                 lower_info={"worlds": 4, "oracle": "hash"})
    x = col(r, 8)["cells"][0]
    assert x["p_lower"]["n"] == 6 and x["p_lower"]["label"].startswith("P_uniform_consistent(make | E[Q]")
    assert x["gap"]["gap"] == pytest.approx(x["gap"]["p_upper_same_completions"] - x["p_lower"]["p"])
    assert r["lower_bracket"]["n"] == 6 and "score_lower" in col(r, 5)


# ---------------------------------------------------------------- stopping and network
def test_sequential_stopping_extends_the_same_completions_and_stops_within_the_maximum():
    rule = StoppingRule(start=10, step=10, max_n=40, patience=2)
    r = evaluate(MIXED, seed=4, contracts=(5, 9), stopping=rule)
    assert 10 <= r["n"] <= 40 and r["stopping"]["reason"] in ("decided", "stable", "maximum")
    fixed = evaluate(MIXED, n=r["n"], seed=4, contracts=(5, 9))
    assert fixed["contracts"] == r["contracts"]


def test_network_path_defers_audited_rows_to_the_solver():
    from eqfast.oracle import load_default_oracle
    net = load_default_oracle()
    cfg = AuditConfig(fraction=0.3, starts=1, steps=2, width=4)
    r = evaluate(MIXED, n=16, seed=6, contracts=(5, 9), network=net, audit=cfg)
    a = r["audit"]
    rows = 16 * 2
    assert 0 < a["audited_fraction"] * rows <= int(0.3 * rows) + a["deferred_rows"]
    assert a["adversarial"]["solves"] == 8
    assert a["worst_discrepancy_audited"] is not None
    cells = col(r, 9)["cells"]
    assert all({"validated", "near_unaudited", "flips_found", "worst_discrepancy_near"}
               <= set(x["audit"]) for x in cells)
    assert "network" in r["values"] and "network values" in r["labels"]["p_upper"]
    assert "first_lead" not in col(r, 9) and "p_upper_fixed_lead" not in cells[0]
    assert a["deferred_rows"] >= 0


def test_table_probability_never_rounds_to_a_wrong_value():
    """p in [0.995, 1) used to print as '.00' (the formatter cut '1.00' to '.00'); p just
    above 0 as '.00'. Neither 1 nor 0 is printed for a p that is neither."""
    from eqfast.bidding.report import _p

    assert _p(1.0) == " 1  " and _p(0.0) == " 0  "
    assert _p(0.5) == " .50" and _p(0.994) == " .99"
    assert _p(0.996) == ">.99" and _p(0.9999) == ">.99"
    assert _p(0.004) == "<.01" and _p(0.005) == " .01"
    assert all(len(_p(x / 1000)) == 4 for x in range(1001))


def test_cvar_is_the_mean_at_or_below_the_quantile_ties_included():
    """CVaR_a = E[V | V <= q_a] (spec 004 §3, M3): every value tied at q_a counts, not just
    the worst ceil(a N). Integer scores tie often."""
    v = np.array([20, 30, 30, 30, 30, 32, 34, 36, 40, 42])
    assert sample_quantile(v, 0.2) == 30
    assert cvar(v, 0.2) == 28.0                # mean of 20, 30, 30, 30, 30; not 25.0
    assert cvar(np.array([7, 7, 7]), 0.1) == 7.0
    assert contract_summary(np.array([10] * 9 + [42]))["cvar10"] == 10.0
