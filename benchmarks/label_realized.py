"""Rank two label sets of the same played games by their error against the realized return.

Generate the same games twice with different label settings (same --seed-start, same
--play-policy and exploration: the moves do not depend on the labels), then

    python benchmarks/label_realized.py DIR_A DIR_B [--split all] [--json]

prints each set's mean squared error of the taken move's label against `realized_to_go`
and the paired difference A - B with its 95% interval over games: negative means A's labels
are closer to the true values of the moves under the play that followed
(eqfast/analysis/realized.py says why the difference, not either error, is the measure).
Games present in one directory only (one still being generated) are left out and counted.
"""
from __future__ import annotations

import argparse
import json
import sys

from eqfast.analysis.realized import LabelPairError, realized_error
from eqfast.data.shards import ShardError, load_records


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", metavar="DIR_A", help="records of label setting A")
    ap.add_argument("b", metavar="DIR_B", help="records of label setting B, same games")
    ap.add_argument("--split", default="all", help="train, val, test or all (default)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    try:
        a, _ = load_records(args.a, args.split)
        b, _ = load_records(args.b, args.split)
        r = realized_error(a, b)
    except (ShardError, LabelPairError) as e:
        print(f"label_realized: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"a": args.a, "b": args.b, **r}))
        return 0
    print(f"{r['games']} shared games ({r['games_only_a']} only in A, {r['games_only_b']} only "
          f"in B), {r['decisions']} decisions with a choice")
    print(f"A {args.a}: squared error {r['mse_a']:.2f} points^2, mean error {r['bias_a']:+.3f}")
    print(f"B {args.b}: squared error {r['mse_b']:.2f} points^2, mean error {r['bias_b']:+.3f}")
    print(f"A - B: {r['diff']:+.2f} +- {r['diff_half_width']:.2f} points^2 (95% over games; "
          "negative: A is closer to the moves' values)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
