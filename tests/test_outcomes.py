"""The outcome fields (realized_to_go, final_points): both pipelines write the same values,
they equal an independent replay of each game from its deal, the invariants catch broken
ones, and eqfast-validate --outcomes reads them instead of replaying."""
import pytest
import torch
from fakes import HashOracle

from eqfast.analysis.validation import outcome_report, realized_values
from eqfast.data.schema import DecisionRecords, check_invariants
from eqfast.engine.fast import FastEngine
from eqfast.engine.pipeline import Engine, EngineConfig


@pytest.fixture(scope="module")
def records():
    return Engine(HashOracle(), EngineConfig(n_samples=6, seed=2)).play([11, 12, 13, 14])


def test_both_pipelines_store_the_replayed_outcome(records):
    fast = FastEngine(HashOracle(), EngineConfig(n_samples=6, seed=2),
                      backend="reference").play([11, 12, 13, 14])
    for name in ("realized_to_go", "final_points"):
        assert torch.equal(records[name], fast[name]), name
    replayed, info = realized_values(records)            # replays the deals' transcripts
    assert info["n_complete_games"] == 4
    assert torch.equal(replayed.float(), records["realized_to_go"])
    final = records["final_points"].long()
    assert (final.sum(1) == 42).all()
    # decision 0's value to go is the whole hand's margin in the first actor's frame
    first = records["decision_idx"] == 0
    margin = (final[:, 0] - final[:, 1]).float()
    sign = 1 - 2 * (records["actor"].long() % 2).float()
    assert torch.equal(records["realized_to_go"][first], (sign * margin)[first])
    assert check_invariants(records) == []


def test_invariants_catch_broken_outcomes(records):
    bad = dict(records.tensors)
    bad["final_points"] = bad["final_points"].clone()
    bad["final_points"][3, 0] += 1                       # 43 points in a hand
    assert any("final_points" in p for p in check_invariants(DecisionRecords(bad)))
    bad = dict(records.tensors)
    bad["realized_to_go"] = bad["realized_to_go"] + 0.5
    assert any("realized_to_go" in p for p in check_invariants(DecisionRecords(bad)))


def test_outcome_report_reads_the_field_and_agrees_with_the_replay(records):
    stored = outcome_report(records)
    old = DecisionRecords({k: v for k, v in records.tensors.items()
                           if k not in ("realized_to_go", "final_points")})
    replayed = outcome_report(old)
    assert stored["source"] == "records" and replayed["source"] == "replay"
    assert stored["overall"] == replayed["overall"] and stored["n_records"] == 4 * 28
