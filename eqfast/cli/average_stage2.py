"""eqfast-average-stage2: one Stage 2 model, the mean of several models' parameters.

    eqfast-average-stage2 --out runs/soup.safetensors R1/best.safetensors R2/best.safetensors
    eqfast-average-stage2 --out S.safetensors A.safetensors B.safetensors --weight 2 --weight 1
    eqfast-average-stage2 --out S.safetensors stage2 stage2_replay3    # shipped names work

Every file must have the same architecture (width, layers, heads, feed-forward, variance
head, seen tiles). Average models that began from the same weights (the rounds of
eqfast-iterate or of replay): those are the ones measured to gain (docs/STAGE2.md,
"Averaging the loop's models"). The output carries each source's path, SHA-256 and
weight in its training record; play it with `eqfast-arena --policies stage2:OUT,...`.
"""
from __future__ import annotations

import argparse
import sys

from .common import HelpFormatter, path_arg, quiet_on_closed_stdout


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="eqfast-average-stage2",
                                 description=__doc__.split("\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("sources", nargs="+", type=path_arg, metavar="WEIGHTS",
                    help="Stage 2 weights files (.safetensors), or names of files in "
                         "eqfast/models (stage2, stage2_replay3); at least two")
    ap.add_argument("--out", required=True, type=path_arg,
                    help="the averaged weights file to write (atomically; not a source)")
    ap.add_argument("--weight", type=float, action="append", default=None,
                    help="each source's weight, in order, once per source; equal weights "
                         "when left out")
    return ap


@quiet_on_closed_stdout
def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    from ..stage2.average import average_stage2, describe
    from ..stage2.weights import stage2_weights

    try:
        record = average_stage2([stage2_weights(s) for s in a.sources], a.out, a.weight)
    except ValueError as e:  # Stage2WeightsError included
        print(f"eqfast-average-stage2: {e}", file=sys.stderr)
        return 2
    for card in record["average"]:
        print(f"  {card['weight']:g} x {card['path']} (sha256 {card['sha256'][:8]}, "
              f"{describe(card)})")
    print(f"wrote {a.out}: the mean of {len(record['average'])} models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
