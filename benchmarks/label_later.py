"""Label later against the CPU default, on one machine (docs/GENERATE.md, "Label later").

    python benchmarks/label_later.py --out runs/label_later [--games 24] [--threads 1]

Runs, on the same seeds, in this process (so each step's CPU seconds are measured, C
solver threads included, without interpreter start-up):

1. play: eqfast-generate --pipeline fast --oracle default --store-worlds --n-samples 400
   (the GPU issue's playing step, here on the CPU);
2. relabel: eqfast-relabel of 1. with the CPU default's budgets 25,50,100,... and the
   stored network Q as control variate on the 400 stored worlds;
3. the CPU default: eqfast-generate (exact, the same budgets, the shipped network as control
   variate on 400 worlds).

Prints one JSON object: per step wall and CPU seconds, games/s and games per CPU-second;
bytes per record of each dataset (and of 1. with its owners unpacked, int8 a tile); how
many records of 2. sit at a position that 3. reached too, and how many of those are equal
field for field but for the move's (the same estimator on the same worlds gives the same
label there).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from eqfast.cli.generate import main as generate
from eqfast.cli.relabel import main as relabel
from eqfast.data.shards import load_records, read_shard

BUDGETS = "25,50,100,100,100,100,100"
MOVE_FIELDS = ("action_taken", "q_gap", "exploration_mode", "realized_to_go", "final_points")


def timed(fn, argv) -> dict:
    wall, cpu = time.perf_counter(), time.process_time()
    status = fn(argv)
    if status != 0:
        raise SystemExit(f"{argv}: exit {status}")
    return {"wall_s": round(time.perf_counter() - wall, 2),
            "cpu_s": round(time.process_time() - cpu, 2)}


def bytes_per_record(root: Path, unpacked_owners: bool = False) -> float:
    """Bytes of the safetensors files and sidecars per record (with unpacked_owners: as if
    world_owner were stored int8, one byte a tile)."""
    total = records = 0
    for f in root.glob("*/shard_*.safetensors"):
        r, _ = read_shard(f)
        records += len(r)
        total += f.stat().st_size + f.with_suffix(".json").stat().st_size
        if unpacked_owners and "world_owner" in r:
            total += r["world_owner"].numel() * 3 // 4           # 28 bytes a world, not 7
    return round(total / records, 1)


def same_position_equal(a_root: Path, b_root: Path) -> dict:
    a, _ = load_records(a_root)
    b, _ = load_records(b_root)
    key = lambda r, i: (int(r["seed"][i]), int(r["decision_idx"][i]),
                        r["transcript_tokens"][i].numpy().tobytes())
    where = {key(b, j): j for j in range(len(b))}
    shared = equal = 0
    for i in range(len(a)):
        j = where.get(key(a, i))
        if j is None:
            continue
        shared += 1
        equal += all(torch.equal(a[n][i], b[n][j]) for n in a.tensors
                     if n not in MOVE_FIELDS and n in b)
    return {"records": len(a), "at_shared_positions": shared, "equal_there": equal}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--games", type=int, default=24)
    p.add_argument("--seed-start", type=int, default=880_000_000)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    common = ["--seed-start", str(args.seed_start), "--games", str(args.games),
              "--games-per-batch", str(args.games), "--threads", str(args.threads), "--quiet"]
    out = {"games": args.games, "threads": args.threads}
    play, labelled, default = (args.out / n for n in ("play", "relabel", "cpu_default"))
    out["play"] = timed(generate, ["--out", str(play), "--pipeline", "fast", "--oracle",
                                   "default", "--store-worlds", "--n-samples", "400", *common])
    out["relabel"] = timed(relabel, [str(play), "--out", str(labelled), "--n-by-trick", BUDGETS,
                                     "--control-variate", "stored", "--threads",
                                     str(args.threads), "--quiet"])
    out["cpu_default"] = timed(generate, ["--out", str(default), *common])
    for step in ("play", "relabel", "cpu_default"):
        s = out[step]
        s["games_per_s"] = round(args.games / s["wall_s"], 3)
        s["games_per_cpu_s"] = round(args.games / s["cpu_s"], 3)
    per_game = {k: 1 / out[k]["games_per_cpu_s"] for k in ("play", "relabel", "cpu_default")}
    out["label_later_games_per_cpu_s"] = round(1 / (per_game["play"] + per_game["relabel"]), 3)
    out["bytes_per_record"] = {
        "play (400 stored worlds, owners packed)": bytes_per_record(play),
        "play (owners int8)": bytes_per_record(play, unpacked_owners=True),
        "relabel": bytes_per_record(labelled), "cpu_default": bytes_per_record(default)}
    out["relabel_vs_cpu_default"] = same_position_equal(labelled, default)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
