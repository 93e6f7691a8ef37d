"""eqfast-solve: exact perfect-information values of one Texas 42 hand, or a solver benchmark.

    eqfast-solve --seed 7 --decl 5 [--leader 2] [--json]
    eqfast-solve --hands "27,26,25,24,23,22,21;..." --decl 9 [--leader 0] [--json]
    eqfast-solve --bench 200 [--decl D] [--seed S]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from ..rules.deal import deal_from_seed
from ..rules.state import GameState
from ..rules.tables import DECL_NAMES, N_DECLS, N_SEATS, N_TILES, tile_name

DESCRIPTION = """\
Solve one hand of Texas 42 exactly (perfect information, minimax, team 0 = seats 0 and 2
maximizes). Prints the deal, Q of every legal opening move of the leader and a principal
variation. Values are points to go, team 0 minus team 1, in [-42, 42].

The deal is either seeded (--seed N: eqfast.rules.deal.deal_from_seed) or explicit
(--hands: four ';'-separated seats 0..3 of comma-separated tile ids, equal sizes 1..7;
tile id = high*(high+1)/2 + low, e.g. 20 is the 5-5, 15 the 5-0).

--json prints exactly one JSON object:
  {"decl": int, "leader": int, "hands": [[ids] x 4], "v": number,
   "q": {"<tile id>": number, ...}, "pv": [ids]}      (v and q in the team-0 frame)

--bench N solves N seeded full deals (seeds S..S+N-1, declaration D or seed mod 10, Q of
every opening lead, after a warm-up) and ends with the line
  deals=N median_ms=X p90_ms=Y nodes_per_s=Z

Invalid input (wrong tile count, duplicate or unknown tile, unequal sizes, bad --decl or
--leader) prints a message to stderr and exits with code 2.
"""

WARMUP_DEALS = 5


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eqfast-solve", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--seed", type=int, help="deal from this seed (deal_from_seed); with --bench: first seed S, default 0")
    src.add_argument("--hands", help='explicit deal: "a,b,c;d,e,f;g,h,i;j,k,l" (seats 0..3)')
    p.add_argument("--decl", type=int, help="declaration (with --bench: D for every deal) 0..9: " +
                   ", ".join(f"{i} {n}" for i, n in enumerate(DECL_NAMES)))
    p.add_argument("--leader", type=int, default=0, help="seat that leads the first trick (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--bench", type=int, metavar="N", help="time N seeded full-deal solves")
    return p


def parse_hands(text: str) -> list[list[int]]:
    """Parse "a,b;c,d;e,f;g,h" into 4 lists of tile ids; ValueError names what is wrong."""
    seats = text.split(";")
    if len(seats) != N_SEATS:
        raise ValueError(f"--hands needs 4 ';'-separated seats, got {len(seats)}")
    hands = []
    for seat, part in enumerate(seats):
        ids = []
        for item in part.split(","):
            item = item.strip()
            try:
                t = int(item)
            except ValueError:
                raise ValueError(f"--hands seat {seat}: {item!r} is not a tile id") from None
            if not 0 <= t < N_TILES:
                raise ValueError(f"--hands seat {seat}: unknown tile id {t} (ids are 0..27)")
            ids.append(t)
        hands.append(ids)
    sizes = [len(h) for h in hands]
    if len(set(sizes)) != 1 or not 1 <= sizes[0] <= 7:
        raise ValueError(f"--hands: seats must hold equal numbers of tiles, 1..7, got {sizes}")
    flat = [t for h in hands for t in h]
    dup = sorted({t for t in flat if flat.count(t) > 1})
    if dup:
        raise ValueError(f"--hands: duplicate tile(s) {dup}")
    return [sorted(h) for h in hands]


def _validate(args, p: argparse.ArgumentParser) -> None:
    if args.decl is not None and not 0 <= args.decl < N_DECLS:
        p.error(f"--decl must be 0..9, got {args.decl}")
    if not 0 <= args.leader < N_SEATS:
        p.error(f"--leader must be 0..3, got {args.leader}")
    if args.bench is not None:
        if args.bench < 1:
            p.error(f"--bench needs N >= 1, got {args.bench}")
        if args.hands is not None:
            p.error("--bench uses seeded deals; it does not take --hands")
        return
    if args.seed is None and args.hands is None:
        p.error("give --seed N or --hands ... (or --bench N)")
    if args.decl is None:
        p.error("--decl is required (0..9)")


def _print_text(hands, decl: int, leader: int, result) -> None:
    names = lambda tiles: " ".join(tile_name(t) for t in tiles)
    print(f"declaration {decl} ({DECL_NAMES[decl]}), seat {leader} leads")
    for seat, hand in enumerate(hands):
        print(f"  seat {seat} (team {seat % 2}): {names(hand)}")
    print(f"V = {result.v:+d} (team 0 minus team 1, perfect play)")
    print(f"Q of each legal lead of seat {leader} (team-0 frame):")
    for t, q in sorted(result.q.items(), key=lambda kv: (-kv[1] if leader % 2 == 0 else kv[1], kv[0])):
        mark = "  <- best" if q == result.v else ""
        print(f"  {tile_name(t):>4} (id {t:2d}): {q:+d}{mark}")
    print("principal variation:")
    state = GameState.new(hands, decl, leader)
    for i in range(0, len(result.pv), N_SEATS):
        trick = result.pv[i:i + N_SEATS]
        before, lead = state, state.leader
        for t in trick:
            state = state.play(t)
        gained = state.score - before.score
        plays = ", ".join(f"s{(lead + j) % N_SEATS} {tile_name(t)}" for j, t in enumerate(trick))
        print(f"  trick {i // N_SEATS + 1}: {plays}  -> seat {state.leader} wins, {gained:+d}")


def _bench(n: int, decl: int | None, first_seed: int, leader: int) -> str:
    from .. import solver

    def one(seed: int) -> tuple[float, int]:
        hands = deal_from_seed(seed).tolist()
        d = decl if decl is not None else seed % N_DECLS
        t0 = time.perf_counter()
        res = solver.solve(hands, d, leader, pv=False)
        return time.perf_counter() - t0, res.nodes

    for i in range(WARMUP_DEALS):
        one(first_seed + n + i)  # seeds outside the timed set
    times, nodes = zip(*(one(first_seed + i) for i in range(n)))
    ms = sorted(t * 1e3 for t in times)
    p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))]
    rate = sum(nodes) / sum(times)
    return f"deals={n} median_ms={statistics.median(ms):.3f} p90_ms={p90:.3f} nodes_per_s={rate:.0f}"


def main(argv=None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    _validate(args, p)
    if args.bench is not None:
        print(_bench(args.bench, args.decl, args.seed if args.seed is not None else 0, args.leader))
        return 0
    if args.hands is not None:
        try:
            hands = parse_hands(args.hands)
        except ValueError as exc:
            p.error(str(exc))
    else:
        hands = deal_from_seed(args.seed).tolist()

    from .. import solver

    result = solver.solve(hands, args.decl, args.leader)
    if args.json:
        print(json.dumps({"decl": args.decl, "leader": args.leader, "hands": hands, "v": result.v,
                          "q": {str(t): q for t, q in sorted(result.q.items())}, "pv": result.pv}))
    else:
        _print_text(hands, args.decl, args.leader, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
