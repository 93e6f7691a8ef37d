"""The league (eqfast/play/league.py, eqfast-arena --league): its ratings recover known
ratings, an interrupted or killed league resumes to exactly the uninterrupted result
without replaying a saved deal, a panel may grow but not change, the contract view
agrees with a hand count of its own, the stopping rule, the command's errors and the
report picture."""
from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from cliutil import cli_env
from eqfast.cli.arena import main
from eqfast.engine.games import declarer_of, setup_games
from eqfast.play.arena import play_batch
from eqfast.play.league import (DEFAULT_SEED_START, REPORT_FILE, LeagueSettings,
                                LeagueStateError, PairState, clustered_share, contract_counts,
                                fit_bradley_terry, fit_points, format_league, league_report,
                                open_league)
from eqfast.bidding.stats import wilson
from eqfast.play.policies import policy_from_spec
from eqfast.rules.batched import BatchedGames
from eqfast.rules.state import trick_points, trick_winner

#: a tiny league: every pair plays exactly 12 hands (6 deals) in two chunks
TINY = {"min_hands": 12, "max_hands": 12, "chunk_hands": 6}


def build(spec, run_seed):
    return policy_from_spec(spec, run_seed=run_seed)


def arrays(league):
    return {(p.a, p.b): (p.a_points.copy(), p.declarer_team.copy()) for p in league.pairs}


def same_arrays(x, y):
    return x.keys() == y.keys() and all(
        np.array_equal(x[k][0], y[k][0]) and np.array_equal(x[k][1], y[k][1]) for k in x)


# ---------------------------------------------------------------------------- ratings
NAMES = ["random", "rules", "a", "b", "c"]
TRUE = np.array([-8.0, 0.0, 5.5, 6.0, 15.0])        # rules = 0, the anchor


def synthetic_pairs(rng=None, bump=0.0):
    """(i, j, mean, variance) of every pair: r_i - r_j (+ noise of that variance)."""
    out = []
    for i in range(5):
        for j in range(i + 1, 5):
            var = 0.02 * (1 + (i + 2 * j) % 4)
            m = TRUE[i] - TRUE[j] + (0.0 if rng is None else rng.normal(0, math.sqrt(var)))
            out.append((i, j, m + (bump if (i, j) == (2, 3) else 0.0), var))
    return out


def test_points_ratings_recover_known_ratings():
    exact = fit_points(NAMES, synthetic_pairs())
    assert exact["anchor"] == "rules" and exact["dof"] == 10 - 4
    got = np.array([exact["ratings"][n]["rating"] for n in NAMES])
    assert np.allclose(got, TRUE, atol=1e-9) and exact["chi2"] < 1e-12
    assert exact["ratings"]["rules"]["se"] == 0
    # noisy pair means: the 95% intervals cover the truth about 95% of the time and
    # chi2/dof averages about 1 (additive differentials)
    rng = np.random.default_rng(1)
    covered, fits = [], []
    for _ in range(300):
        f = fit_points(NAMES, synthetic_pairs(rng))
        covered += [f["ratings"][n]["ci95"][0] <= t <= f["ratings"][n]["ci95"][1]
                    for n, t in zip(NAMES, TRUE) if n != "rules"]
        fits.append(f["chi2_per_dof"])
    assert 0.92 <= np.mean(covered) <= 0.98, np.mean(covered)
    assert 0.85 <= np.mean(fits) <= 1.15, np.mean(fits)
    # a pair far off the additive model shows in chi2/dof
    bad = fit_points(NAMES, synthetic_pairs(rng, bump=3.0))
    assert bad["chi2_per_dof"] > 10 and bad["p_value"] < 1e-6
    # without the anchor in the panel the ratings are centred, differences unchanged
    names = ["random", "x", "a", "b", "c"]
    centred = fit_points(names, synthetic_pairs())
    got = np.array([centred["ratings"][n]["rating"] for n in names])
    assert centred["anchor"] == "panel mean" and abs(got.sum()) < 1e-9
    assert np.allclose(got - got[1], TRUE, atol=1e-9)


