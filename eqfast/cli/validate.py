"""eqfast-validate: check generated E[Q] records against fresh computations.

    eqfast-validate PATH --recompute [K]   re-run K sampled records with fresh worlds (another
                                           run seed) and report the disagreement in standard
                                           errors (z scores)
    eqfast-validate PATH --outcomes        correlate E[Q] of the move taken with the realized
                                           value to go, per decision index
    eqfast-validate PATH --exact [K]       label error of K records against exact E[Q]:
                                           oracle-induced error on the records' own worlds,
                                           sampling error against a fresh exact reference,
                                           decision regret and argmax agreement (>= 2 legal
                                           moves), per trick and overall
    eqfast-validate PATH --truth           the stored worlds and weights (--store-worlds)
                                           against each record's true deal, beside uniform
                                           weights on the same worlds (eqfast.analysis.truth)

PATH is a shard or a dataset directory (as for eqfast-view). `--json` prints one JSON object
with every figure. The methods are documented in `eqfast.analysis.validation`.
"""
from __future__ import annotations

import argparse
import json
import sys

import time
from typing import TYPE_CHECKING

from .common import HelpFormatter, device_problem, path_type, quiet_on_closed_stdout

if TYPE_CHECKING:
    import torch

# torch, the engine and the analysis are imported once the arguments are checked, so that
# --help and argument errors answer at once

#: metadata entries that must agree between the shards validated together
RUN_KEYS = ("run_seed", "n_samples", "posterior", "oracle", "adaptive", "behaviour_oracle")


class UsageError(Exception):
    """A problem with the arguments or the inputs (exit status 2)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eqfast-validate",
        description="Validate eqfast decision records: recompute with fresh worlds (z scores), "
                    "correlate E[Q] with realized outcomes, measure label error against "
                    "exact E[Q], and score the world weights against the true deal. Methods: "
                    "see eqfast/analysis/validation.py and eqfast/analysis/truth.py.",
        formatter_class=HelpFormatter)
    p.add_argument("path", type=path_type,
                   help="a shard (.safetensors/.json/.pt) or a dataset directory")
    p.add_argument("--split", default="all", help="dataset directory: train, val, test or all")
    p.add_argument("--skip-shard", action="append", default=[], metavar="[SPLIT/]SHARD",
                   help="leave this shard out (e.g. train/shard_000001-000001; repeatable): "
                        "read the rest of a dataset with a damaged shard; eqfast-generate on "
                        "the directory regenerates it")
    p.add_argument("--recompute", type=int, nargs="?", const=32, default=None, metavar="K",
                   help="recompute K sampled records with fresh worlds (K defaults to 32)")
    p.add_argument("--outcomes", action="store_true",
                   help="correlate E[Q] of the move taken with the realized value to go")
    p.add_argument("--exact", type=int, nargs="?", const=16, default=None, metavar="K",
                   help="label error of K sampled records against exact E[Q] (K defaults to 16, "
                        "0 = every record; slow early in a hand: one exact solve per world, "
                        "see --decisions)")
    p.add_argument("--truth", action="store_true",
                   help="score every record's stored worlds and weights against its true deal "
                        "(self-play knows it): P(true owner) and Brier of the hidden tiles, "
                        "E[Q] error against the true deal's exact Q, beside uniform weights on "
                        "the same worlds; needs records written with --store-worlds")
    p.add_argument("--oracle", default=None,
                   help="the records' oracle for --recompute and for --exact's per-world "
                        "comparison: 'exact', 'default', 'accurate' or a weights path (default: the oracle "
                        "the metadata names, with its --exact-tricks)")
    p.add_argument("--exact-tricks", type=int, default=None,
                   help="with --oracle: label the last this many tricks exactly (hybrid); "
                        "default: the metadata's value")
    p.add_argument("--seed", type=int, default=None,
                   help="run seed of the fresh worlds in --recompute and of --exact's "
                        "reference (default: the records' + 1; never the records' own)")
    p.add_argument("--max-enumerate", type=int, default=2000,
                   help="--exact: worlds of the fresh exact reference: all consistent worlds "
                        "when at most this many, else this many fresh draws")
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
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
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


def _rebuild(what: str, name: str, hint: str, device, build=None, **kw):
    """(oracle, identity) of oracle `name` from `build` (the one oracle factory by default;
    `behaviour_from_spec` for a behaviour model), or a UsageError naming `what` ('oracle',
    'behaviour oracle'), the name and the problem."""
    from ..oracle.factory import oracle_from_spec, unknown_spec
    problem = unknown_spec(name, behaviour=build is not None)
    if problem is not None:
        raise UsageError(f"cannot load {what} {name!r}{hint}: {problem}")
    try:
        return (build or oracle_from_spec)(name, device, **kw)
    except (ImportError, OSError, ValueError) as e:
        raise UsageError(f"cannot load {what} {name!r}{hint}: {e}") from None


def _sha_warning(what: str, label: str, built: dict, identity: dict) -> str | None:
    """The warning when a rebuilt oracle's SHA-256 is not the one the records name."""
    if identity.get("sha256") and built.get("sha256") != identity.get("sha256"):
        return (f"{what} {label!r} rebuilt with SHA-256 {built.get('sha256')}, the records' "
                f"metadata says {identity.get('sha256')}: recomputed values may differ")
    return None


