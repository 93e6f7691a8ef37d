"""eqfast-arena: who plays better? Duplicate matches between policies, with intervals.

    eqfast-arena --policies rules,random --hands 400
    eqfast-arena --policies random,rules,eq:default:32,perfect --hands 200 --json --out rr.json

Every pair of the listed policies plays the same deals (seeds [--seed-start, --seed-start +
hands/2)), each deal twice with the seats swapped (eqfast/play/arena.py has the format and
the statistics; docs/PLAY.md the policies and measured results). A table (or with --json
one JSON object) goes to stdout, a progress bar to stderr.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from ..engine.games import parse_decl_mode
from ..play.arena import DIFF_INTERVAL, WIN_INTERVAL, MatchResult, play_match, policy_rates
from ..play.policies import POLICIES, USAGE, policy_from_spec
from ..utils.progress import Progress
from .common import HelpFormatter, device_problem, path_type, quiet_on_closed_stdout

PROG = "eqfast-arena"


def build_parser() -> argparse.ArgumentParser:
    forms = ", ".join(USAGE.get(n, n) for n in POLICIES)
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Play seeded Texas 42 deals between policies in duplicate format (each "
                    "deal twice, the teams swapped, so both sides hold the same cards) and "
                    "report, for every pair, A's mean point differential per hand with a "
                    "95% Student-t interval over deals, A's share of hands won with a Wilson "
                    "95% interval, and each policy's decisions per second. Policies: random "
                    "(uniform legal move), rules (the rule-based player of "
                    "eqfast/play/policies.py), eq:ORACLE[:N] (the E[Q] player: N worlds, "
                    "default 32; ORACLE default, accurate, exact or a weights path), "
                    "stage2[:WEIGHTS] (the Stage 2 model: one forward pass over the public "
                    "transcript, no search; default eqfast/models/stage2.safetensors), perfect "
                    "(CHEATING: sees every hand, plays the exact solver's move). See "
                    "docs/PLAY.md.",
        formatter_class=HelpFormatter)
    p.add_argument("--policies", required=True, metavar="A,B[,C...]",
                   help=f"two or more distinct policies, comma-separated ({forms}); every pair "
                        "plays, the earlier one as A")
    p.add_argument("--hands", type=int, required=True,
                   help="hands per pair: an even number, hands/2 deals each played twice")
    p.add_argument("--seed-start", type=int, default=0,
                   help="first game seed (deal, declarer and declaration follow from it)")
    p.add_argument("--run-seed", type=int, default=0,
                   help="seed of the policies' draws (random moves, E[Q] worlds), mixed with "
                        "each game seed and decision")
    p.add_argument("--batch", type=int, default=64,
                   help="deals played in lockstep (2 x batch games); larger batches serve "
                        "the E[Q] player's engine better")
    p.add_argument("--decl", default="hand",
                   help="declaration per deal: 'hand' (the declarer's heuristic, "
                        "eqfast/engine/games.py), 'uniform', or 0..9")
    p.add_argument("--device", default="cpu",
                   help="cpu, cuda or cuda:N (games and the E[Q] engine)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads and exact-solver threads (1 is fastest on a busy "
                        "machine)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (settings, matches, per-policy rates) instead "
                        "of the table")
    p.add_argument("--out", type=path_type, default=None,
                   help="also write the JSON object to this file (atomically)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def parse_policies(text: str) -> list[str]:
    """The comma-separated specs; ValueError naming the problem."""
    specs = [s.strip() for s in text.split(",")]
    if any(not s for s in specs):
        raise ValueError(f"--policies {text!r}: empty policy name")
    if len(specs) < 2:
        raise ValueError(f"--policies {text!r}: name at least two policies (A,B)")
    dup = sorted({s for s in specs if specs.count(s) > 1})
    if dup:
        raise ValueError(f"--policies {text!r}: {', '.join(dup)} listed twice")
    return specs


def check_args(args) -> str | None:
    """The first problem with the arguments (None if none)."""
    if args.hands < 2 or args.hands % 2:
        return (f"--hands must be an even number >= 2 (each deal is played twice), "
                f"got {args.hands}")
    if args.batch < 1:
        return f"--batch must be >= 1, got {args.batch}"
    if args.seed_start < 0:
        return f"--seed-start must be >= 0, got {args.seed_start}"
    if args.threads < 1:
        return f"--threads must be >= 1, got {args.threads}"
    try:
        parse_decl_mode(args.decl)
    except ValueError:
        return f"--decl must be 'hand', 'uniform' or a declaration 0..9, got {args.decl!r}"
    if args.out is not None and not args.out.parent.is_dir():
        return f"--out {args.out}: directory {args.out.parent} does not exist"
    try:
        specs = parse_policies(args.policies)
    except ValueError as e:
        return str(e)
    known = ", ".join(USAGE.get(n, n) for n in POLICIES)
    for spec in specs:
        if spec.partition(":")[0] not in POLICIES:
            return f"--policies: unknown policy {spec!r} (choose from {known})"
    return device_problem(args.device)


def label(name: str, cheating: bool) -> str:
    return f"{name} (CHEATING)" if cheating else name


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def format_table(results: list[MatchResult], rates: dict) -> str:
    """The text report: one row per pair, then each policy's decisions/s."""
    rows = [("A", "B", "hands", "A diff/hand [95% t]", "A won [95% Wilson]", "A dec/s",
             "B dec/s")]
    for r in results:
        s = r.summary()
        lo, hi = s["diff_ci95"]
        ci = f"{s['mean_diff']:+.2f} [{_num(lo, '+.2f')}, {_num(hi, '+.2f')}]"
        w_lo, w_hi = s["win_ci95"]
        rows.append((label(r.a, r.a_cheating), label(r.b, r.b_cheating), str(s["hands"]), ci,
                     f"{s['win_share']:.3f} [{w_lo:.3f}, {w_hi:.3f}]",
                     _num(s["decisions_per_s"]["a"], ".0f"),
                     _num(s["decisions_per_s"]["b"], ".0f")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {2, 5, 6}
    lines = ["  ".join(c.rjust(w) if i in right else c.ljust(w)
                       for i, (c, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    cheats = {r.a for r in results if r.a_cheating} | {r.b for r in results if r.b_cheating}
    lines.append("")
    lines.append("diff: A's team points minus B's per hand (" + DIFF_INTERVAL + "); won: "
                 + WIN_INTERVAL)
    if cheats:
        lines.append(f"CHEATING: {', '.join(sorted(cheats))} sees every hand (perfect "
                     "information): a bound, not a legal player")
    lines.append("decisions/s over all matches: " + ", ".join(
        f"{n} {_num(v['decisions_per_s'], '.0f')} ({v['decisions']} in {v['seconds']:.1f} s)"
        for n, v in rates.items()))
    return "\n".join(lines)


@quiet_on_closed_stdout
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    problem = check_args(args)
    if problem is not None:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    specs = parse_policies(args.policies)
    policies = []
    for spec in specs:
        try:
            policies.append(policy_from_spec(spec, run_seed=args.run_seed, device=args.device,
                                             threads=args.threads))
        except ValueError as e:          # a bad eq:N, an unreadable weights file
            print(f"{PROG}: --policies: {e}", file=sys.stderr)
            return 2
    names = [p.name for p in policies]
    same = sorted({n for n in names if names.count(n) > 1})
    if same:
        print(f"{PROG}: --policies {args.policies!r}: two specs name the same policy "
              f"{', '.join(same)}", file=sys.stderr)
        return 2
    deals = args.hands // 2
    seeds = list(range(args.seed_start, args.seed_start + deals))
    pairs = [(a, b) for i, a in enumerate(policies) for b in policies[i + 1:]]
    results = []
    with Progress(total=len(pairs) * args.hands, desc=PROG, unit="hands",
                  disable=args.quiet) as bar:
        for a, b in pairs:
            bar.set_postfix(match=f"{a.name} v {b.name}")
            results.append(play_match(a, b, seeds, args.batch, args.decl, args.device,
                                      on_batch=bar.update))
    rates = policy_rates(results)
    cheating = {p.name: bool(p.cheating) for p in policies}
    for name, rate in rates.items():
        rate["cheating"] = cheating[name]
    report = {
        "settings": {"policies": [p.name for p in policies], "hands": args.hands,
                     "deals": deals, "seed_start": args.seed_start, "run_seed": args.run_seed,
                     "batch": args.batch, "decl": args.decl, "device": args.device,
                     "threads": args.threads},
        "matches": [r.summary() for r in results],
        "policies": rates,
    }
    if args.out is not None:
        from ..utils.atomic import atomic_write_text
        atomic_write_text(args.out, json.dumps(report, indent=1) + "\n")
    if args.json:
        print(json.dumps(report))
    else:
        print(format_table(results, rates))
    return 0


if __name__ == "__main__":
    sys.exit(main())
