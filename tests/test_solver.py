"""The C solver (eqfast.solver) against the plain Python minimax in reference_minimax.py,
plus the Bellman identities on full deals, TT reuse across calls, and q_batch."""
from __future__ import annotations

import random

import numpy as np
import pytest

from eqfast import solver
from eqfast.rules.deal import deal_from_seed
from eqfast.rules.state import GameState
from eqfast.rules.tables import N_DECLS, N_SEATS, N_TILES, mask_of

from reference_minimax import solve_tree


def _endgame_from_deal(rng: random.Random, decl: int, leader: int, tricks_left: int,
                       extra_plays: int) -> GameState:
    """A seeded deal played at random down to `tricks_left` tricks (+ `extra_plays` tiles
    into the next trick, for mid-trick states)."""
    state = GameState.new(deal_from_seed(rng.randrange(2**32)).tolist(), decl, leader)
    for _ in range((7 - tricks_left) * N_SEATS + extra_plays):
        state = state.play(rng.choice(state.legal_moves()))
    return state


def _shortened_hands(rng: random.Random, decl: int, leader: int, k: int) -> GameState:
    """Every seat gets k random tiles, empty trick."""
    tiles = rng.sample(range(N_TILES), N_SEATS * k)
    return GameState.new([tiles[i * k:(i + 1) * k] for i in range(N_SEATS)], decl, leader)


def _assert_matches_reference(root: GameState, label: str) -> int:
    positions = solve_tree(root)
    for s, ref_q, ref_v in positions.values():
        got = solver.solve_state(s, pv=False)
        assert got.v == ref_v, f"{label}: V at {s.hands} leader={s.leader} trick={s.trick}"
        assert got.q == ref_q, f"{label}: Q at {s.hands} leader={s.leader} trick={s.trick}"
    return len(positions)


# 2..4 tricks left x all 10 declarations x all 4 leaders, from played-out deals (with 0..3
# tiles already in the current trick) and from shortened hands: 240 endgames, every one of
# their reachable positions compared (value and every Q).
@pytest.mark.parametrize("tricks_left", [2, 3, 4], ids=lambda k: f"tricks{k}")
def test_every_position_of_random_endgames_matches_reference(tricks_left):
    rng = random.Random(1000 + tricks_left)
    n_positions = 0
    for decl in range(N_DECLS):
        for leader in range(N_SEATS):
            extra = rng.randrange(4)
            root = _endgame_from_deal(rng, decl, leader, tricks_left, extra)
            n_positions += _assert_matches_reference(
                root, f"deal decl={decl} leader={leader} extra={extra}")
            root = _shortened_hands(rng, decl, leader, tricks_left)
            n_positions += _assert_matches_reference(root, f"short decl={decl} leader={leader}")
    assert n_positions > 80 * tricks_left  # the walk really visited the trees


def test_actor_frame_flips_sign_for_team_1():
    rng = random.Random(7)
    state = _endgame_from_deal(rng, 3, 0, 3, 1)  # seat 1 to act
    assert state.current_player == 1
    team0 = solver.solve_state(state)
    actor = solver.solve_state(state, actor_frame=True)
    assert actor.v == -team0.v and actor.q == {a: -x for a, x in team0.q.items()}
    assert actor.pv == team0.pv


def _check_pv(state: GameState, result) -> None:
    """The PV is legal, optimal at every step, and scores exactly V."""
    start_score = state.score
    for tile in result.pv:
        here = solver.solve_state(state, pv=False)
        assert here.q[tile] == here.v, "PV move is not optimal"
        state = state.play(tile)
    assert state.is_over
    assert state.score - start_score == result.v


@pytest.mark.parametrize("seed,decl,leader", [(1, 0, 0), (2, 5, 1), (3, 7, 2), (4, 8, 3), (5, 9, 0)])
def test_full_deal_bellman_identities(seed, decl, leader):
    state = GameState.new(deal_from_seed(seed).tolist(), decl, leader)
    root = solver.solve_state(state)
    maximize = state.current_player % 2 == 0
    assert set(root.q) == set(state.legal_moves())
    assert root.v == (max if maximize else min)(root.q.values())
    assert -42 <= root.v <= 42
    for a, qa in root.q.items():
        nxt = state.play(a)
        assert qa == (nxt.score - state.score) + solver.solve_state(nxt, pv=False).v
    # one step further, where a trick completes: Q = trick points + V(next)
    s = state
    for a in root.pv[:4]:
        s = s.play(a)
    last = solver.solve_state(GameState(s.hands, s.decl, s.leader, s.trick))
    _check_pv(s, last)
    _check_pv(state, root)