def resolve_oracle(spec: str | None, metadata: dict, device, exact_tricks: int | None = None):
    """(oracle, name, warning or None): --oracle (with --exact-tricks), else the oracle the
    metadata names, rebuilt by the one oracle factory (eqfast.oracle.factory) with the metadata's
    exact_tricks and int8 quantization, so a hybrid or int8 run is checked against the
    oracle that made it. The warning says when the rebuilt oracle's SHA-256 is not the one
    the records were made with."""
    identity = metadata.get("oracle") or {}
    name = spec if spec is not None else identity.get("name")
    if name is None:
        raise UsageError("the records' metadata names no oracle: pass --oracle")
    if exact_tricks is None:
        exact_tricks = int(identity.get("exact_tricks") or 0) if spec is None else 0
    if not 0 <= exact_tricks <= 7:
        raise UsageError(f"--exact-tricks must be 0..7, got {exact_tricks}")
    quantize = spec is None and metadata.get("oracle_precision") == "int8" and name != "exact"
    hint = "" if spec is not None else " (named in the records' metadata); pass --oracle"
    oracle, built = _rebuild("oracle", name, hint, device, quantize=quantize,
                             exact_tricks=0 if name == "exact" else exact_tricks)
    label = f"{name}+exact{exact_tricks}" if exact_tricks and name != "exact" else name
    label += "+int8" if quantize else ""
    warning = _sha_warning("oracle", label, built, identity) if spec is None else None
    return oracle, label, warning


def resolve_behaviour_oracle(metadata: dict, device):
    """(oracle or None, warning or None): the behaviour model's own oracle of a posterior
    run that had one (metadata `behaviour_oracle`), rebuilt like the main oracle."""
    identity = metadata.get("behaviour_oracle") or {}
    name = identity.get("name")
    if name is None or not (metadata.get("posterior") or {}).get("enabled"):
        return None, None
    from ..stage2.behaviour import behaviour_from_spec
    oracle, built = _rebuild("the behaviour oracle", name, " (named in the records' metadata)",
                             device, build=behaviour_from_spec)
    return oracle, _sha_warning("behaviour oracle", name, built, identity)


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
    import torch

    from ..analysis.validation import pick_records
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
    if k < 0:
        raise UsageError(f"K must be >= 0 (0 = every record), got {k}")
    if k == 0:
        k = len(records)
    return pick_records(records, k, args.sample_seed, parse_decisions(args.decisions))


# ---------------------------------------------------------------------------- text output
def _f(x, fmt=".3f"):
    return "-" if x is None else format(x, fmt)


def _pct(x, fmt=".1f"):
    return "-" if x is None else format(100 * x, fmt)


def print_recompute(rep: dict) -> None:
    from ..analysis.validation import Z_FLAG

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


def _print_by_trick(rep: dict, rows) -> None:
    """A table of `rows` ((label, key, format); format "%" for a share) with one column per
    trick of rep["by_trick"] and one for the whole of rep."""
    tricks = sorted(rep["by_trick"], key=int)
    cols = [rep["by_trick"][t] for t in tricks] + [rep]
    print(f"  {'trick':36s}" + "".join(f"{t:>8}" for t in tricks) + f"{'all':>8}")
    for label, key, fmt in rows:
        cells = [("-" if c[key] is None else f"{100 * c[key]:.0f}%") if fmt == "%"
                 else _f(c[key], fmt) for c in cols]
        print(f"  {label:36s}" + "".join(f"{v:>8}" for v in cells))


#: (label, key, format) of the rows of the --exact table
EXACT_ROWS = (
    ("records", "n_records", "d"), ("decisions >= 2 legal", "n_decisions", "d"),
    ("oracle-induced RMSE of E[Q]", "oracle_rmse", ".2f"),
    ("oracle-induced mean |err| of E[Q]", "oracle_mae", ".2f"),
    ("oracle-induced RMSE per world", "oracle_world_rmse", ".2f"),
    ("sampling floor sqrt(Var/N), rms", "sampling_floor_rms", ".2f"),
    ("sampling RMSE vs fresh reference", "sampling_rmse", ".2f"),
    ("reference's own floor, rms", "reference_floor_rms", ".2f"),
    ("total RMSE vs reference", "total_rmse", ".2f"),
    ("argmax = exact argmax (>= 2 legal)", "argmax_agreement", "%"),
    ("  same, vs exact on same worlds", "argmax_agreement_same_worlds", "%"),
    ("decision regret (>= 2 legal)", "mean_regret", ".3f"),
    ("  exact labels on the same worlds", "exact_same_worlds_regret", ".3f"),
)


