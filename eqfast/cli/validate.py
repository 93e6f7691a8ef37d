"""eqfast-validate: check generated E[Q] records against fresh computations.

    eqfast-validate PATH --recompute [K]   re-run K sampled records with fresh worlds (another
                                           run seed) and report the disagreement in standard
                                           errors (z scores)
    eqfast-validate PATH --outcomes        correlate E[Q] of the move taken with the realized
                                           value to go, per decision index
    eqfast-validate PATH --exact [K]       label error of K records against exact E[Q]
                                           (ExactOracle), split into oracle and sampling error

PATH is a shard or a dataset directory (as for eqfast-view). `--json` prints one JSON object
with every figure. The methods are documented in `eqfast.engine.validation`.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from ..data.shards import ShardError
from ..engine.records import jsonable
from ..engine.validation import (ReplayError, Z_FLAG, exact_report, outcome_report,
                                 pick_records, recompute_report, run_decisions)
from .common import HelpFormatter, device_problem, quiet_on_closed_stdout
from .view import load_records

#: metadata entries that must agree between the shards validated together
RUN_KEYS = ("run_seed", "n_samples", "posterior", "oracle", "adaptive")


class UsageError(Exception):
    """A problem with the arguments or the inputs (exit status 2)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eqfast-validate",
        description="Validate eqfast decision records: recompute with fresh worlds (z scores), "
                    "correlate E[Q] with realized outcomes, and measure label error against "
                    "exact E[Q]. Methods: see eqfast/engine/validation.py.",
        formatter_class=HelpFormatter)
    p.add_argument("path", type=Path,
                   help="a shard (.safetensors/.json/.pt) or a dataset directory")
    p.add_argument("--split", default="all", help="dataset directory: train, val, test or all")
    p.add_argument("--recompute", type=int, nargs="?", const=32, default=None, metavar="K",
                   help="recompute K sampled records with fresh worlds (K defaults to 32)")
    p.add_argument("--outcomes", action="store_true",
                   help="correlate E[Q] of the move taken with the realized value to go")
    p.add_argument("--exact", type=int, nargs="?", const=16, default=None, metavar="K",
                   help="label error of K sampled records against exact E[Q] (K defaults to 16; "
                        "slow early in a hand: one exact solve per world, see --decisions)")
    p.add_argument("--oracle", default=None,
                   help="oracle for --recompute: 'exact', 'default' or a weights path "
                        "(default: the records' oracle, from their metadata)")
    p.add_argument("--seed", type=int, default=None,
                   help="run seed of the fresh worlds in --recompute (default: the records' + 1)")
    p.add_argument("--max-enumerate", type=int, default=2000,
                   help="--exact: enumerate all worlds when at most this many, else draw this many")
    p.add_argument("--decisions", default=None, metavar="LO:HI",
                   help="sample records only among decision indices LO..HI (inclusive)")
    p.add_argument("--indices", default=None, metavar="I,J,...",
                   help="validate these record indices (eqfast-view's numbering) "
                        "instead of sampling")
    p.add_argument("--sample-seed", type=int, default=0, help="seed of the record sampling")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--backend", choices=["reference", "triton", "auto"], default="auto",
                   help="engine stages: pure PyTorch, Triton kernels, or auto (triton on CUDA)")
    p.add_argument("--json", action="store_true", help="print one JSON object with all figures")
    return p


# ---------------------------------------------------------------------------- inputs
def run_metadata(metas: list[dict]) -> dict:
    """The metadata shared by all shards; UsageError if they come from different runs."""
    first = metas[0]
    for m in metas[1:]:
        for key in RUN_KEYS:
            if m.get(key) != first.get(key):
                raise UsageError(f"shards disagree on metadata {key!r} ({first.get(key)!r} vs "
                                 f"{m.get(key)!r}): validate one run at a time")
    return first


