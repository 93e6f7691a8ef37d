"""eqfast-oracle-ladder: each step measures what it says, on tiny settings."""
import json

import pytest
import torch

pytest.importorskip("eqfast.solver._csolver", reason="C solver not built")

from eqfast.analysis import ladder  # noqa: E402
from eqfast.cli import oracle_ladder  # noqa: E402
from eqfast.oracle.network import build_network  # noqa: E402
from eqfast.oracle.weights import DEFAULT_MODEL, save_weights  # noqa: E402

SMALL = ladder.LadderConfig(arch={"arch": "mlp", "hidden": 32, "depth": 1, "roles": 1},
                            train_steps=150, batch=64, one_deal_games=15, deals=8,
                            games_per_deal=2, test_deals=2, spot_deals=4, spot_show=2,
                            pimc_games=2, pimc_worlds=6)


def test_one_deal_fits_and_whole_deals_are_held_out():
    quiet = lambda *a, **k: None  # noqa: E731
    one = ladder.one_deal(SMALL, log=quiet)
    assert one["train"]["positions"] > 2 * one["val"]["positions"] > 0
    assert one["train"]["mse"] < one["val"]["mse"]        # it fits what it trained on
    across = ladder.across_deals(SMALL, log=quiet)
    assert across["test"]["positions"] > 0 and across["val"]["positions"] > 0
    assert across["train"]["mse"] < across["test"]["mse"]


def test_spot_check_and_pimc_tell_a_trained_network_from_a_random_one(tmp_path):
    torch.manual_seed(0)
    random = tmp_path / "random.safetensors"
    config = {"arch": "mlp", "hidden": 32, "depth": 1, "roles": 1}
    save_weights(random, build_network(config), config)
    quiet = lambda *a, **k: None  # noqa: E731
    trained = ladder.spot_check(DEFAULT_MODEL, SMALL, log=quiet)
    untrained = ladder.spot_check(random, SMALL, log=quiet)
    assert trained["positions"] == untrained["positions"] == 4 * 28
    assert trained["v_mae"] < 6 < untrained["v_mae"]
    good = ladder.pimc_agreement(DEFAULT_MODEL, SMALL, log=quiet)
    bad = ladder.pimc_agreement(random, SMALL, log=quiet)
    assert good["decisions"] > 0 and bad["decisions"] > 0   # each plays its own moves
    assert good["agreement"] > bad["agreement"]
    table = ladder.success_table(random, untrained, bad)
    size = [r for r in table if r["metric"].startswith("model size")][0]
    assert size["met"] is True and size["measured"] < 2
    assert [r for r in table if "PIMC" in r["metric"]][0]["measured"] == bad["agreement"]


def test_cli_runs_steps_and_refuses_bad_arguments(capsys):
    assert oracle_ladder.main(["--steps", "3", "--spot-deals", "2", "--spot-show", "1",
                               "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["spot_check"]["positions"] == 56 and "one_deal" not in out
    assert any(r["metric"].startswith("inference") for r in out["success"])
    assert oracle_ladder.main(["--steps", "5"]) == 2
    assert "--steps must be numbers 1..4" in capsys.readouterr().err
    assert oracle_ladder.main(["--weights", "/nonexistent.safetensors"]) == 2
    assert "does not exist" in capsys.readouterr().err
