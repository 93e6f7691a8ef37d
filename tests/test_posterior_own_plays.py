"""`PosteriorConfig(own_plays=False)` / `eqfast-generate --skip-own-plays`: the posterior
leaves the acting player's own plays out of the K it scores. The steps it leaves out
against a brute force over the transcript; the engine's records against scoring with
those steps masked by hand; fewer behaviour rows; the CLI flag, its metadata and the
rebuild of the setting by eqfast-validate's engine config."""
import dataclasses
import json

import pytest
import torch
from cliutil import TINY, run_cli
from conftest import random_games
from fakes import HashOracle

from eqfast.analysis.validation import engine_config
from eqfast.data.shards import load_records
from eqfast.engine import pipeline
from eqfast.engine.fast import FastEngine
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.posterior import PosteriorConfig
from eqfast.engine.worlds import own_play_steps


def _brute_own_steps(games, window):
    out = torch.zeros(games.batch_size, window, dtype=torch.bool)
    for g in range(games.batch_size):
        actor = int(games.current_player[g])
        n = int(games.n_plays[g])
        for k in range(window):
            j = n - window + k
            out[g, k] = j >= 0 and int(games.seats[g, j]) == actor
    return out


@pytest.mark.parametrize("window", [1, 3, 8, 12])
def test_own_play_steps_match_a_brute_force(window):
    games = random_games(64, seed=11, plays=(0, 27))
    own = own_play_steps(games, window)
    assert torch.equal(own, _brute_own_steps(games, window))
    if window >= 4:     # every seat plays once in four consecutive plays
        assert bool(own.any(1)[games.n_plays >= 4].all())


class _MaskOwnSteps:
    """Wraps an engine's posterior so that it scores the steps a brute force finds to be
    the actor's own as invalid (the reference for own_plays=False)."""

    def __init__(self, monkeypatch, engine):
        make_prefix = pipeline.prefix_oracle_batch
        state = {}

        def prefix(games, initial, window):
            state["own"] = _brute_own_steps(games, window)
            return make_prefix(games, initial, window)

        backend = engine.backend

        def posterior(q_past, legal_past, observed, step_valid, cfg, world_valid=None):
            return backend.posterior_log_weights(q_past, legal_past, observed,
                                                 step_valid & ~state["own"], cfg,
                                                 world_valid=world_valid)

        monkeypatch.setattr(pipeline, "prefix_oracle_batch", prefix)
        engine.backend = dataclasses.replace(backend, posterior_log_weights=posterior)


def test_engine_records_equal_scoring_with_the_own_steps_masked(monkeypatch):
    seeds = [3, 4, 5]
    skip = Engine(HashOracle(), EngineConfig(n_samples=12, seed=2,
                                             posterior=PosteriorConfig(window_k=6,
                                                                       own_plays=False)))
    a = skip.play(seeds)
    scored = Engine(HashOracle(), EngineConfig(n_samples=12, seed=2,
                                               posterior=PosteriorConfig(window_k=6)))
    b = scored.play(seeds)
    assert not torch.equal(a["ess"], b["ess"])             # the setting changes the weights
    assert skip.oracle_rows < scored.oracle_rows            # and spares the own steps' rows
    masked = Engine(HashOracle(), EngineConfig(n_samples=12, seed=2,
                                               posterior=PosteriorConfig(window_k=6)))
    _MaskOwnSteps(monkeypatch, masked)
    c = masked.play(seeds)
    for name in a.tensors:
        assert torch.equal(a[name].nan_to_num(), c[name].nan_to_num()), name


def test_fast_engine_equals_reference_without_own_plays():
    cfg = EngineConfig(n_samples=12, seed=2, posterior=PosteriorConfig(window_k=6,
                                                                        own_plays=False))
    ref = Engine(HashOracle(), cfg).play([3, 4])
    fast = FastEngine(HashOracle(), cfg, backend="reference", graphs=False).play([3, 4])
    for name in ("e_q_mean", "e_q_var", "ess", "action_taken", "transcript_tokens"):
        assert torch.allclose(ref[name].float(), fast[name].float(), equal_nan=True), name


def test_config_refuses_a_non_bool():
    with pytest.raises(ValueError, match="own_plays"):
        PosteriorConfig(own_plays=0)


def test_generate_flag_metadata_and_validate_config(tmp_path):
    out = tmp_path / "ds"
    proc = run_cli("generate", "--out", out, *TINY, "--posterior", "--window", "4",
                   "--skip-own-plays")
    assert proc.returncode == 0, proc.stderr
    records, metas = load_records(out)
    post = metas[0]["posterior"]
    assert post["enabled"] and post["own_plays"] is False
    assert metas[0]["settings"]["posterior"]["own_plays"] is False
    assert engine_config(metas[0], seed=0, n_samples=4).posterior.own_plays is False
    # files written before the setting existed scored the own plays
    old = {**metas[0], "posterior": {k: v for k, v in post.items() if k != "own_plays"}}
    assert engine_config(old, seed=0, n_samples=4).posterior.own_plays is True
    # the default keeps the settings of directories written before the flag existed
    proc = run_cli("generate", "--out", tmp_path / "plain", *TINY, "--posterior", "--window", "4")
    assert proc.returncode == 0, proc.stderr
    _, plain = load_records(tmp_path / "plain")
    assert "own_plays" not in plain[0]["settings"]["posterior"]
    assert plain[0]["posterior"]["own_plays"] is True
    proc = run_cli("generate", "--out", tmp_path / "off", *TINY, "--skip-own-plays")
    assert proc.returncode == 0, proc.stderr
    assert "--skip-own-plays has no effect without --posterior" in proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["games"] == 2
