"""eqfast.analysis.truth and `eqfast-validate --truth`: the true deal's Q of each record
against the plain Python minimax (endgame decisions, game rebuilt with GameState from the
seed and the transcript), the stored weights' scores against a recomputation by hand,
uniform records gaining exactly nothing, the paired interval, and the command's output and
its refusal of records without stored worlds."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from cliutil import assert_usage_error, run_cli
from reference_minimax import q_and_v

from eqfast.analysis import truth
from eqfast.analysis.validation import transcript_plays
from eqfast.engine.games import declarer_of
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.posterior import PosteriorConfig
from eqfast.engine.transcript import F_DECL
from eqfast.oracle import load_default_oracle
from eqfast.rules.deal import deal_from_seed
from eqfast.rules.state import GameState


@pytest.fixture(scope="module")
def records():
    cfg = EngineConfig(n_samples=16, posterior=PosteriorConfig(window_k=6), seed=3,
                       store_worlds=True)
    return Engine(load_default_oracle(), cfg).play([21, 22, 23])


def _state(records, r: int) -> GameState:
    """The record's position rebuilt with the scalar rules: deal, declarer, transcript."""
    seed = int(records["seed"][r])
    tokens = records["transcript_tokens"][r]
    state = GameState.new(deal_from_seed(seed).tolist(), int(tokens[0, F_DECL]),
                          declarer_of(seed))
    for tile in transcript_plays(tokens, int(records["transcript_lengths"][r]))[0]:
        state = state.play(tile)
    return state


def test_true_q_equals_the_minimax_in_endgames(records):
    late = torch.nonzero(records["decision_idx"] >= 20)[:, 0]
    q = truth.records_true_q(records.select(late))
    checked = 0
    for i, r in enumerate(late.tolist()):
        state = _state(records, r)
        assert state.current_player == int(records["actor"][r])
        q_ref, _ = q_and_v(state)
        sign = 1 if state.current_player % 2 == 0 else -1
        hand = sorted(state.hands[state.current_player])           # current-hand order
        for slot in range(7):
            if slot < len(hand) and hand[slot] in q_ref:
                assert q[i, slot].item() == sign * q_ref[hand[slot]]
                checked += 1
            else:
                assert math.isnan(q[i, slot].item())
    assert checked >= 3 * 8


def test_stored_scores_equal_a_recomputation(records):
    rep = truth.truth_report(records)
    p_true = brier = tiles = 0.0
    for r in range(len(records)):
        w = records["world_weight"][r].double().numpy()
        owner = records["world_owner"][r].long().numpy()[w > 0]
        w = w[w > 0] / w[w > 0].sum()
        real = truth.true_owner(int(records["seed"][r]))
        for tile in range(28):
            if len(set(owner[:, tile])) < 2:
                continue
            p = np.array([w[owner[:, tile] == s].sum() for s in range(4)])
            p_true += p[real[tile]]
            brier += ((p - (np.arange(4) == real[tile])) ** 2).sum()
            tiles += 1
    assert rep["contested_tiles"] == tiles
    assert rep["p_true_stored"] == pytest.approx(p_true / tiles, rel=1e-9)
    assert rep["brier_stored"] == pytest.approx(brier / tiles, rel=1e-9)
    assert rep["p_true_gain"] == pytest.approx(rep["p_true_stored"] - rep["p_true_uniform"])
    assert rep["p_true_stored"] != rep["p_true_uniform"]       # the posterior moved weights


def test_uniform_records_gain_nothing():
    cfg = EngineConfig(n_samples=16, seed=3, store_worlds=True)
    rep = truth.truth_report(Engine(load_default_oracle(), cfg).play([21]))
    for key in ("p_true_gain", "brier_gain", "eq_sq_error_gain"):
        assert rep[key] == pytest.approx(0.0, abs=1e-12)
    assert 0 < rep["p_true_uniform"] < 1 and rep["eq_rmse_uniform"] > 0


def test_paired_gain_on_known_numbers():
    mean, half = truth.paired_gain(np.array([[3.0], [5.0]]), np.array([[1.0], [1.0]]),
                                   np.array([[2.0], [2.0]]))
    assert mean == pytest.approx(1.5)                    # (2 + 4) / 4
    assert half == pytest.approx(1.96 * 2.0 / 4)         # residuals -1, +1 over 2 games


def test_missing_worlds_are_refused(records):
    bare = type(records)({k: v for k, v in records.tensors.items()
                          if k not in ("world_q", "world_weight", "world_owner")})
    with pytest.raises(ValueError, match="--store-worlds"):
        truth.truth_report(bare)


def test_validate_truth_command(tmp_path):
    out = tmp_path / "run"
    gen = run_cli("generate", "--games", "2", "--games-per-batch", "2", "--out", out,
                  "--oracle", "default", "--n-samples", "8", "--posterior", "--store-worlds",
                  "--quiet", "--threads", "1")
    assert gen.returncode == 0, gen.stderr
    proc = run_cli("validate", out, "--truth", "--json")
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)["truth"]
    assert rep["n_games"] == 2 and rep["contested_tiles"] > 0 and "1" in rep["by_trick"]
    table = run_cli("validate", out, "--truth")
    assert table.returncode == 0 and "Brier, stored weights" in table.stdout
    bare = tmp_path / "bare"
    assert run_cli("generate", "--games", "1", "--out", bare, "--oracle", "default",
                   "--n-samples", "4", "--quiet").returncode == 0
    assert_usage_error(run_cli("validate", bare, "--truth"), "--truth", "--store-worlds")
