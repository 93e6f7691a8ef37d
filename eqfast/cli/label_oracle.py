"""eqfast-label-oracle: write solver-labelled oracle training shards.

    eqfast-label-oracle --out runs/oracle/data --deals-per-shard 500          # full hands
    eqfast-label-oracle --out runs/oracle/mix --deal-offset 10000000 --short  # mid-hand starts

Each deal's game is played to the end and every position is labelled with the exact
solver's Q of every legal move (docs/ORACLE.md, "Data"). Shard k holds deals
deal-offset + [k*S, (k+1)*S) for S = --deals-per-shard; shards already present are skipped,
so re-running the command resumes, and several processes with disjoint --deal-offset (or
--first-shard ranges) label in parallel. `eqfast-train-oracle --follow` can train while
shards arrive. One line per shard reports rows, rows/s and the totals of the data card.
"""
from __future__ import annotations

import argparse
import sys

from .common import HelpFormatter, path_arg


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="eqfast-label-oracle", description=__doc__.split("\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--out", required=True, type=path_arg, help="shard directory (created; resumed if it exists)")
    ap.add_argument("--shards", type=int, default=1000, help="shards to write (from --first-shard)")
    ap.add_argument("--first-shard", type=int, default=0, help="index of the first shard")
    ap.add_argument("--deals-per-shard", type=int, default=200,
                    help="deals per shard (fixed per directory)")
    ap.add_argument("--games-per-deal", type=int, default=1,
                    help="games played from each deal (positions seen twice are kept once)")
    ap.add_argument("--deal-offset", type=int, default=0,
                    help="first deal number of shard 0 (fixed per directory); fresh-deal "
                         "evaluations use deals from 1,000,000,000")
    ap.add_argument("--short", action="store_true",
                    help="two deals in three start mid-hand (2-6 tiles a seat): more, cheaper "
                         "late positions")
    return ap


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    for name in ("shards", "deals_per_shard", "games_per_deal"):
        if getattr(a, name) < 1:
            print(f"eqfast-label-oracle: --{name.replace('_', '-')} must be >= 1, got "
                  f"{getattr(a, name)}", file=sys.stderr)
            return 2
    for name in ("first_shard", "deal_offset"):
        if getattr(a, name) < 0:
            print(f"eqfast-label-oracle: --{name.replace('_', '-')} must be >= 0, got "
                  f"{getattr(a, name)}", file=sys.stderr)
            return 2
    try:
        import eqfast.solver._csolver  # noqa: F401
    except ImportError:
        print("eqfast-label-oracle: the C solver extension is not built (pip install -e . "
              "with a C compiler): labelling needs it", file=sys.stderr)
        return 2
    from ..oracle.labelling import generate
    try:
        generate(a.out, a.shards, a.deals_per_shard, a.first_shard, a.games_per_deal,
                 a.deal_offset, a.short)
    except ValueError as e:            # a directory labelled with another layout
        print(f"eqfast-label-oracle: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("eqfast-label-oracle: interrupted; every shard reported is saved (rerun to "
              "resume)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
