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