def test_bradley_terry_recovers_known_ratings():
    theta = np.array([-1.0, 0.0, 0.7, 1.5])
    names = ["random", "rules", "a", "b"]

    def pairs(n, rng=None):
        out = []
        for i in range(4):
            for j in range(i + 1, 4):
                p = 1 / (1 + math.exp(theta[j] - theta[i]))
                out.append((i, j, n * p if rng is None else float(rng.binomial(n, p)), n))
        return out

    exact = fit_bradley_terry(names, pairs(10**7))
    got = np.array([exact["ratings"][n]["theta"] for n in names])
    assert np.allclose(got, theta, atol=1e-4), got
    rng = np.random.default_rng(2)
    fit = fit_bradley_terry(names, pairs(4000, rng))
    for n, t in zip(names, theta):
        r = fit["ratings"][n]
        assert abs(r["theta"] - t) <= 4 * r["se"] + 1e-12, (n, r, t)
        assert r["elo"] == pytest.approx(r["theta"] * 400 / math.log(10))
    # two players: the closed form, with the one virtual tied hand
    two = fit_bradley_terry(["rules", "x"], [(0, 1, 300.0, 1000)])["ratings"]["x"]
    p = 300.5 / 1001
    assert two["theta"] == pytest.approx(-math.log(p / (1 - p)), abs=1e-9)
    assert two["se"] == pytest.approx(1 / math.sqrt(1001 * p * (1 - p)), rel=1e-9)


def correlated_deals(rng, theta, deals, sd_policy=5.0, sd_pair=3.0):
    """Per pair (i < j) of len(theta) policies, its differential on each of `deals` shared
    deals: theta_i - theta_j + z_di - z_dj + noise, z_di a per-deal effect of policy i
    shared by all its pairs (so pairs with a common policy move together)."""
    k = len(theta)
    z = rng.normal(0, sd_policy, (deals, k))
    out = []
    for i in range(k):
        for j in range(i + 1, k):
            out.append((i, j, theta[i] - theta[j] + z[:, i] - z[:, j]
                        + rng.normal(0, sd_pair, deals)))
    return out


def test_points_intervals_by_deal_cover_when_pairs_share_deals():
    theta = np.array([0.0, 2.0, 4.0, 5.0])
    names = ["rules", "a", "b", "c"]
    rng = np.random.default_rng(3)
    covered = {"pairs independent": [], "by deal": []}
    for _ in range(300):
        pairs = correlated_deals(rng, theta, 200)
        res = [(i, j, float(d.mean()), float(d.var(ddof=1)) / len(d)) for i, j, d in pairs]
        for kind, fit in (("pairs independent", fit_points(names, res)),
                          ("by deal", fit_points(names, res, deal_diffs=[d for *_, d in pairs]))):
            assert fit["intervals"] == kind
            covered[kind] += [fit["ratings"][n]["ci95"][0] <= t <= fit["ratings"][n]["ci95"][1]
                              for n, t in zip(names[1:], theta[1:])]
    # the shared per-deal effects make the independent-pair intervals too narrow
    assert np.mean(covered["pairs independent"]) < 0.88, np.mean(covered["pairs independent"])
    assert 0.92 <= np.mean(covered["by deal"]) <= 0.98, np.mean(covered["by deal"])
    # one pair alone: the sandwich is the pair's own standard error
    d = rng.normal(1.0, 5.0, 400)
    alone = fit_points(["rules", "x"], [(0, 1, float(d.mean()), float(d.var(ddof=1)) / 400)],
                       deal_diffs=[d])["ratings"]["x"]
    assert alone["se"] == pytest.approx(float(d.std(ddof=1)) / 20, rel=1e-9)


def test_bradley_terry_intervals_by_deal_cover_correlated_hands():
    names = ["rules", "a", "b"]
    rng = np.random.default_rng(4)
    covered = {"Fisher information": [], "by deal": []}
    for _ in range(200):
        z = rng.normal(0, 1.5, (300, 3))                # per deal and policy, both hands
        res, wins = [], []
        for i in range(3):
            for j in range(i + 1, 3):
                p = 1 / (1 + np.exp(z[:, j] - z[:, i]))
                w = rng.binomial(2, p).astype(np.float64)
                res.append((i, j, float(w.sum()), 600))
                wins.append(w)
        for kind, fit in (("Fisher information", fit_bradley_terry(names, res)),
                          ("by deal", fit_bradley_terry(names, res, deal_wins=wins))):
            assert fit["intervals"] == kind
            # equal players: the fit's target is 0 for everyone
            covered[kind] += [fit["ratings"][n]["ci95"][0] <= 0 <= fit["ratings"][n]["ci95"][1]
                              for n in names[1:]]
    assert np.mean(covered["Fisher information"]) < 0.88, np.mean(covered["Fisher information"])
    assert 0.91 <= np.mean(covered["by deal"]) <= 0.985, np.mean(covered["by deal"])


