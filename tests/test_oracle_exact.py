"""ExactOracle against the solver, and the actor-frame contract."""
import numpy as np
import pytest
import torch

pytest.importorskip("eqfast.solver._csolver", reason="C solver not built")

from eqfast.oracle import ExactOracle, OracleBatch, legal_slots  # noqa: E402
from eqfast.oracle.dataset import label_game, position_of  # noqa: E402
from eqfast.rules.deal import deal_from_seed  # noqa: E402
from eqfast.rules.state import GameState  # noqa: E402
from eqfast.solver import solve  # noqa: E402


def positions(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        hands = deal_from_seed(500 + i).astype(np.int64)
        state = GameState.new(hands.tolist(), int(rng.integers(10)), int(rng.integers(4)))
        for _ in range(int(rng.integers(8, 28))):  # mid-game: keeps each solve fast
            state = state.play(int(rng.choice(state.legal_moves())))
        out.append((hands, state))
    return out


def test_exact_oracle_equals_solver_in_actor_frame():
    pos = positions(24)
    q, legal = ExactOracle().query(OracleBatch.cat([position_of(h, s) for h, s in pos]))
    assert q.dtype == torch.float32 and q.shape == (24, 7) and legal.shape == (24, 7)
    seen_team1 = 0
    for n, (hands, state) in enumerate(pos):
        ref = solve(state.hands, state.decl, state.leader, state.trick, actor_frame=True).q
        team0 = solve(state.hands, state.decl, state.leader, state.trick).q
        actor = state.current_player
        slots = hands[actor].tolist()
        assert {slots[i] for i in range(7) if legal[n, i]} == set(ref) == set(state.legal_moves())
        for i, t in enumerate(slots):
            if legal[n, i]:
                assert q[n, i].item() == ref[t]
                # actor frame: a team-1 actor sees the negated team-0 value
                assert q[n, i].item() == (team0[t] if actor % 2 == 0 else -team0[t])
        seen_team1 += actor % 2
    assert 0 < seen_team1 < 24


def test_exact_legal_matches_protocol_legal_slots():
    b = OracleBatch.cat([position_of(h, s) for h, s in positions(16, seed=1)])
    _, legal = ExactOracle().query(b)
    assert torch.equal(legal, legal_slots(b))


def test_exact_oracle_rejects_inconsistent_actor():
    hands, state = positions(1, seed=2)[0]
    b = position_of(hands, state)
    bad = OracleBatch(b.hands, b.remaining, b.decl, b.leader, b.trick, (b.actor + 1) % 4)
    with pytest.raises(ValueError, match="actor"):
        ExactOracle().query(bad)


def test_label_game_rows_are_consistent():
    rows = label_game(7)
    assert len(rows["q"]) == 28 and rows["depth"].tolist() == list(range(28))
    assert (rows["legal"].sum(1) >= 1).all() and (np.abs(rows["q"]) <= 42).all()
    # The last decision has one legal move; its Q is the last trick's value in actor frame.
    assert rows["legal"][27].sum() == 1
    # The game's optimal value is consistent: the actor's best Q at depth 0 equals the solver's V.
    hands = deal_from_seed(7).astype(np.int64)
    v = solve(hands.tolist(), int(rows["decl"][0]), int(rows["leader"][0]), actor_frame=True).v
    assert rows["q"][0][rows["legal"][0]].max() == v


def test_exact_oracle_threads_give_identical_q():
    b = OracleBatch.cat([position_of(h, s) for h, s in positions(40, seed=3)])
    q1, legal1 = ExactOracle(threads=1).query(b)
    q2, legal2 = ExactOracle(threads=2).query(b)
    assert torch.equal(q1, q2) and torch.equal(legal1, legal2)
    with pytest.raises(ValueError, match="threads"):
        ExactOracle(threads=0)


def test_generate_records_do_not_depend_on_threads(tmp_path):
    """eqfast-generate --threads sets torch's threads and, through them, the exact oracle's
    C threads; the records must be identical."""
    from eqfast.cli import generate
    from eqfast.data.shards import read_dataset

    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            assert generate.main(["--out", str(tmp_path / f"t{threads}"), "--games", "2",
                                  "--games-per-batch", "2", "--n-samples", "6", "--oracle",
                                  "exact", "--threads", str(threads), "--quiet"]) == 0
    finally:
        torch.set_num_threads(before)
    for split in ("train", "val", "test"):
        (r1, _), (r2, _) = (read_dataset(tmp_path / f"t{t}", split) for t in (1, 2))
        assert r1.tensors.keys() == r2.tensors.keys()
        for name, x in r1.tensors.items():
            assert torch.equal(x, r2.tensors[name]), name
