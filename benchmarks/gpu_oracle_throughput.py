"""Rows per second of oracle networks on one device: the forward the engines call on
tokenized rows (`forward_codes` of the frozen TorchScript `oracle_from_spec` builds; the
rows are tokenized once, outside the timing, as the fast engine's Triton tokenizer does),
per precision and batch size, on real positions (rows of a solver-labelled shard
directory, repeated to the batch size). Prints and appends one JSON line per measurement.
The module's own `forward` (its TorchScript tokenizer included) is not timed: on CUDA,
TorchScript's fusion of that tokenizer gave wrong Q (NetworkOracle.query's doc).

    python benchmarks/gpu_oracle_throughput.py --oracles default,runs/x/best.safetensors \\
        --data runs/v2data --device cuda --out results.jsonl

Timing: CUDA events around `--iters` forwards after `--warmup` forwards (wall clock on the
CPU); the median of `--repeats` such windows.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eqfast.engine.pipeline import oracle_precision  # noqa: E402
from eqfast.oracle.dataset import as_batch, load_shards  # noqa: E402
from eqfast.oracle.factory import oracle_from_spec  # noqa: E402
from eqfast.oracle.tokenizer import actor_slot_tiles, tokenize  # noqa: E402


def window_seconds(fn, iters: int, device: torch.device) -> float:
    if device.type == "cuda":
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / 1000
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--oracles", required=True, help="comma-separated oracle specs "
                    "(default, a weights file, random:ARCH)")
    ap.add_argument("--data", required=True, help="shard directory to take positions from")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", default="4096,16384,65536")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="append JSON lines here")
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    rows = load_shards(a.data, max_shards=1)
    n = len(rows["q"])
    for spec in [s for s in a.oracles.split(",") if s]:
        oracle, identity = oracle_from_spec(spec, device)
        for batch in [int(b) for b in a.batches.split(",")]:
            index = torch.arange(batch) % n
            b = as_batch(rows, index)
            hands, remaining, decl, trick, actor = (
                t.to(device) for t in (b.hands, b.remaining, b.decl, b.trick, b.actor))
            codes, slots = tokenize(hands, remaining, decl, trick, actor), actor_slot_tiles(hands, actor)
            for precision in a.precisions.split(","):
                with torch.no_grad(), oracle_precision(precision, device):
                    fn = lambda: oracle.module.forward_codes(codes, slots)  # noqa: E731
                    for _ in range(a.warmup):
                        fn()
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    times = [window_seconds(fn, a.iters, device) for _ in range(a.repeats)]
                sec = statistics.median(times) / a.iters
                line = {"what": "oracle-throughput", "forward": "forward_codes",
                        "oracle": identity["label"],
                        "device": torch.cuda.get_device_name(device) if device.type == "cuda"
                        else "cpu", "precision": precision, "batch": batch,
                        "rows_per_s": round(batch / sec), "ms_per_forward": round(sec * 1e3, 3)}
                print(json.dumps(line), flush=True)
                if a.out:
                    with open(a.out, "a") as f:
                        f.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