def test_contract_share_counts_a_deal_once_across_opponents():
    rng = np.random.default_rng(5)
    h = rng.random(500) < 0.4
    alone = clustered_share([h])
    lo, hi = wilson(int(h.sum()), 500)
    assert alone["count"] == h.sum() and alone["hands"] == 500
    assert alone["n_eff"] <= 500 and alone["n_eff"] > 450
    # the same result against four opponents: four times the hands, one draw per deal
    four = clustered_share([h, h, h, h])
    assert four["hands"] == 2000 and four["share"] == pytest.approx(h.mean())
    assert four["n_eff"] == pytest.approx(499, rel=1e-9)
    # as wide as one opponent's, where hands pooled as independent would halve it
    assert four["ci95"][1] - four["ci95"][0] > 0.99 * (hi - lo)
    lo4, hi4 = wilson(4 * int(h.sum()), 2000)
    assert hi4 - lo4 < 0.51 * (hi - lo)
    # pairs of different lengths line up by deal
    part = clustered_share([h, h[:100]])
    assert part["hands"] == 600 and part["count"] == h.sum() + h[:100].sum()


# ---------------------------------------------------------------------------- stopping
def test_pair_stops_on_the_interval_width_or_the_cap():
    s = LeagueSettings(target_ci=1.0, min_hands=8, max_hands=40, chunk_hands=4)
    p = PairState(0, 1, "x", "y")
    p.a_points = np.array([[25, 25]] * 3, np.int8)           # 6 hands, every deal +4
    assert p.half_width() == 0 and p.status(s) == "playing"  # below the minimum
    p.a_points = np.array([[25, 25]] * 4, np.int8)
    assert p.status(s) == "target"
    p.a_points = np.array([[42, 0], [0, 0]] * 10, np.int8)   # wide: +-21 per deal
    assert p.half_width() > 1.0 and p.status(s) == "cap"


def test_schedule_gives_each_unfinished_pair_equal_time(tmp_path):
    """The next chunk goes to the pair that has spent the least time (a new pair first),
    ties to the fewest deals; a finished pair gets none."""
    league = open_league(tmp_path / "lg", ["rules", "random", "expert"], build,
                         seed_start=500, **TINY)
    p01, p02, p12 = league.pairs
    for p, seconds, deals in ((p01, 9.0, 2), (p02, 1.0, 4), (p12, 1.0, 3)):
        p.a_points = np.full((deals, 2), 21, np.int8)
        p.declarer_team = np.zeros(deals, np.int8)
        p.seconds = np.array([seconds, 0.0])
    assert league.next_pair() is p12            # 1 s and 3 deals beats 1 s and 4 deals
    p12.seconds = np.array([5.0, 0.0])
    assert league.next_pair() is p02
    p02.a_points = np.full((6, 2), 21, np.int8)  # 12 hands: the cap, finished
    assert league.next_pair() is p12


def test_play_batch_returns_the_declarers_team():
    a, b = policy_from_spec("rules"), policy_from_spec("random", run_seed=4)
    seeds = [DEFAULT_SEED_START + k for k in range(6)]
    points = play_batch(a, b, seeds)
    again, team = play_batch(a, b, seeds, with_declarer=True)
    assert np.array_equal(points, again)
    assert team.tolist() == [declarer_of(s) % 2 for s in seeds]


def declarer_points_by_hand(a, b, seeds):
    """Declarer team's points per (deal, seating), counted trick by trick with the scalar
    rules from each game's played tiles, not from the game's own score."""
    out = {}
    for s in seeds:
        hands, decl, leader = setup_games([s])
        team = declarer_of(s) % 2
        for a_team in (0, 1):
            g = BatchedGames.new(hands, decl, leader)
            for d in range(28):
                mover = a if int(g.current_player[0]) % 2 == a_team else b
                g = g.play(mover.decide(g, [s], d))
            tiles, seats = g.tiles[0].tolist(), g.seats[0].tolist()
            got = 0
            for t in range(0, 28, 4):
                if trick_winner(int(decl[0]), seats[t], tiles[t:t + 4]) % 2 == team:
                    got += trick_points(tiles[t:t + 4])
            out[s, a_team] = (got, "a" if team == a_team else "b")
    return out


