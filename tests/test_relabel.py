"""eqfast-relabel: a --store-worlds dataset labelled again by the solver on its stored worlds
equals what eqfast-generate writes with the solver on those worlds, keeps the source's
games byte for byte, scales out and resumes like eqfast-generate (kill -9 included)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from eqfast.analysis.validation import replay_to_decision
from eqfast.cli.generate import main as generate
from eqfast.cli.relabel import main as relabel
from eqfast.cli.validate import main as validate
from eqfast.data.schema import check_invariants
from eqfast.data.shards import (PACKED_OWNER, completed_seed_ranges, load_records, pack_owners,
                                read_shard, unpack_owners)
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.relabel import KEPT_FIELDS
from eqfast.oracle.factory import oracle_from_spec

REPO = Path(__file__).resolve().parents[1]
N = 12                                     # stored worlds per decision
BUDGETS = "3,6,12,12,12,12,12"             # the solver's worlds by trick (the CV runs)
GAMES = ["--games", "3", "--games-per-batch", "2", "--quiet", "--threads", "1"]
#: fields that depend on the move chosen (the playing oracle's, in a relabel)
MOVE_FIELDS = ("action_taken", "q_gap", "exploration_mode", "realized_to_go", "final_points")


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Datasets of the same 3 games: played by the network with stored worlds ('network'),
    by the solver with stored worlds ('exact'), and by the solver with the CPU default's
    estimator on budgets BUDGETS and the network as control variate on N worlds ('cpu')."""
    root = tmp_path_factory.mktemp("relabel")
    runs = {"network": ["--oracle", "default", "--n-samples", str(N), "--store-worlds"],
            "exact": ["--oracle", "exact", "--n-samples", str(N), "--store-worlds"],
            "cpu": ["--oracle", "exact", "--n-by-trick", BUDGETS, "--control-variate", "default",
                    "--cv-samples", str(N)]}
    for name, flags in runs.items():
        assert generate(["--out", str(root / name), *GAMES, *flags]) == 0
    return root


def _relabel(src, out, *flags) -> int:
    return relabel([str(src), "--out", str(out), "--quiet", "--threads", "1", *flags])


def _key(records, i):
    return (int(records["seed"][i]), int(records["decision_idx"][i]),
            records["transcript_tokens"][i].numpy().tobytes())


def _assert_rows_equal(a, i, b, j, skip=()):
    for name in a.tensors:
        if name in skip:
            continue
        assert name in b, name
        assert torch.equal(a[name][i], b[name][j]), (name, _key(a, i)[:2])
    assert set(b.tensors) - set(skip) <= set(a.tensors)


def _same_positions(a, b):
    """(i, j) of the records of a and b at the same position (seed, decision, transcript)."""
    where = {_key(b, j): j for j in range(len(b))}
    return [(i, where[_key(a, i)]) for i in range(len(a)) if _key(a, i) in where]


def test_owners_pack_into_7_bytes_a_world_and_unpack_exactly():
    owner = torch.randint(0, 4, (5, 9, 28), dtype=torch.int8)
    owner[0, 0] = 3                                      # every bit set
    packed = pack_owners(owner)
    assert packed.dtype == torch.uint8 and packed.shape == (5, 9, 7)
    assert int(packed[0, 0, 0]) == 255
    assert torch.equal(unpack_owners(packed), owner)