def test_tt_reuse_across_a_game_matches_fresh_solves():
    """Positions of one game in order (TT kept), interleaved with other deals (TT dropped),
    equal solves from an empty TT."""
    rng = random.Random(11)
    state = GameState.new(deal_from_seed(42).tolist(), 6, 1)
    other = GameState.new(deal_from_seed(43).tolist(), 6, 1)
    kept, fresh = [], []
    positions = []
    while not state.is_over:
        positions.append(state)
        state = state.play(rng.choice(state.legal_moves()))
    for i, s in enumerate(positions):
        kept.append(solver.q_values(s.hands, s.decl, s.leader, s.trick))
        if i % 5 == 4:
            solver.q_values(other.hands, other.decl, other.leader)  # another deal in between
    for s in positions:
        solver.clear()
        fresh.append(solver.q_values(s.hands, s.decl, s.leader, s.trick))
    assert kept == fresh


def test_q_batch_equals_solve():
    rng = random.Random(5)
    states = [_endgame_from_deal(rng, d % 10, d % 4, 1 + d % 7, d % 4) for d in range(24)]
    hands = np.array([[mask_of(h) for h in s.hands] for s in states], np.int64)
    trick = np.array([list(s.trick) + [-1] * (3 - len(s.trick)) for s in states])
    q = solver.q_batch(hands, [s.decl for s in states], [s.leader for s in states], trick)
    assert q.shape == (24, N_TILES) and q.dtype == np.int8
    for row, s in zip(q, states):
        want = solver.q_values(s.hands, s.decl, s.leader, s.trick)
        got = {t: int(x) for t, x in enumerate(row) if x != solver.ILLEGAL}
        assert got == want


def test_q_batch_rejects_bad_rows():
    good = [mask_of([0]), mask_of([1]), mask_of([2]), mask_of([3])]
    with pytest.raises(ValueError, match="row 1: a tile is in two hands"):
        solver.q_batch([good, [1, 1, 4, 8]], [0, 0], [0, 0], [[-1] * 3] * 2)
    with pytest.raises(ValueError, match="28-bit"):
        solver.q_batch([[1 << 28, 2, 4, 8]], [0], [0], [[-1] * 3])


@pytest.mark.parametrize("hands,decl,leader,trick,match", [
    ([[0], [1], [2]], 0, 0, (), "4 seats"),
    ([[0], [1], [2], [29]], 0, 0, (), "unknown tile"),
    ([[0, 0], [1, 2], [3, 4], [5, 6]], 0, 0, (), "twice"),
    ([[0], [0], [2], [3]], 0, 0, (), "two hands"),
    ([[0, 1], [2], [3, 4], [5, 6]], 0, 0, (), "hand sizes"),
    ([[0], [1], [2], [3]], 10, 0, (), "decl"),
    ([[0], [1], [2], [3]], 0, 4, (), "leader"),
    ([[0], [1], [2], [3]], 0, 0, (4,), "hand sizes"),
    ([[], [1], [2], [3]], 0, 0, (2,), "also in a hand"),
])
def test_invalid_states_raise(hands, decl, leader, trick, match):
    with pytest.raises(ValueError, match=match):
        solver.solve(hands, decl, leader, trick)


def test_last_trick_mid_trick_state():
    # blanks trump: seat 0 led the 0-0, the highest blank; the trick (no count) is worth 1
    res = solver.solve([[], [1], [2], [3]], 0, 0, (0,))
    assert res.q == {1: 1} and res.v == 1 and res.pv == [1, 2, 3]


def test_game_over_state_has_value_zero():
    res = solver.solve([[], [], [], []], 0, 2)
    assert res.v == 0 and res.q == {} and res.pv == []


# ---------------------------------------------------------------- eqfast-solve CLI

