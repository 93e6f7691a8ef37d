"""Profile a short eqfast-generate-like run and print where the time goes.

    python profiling/profile_run.py --games 16                          # per-stage table
    python profiling/profile_run.py --games 64 --device cuda --sync     # device-accurate stages
    python profiling/profile_run.py --games 4 --torch-profiler run.json # + Chrome trace
    nsys profile ... python profiling/profile_run.py ...                # see profiling/README.md

One run = `--warmup` untimed plays (TorchScript's profiling executor optimizes on the second
call; CUDA graphs and Triton kernels are built on the first), then `--batches` timed batches
of `--games` games in lockstep with the engine eqfast-generate builds (`--pipeline`: the fast
engine, CUDA graphs on CUDA unless `--no-graphs`; or the reference engine), minus shard writing.
The timed part sits between cudaProfilerStart/Stop (so `nsys --capture-range=cudaProfilerApi`
skips the warm-up) and inside an NVTX range `eqfast/measured`.

The table lists every stage of `eqfast.utils.profiling.stage` (calls, seconds, share of the
timed wall time) and the wall time outside any stage. On CUDA, stage times are host times
(launch cost) unless `--sync` synchronizes at every stage boundary; `--sync` serializes the
pipeline, so use it for the split, not for games/s.

With `--torch-profiler`, every stage range is mirrored as a `torch.profiler.record_function`
of the same name (`eqfast/oracle`, ...), and on CUDA the device time under each range is
summed from the profiler's kernel events, which gives the share of device time spent in the
oracle forward (the issue's goal: >= 85% at G*N >= 16K rows per step).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch

from eqfast.engine.factory import build_engine, pipeline_name
from eqfast.engine.pipeline import N_DECISIONS, Engine, EngineConfig, oracle_precision
from eqfast.engine.posterior import PosteriorConfig
from eqfast.oracle.tokenizer import N_CODES
from eqfast.utils import profiling

# profiler activity types that are work on the device (not annotations or API calls)
_DEVICE_WORK = {"kernel", "gpu_memcpy", "gpu_memset"}


# ---------------------------------------------------------------------------- setup
def make_oracle(spec: str, device, eager: bool = False, quantize: bool = False):
    """(oracle, label) for --oracle, through eqfast.oracle.factory.oracle_from_spec (read
    its doc): 'default', 'exact', 'random:ARCH' (random weights, the cost per row of trained
    ones) or a path to oracle weights."""
    from eqfast.oracle.factory import oracle_from_spec

    try:
        oracle, identity = oracle_from_spec(spec, device, quantize=quantize, eager=eager)
    except ValueError as exc:
        raise SystemExit(f"profile_run: --oracle {spec}: {exc}") from None
    return oracle, identity["label"]


def parse_overrides(items: list[str]) -> dict:
    """--set KEY=VALUE pairs as EngineConfig fields, typed like the field's default, so
    options the engine grows (oracle_chunk, graph switches, ...) need no new flag here."""
    fields = {f.name: f for f in dataclasses.fields(EngineConfig)}
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in fields:
            raise SystemExit(f"profile_run: --set {item!r}: expected KEY=VALUE with KEY one of "
                             f"{', '.join(sorted(fields))}")
        f = fields[key]
        default = f.default if f.default is not dataclasses.MISSING else None
        try:
            if isinstance(default, bool):
                if text.lower() not in ("1", "0", "true", "false", "on", "off"):
                    raise ValueError(text)
                value = text.lower() in ("1", "true", "on")
            elif text.lower() == "none":
                value = None
            elif isinstance(default, int):
                value = int(text)
            elif isinstance(default, float) or default is None:
                value = float(text)
            else:
                value = type(default)(text)
        except (TypeError, ValueError):
            raise SystemExit(f"profile_run: --set {item!r}: {text!r} is not a valid "
                             f"{type(default).__name__} for {key}") from None
        out[key] = value
    return out


def make_engine(args) -> tuple[Engine, str]:
    """The engine eqfast-generate would build: FastEngine (CUDA graphs on CUDA unless
    --no-graphs) for --pipeline fast, or auto on CUDA; the reference Engine otherwise."""
    overrides = parse_overrides(args.set)
    oracle, label = make_oracle(args.oracle, args.device, args.eager,
                                quantize=overrides.get("oracle_precision") == "int8")
    cfg = EngineConfig(n_samples=args.n_samples,
                       posterior=PosteriorConfig() if args.posterior else None, **overrides)
    engine = build_engine(oracle, cfg, pipeline=args.pipeline, backend=args.backend,
                          device=args.device, graphs=False if args.no_graphs else None)
    return engine, label


# ---------------------------------------------------------------------------- measuring
@contextmanager
def stages_as_record_functions():
    """Mirror every `stage(name)` as a torch.profiler.record_function("eqfast/<name>").

    The engine modules bind `stage` at import (`from ..utils.profiling import stage`), so
    the name is swapped in every loaded eqfast module that holds the original, and put
    back on exit. Profiling runs only: record_function costs a few microseconds a range.
    """
    original = profiling.stage

    @contextmanager
    def stage_and_record_function(name: str):
        with torch.profiler.record_function(f"eqfast/{name}"), original(name):
            yield

    patched = [m for name, m in list(sys.modules.items())
               if name.startswith("eqfast") and getattr(m, "stage", None) is original]
    for module in patched:
        module.stage = stage_and_record_function
    try:
        yield
    finally:
        for module in patched:
            module.stage = original


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_run(engine: Engine, games: int, batches: int, seed_start: int) -> dict:
    """Play `batches` batches of `games` games; wall seconds and row counts of the run.

    Through `engine.run`, as eqfast-generate drives it (FastEngine: a writer thread takes
    each finished batch while the device plays the next; Engine: batch after batch), with a
    sink that only counts records."""
    profiling.reset_stage_times()
    engine.oracle_rows = engine.world_rows = 0
    cuda = engine.device.type == "cuda"
    _sync(engine.device)
    if cuda:
        torch.cuda.profiler.start()          # nsys --capture-range=cudaProfilerApi
    with profiling.nvtx_range("eqfast/measured"):
        t0 = time.perf_counter()
        seed_lists = [list(range(seed_start + b * games, seed_start + (b + 1) * games))
                      for b in range(batches)]
        records = 0

        def sink(seeds, recs):
            nonlocal records
            records += len(recs)
        engine.run(seed_lists, sink)
        _sync(engine.device)
        seconds = time.perf_counter() - t0
    if cuda:
        torch.cuda.profiler.stop()
    expected = N_DECISIONS * games * batches
    if records != expected:
        raise RuntimeError(f"profile_run: got {records} records, expected {expected}")
    return {"seconds": seconds, "games": games * batches, "records": records,
            "world_rows": engine.world_rows, "oracle_rows": engine.oracle_rows}


def summarize(run: dict, stage_times=None, stage_calls=None) -> dict:
    """Per-stage calls/seconds/share of the timed wall time, rates and the oracle share."""
    stage_times = profiling.STAGE_TIMES if stage_times is None else stage_times
    stage_calls = profiling.STAGE_CALLS if stage_calls is None else stage_calls
    wall = max(run["seconds"], 1e-12)
    stages = {name: {"calls": int(stage_calls.get(name, 0)), "seconds": t, "share": t / wall}
              for name, t in sorted(stage_times.items(), key=lambda kv: -kv[1])}
    in_stages = sum(stage_times.values())
    return {
        **run,
        "stages": stages,
        "outside_stages_s": wall - in_stages,   # negative only if stages nest
        "games_per_s": run["games"] / wall,
        "decisions_per_s": run["records"] / wall,
        "world_rows_per_s": run["world_rows"] / wall,
        "oracle_rows_per_s": run["oracle_rows"] / wall,
        "oracle_share": stage_times.get("oracle", 0.0) / wall,
    }


def format_table(summary: dict) -> str:
    """The per-stage table and the headline rates as text."""
    lines = [f"{'stage':<16}{'calls':>8}{'seconds':>10}{'share':>8}"]
    for name, s in summary["stages"].items():
        lines.append(f"{name:<16}{s['calls']:>8}{s['seconds']:>10.3f}{100 * s['share']:>7.1f}%")
    other = summary["outside_stages_s"]
    wall = max(summary["seconds"], 1e-12)
    lines.append(f"{'(outside stages)':<16}{'':>8}{other:>10.3f}{100 * other / wall:>7.1f}%")
    lines.append(f"{'total (wall)':<16}{'':>8}{summary['seconds']:>10.3f}{100.0:>7.1f}%")
    lines.append("")
    lines.append(f"games/s {summary['games_per_s']:.2f}   decisions/s "
                 f"{summary['decisions_per_s']:.1f}   world rows/s {summary['world_rows_per_s']:,.0f}"
                 f"   oracle rows/s {summary['oracle_rows_per_s']:,.0f}")
    lines.append(f"oracle share of wall time {100 * summary['oracle_share']:.1f}%   "
                 f"oracle rows {summary['oracle_rows']:,} for {summary['world_rows']:,} world rows "
                 "drawn")
    for key, label in (("torch_ops_per_decision", "top-level torch ops per decision step"),
                       ("device_ops_per_decision", "device ops per decision step")):
        if key in summary:
            ops = summary[key]
            parts = "  ".join(f"{k} {v:.0f}" for k, v in ops.items())
            lines.append(f"{label} {sum(ops.values()):.0f}: {parts}")
    if "oracle_alone_s" in summary:
        lines.append(f"oracle forward alone on the same rows {summary['oracle_alone_s']:.3f} s = "
                     f"{100 * summary['oracle_alone_share']:.1f}% of the run's wall time "
                     "(the run at oracle speed: 100%)")
    if "device_share" in summary:
        ds = summary["device_share"]
        parts = "  ".join(f"{k} {100 * v:.1f}%" for k, v in ds["by_stage"].items()) or \
            "none under a stage range (graph replays: use --no-graphs for the split)"
        lines.append(f"device time {ds['total_us'] / 1e6:.3f} s; share by stage: {parts}")
    return "\n".join(lines)


def device_time_by_stage(events) -> tuple[dict[str, float], float]:
    """(device microseconds under each outermost eqfast/<stage> range, total device
    microseconds) from torch profiler events (`prof.events()`).

    A CPU-side range's `device_time_total` sums the kernels launched by the ops under it
    (kernels are linked to their launching runtime call by correlation id). The total
    counts device work only: kernels, memcpy, memset, not GPU-side annotation spans.
    A CUDA graph replay attributes all its kernels to the range around the replay.
    """
    total = 0.0
    per_stage: dict[str, float] = defaultdict(float)
    for e in events:
        if e.device_type != torch.autograd.DeviceType.CPU:
            kind = getattr(e, "activity_type", None)
            if (kind in _DEVICE_WORK) if kind else not e.is_user_annotation:
                total += e.device_time_total
            continue
        if not e.name.startswith("eqfast/"):
            continue
        parent, nested = e.cpu_parent, False
        while parent is not None and not nested:
            nested, parent = parent.name == e.name, parent.cpu_parent
        if not nested:
            per_stage[e.name[len("eqfast/"):]] += e.device_time_total
    return dict(per_stage), total


def ops_by_stage(events) -> dict[str, int]:
    """Top-level torch ops (aten::* not called from another aten op) under each eqfast/<stage>
    range, "(outside stages)" for the rest. Each is one dispatcher call from Python, and on
    CUDA roughly one kernel launch or more: the host-overhead count CUDA graphs remove."""
    counts: dict[str, int] = defaultdict(int)
    for e in events:
        if e.device_type != torch.autograd.DeviceType.CPU or not e.name.startswith("aten::"):
            continue
        parent = e.cpu_parent
        if parent is not None and parent.name.startswith("aten::"):
            continue
        while parent is not None and not parent.name.startswith("eqfast/"):
            parent = parent.cpu_parent
        counts[parent.name[len("eqfast/"):] if parent is not None else "(outside stages)"] += 1
    return dict(counts)


def oracle_alone_seconds(engine, run: dict, batches: int) -> float | None:
    """Seconds the oracle forward alone takes for the run's steps: 28 x batches forwards of
    the run's mean oracle rows per step, on random codes (the forward's cost does not depend
    on the values). None where it does not apply (posterior runs, non-network oracles)."""
    module = getattr(engine.oracle, "module", None)
    if module is None or engine.cfg.posterior is not None:
        return None
    steps = N_DECISIONS * batches
    rows = max(1, round(run["oracle_rows"] / steps))
    dev = engine.device
    gen = torch.Generator(device=dev).manual_seed(0)
    codes = torch.randint(0, N_CODES, (rows, 28), device=dev, generator=gen)
    slots = torch.randint(0, 28, (rows, 7), device=dev, generator=gen)
    with torch.no_grad(), oracle_precision(engine.cfg.oracle_precision, dev):
        for _ in range(3):                       # warm-up (TorchScript optimizes, caches)
            module.forward_codes(codes, slots)
        _sync(dev)
        t0 = time.perf_counter()
        for _ in range(steps):
            module.forward_codes(codes, slots)
        _sync(dev)
    return time.perf_counter() - t0


def count_device_ops(engine, args) -> dict[str, float]:
    """Device ops per decision step by stage ({stage: ops / 28}) over one more batch of the
    same shape, played eagerly (inside a graph replay no op is visible to the host)."""
    graphs = getattr(engine, "graphs", False)
    if graphs:
        engine.graphs = False
    first = args.seed_start + 2_000_000
    try:
        with profiling.DeviceOpCounter() as counter:
            engine.play(range(first, first + args.games))
    finally:
        if graphs:
            engine.graphs = True
    per_step = {k: v / N_DECISIONS for k, v in counter.counts.items()}
    return dict(sorted(per_step.items(), key=lambda kv: -kv[1]))


def _write_atomic(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def profile_with_torch(engine, args, trace_path: Path) -> tuple[dict, object]:
    """The timed run under torch.profiler; writes the Chrome trace, returns (run, prof)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if engine.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with stages_as_record_functions(), profile(activities=activities) as prof:
        run = timed_run(engine, args.games, args.batches, args.seed_start)
    _write_atomic(trace_path, lambda p: prof.export_chrome_trace(str(p)))
    return run, prof


