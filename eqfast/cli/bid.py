"""eqfast-bid: the contract x bid-level matrix of a bidder's hand (docs/BIDDING.md).

    eqfast-bid --hand "6-6,6-5,6-4,5-5,4-4,3-3,2-2" [--completions N] [--json] [--out FILE]
    eqfast-bid --hand ... --sequential [--max-completions M]
    eqfast-bid --hand ... --oracle network          (bulk network values, exact audits)
    eqfast-bid --batch K --out hands.jsonl [--batch-seed S]   (resumable dataset mode)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .common import HelpFormatter, path_arg, quiet_on_closed_stdout

DESCRIPTION = """\
Evaluate a Texas 42 bidder's hand: the bidder sits at seat 0, declares and leads. For N
completions of the hidden hands drawn from a completion model (default uniform over the
deals consistent with the hand; the same completions for every contract) the exact solver
gives the bidder team's points under perfect-information play in each of the 10 contracts
(declarations 0..9). Per contract and bid level (30..41 points; 42, 84, ... = 1, 2, ...
marks, which all need 42 points) it reports p_upper = P_M(make | perfect-information play)
with a 95% Wilson interval, score quantiles, CVaR at 10%, the worst sampled case and the
expected mark swing; the contract choice is the max over contracts of the mean (printed
beside the fused average of max, which is invalid). The lower bracket (--lower K) plays the
first K completions with the E[Q] player on every seat, each seat from its own information:
p_lower, and the gap p_upper - p_lower with a warning when it is large.

Every probability is labelled with its completion model and method. Output: a readable
table (or --json: one JSON object); --out FILE writes the JSON too. With --batch K, K
seeded random hands are evaluated and appended as JSON lines to --out (re-running resumes).
Bad input (a hand without exactly 7 distinct tiles of the double-six set, bad flags) exits 2.
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eqfast-bid", description=DESCRIPTION,
                                formatter_class=HelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hand", help='the bidder\'s 7 tiles, e.g. "6-6,6-5,6-4,5-5,4-4,3-3,2-2"')
    src.add_argument("--batch", type=int, metavar="K",
                     help="evaluate K seeded random hands into --out (JSON lines, resumable)")
    p.add_argument("--batch-seed", type=int, default=0, help="seed of the --batch hands")
    p.add_argument("--completions", type=int, default=500, help="N completions, shared by every contract (--sequential chooses N itself)")
    p.add_argument("--seed", type=int, default=0, help="seed of the completions")
    p.add_argument("--model", default="uniform_consistent", help="completion model")
    p.add_argument("--contracts", default="all", help="'all' or declarations 0..9, comma-separated")
    p.add_argument("--max-marks", type=int, default=2, help="mark bids up to this many marks")
    p.add_argument("--threads", type=int, default=0, help="solver threads (0 = every core)")
    p.add_argument("--leads", action="store_true",
                   help="exact path: also solve every opening lead for the fixed-lead figures "
                        "(first_lead, p_upper_fixed_lead); 1.9-2.6x the solver time of V alone "
                        "(benchmarks/RESULTS.md)")
    s = p.add_argument_group("sequential stopping (docs/BIDDING.md)")
    s.add_argument("--sequential", action="store_true",
                   help="add completions until the deciding intervals are narrow or the best bid is stable")
    s.add_argument("--start", type=int, default=100, help="completions of the first round")
    s.add_argument("--step", type=int, default=100, help="completions added per round")
    s.add_argument("--max-completions", type=int, default=2000, help="most completions")
    s.add_argument("--target", type=float, default=0.5, help="make rate the best bid must reach")
    s.add_argument("--width", type=float, default=0.10, help="a deciding interval this narrow is enough")
    s.add_argument("--patience", type=int, default=3, help="rounds with the same best bid = stable")
    o = p.add_argument_group("values and audits")
    o.add_argument("--oracle", default="exact",
                   help="'exact' (the solver) or 'network' (the shipped Stage 1 network, or "
                        "--weights, with targeted exact audits)")
    o.add_argument("--weights", help="oracle weights (.safetensors) for --oracle network")
    o.add_argument("--audit-fraction", type=float, default=0.25, help="share of rows solved exactly")
    o.add_argument("--audit-margin", type=float, default=3.0, help="points from a threshold that make a row worth auditing")
    lb = p.add_argument_group("lower bracket")
    lb.add_argument("--lower", type=int, default=50, metavar="K",
                    help="play the first K completions with the E[Q] player on every seat (0 = off)")
    lb.add_argument("--lower-worlds", type=int, default=16, help="worlds per decision of the E[Q] player")
    lb.add_argument("--lower-oracle", default="default",
                    help="oracle of the E[Q] player: default (shipped network), exact, or a weights path")
    lb.add_argument("--gap-warn", type=float, default=0.15, help="warn when |p_upper - p_lower| exceeds this")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    out.add_argument("--out", type=path_arg, help="write the JSON here (with --batch: JSON lines, appended)")
    out.add_argument("--detail", choices=["best", "all", "none"], default="best",
                     help="per-level rows for the chosen contract, every contract, or none")
    out.add_argument("--quiet", action="store_true", help="no progress on stderr")
    out.add_argument("--plot", metavar="FILE.png",
                     help="also draw the p_upper matrix as a heat map (matplotlib: the 'report' "
                          "extra); not with --batch")
    return p


