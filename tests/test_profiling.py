"""Profiling and benchmark tooling: benchmarks/compare.py on synthetic pytest-benchmark JSON
(regressions flagged and gated, improvements not, missing/new reported, bad files rejected),
and profiling/profile_run.py on a tiny run (1 game, N=4, random-weight oracle)."""
from __future__ import annotations

import importlib.util
import json
import re
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, rel: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / rel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compare = _load("_bench_compare", "benchmarks/compare.py")


def _bench(fullname: str, median: float, **extra) -> dict:
    return {"group": None, "name": fullname.split("::")[-1], "fullname": fullname,
            "params": None, "extra_info": extra,
            "stats": {"min": median * 0.9, "max": median * 1.1, "mean": median,
                      "median": median, "rounds": 5}}


def _write(path: Path, benches: list[dict], device: str = "cpu: test") -> Path:
    path.write_text(json.dumps({"machine_info": {"node": "n", "eqfast": {"device": device}},
                                "commit_info": {}, "datetime": "2026-01-01T00:00:00",
                                "benchmarks": benches}))
    return path


@pytest.fixture
def files(tmp_path):
    base = _write(tmp_path / "base.json", [
        _bench("b.py::test_slow", 1.00, games_per_s=10.0),
        _bench("b.py::test_fast", 2.00),
        _bench("b.py::test_same", 0.50, worlds_per_s=1000.0),
        _bench("b.py::test_gone", 0.10),
    ])
    cur = _write(tmp_path / "cur.json", [
        _bench("b.py::test_slow", 1.08, games_per_s=9.25),   # 8% slower: regression
        _bench("b.py::test_fast", 1.50),                     # 25% faster: not flagged
        _bench("b.py::test_same", 0.51, worlds_per_s=990.0), # 2%: within 5%
        _bench("b.py::test_new", 0.20),
    ])
    return base, cur


def test_compare_flags_regressions_only(files):
    base, _ = compare.load_benchmarks(files[0])
    cur, _ = compare.load_benchmarks(files[1])
    result = compare.compare(base, cur, threshold=0.05)
    status = {r["name"]: r["status"] for r in result["rows"]}
    assert status == {"b.py::test_slow": "regression", "b.py::test_fast": "faster",
                      "b.py::test_same": "ok"}
    slow = next(r for r in result["rows"] if r["name"] == "b.py::test_slow")
    assert slow["ratio"] == pytest.approx(1.08)
    assert slow["rates"]["games_per_s"][2] == pytest.approx(0.925)
    assert result["missing"] == ["b.py::test_gone"]
    assert result["new"] == ["b.py::test_new"]
    # a looser threshold lets the 8% slowdown through
    loose = compare.compare(base, cur, threshold=0.10)
    assert all(r["status"] != "regression" for r in loose["rows"])


def test_compare_rate_drop_alone_is_a_regression(tmp_path):
    base = _write(tmp_path / "a.json", [_bench("b.py::t", 1.0, worlds_per_s=100.0)])
    cur = _write(tmp_path / "c.json", [_bench("b.py::t", 1.0, worlds_per_s=80.0)])
    result = compare.compare(compare.load_benchmarks(base)[0], compare.load_benchmarks(cur)[0])
    assert result["rows"][0]["status"] == "regression"
    assert "worlds_per_s" in result["rows"][0]["reasons"][0]