# ---------------------------------------------------------------------------- CLI
def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="profile_run.py",
        description="Profile a short eqfast-generate-like run: per-stage times, games/s, "
                    "oracle share; optional PyTorch-profiler Chrome trace. Pair with nsys: "
                    "see profiling/README.md.")
    p.add_argument("--games", type=int, default=16, help="games per batch, played in lockstep")
    p.add_argument("--batches", type=int, default=1, help="timed batches (default 1)")
    p.add_argument("--warmup", type=int, default=1,
                   help="untimed batches of the same shape first (default 1)")
    p.add_argument("--seed-start", type=int, default=0, help="first game seed of the timed run")
    p.add_argument("--n-samples", type=int, default=100, help="worlds per decision (default 100)")
    p.add_argument("--posterior", action="store_true", help="posterior-weighted worlds")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:K or auto (default)")
    p.add_argument("--backend", default="auto", choices=["auto", "reference", "triton"],
                   help="device stages (auto: triton on CUDA, reference on the CPU)")
    p.add_argument("--pipeline", default="auto", choices=["auto", "fast", "reference"],
                   help="engine as in eqfast-generate: fast (static-shape steps, CUDA graphs on "
                        "CUDA, writer thread) or reference (de-duplicating loop); auto = fast "
                        "on CUDA, reference on the CPU")
    p.add_argument("--no-graphs", action="store_true",
                   help="fast pipeline without CUDA-graph capture (per-stage times visible)")
    p.add_argument("--oracle", default="default",
                   help="default | random:ARCH (mlp, transformer, transformer816k, ...) | PATH")
    p.add_argument("--eager", action="store_true", help="network oracle without TorchScript")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an EngineConfig field, e.g. --set oracle_chunk=8192 (repeatable)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    p.add_argument("--sync", action="store_true",
                   help="synchronize CUDA at every stage boundary (device-accurate stage "
                        "times; serializes the pipeline)")
    p.add_argument("--torch-profiler", type=Path, metavar="OUT.json",
                   help="run the timed part under torch.profiler and write a Chrome trace")
    p.add_argument("--oracle-alone", action="store_true",
                   help="also time the oracle forward alone on as many rows per step as the "
                        "run evaluated (uniform runs with a network oracle): the time the run "
                        "would take if everything but the forward were free")
    p.add_argument("--count-ops", action="store_true",
                   help="play one more batch eagerly under DeviceOpCounter and print the device "
                        "ops (aten ops that compute + Triton launches, about one kernel each on "
                        "a GPU) per decision step by stage")
    p.add_argument("--top", type=int, default=15, help="profiler ops to list (default 15)")
    p.add_argument("--json", type=Path, metavar="OUT.json", help="also write the summary as JSON")
    p.add_argument("--jsonl", type=Path, metavar="RUNS.jsonl",
                   help="also append the summary as one JSON line (with --label) to this file")
    p.add_argument("--label", default="", help="a name for this run in --jsonl (default empty)")
    args = p.parse_args(argv)
    for name in ("games", "batches", "n_samples"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        p.error(f"--warmup must be >= 0, got {args.warmup}")
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device}: CUDA is not available in this torch build/machine")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        engine, oracle_label = make_engine(args)
    except ValueError as exc:        # e.g. --pipeline fast with --set sem=...
        raise SystemExit(f"profile_run: {exc}") from None
    if args.sync and getattr(engine, "graphs", False) and args.warmup == 0:
        # the timed run would capture the graph, and a synchronize during capture is illegal
        raise SystemExit("profile_run: --sync with CUDA graphs needs --warmup >= 1 "
                         "(or --no-graphs, which is what --sync is for)")
    for w in range(args.warmup):               # different seeds, same batch shape
        first = args.seed_start + 1_000_000 + w * args.games
        engine.play(range(first, first + args.games))
    profiling.set_sync(args.sync)
    prof = None
    try:
        if args.torch_profiler:
            run, prof = profile_with_torch(engine, args, args.torch_profiler)
        else:
            run = timed_run(engine, args.games, args.batches, args.seed_start)
    finally:
        profiling.set_sync(False)
    summary = summarize(run)
    if args.oracle_alone:
        alone = oracle_alone_seconds(engine, run, args.batches)
        if alone is not None:
            summary["oracle_alone_s"] = alone
            summary["oracle_alone_share"] = alone / max(run["seconds"], 1e-12)
    if args.count_ops:
        summary["device_ops_per_decision"] = count_device_ops(engine, args)
    if prof is not None:
        ops = ops_by_stage(prof.events())
        summary["torch_ops_per_decision"] = {k: v / run["records"] * run["games"]
                                             for k, v in sorted(ops.items(), key=lambda kv: -kv[1])}
    if prof is not None and engine.device.type == "cuda":
        by_stage, total = device_time_by_stage(prof.events())
        summary["device_share"] = {"total_us": total,
                                   "by_stage": {k: v / total if total else 0.0
                                                for k, v in sorted(by_stage.items(),
                                                                   key=lambda kv: -kv[1])}}
    summary.update(device=str(engine.device), backend=engine.backend.name,
                   pipeline=pipeline_name(engine), oracle=oracle_label,
                   n_samples=args.n_samples, posterior=args.posterior, sync=args.sync,
                   games_per_batch=args.games, batches=args.batches, warmup=args.warmup,
                   graphs=bool(getattr(engine, "graphs", False)),
                   oracle_precision=engine.cfg.oracle_precision, label=args.label,
                   torch_threads=torch.get_num_threads(),
                   torch=torch.__version__, triton_interpret=os.environ.get("TRITON_INTERPRET"))
    if engine.device.type == "cuda":
        summary["device_name"] = torch.cuda.get_device_name(engine.device)

    print(f"{summary['games']} games x N={args.n_samples}"
          f"{' (posterior)' if args.posterior else ''} on {summary.get('device_name', 'cpu')}, "
          f"{pipeline_name(engine)} pipeline, backend {engine.backend.name}, "
          f"oracle {oracle_label}, "
          f"{torch.get_num_threads()} torch threads"
          f"{', synced stage times' if args.sync else ''}")
    if engine.device.type == "cuda" and not args.sync:
        print("note: CUDA stage times are host (launch) times; --sync for device-accurate ones")
    if getattr(engine, "graphs", False):
        print("note: stages run inside CUDA-graph replays, where no stage() range opens: the "
              "host sees only the total; --no-graphs (with --sync) for the per-stage split")
    if engine.backend.name == "triton" and engine.device.type != "cuda":
        print("note: Triton under TRITON_INTERPRET on the CPU: sample/reduce times are the "
              "interpreter's, not a kernel speed")
    print(format_table(summary))
    if prof is not None:
        if args.top > 0:
            sort = "self_device_time_total" if engine.device.type == "cuda" else "self_cpu_time_total"
            print(prof.key_averages().table(sort_by=sort, row_limit=args.top))
        print(f"Chrome trace: {args.torch_profiler} (open in chrome://tracing or "
              "https://ui.perfetto.dev)")
    if args.json:
        _write_atomic(args.json, lambda p: p.write_text(json.dumps(summary, indent=2) + "\n"))
    if args.jsonl:
        with open(args.jsonl, "a") as f:      # one line per run: a killed process keeps the rest
            f.write(json.dumps({"kind": "profile", **summary}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
