"""eqfast-eval-stage2: how close a Stage 2 model's μ comes to the records' E[Q], and its speed.

    eqfast-eval-stage2 --data runs/stage2data                     # shipped model, test split
    eqfast-eval-stage2 --weights runs/stage2/base/best.safetensors --data D --split val
    eqfast-eval-stage2 --data D --json                            # last line: one JSON object

Reports, over the legal moves of the split's records, μ's MSE and MAE in points; over the
decisions with >= 2 legal moves, argmax agreement with the label's best E[Q] and the mean
regret in label terms (and that of a uniformly random legal move, for reference); the
calibration of σ (models with a variance head); and decisions/s of the forward, eager and
TorchScript. The figures are defined in eqfast/stage2/evaluate.py.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from .common import (HelpFormatter, device_problem, quiet_on_closed_stdout,
                     records_dir_problem)


def build_parser() -> argparse.ArgumentParser:
    from ..paths import DEFAULT_STAGE2

    ap = argparse.ArgumentParser(prog="eqfast-eval-stage2", description=__doc__.split("\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--weights", default=str(DEFAULT_STAGE2),
                    help="Stage 2 weights (.safetensors) to evaluate")
    ap.add_argument("--data", required=True,
                    help="an eqfast-generate output directory (train/ val/ test/)")
    ap.add_argument("--split", default="test", choices=("train", "val", "test"),
                    help="the split evaluated")
    ap.add_argument("--max-records", type=int, default=None,
                    help="evaluate only the first this many records (game order); all when "
                         "left out")
    ap.add_argument("--speed-batch", type=int, default=1024,
                    help="batch size for decisions/s")
    ap.add_argument("--no-speed", action="store_true", help="skip the decisions/s measurement")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--json", action="store_true", help="end with one JSON object")
    return ap


def check_args(a) -> str | None:
    """The first problem with the arguments, or None."""
    for name in ("speed_batch", "threads", "max_records"):
        value = getattr(a, name)
        if value is not None and value < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {value}"
    problem = device_problem(a.device)
    if problem is not None:
        return problem
    return records_dir_problem(a.data, (a.split,))


@quiet_on_closed_stdout
def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    import torch

    from ..data.shards import ShardError
    from ..stage2.data import load_split, prepare_rows
    from ..stage2.evaluate import (PLACES, decisions_per_second, format_by, format_report,
                                   metrics, metrics_by, predict)
    from ..stage2.model import script_model
    from ..stage2.weights import Stage2WeightsError, load_stage2_with_meta, stage2_weights

    problem = check_args(a)
    if problem is None:
        torch.set_num_threads(a.threads)
        try:
            model, meta = load_stage2_with_meta(stage2_weights(a.weights))
        except Stage2WeightsError as e:
            problem = f"--weights: {e}"
    t0 = time.perf_counter()
    if problem is None:
        try:
            records, _ = load_split(a.data, a.split)
        except ShardError as e:
            problem = f"--data {e}"
    if problem is not None:
        print(f"eqfast-eval-stage2: {problem}", file=sys.stderr)
        return 2

    if a.max_records:
        records = records.select(slice(0, a.max_records))
    rows = prepare_rows(records)
    source = f"{a.data} split {a.split}"
    print(f"{len(records)} records from {source} ({time.perf_counter() - t0:.1f}s)")
    model = model.to(a.device)
    mu, log_var = predict(model, rows["tokens"], rows["lengths"], a.device)
    m = metrics(mu, log_var if model.var_head else None, rows)
    decision = records["decision_idx"].long()
    m["by_trick"] = metrics_by(mu, rows, decision // 4, 7)
    m["by_place"] = metrics_by(mu, rows, decision % 4, 4)
    print(f"weights {a.weights}: {meta['config']}")
    print(format_report(m))
    print("where the regret is (decisions with >= 2 legal moves; share: of all the regret):")
    print(format_by(m["by_trick"], "trick"))
    print(format_by(m["by_place"], "place", PLACES))
    if not a.no_speed:
        m["decisions_per_s_eager"] = decisions_per_second(model, rows["tokens"], rows["lengths"],
                                                          a.speed_batch, a.device)
        scripted = script_model(model)
        m["decisions_per_s_torchscript"] = decisions_per_second(
            scripted, rows["tokens"], rows["lengths"], a.speed_batch, a.device)
        print(f"decisions/s at batch {min(a.speed_batch, len(records))}, {a.threads} thread(s) "
              f"on {a.device}: eager {m['decisions_per_s_eager']:.0f}, TorchScript "
              f"{m['decisions_per_s_torchscript']:.0f}")
    if a.json:
        m.update(weights=str(a.weights), source=source, split=a.split,
                 speed_batch=min(a.speed_batch, len(records)), threads=a.threads,
                 device=a.device)
        print(json.dumps(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
