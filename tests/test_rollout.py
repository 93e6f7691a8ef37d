"""Stage 2 rollouts as labels (eqfast/stage2/rollout.py, `eqfast-generate --oracle
rollout`): the engine's E[Q] under the rollout oracle is the `search` player's value where
both hold every consistent world, the records are valid, and what cannot run is refused."""
from __future__ import annotations

import pytest
import torch

from eqfast.cli import generate
from eqfast.data.schema import check_invariants
from eqfast.data.shards import load_records
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.transcript import current_hand_order
from eqfast.play.arena import setup_games
from eqfast.play.policies import Stage2Policy
from eqfast.play.search import SearchPolicy
from eqfast.rules.batched import BatchedGames
from eqfast.stage2.rollout import RolloutOracle, rollout_from_spec

SEEDS = list(range(500, 506))


@pytest.mark.parametrize("d,turns", [(21, 7), (22, 1)])
def test_engine_labels_equal_search_values_on_enumerated_worlds(d, turns):
    """Late in the hand every consistent world fits in 256: the engine's worlds and the
    search's are then the same set, so E[Q] must equal the search's mean, move by move."""
    stage2 = Stage2Policy()
    hands, decl, leader = setup_games(SEEDS)
    games = BatchedGames.new(hands, decl, leader)
    for k in range(d):
        games = games.play(stage2.decide(games, SEEDS, k))
    engine = Engine(RolloutOracle(stage2.model, turns), EngineConfig(n_samples=256))
    records, _ = engine.decide(games, SEEDS, d, torch.as_tensor(SEEDS))
    assert bool(records["enumerated"].all())
    want = SearchPolicy(n_worlds=256, turns=turns).values(games, SEEDS, d)
    slot = current_hand_order(games)                    # hand token i -> initial slot
    legal = records["legal_mask"]
    assert int(legal.sum()) > len(SEEDS)                # some decision offers a choice
    for g in range(len(SEEDS)):
        for i in torch.nonzero(legal[g])[:, 0].tolist():
            got, exp = float(records["e_q_mean"][g, i]), float(want[g, slot[g, i]])
            assert got == pytest.approx(max(-42.0, min(42.0, exp)), abs=1e-3), (g, i)


def test_generate_with_rollout_labels(tmp_path):
    out = tmp_path / "d"
    argv = ["--out", str(out), "--games", "2", "--games-per-batch", "2", "--n-samples", "3",
            "--oracle", "rollout:2", "--threads", "1", "--quiet"]
    assert generate.main(argv) == 0
    records, metas = load_records(out)
    assert check_invariants(records) == [] and len(records) == 56
    assert metas[0]["oracle"]["name"] == "rollout:2"
    assert metas[0]["oracle"]["sha256"].endswith("+rollout2")
    assert bool((records["e_q_mean"][records["legal_mask"]].abs() <= 42).all())


@pytest.mark.parametrize("extra,message", [
    (["--pipeline", "fast"], "reference pipeline only"),
    (["--posterior"], "needs a --behaviour-oracle"),
    (["--control-variate", "default"], "takes no --control-variate"),
    (["--exact-tricks", "2"], "takes no --exact-tricks"),
])
def test_generate_refuses_what_rollouts_cannot_do(tmp_path, capsys, extra, message):
    argv = ["--out", str(tmp_path / "d"), "--games", "2", "--oracle", "rollout", "--quiet",
            *extra]
    assert generate.main(argv) == 2
    assert message in capsys.readouterr().err


def test_rollout_elsewhere_and_bad_specs_are_refused(tmp_path, capsys):
    argv = ["--out", str(tmp_path / "d"), "--games", "2", "--oracle", "default", "--quiet",
            "--posterior", "--behaviour-oracle", "rollout"]
    assert generate.main(argv) == 2
    assert "can only be the main --oracle" in capsys.readouterr().err
    with pytest.raises(ValueError, match="whole number 1..7"):
        rollout_from_spec("rollout:x")
    with pytest.raises(ValueError, match="1..7"):
        rollout_from_spec("rollout:9")
    with pytest.raises(ValueError, match="does not exist"):
        rollout_from_spec("rollout:7:/no/such.safetensors")


def test_exact_rest_ends_the_rollout_at_its_trick():
    """rollout_values(exact_from=16): each move is played, Stage 2 plays every seat on to
    the 16th play (the start of trick 5), and the solver's perfect-information value of the
    rest is added to the points taken on the way, in the actor's team frame (replayed here
    one row at a time); from trick 5 on the values are the solver's Q of the moves."""
    import numpy as np

    from eqfast.engine.public import slots_to_tile_mask
    from eqfast.solver import ILLEGAL, q_batch, v_batch
    from eqfast.stage2.policy import stage2_slots
    from eqfast.stage2.rollout import rollout_values

    stage2 = Stage2Policy()
    hands, decl, leader = setup_games(SEEDS)
    games = BatchedGames.new(hands, decl, leader)
    for k in range(10):
        games = games.play(stage2.decide(games, SEEDS, k))
    got = rollout_values(stage2.model, games, exact_from=16)
    legal = games.legal_mask()
    assert torch.equal(torch.isfinite(got), legal)
    checked = 0
    for g in range(len(SEEDS)):
        actor = int(games.current_player[g])
        sign = 1 if actor % 2 == 0 else -1
        for m in torch.nonzero(legal[g])[:, 0].tolist():
            one = games.select(torch.tensor([g])).play(torch.tensor([m]))
            while int(one.n_plays[0]) < 16:
                one = one.play(stage2_slots(stage2.model, one))
            mask = slots_to_tile_mask(one.hands, one.remaining).numpy()
            rest = int(v_batch(mask, one.decl.numpy(), one.leader.numpy(),
                               one.trick[:, :3].numpy())[0])
            want = sign * (int(one.score()[0] - games.score()[g]) + rest)
            assert float(got[g, m]) == pytest.approx(want), (g, m)
            checked += 1
    assert checked > len(SEEDS)
    # past the first exact play the value of a move is its perfect-information Q
    for k in range(10, 17):
        games = games.play(stage2.decide(games, SEEDS, k))
    got = rollout_values(stage2.model, games, exact_from=16)
    mask = slots_to_tile_mask(games.hands, games.remaining).numpy()
    q = q_batch(mask, games.decl.numpy(), games.leader.numpy(), games.trick[:, :3].numpy())
    rows = torch.arange(len(SEEDS))
    actor = games.current_player
    q_slot = torch.from_numpy(q.astype(np.int64))[rows[:, None], games.hands[rows, actor].clamp(min=0)]
    sign = torch.where(actor % 2 == 0, 1, -1)[:, None]
    legal = games.legal_mask()
    assert bool((q_slot[legal] != ILLEGAL).all())
    assert torch.equal(got[legal], (sign * q_slot).float()[legal])


def test_exact_rollout_specs():
    oracle, ident = rollout_from_spec("rollout:exact5")
    assert oracle.exact_from == 16 and oracle.turns == 7
    assert ident["sha256"].endswith("+rollout-exact5") and "then exact" in ident["label"]
    for bad in ("rollout:exact1", "rollout:exact8", "rollout:exactx"):
        with pytest.raises(ValueError, match="exactK"):
            rollout_from_spec(bad)
