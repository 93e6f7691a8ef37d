"""eqfast-generate as a user runs it: shards, resume, Ctrl+C safety, bad input."""
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

from eqfast.cli.generate import main
from eqfast.data.schema import check_invariants
from eqfast.data.shards import (LOCK_NAME, ShardError, completed_seed_ranges, load_records,
                                 read_dataset, read_shard)

REPO = Path(__file__).resolve().parents[1]
FAST = ["--oracle", "exact", "--n-samples", "4", "--quiet"]


def _all_shards(root: Path):
    return sorted(root.glob("*/shard_*.safetensors"))


def test_generate_writes_split_shards_and_resumes(tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(["--out", str(out), "--games", "3", "--games-per-batch", "2", *FAST]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["games"] == 3
    assert completed_seed_ranges(out) == [(0, 1), (2, 2)]
    n = 0
    for f in _all_shards(out):
        records, meta = read_shard(f)
        n += len(records)
        assert meta["version"] == "2.1" and meta["schema"]["q_units"] == "points"
        assert check_invariants(records) == []
    assert n == 3 * 28
    before = {f: f.stat().st_mtime_ns for f in _all_shards(out)}
    assert main(["--out", str(out), "--games", "6", "--games-per-batch", "4", *FAST]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # seeds 0..2 are done (in ranges of another batch size) and kept; only 3..5 are played
    assert summary["games"] == 3
    assert completed_seed_ranges(out) == [(0, 1), (2, 2), (3, 5)]
    assert all(f.stat().st_mtime_ns == t for f, t in before.items())
    seeds = torch.cat([read_shard(f)[0]["seed"] for f in _all_shards(out)])
    assert sorted(set(seeds.tolist())) == list(range(6)) and len(seeds) == 6 * 28
    assert "outside this run's seeds" not in capsys.readouterr().err
    # another --seed-start adds a range beside the saved ones, and says so
    assert main(["--out", str(out), "--games", "1", "--seed-start", "10", *FAST]) == 0
    err = capsys.readouterr().err
    assert "holds 6 games outside this run's seeds (from 0 to 5)" in err, err
    assert completed_seed_ranges(out) == [(0, 1), (2, 2), (3, 5), (10, 10)]


def test_resume_with_other_settings_is_refused(tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(["--out", str(out), "--games", "1", *FAST]) == 0
    capsys.readouterr()
    assert main(["--out", str(out), "--games", "2", "--oracle", "exact", "--n-samples", "5",
                 "--quiet"]) == 2
    assert "n_samples" in capsys.readouterr().err


def test_overlapping_shards_are_rejected_on_read(tmp_path):
    out = tmp_path / "ds"
    assert main(["--out", str(out), "--games", "2", "--games-per-batch", "2", *FAST]) == 0
    for f in out.glob("*/shard_000000-000001.*"):       # a copy that overlaps seeds 0..1
        f.with_name(f.name.replace("000000-000001", "000001-000001")).write_bytes(f.read_bytes())
    split = next(p.parent.name for p in out.glob("*/shard_000000-000001.safetensors")
                 if len(read_shard(p)[0]))
    with pytest.raises(ShardError, match="overlap"):
        read_dataset(out, split)


def test_pt_format_written(tmp_path):
    out = tmp_path / "ds"
    assert main(["--out", str(out), "--games", "1", "--format", "pt", *FAST]) == 0
    pts = sorted(out.glob("*/shard_*.pt"))
    assert len(pts) == 3
    for pt in pts:
        from_pt, meta_pt = read_shard(pt)
        from_st, meta_st = read_shard(pt.with_suffix(".safetensors"))
        assert meta_pt == meta_st and meta_pt["version"] == "2.1"
        assert sorted(from_pt.tensors) == sorted(from_st.tensors)
        for name in from_st.tensors:
            assert torch.equal(from_pt[name], from_st[name]), name
        # what the earlier implementation's tools read (docs/DATASET.md, "The .pt file")
        raw = torch.load(pt, weights_only=True)
        assert raw["transcript_tokens"].dtype == torch.int64
        assert torch.equal(raw["player"], from_st["actor"].long())
        assert torch.equal(raw["actual_outcome"], from_st["realized_to_go"])
        meta = raw["metadata"]
        n = len(from_st)
        assert meta["n_examples"] == meta["n_decisions"] == n and meta["seed"] == 0
        assert meta["n_games"] == len(meta["games"]) == (1 if n else 0)
        if n:
            game = meta["games"][0]
            assert game["seed"] == 0 and game["decisions"] == 28 and sum(game["final_points"]) == 42
            assert meta["summary"]["q_range"] == meta_st["summary"]["q_legal"]
            assert set(meta["summary"]["exploration_stats"]) >= {"greedy"}


@pytest.mark.parametrize("argv,needle", [
    (["--games", "0"], "--games"),
    (["--n-samples", "0"], "--n-samples"),
    (["--seed-start", "-3"], "--seed-start"),
    (["--target-games", "-5"], "--target-games"),
    pytest.param(["--device", "cuda"], "cuda", marks=pytest.mark.skipif(
        torch.cuda.is_available(), reason="CUDA present: --device cuda is valid")),
])
def test_bad_arguments_exit_2(tmp_path, capsys, argv, needle):
    assert main(["--out", str(tmp_path), *FAST, *argv]) == 2
    assert needle in capsys.readouterr().err
    assert not list(tmp_path.rglob("shard_*"))


def test_corrupted_shard_named_in_error(tmp_path):
    out = tmp_path / "ds"
    assert main(["--out", str(out), "--games", "1", *FAST]) == 0
    f = next(f for f in _all_shards(out) if read_shard(f)[0] is not None and len(read_shard(f)[0]))
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(ShardError, match=f.name):
        read_shard(f)


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.7, 1.9])
def test_sigint_never_loses_a_saved_shard(tmp_path, delay):
    """Ctrl+C at several points of a continuous run (after the first shard is saved, plus
    `delay` seconds): every shard on disk reads back, the saved ranges are contiguous."""
    out = tmp_path / "ds"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "eqfast.cli.generate", "--out", str(out),
                             "--target-games", "0", "--games-per-batch", "1", *FAST],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not completed_seed_ranges(out) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode in (0, 130), err.decode()
    done = completed_seed_ranges(out)
    assert done == [(s, s) for s in range(len(done))]   # contiguous from seed 0
    for f in _all_shards(out):
        read_shard(f)  # raises on a truncated or corrupted shard
    assert len(done) >= 1
    assert not [p for p in out.rglob("*") if p.is_file()
                and not p.name.startswith("shard_") and p.name != LOCK_NAME]


@pytest.mark.parametrize("pipeline", ["reference", "fast"])
def test_records_breaking_the_invariants_are_never_written(tmp_path, capsys, monkeypatch, pipeline):
    """A batch whose records break the schema (here: an E[Q] of 50 points, impossible)
    stops the run with exit 1 and a message naming the seeds; nothing of it is written."""
    from eqfast.engine import pipeline as engine_pipeline
    from eqfast.engine import fast as engine_fast
    from eqfast.data.schema import DecisionRecords

    def corrupt(records: DecisionRecords) -> DecisionRecords:
        t = dict(records.tensors)
        t["e_q_mean"] = torch.where(t["legal_mask"], torch.full_like(t["e_q_mean"], 50.0),
                                    t["e_q_mean"])
        return DecisionRecords(t)

    play = engine_pipeline.Engine.play
    monkeypatch.setattr(engine_pipeline.Engine, "play", lambda self, s, *a: corrupt(play(self, s, *a)))
    to_host = engine_fast.FastEngine._to_host
    monkeypatch.setattr(engine_fast.FastEngine, "_to_host", lambda self, recs, seeds: to_host(
        self, {**recs, "e_q_mean": torch.where(recs["legal_mask"], 50.0, recs["e_q_mean"])}, seeds))
    out = tmp_path / "run"
    assert main(["--out", str(out), "--games", "2", "--games-per-batch", "2", "--n-samples", "4",
                 "--threads", "1", "--quiet", "--pipeline", pipeline]) == 1
    err = capsys.readouterr().err
    assert "seeds 0..1 fail the invariants" in err and "e_q_mean" in err
    assert not list(out.rglob("*.safetensors"))


def test_oracle_precision_is_applied_and_recorded(tmp_path):
    """--oracle-precision bf16 runs the shipped network under bf16 autocast (E[Q] moves by
    the rounding, actions mostly agree), and the metadata and resume settings say so."""
    args = ["--games", "1", "--n-samples", "8", "--quiet", "--threads", "1", "--oracle", "default"]
    assert main(["--out", str(tmp_path / "fp32"), *args]) == 0
    assert main(["--out", str(tmp_path / "bf16"), *args, "--oracle-precision", "bf16"]) == 0
    (fp32, (meta32, *_)), (bf16, (meta16, *_)) = (load_records(tmp_path / name)
                                                  for name in ("fp32", "bf16"))
    legal = fp32["legal_mask"]
    diff = (fp32["e_q_mean"] - bf16["e_q_mean"]).abs()[legal]
    assert 0 < float(diff.max()) < 2.0
    assert meta16["oracle_precision"] == "bf16" and meta32["oracle_precision"] == "fp32"
    assert meta16["settings"]["oracle_precision"] == "bf16"
    assert "oracle_precision" not in meta32["settings"]          # old directories still resume


def test_int8_oracle_on_the_cpu(tmp_path, capsys):
    """--oracle-precision int8 quantizes the network's Linear layers (CPU only): records stay
    valid and close to fp32; CUDA and the exact oracle are refused with exit 2."""
    args = ["--games", "1", "--n-samples", "8", "--quiet", "--threads", "1"]
    assert main(["--out", str(tmp_path / "int8"), *args, "--oracle-precision", "int8"]) == 0
    assert main(["--out", str(tmp_path / "x"), *args, "--oracle-precision", "int8",
                 "--oracle", "exact"]) == 2
    assert "has none" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_world_budget_by_trick(tmp_path, capsys):
    """--n-by-trick: each decision draws its trick's number of worlds (n_worlds says so,
    fewer only where fewer worlds exist), recorded in the metadata; bad lists, the fast
    pipeline and --store-worlds are refused with exit 2."""
    budget = [5, 4, 3, 6, 2, 2, 1]
    out = tmp_path / "budget"
    assert main(["--out", str(out), "--games", "2", "--games-per-batch", "2", "--oracle", "exact",
                 "--quiet", "--n-by-trick", ",".join(map(str, budget))]) == 0
    records, metas = load_records(out)
    n_worlds, decision = records["n_worlds"], records["decision_idx"]
    cap = torch.tensor(budget)[decision // 4]
    assert bool((n_worlds <= cap).all()) and bool((n_worlds == cap).any())
    assert bool((n_worlds[decision < 4] == 5).all())          # openings: millions of worlds
    assert metas[0]["n_by_trick"] == budget and metas[0]["settings"]["n_by_trick"] == budget
    for bad in (["--n-by-trick", "1,2,3"], ["--n-by-trick", "a,b,c,d,e,f,g"],
                ["--n-by-trick", "1,1,1,1,1,1,0"],
                ["--n-by-trick", "1,1,1,1,1,1,1", "--pipeline", "fast"],
                ["--n-by-trick", "1,1,1,1,1,1,1", "--store-worlds"]):
        assert main(["--out", str(tmp_path / "bad"), "--games", "1", "--quiet", *bad]) == 2, bad
    assert not (tmp_path / "bad").exists()
    capsys.readouterr()


def test_cpu_default_labels_are_exact_with_budgets_by_trick(tmp_path, capsys):
    """Without --oracle the CPU's reference pipeline labels with the exact solver, world
    budgets 25/50/100 by trick and the shipped network as control variate on 400 worlds
    (docs/GENERATE.md, "Choosing the labels"); --n-samples keeps the exact oracle at that N;
    --exact-tricks (a network setting) gets the shipped network; --control-variate none
    or --q-pdf leave the control variate out; --posterior keeps it and takes the shipped
    network as behaviour oracle."""
    args = ["--games", "1", "--quiet", "--threads", "1"]
    assert main(["--out", str(tmp_path / "a"), *args]) == 0
    records, (meta, *_) = load_records(tmp_path / "a")
    assert meta["oracle"]["name"] == "exact" and meta["n_by_trick"] == [25, 50, 100, 100, 100, 100, 100]
    assert meta["control_variate"]["name"] == "default"
    assert meta["control_variate"]["cv_samples"] == 400 and int(records["cv_worlds"].max()) == 400
    assert main(["--out", str(tmp_path / "b"), *args, "--n-samples", "6"]) == 0
    _, (meta, *_) = load_records(tmp_path / "b")
    assert meta["oracle"]["name"] == "exact" and meta["n_by_trick"] is None and meta["n_samples"] == 6
    assert meta["control_variate"]["name"] == "default"
    # --sem doubles from the budgets, on the corrected mean's standard error
    assert main(["--out", str(tmp_path / "s"), *args, "--sem", "1.5", "--max-samples", "200"]) == 0
    records, (meta, *_) = load_records(tmp_path / "s")
    assert meta["n_by_trick"] == [25, 50, 100, 100, 100, 100, 100]
    assert meta["adaptive"] == {"sem": 1.5, "max_samples": 200}
    assert meta["control_variate"]["name"] == "default"
    corrected = records["cv_worlds"] > 0
    assert bool((records["n_worlds"][corrected] > 100).any())
    met = ((records["cv_se"] <= 1.5) | ~records["legal_mask"]).all(1)
    assert bool((met | (records["n_worlds"] == 200) | ~corrected).all())
    assert main(["--out", str(tmp_path / "c"), *args, "--n-samples", "6", "--exact-tricks", "2"]) == 0
    _, (meta, *_) = load_records(tmp_path / "c")
    assert meta["oracle"]["name"] == "default" and meta["oracle"]["exact_tricks"] == 2
    assert meta["control_variate"] is None
    # --posterior keeps it, with the shipped network as the behaviour model too
    assert main(["--out", str(tmp_path / "p"), *args, "--n-samples", "4", "--posterior"]) == 0
    _, (meta, *_) = load_records(tmp_path / "p")
    assert meta["oracle"]["name"] == "exact" and meta["control_variate"]["name"] == "default"
    assert meta["behaviour_oracle"]["name"] == "default" and meta["posterior"]["enabled"]
    for k, extra in enumerate((["--control-variate", "none"], ["--q-pdf"])):
        out = tmp_path / f"off{k}"
        assert main(["--out", str(out), *args, "--n-samples", "4", *extra]) == 0, extra
        records, (meta, *_) = load_records(out)
        assert meta["oracle"]["name"] == "exact" and meta["control_variate"] is None, extra
        assert "cv_shift" not in records, extra
    assert "warning" not in capsys.readouterr().err


def test_huge_games_plans_seed_ranges_lazily(tmp_path, capsys, monkeypatch):
    """--games 10**6 (or 10**9) plans its seed ranges as it goes: nothing per game or per
    batch is allocated before the first batch is played."""
    import tracemalloc
    from eqfast.engine import factory

    seen = {}

    class OneBatch:
        backend, device, world_rows, oracle_rows = type("B", (), {"name": "x"}), "cpu", 0, 0

        def run(self, batches, sink, on_batch=None):
            seen["first"] = next(iter(batches))
            seen["peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            return 0

    def build_engine(*a, **kw):
        tracemalloc.start()
        return OneBatch()

    monkeypatch.setattr(factory, "build_engine", build_engine)
    assert main(["--out", str(tmp_path / "ds"), "--games", str(10**6), "--games-per-batch", "1",
                 *FAST]) == 0
    assert seen["first"] == [0]
    assert seen["peak"] < 2_000_000, seen["peak"]


def test_pending_count_equals_the_ranges_planned():
    """The progress total counted without listing ranges equals what the plan yields, for
    any batch size, rank, world size and set of ranges already written."""
    import random
    from eqfast.cli.generate import owned_ranges, pending_count, pending_ranges

    rng = random.Random(5)
    for _ in range(300):
        start, n, per, world = rng.randrange(20), rng.randrange(1, 60), rng.randrange(1, 7), \
            rng.randrange(1, 4)
        rank = rng.randrange(world)
        done = []
        for _ in range(rng.randrange(4)):
            lo = rng.randrange(80)
            done.append((lo, lo + rng.randrange(8)))
        planned = owned_ranges(pending_ranges(start, n, per, done), start, per, rank, world)
        want = sum(hi - lo + 1 for lo, hi in planned)
        assert pending_count(start, start + n, done, per, rank, world) == want, \
            (start, n, per, world, rank, done)


def test_the_command_leaves_sigint_ignored_for_the_exit(tmp_path):
    """In process, main() gives the caller its SIGINT handler back; the command's entry
    point leaves SIGINT ignored, so a Ctrl+C during the interpreter's exit (torch's exit
    handlers) cannot print a traceback after the work is saved."""
    from eqfast.cli import generate

    before = signal.getsignal(signal.SIGINT)
    try:
        argv = ["--out", str(tmp_path / "a"), "--games", "1", *FAST]
        assert generate.main(argv) == 0
        assert signal.getsignal(signal.SIGINT) is before
        assert generate.main(["--out", str(tmp_path / "b"), "--games", "1", *FAST],
                             restore_sigint=False) == 0
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("delay", [0.3, 0.8, 1.5])
def test_ctrl_c_during_start_up_exits_130_without_a_traceback(tmp_path, delay):
    """Ctrl+C while the command imports torch or loads its oracles: a one-line message and
    exit status 130, never a raw KeyboardInterrupt traceback; nothing half-written."""
    out = tmp_path / "ds"
    proc = subprocess.Popen([sys.executable, "-m", "eqfast.cli.generate", "--out", str(out),
                             "--games", "1", *FAST], env=dict(os.environ, PYTHONPATH=str(REPO)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    summary, err = proc.communicate(timeout=120)
    # a press that lands after the run printed its summary, while the interpreter shuts
    # down (its handlers already reset), ends it by the signal: the work was done and saved
    finished = proc.returncode == -signal.SIGINT and '"games"' in summary
    assert proc.returncode in (0, 130) or finished, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    if proc.returncode == 130:
        assert "eqfast-generate: " in err
    for f in _all_shards(out):
        read_shard(f)


def test_two_presses_inside_one_c_call_drop_the_batch():
    """Two Ctrl+C that arrive while the main thread is inside one long C call reach Python
    as one handler call; the handler still counts two presses and drops the batch."""
    import threading
    from eqfast.cli.scaleout import Interrupt as _Interrupt

    def press_twice():
        for _ in range(2):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)

    before = signal.getsignal(signal.SIGINT)   # SIG_IGN when run as a background job
    with pytest.raises(KeyboardInterrupt):
        with _Interrupt() as interrupt:
            threading.Timer(0.05, press_twice).start()
            sum(range(60_000_000))              # one C call of ~1 s: both presses land in it
            for _ in range(100):                 # the handler runs at the next bytecodes
                time.sleep(0.01)
    assert interrupt.presses == 2
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("call,err", [("fsync", "ENOSPC"), ("replace", "EIO")])
def test_os_errors_while_writing_a_shard_are_one_line(tmp_path, capsys, monkeypatch, call, err):
    """A full disk or an I/O error while a shard is written: exit 1 with one line naming
    the error and what is safe, no traceback, no temporary file left."""
    import errno as errno_module

    code = getattr(errno_module, err)

    def failing(*a, **kw):
        raise OSError(code, os.strerror(code))

    out = tmp_path / "ds"
    monkeypatch.setattr(os, call, failing)
    status = main(["--out", str(out), "--games", "1", *FAST])
    monkeypatch.undo()
    captured = capsys.readouterr()
    assert status == 1, captured.err
    assert os.strerror(code) in captured.err and "intact" in captured.err
    assert "Traceback" not in captured.err
    assert not list(out.rglob("*.tmp"))


def test_two_runs_write_byte_identical_files(tmp_path):
    """Shard files are byte-reproducible: two processes (each with its own hash seed, which
    orders safetensors' header map) writing the same games leave identical bytes in every
    file, .pt included."""
    runs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONHASHSEED=str(k + 1))
        proc = subprocess.run([sys.executable, "-m", "eqfast.cli.generate", "--out", str(out),
                               "--games", "3", "--games-per-batch", "1", "--format", "pt",
                               *FAST], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        runs.append({p.relative_to(out): p.read_bytes() for p in out.rglob("shard_*")})
    assert sorted(runs[0]) == sorted(runs[1]) and len(runs[0]) == 3 * 3 * 3
    differ = [str(name) for name in runs[0] if runs[0][name] != runs[1][name]]
    assert not differ, differ


def test_threads_default_is_one_for_shared_machines():
    """Two torch/solver threads on a busy 2-core machine ran the quick start 2.5-3x slower
    than one (README, "Quick start"); more threads are asked for with --threads."""
    from eqfast.cli.generate import build_parser, check_args

    args = build_parser().parse_args(["--out", "x"])
    assert check_args(args) is None and args.threads == 1