def print_exact(rep: dict) -> None:
    print(f"exact: {rep['n_records']} records ({rep['n_decisions']} with >= 2 legal moves), "
          f"{rep['n_moves']} legal moves; records' oracle {rep['oracle']}; fresh exact reference "
          f"(run seed {rep['reference_seed']}): {rep['max_enumerate']} worlds, enumerated for "
          f"{_pct(rep['exact_enumerated_fraction'], '.0f')}%")
    _print_by_trick(rep, EXACT_ROWS)
    if rep["worlds_mismatch"] or rep.get("stored_worlds_mismatch"):
        print(f"  warning: {rep['worlds_mismatch']} records did not reproduce their n_worlds, "
              f"{rep.get('stored_worlds_mismatch', 0)} not their stored worlds (the same-world "
              "split is not exact for them)")
    cv = rep.get("control_variate")
    if cv is not None:
        print(f"  control variate: {_pct(cv['applied_fraction'], '.0f')}% of the records "
              f"corrected, by {_f(cv['shift_rms'], '.2f')} points rms; the oracle-induced "
              "rows above compare the corrected E[Q] with the oracle on the records' own "
              "worlds (that difference is the correction): read the total RMSE")
    if rep.get("reproduced_max_abs_diff") is not None:
        print(f"  records' oracle re-run on the same worlds: max |E - "
              f"{'(E_rec - cv_shift)' if cv is not None else 'E_rec'}| "
              f"{rep['reproduced_max_abs_diff']:.2e} points")


#: (label, key, format) of the rows of the --truth table
TRUTH_ROWS = (
    ("contested tiles", "contested_tiles", "d"), ("legal moves (>= 2 legal)", "moves", "d"),
    ("P(true owner), uniform", "p_true_uniform", ".4f"),
    ("P(true owner), stored weights", "p_true_stored", ".4f"),
    ("Brier, uniform", "brier_uniform", ".4f"), ("Brier, stored weights", "brier_stored", ".4f"),
    ("E[Q] RMSE vs true deal, uniform", "eq_rmse_uniform", ".2f"),
    ("E[Q] RMSE vs true deal, stored", "eq_rmse_stored", ".2f"),
)


def print_truth(rep: dict) -> None:
    print(f"truth: {rep['n_records']} records of {rep['n_games']} games, the stored weights "
          "against uniform weights on the same worlds, scored against each game's deal")
    _print_by_trick(rep, TRUTH_ROWS)
    for label, key, fmt in (("P(true) gain", "p_true_gain", "+.4f"),
                            ("Brier gain (lower Brier)", "brier_gain", "+.4f"),
                            ("E[Q] squared-error gain, points^2", "eq_sq_error_gain", "+.2f")):
        print(f"  {label}: {_f(rep[key], fmt)} +- {_f(rep[key + '_ci95'], fmt[1:])} (95% over "
              "games; + = the stored weights are closer to the truth)")


# ---------------------------------------------------------------------------- main
def validate(args) -> dict:
    """Every figure the flags ask for; UsageError (exit 2) for bad arguments or inputs,
    found before the work where they can be."""
    if args.recompute is None and not args.outcomes and args.exact is None and not args.truth:
        raise UsageError("choose at least one of --recompute [K], --outcomes, --exact [K], "
                         "--truth")
    if args.max_enumerate < 1:
        raise UsageError(f"--max-enumerate must be >= 1, got {args.max_enumerate}")
    problem = device_problem(args.device)
    if problem is not None:
        raise UsageError(problem)
    from ..analysis.validation import ReplayError
    from ..data.shards import ShardError
    try:
        return _validate(args)
    except (ShardError, ReplayError) as e:
        raise UsageError(str(e)) from None


