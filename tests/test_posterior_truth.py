"""benchmarks/posterior_truth.py: its comparisons are paired (a variant equal to the played
one scores exactly the same), the true deal's Q agrees with the engine's legal moves at every
decision (the script raises otherwise), the played variant's scores equal a recomputation
from the records' stored worlds and weights and the deals of their seeds, and the probe
leaves the pipeline as it found it."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from eqfast.engine import pipeline
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.oracle import load_default_oracle

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("_posterior_truth",
                                               ROOT / "benchmarks/posterior_truth.py")
truth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(truth)


@pytest.fixture(scope="module")
def table():
    names = ["spec", "delta=30", "window_k=4", "tau=3", "beh=stage2"]
    variants = {n: truth.parse_variant(n) for n in names}
    engine = Engine(load_default_oracle(), EngineConfig(
        n_samples=16, posterior=variants["spec"][0], seed=0, store_worlds=True))
    before = (pipeline.prefix_oracle_batch, pipeline.records_from_step)
    # Stage 2 as behaviour model: its legal moves at every window step of every world are
    # checked against the prefix batch's (the replay of each world's deal and the slot map)
    probe = truth.Probe(engine, variants, truth.load_stage2())
    try:
        records = engine.play([11, 12, 13])
    finally:
        probe.close()
    assert (pipeline.prefix_oracle_batch, pipeline.records_from_step) == before
    return probe.table(), names, records


def test_a_variant_equal_to_the_played_one_scores_the_same(table):
    t, names, _ = table
    assert t["tiles"].sum() > 0 and t["moves"].sum() > 0
    for key in truth.SCORE_KEYS:
        np.testing.assert_array_equal(t[f"{key}:spec"], t[f"{key}:delta=30"])
    # a different variant does differ, so the equality above is not vacuous
    assert not np.array_equal(t["brier:spec"], t["brier:tau=3"])
    assert not np.array_equal(t["brier:spec"], t["brier:beh=stage2"])
    lines = truth.report(t, names)
    assert any(line.startswith("delta=30") and "Brier +0.0000 +- 0.0000" in line
               for line in lines)


def test_probabilities_are_probabilities(table):
    t, _, _ = table
    for name in ("uniform", "spec", "tau=3"):
        assert (t[f"p:{name}"] <= t["tiles"] + 1e-9).all()       # P(true) <= 1 per tile
        assert (t[f"brier:{name}"] <= 2 * t["tiles"] + 1e-9).all()   # Brier <= 2 per tile


def test_played_scores_equal_a_recomputation_from_the_records(table):
    t, _, records = table
    seeds = sorted(set(records["seed"].tolist()))
    p_true = np.zeros(len(seeds))
    brier = np.zeros(len(seeds))
    for r in range(len(records)):
        g = seeds.index(int(records["seed"][r]))
        w = records["world_weight"][r].double().numpy()
        owner = records["world_owner"][r].long().numpy()[w > 0]
        w = w[w > 0] / w[w > 0].sum()
        real = truth.true_owner(seeds[g])
        for tile in range(28):
            if len(set(owner[:, tile])) < 2:
                continue                                  # not contested
            p = np.array([w[owner[:, tile] == s].sum() for s in range(4)])
            p_true[g] += p[real[tile]]
            brier[g] += ((p - (np.arange(4) == real[tile])) ** 2).sum()
    np.testing.assert_allclose(t["p:spec"].sum(1), p_true, rtol=1e-5)
    np.testing.assert_allclose(t["brier:spec"].sum(1), brier, rtol=1e-5)


def test_variant_parsing():
    assert truth.parse_variant("tau=3+window_k=16")[0].window_k == 16
    assert truth.parse_variant("own_plays=false")[0].own_plays is False
    assert truth.parse_variant("beh=stage2+tau=20") == (truth.PosteriorConfig(tau=20.0), "stage2")
    with pytest.raises(ValueError, match="FIELD=VALUE"):
        truth.parse_variant("temperature=3")