def test_contract_view_matches_an_independent_hand_count(tmp_path):
    league = open_league(tmp_path / "lg", ["rules", "random"], build, seed_start=500,
                         min_hands=24, max_hands=24, chunk_hands=8)
    assert league.run()
    pair = league.pairs[0]
    counted = declarer_points_by_hand(league.policies[0], league.policies[1],
                                      range(500, 500 + pair.deals))
    want = {side: {"declared": 0, "made30": 0, "made42": 0, "defended": 0, "set": 0}
            for side in "ab"}
    for pts, side in counted.values():
        other = "b" if side == "a" else "a"
        want[side]["declared"] += 1
        want[side]["made30"] += pts >= 30
        want[side]["made42"] += pts == 42
        want[other]["defended"] += 1
        want[other]["set"] += pts < 30
    got = contract_counts(pair.a_points, pair.declarer_team)
    assert got == want
    assert want["a"]["made30"] > 0 and want["a"]["set"] > 0     # the test can tell
    view = league_report(league)["contract"]
    assert view["rules"]["made30"]["count"] == want["a"]["made30"]
    assert view["random"]["set"]["hands"] == 12


# ---------------------------------------------------------------------------- resuming
class Interrupt:
    """A policy that raises KeyboardInterrupt on its n-th decide call (a Ctrl-C mid-chunk)
    and counts the deals it sees at decision 0 (each deal once per side)."""

    def __init__(self, inner, after=None):
        self.inner, self.after, self.calls, self.opened = inner, after, 0, 0
        self.name, self.cheating = inner.name, inner.cheating

    def decide(self, games, seeds, decision):
        self.calls += 1
        if self.after is not None and self.calls == self.after:
            raise KeyboardInterrupt
        if decision == 0:
            self.opened += len(seeds)
        return self.inner.decide(games, seeds, decision)


#: the exact solver is the cheapest policy with a per-call cost worth interrupting (an E[Q]
#: player costs about 1 s per chunk on a busy 2-core machine)
PANEL = ["random", "rules", "perfect"]


def test_interrupted_league_resumes_to_the_uninterrupted_result(tmp_path):
    whole = open_league(tmp_path / "whole", PANEL, build, **TINY)
    assert whole.run()
    want = arrays(whole)
    made = {}

    def interrupting(spec, run_seed):
        made[spec] = Interrupt(build(spec, run_seed), after=40 if spec == "rules" else None)
        return made[spec]

    cut = open_league(tmp_path / "cut", PANEL, interrupting, **TINY)
    with pytest.raises(KeyboardInterrupt):
        cut.run()
    saved = sum(p.deals for p in open_league(tmp_path / "cut", None, build).pairs)
    assert 0 < saved < 3 * 6                       # some chunks saved, not all
    counters = {}

    def counting(spec, run_seed):
        counters[spec] = Interrupt(build(spec, run_seed))
        return counters[spec]

    resumed = open_league(tmp_path / "cut", None, counting)
    assert resumed.settings == whole.settings
    assert resumed.run()
    assert same_arrays(arrays(resumed), want)
    # every deal not saved is played once by each side, none saved is played again
    assert sum(c.opened for c in counters.values()) == 2 * (3 * 6 - saved)
    a, b = league_report(whole), league_report(resumed)
    assert a["ratings"] == b["ratings"] and a["contract"] == b["contract"]


