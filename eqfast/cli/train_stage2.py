"""eqfast-train-stage2: train the Stage 2 model (public transcript -> E[Q] per move) on eqfast-generate records.

    eqfast-train-stage2 --data runs/stage2data --run runs/stage2/base --steps 20000
    eqfast-train-stage2 --data D --run R --loss nll --time-budget 1800
    eqfast-train-stage2 --data D --run R --d-model 96 --layers 2 --forced-weight 0.2
    eqfast-train-stage2 --data D --run R2 --init eqfast/models/stage2.safetensors --lr 1e-3
    eqfast-train-stage2 --data D1 --data D2 --run R3     # the union of two runs' records
    eqfast-train-stage2 --data D --run R4 --init W --label-tricks 5-7   # W elsewhere
    eqfast-train-stage2 --data D --run R5 --arch belief --init eqfast/models/default.safetensors

Reads the train and val splits of an `eqfast-generate --out DIR` directory (or of
several, whose game seeds must not overlap). Re-running
the same command resumes from <run>/checkpoint.safetensors. See docs/STAGE2.md.
"""
from __future__ import annotations

import argparse
import os
import sys

from .common import HelpFormatter, device_problem, path_arg, records_dir_problem


def build_parser() -> argparse.ArgumentParser:
    from ..stage2.defaults import DEFAULT_CONFIG, FORCED_WEIGHT, LENGTH_GROUPS, PRECISIONS

    ap = argparse.ArgumentParser(prog="eqfast-train-stage2", description=__doc__.split("\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--data", required=True, type=path_arg, action="append",
                    help="an eqfast-generate output directory (its train/ and val/ splits); "
                         "given several times, the union of their records (their game seeds "
                         "must not overlap)")
    ap.add_argument("--run", required=True, type=path_arg,
                    help="run directory (checkpoint, best/last weights, history.jsonl)")
    ap.add_argument("--arch", choices=("transformer", "belief", "split"),
                    default="transformer",
                    help="transformer: attention over the transcript tokens (--d-model, "
                         "--layers, --heads, --d-ff, --seen-tiles); belief: the oracle's "
                         "embedding-sum network read on the actor's beliefs (who may hold "
                         "each hidden tile), best started from an oracle's weights with "
                         "--init eqfast/models/default.safetensors (--hidden, --depth); "
                         "split: two models, one before a trick and one from it (the "
                         "shipped stage2), trained on from the --init file, whose config "
                         "it takes (docs/STAGE2.md)")
    ap.add_argument("--hidden", type=int, default=None,
                    help="belief model: layer width (default: the --init file's, else 256)")
    ap.add_argument("--depth", type=int, default=None,
                    help="belief model: hidden layers after the embedding sum (default: the "
                         "--init file's, else 2)")
    ap.add_argument("--d-model", type=int, default=DEFAULT_CONFIG["d_model"], help="model width")
    ap.add_argument("--layers", type=int, default=DEFAULT_CONFIG["n_layers"],
                    help="encoder layers")
    ap.add_argument("--heads", type=int, default=DEFAULT_CONFIG["n_heads"],
                    help="attention heads (a divisor of --d-model)")
    ap.add_argument("--d-ff", type=int, default=DEFAULT_CONFIG["d_ff"],
                    help="feed-forward width")
    ap.add_argument("--seen-tiles", type=int, choices=(0, 1, 2, 3), default=0,
                    help="add to every token a linear read of a summary of the plays: 1 "
                         "which player has played which tile and the actor's hand (what is "
                         "still out); 2 also the voids each player has shown (a tile off the "
                         "led suit); 3 also the chance that each other player holds each "
                         "hidden tile, over the deals consistent with those (counted "
                         "exactly); 0 none (docs/STAGE2.md)")
    ap.add_argument("--no-var-head", action="store_true",
                    help="no log sigma^2 head (log_var is then zeros; not with --loss nll)")
    ap.add_argument("--loss", choices=("mse", "nll"), default="mse",
                    help="mse: legal-masked MSE of E[Q]/42; nll: the same plus the Gaussian "
                         "NLL of the label under sigma^2 + the label's sampling variance "
                         "e_q_var/ess, with mu held fixed in it (docs/STAGE2.md)")
    ap.add_argument("--forced-weight", type=float, default=FORCED_WEIGHT,
                    help="loss weight of a decision with one legal move (others weigh 1)")
    ap.add_argument("--centered-weight", type=float, default=0.0,
                    help="weight of the extra loss on the error centred over each decision's "
                         "legal moves (the differences between moves, which decide the argmax)")
    ap.add_argument("--mc-weight", type=float, default=0.0, metavar="LAMBDA",
                    help="target of the move actually played: (1 - LAMBDA) E[Q] + LAMBDA "
                         "realized_to_go, its Monte Carlo return in the recorded game (lower "
                         "bias, higher variance); the other moves keep E[Q]; 0 = E[Q] alone "
                         "(docs/STAGE2.md)")
    ap.add_argument("--policy-weight", type=float, default=0.0, metavar="RHO",
                    help="train an auxiliary policy head on the moves played (action_taken) "
                         "with RHO times its cross-entropy added to the loss; the head is "
                         "built only when RHO > 0, play reads mu alone; 0 = no head "
                         "(docs/STAGE2.md)")
    ap.add_argument("--ema", type=float, default=0.0, metavar="DECAY",
                    help="evaluate and save (best/last) the exponential moving average of "
                         "the weights over the steps, with this decay (0.999: about the "
                         "last 1,000 steps); training continues from the trained weights; "
                         "0 = off (docs/STAGE2.md)")
    ap.add_argument("--label-tricks", default=None, metavar="TRICKS",
                    help="train on the data's labels only at the decisions of these tricks "
                         "(1..7: '5,6', '4-7'); everywhere else the target is the --init "
                         "model's own values, so its play there stays as it was "
                         "(self-distillation; needs --init; docs/STAGE2.md)")
    ap.add_argument("--tricks", default=None, metavar="TRICKS",
                    help="train and validate on the decisions of these tricks only (1..7: "
                         "'5-7'): a model for part of the hand, which the split player "
                         "plays from the first of them (docs/STAGE2.md)")
    ap.add_argument("--min-worlds", type=int, default=1, metavar="N",
                    help="train and validate only on decisions whose label rests on at "
                         "least N worlds (n_worlds) or on every consistent one: joins runs "
                         "that labelled some tricks only (one world elsewhere, e.g. "
                         "--n-by-trick 1,1,1,1,1680,1680,1680) to data for more tricks")
    ap.add_argument("--steps", type=int, default=20000,
                    help="optimizer steps of the whole run (with --time-budget: at most)")
    ap.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                    help="train for this much wall time: the cosine decay runs over the spent "
                         "fraction of it and the run stops (evaluated, checkpointed) when it is "
                         "spent; such a run depends on the machine's speed; when left out, "
                         "the run lasts --steps")
    ap.add_argument("--init", default=None, metavar="WEIGHTS",
                    help="start a fresh run from these Stage 2 weights (a run's "
                         "best.safetensors, or eqfast/models/stage2.safetensors) with a new "
                         "optimizer and schedule; their architecture must be the one the flags "
                         "describe, except that --seen-tiles and --layers may be higher (the "
                         "added summary columns start at zero, the added layers as the "
                         "identity: the run starts from the file's outputs); when left out, a random initialization")
    ap.add_argument("--batch", type=int, default=256, help="records per step")
    ap.add_argument("--length-groups", type=int, default=LENGTH_GROUPS,
                    help="forwards per step, each on the batch's records of similar "
                         "transcript length cut to their longest: the same loss up to float "
                         "rounding at 0.55x the time of one forward over 36 tokens (1: one "
                         "forward cut to the batch's longest)"),
    ap.add_argument("--lr", type=float, default=1e-3,
                    help="peak learning rate (linear warm-up, then cosine decay)")
    ap.add_argument("--weight-decay", type=float, default=0.01, help="AdamW decoupled decay")
    ap.add_argument("--warmup", type=int, default=500, help="learning-rate warm-up steps")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the initialization and the batches")
    ap.add_argument("--val-rows", type=int, default=50000,
                    help="validation records evaluated (the first of the val split, in game "
                         "order)")
    ap.add_argument("--eval-every", type=int, default=1000,
                    help="steps between evaluations (each writes last/best.safetensors)")
    ap.add_argument("--ckpt-every", type=int, default=1000, help="steps between checkpoints")
    ap.add_argument("--stop-at", type=int, default=None,
                    help="stop after this step (checkpointed; re-run to resume); when left "
                         "out, run to --steps")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--precision", choices=PRECISIONS, default="fp32",
                    help="the forward's arithmetic: bf16 runs it under autocast (tensor "
                         "cores on a GPU; the loss and the optimizer stay fp32)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def check_args(a) -> str | None:
    """The first problem with the arguments or the data directory, or None (found before
    the run directory is created)."""
    for name in ("d_model", "layers", "heads", "d_ff", "steps", "batch", "eval_every",
                 "ckpt_every", "val_rows", "threads", "length_groups"):
        if getattr(a, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}"
    for name in ("hidden", "depth"):
        if getattr(a, name) is not None and getattr(a, name) < (1 if name == "hidden" else 0):
            return f"--{name} must be >= {1 if name == 'hidden' else 0}, got {getattr(a, name)}"
    if a.arch == "split" and a.init is None:
        return "--arch split trains on from a split model's file: give it as --init"
    if a.arch == "belief" and a.seen_tiles:
        return "--seen-tiles is the transformer's: the belief model reads the beliefs itself"
    if a.arch == "belief" and a.policy_weight > 0:
        return "--policy-weight needs the transformer's policy head (not with --arch belief)"
    if a.arch != "belief" and (a.hidden is not None or a.depth is not None):
        return "--hidden and --depth size the belief model: add --arch belief"
    if a.d_model % a.heads:
        return f"--d-model {a.d_model} must be a multiple of --heads {a.heads}"
    if a.warmup < 0:
        return f"--warmup must be >= 0, got {a.warmup}"
    if not a.lr > 0:
        return f"--lr must be > 0, got {a.lr}"
    if not 0 <= a.forced_weight <= 1:
        return f"--forced-weight must be in [0, 1], got {a.forced_weight}"
    if not a.centered_weight >= 0:
        return f"--centered-weight must be >= 0, got {a.centered_weight}"
    if not 0 <= a.mc_weight <= 1:
        return f"--mc-weight must be in [0, 1], got {a.mc_weight}"
    if not (a.policy_weight >= 0 and a.policy_weight < float("inf")):
        return f"--policy-weight must be >= 0, got {a.policy_weight}"
    if not 0 <= a.ema < 1:
        return f"--ema must be in [0, 1), got {a.ema}"
    if a.loss == "nll" and a.no_var_head:
        return "--loss nll needs the variance head: drop --no-var-head"
    if a.time_budget is not None and not a.time_budget > 0:
        return f"--time-budget must be > 0 seconds, got {a.time_budget}"
    if a.init is not None and not os.path.isfile(a.init):
        return f"--init {a.init}: no such file"
    if a.label_tricks is not None:
        if a.init is None:
            return ("--label-tricks needs --init: the other tricks keep the --init model's "
                    "own values")
        from ..stage2.defaults import parse_tricks
        try:
            parse_tricks(a.label_tricks)
        except ValueError as e:
            return f"--label-tricks: {e}"
    if a.tricks is not None:
        from ..stage2.defaults import parse_tricks
        try:
            parse_tricks(a.tricks)
        except ValueError as e:
            return f"--tricks: {e}"
    if a.min_worlds < 1:
        return f"--min-worlds must be >= 1, got {a.min_worlds}"
    if a.stop_at is not None and a.stop_at < 0:
        return f"--stop-at must be >= 0, got {a.stop_at}"
    problem = device_problem(a.device)
    if problem is not None:
        return problem
    if len(set(a.data)) < len(a.data):
        return "--data names the same directory twice"
    for data in a.data:
        problem = records_dir_problem(data, ("train", "val"))
        if problem is not None:
            return problem
    return None