def test_compare_cli_exit_codes(files, tmp_path, capsys):
    base, cur = files
    assert compare.main([str(base), str(cur)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION b.py::test_slow" in out
    assert re.search(r"b\.py::test_gone +missing from the current file", out)
    assert re.search(r"b\.py::test_new +new \(no baseline\)", out)
    assert "REGRESSION b.py::test_fast" not in out
    assert compare.main([str(base), str(cur), "--threshold", "0.1"]) == 0
    assert compare.main([str(base), str(cur), "--threshold", "0.1", "--fail-on-missing"]) == 1
    assert compare.main([str(base), str(base)]) == 0


def test_compare_rejects_bad_files(files, tmp_path, capsys):
    base, _ = files
    assert compare.main([str(tmp_path / "nope.json"), str(base)]) == 2
    assert "nope.json: no such file" in capsys.readouterr().err
    (tmp_path / "text.json").write_text("not json")
    assert compare.main([str(base), str(tmp_path / "text.json")]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    (tmp_path / "other.json").write_text(json.dumps({"results": []}))
    assert compare.main([str(base), str(tmp_path / "other.json")]) == 2
    assert "no 'benchmarks' list" in capsys.readouterr().err
    (tmp_path / "nostats.json").write_text(json.dumps({"benchmarks": [{"fullname": "x"}]}))
    assert compare.main([str(base), str(tmp_path / "nostats.json")]) == 2
    assert "benchmarks[0]" in capsys.readouterr().err


def test_compare_warns_on_different_devices(files, tmp_path, capsys):
    base, _ = files
    other = _write(tmp_path / "gpu.json", [_bench("b.py::test_slow", 1.0)], device="NVIDIA H100")
    compare.main([str(base), str(other)])
    assert "device differs" in capsys.readouterr().err


# ---------------------------------------------------------------------------- profile_run
@pytest.fixture(scope="module")
def profile_run():
    return _load("_profile_run", "profiling/profile_run.py")


def test_profile_run_tiny_run_table(profile_run, tmp_path, capsys):
    out_json = tmp_path / "summary.json"
    rc = profile_run.main(["--games", "1", "--n-samples", "4", "--warmup", "0",
                           "--oracle", "random:mlp", "--device", "cpu", "--threads", "1",
                           "--json", str(out_json)])
    assert rc == 0
    text = capsys.readouterr().out
    for name in ("public", "sample", "tokenize", "oracle", "reduce", "select", "record",
                 "advance", "(outside stages)", "total (wall)", "games/s", "oracle share"):
        assert name in text
    summary = json.loads(out_json.read_text())
    assert summary["games"] == 1 and summary["records"] == 28
    assert summary["stages"]["oracle"]["calls"] == 28
    assert summary["stages"]["advance"]["calls"] == 28
    in_stages = sum(s["seconds"] for s in summary["stages"].values())
    assert in_stages + summary["outside_stages_s"] == pytest.approx(summary["seconds"])
    assert 0 < summary["oracle_share"] < 1
    assert summary["games_per_s"] == pytest.approx(1 / summary["seconds"])


def test_profile_run_fast_pipeline_two_batches(profile_run, tmp_path, capsys):
    """The fast engine runs through FastEngine.run (writer thread): all records counted."""
    out_json = tmp_path / "fast.json"
    assert profile_run.main(["--games", "1", "--batches", "2", "--n-samples", "4",
                             "--warmup", "0", "--oracle", "random:mlp", "--device", "cpu",
                             "--pipeline", "fast", "--json", str(out_json)]) == 0
    summary = json.loads(out_json.read_text())
    assert summary["pipeline"] == "fast (no graphs)"
    assert summary["records"] == 56 and summary["games"] == 2
    assert summary["stages"]["oracle"]["calls"] == 56
    assert "fast (no graphs) pipeline" in capsys.readouterr().out


def test_summarize_and_format(profile_run):
    run = {"seconds": 2.0, "games": 4, "records": 112, "world_rows": 400, "oracle_rows": 300}
    s = profile_run.summarize(run, {"oracle": 1.5, "sample": 0.25}, {"oracle": 28, "sample": 28})
    assert s["oracle_share"] == pytest.approx(0.75)
    assert s["outside_stages_s"] == pytest.approx(0.25)
    assert list(s["stages"]) == ["oracle", "sample"]            # largest first
    table = profile_run.format_table(s)
    assert "oracle                28     1.500   75.0%" in table
    assert "games/s 2.00" in table


def test_stage_ranges_mirrored_in_torch_profiler(profile_run):
    """Every stage() also opens a record_function while the mirror is on, only then."""
    from eqfast.engine import pipeline
    from eqfast.utils import profiling
    from torch.profiler import ProfilerActivity, profile

    original = profiling.stage
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with profile_run.stages_as_record_functions():
            assert pipeline.stage is not original
            with pipeline.stage("oracle"):
                torch.ones(3).sum()
    assert pipeline.stage is original and profiling.stage is original
    names = [e.name for e in prof.events()]
    assert "eqfast/oracle" in names
    by_stage, total = profile_run.device_time_by_stage(prof.events())
    assert by_stage == {"oracle": 0.0} and total == 0.0      # CPU only: no device time


def _event(name, device_time, device=False, parent=None, kind=None, annotation=False):
    cpu = torch.autograd.DeviceType.CPU
    return types.SimpleNamespace(
        name=name, device_time_total=device_time, cpu_parent=parent,
        device_type=torch.autograd.DeviceType.CUDA if device else cpu,
        activity_type=kind, is_user_annotation=annotation)


def test_device_time_by_stage_counts_kernels_once(profile_run):
    oracle = _event("eqfast/oracle", 85.0, annotation=True)
    inner = _event("eqfast/oracle", 40.0, parent=oracle, annotation=True)  # nested: skip
    sample = _event("eqfast/sample", 10.0, annotation=True)
    events = [oracle, inner, sample, _event("aten::mm", 85.0, parent=oracle),
              _event("gemm", 85.0, device=True, kind="kernel"),
              _event("sample_kernel", 10.0, device=True, kind="kernel"),
              _event("Memcpy HtoD", 5.0, device=True, kind="gpu_memcpy"),
              _event("eqfast/oracle", 85.0, device=True, kind="gpu_user_annotation",
                     annotation=True)]
    by_stage, total = profile_run.device_time_by_stage(events)
    assert by_stage == {"oracle": 85.0, "sample": 10.0}
    assert total == 100.0


def test_parse_overrides(profile_run):
    assert profile_run.parse_overrides(["oracle_chunk=64", "sem=0.5", "store_worlds=true"]) == \
        {"oracle_chunk": 64, "sem": 0.5, "store_worlds": True}
    with pytest.raises(SystemExit, match="KEY one of"):
        profile_run.parse_overrides(["no_such_field=1"])
    with pytest.raises(SystemExit, match="not a valid int"):
        profile_run.parse_overrides(["oracle_chunk=many"])


def test_format_table_without_stage_ranges(profile_run):
    """Graph replays open no stage ranges: the table still shows the total and the rates."""
    run = {"seconds": 1.0, "games": 8, "records": 224, "world_rows": 800, "oracle_rows": 800}
    s = profile_run.summarize(run, {}, {})
    s["device_share"] = {"total_us": 5e5, "by_stage": {}}
    table = profile_run.format_table(s)
    assert "total (wall)" in table and "games/s 8.00" in table
    assert "oracle share of wall time 0.0%" in table and "use --no-graphs" in table


def test_ops_by_stage_counts_top_level_ops(profile_run):
    oracle = _event("eqfast/oracle", 0.0, annotation=True)
    mm = _event("aten::mm", 0.0, parent=oracle)
    events = [oracle, mm, _event("aten::empty", 0.0, parent=mm),   # nested: not counted
              _event("aten::add", 0.0, parent=_event("python", 0.0, parent=oracle)),
              _event("aten::cat", 0.0)]
    assert profile_run.ops_by_stage(events) == {"oracle": 2, "(outside stages)": 1}


def test_profile_run_torch_profiler_wiring(profile_run, tmp_path, monkeypatch, capsys):
    """--torch-profiler: stage ranges in the Chrome trace, op counts in the table (the run
    itself is stubbed to one stage: a real profiled run takes ~20 s on this CPU)."""
    from eqfast.engine import pipeline

    def tiny_run(engine, games, batches, seed_start):
        with pipeline.stage("oracle"):
            torch.ones(3).add(1)
        return {"seconds": 0.01, "games": 1, "records": 28, "world_rows": 4, "oracle_rows": 4}

    monkeypatch.setattr(profile_run, "timed_run", tiny_run)
    trace = tmp_path / "sub" / "trace.json"
    rc = profile_run.main(["--games", "1", "--n-samples", "4", "--warmup", "0", "--device",
                           "cpu", "--oracle", "random:mlp", "--torch-profiler", str(trace)])
    assert rc == 0
    names = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    assert "eqfast/oracle" in names
    assert not list(trace.parent.glob(".*tmp*"))                 # atomic write cleaned up
    out = capsys.readouterr().out
    assert "top-level torch ops per decision step" in out and "Chrome trace:" in out


def test_device_op_counter_attributes_ops_to_stages():
    from eqfast.utils.profiling import OUTSIDE, DeviceOpCounter, stage

    x = torch.arange(8)
    with DeviceOpCounter() as counter:
        y = x + 1                      # one op outside any stage
        with stage("a"):
            z = (y * 2).view(2, 4)     # mul counts, view does not
            torch.empty(3)             # an allocation launches nothing
            with stage("b"):
                z.sum()
                z.max()
    assert dict(counter.counts) == {OUTSIDE: 1, "a": 1, "b": 2}


@pytest.mark.interpreter
def test_device_op_counter_counts_triton_launches_not_interpreter_traffic():
    from conftest import TEST_DEVICE, random_games

    import eqfast.kernels
    from eqfast.engine.public import hidden_info
    from eqfast.utils.profiling import DeviceOpCounter, stage

    info = hidden_info(random_games(3, 11, plays=(2, 9)))
    info = type(info)(**{f: getattr(info, f).to(TEST_DEVICE) for f in info.__dataclass_fields__})
    with DeviceOpCounter() as counter:
        with stage("counts"):
            eqfast.kernels.completion_counts(info)     # an allocation + one launch
    assert dict(counter.counts) == {"counts": 1}


def test_profile_run_count_ops(profile_run, capsys):
    assert profile_run.main(["--games", "2", "--n-samples", "4", "--pipeline", "fast",
                             "--backend", "reference", "--warmup", "0", "--count-ops",
                             "--oracle", "random:mlp"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"device ops per decision step (\d+): (.*)", out)
    assert m and int(m.group(1)) > 0 and "public" in m.group(2) and "sample" in m.group(2)


def test_profile_run_oracle_alone(profile_run, tmp_path):
    out_json = tmp_path / "alone.json"
    assert profile_run.main(["--games", "2", "--n-samples", "4", "--pipeline", "fast",
                             "--backend", "reference", "--warmup", "0", "--oracle-alone",
                             "--oracle", "random:mlp", "--json", str(out_json)]) == 0
    summary = json.loads(out_json.read_text())
    assert summary["oracle_alone_s"] > 0
    assert summary["oracle_alone_share"] == pytest.approx(summary["oracle_alone_s"] / summary["seconds"])
    # posterior runs have no single forward per step to compare with: the figure is left out
    assert profile_run.main(["--games", "1", "--n-samples", "2", "--pipeline", "fast",
                             "--backend", "reference", "--warmup", "0", "--oracle-alone",
                             "--posterior", "--oracle", "random:mlp", "--json", str(out_json)]) == 0
    assert "oracle_alone_s" not in json.loads(out_json.read_text())


def test_imports_and_ranges_without_the_nvtx_package(tmp_path):
    """The GPU machines have no `nvtx` package: the package, the stage ranges and
    profile_run must work without it (torch.cuda.nvtx on CUDA builds, else no-op)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = (
        "import sys; sys.modules['nvtx'] = None\n"          # `import nvtx` raises ImportError
        "sys.path.insert(0, %r)\n"
        "import eqfast, eqfast.engine.fast, eqfast.cli.generate\n"
        "from eqfast.utils import profiling\n"
        "import profile_run\n"
        "with profiling.stage('x'), profiling.nvtx_range('eqfast/y'):\n"
        "    pass\n"
        "assert profiling.STAGE_CALLS['x'] == 1\n"
        "print('ok')\n" % str(root / "profiling"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
