"""eqfast-train-oracle: train the Stage 1 oracle network on solver-labelled shards.

    eqfast-train-oracle --data runs/oracle/data --run runs/oracle/mlp256 --steps 60000
    eqfast-train-oracle --data D --run R --arch transformer --d-model 64 --layers 2
    torchrun --nproc-per-node 4 -m eqfast.cli.train_oracle --data D --run-dir R --precision bf16

Re-running the same command resumes from <run>/checkpoint.safetensors. Labelling is not
done here: the shards come from `eqfast-label-oracle --out D`, which runs the
exact solver (see docs/ORACLE.md).
"""
from __future__ import annotations

import argparse
import os
import sys

from .common import HelpFormatter, device_problem, path_arg


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="eqfast-train-oracle", description=__doc__.split("\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--data", required=True, type=path_arg,
                    help="directory of solver-labelled shard_*.safetensors written by "
                         "`eqfast-label-oracle --out DIR` (several: comma-separated)")
    ap.add_argument("--run", "--run-dir", dest="run", required=True, type=path_arg,
                    help="run directory (checkpoints, weights, history); under torchrun spell "
                         "it --run-dir (torchrun reads --run as its own --run-path)")
    ap.add_argument("--arch", choices=("mlp", "transformer"), default="mlp",
                    help="network architecture")
    ap.add_argument("--hidden", type=int, default=256, help="mlp width")
    ap.add_argument("--depth", type=int, default=2, help="mlp hidden layers after the embedding sum")
    ap.add_argument("--roles", type=int, default=1, choices=(0, 1, 2),
                    help="extra tile embeddings (mlp and transformer): 0 none, 1 tile roles, 2 roles + "
                         "live higher tiles of the suit")
    ap.add_argument("--d-model", type=int, default=64, help="transformer width")
    ap.add_argument("--layers", type=int, default=2, help="transformer layers")
    ap.add_argument("--heads", type=int, default=4, help="transformer heads")
    ap.add_argument("--d-ff", type=int, default=128, help="transformer feed-forward width")
    ap.add_argument("--value-head", action="store_true",
                    help="transformer: add a value head V(state), trained with --value-weight")
    ap.add_argument("--value-weight", type=float, default=0.0,
                    help="weight of the auxiliary loss on V = the best legal Q (needs "
                         "--value-head)")
    ap.add_argument("--steps", type=int, default=20000,
                    help="optimizer steps of the whole run (with --time-budget: at most)")
    ap.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                    help="train for this much wall time: the cosine decay runs over the spent "
                         "fraction of it and the run stops (evaluated, checkpointed) when it is "
                         "spent; such a run depends on the machine's speed (one process only); "
                         "when left out, the run lasts --steps")
    ap.add_argument("--init", default=None, metavar="WEIGHTS",
                    help="start a fresh run from this weights file (.safetensors from a run "
                         "directory, or eqfast/models/*.safetensors); its architecture must be "
                         "the one the flags describe; when left out, a random initialization")
    ap.add_argument("--batch", type=int, default=1024, help="rows per step")
    ap.add_argument("--lr", type=float, default=2e-3,
                    help="peak learning rate (linear warm-up, then cosine decay)")
    ap.add_argument("--weight-decay", type=float, default=0.1, help="AdamW decoupled decay")
    ap.add_argument("--warmup", type=int, default=500, help="learning-rate warm-up steps")
    ap.add_argument("--seed", type=int, default=0, help="seed of the initialization and the batches")
    ap.add_argument("--val-rows", type=int, default=50000,
                    help="validation rows evaluated (from the val split)")
    ap.add_argument("--eval-every", type=int, default=1000,
                    help="steps between evaluations (each writes last/best.safetensors)")
    ap.add_argument("--ckpt-every", type=int, default=1000, help="steps between checkpoints")
    ap.add_argument("--follow", action="store_true",
                    help="pick up shards a running generator adds (every --reload-every steps)")
    ap.add_argument("--reload-every", type=int, default=2000,
                    help="with --follow: steps between looks for new shards")
    ap.add_argument("--max-shards", type=int, default=None,
                    help="read at most this many shards per directory (all when left out)")
    ap.add_argument("--device", default=None,
                    help="cpu, cuda or cuda:N; when left out, cuda where one is available, "
                         "else cpu")
    ap.add_argument("--centered-weight", type=float, default=0.0,
                    help="weight of the extra loss on Q centred over each row's legal moves")
    ap.add_argument("--stop-at", type=int, default=None,
                    help="stop after this step (checkpointed; re-run to resume); when left "
                         "out, run to --steps")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (per rank)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="arithmetic of the training forward: fp32, or bf16 autocast (weights "
                         "and optimizer stay fp32; for GPUs)")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the network (worth it for long GPU runs; the first "
                         "steps pay the compilation)")
    return ap


def check_args(a) -> str | None:
    """The first problem with the arguments or the data, found before the run directory
    is created, or None."""
    from ..oracle.dataset import check_shard_dir

    for name in ("steps", "batch", "eval_every", "ckpt_every", "reload_every", "threads"):
        if getattr(a, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}"
    if not a.lr > 0:
        return f"--lr must be > 0, got {a.lr}"
    if a.time_budget is not None and not a.time_budget > 0:
        return f"--time-budget must be > 0 seconds, got {a.time_budget}"
    if a.init is not None and not os.path.isfile(a.init):
        return f"--init {a.init}: no such file"
    problem = device_problem(a.device)
    if problem is not None:
        return problem
    for directory in [d for d in a.data.split(",") if d] or [a.data]:
        try:
            check_shard_dir(directory)
        except ValueError as e:
            return f"--data {e}"
    return None


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    import torch

    from ..oracle.train import TrainConfig, train
    if a.device is None:
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    problem = check_args(a)
    if problem is not None:
        print(f"eqfast-train-oracle: {problem}", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    arch = ({"arch": "mlp", "hidden": a.hidden, "depth": a.depth, "roles": a.roles} if a.arch == "mlp" else
            {"arch": "transformer", "d_model": a.d_model, "n_layers": a.layers,
             "n_heads": a.heads, "d_ff": a.d_ff, "roles": a.roles,
             "value_head": int(a.value_head)})
    cfg = TrainConfig(data=a.data, run=a.run, arch=arch, steps=a.steps, batch=a.batch, lr=a.lr,
                      weight_decay=a.weight_decay, warmup=a.warmup, seed=a.seed,
                      val_rows=a.val_rows, eval_every=a.eval_every, ckpt_every=a.ckpt_every,
                      follow=a.follow, reload_every=a.reload_every, max_shards=a.max_shards,
                      device=a.device, stop_at=a.stop_at,
                      centered_weight=a.centered_weight, precision=a.precision,
                      compile=a.compile, value_weight=a.value_weight,
                      time_budget=a.time_budget, init=a.init)
    try:
        m = train(cfg, log=print)
    except ValueError as e:               # e.g. a batch the ranks cannot share
        print(f"eqfast-train-oracle: {e}", file=sys.stderr)
        return 2
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"final val: q_gap {m.get('q_gap', float('nan')):.4f} "
              f"q_mae {m.get('q_mae', float('nan')):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