def test_relabel_of_a_solver_source_is_the_source(sources, tmp_path, capsys):
    """The solver's labels on the solver's worlds: every field of every record, every
    sidecar setting but the relabel's own entries, as `eqfast-generate --oracle exact
    --store-worlds` wrote them; eqfast-validate --exact finds oracle-induced error 0."""
    out = tmp_path / "out"
    assert _relabel(sources / "exact", out) == 0
    src, src_meta = load_records(sources / "exact")
    new, new_meta = load_records(out)
    assert len(new) == len(src) == 3 * 28
    for name in src.tensors:
        assert torch.equal(src[name], new[name]), name
    assert check_invariants(new, relabelled=True) == []
    meta = new_meta[0]
    assert meta["oracle"]["name"] == "exact" and meta["playing_oracle"]["name"] == "exact"
    assert meta["relabel"]["n_stored"] == N and meta["relabel"]["worlds"] == "stored"
    # the stored owners are on disk 2 bits a tile and read back as the int8 field
    f = next(p for p in sorted(out.glob("train/*.safetensors")) if len(read_shard(p)[0]))
    from safetensors.torch import load_file
    raw = load_file(f)
    assert "world_owner" not in raw and raw[PACKED_OWNER].shape[1:] == (N, 7)
    capsys.readouterr()
    assert validate([str(out), "--exact", "6", "--max-enumerate", "50", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)["exact"]
    assert rep["oracle_rmse"] == 0 and rep["reproduced_max_abs_diff"] == 0
    assert rep["stored_worlds_mismatch"] == 0


def test_relabel_of_a_network_source_is_the_solver_on_its_worlds(sources, tmp_path):
    """A network-played source labelled by the solver: each record equals the solver's
    record at that position on the same worlds (the engine's decision re-run there, with
    the per-world fields), its game fields are the source's byte for byte, and wherever
    `eqfast-generate --oracle exact --store-worlds` reached the same position, its record
    equals it field for field but for the move's."""
    out = tmp_path / "out"
    assert _relabel(sources / "network", out) == 0
    src, _ = load_records(sources / "network")
    new, meta = load_records(out)
    assert meta[0]["playing_oracle"]["name"] == "default" and meta[0]["oracle"]["name"] == "exact"
    for name in KEPT_FIELDS:
        assert torch.equal(src[name], new[name]), name
    assert not torch.equal(src["e_q_mean"], new["e_q_mean"])
    assert check_invariants(new, relabelled=True) == []
    # q_gap: the move played measured under the new labels
    legal, mean = new["legal_mask"], new["e_q_mean"].double()
    best = torch.where(legal, mean, torch.tensor(float("-inf"), dtype=torch.float64)).max(1).values
    taken = mean.gather(1, new["action_taken"][:, None])[:, 0]
    assert torch.allclose(new["q_gap"].double(), best - taken, atol=1e-5)
    # every record: the engine's decision at its replayed position on the run's worlds
    exact, _ = oracle_from_spec("exact")
    engine = Engine(exact, EngineConfig(n_samples=N, store_worlds=True))
    for d in range(28):
        rows = torch.nonzero(new["decision_idx"] == d)[:, 0]
        part = new.select(rows)
        fresh, _ = engine.decide(replay_to_decision(part), part["seed"].tolist(), d,
                                 part["game_idx"])
        for k in range(len(part)):
            _assert_rows_equal(part, k, fresh, k, skip=MOVE_FIELDS)
    # eqfast-generate --oracle exact where it reached the same positions
    ref, _ = load_records(sources / "exact")
    pairs = _same_positions(new, ref)
    assert len(pairs) >= 3                               # decision 0 of every game at least
    for i, j in pairs:
        _assert_rows_equal(new, i, ref, j, skip=MOVE_FIELDS)


def test_relabel_with_the_stored_control_variate_is_the_cpu_default(sources, tmp_path,
                                                                    capsys):
    """--n-by-trick with --control-variate stored on a network source: wherever the CPU
    default's estimator (eqfast-generate --oracle exact --n-by-trick --control-variate
    default) reached the same position, the records are equal field for field but for the
    move's; every other record equals that estimator at its replayed position."""
    out = tmp_path / "out"
    assert _relabel(sources / "network", out, "--n-by-trick", BUDGETS,
                    "--control-variate", "stored") == 0
    src, _ = load_records(sources / "network")
    new, meta = load_records(out)
    for name in KEPT_FIELDS:
        assert torch.equal(src[name], new[name]), name
    assert "world_q" not in new and "cv_shift" in new
    assert meta[0]["control_variate"]["name"] == "stored"
    assert meta[0]["control_variate"]["stored_oracle"]["name"] == "default"
    ref, _ = load_records(sources / "cpu")
    pairs = _same_positions(new, ref)
    assert len(pairs) >= 3
    for i, j in pairs:
        _assert_rows_equal(new, i, ref, j, skip=MOVE_FIELDS)
    exact, _ = oracle_from_spec("exact")
    network, _ = oracle_from_spec("default")
    budgets = tuple(int(x) for x in BUDGETS.split(","))
    engine = Engine(exact, EngineConfig(n_samples=N, n_by_trick=budgets, cv_samples=N),
                    cv_oracle=network)
    for d in range(0, 28, 3):
        rows = torch.nonzero(new["decision_idx"] == d)[:, 0]
        part = new.select(rows)
        fresh, _ = engine.decide(replay_to_decision(part), part["seed"].tolist(), d,
                                 part["game_idx"])
        for k in range(len(part)):
            _assert_rows_equal(part, k, fresh, k, skip=MOVE_FIELDS)
    capsys.readouterr()
    assert validate([str(out), "--exact", "6", "--max-enumerate", "50", "--json"]) == 0
    # e_q_mean - cv_shift in float32: the solver's own mean on the records' worlds to the
    # rounding of that subtraction, as for eqfast-generate's own control-variate records
    assert json.loads(capsys.readouterr().out)["exact"]["reproduced_max_abs_diff"] < 1e-5


def test_ranks_resume_and_refusals(sources, tmp_path, capsys, monkeypatch):
    """Two ranks (flags, then torchrun's variables) write together exactly the single run;
    a re-run skips what is done; other flags on the same output, a source without stored
    worlds, a control variate without budgets and a held output are refused (exit 2)."""
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert _relabel(sources / "network", whole) == 0
    assert _relabel(sources / "network", split, "--rank", "1", "--world-size", "2") == 0
    assert completed_seed_ranges(split) == [(2, 2)]
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert _relabel(sources / "network", split) == 0
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    _assert_same_files(whole, split, same_rank=False)
    capsys.readouterr()
    assert _relabel(sources / "network", split, "--rank", "0", "--world-size", "3") == 2
    assert "--world-size" in capsys.readouterr().err       # the ranks' plan (plan.json)
    assert _relabel(sources / "network", whole) == 0
    assert json.loads(capsys.readouterr().out)["skipped_ranges"] == 2
    assert _relabel(sources / "network", whole, "--n-by-trick", BUDGETS) == 2
    assert "n_by_trick" in capsys.readouterr().err
    assert _relabel(sources / "cpu", tmp_path / "x") == 2
    assert "--store-worlds" in capsys.readouterr().err
    assert _relabel(sources / "network", tmp_path / "x", "--control-variate", "stored") == 2
    assert "--n-by-trick" in capsys.readouterr().err
    from eqfast.data.shards import lock_output
    with lock_output(tmp_path / "held"):
        assert _relabel(sources / "network", tmp_path / "held") == 2
    assert "being written" in capsys.readouterr().err


def _assert_same_files(a: Path, b: Path, same_rank: bool = True):
    """The same shards with the same records, tensor for tensor, and the same metadata (the
    `rank` entry aside unless same_rank). Not the files' bytes: safetensors writes its
    header's metadata map in an order of its own."""
    files_a = sorted(p.relative_to(a) for p in a.glob("*/shard_*"))
    assert files_a == sorted(p.relative_to(b) for p in b.glob("*/shard_*"))
    for rel in files_a:
        if rel.suffix == ".safetensors":
            ra, ma = read_shard(a / rel)
            rb, mb = read_shard(b / rel)
            assert set(ra.tensors) == set(rb.tensors)
            for name in ra.tensors:
                assert torch.equal(ra[name], rb[name]), (rel, name)
            if not same_rank:
                ma, mb = ({k: v for k, v in m.items() if k != "rank"} for m in (ma, mb))
            assert ma == mb


def test_kill_9_then_resume_writes_every_record_once(sources, tmp_path):
    """A relabel killed with SIGKILL in the middle and run again: every seed range once,
    each shard's records and metadata the uninterrupted run's."""
    src = tmp_path / "src"
    assert generate(["--out", str(src), "--games", "6", "--games-per-batch", "1", "--quiet",
                     "--threads", "1", "--oracle", "default", "--n-samples", str(N),
                     "--store-worlds"]) == 0
    whole = tmp_path / "whole"
    assert _relabel(src, whole) == 0
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "eqfast.cli.relabel", str(src), "--out", str(out), "--quiet",
           "--threads", "1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not completed_seed_ranges(out) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = completed_seed_ranges(out)
    assert 1 <= len(done) < 6, done                       # killed in the middle
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0
    assert completed_seed_ranges(out) == [(s, s) for s in range(6)]
    assert not list(out.glob("*/.shard_*.tmp"))
    _assert_same_files(whole, out)
    records, _ = load_records(out)
    assert sorted(records["seed"].unique().tolist()) == list(range(6))
    assert len(records) == 6 * 28


def test_posterior_source_keeps_its_stored_weights(tmp_path):
    """A posterior-weighted source: the solver's labels under the stored weights, which are
    the weights `eqfast-generate --oracle exact --posterior --behaviour-oracle default`
    gives these worlds, to float32 rounding (the weights go through their logarithm)."""
    from eqfast.engine.posterior import PosteriorConfig

    src, out = tmp_path / "src", tmp_path / "out"
    assert generate(["--out", str(src), "--games", "1", "--quiet", "--threads", "1", "--oracle",
                     "default", "--n-samples", str(N), "--store-worlds", "--posterior"]) == 0
    assert _relabel(src, out) == 0
    assert _relabel(src, tmp_path / "x", "--n-by-trick", BUDGETS) == 2   # weights are over all
    new, meta = load_records(out)
    assert meta[0]["behaviour_oracle"]["name"] == "default"
    exact, _ = oracle_from_spec("exact")
    network, _ = oracle_from_spec("default")
    engine = Engine(exact, EngineConfig(n_samples=N, store_worlds=True,
                                        posterior=PosteriorConfig()), behaviour_oracle=network)
    for d in (0, 5, 13, 22):
        part = new.select(torch.nonzero(new["decision_idx"] == d)[:, 0])
        fresh, _ = engine.decide(replay_to_decision(part), part["seed"].tolist(), d,
                                 part["game_idx"])
        for name in ("world_owner", "world_q", "n_worlds", "enumerated", "legal_mask"):
            assert torch.equal(part[name], fresh[name]), name
        for name in ("e_q_mean", "e_q_var", "ess", "max_w", "world_weight", "u_mean", "u_max"):
            torch.testing.assert_close(part[name], fresh[name], rtol=1e-5, atol=1e-5)