#: most completions of one evaluation: each is a deal solved in every contract, held in
#: memory with its values
MAX_COMPLETIONS = 1_000_000


def _check(args, p) -> None:
    import math

    if args.completions < 1:
        p.error("--completions must be >= 1")
    for name in ("completions", "max_completions", "start", "step"):
        if getattr(args, name) > MAX_COMPLETIONS:
            p.error(f"--{name.replace('_', '-')} must be <= {MAX_COMPLETIONS:,}, got "
                    f"{getattr(args, name)}")
    for name in ("target", "width", "audit_fraction", "audit_margin", "gap_warn"):
        if not math.isfinite(getattr(args, name)):
            p.error(f"--{name.replace('_', '-')} must be a finite number, got "
                    f"{getattr(args, name)}")
    if args.threads < 0 or args.threads > 64:
        p.error("--threads must be 0..64")
    if args.lower < 0 or args.lower_worlds < 1:
        p.error("--lower must be >= 0 and --lower-worlds >= 1")
    if args.oracle not in ("exact", "network"):
        p.error(f"--oracle must be exact or network, got {args.oracle!r}")
    if args.weights and args.oracle != "network":
        p.error("--weights needs --oracle network")
    if args.batch is not None and (args.batch < 1 or not args.out):
        p.error("--batch needs K >= 1 and --out FILE")
    if args.plot and args.batch is not None:
        p.error("--plot draws one hand's matrix: not with --batch")
    if args.plot:
        if Path(args.plot).suffix.lower() not in (".png", ".svg", ".pdf"):
            p.error(f"--plot {args.plot}: the picture is a .png, .svg or .pdf file")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            p.error("--plot draws with matplotlib, an optional extra: pip install -e '.[report]'")
    if args.out:
        # refuse before the work, not after it
        parent = Path(args.out).resolve().parent
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            p.error(f"--out {args.out}: cannot write into {parent}")


def _settings(args) -> dict:
    """The flags that shape a result (a --batch file is resumed only with the same)."""
    keys = ("completions", "seed", "model", "contracts", "max_marks", "sequential", "start", "step",
            "max_completions", "target", "width", "patience", "oracle", "weights", "audit_fraction",
            "audit_margin", "lower", "lower_worlds", "lower_oracle", "batch_seed", "leads",
            "gap_warn")
    return {k: getattr(args, k) for k in keys}


