"""eqfast-train-oracle: train the Stage 1 oracle network on solver-labelled shards.

    eqfast-train-oracle --data runs/oracle/data --run runs/oracle/mlp256 --steps 60000
    eqfast-train-oracle --data D --run R --arch transformer --d-model 64 --layers 2

Re-running the same command resumes from <run>/checkpoint.safetensors. Shards come from
`python -m eqfast.oracle.dataset --out D` (see docs/ORACLE.md).
"""
from __future__ import annotations

import argparse
import sys

import torch


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="eqfast-train-oracle", description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True,
                    help="directory of shard_*.safetensors (several: comma-separated)")
    ap.add_argument("--run", required=True, help="run directory (checkpoints, weights, history)")
    ap.add_argument("--arch", choices=("mlp", "transformer"), default="mlp")
    ap.add_argument("--hidden", type=int, default=256, help="mlp width")
    ap.add_argument("--depth", type=int, default=2, help="mlp hidden layers after the embedding sum")
    ap.add_argument("--roles", type=int, default=1, choices=(0, 1, 2),
                    help="mlp extra embeddings: 0 none, 1 tile roles, 2 roles + live higher tiles")
    ap.add_argument("--d-model", type=int, default=64, help="transformer width")
    ap.add_argument("--layers", type=int, default=2, help="transformer layers")
    ap.add_argument("--heads", type=int, default=4, help="transformer heads")
    ap.add_argument("--d-ff", type=int, default=128, help="transformer feed-forward width")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1, help="AdamW decoupled decay")
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--val-rows", type=int, default=50000)
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--ckpt-every", type=int, default=1000)
    ap.add_argument("--follow", action="store_true",
                    help="pick up shards a running generator adds (every --reload-every steps)")
    ap.add_argument("--reload-every", type=int, default=2000)
    ap.add_argument("--max-shards", type=int, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--centered-weight", type=float, default=0.0,
                    help="weight of the extra loss on Q centred over each row's legal moves")
    ap.add_argument("--stop-at", type=int, default=None,
                    help="stop after this step (checkpointed); re-run to resume")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    from ..oracle.train import TrainConfig, train

    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    arch = ({"arch": "mlp", "hidden": a.hidden, "depth": a.depth, "roles": a.roles} if a.arch == "mlp" else
            {"arch": "transformer", "d_model": a.d_model, "n_layers": a.layers,
             "n_heads": a.heads, "d_ff": a.d_ff})
    cfg = TrainConfig(data=a.data, run=a.run, arch=arch, steps=a.steps, batch=a.batch, lr=a.lr,
                      weight_decay=a.weight_decay, warmup=a.warmup, seed=a.seed,
                      val_rows=a.val_rows, eval_every=a.eval_every, ckpt_every=a.ckpt_every,
                      follow=a.follow, reload_every=a.reload_every, max_shards=a.max_shards,
                      device=a.device, stop_at=a.stop_at,
                      centered_weight=a.centered_weight)
    m = train(cfg, log=print)
    print(f"final val: q_gap {m.get('q_gap', float('nan')):.4f} q_mae {m.get('q_mae', float('nan')):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
