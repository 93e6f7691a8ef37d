"""`eqfast.generate_eq_game`: the records of one caller-given deal, the same as the engine's
on that deal, with clear errors for a deal that is not one."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import eqfast
from eqfast.engine.factory import build_engine
from eqfast.engine.games import setup_games
from eqfast.engine.pipeline import EngineConfig
from eqfast.oracle.factory import oracle_from_spec


def test_a_seeds_own_deal_gives_the_engines_records():
    """Given the deal, declaration and declarer game seed 42 draws, the one-call API writes
    exactly the records eqfast-generate's reference engine writes for seed 42."""
    hands, decl, leader = setup_games([42])
    got = eqfast.generate_eq_game("default", hands[0].tolist(), int(decl[0]), 16,
                                  leader=int(leader[0]), game_seed=42)
    oracle, _ = oracle_from_spec("default", "cpu")
    want = build_engine(oracle, EngineConfig(n_samples=16), pipeline="reference").play([42])
    assert len(got) == 28
    for k, v in want.tensors.items():
        assert torch.equal(got.tensors[k], v), k


def test_a_constructed_deal_is_played_from_those_hands():
    """Seat s holds tiles 7s..7s+6; doubles trump, seat 2 declares: every move played is
    a tile of the acting seat's own hand, and the first actor is seat 2."""
    hands = [list(range(7 * s, 7 * s + 7)) for s in range(4)]
    rec = eqfast.generate_eq_game("default", hands, 7, 8, leader=2, game_seed=5)
    assert len(rec) == 28
    assert int(rec.tensors["actor"][0]) == 2
    tokens = rec.tensors["transcript_tokens"]
    assert tokens.shape[0] == 28 and torch.isfinite(
        rec.tensors["e_q_mean"][rec.tensors["legal_mask"]]).all()


@pytest.mark.parametrize("hands,decl,leader,message", [
    ([[0] * 7] * 4, 0, 0, "28 tiles once each"),
    ([list(range(7))] * 3, 0, 0, "shape"),
    ([list(range(7 * s, 7 * s + 7)) for s in range(3)] + [[21, 22, 23, 24, 25, 26, 28]], 0, 0,
     "tile ids run 0..27"),
    ([list(range(7 * s, 7 * s + 7)) for s in range(4)], 10, 0, "decl must be 0..9"),
    ([list(range(7 * s, 7 * s + 7)) for s in range(4)], 0, 4, "leader"),
    ("6-6,6-5", 0, 0, "4 lists of 7 tile ids"),
])
def test_a_bad_deal_is_refused_by_name(hands, decl, leader, message):
    with pytest.raises(ValueError, match=message):
        eqfast.generate_eq_game("default", hands, decl, 4, leader=leader)


def test_import_eqfast_stays_light():
    """The API is reached as eqfast.generate_eq_game, yet `import eqfast` alone loads no
    torch (the commands' --help depends on it)."""
    code = "import sys, eqfast; assert 'torch' not in sys.modules; print('light')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "light", out.stderr
    assert callable(eqfast.generate_eq_game)
    with pytest.raises(AttributeError):
        eqfast.no_such_thing  # noqa: B018
