"""eqfast-eval-oracle: fidelity of an oracle network against exact solver labels.

    eqfast-eval-oracle --data runs/oracle/data                  # stored test split
    eqfast-eval-oracle --seed-start 1000000000 --deals 200      # fresh deals, solver-labelled
    eqfast-eval-oracle --weights accurate --seed-start 1000000000 --deals 200
    eqfast-eval-oracle --weights W.safetensors ... --json       # last line: one JSON object

Reports q_mae, q_gap (all decisions / >= 2 legal moves), argmax accuracy and blunder rate
(gap > 10 points), overall and per trick, plus rows/s eager and TorchScript.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from .common import HelpFormatter, device_problem, quiet_on_closed_stdout


def fresh_rows(seed_start: int, deals: int) -> dict:
    """Label deals seed_start .. seed_start+deals-1 with the solver, as in training."""
    from ..oracle.dataset import COLUMNS, as_tensors, label_game

    games = [label_game(g) for g in range(seed_start, seed_start + deals)]
    return as_tensors({c: np.concatenate([g[c] for g in games]) for c in COLUMNS})


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="eqfast-eval-oracle", description=__doc__.split("\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--weights", default="default",
                    help="'default', 'accurate' (the shipped networks, as eqfast-generate "
                         "--oracle names them) or a weights file (.safetensors) to evaluate")
    ap.add_argument("--data", help="directory of solver-labelled shards (eqfast-label-oracle) "
                                   "to evaluate on; when left out, "
                                   "--seed-start is required")
    ap.add_argument("--split", default="test", choices=("train", "val", "test"),
                    help="with --data: the split evaluated")
    ap.add_argument("--seed-start", type=int,
                    help="label --deals fresh deals from this deal number with the solver "
                         "and evaluate on them; when left out, --data is required")
    ap.add_argument("--deals", type=int, default=200, help="with --seed-start: deals labelled")
    ap.add_argument("--max-rows", type=int, default=None,
                    help="evaluate only the first this many positions (all when left out)")
    ap.add_argument("--speed-batch", type=int, default=1024, help="batch size for rows/s")
    ap.add_argument("--no-speed", action="store_true", help="skip the rows/s measurement")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--json", action="store_true", help="end with one JSON object")
    return ap


def check_args(a) -> str | None:
    """The first problem with the arguments (before any deal is labelled), or None."""
    from ..oracle.dataset import check_shard_dir

    if (a.data is None) == (a.seed_start is None):
        return "give exactly one of --data DIR or --seed-start S"
    for name in ("deals", "speed_batch", "threads", "max_rows"):
        value = getattr(a, name)
        if value is not None and value < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {value}"
    if a.seed_start is not None and a.seed_start < 0:
        return f"--seed-start must be >= 0, got {a.seed_start}"
    problem = device_problem(a.device)
    if problem is None and a.data is not None:
        try:
            check_shard_dir(a.data)
        except ValueError as e:
            problem = f"--data {e}"
    return problem


@quiet_on_closed_stdout
def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    import torch

    from ..oracle.dataset import as_batch, load_shards
    from ..oracle.evaluate import fidelity, format_report, predict, rows_per_second
    from ..oracle.factory import weights_path
    from ..oracle.weights import OracleWeightsError, load_oracle

    problem = check_args(a)
    weights = weights_path(a.weights)
    if problem is None:
        torch.set_num_threads(a.threads)
        try:
            scripted = load_oracle(weights, device=a.device, script=True)
        except OracleWeightsError as e:
            problem = f"--weights: {e}"
    if problem is not None:
        print(f"eqfast-eval-oracle: {problem}", file=sys.stderr)
        return 2

    t0 = time.perf_counter()
    if a.data is not None:
        rows = load_shards(a.data, split=a.split)
        source = f"{a.data} split {a.split}"
    else:
        rows = fresh_rows(a.seed_start, a.deals)
        source = f"fresh deals {a.seed_start}..{a.seed_start + a.deals - 1}"
    if a.max_rows:
        rows = {c: v[:a.max_rows] for c, v in rows.items()}
    batch = as_batch(rows)
    if len(batch) == 0:
        print(f"eqfast-eval-oracle: {source}: no positions", file=sys.stderr)
        return 2
    print(f"{len(batch)} positions from {source} ({time.perf_counter() - t0:.1f}s)")

    q = predict(scripted, batch)
    m = fidelity(q, rows["q"], rows["legal"], rows["depth"])
    print(f"weights {weights}: {scripted.config['config']}")
    print(format_report(m))
    if not a.no_speed:
        eager = load_oracle(weights, device=a.device, script=False)
        m["rows_per_s_eager"] = rows_per_second(eager, batch, a.speed_batch)
        m["rows_per_s_torchscript"] = rows_per_second(scripted, batch, a.speed_batch)
        print(f"rows/s at batch {a.speed_batch}, {a.threads} thread(s): eager "
              f"{m['rows_per_s_eager']:.0f}, TorchScript {m['rows_per_s_torchscript']:.0f}")
    if a.json:
        m.update(weights=str(weights), source=source)
        print(json.dumps(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
