"""Where does one player's edge over another come from? Decisions swapped by kind.

A hybrid plays as BASE except at the decisions of one kind (a trick, or a place in the
trick: the lead, second, third or fourth hand), where it plays as OTHER; each hybrid plays a
duplicate match against BASE itself on the same deals. Its margin is what OTHER's moves of
that kind are worth to a BASE team, with the rest of the hand played as BASE plays it.
Every game of a match is in lockstep, so decision d of every game is trick d // 4, place
d % 4 (eqfast/play/arena.py), and a kind is a set of decision indices. OTHER decides
from the same public state and keys as it would in its own games, so no information
leaks; the swap changes who chooses, not what the seat sees.

The kinds of one partition (the four places, lead and follow, or the seven tricks) cover
every decision once, so their margins sum to about OTHER's own margin over BASE (the `all`
row) when the swaps do not interact; each partition's sum is printed below the table.

    python benchmarks/where_points_go.py --base stage2 --other eq:default:32 --hands 10000

Prints a table (and with --json one JSON object): per kind, the hybrid's points a hand
against BASE with a 95% t interval over deals, the hands, and OTHER's decisions in it.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from eqfast.play.arena import N_DECISIONS, play_match
from eqfast.play.policies import policy_from_spec
from eqfast.rules.tables import N_SEATS, N_TRICKS

PLACES = ("lead", "second", "third", "fourth")


def kinds(partition: str) -> dict[str, frozenset[int]]:
    """The kinds of a partition as decision-index sets: 'place' (lead, second, third,
    fourth), 'side' (lead, follow: the other three places), 'trick' (1..7) or 'all'."""
    if partition == "place":
        return {p: frozenset(range(k, N_DECISIONS, N_SEATS)) for k, p in enumerate(PLACES)}
    if partition == "side":
        lead = frozenset(range(0, N_DECISIONS, N_SEATS))
        return {"lead": lead, "follow": frozenset(range(N_DECISIONS)) - lead}
    if partition == "trick":
        return {f"trick {t + 1}": frozenset(range(N_SEATS * t, N_SEATS * (t + 1)))
                for t in range(N_TRICKS)}
    if partition == "all":
        return {"all": frozenset(range(N_DECISIONS))}
    raise ValueError(f"unknown partition {partition!r} (place, side, trick or all)")


class SwapPolicy:
    """BASE's moves, except OTHER's at the decisions in `swap`."""

    cheating = False

    def __init__(self, base, other, swap: frozenset[int], label: str):
        if base.cheating or other.cheating:
            raise ValueError("a hybrid of a cheating policy would see hidden hands")
        self.base, self.other, self.swap = base, other, swap
        self.name = f"{base.name}+{other.name}@{label}"
        self.other_decisions = 0

    def decide(self, games, seeds, decision):
        if decision in self.swap:
            self.other_decisions += games.batch_size
            return self.other.decide(games, seeds, decision)
        return self.base.decide(games, seeds, decision)


def run(base_spec: str, other_spec: str, partitions, hands: int, seed_start: int,
        batch: int, run_seed: int, on_row=None, threads: int = 1) -> list[dict]:
    if hands < 2 or hands % 2:
        raise ValueError(f"--hands must be an even number >= 2, got {hands}")
    base = policy_from_spec(base_spec, run_seed=run_seed, threads=threads)
    other = policy_from_spec(other_spec, run_seed=run_seed, threads=threads)
    seeds = range(seed_start, seed_start + hands // 2)
    rows = []
    for partition in partitions:
        for label, swap in kinds(partition).items():
            hybrid = SwapPolicy(base, other, swap, label)
            t0 = time.monotonic()
            result = play_match(hybrid, base, seeds, batch=batch)
            s = result.summary()
            row = {"partition": partition, "kind": label, "hands": result.hands,
                   "mean_diff": s["mean_diff"], "diff_ci95": s["diff_ci95"],
                   "other_decisions": hybrid.other_decisions,
                   "seconds": round(time.monotonic() - t0, 1)}
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows


def fmt(row: dict) -> str:
    lo, hi = row["diff_ci95"]
    return (f"{row['partition']:<6} {row['kind']:<8} {row['mean_diff']:+6.2f} "
            f"[{lo:+.2f}, {hi:+.2f}]  {row['hands']:>6}  {row['other_decisions']:>8}  "
            f"{row['seconds']:>6.0f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--base", default="stage2", help="the player whose moves the hybrids keep")
    p.add_argument("--other", default="eq:default:32",
                   help="the player whose moves of one kind the hybrids take")
    p.add_argument("--partitions", default="all,place,trick",
                   help="comma-separated: all (OTHER itself), place, side (lead, follow), "
                        "trick")
    p.add_argument("--hands", type=int, default=10000, help="hands per match (even)")
    p.add_argument("--seed-start", type=int, default=6_000_000_000,
                   help="first deal seed (default above the training and league seeds)")
    p.add_argument("--batch", type=int, default=500, help="deals played in lockstep")
    p.add_argument("--run-seed", type=int, default=0, help="seed of the policies' draws")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads and the exact solver's threads (eq:exact)")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        partitions = [s.strip() for s in args.partitions.split(",") if s.strip()]
        for part in partitions:
            kinds(part)
        print("partition kind     points a hand [95%]    hands  OTHER decisions  seconds",
              file=sys.stderr)
        rows = run(args.base, args.other, partitions, args.hands, args.seed_start, args.batch,
                   args.run_seed, on_row=lambda r: print(fmt(r), file=sys.stderr, flush=True),
                   threads=args.threads)
    except ValueError as e:
        print(f"where_points_go: {e}", file=sys.stderr)
        return 2
    for part in partitions:
        if part != "all":
            total = sum(r["mean_diff"] for r in rows if r["partition"] == part)
            print(f"sum over {part}: {total:+.2f}", file=sys.stderr)
    if args.json:
        print(json.dumps({"base": args.base, "other": args.other, "seed_start": args.seed_start,
                          "run_seed": args.run_seed, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