def test_killed_league_resumes_to_the_uninterrupted_result(tmp_path):
    """kill -9 of the command between or inside chunks: the saved files stay whole and the
    league finishes with exactly the uninterrupted results (continued in this process,
    which is what running the same command does; the command's own resume is
    test_cli_league_report_and_picture's second run)."""
    d = tmp_path / "lg"
    cmd = [sys.executable, "-m", "eqfast.cli.arena", "--league", str(d), "--policies",
           "random,rules,perfect", "--min-hands", "40", "--max-hands", "40", "--chunk", "8",
           "--quiet"]
    proc = subprocess.Popen(cmd, env=cli_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not list((d / "pairs").glob("pair-*.npz")) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (d / REPORT_FILE).exists()          # it was killed before the end
    partial = open_league(d, None, build)
    assert 0 < sum(p.deals for p in partial.pairs) < 3 * 20
    assert partial.settings.max_hands == 40 and partial.run()
    # the uninterrupted result: each pair's 20 deals in one batch (batches do not matter)
    seeds = range(DEFAULT_SEED_START, DEFAULT_SEED_START + 20)
    pol = {n: build(n, 0) for n in ("random", "rules", "perfect")}
    want = {(a, b): play_batch(pol[a], pol[b], seeds, with_declarer=True)
            for a, b in (("random", "rules"), ("random", "perfect"), ("rules", "perfect"))}
    assert same_arrays(arrays(open_league(d, None, build)), want)


def test_sigterm_stops_the_league_like_ctrl_c(tmp_path):
    """`kill PID` (SIGTERM), even with SIGINT ignored as in a background job: status 130,
    the report written with the saved chunks, the message on stderr."""
    d = tmp_path / "lg"
    cmd = [sys.executable, "-m", "eqfast.cli.arena", "--league", str(d), "--policies",
           "random,rules", "--min-hands", "20000", "--max-hands", "20000", "--chunk", "8",
           "--quiet"]
    proc = subprocess.Popen(cmd, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 60
    while not list((d / "pairs").glob("pair-*.npz")) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert b"interrupted with 1 pairs unfinished" in err and b"Traceback" not in err
    report = json.loads((d / REPORT_FILE).read_text())
    assert not report["complete"] and 0 < report["pairs"][0]["hands"] < 20000
    assert b"League: 2 policies" in out


def test_a_panel_may_grow_but_not_change(tmp_path):
    d = tmp_path / "lg"
    first = open_league(d, ["random", "rules"], build, **TINY)
    assert first.run()
    before = arrays(first)
    grown = open_league(d, ["rules", "perfect", "random"], build)
    assert grown.names == ["random", "rules", "perfect"]      # new ones are appended
    assert [(p.a, p.hands) for p in grown.pairs] == [("random", 12), ("random", 0),
                                                      ("rules", 0)]
    assert grown.run()
    after = arrays(grown)
    assert same_arrays({k: after[k] for k in before}, before)  # the old pair not replayed
    assert all(p.hands == 12 for p in grown.pairs)
    report = league_report(grown)
    assert report["ratings"]["points"]["ratings"]["perfect"]["rating"] > 0
    assert "Contract view" in format_league(report)
    with pytest.raises(LeagueStateError, match="perfect"):
        open_league(d, ["random", "rules"], build)
    with pytest.raises(LeagueStateError, match="--seed-start"):
        open_league(d, None, build, seed_start=7)
    with pytest.raises(LeagueStateError, match="--run-seed"):
        open_league(d, None, build, run_seed=3)
    # the stopping rule may change: a higher cap extends every pair
    longer = open_league(d, None, build, max_hands=16, min_hands=16)
    assert longer.run() and all(p.hands == 16 for p in longer.pairs)
    assert same_arrays({k: (v[0][:6], v[1][:6]) for k, v in arrays(longer).items()}, after)


def test_changed_weights_under_a_name_are_refused(tmp_path):
    import torch
    from eqfast.stage2.model import DEFAULT_CONFIG, build_model
    from eqfast.stage2.weights import save_stage2

    weights = tmp_path / "s2.safetensors"
    torch.manual_seed(0)
    save_stage2(weights, build_model(DEFAULT_CONFIG), DEFAULT_CONFIG)
    d = tmp_path / "lg"
    open_league(d, ["rules", f"stage2:{weights}"], build, **TINY).run(max_chunks=1)
    torch.manual_seed(1)
    save_stage2(weights, build_model(DEFAULT_CONFIG), DEFAULT_CONFIG)
    with pytest.raises(LeagueStateError, match="weights of stage2"):
        open_league(d, None, build)


def test_rename_keeps_the_pairs_of_a_model_under_its_new_name(tmp_path, capsys):
    """A shipped model kept under another path: `--rename OLD=SPEC` re-points it (same
    fingerprint only), every saved hand stays, and a cut-short rename finishes when run
    again."""
    import shutil

    import torch
    from eqfast.stage2.model import DEFAULT_CONFIG, build_model
    from eqfast.stage2.weights import save_stage2

    old, kept, other = (tmp_path / f"{n}.safetensors" for n in ("old", "kept", "other"))
    torch.manual_seed(0)
    save_stage2(old, build_model(DEFAULT_CONFIG), DEFAULT_CONFIG)
    shutil.copy(old, kept)
    torch.manual_seed(1)
    save_stage2(other, build_model(DEFAULT_CONFIG), DEFAULT_CONFIG)
    d = tmp_path / "lg"
    first = open_league(d, ["random", f"stage2:{old}", "rules"], build, **TINY)
    assert first.run()
    before = {tuple(n.replace(str(old), str(kept)) for n in k): v
              for k, v in arrays(first).items()}
    # another player's weights, a name the panel lacks, a bad form: refused, nothing written
    state = (d / "league_state.json").read_text()
    for argv, needle in ((f"stage2:{old}=stage2:{other}", "not the player"),
                         (f"stage2=stage2:{kept}", "no policy stage2"),
                         ("rules", "OLD=SPEC")):
        assert main(["--league", str(d), "--rename", argv, "--quiet"]) == 2
        assert needle in capsys.readouterr().err
    assert (d / "league_state.json").read_text() == state
    # a rename cut short after the state file: the pair files still hold the old name
    pair = d / "pairs" / "pair-00-01.npz"
    saved = pair.read_bytes()
    assert main(["--league", str(d), "--rename", f"stage2:{old}=stage2:{kept}", "--quiet"]) == 0
    pair.write_bytes(saved)
    with pytest.raises(LeagueStateError, match=f"holds random v stage2:{old}"):
        open_league(d, None, build)
    assert main(["--league", str(d), "--rename", f"stage2:{old}=stage2:{kept}", "--quiet"]) == 0
    after = open_league(d, None, build)
    assert after.names == ["random", f"stage2:{kept}", "rules"]
    assert same_arrays(arrays(after), before) and after.run()      # nothing left to play
    report = json.loads((d / REPORT_FILE).read_text())
    assert f"stage2:{kept}" in report["ratings"]["points"]["ratings"]


# ---------------------------------------------------------------------------- command
@pytest.fixture
def league_dir(tmp_path):
    d = tmp_path / "lg"
    argv = ["--league", str(d), "--policies", "random,rules", "--min-hands", "8",
            "--max-hands", "8", "--chunk", "4", "--quiet"]
    assert main(argv) == 0
    return d


@pytest.mark.parametrize("argv,needles", [
    (["--policies", "random,chess"], ["--policies", "chess"]),
    (["--target-ci", "0"], ["--target-ci", "0"]),
    (["--min-hands", "7"], ["--min-hands", "7", "even"]),
    (["--min-hands", "20", "--max-hands", "10"], ["--max-hands 10", "--min-hands 20"]),
    (["--chunk", "2"], ["--chunk", "2"]),
    (["--budget-minutes", "0"], ["--budget-minutes", "0"]),
    (["--hands", "10"], ["--hands", "--league"]),
    (["--seed-start", "5"], ["--seed-start", "5"]),
    (["--decl", "uniform"], ["--decl", "uniform"]),
    (["--policies", "random,perfect"], ["--policies", "rules"]),
], ids=["unknown-policy", "target-0", "min-odd", "max-below-min", "chunk-2", "budget-0",
        "hands", "other-seed-start", "other-decl", "dropped-policy"])
def test_cli_league_bad_input_exits_2(league_dir, capsys, argv, needles):
    capsys.readouterr()
    assert main(["--league", str(league_dir), "--quiet"] + argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("eqfast-arena: ") and "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)


def test_cli_league_dir_that_is_a_file_and_flags_without_league(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["--league", str(f), "--quiet"]) == 2
    assert "is a file" in capsys.readouterr().err
    assert main(["--policies", "random,rules", "--hands", "4", "--target-ci", "1"]) == 2
    assert "--league" in capsys.readouterr().err
    assert main(["--hands", "4"]) == 2
    assert "--policies is required" in capsys.readouterr().err


def test_cli_league_report_and_picture(league_dir, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="eqfast-report needs the 'report' extra")
    from eqfast.cli import report as report_cli

    capsys.readouterr()
    assert main(["--league", str(league_dir), "--json", "--quiet"]) == 0   # nothing to play
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads((league_dir / REPORT_FILE).read_text())
    assert report["complete"] and report["hands"] == 8
    assert report["settings"]["seed_start"] == DEFAULT_SEED_START
    assert report["matrix"]["policies"] == ["random", "rules"]
    m = report["matrix"]["mean_diff"]
    assert m[0][1] == -m[1][0] and m[0][0] is None
    assert report["ratings"]["points"]["ratings"]["rules"]["rating"] == 0
    assert main(["--league", str(league_dir), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert text.index("Ratings") < text.index("Points per hand") < text.index("Contract view")
    for source in (league_dir, league_dir / REPORT_FILE):
        png = tmp_path / "league.png"
        assert report_cli.main([str(source), "--out", str(png)]) == 0
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert json.loads(capsys.readouterr().out)["kind"] == "league"
        png.unlink()
    bad = tmp_path / "other.json"
    bad.write_text("{}")
    assert report_cli.main([str(bad), "--out", str(png)]) == 2
    assert "not a league report" in capsys.readouterr().err
