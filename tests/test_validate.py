"""eqfast-validate and eqfast.engine.validation on a tiny generated dataset (exact oracle,
2 games, N = 8): replay from the seed, recompute z scores (a tampered record is flagged),
outcome correlation, exact label error and its oracle/sampling split."""
from __future__ import annotations

import json
import math

import pytest
import torch

from eqfast.cli import generate, validate
from eqfast.cli.view import load_records
from eqfast.data.schema import DecisionRecords
from eqfast.data.shards import read_shard, write_shard
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.validation import (ReplayError, engine_config, exact_report,
                                      replay_to_decision, run_decisions)
from eqfast.oracle.exact import ExactOracle

SEEDS = (2, 3)          # both in the train split


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("validate") / "ds"
    rc = generate.main(["--out", str(out), "--games", "2", "--games-per-batch", "2",
                        "--seed-start", str(SEEDS[0]), "--n-samples", "8", "--oracle", "exact",
                        "--quiet"])
    assert rc == 0
    records, metas = load_records(out)
    return out, records, metas[0]


def _run(capsys, *args):
    rc = validate.main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_replay_reproduces_records_with_the_run_seed(dataset):
    _, records, meta = dataset
    rows = torch.nonzero(records["decision_idx"] == 13)[:, 0]
    part = records.select(rows)
    again = run_decisions(part, ExactOracle(), meta, seed=meta["run_seed"])
    for name in ("e_q_mean", "e_q_var", "legal_mask", "n_worlds", "ess", "transcript_tokens"):
        assert torch.equal(again[name], part[name]), name


def test_replay_rejects_a_record_with_the_wrong_seed(dataset):
    _, records, _ = dataset
    part = records.select(torch.tensor([10]))
    wrong = DecisionRecords({**part.tensors, "seed": part["seed"] + 100})
    with pytest.raises(ReplayError, match="seed"):
        replay_to_decision(wrong)


def test_recompute_json_shape_and_finite_z(dataset, capsys):
    root, records, _ = dataset
    rc, out, _ = _run(capsys, root, "--recompute", 10, "--sample-seed", 1, "--json")
    assert rc == 0
    rep = json.loads(out)["recompute"]
    assert rep["n_records"] == 10 and rep["fresh_seed"] == 1 and rep["oracle"] == "exact"
    zs = [z for r in rep["records"] for z in r["z"]]
    assert len(zs) == rep["n_moves"] > 0 and all(math.isfinite(z) for z in zs)
    assert rep["mean_abs_z"] < 2.5
    assert rep["max_abs_z_enumerated"] is None or rep["max_abs_z_enumerated"] < 1e-3
    assert {"mean_abs_z", "frac_abs_z_gt_3", "max_abs_z", "flagged"} <= set(rep)


def test_tampered_record_is_flagged(dataset, capsys, tmp_path):
    root, _, _ = dataset
    shard = next((root / "train").glob("*.safetensors"))
    recs, meta = read_shard(shard)
    # an enumerated decision with two legal moves: no sampling error, so +5 points is huge
    cand = recs["enumerated"] & (recs["legal_mask"].sum(1) >= 2)
    i, j = torch.nonzero(cand)[:2, 0].tolist()
    slot = int(torch.nonzero(recs["legal_mask"][i])[0])
    mean = recs["e_q_mean"].clone()
    mean[i, slot] += 5.0
    write_shard(DecisionRecords({**recs.tensors, "e_q_mean": mean}), meta,
                tmp_path / shard.name)
    recs_sorted, _ = load_records(tmp_path / shard.name)
    assert torch.equal(recs_sorted["e_q_mean"], mean)          # already in game order
    rc, out, _ = _run(capsys, tmp_path / shard.name, "--recompute", "--indices", f"{i},{j}",
                      "--json")
    assert rc == 0
    rep = json.loads(out)["recompute"]
    assert [f["index"] for f in rep["flagged"]] == [i]
    assert rep["flagged"][0]["max_abs_z"] > 100
    clean = next(r for r in rep["records"] if r["index"] == j)
    assert clean["max_abs_z"] < 1e-3


def test_outcomes(dataset, capsys):
    root, records, _ = dataset
    rc, out, _ = _run(capsys, root, "--outcomes", "--json")
    assert rc == 0
    rep = json.loads(out)["outcomes"]
    assert rep["n_complete_games"] == 2 and rep["overall"]["n"] == 56
    assert rep["overall"]["pearson_r"] is not None and -1 <= rep["overall"]["pearson_r"] <= 1
    # the last play of a hand is certain: E[Q] equals the realized value to go exactly
    assert rep["by_decision"]["27"]["rmse"] == 0.0
    rc, out, _ = _run(capsys, root, "--outcomes")
    assert rc == 0 and "Pearson r" in out


def test_exact_with_the_exact_oracle_has_no_oracle_error(dataset, capsys):
    root, _, _ = dataset
    rc, out, _ = _run(capsys, root, "--exact", 4, "--decisions", "16:23", "--max-enumerate", 60,
                      "--json")
    assert rc == 0
    rep = json.loads(out)["exact"]
    assert rep["n_records"] == 4 and rep["worlds_mismatch"] == 0
    assert rep["oracle_error"] == pytest.approx(0.0, abs=1e-6)
    assert rep["total_error"] == pytest.approx(rep["sampling_error"], abs=1e-6)


class OffsetOracle:
    """The exact oracle's Q plus 1 point at every legal slot: a known oracle error."""

    def __init__(self):
        self.exact = ExactOracle()

    def query(self, batch):
        q, legal = self.exact.query(batch)
        return q + legal.float(), legal


def test_exact_report_splits_oracle_and_sampling_error():
    records = Engine(OffsetOracle(), EngineConfig(n_samples=8, seed=5)).play([SEEDS[0]])
    part = records.select(torch.nonzero(records["decision_idx"] >= 18)[:, 0][:4])
    meta = {"posterior": {"enabled": False}, "run_seed": 5}
    same = run_decisions(part, ExactOracle(), meta, seed=5)
    exact = run_decisions(part, ExactOracle(), meta, seed=5, n_samples=300)
    rep = exact_report(part, same, exact)
    assert rep["oracle_error"] == pytest.approx(1.0, abs=1e-4)
    assert rep["worlds_mismatch"] == 0
    assert rep["total_error"] <= rep["oracle_error"] + rep["sampling_error"] + 1e-9


def test_engine_config_from_metadata():
    cfg = engine_config({"posterior": {"enabled": True, "tau": 5.0, "beta": 0.2, "window_k": 4,
                                       "delta": 20.0, "ess_remix_threshold": 0.1,
                                       "strict": True}}, seed=7, n_samples=50)
    assert cfg.posterior.tau == 5.0 and cfg.posterior.window_k == 4
    assert cfg.seed == 7 and cfg.n_samples == 50
    assert engine_config({"posterior": {"enabled": False}}, seed=0, n_samples=8).posterior is None


def test_usage_errors_exit_2(dataset, capsys, tmp_path):
    root, _, _ = dataset
    rc, _, err = _run(capsys, tmp_path / "nope", "--outcomes")
    assert rc == 2 and "no such file" in err
    rc, _, err = _run(capsys, root)
    assert rc == 2 and "--recompute" in err
    rc, _, err = _run(capsys, root, "--recompute", "--seed", 0)
    assert rc == 2 and "run seed" in err
    rc, _, err = _run(capsys, root, "--recompute", "--oracle", str(tmp_path / "w.safetensors"))
    assert rc == 2 and "cannot load oracle" in err