@quiet_on_closed_stdout
def main(argv=None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    _check(args, p)
    from ..bidding import (AuditConfig, HandError, StoppingRule, completion_model, evaluate,
                           format_table, parse_contracts, parse_hand)
    from ..bidding.levels import bid_levels

    def fail(msg: str) -> int:
        print(f"eqfast-bid: {msg}", file=sys.stderr)
        return 2

    hand = None
    if args.hand is not None:
        try:
            hand = parse_hand(args.hand)
        except HandError as e:
            return fail(f"--hand: {e}")
    try:
        contracts = parse_contracts(args.contracts)
        completion_model(args.model)
        bid_levels(args.max_marks)
        stopping = StoppingRule(args.start, args.step, args.max_completions, args.target,
                                args.width, patience=args.patience) if args.sequential else None
        audit = AuditConfig(fraction=args.audit_fraction, margin=args.audit_margin,
                            target=args.target)
    except ValueError as e:
        return fail(str(e))

    import torch
    threads = args.threads or None
    network = lower = None
    lower_info, network_info = {}, None
    try:
        from ..oracle.factory import oracle_from_spec
        if args.oracle == "network":
            network, network_info = oracle_from_spec(args.weights or "default", "cpu")
        if args.lower:
            from ..bidding.lower import lower_engine
            oracle, identity = oracle_from_spec(args.lower_oracle, "cpu")
            lower = lower_engine(oracle, args.lower_worlds, seed=args.seed)
            lower_info = {"worlds": args.lower_worlds, "oracle": identity.get("name"),
                          "oracle_sha256": identity.get("sha256")}
    except (OSError, ValueError) as e:
        return fail(f"oracle: {e}")
    if threads:
        torch.set_num_threads(threads)
    say = (lambda m: None) if args.quiet else (lambda m: print(f"eqfast-bid: {m}", file=sys.stderr))
    common = dict(model=args.model, contracts=contracts, max_marks=args.max_marks, threads=threads,
                  stopping=stopping, network=network, network_info=network_info, audit=audit,
                  lower_engine=lower, lower_n=args.lower, lower_info=lower_info,
                  gap_warn=args.gap_warn, progress=say, leads=args.leads)
    if args.batch is not None:
        return _batch(args, common, fail)

    result = evaluate(hand, n=args.completions, seed=args.seed, **common)
    if args.out:
        try:
            _write_atomic(Path(args.out), json.dumps(result, indent=1) + "\n")
        except OSError as e:
            return fail(f"--out: cannot write {args.out}: {e}")
    if args.plot:
        from ..bidding.report import plot_matrix
        try:
            plot_matrix(result, args.plot)
        except OSError as e:
            return fail(f"--plot: cannot write {args.plot}: {e}")
    print(json.dumps(result) if args.json else format_table(result, args.detail))
    return 0


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def batch_hand(batch_seed: int, j: int):
    """Hand j of a --batch run: seat 0 of the deal of seed mix(batch_seed, j)."""
    from ..rules.deal import deal_from_seed, mix_seed
    return [int(t) for t in deal_from_seed(mix_seed(batch_seed, j))[0]]


def _batch(args, common, fail) -> int:
    """Append one JSON line per hand; hands already in the file (same settings) are skipped;
    a torn last line (interrupted write) is dropped."""
    from ..bidding import evaluate
    from ..rules.deal import mix_seed

    path = Path(args.out)
    settings = _settings(args)
    # files written before these settings were recorded ran with their defaults
    added = {k: _parser().get_default(k) for k in ("leads", "gap_warn")}
    done = set()
    if path.exists():
        lines = path.read_text().splitlines(keepends=True)
        good = []
        for line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                break
            if {**added, **(row.get("settings") or {})} != settings:
                return fail(f"--out {path} holds results of other settings "
                            f"({row.get('settings')}); use another file")
            done.add(row["index"])
            good.append(line)
        if len(good) != len(lines):
            path.write_text("".join(good))
    try:
        f = path.open("a")
    except OSError as e:
        return fail(f"--out: cannot write {path}: {e}")
    with f:
        for j in range(args.batch):
            if j in done:
                continue
            r = evaluate(batch_hand(args.batch_seed, j), n=args.completions,
                         seed=mix_seed(args.seed, j), **common)
            f.write(json.dumps({"index": j, "settings": settings, "result": r}) + "\n")
            f.flush()
            os.fsync(f.fileno())
            if not args.quiet:
                print(f"eqfast-bid: hand {j + 1}/{args.batch} {r['hand']}: best bid "
                      f"{r['best_bid']['level']} in {r['choice']['name']}", file=sys.stderr)
    print(json.dumps({"out": str(path), "hands": args.batch, "skipped": len(done)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
