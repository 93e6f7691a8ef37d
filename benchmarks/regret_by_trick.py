"""Regret of Stage 2 models against a data set's E[Q] labels, trick by trick.

    python benchmarks/regret_by_trick.py DATA[,DATA...] SPLIT WEIGHTS [WEIGHTS ...]

One line a model: the regret (points of E[Q] lost by the model's argmax, `eqfast-eval-stage2`'s
metric) over the split and at each of tricks 1 to 6 (trick 7's decisions are forced).
Read only the tricks the data labels well: a run made with `--n-by-trick 1,1,200,...`
has one-world labels at tricks 1 and 2. Several directories, comma-separated: the union of
their splits (`stage2.data.load_split`).
"""
from __future__ import annotations

import sys

import torch

from eqfast.stage2.data import in_tricks, load_split, prepare_rows
from eqfast.stage2.evaluate import metrics, predict
from eqfast.stage2.weights import load_stage2


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    data, split, paths = argv[0], argv[1], argv[2:]
    torch.set_num_threads(1)
    records, _ = load_split(data.split(","), split)
    rows = prepare_rows(records)
    for path in paths:
        with torch.no_grad():
            mu, _ = predict(load_stage2(path), rows["tokens"], rows["lengths"])
        by_trick = []
        for t in range(1, 7):
            k = in_tricks(records["decision_idx"], (t,))
            by_trick.append(metrics(mu[k], None, {"q": rows["q"][k], "legal": rows["legal"][k],
                                                  "s2": None})["regret"])
        whole = metrics(mu, None, {"q": rows["q"], "legal": rows["legal"], "s2": None})
        print(f"{path}: all {whole['regret']:.3f} mse {whole['mse']:.2f} | by trick "
              + " ".join(f"{r:.3f}" for r in by_trick), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
