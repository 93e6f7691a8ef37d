"""The engine table of benchmarks/gpu_session.sh: many profile_run configurations in one process.

    python benchmarks/gpu_engine_table.py --jsonl runs.jsonl --stop-at EPOCH_SECONDS
    python benchmarks/gpu_engine_table.py --list                     # the rows, in order

Each row is one `profiling/profile_run.py` run (games/s at N = 100, first batch excluded as
warm-up) appended to `--jsonl` as it finishes. Rows run in the order below (the most
informative first) and only while their time estimate fits before `--stop-at`; a row
whose label is already in the file is skipped, so a second call (after a crash, or on a
later machine with the file carried over) resumes where the first stopped. One process
for all rows saves the interpreter and CUDA start (~5-10 s a process); GPU memory is
released between rows.

`--dry-run` runs every row on the CPU with tiny shapes (reference backend, no graphs), to
check the table end to end without a GPU.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

# (label, estimated seconds on an H100 including capture and warm-up, profile_run flags).
# 816K / 3.3M transformers have random weights (the cost per row of trained ones); the
# 816K one at G = 256 runs 25.6K rows per step, above the 16K-row point of the 85% goal.
ROWS = [
    ("816k-g256-graphs-fp32", 45, ["--oracle", "random:transformer816k", "--batches", "4",
                                   "--oracle-alone"]),
    ("816k-g256-nographs-profiler", 45, ["--oracle", "random:transformer816k", "--no-graphs",
                                         "--batches", "1", "--torch-profiler", "{tmp}/t1.json",
                                         "--top", "12"]),
    ("816k-g256-graphs-bf16", 40, ["--oracle", "random:transformer816k", "--batches", "4",
                                   "--set", "oracle_precision=bf16", "--oracle-alone"]),
    ("816k-g256-graphs-tf32", 40, ["--oracle", "random:transformer816k", "--batches", "4",
                                   "--set", "oracle_precision=tf32"]),
    ("mlp-g256-nographs-fp32", 30, ["--no-graphs", "--batches", "8", "--oracle-alone"]),
    ("mlp-g256-posterior-graphs", 40, ["--posterior", "--batches", "8"]),
    ("mlp-g1024-graphs-fp32", 40, ["--games", "1024", "--batches", "8", "--oracle-alone"]),
    ("mlp-g256-graphs-bf16", 30, ["--batches", "8", "--set", "oracle_precision=bf16"]),
    ("mlp-g256-nographs-profiler", 30, ["--no-graphs", "--batches", "1", "--torch-profiler",
                                        "{tmp}/t2.json", "--top", "12"]),
    ("816k-g1024-graphs-bf16", 50, ["--oracle", "random:transformer816k", "--games", "1024",
                                    "--batches", "2", "--set", "oracle_precision=bf16"]),
    ("816k-g256-posterior-bf16", 50, ["--oracle", "random:transformer816k", "--posterior",
                                      "--batches", "2", "--set", "oracle_precision=bf16"]),
    ("3m-g256-graphs-bf16", 50, ["--oracle", "random:transformer3m", "--batches", "2",
                                 "--set", "oracle_precision=bf16", "--oracle-alone"]),
    ("3m-g256-graphs-fp32", 70, ["--oracle", "random:transformer3m", "--batches", "2",
                                 "--oracle-alone"]),
]

DRY_RUN_ARGS = ["--device", "cpu", "--games", "2", "--n-samples", "4", "--pipeline", "fast",
                "--backend", "reference", "--warmup", "0"]


def done_labels(path: Path) -> set[str]:
    if not path.exists():
        return set()
    labels = set()
    for line in path.read_text().splitlines():
        try:
            labels.add(json.loads(line).get("label"))
        except json.JSONDecodeError:
            pass
    return labels


def row_argv(flags: list[str], tmp: Path, dry_run: bool) -> list[str]:
    argv = [f.replace("{tmp}", str(tmp)) for f in flags]
    if dry_run:           # shapes and engine of a CPU check; the row's other flags stay
        drop = {"--games", "--batches"}
        kept, skip = [], False
        for f in argv:
            if skip:
                skip = False
                continue
            if f in drop:
                skip = True
                continue
            kept.append(f)
        return DRY_RUN_ARGS + [a for a in kept if a != "--no-graphs"] + ["--batches", "1"]
    return ["--device", "cuda", "--games", "256", "--n-samples", "100", "--warmup", "1"] + argv


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jsonl", type=Path, help="append each run's summary here (required to run)")
    p.add_argument("--stop-at", type=float, default=None,
                   help="Unix time after which no row may still be running (default: none)")
    p.add_argument("--tmp", type=Path, default=Path("/tmp"), help="folder for profiler traces")
    p.add_argument("--dry-run", action="store_true", help="tiny CPU runs (no GPU needed)")
    p.add_argument("--list", action="store_true", help="print the rows and exit")
    args = p.parse_args(argv)
    if args.list:
        for label, est, flags in ROWS:
            print(f"{label:<30}~{est:>3} s  {' '.join(flags)}")
        return 0
    if args.jsonl is None:
        p.error("--jsonl is required")
    sys.path.insert(0, str(ROOT / "profiling"))
    import profile_run

    failed = 0
    for label, est, flags in ROWS:
        if label in done_labels(args.jsonl):
            print(f"== {label}: in {args.jsonl} already, skipped", flush=True)
            continue
        left = None if args.stop_at is None else args.stop_at - time.time()
        if left is not None and est > left:
            print(f"== {label}: skipped (needs ~{est} s, {left:.0f} s left)", flush=True)
            continue
        run_argv = row_argv(flags, args.tmp, args.dry_run) + ["--label", label,
                                                               "--jsonl", str(args.jsonl)]
        print(f"== {label}: profile_run {' '.join(run_argv)}", flush=True)
        t0 = time.time()
        try:
            profile_run.main(run_argv)
        except Exception:          # one row's failure (say, out of memory) is reported
            failed += 1
            traceback.print_exc()
        except SystemExit as exc:  # profile_run's own argument errors
            failed += 1
            print(f"== {label}: exit {exc.code}", flush=True)
        print(f"== {label}: {time.time() - t0:.1f} s", flush=True)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
