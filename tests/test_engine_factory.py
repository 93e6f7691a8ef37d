"""eqfast.engine.factory: one place picks the pipeline, and both engines answer the same
run(batches, sink, on_batch) with the same records."""
import pytest
import torch
from fakes import HashOracle

from eqfast.data.schema import InvariantError
from eqfast.engine.factory import build_engine, pipeline_name, pipeline_problem, resolve_pipeline
from eqfast.engine.fast import FastEngine
from eqfast.engine.pipeline import Engine, EngineConfig


def test_pipeline_choice_and_its_rules():
    assert resolve_pipeline("auto", "cpu") == "reference"
    assert resolve_pipeline("auto", "cuda") == "fast" == resolve_pipeline("fast", "cpu")
    with pytest.raises(ValueError, match="pipeline must be one of"):
        resolve_pipeline("quick", "cpu")
    adaptive = EngineConfig(n_samples=8, sem=1.0)
    assert "fixed --n-samples" in pipeline_problem("fast", "cpu", adaptive, False)
    assert pipeline_problem("reference", "cpu", adaptive, False) is None
    assert "C solver" in pipeline_problem("auto", "cuda", EngineConfig(), solver_in_step=True)
    assert pipeline_problem("fast", "cpu", EngineConfig(), solver_in_step=True) is None
    with pytest.raises(ValueError, match="fixed --n-samples"):
        build_engine(HashOracle(), adaptive, pipeline="fast")


def test_both_engines_run_the_same_batches_into_the_same_records():
    cfg = EngineConfig(n_samples=6, seed=3)
    runs = {}
    for pipeline in ("reference", "fast"):
        engine = build_engine(HashOracle(), cfg, pipeline=pipeline, backend="reference")
        assert isinstance(engine, FastEngine if pipeline == "fast" else Engine)
        assert pipeline_name(engine) == ("fast (no graphs)" if pipeline == "fast" else "reference")
        got = []
        n = engine.run([[1, 2], [3], [4, 5]], lambda seeds, r: got.append((seeds, r)),
                       on_batch=lambda seeds: seeds == [3])      # stop after the second batch
        assert n == 2 and [s for s, _ in got] == [[1, 2], [3]]
        runs[pipeline] = got
    for (_, a), (_, b) in zip(runs["reference"], runs["fast"]):
        assert torch.equal(a["transcript_tokens"], b["transcript_tokens"])
        torch.testing.assert_close(a["e_q_mean"], b["e_q_mean"], equal_nan=True)


def test_reference_run_checks_invariants_before_the_sink(monkeypatch):
    engine = build_engine(HashOracle(), EngineConfig(n_samples=4), pipeline="reference")
    def broken_play(seeds):                     # records with a negative variance
        records = Engine.play(engine, seeds)
        records.tensors["e_q_var"][0, 0] = -1.0
        return records
    monkeypatch.setattr(engine, "play", broken_play)
    seen = []
    with pytest.raises(InvariantError):
        engine.run([[7]], lambda seeds, r: seen.append(seeds))
    assert seen == []
