"""eqfast-validate and eqfast.analysis.validation on a tiny generated dataset (exact oracle,
2 games, N = 8): replay from the seed, recompute z scores (a tampered record is flagged),
outcome correlation, exact label error and its oracle/sampling split."""
from __future__ import annotations

import json
import math

import pytest
import torch

from eqfast.cli import generate, validate
from eqfast.data.shards import load_records
from eqfast.data.schema import DecisionRecords
from eqfast.data.shards import read_shard, write_shard
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.analysis.validation import (ReplayError, engine_config, exact_report,
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
    assert rep["oracle_rmse"] == pytest.approx(0.0, abs=1e-6)
    assert rep["oracle_world_rmse"] == pytest.approx(0.0, abs=1e-6)
    assert rep["reproduced_max_abs_diff"] == pytest.approx(0.0, abs=1e-6)
    assert rep["total_rmse"] == pytest.approx(rep["sampling_rmse"], abs=1e-6)


def test_exact_reference_is_fresh(dataset, capsys):
    """The reference draws with another run seed: with as many worlds as the records (N = 8),
    its sampled decisions differ from the records' (the record's own seed would reproduce
    them, sampling error exactly 0), and the records' run seed is refused."""
    root, records, meta = dataset
    sampled = torch.nonzero(~records["enumerated"] & (records["legal_mask"].sum(1) >= 2))[:, 0]
    idx = ",".join(str(int(i)) for i in sampled[:4])
    rc, out, _ = _run(capsys, root, "--exact", "--indices", idx, "--max-enumerate", 8, "--json")
    assert rc == 0
    rep = json.loads(out)["exact"]
    assert rep["reference_seed"] == meta["run_seed"] + 1
    assert rep["sampling_rmse"] > 0.1
    assert rep["sampling_floor_rms"] > 0.1
    rc, _, err = _run(capsys, root, "--exact", 2, "--seed", meta["run_seed"])
    assert rc == 2 and "own run seed" in err


def test_exact_decision_metrics_skip_forced_moves_and_split_by_trick(dataset, capsys):
    root, records, _ = dataset
    rc, out, _ = _run(capsys, root, "--exact", 12, "--decisions", "14:27", "--sample-seed", 3,
                      "--max-enumerate", 40, "--json")
    assert rc == 0
    rep = json.loads(out)["exact"]
    per = rep["records"]
    multi = [r for r in per if r["n_legal"] >= 2]
    assert rep["n_decisions"] == len(multi) < rep["n_records"] == 12   # forced moves exist
    agree = sum(r["regret"] <= 1e-4 for r in multi) / len(multi)
    assert rep["argmax_agreement"] == pytest.approx(agree)
    assert rep["mean_regret"] == pytest.approx(sum(r["regret"] for r in multi) / len(multi))
    tricks = {str(d // 4 + 1) for d in (r["decision_idx"] for r in per)}
    assert set(rep["by_trick"]) == tricks
    for t, row in rep["by_trick"].items():
        assert row["n_records"] == sum(str(r["decision_idx"] // 4 + 1) == t for r in per)
        assert {"oracle_rmse", "oracle_mae", "sampling_floor_rms", "argmax_agreement",
                "mean_regret", "total_rmse"} <= set(row)
    assert sum(r["n_records"] for r in rep["by_trick"].values()) == 12
    rc, out, _ = _run(capsys, root, "--exact", 3, "--decisions", "20:27", "--max-enumerate", 40)
    assert rc == 0 and "oracle-induced RMSE of E[Q]" in out and "trick" in out


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
    kw = dict(seed=5, n_samples=8, store_worlds=True)
    same = run_decisions(part, ExactOracle(), meta, **kw)
    again = run_decisions(part, OffsetOracle(), meta, **kw)
    ref = run_decisions(part, ExactOracle(), meta, seed=6, n_samples=300)
    rep = exact_report(part, same, ref, again)
    assert rep["oracle_rmse"] == pytest.approx(1.0, abs=1e-4)
    assert rep["oracle_mae"] == pytest.approx(1.0, abs=1e-4)
    assert rep["oracle_world_rmse"] == pytest.approx(1.0, abs=1e-4)   # +1 in every world
    assert rep["reproduced_max_abs_diff"] == 0.0
    assert rep["worlds_mismatch"] == 0
    assert rep["total_rmse"] <= rep["oracle_rmse"] + rep["sampling_rmse"] + 1e-9


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


@pytest.fixture(scope="module")
def hybrid_dataset(tmp_path_factory):
    """The shipped network with the last 3 tricks labelled exactly, worlds stored."""
    out = tmp_path_factory.mktemp("validate_hybrid") / "ds"
    rc = generate.main(["--out", str(out), "--games", "2", "--seed-start", str(SEEDS[0]),
                        "--n-samples", "12", "--exact-tricks", "3", "--store-worlds",
                        "--quiet"])
    assert rc == 0
    return out


def test_hybrid_records_are_checked_against_the_hybrid(hybrid_dataset, capsys):
    """The metadata's exact_tricks rebuilds the hybrid: re-run on the same worlds it
    reproduces the records, and in tricks 5-7 (exact labels) the oracle error is 0; the
    plain network (what --recompute used to rebuild) is far off there."""
    rc, out, _ = _run(capsys, hybrid_dataset, "--exact", 0, "--decisions", "16:27",
                      "--max-enumerate", 30, "--json")
    assert rc == 0
    rep = json.loads(out)["exact"]
    assert rep["oracle"] == "default+exact3" and rep["n_records"] == 24
    assert rep["reproduced_max_abs_diff"] < 1e-4
    assert rep["stored_worlds_mismatch"] == 0 and rep["worlds_mismatch"] == 0
    for t in ("5", "6", "7"):
        assert rep["by_trick"][t]["oracle_rmse"] == pytest.approx(0.0, abs=1e-5)
        assert rep["by_trick"][t]["oracle_world_rmse"] == pytest.approx(0.0, abs=1e-5)
    rc, out, _ = _run(capsys, hybrid_dataset, "--recompute", 0, "--decisions", "16:27",
                      "--json")
    rep = json.loads(out)["recompute"]
    assert rc == 0 and rep["oracle"] == "default+exact3"
    assert rep["max_abs_z_enumerated"] is None or rep["max_abs_z_enumerated"] < 1e-3
    rc, out, _ = _run(capsys, hybrid_dataset, "--recompute", 0, "--decisions", "16:27",
                      "--oracle", "default", "--json")
    plain = json.loads(out)["recompute"]
    assert plain["oracle"] == "default" and plain["max_abs_z"] > 3


def test_int8_records_are_checked_against_the_int8_oracle(tmp_path, capsys):
    """The metadata's oracle_precision int8 rebuilds the quantized network: re-run on the
    records' worlds it reproduces them (the fp32 network is up to 0.54 point off there)."""
    out = tmp_path / "ds"
    assert generate.main(["--out", str(out), "--games", "1", "--seed-start", str(SEEDS[0]),
                          "--n-samples", "8", "--oracle-precision", "int8", "--quiet"]) == 0
    capsys.readouterr()                                   # generate's summary line
    rc, text, _ = _run(capsys, out, "--exact", 6, "--decisions", "12:23", "--max-enumerate", 20,
                       "--json")
    assert rc == 0
    rep = json.loads(text)["exact"]
    assert rep["oracle"] == "default+int8" and rep["reproduced_max_abs_diff"] < 1e-4


def test_exact_on_world_budgets_by_trick_uses_each_records_worlds(tmp_path, capsys):
    """Records made with --n-by-trick have several N: the same-world re-run must use each
    record's own N (worlds_mismatch 0, no oracle error for the exact oracle)."""
    out = tmp_path / "ds"
    assert generate.main(["--out", str(out), "--games", "1", "--seed-start", str(SEEDS[0]),
                          "--n-by-trick", "4,4,6,6,8,8,8", "--oracle", "exact", "--quiet"]) == 0
    capsys.readouterr()
    records, _ = load_records(out)
    early = ~records["enumerated"] & (records["decision_idx"] <= 11)
    assert set(records["n_worlds"][early].tolist()) == {4, 6}      # two budgets in play
    rc, text, _ = _run(capsys, out, "--exact", 0, "--decisions", "0:11",
                       "--max-enumerate", 40, "--json")
    assert rc == 0
    rep = json.loads(text)["exact"]
    assert rep["worlds_mismatch"] == 0
    assert rep["oracle_rmse"] == pytest.approx(0.0, abs=1e-6)


def test_exact_on_control_variate_records_undoes_the_correction(tmp_path, capsys):
    """Records corrected by a control variate: the same-world re-run of their exact oracle
    equals e_q_mean - cv_shift, and the report says how much the correction moved them."""
    out = tmp_path / "ds"
    assert generate.main(["--out", str(out), "--games", "1", "--seed-start", str(SEEDS[0]),
                          "--n-samples", "4", "--oracle", "exact", "--control-variate",
                          "default", "--cv-samples", "16", "--quiet"]) == 0
    capsys.readouterr()
    rc, text, _ = _run(capsys, out, "--exact", 0, "--decisions", "0:11",
                       "--max-enumerate", 30, "--json")
    assert rc == 0
    rep = json.loads(text)["exact"]
    assert rep["reproduced_max_abs_diff"] == pytest.approx(0.0, abs=1e-4)
    cv = rep["control_variate"]
    assert cv["applied_fraction"] > 0.5 and cv["shift_rms"] > 0.1
    assert rep["oracle_rmse"] == pytest.approx(cv["shift_rms"], rel=0.2, abs=1e-3)
    rc, text, _ = _run(capsys, out, "--exact", 4, "--decisions", "0:3", "--max-enumerate", 20)
    assert rc == 0 and "control variate:" in text and "(E_rec - cv_shift)" in text
