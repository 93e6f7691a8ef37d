"""Oracle architectures compared at equal rows seen (not equal wall time).

    python benchmarks/oracle_equal_rows.py --data runs/v2data --max-shards 60 \
        --steps 3000 --batch 512 --out runs/equal_rows

Every configuration below trains from the same data (the first `--max-shards` shards), the
same seed and the same schedule (`--steps` x `--batch` rows seen), one after the other in
this process (`eqfast-train-oracle`'s code; each run in its own directory under `--out`,
so an interrupted comparison resumes). Each best-val weights file is then evaluated on
fresh solver-labelled deals (never in any training data), per trick, and timed on this CPU
(one thread: eager and TorchScript rows/s at batch 1024). Prints a table and writes
`--out/results.json`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

CONFIGS = {
    "mlp256x2-roles1": ["--arch", "mlp", "--hidden", "256", "--depth", "2", "--roles", "1"],
    "mlp256x2-roles2": ["--arch", "mlp", "--hidden", "256", "--depth", "2", "--roles", "2"],
    "attn-d32-l2-roles2": ["--arch", "transformer", "--d-model", "32", "--layers", "2",
                           "--heads", "4", "--d-ff", "64", "--roles", "2"],
    "attn-d64-l2-roles2-value": ["--arch", "transformer", "--d-model", "64", "--layers", "2",
                                 "--heads", "4", "--d-ff", "128", "--roles", "2",
                                 "--value-head", "--value-weight", "0.25"],
}


def flops_per_row(network) -> float:
    """Multiply-adds of one forward row in its Linear layers (attention's 28 x 28 products
    and the embedding gathers are left out: small at these widths)."""
    from torch import nn

    from eqfast.oracle.network import EmbSumMLP

    per_token = sum(m.in_features * m.out_features for m in network.modules()
                    if isinstance(m, nn.Linear))
    tokens = 1 if isinstance(network, EmbSumMLP) else 28
    return float(per_token * tokens)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="solver-labelled shard directory")
    p.add_argument("--max-shards", type=int, default=60, help="shards used (default 60)")
    p.add_argument("--steps", type=int, default=3000, help="optimizer steps (default 3000)")
    p.add_argument("--batch", type=int, default=512, help="rows per step (default 512)")
    p.add_argument("--fresh-deals", type=int, default=100,
                   help="fresh deals to evaluate on (default 100: 2,800 positions)")
    p.add_argument("--out", type=Path, required=True, help="runs and results.json go here")
    p.add_argument("--only", nargs="*", default=None, help="a subset of the configurations")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    from eqfast.cli import train_oracle
    from eqfast.cli.eval_oracle import fresh_rows
    from eqfast.oracle.dataset import as_batch
    from eqfast.oracle.evaluate import fidelity, predict, rows_per_second
    from eqfast.oracle.network import NetworkOracle, OracleModule, count_parameters, script_module
    from eqfast.oracle.weights import load_network

    a.out.mkdir(parents=True, exist_ok=True)
    names = a.only or list(CONFIGS)
    fresh = fresh_rows(1_000_000_000, a.fresh_deals)
    batch = as_batch(fresh)
    results = {}
    for name in names:
        run = a.out / name
        t0 = time.perf_counter()
        code = train_oracle.main(["--data", a.data, "--run", str(run), "--max-shards",
                                  str(a.max_shards), "--steps", str(a.steps), "--batch",
                                  str(a.batch), "--eval-every", str(max(1, a.steps // 6)),
                                  "--ckpt-every", str(max(1, a.steps // 6)), "--val-rows",
                                  "20000", "--warmup", str(max(1, a.steps // 20)),
                                  "--threads", "1", *CONFIGS[name]])
        if code != 0:
            print(f"{name}: training failed (exit {code})", file=sys.stderr)
            continue
        network, meta = load_network(run / "best.safetensors")
        network.eval()
        eager = NetworkOracle(OracleModule(network).eval())
        scripted = NetworkOracle(script_module(network))
        m = fidelity(predict(scripted, batch), fresh["q"], fresh["legal"], fresh["depth"])
        results[name] = {
            "params": count_parameters(network), "macs_per_row": flops_per_row(network),
            "rows_seen": meta["train"]["rows_seen"], "best_step": meta["train"]["step"],
            "train_wall_s": round(time.perf_counter() - t0, 1),
            "val": {k: meta["metrics"][k] for k in ("q_gap", "q_mae")},
            "fresh": {k: m[k] for k in ("q_gap", "q_gap_multi", "q_mae", "accuracy")},
            "fresh_q_gap_by_trick": [t.get("q_gap") for t in m["per_trick"]],
            "rows_per_s_eager": rows_per_second(eager, batch, 1024),
            "rows_per_s_torchscript": rows_per_second(scripted, batch, 1024),
        }
        (a.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"{'model':<28}{'params':>9}{'MACs/row':>10}{'rows@best':>11}{'fresh q_gap':>12}"
          f"{'q_mae':>7}{'acc':>7}{'tricks 1-2 gap':>15}{'rows/s TS':>11}")
    for name, r in results.items():
        early = sum(r["fresh_q_gap_by_trick"][:2]) / 2
        print(f"{name:<28}{r['params']:>9,}{r['macs_per_row']:>10,.0f}{r['rows_seen']:>11,}"
              f"{r['fresh']['q_gap']:>12.3f}{r['fresh']['q_mae']:>7.2f}"
              f"{r['fresh']['accuracy']:>7.3f}{early:>15.3f}{r['rows_per_s_torchscript']:>11,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
