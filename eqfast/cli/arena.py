"""eqfast-arena: who plays better? Duplicate matches between policies, with intervals; and
the league, the headline benchmark, that rates a panel of policies on one scale.

    eqfast-arena --policies rules,random --hands 400
    eqfast-arena --policies random,rules,eq:default:32,perfect --hands 200 --json --out rr.json
    eqfast-arena --league runs/league                       # the default panel, resumable

Every pair of the listed policies plays the same deals (seeds [--seed-start, --seed-start +
hands/2)), each deal twice with the seats swapped (eqfast/play/arena.py has the format and
the statistics; docs/PLAY.md the policies and measured results). A table (or with --json
one JSON object) goes to stdout, a progress bar to stderr.

With --league DIR, every pair plays chunks of deals until its interval is narrow enough
(eqfast/play/league.py), the state is saved in DIR after every chunk (running the command
again continues it), and DIR/league.json holds the ratings, the matrix and the contract
view; `eqfast-report DIR --out league.png` draws them.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import TYPE_CHECKING

from ..engine.games import parse_decl_mode
# names and defaults without torch, so that --help and argument errors answer at once;
# the players and the league are imported by the functions that use them
from ..play.names import (DEFAULT_CHUNK_HANDS, DEFAULT_MAX_HANDS, DEFAULT_MIN_HANDS,
                          DEFAULT_PANEL, DEFAULT_SEED_START, DEFAULT_TARGET_CI, USAGE)
from ..play.names import POLICY_NAMES as POLICIES
from ..utils.progress import Progress
from .common import HelpFormatter, device_problem, path_type, quiet_on_closed_stdout

if TYPE_CHECKING:
    from ..play.arena import MatchResult

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
                    "eqfast/play/policies.py), expert (the hand-written sparring partner of "
                    "eqfast/play/expert.py), eq:ORACLE[:N] (the E[Q] player: N worlds, "
                    "default 32; ORACLE default, accurate, exact or a weights path; "
                    "eq:ORACLE:N:posterior[=BEHAVIOUR] weighs the worlds with the transcript "
                    "posterior), "
                    "stage2[:WEIGHTS] (the Stage 2 model: one forward pass over the public "
                    "transcript, no search; default eqfast/models/stage2.safetensors), "
                    "search[:N[:T[:WEIGHTS]]] (Stage 2 with a look-ahead: every legal move "
                    "played on by Stage 2 at every seat in N sampled worlds, default 16, to "
                    "the actor's T-th next turn, default 7: to the end of the hand; "
                    "eqfast/play/search.py), perfect "
                    "(CHEATING: sees every hand, plays the exact solver's move). With "
                    "--league DIR: the league, every pair until its interval is narrow "
                    "enough, ratings with intervals and the contract view, resumable. See "
                    "docs/PLAY.md.",
        formatter_class=HelpFormatter)
    p.add_argument("--policies", default=None, metavar="A,B[,C...]",
                   help=f"two or more distinct policies, comma-separated ({forms}); every pair "
                        "plays, the earlier one as A. Required without --league; with it, the "
                        "panel (default: the stored panel when DIR holds a league, else "
                        f"{','.join(DEFAULT_PANEL)}); a stored panel may only grow")
    p.add_argument("--hands", type=int, default=None,
                   help="hands per pair: an even number, hands/2 deals each played twice "
                        "(required without --league)")
    p.add_argument("--seed-start", type=int, default=None,
                   help="first game seed (deal, declarer and declaration follow from it); "
                        f"default 0, with --league {DEFAULT_SEED_START} (above every training "
                        "seed)")
    p.add_argument("--run-seed", type=int, default=None,
                   help="seed of the policies' draws (random moves, E[Q] worlds), mixed with "
                        "each game seed and decision (default 0)")
    p.add_argument("--batch", type=int, default=None,
                   help="deals played in lockstep (2 x batch games; default 64, with --league "
                        "a whole chunk); larger batches serve the E[Q] player's engine better")
    p.add_argument("--decl", default=None,
                   help="declaration per deal: 'hand' (the declarer's heuristic, "
                        "eqfast/engine/games.py; the default), 'uniform', or 0..9")
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
    g = p.add_argument_group("league (eqfast/play/league.py, docs/PLAY.md 'League')")
    g.add_argument("--league", type=path_type, default=None, metavar="DIR",
                   help="play the league of --policies in DIR (created if needed; resumes "
                        "the league DIR holds) and write DIR/league.json")
    g.add_argument("--rename", default=None, metavar="OLD=SPEC",
                   help="re-point the stored policy OLD to SPEC, which must play it with the "
                        "same weights file contents (e.g. stage2=stage2:stage2_eq when a new "
                        "Stage 2 ships and the old one is kept under eqfast/models), rewrite "
                        "DIR/league.json and stop without playing")
    g.add_argument("--target-ci", type=float, default=None,
                   help="a pair is resolved when the half-width of its 95%% interval of "
                        f"points per hand is at most this (default {DEFAULT_TARGET_CI}; "
                        "the four stopping flags default to the stored values when DIR "
                        "holds a league)")
    g.add_argument("--min-hands", type=int, default=None,
                   help=f"hands every pair plays at least (even; default {DEFAULT_MIN_HANDS})")
    g.add_argument("--max-hands", type=int, default=None,
                   help="hands a pair plays at most, resolved or not (even; default "
                        f"{DEFAULT_MAX_HANDS})")
    g.add_argument("--chunk", type=int, default=None,
                   help="hands a pair plays between checks of its interval and saves of "
                        f"the state (even; default {DEFAULT_CHUNK_HANDS}); a kill loses at "
                        "most one chunk")
    g.add_argument("--budget-minutes", type=float, default=None,
                   help="start no new chunk after this many minutes; the state stays "
                        "resumable")
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
    if args.league is not None:
        return check_league_args(args)
    for flag, v in (("--policies", args.policies), ("--hands", args.hands)):
        if v is None:
            return f"{flag} is required (or play a league with --league DIR)"
    for flag, v in (("--target-ci", args.target_ci), ("--min-hands", args.min_hands),
                    ("--max-hands", args.max_hands), ("--chunk", args.chunk),
                    ("--budget-minutes", args.budget_minutes)):
        if v is not None:
            return f"{flag} applies to --league only"
    if args.hands < 2 or args.hands % 2:
        return (f"--hands must be an even number >= 2 (each deal is played twice), "
                f"got {args.hands}")
    if args.batch is not None and args.batch < 1:
        return f"--batch must be >= 1, got {args.batch}"
    if args.seed_start is not None and args.seed_start < 0:
        return f"--seed-start must be >= 0, got {args.seed_start}"
    if args.threads < 1:
        return f"--threads must be >= 1, got {args.threads}"
    try:
        parse_decl_mode("hand" if args.decl is None else args.decl)
    except ValueError:
        return f"--decl must be 'hand', 'uniform' or a declaration 0..9, got {args.decl!r}"
    if args.out is not None and not args.out.parent.is_dir():
        return f"--out {args.out}: directory {args.out.parent} does not exist"
    return policies_problem(args.policies) or device_problem(args.device)


def policies_problem(text: str) -> str | None:
    try:
        specs = parse_policies(text)
    except ValueError as e:
        return str(e)
    known = ", ".join(USAGE.get(n, n) for n in POLICIES)
    for spec in specs:
        if spec.partition(":")[0] not in POLICIES:
            return f"--policies: unknown policy {spec!r} (choose from {known})"
    return None


def league_given(args) -> dict:
    """The league settings named on the command line (None: the stored value or the
    default, eqfast.play.league.resolve_settings)."""
    return {"seed_start": args.seed_start, "run_seed": args.run_seed, "decl": args.decl,
            "target_ci": args.target_ci, "min_hands": args.min_hands,
            "max_hands": args.max_hands, "chunk_hands": args.chunk}


def check_league_args(args) -> str | None:
    """The first problem with the arguments of a league run (None if none)."""
    from ..play.league import REPORT_FILE, STATE_FILE, LeagueSettings

    if args.rename is not None:
        old, sep, spec = args.rename.partition("=")
        if not (old.strip() and sep and spec.strip()):
            return f"--rename must be OLD=SPEC (e.g. stage2=stage2:stage2_eq), got {args.rename!r}"
        if args.policies is not None:
            return "--rename re-points a stored policy; it takes no --policies"
        if not (args.league / STATE_FILE).exists():
            return f"--league {args.league}: holds no league to rename a policy in"
    if args.hands is not None:
        return (f"--hands {args.hands} does not apply to --league: a pair plays until its "
                f"interval is narrow enough (--target-ci, --min-hands, --max-hands)")
    if args.out is not None:
        return f"--out {args.out} does not apply to --league: the report is DIR/{REPORT_FILE}"
    if args.league.exists() and not args.league.is_dir():
        return f"--league {args.league}: is a file, not a directory"
    # each value on its own (the defaults stand in for the others); resolve_settings checks
    # the combination with a stored league's settings
    given = {k: v for k, v in league_given(args).items() if v is not None}
    problem = LeagueSettings(**given).problem()
    if problem is not None:
        return problem
    if args.batch is not None and args.batch < 1:
        return f"--batch must be >= 1, got {args.batch}"
    if args.threads < 1:
        return f"--threads must be >= 1, got {args.threads}"
    if args.budget_minutes is not None and not args.budget_minutes > 0:
        return f"--budget-minutes must be > 0, got {args.budget_minutes}"
    if args.policies is not None:
        problem = policies_problem(args.policies)
        if problem is not None:
            return problem
    return device_problem(args.device)


def label(name: str, cheating: bool) -> str:
    return f"{name} (CHEATING)" if cheating else name


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def format_table(results: list["MatchResult"], rates: dict) -> str:
    from ..play.arena import DIFF_INTERVAL, WIN_INTERVAL

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
    import torch

    from ..play.arena import play_match, policy_rates
    from ..play.policies import policy_from_spec

    torch.set_num_threads(args.threads)
    if args.league is not None:
        return league_main(args)
    args.seed_start = 0 if args.seed_start is None else args.seed_start
    args.batch = 64 if args.batch is None else args.batch
    args.run_seed = 0 if args.run_seed is None else args.run_seed
    args.decl = "hand" if args.decl is None else args.decl
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


def league_main(args) -> int:
    """eqfast-arena --league DIR: open (or continue) the league, play, report."""
    from ..play.league import (STATE_FILE, LeagueStateError, format_league, open_league,
                               rename_entry, write_report)
    from ..play.policies import policy_from_spec

    build = lambda spec, run_seed: policy_from_spec(spec, run_seed=run_seed, device=args.device,
                                                    threads=args.threads)
    specs = None if args.policies is None else parse_policies(args.policies)
    try:
        if args.rename is not None:
            old, _, spec = args.rename.partition("=")
            new = rename_entry(args.league, old.strip(), spec.strip(), build)
            print(f"{PROG}: {args.league}: {old.strip()} is now {new.name} ({new.spec})",
                  file=sys.stderr)
        league = open_league(args.league, specs, build, **league_given(args))
    except LeagueStateError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except ValueError as e:            # a bad spec: an unknown oracle, a missing weights file
        text = str(e)
        if not text.startswith("--"):
            stored = (args.league / STATE_FILE).exists()
            text = ("--policies: " if args.policies is not None else
                    f"the {'stored' if stored else 'default'} panel (no --policies): ") + text
        print(f"{PROG}: {text}", file=sys.stderr)
        return 2
    if args.rename is not None:        # re-pointed: report under the new name, play nothing
        report = write_report(league)
        print(json.dumps(report) if args.json else format_league(report))
        return 0
    budget = None if args.budget_minutes is None else 60 * args.budget_minutes
    played = sum(p.hands for p in league.pairs)
    interrupted = False
    with Progress(total=max(league.projected_hands() - played, 0), desc=f"{PROG} league",
                  unit="hands", disable=args.quiet) as bar:
        def on_chunk(pair, hands):
            hw = pair.half_width()
            bar.total = max(league.projected_hands() - played, bar.n + hands)
            bar.update(hands, pair=f"{pair.a} v {pair.b}", hands=pair.hands,
                       ci=f"±{hw:.2f}" if hw is not None else "-")
        # `kill` (SIGTERM) stops the league as Ctrl-C does: the report is written; a
        # process started in the background may have SIGINT ignored, SIGTERM never is
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            league.run(args.batch, args.device, budget, on_chunk)
        except KeyboardInterrupt:      # the chunk in flight is lost; every saved one stays
            interrupted = True
        finally:
            signal.signal(signal.SIGTERM, previous)
    report = write_report(league)
    if args.json:
        print(json.dumps(report))
    else:
        print(format_league(report))
    if not report["complete"]:
        print(f"{PROG}: {'interrupted' if interrupted else 'stopped'} with "
              f"{sum(p['status'] == 'playing' for p in report['pairs'])} pairs unfinished; "
              f"run the same command again to continue", file=sys.stderr)
    return 130 if interrupted else 0


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
