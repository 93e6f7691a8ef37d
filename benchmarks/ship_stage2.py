"""Write a shipped Stage 2 file: a split of an early model (by default the transformer
`stage2_soup`) before a trick and a late model from it on (or, with --trick 1, the late
model alone for the whole hand), with test figures and a data card in the metadata
(docs/STAGE2.md, "The shipped model").

    python benchmarks/ship_stage2.py --early runs/ro/ta/best.safetensors \\
        --late runs/bel/avg-t4-late3.safetensors --trick 4 \\
        --out eqfast/models/stage2.safetensors --source runs/bel/t4/best.safetensors \\
        --source runs/bel/late3/best.safetensors --source runs/ro/ta/best.safetensors

`metrics.test` is `eqfast-eval-stage2 --split test` on --test-data (the CPU default's
labels of whole games), `metrics.test_late` the same on --late-data (enumerated late
values; its by-trick rows from trick 5 are the ones that mean anything); `train.data_card`
is the last --source's card, `train.late_sources` every source's training record (the
late model may be a mean of several, whose own record names only its sources) and
`train.early_train` the early model's.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from eqfast.paths import MODELS
from eqfast.stage2.split import join_split
from eqfast.stage2.weights import copy_with_metadata, read_stage2


def evaluate(weights: Path, data: str) -> dict:
    """eqfast-eval-stage2's JSON figures of `weights` on the test split of `data`."""
    out = subprocess.run([sys.executable, "-m", "eqfast.cli.eval_stage2", "--weights",
                          str(weights), "--data", data, "--split", "test", "--json",
                          "--no-speed"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--late", required=True, help="the model from --trick on")
    ap.add_argument("--trick", type=int, required=True,
                    help="the late model's first trick (1: it plays the whole hand, no split)")
    ap.add_argument("--out", required=True, help="the file to write (atomically)")
    ap.add_argument("--early", default=str(MODELS / "stage2_soup.safetensors"),
                    help="the model before --trick (default: the transformer stage2_soup)")
    ap.add_argument("--source", action="append", required=True,
                    help="a weights file the late model came from (repeat; the last one's "
                         "data card becomes train.data_card)")
    ap.add_argument("--test-data", default="runs/bel/g1")
    ap.add_argument("--late-data", default="runs/late/exact1")
    a = ap.parse_args(argv)
    joined = Path(a.out).with_suffix(".joined.tmp")
    try:
        if a.trick == 1:
            shutil.copyfile(a.late, joined)
        else:
            join_split(a.early, a.late, a.trick, joined)
        metrics = {"test": evaluate(joined, a.test_data),
                   "test_late": evaluate(joined, a.late_data)}
        sources = {s: read_stage2(s)[1]["train"] for s in a.source}
        train = {"data_card": sources[a.source[-1]]["data_card"],
                 "data_card_note": "the last source's data; every source's record is in "
                                   "train.late_sources, the early model's in train.early_train",
                 "late_train": read_stage2(a.late)[1]["train"], "late_sources": sources,
                 "early_train": None if a.trick == 1 else read_stage2(a.early)[1]["train"],
                 "command": " ".join(["python", "benchmarks/ship_stage2.py", *sys.argv[1:]])}
        copy_with_metadata(joined, a.out, metrics=metrics, train=train)
    finally:
        joined.unlink(missing_ok=True)
    print(json.dumps({k: {f: v[f] for f in ("records", "regret", "mse")}
                      for k, v in metrics.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