def _run_cli(capsys, argv):
    from eqfast.cli.solve import main

    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_json_shape_and_values(capsys):
    import json

    code, out, _ = _run_cli(capsys, ["--seed", "7", "--decl", "5", "--leader", "1", "--json"])
    assert code == 0
    obj = json.loads(out)  # exactly one JSON object, nothing else on stdout
    assert set(obj) == {"decl", "leader", "hands", "v", "q", "pv"}
    assert obj["decl"] == 5 and obj["leader"] == 1
    assert obj["hands"] == deal_from_seed(7).tolist()
    assert sorted(int(t) for t in obj["q"]) == sorted(obj["hands"][1])  # leading: all legal
    assert obj["v"] == min(obj["q"].values())  # seat 1 (team 1) minimizes
    assert len(obj["pv"]) == 28 and sorted(obj["pv"]) == list(range(N_TILES))
    ref = solver.solve(obj["hands"], 5, 1)
    assert obj["v"] == ref.v and obj["pv"] == ref.pv


def test_cli_explicit_short_hands_text(capsys):
    code, out, _ = _run_cli(capsys, ["--hands", "27,0;26,1;25,2;24,3", "--decl", "9"])
    assert code == 0
    assert "6-6" in out and "principal variation" in out and "trick 2" in out


def test_cli_bench_last_line(capsys):
    import re

    code, out, _ = _run_cli(capsys, ["--bench", "3", "--decl", "4"])
    assert code == 0
    assert re.fullmatch(r"deals=3 median_ms=[\d.]+ p90_ms=[\d.]+ nodes_per_s=\d+",
                        out.strip().splitlines()[-1])


@pytest.mark.parametrize("argv,needle", [
    (["--hands", "1,2;3,4;5,6", "--decl", "0"], "4 ';'-separated seats"),
    (["--hands", "1,2;3,4;5,6;7,7", "--decl", "0"], "duplicate"),
    (["--hands", "1,2;3,4;5,6;7,28", "--decl", "0"], "unknown tile"),
    (["--hands", "1,2;3,4;5,6;7,x", "--decl", "0"], "not a tile id"),
    (["--hands", "1,2;3,4;5,6;7", "--decl", "0"], "equal numbers"),
    (["--hands", "1,2,3,4,5,6,7,8;9;10;11", "--decl", "0"], "equal numbers"),
    (["--seed", "1", "--decl", "10"], "--decl must be 0..9"),
    (["--seed", "1", "--decl", "3", "--leader", "4"], "--leader must be 0..3"),
    (["--seed", "1"], "--decl is required"),
    ([], "give --seed"),
], ids=["seats", "duplicate", "unknown", "not-int", "unequal", "too-many", "decl", "leader",
        "no-decl", "no-deal"])
def test_cli_invalid_input_exits_2(capsys, argv, needle):
    from eqfast.cli.solve import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err