def resolve_oracle(spec: str | None, metadata: dict, device):
    """(oracle, name) for --recompute: --oracle, else the oracle named in the metadata."""
    name = spec if spec is not None else (metadata.get("oracle") or {}).get("name")
    if name is None:
        raise UsageError("the records' metadata names no oracle: pass --oracle")
    try:
        if name == "exact":
            from ..oracle.exact import ExactOracle
            return ExactOracle(), name
        from ..oracle.weights import load_default_oracle, load_oracle
        if name == "default":
            return load_default_oracle(device=device), name
        if not Path(name).is_file():
            raise FileNotFoundError(f"{name}: no such file")
        return load_oracle(name, device=device), name
    except (ImportError, OSError, ValueError) as e:
        hint = "" if spec is not None else " (named in the records' metadata); pass --oracle"
        raise UsageError(f"cannot load oracle {name!r}{hint}: {e}") from None


def parse_decisions(text: str | None):
    if text is None:
        return None
    try:
        lo, hi = (int(x) for x in text.split(":"))
    except ValueError:
        raise UsageError(f"--decisions must be LO:HI (e.g. 16:27), got {text!r}") from None
    if not 0 <= lo <= hi <= 27:
        raise UsageError(f"--decisions needs 0 <= LO <= HI <= 27, got {text!r}")
    return lo, hi


def chosen_indices(args, records, k: int) -> torch.Tensor:
    if args.indices is not None:
        try:
            idx = [int(x) for x in args.indices.split(",") if x.strip()]
        except ValueError:
            raise UsageError("--indices must be comma-separated integers, "
                             f"got {args.indices!r}") from None
        bad = [i for i in idx if not 0 <= i < len(records)]
        if bad:
            raise UsageError(f"--indices {bad} out of [0, {len(records) - 1}]")
        return torch.tensor(sorted(set(idx)), dtype=torch.int64)
    if k < 1:
        raise UsageError(f"K must be >= 1, got {k}")
    return pick_records(records, k, args.sample_seed, parse_decisions(args.decisions))


# ---------------------------------------------------------------------------- text output
def _f(x, fmt=".3f"):
    return "-" if x is None else format(x, fmt)


def _pct(x, fmt=".1f"):
    return "-" if x is None else format(100 * x, fmt)


def print_recompute(rep: dict) -> None:
    print(f"recompute: {rep['n_records']} records, {rep['n_moves']} legal moves, oracle "
          f"{rep['oracle']}, fresh run seed {rep['fresh_seed']}")
    print(f"  all moves: mean |z| {_f(rep['mean_abs_z'])}   |z| > {Z_FLAG:g}: "
          f"{_pct(rep['frac_abs_z_gt_3'], '.2f')}%   max |z| {_f(rep['max_abs_z'], '.2f')}")
    print(f"  sampled decisions ({rep['n_moves_sampled']} moves): mean |z| "
          f"{_f(rep['mean_abs_z_sampled'])} (N(0,1): 0.798)   |z| > {Z_FLAG:g}: "
          f"{_pct(rep['frac_abs_z_gt_3_sampled'], '.2f')}% (N(0,1): 0.27%)")
    print(f"  enumerated decisions: max |z| {_f(rep['max_abs_z_enumerated'])} (expected ~0: "
          "both sides average every world)")
    for r in rep["flagged"][:20]:
        print(f"  flagged: record {r['index']} (game {r['game_idx']}, decision "
              f"{r['decision_idx']}): max |z| {r['max_abs_z']:.2f}")
    if len(rep["flagged"]) > 20:
        print(f"  ... {len(rep['flagged']) - 20} more flagged records")


def print_outcomes(rep: dict) -> None:
    o = rep["overall"]
    print(f"outcomes: {rep['n_complete_games']} complete games of {rep['n_games']}, "
          f"{rep['n_records']} records: Pearson r {_f(o['pearson_r'])}, mean residual "
          f"(realized - E[Q]) {_f(o['mean_residual'], '+.2f')}, rmse {_f(o['rmse'], '.2f')}")
    print("  decision     n   pearson_r   mean_resid    rmse")
    for d, s in rep["by_decision"].items():
        print(f"  {d:8d} {s['n']:5d}   {_f(s['pearson_r']):>9}   "
              f"{_f(s['mean_residual'], '+.2f'):>10}   {_f(s['rmse'], '.2f'):>5}")