def belief_arch(a) -> dict:
    """The belief model's config: --hidden and --depth, where left out those of the --init
    file (an oracle's weights, or a belief model's), else the defaults; ValueError for an
    --init file of another kind."""
    from ..stage2.belief import BELIEF_DEFAULT, check_belief_config, oracle_config
    from ..stage2.weights import Stage2WeightsError, is_oracle_file, read_stage2

    base = dict(BELIEF_DEFAULT)
    if a.init is not None:
        if is_oracle_file(a.init):
            from ..oracle.weights import OracleWeightsError, read_weights
            try:
                base = oracle_config(read_weights(a.init)[1]["config"])
            except OracleWeightsError as e:
                raise ValueError(str(e)) from None
        else:
            try:
                base = dict(read_stage2(a.init)[1]["config"])
            except Stage2WeightsError as e:
                raise ValueError(str(e)) from None
            if base.get("arch") != "belief":
                raise ValueError(f"--init {a.init}: a transformer's weights; --arch belief "
                                 "starts from an oracle's weights or a belief model's")
    if a.hidden is not None:
        base["hidden"] = a.hidden
    if a.depth is not None:
        base["depth"] = a.depth
    base["var_head"] = 0 if a.no_var_head else 1
    return check_belief_config(base)


def split_arch(a) -> dict:
    """The split model's config: the --init file's; ValueError for another file."""
    from ..stage2.weights import Stage2WeightsError, read_stage2

    try:
        config = read_stage2(a.init)[1]["config"]
    except Stage2WeightsError as e:
        raise ValueError(str(e)) from None
    if config.get("arch") != "split":
        raise ValueError(f"--init {a.init}: not a split model's weights (--arch split trains "
                         "on from one; join two files with eqfast.stage2.split.join_split)")
    return config


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    problem = check_args(a)
    if problem is not None:
        print(f"eqfast-train-stage2: {problem}", file=sys.stderr)
        return 2
    # torch only now: --help and argument errors answer without it
    import torch

    from ..data.shards import ShardError
    from ..stage2.defaults import parse_tricks
    from ..stage2.train import TrainConfig, train

    torch.set_num_threads(a.threads)
    if a.arch in ("belief", "split"):
        try:
            arch = belief_arch(a) if a.arch == "belief" else split_arch(a)
        except ValueError as e:
            print(f"eqfast-train-stage2: {e}", file=sys.stderr)
            return 2
    else:
        arch = {"d_model": a.d_model, "n_layers": a.layers, "n_heads": a.heads, "d_ff": a.d_ff,
                "var_head": 0 if a.no_var_head else 1, "seen_tiles": a.seen_tiles,
                **({"policy_head": 1} if a.policy_weight > 0 else {})}
    cfg = TrainConfig(data=a.data, run=a.run, arch=arch, loss=a.loss,
                      forced_weight=a.forced_weight, centered_weight=a.centered_weight,
                      steps=a.steps, batch=a.batch, lr=a.lr, weight_decay=a.weight_decay,
                      warmup=a.warmup, seed=a.seed, val_rows=a.val_rows,
                      eval_every=a.eval_every, ckpt_every=a.ckpt_every, device=a.device,
                      stop_at=a.stop_at, time_budget=a.time_budget, init=a.init,
                      length_groups=a.length_groups, mc_weight=a.mc_weight,
                      policy_weight=a.policy_weight, precision=a.precision, ema=a.ema,
                      label_tricks=(None if a.label_tricks is None
                                    else list(parse_tricks(a.label_tricks))),
                      tricks=None if a.tricks is None else list(parse_tricks(a.tricks)),
                      min_worlds=a.min_worlds)
    try:
        m = train(cfg, log=print, progress=not a.quiet)
    except (ValueError, ShardError) as e:        # a resume with other settings, an empty
        # split, --init weights of another architecture or unreadable (Stage2WeightsError)
        print(f"eqfast-train-stage2: {e}", file=sys.stderr)
        return 2
    if m:
        print(f"final val: MSE {m['mse']:.3f} MAE {m['mae']:.3f} agreement "
              f"{m['agreement']:.4f} regret {m['regret']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