def _validate(args) -> dict:
    import torch

    from ..analysis.truth import truth_report
    from ..analysis.validation import exact_report, outcome_report, recompute_report, run_decisions
    from ..data.shards import load_records

    t0 = time.perf_counter()

    def say(what: str) -> None:                   # progress on stderr: the work takes minutes
        if not args.quiet:
            print(f"eqfast-validate: [{time.perf_counter() - t0:6.1f} s] {what}",
                  file=sys.stderr, flush=True)

    say(f"reading {args.path}")
    records, metas = load_records(args.path, args.split, skip=args.skip_shard)
    for name in args.skip_shard:
        print(f"eqfast-validate: skipping {name} (--skip-shard): its games are not validated",
              file=sys.stderr)
    if len(records) == 0:
        raise UsageError(f"{args.path} (split {args.split}): no records")
    meta = run_metadata(metas)
    run_seed = int(meta.get("run_seed", 0))
    out = {"path": str(args.path), "n_records": len(records),
           "n_games": int(torch.unique(records["game_idx"]).numel()),
           "run_seed": run_seed, "records_oracle": (meta.get("oracle") or {}).get("name")}
    behaviour, warning = resolve_behaviour_oracle(meta, args.device)
    if warning:
        out.setdefault("warnings", []).append(warning)
        print(f"eqfast-validate: warning: {warning}", file=sys.stderr)
    last = [time.perf_counter()]

    def records_done(done: int, total: int) -> None:       # a line every 5 s at most
        if time.perf_counter() - last[0] >= 5.0 and done < total:
            last[0] = time.perf_counter()
            say(f"  {done}/{total} records")

    common = dict(device=args.device, backend=args.backend, behaviour_oracle=behaviour,
                  progress=records_done)

    fresh_seed = args.seed if args.seed is not None else run_seed + 1
    if fresh_seed == run_seed:
        raise UsageError(f"--seed {fresh_seed} is the records' own run seed: the worlds "
                         "would not be fresh")
    oracle = name = None
    if args.recompute is not None or args.exact is not None:
        oracle, name, warning = resolve_oracle(args.oracle, meta, args.device, args.exact_tricks)
        if warning:
            out.setdefault("warnings", []).append(warning)
            print(f"eqfast-validate: warning: {warning}", file=sys.stderr)
    if args.recompute is not None:
        idx = chosen_indices(args, records, args.recompute)
        part = records.select(idx)
        say(f"--recompute: {len(part)} records with fresh worlds")
        fresh = run_decisions(part, oracle, meta, seed=fresh_seed, **common)
        out["recompute"] = {**recompute_report(part, fresh, idx.tolist(), fresh_seed),
                            "oracle": name}
    if args.outcomes:
        say(f"--outcomes: {len(records)} records")
        out["outcomes"] = outcome_report(records, args.device)
    if args.truth:
        say(f"--truth: {len(records)} records against their true deals")
        try:
            out["truth"] = truth_report(records)
        except ValueError as e:
            raise UsageError(f"--truth: {args.path}: {e}") from None
    if args.exact is not None:
        from ..oracle.exact import ExactOracle
        exact_oracle = ExactOracle()
        idx = chosen_indices(args, records, args.exact)
        part = records.select(idx)
        # the same worlds: the run's N reproduces its draws (and its world_q shape); an
        # adaptive run used several N, so each record's own n_worlds, without per-world Q
        adaptive = ((meta.get("adaptive") or {}).get("sem") is not None
                    or meta.get("n_by_trick") is not None or "n_samples" not in meta)
        n_same = None if adaptive else int(meta["n_samples"])
        same_kw = dict(seed=run_seed, n_samples=n_same, store_worlds=not adaptive, **common)
        say(f"--exact: {len(part)} records: the exact oracle on their own worlds (1 of 3)")
        same = run_decisions(part, exact_oracle, meta, **same_kw)
        # the solver is deterministic: re-running an exact run on its worlds is `same`
        say("--exact: the records' oracle on the same worlds (2 of 3)")
        rec_again = same if name == "exact" else run_decisions(part, oracle, meta, **same_kw)
        say(f"--exact: the fresh exact reference, up to {args.max_enumerate} worlds (3 of 3)")
        ref = run_decisions(part, exact_oracle, meta, seed=fresh_seed,
                            n_samples=args.max_enumerate, **common)
        out["exact"] = {**exact_report(part, same, ref, rec_again, idx.tolist()),
                        "max_enumerate": args.max_enumerate, "reference_seed": fresh_seed,
                        "oracle": name}
    say("done")
    return out


@quiet_on_closed_stdout
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = validate(args)
    except UsageError as e:
        print(f"eqfast-validate: {e}", file=sys.stderr)
        return 2
    if args.json:
        from ..data.metadata import jsonable
        print(json.dumps(jsonable(result), allow_nan=False))
        return 0
    print(f"eqfast-validate: {result['path']}: {result['n_records']} records, "
          f"{result['n_games']} games, run seed {result['run_seed']}, oracle "
          f"{result['records_oracle']}")
    for key, show in (("recompute", print_recompute), ("outcomes", print_outcomes),
                      ("exact", print_exact), ("truth", print_truth)):
        if key in result:
            show(result[key])
    return 0


if __name__ == "__main__":
    sys.exit(main())