def print_exact(rep: dict) -> None:
    print(f"exact: {rep['n_records']} records, {rep['n_moves']} legal moves, exact E[Q] "
          f"enumerated for {_pct(rep['exact_enumerated_fraction'], '.0f')}% "
          f"(max {rep['max_enumerate']} worlds)")
    print(f"  mean |E_rec - E_exact| {_f(rep['total_error'])} points = oracle error "
          f"{_f(rep['oracle_error'])} (same worlds) + sampling error {_f(rep['sampling_error'])}")
    print(f"  argmax agreement {_pct(rep['argmax_agreement'])}%, "
          f"mean regret {_f(rep['mean_regret'])} points")
    if rep["worlds_mismatch"]:
        print(f"  warning: {rep['worlds_mismatch']} records did not reproduce their n_worlds "
              "(the same-worlds split is not exact for them)")


# ---------------------------------------------------------------------------- main
def validate(args) -> dict:
    if args.recompute is None and not args.outcomes and args.exact is None:
        raise UsageError("choose at least one of --recompute [K], --outcomes, --exact [K]")
    if args.max_enumerate < 1:
        raise UsageError(f"--max-enumerate must be >= 1, got {args.max_enumerate}")
    problem = device_problem(args.device)
    if problem is not None:
        raise UsageError(problem)
    records, metas = load_records(args.path, args.split)
    if len(records) == 0:
        raise UsageError(f"{args.path} (split {args.split}): no records")
    meta = run_metadata(metas)
    run_seed = int(meta.get("run_seed", 0))
    out = {"path": str(args.path), "n_records": len(records),
           "n_games": int(torch.unique(records["game_idx"]).numel()),
           "run_seed": run_seed, "records_oracle": (meta.get("oracle") or {}).get("name")}
    common = dict(device=args.device, backend=args.backend)

    if args.recompute is not None:
        oracle, name = resolve_oracle(args.oracle, meta, args.device)
        fresh_seed = args.seed if args.seed is not None else run_seed + 1
        if fresh_seed == run_seed:
            raise UsageError(f"--seed {fresh_seed} is the records' own run seed: the worlds "
                             "would not be fresh")
        idx = chosen_indices(args, records, args.recompute)
        part = records.select(idx)
        fresh = run_decisions(part, oracle, meta, seed=fresh_seed, **common)
        out["recompute"] = {**recompute_report(part, fresh, idx.tolist(), fresh_seed),
                            "oracle": name}
    if args.outcomes:
        out["outcomes"] = outcome_report(records, args.device)
    if args.exact is not None:
        from ..oracle.exact import ExactOracle
        exact_oracle = ExactOracle()
        idx = chosen_indices(args, records, args.exact)
        part = records.select(idx)
        same = run_decisions(part, exact_oracle, meta, seed=run_seed, **common)
        exact = run_decisions(part, exact_oracle, meta, seed=run_seed,
                              n_samples=args.max_enumerate, **common)
        out["exact"] = {**exact_report(part, same, exact, idx.tolist()),
                        "max_enumerate": args.max_enumerate}
    return out


@quiet_on_closed_stdout
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = validate(args)
    except (UsageError, ShardError, ReplayError) as e:
        print(f"eqfast-validate: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(jsonable(result), allow_nan=False))
        return 0
    print(f"eqfast-validate: {result['path']}: {result['n_records']} records, "
          f"{result['n_games']} games, run seed {result['run_seed']}, oracle "
          f"{result['records_oracle']}")
    for key, show in (("recompute", print_recompute), ("outcomes", print_outcomes),
                      ("exact", print_exact)):
        if key in result:
            show(result[key])
    return 0


if __name__ == "__main__":
    sys.exit(main())
