"""Each device stage's Triton kernel against its PyTorch reference, side by side on one card.

    python benchmarks/gpu_kernels.py --device cuda --out runs/kernels.jsonl
    python benchmarks/gpu_kernels.py --device cpu --games 4 --worlds 8   # a dry run (interpreter)

For every stage of `eqfast.engine.pipeline.Backend` both implementations run on the same
inputs (real game states after random legal plays: a mix of openings and mid-hand states
with voids), timed as replays of a CUDA graph of repeated calls (`do_bench_cudagraph`,
median; see `time_ms`), as the engine runs them, after warm-up. Per stage and implementation it reports milliseconds per call, the work rate
in the stage's own unit (decisions/s, worlds/s, oracle rows/s) and an effective bandwidth:
the bytes of every tensor read and written once (inputs + outputs, a lower bound on the
traffic) over the time, as GB/s and as a fraction of the card's device-to-device copy
bandwidth measured by the same script (read + write of a 1 GiB buffer). The reduction is
also timed at a size far beyond L2 (`--big-games`), where the bandwidth figure means
something; the engine's own sizes mostly fit in L2.

One JSON object per line is appended to `--out` as each stage finishes (a killed run keeps
what it measured), and a table is printed. The speed-up column is reference time over
kernel time on the same card.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import fields, is_dataclass
from pathlib import Path

import torch


def _interpret_if_cpu(device: str) -> None:
    if not device.startswith("cuda"):
        os.environ.setdefault("TRITON_INTERPRET", "1")


def nbytes(x) -> int:
    """Bytes of every tensor in x (tensors, dataclasses, tuples, dicts, NamedTuples)."""
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if is_dataclass(x):
        return sum(nbytes(getattr(x, f.name)) for f in fields(x))
    if isinstance(x, dict):
        return sum(nbytes(v) for v in x.values())
    if isinstance(x, (tuple, list)):
        return sum(nbytes(v) for v in x)
    return 0


def time_ms(fn, device: torch.device, reps: int, graph: bool = True) -> float:
    """Median milliseconds per call of fn().

    On CUDA, the calls are replayed from a CUDA graph (`do_bench_cudagraph`) when fn can be
    captured: the engine runs every stage inside one, and a stage of a few microseconds
    timed by events between eager calls measures the Python wrapper's launch cost, not the
    device (on an H200 such timings swung 2-6x between runs). A stage that
    cannot be captured is timed eagerly (`do_bench`); `last_timing` says which."""
    if device.type == "cuda":
        from triton.testing import do_bench, do_bench_cudagraph
        if graph:
            try:
                ms = float(do_bench_cudagraph(fn, rep=max(10, reps // 4), return_mode="median"))
                last_timing["method"] = "cuda-graph"
                return ms
            except Exception as exc:              # not capturable: eager timing
                torch.cuda.synchronize()
                last_timing["method"] = f"events ({type(exc).__name__})"
        else:
            last_timing["method"] = "events"
        return float(do_bench(fn, warmup=10, rep=reps, return_mode="median"))
    last_timing["method"] = "host clock"
    fn()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - t0))
    return sorted(times)[1]


last_timing: dict = {"method": None}


def copy_bandwidth(device: torch.device) -> float | None:
    """GB/s of a device-to-device copy of 1 GiB (bytes read + written)."""
    if device.type != "cuda":
        return None
    src = torch.empty(1 << 28, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), device, 200, graph=False)   # 0.5 ms: launch cost moot
    return 2 * (1 << 30) / (ms * 1e-3) / 1e9


def stage_inputs(games: int, worlds: int, window: int, device: torch.device, seed: int = 0):
    """Inputs of every stage, built with the reference stages from real game states."""
    from eqfast.engine.pipeline import make_backend
    from eqfast.engine.posterior import PosteriorConfig
    from eqfast.rules.batched import BatchedGames
    from eqfast.rules.deal import deal_from_seed, mix_seeds

    import numpy as np

    ref = make_backend("reference", device)
    gen = torch.Generator().manual_seed(seed)
    hands = np.stack([deal_from_seed(seed + g) for g in range(games)])
    state = BatchedGames.new(hands, torch.randint(0, 10, (games,), generator=gen),
                             torch.randint(0, 4, (games,), generator=gen), device="cpu")
    # each game stops after its own number of random legal plays (0..20): openings,
    # every trick position, voids
    stop = torch.randint(0, 21, (games,), generator=gen)
    snapshots = [state]
    for _ in range(20):
        slot = torch.multinomial(state.legal_mask().float(), 1, generator=gen)[:, 0]
        state = state.play(slot)
        snapshots.append(state)
    rows = torch.arange(games)
    picked = {f.name: torch.stack([getattr(s, f.name) for s in snapshots])[stop, rows].to(device)
              for f in fields(BatchedGames)}
    g = BatchedGames(**picked)
    info = ref.hidden_info(g)
    counts = ref.completion_counts(info)
    keys = torch.from_numpy(mix_seeds(seed, np.arange(games), 0, 0)).to(device)
    sample = ref.sample_worlds(info, counts, keys, worlds)
    legal = ref.legal_mask(g)
    past = ref.tokenize_prefix_worlds(g, info, sample, window)
    q = (torch.rand(games, worlds, 7, generator=gen) * 84 - 42).to(device)
    q_past = (torch.rand(games * worlds * window, 7, generator=gen) * 84 - 42).to(device)
    logw = torch.where(sample.valid, torch.randn(games, worlds, device=device), float("-inf"))
    slot = torch.multinomial(legal.float().cpu(), 1, generator=gen)[:, 0].to(device)
    cfg = PosteriorConfig(window_k=window)
    return {
        "hidden_info": ((g,), "decisions", games),
        "legal_mask": ((g,), "decisions", games),
        "completion_counts": ((info,), "decisions", games),
        "sample_worlds": ((info, counts, keys, worlds), "worlds", games * worlds),
        "tokenize_worlds": ((g, info, sample), "rows", games * worlds),
        "tokenize_prefix_worlds": ((g, info, sample, window), "rows", games * worlds * window),
        "posterior_log_weights": ((q_past.view(games, worlds, window, 7),
                                   past.legal.view(games, worlds, window, 7), past.observed_slot,
                                   past.valid, cfg, sample.valid), "worlds", games * worlds),
        "weighted_moments": ((q, legal, logw), "worlds", games * worlds),
        "play": ((g, slot), "decisions", games),
    }


def big_reduction_inputs(games: int, worlds: int, device: torch.device):
    gen = torch.Generator(device=device).manual_seed(1)
    q = torch.rand(games, worlds, 7, generator=gen, device=device) * 84 - 42
    legal = torch.rand(games, 7, generator=gen, device=device) < 0.6
    legal[:, 0] = True
    logw = torch.randn(games, worlds, generator=gen, device=device)
    return (q, legal, logw)


def measure(name, args, unit, count, backends, device, reps, bandwidth, label=None):
    """One JSON record: per implementation ms, rate, GB/s, share of copy bandwidth."""
    from eqfast.utils.checks import host_checks_off

    out = {"kind": "kernel", "stage": label or name, "unit": unit, "count": count,
           "device": str(device)}
    for impl, backend in backends.items():
        fn = getattr(backend, name)
        # as the fast path runs them: the references' host-side integrity checks (device
        # syncs) off for both
        with host_checks_off():
            result = fn(*args)                  # also the warm-up (Triton compiles here)
            moved = nbytes(args) + nbytes(result)
            ms = time_ms(lambda: fn(*args), device, reps)
        gbs = moved / (ms * 1e-3) / 1e9
        out[impl] = {"ms": round(ms, 5), "timing": last_timing["method"],
                     "per_s": count / (ms * 1e-3), "bytes": moved,
                     "gb_per_s": round(gbs, 2),
                     "bandwidth_share": round(gbs / bandwidth, 4) if bandwidth else None}
    if "reference" in out and "triton" in out:
        out["speedup"] = round(out["reference"]["ms"] / out["triton"]["ms"], 2)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (interpreter dry run)")
    p.add_argument("--games", type=int, default=1024, help="decisions per call (default 1024)")
    p.add_argument("--worlds", type=int, default=100, help="worlds per decision (default 100)")
    p.add_argument("--window", type=int, default=8, help="posterior window K (default 8)")
    p.add_argument("--big-games", type=int, default=65536,
                   help="decisions of the large reduction (default 65536: 183 MB of Q at N=100)")
    p.add_argument("--reps", type=int, default=200, help="do_bench time budget in ms (default 200)")
    p.add_argument("--out", type=Path, help="append one JSON line per stage here")
    args = p.parse_args(argv)
    _interpret_if_cpu(args.device)
    device = torch.device(args.device)
    from eqfast.engine.pipeline import make_backend

    backends = {"reference": make_backend("reference", device),
                "triton": make_backend("triton", device)}
    bandwidth = copy_bandwidth(device)
    meta = {"kind": "kernel", "stage": "_card", "device": torch.cuda.get_device_name(device)
            if device.type == "cuda" else "cpu", "copy_gb_per_s": bandwidth,
            "torch": torch.__version__, "games": args.games, "worlds": args.worlds,
            "window": args.window}
    records = [meta]

    def emit(rec):
        records.append(rec)
        if args.out is not None:
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
        line = f"{rec['stage']:<26}{rec['unit']:>10}"
        for impl in ("reference", "triton"):
            r = rec.get(impl)
            line += f"{r['ms']:>10.4f}{r['per_s']:>12.3g}{r['gb_per_s']:>9.1f}" if r else ""
        print(line + f"{rec.get('speedup', float('nan')):>8.2f}x", flush=True)

    if args.out is not None:
        with open(args.out, "a") as f:
            f.write(json.dumps(meta) + "\n")
    print(f"card: {meta['device']}; copy bandwidth: "
          f"{bandwidth:.0f} GB/s" if bandwidth else "card: cpu (interpreter: not kernel speeds)")
    print(f"{'stage':<26}{'unit':>10}" + "".join(f"{'ms':>10}{'/s':>12}{'GB/s':>9}" for _ in "rt")
          + f"{'speedup':>9}   (reference | triton)")
    for name, (stage_args, unit, count) in stage_inputs(args.games, args.worlds, args.window,
                                                        device).items():
        emit(measure(name, stage_args, unit, count, backends, device, args.reps, bandwidth))
    big = big_reduction_inputs(args.big_games, args.worlds, device)
    emit(measure("weighted_moments", big, "worlds", args.big_games * args.worlds, backends,
                 device, args.reps, bandwidth, label=f"weighted_moments@{args.big_games}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