def test_cli_subprocess_exit_codes():
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "eqfast.cli.solve"]
    ok = subprocess.run(cmd + ["--seed", "3", "--decl", "7", "--json"], capture_output=True,
                        text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["decl"] == 7
    bad = subprocess.run(cmd + ["--hands", "1;2;3;3", "--decl", "0"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "duplicate" in bad.stderr and bad.stdout == ""


# ---------------------------------------------------------------- equivalent tiles, threads

@pytest.mark.parametrize("tricks_left", [3, 4], ids=lambda k: f"tricks{k}")
def test_root_q_of_played_out_endgames_matches_reference(tricks_left):
    """Equivalent-tile pruning depends on which suits other seats can still lead, so it
    fires mostly in played-out endgames (dead suits): root Q and V of 60 (24) of them, from deals
    played at random to 3-4 tricks left with 0..3 tiles in the current trick, equal the
    full-width minimax."""
    from reference_minimax import q_and_v

    rng = random.Random(2000 + tricks_left)
    for i in range(60 if tricks_left == 3 else 24):
        state = _endgame_from_deal(rng, i % N_DECLS, rng.randrange(N_SEATS), tricks_left,
                                   rng.randrange(4))
        ref_q, ref_v = q_and_v(state)
        solver.clear()
        got = solver.solve_state(state, pv=False)
        assert (got.q, got.v) == (ref_q, ref_v), f"endgame {i}: {state.hands} {state.trick}"


def _random_rows(n: int, seed: int):
    """n positions of random games (all tricks, 0..3 tiles in the current trick) as q_batch
    inputs, several consecutive positions per deal."""
    rng = random.Random(seed)
    states = []
    while len(states) < n:
        state = GameState.new(deal_from_seed(rng.randrange(2**32)).tolist(), rng.randrange(10),
                              rng.randrange(4))
        for _ in range(rng.randrange(4, 28)):
            state = state.play(rng.choice(state.legal_moves()))
        states += [state] if rng.random() < 0.5 else [state, state.play(state.legal_moves()[0])]
    states = [s for s in states if not s.is_over][:n]
    hands = np.array([[mask_of(h) for h in s.hands] for s in states], np.int64)
    trick = np.array([list(s.trick) + [-1] * (3 - len(s.trick)) for s in states])
    return states, hands, [s.decl for s in states], [s.leader for s in states], trick


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_q_batch_is_identical_for_every_thread_count(threads):
    states, *rows = _random_rows(90, seed=threads)
    one = solver.q_batch(*rows, threads=1)
    solver.clear()
    assert np.array_equal(solver.q_batch(*rows, threads=threads), one)
    for row, s in zip(one[::9], states[::9]):
        assert {t: int(x) for t, x in enumerate(row) if x != solver.ILLEGAL} == \
            solver.q_values(s.hands, s.decl, s.leader, s.trick)


def test_q_batch_rejects_bad_thread_counts():
    good = [[mask_of([0]), mask_of([1]), mask_of([2]), mask_of([3])]]
    for threads in (0, 65):
        with pytest.raises(ValueError, match="threads"):
            solver.q_batch(good, [0], [0], [[-1] * 3], threads=threads)


def test_concurrent_python_threads_get_correct_answers():
    """The extension's tables are shared: calls from several Python threads (each releasing
    the GIL while it searches) are serialized inside it and all get exact answers."""
    import threading

    states, *rows = _random_rows(40, seed=9)
    want = solver.q_batch(*rows)
    got, errors = {}, []

    def work(i):
        try:
            got[i] = solver.q_batch(*rows, threads=1 + i % 2)
            s = states[i]
            assert solver.q_values(s.hands, s.decl, s.leader, s.trick) == \
                {t: int(x) for t, x in enumerate(want[i]) if x != solver.ILLEGAL}
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(np.array_equal(q, want) for q in got.values()) and len(got) == 4


@pytest.mark.parametrize("tricks_left", [2, 3])
def test_v_batch_equals_the_reference_minimax_value(tricks_left):
    """v_batch (V alone, by MTD(f) on the position) against the full-width minimax of
    reference_minimax on endgames from played-out deals and shortened hands, with 0..3
    tiles in the current trick, for every declaration and leader, with a fresh TT and a warm
    one."""
    from reference_minimax import q_and_v

    rng = random.Random(3000 + tricks_left)
    states = []
    for decl in range(N_DECLS):
        for leader in range(N_SEATS):
            states.append(_endgame_from_deal(rng, decl, leader, tricks_left, rng.randrange(4)))
            states.append(_shortened_hands(rng, decl, leader, tricks_left))
    hands = np.array([[mask_of(h) for h in s.hands] for s in states], np.int64)
    trick = np.array([list(s.trick) + [-1] * (3 - len(s.trick)) for s in states])
    want = [q_and_v(s)[1] for s in states]
    for _ in range(2):
        solver.clear()
        got = solver.v_batch(hands, [s.decl for s in states], [s.leader for s in states], trick)
        assert got.tolist() == want


@pytest.mark.parametrize("threads", [1, 3])
def test_v_batch_is_the_best_q_of_q_batch_at_every_depth(threads):
    """On 200 positions of random games (every trick, mid-trick included), V from v_batch is
    the actor's best legal Q from q_batch (max for team 0, min for team 1), whatever the TT
    holds and the thread count."""
    states, *rows = _random_rows(200, seed=40 + threads)
    solver.clear()
    v = solver.v_batch(*rows, threads=threads)
    q = solver.q_batch(*rows).astype(int)
    legal = q != solver.ILLEGAL
    team0 = np.array([s.current_player % 2 == 0 for s in states])
    best = np.where(team0, np.where(legal, q, -999).max(1), np.where(legal, q, 999).min(1))
    assert v.dtype == np.int8 and v.tolist() == best.tolist()
    assert solver.v_batch(*rows, threads=threads).tolist() == v.tolist()   # warm TT
