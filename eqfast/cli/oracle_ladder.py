"""eqfast-oracle-ladder: the confidence ladder of an oracle network and its success table.

    eqfast-oracle-ladder                                  # the shipped default, every step
    eqfast-oracle-ladder --weights accurate --steps 3,4   # spot check and PIMC agreement only
    eqfast-oracle-ladder --weights runs/x/best.safetensors --json

Steps 1 and 2 train fresh networks of the weights file's architecture on solver labels
(one deal; many deals with whole deals held out); steps 3 and 4 measure the trained file
itself (values on fresh deals against the solver; E[Q] move agreement with the solver on
the same worlds). The success table follows. eqfast/analysis/ladder.py says what each
step measures and which deals it uses; docs/ORACLE.md has the shipped models' figures.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from .common import HelpFormatter, quiet_on_closed_stdout


def build_parser() -> argparse.ArgumentParser:
    from dataclasses import fields

    from ..analysis.ladder_config import LadderConfig

    # the field defaults, read without building a config (its arch comes from torch code)
    d = argparse.Namespace(**{f.name: f.default for f in fields(LadderConfig)
                              if f.name != "arch"})
    ap = argparse.ArgumentParser(prog="eqfast-oracle-ladder", description=__doc__.split("\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--weights", default="default",
                    help="'default', 'accurate' or a weights file (.safetensors): the model "
                         "of steps 3-4 and the success table, whose architecture steps 1-2 train")
    ap.add_argument("--steps", default="1,2,3,4", help="ladder steps to run (comma-separated)")
    ap.add_argument("--train-steps", type=int, default=d.train_steps,
                    help="optimizer steps of each step-1/2 training run")
    ap.add_argument("--batch", type=int, default=d.batch, help="rows per training step")
    ap.add_argument("--one-deal-games", type=int, default=d.one_deal_games,
                    help="step 1: games played from the one deal")
    ap.add_argument("--deals", type=int, default=d.deals, help="step 2: deals")
    ap.add_argument("--games-per-deal", type=int, default=d.games_per_deal,
                    help="step 2: games per deal")
    ap.add_argument("--test-deals", type=int, default=d.test_deals,
                    help="step 2: deals held out whole")
    ap.add_argument("--spot-deals", type=int, default=d.spot_deals,
                    help="step 3: fresh deals (one game each, 28 positions)")
    ap.add_argument("--spot-show", type=int, default=d.spot_show, help="step 3: rows printed")
    ap.add_argument("--pimc-games", type=int, default=d.pimc_games, help="step 4: fresh games")
    ap.add_argument("--pimc-worlds", type=int, default=d.pimc_worlds,
                    help="step 4: worlds per decision")
    ap.add_argument("--seed", type=int, default=d.seed, help="splits, training and world draws")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--json", action="store_true", help="end with one JSON object")
    return ap


def check_args(a) -> str | None:
    for name in ("train_steps", "batch", "one_deal_games", "deals", "games_per_deal",
                 "spot_deals", "pimc_games", "pimc_worlds", "threads"):
        if getattr(a, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}"
    if not 1 <= a.test_deals < a.deals:
        return f"--test-deals must be 1..{a.deals - 1} (below --deals), got {a.test_deals}"
    try:
        steps = {int(s) for s in a.steps.split(",") if s}
    except ValueError:
        return f"--steps must be numbers 1..4 separated by commas, got {a.steps!r}"
    if not steps or not steps <= {1, 2, 3, 4}:
        return f"--steps must be numbers 1..4 separated by commas, got {a.steps!r}"
    return None


@quiet_on_closed_stdout
def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    problem = check_args(a)
    if problem is not None:
        print(f"eqfast-oracle-ladder: {problem}", file=sys.stderr)
        return 2
    # torch only now: --help and argument errors answer without it
    import torch

    from ..analysis import ladder
    from ..oracle.factory import weights_path
    from ..oracle.weights import OracleWeightsError, read_weights

    weights = weights_path(a.weights)
    if problem is None:
        try:
            _, meta = read_weights(weights)
        except OracleWeightsError as e:
            problem = f"--weights: {e}"
    if problem is not None:
        print(f"eqfast-oracle-ladder: {problem}", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    steps = {int(s) for s in a.steps.split(",") if s}
    cfg = ladder.LadderConfig(arch=dict(meta["config"]), train_steps=a.train_steps,
                              batch=a.batch, one_deal_games=a.one_deal_games, deals=a.deals,
                              games_per_deal=a.games_per_deal, test_deals=a.test_deals,
                              spot_deals=a.spot_deals, spot_show=a.spot_show,
                              pimc_games=a.pimc_games, pimc_worlds=a.pimc_worlds, seed=a.seed)
    out: dict = {"weights": str(weights), "arch": cfg.arch}
    t0 = time.perf_counter()
    if 1 in steps:
        out["one_deal"] = ladder.one_deal(cfg)
    if 2 in steps:
        out["across_deals"] = ladder.across_deals(cfg)
    if 3 in steps:
        out["spot_check"] = ladder.spot_check(weights, cfg)
    if 4 in steps:
        out["pimc"] = ladder.pimc_agreement(weights, cfg)
    table = ladder.success_table(weights, out.get("spot_check"), out.get("pimc"))
    out["success"] = table
    print(f"\nsuccess table of {weights}:")
    print(f"{'metric':52} {'target':>8} {'measured':>10}  met")
    for row in table:
        v = row["measured"]
        shown = "-" if v is None else f"{100 * v:.1f}%" if "agreement" in row["metric"] else f"{v:.4g}"
        met = "-" if row["met"] is None else "yes" if row["met"] else "NO"
        print(f"{row['metric']:52} {row['target']:>8} {shown:>10}  {met}")
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"({out['seconds']} s)")
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
