"""eqfast-view: look at decision records in the terminal.

    eqfast-view DIR [--split train|val|test|all]     a dataset written by eqfast-generate
    eqfast-view FILE                                 one shard (.safetensors, .json or .pt)

Each record shows a header (record index, game, decision, actor, declaration), the
transcript by trick from the actor's viewpoint (ME, L = left opponent, P = partner,
R = right opponent; the seat after ME plays next), the current hand, E[Q] +- sigma per
legal move as a bar with the chosen move marked, and the diagnostics of the decision.
The transcript is rebuilt from the record's Stage 2 tokens alone.

Interactive (curses) when stdout is a terminal:
    left / right   previous / next record        up / down   previous / next game
    j              jump to a record index        g           go to a game (game_idx)
    d              debug view: per-world Q and weights (runs with --store-worlds)
    PgUp / PgDn    scroll                        q           quit
`--print N [--start I]` prints N records to stdout instead (also the default when stdout is
not a terminal).
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys

from typing import TYPE_CHECKING

from .common import HelpFormatter, path_type, quiet_on_closed_stdout

if TYPE_CHECKING:
    import torch

    from ..data.schema import DecisionRecords

# torch and the records' modules are imported by the functions that use them, so that
# --help and argument errors answer at once

SEAT_NAMES = ("ME", "L", "P", "R")      # relative seat 0..3
BAR_WIDTH = 36
DEBUG_WORLDS = 40                        # per-world rows shown by --print --debug


# ---------------------------------------------------------------------------- loading
# ---------------------------------------------------------------------------- one record
def _tile(tok) -> int:
    h, l = int(tok[0]), int(tok[1])
    return h * (h + 1) // 2 + l


def parse_transcript(tokens: torch.Tensor, length: int):
    """(decl, hand tiles, plays as (relative seat, tile)) from one record's tokens."""
    from ..engine.transcript import F_DECL, F_PLAYER, F_TYPE, TYPE_HAND, TYPE_PLAY
    live = tokens[:int(length)].tolist()
    decl = int(live[0][F_DECL])
    hand = [_tile(t) for t in live if t[F_TYPE] == TYPE_HAND]
    plays = [(int(t[F_PLAYER]), _tile(t)) for t in live if t[F_TYPE] == TYPE_PLAY]
    return decl, hand, plays


def transcript_lines(decl: int, plays) -> list[str]:
    """One line per trick: plays in order, then the winner and points when complete."""
    from ..rules.state import trick_points, trick_winner
    from ..rules.tables import N_SEATS, tile_name
    lines, us, them = [], 0, 0
    for start in range(0, len(plays), N_SEATS):
        trick = plays[start:start + N_SEATS]
        cells = "  ".join(f"{SEAT_NAMES[p]:>2} {tile_name(t):>3}" for p, t in trick)
        text = f"  trick {start // N_SEATS + 1}: {cells}"
        if len(trick) == N_SEATS:
            winner = trick_winner(decl, trick[0][0], [t for _, t in trick])
            pts = trick_points([t for _, t in trick])
            if winner % 2 == 0:
                us += pts
            else:
                them += pts
            text += f"   -> {SEAT_NAMES[winner]} +{pts}"
        else:
            text += "   (in progress)"
        lines.append(text)
    if not plays:
        lines.append("  (no plays yet: the actor leads the first trick)")
    lines.append(f"  points so far: us (ME+P) {us}, them (L+R) {them}")
    return lines


def _bar(mean: float, sd: float, lo: float, hi: float, width: int = BAR_WIDTH) -> str:
    """[----#----] over [lo, hi]: '#' at E[Q], '-' over E[Q] +- sigma, '|' at zero."""
    span = max(hi - lo, 1e-9)
    col = lambda v: min(width - 1, max(0, int(round((v - lo) / span * (width - 1)))))
    cells = [" "] * width
    if lo <= 0 <= hi:
        cells[col(0.0)] = "|"
    for c in range(col(mean - sd), col(mean + sd) + 1):
        cells[c] = "-"
    cells[col(mean)] = "#"
    return "[" + "".join(cells) + "]"


def render_record(records: DecisionRecords, i: int, debug: bool = False,
                  max_worlds: int | None = DEBUG_WORLDS) -> list[str]:
    """The text of record i (list of lines)."""
    from ..data.metadata import LOW_ESS
    from ..data.schema import SPLIT_NAMES
    from ..engine.policy import MODE_NAMES
    from ..rules.tables import DECL_NAMES, tile_name
    r = {k: v[i] for k, v in records.tensors.items()}
    decl, hand, plays = parse_transcript(r["transcript_tokens"], int(r["transcript_lengths"]))
    d = int(r["decision_idx"])
    split = int(r["split"])
    decl_name = DECL_NAMES[decl] if 0 <= decl < len(DECL_NAMES) else f"decl {decl}"
    lines = [f"record {i} (of {len(records)})  |  game {int(r['game_idx'])} "
             f"(seed {int(r['seed'])}, {SPLIT_NAMES[split] if 0 <= split < 3 else split})  |  "
             f"decision {d} (trick {d // 4 + 1}, play {d % 4 + 1})  |  actor seat "
             f"{int(r['actor'])}  |  {decl_name}",
             "", "transcript (ME = actor, L/R = left/right opponent, P = partner):"]
    lines += transcript_lines(decl, plays)
    lines += ["", "hand: " + "  ".join(tile_name(t) for t in hand), ""]

    mean, var, legal = r["e_q_mean"], r["e_q_var"], r["legal_mask"]
    act = int(r["action_taken"])
    sd = [math.sqrt(max(float(v), 0.0)) for v in var]
    ends = [(float(mean[k]) - sd[k], float(mean[k]) + sd[k]) for k in range(len(hand)) if legal[k]]
    lo = min([0.0] + [a for a, _ in ends])
    hi = max([0.0] + [b for _, b in ends])
    # the column header lines up with the rows below: 28 characters, then the bar's scale
    lo_s, hi_s = f"{lo:+.1f}", f"{hi:+.1f}"
    lines.append(f"   {'move':>4}  {'E[Q]':>8}    {'sigma':>5}  "
                 f" {lo_s}{hi_s:>{BAR_WIDTH - len(lo_s)}}")
    mode = int(r["exploration_mode"])
    mode_name = MODE_NAMES[mode] if 0 <= mode < len(MODE_NAMES) else str(mode)
    for k, t in enumerate(hand):
        mark = ">" if k == act else " "
        if not legal[k]:
            lines.append(f" {mark} {tile_name(t):>4}     illegal")
            continue
        m = float(mean[k])
        text = f" {mark} {tile_name(t):>4}  {m:+8.2f} +- {sd[k]:5.2f}  {_bar(m, sd[k], lo, hi)}"
        if k == act:
            text += f"  <- chosen ({mode_name})"
        lines.append(text)
    ess, n_worlds = float(r["ess"]), int(r["n_worlds"])
    # an enumerated late position has as few worlds as exist (1, 2, ...): its small ESS is
    # exact weighting, not a degenerate posterior
    ess_note = (f" (all {n_worlds} consistent worlds)" if bool(r["enumerated"])
                else f" LOW (< {LOW_ESS} of {n_worlds} sampled)" if ess < LOW_ESS else "")
    lines += ["", "diagnostics: " + "  ".join([
        f"ess {ess:.1f}{ess_note}", f"max_w {float(r['max_w']):.3f}",
        f"u_mean {float(r['u_mean']):.2f}", f"u_max {float(r['u_max']):.2f}",
        f"n_worlds {int(r['n_worlds'])}", f"enumerated {'yes' if bool(r['enumerated']) else 'no'}",
        f"mode {mode_name}", f"q_gap {float(r['q_gap']):.2f}"]
        + ([f"entropy {float(r['policy_entropy']):.3f} nats (of {int(legal.sum())} legal)"]
           if "policy_entropy" in r else []))]
    if "ess_before_remix" in r:
        lam = float(r["remix_lambda"])
        lines.append("posterior: " + "  ".join([
            f"ess before re-mixing {float(r['ess_before_remix']):.1f}",
            f"re-mixed lambda {lam:.3f}" if lam > 0 else "not re-mixed",
            f"window nll {float(r['window_nll']):.2f}",
            f"invalid worlds {int(r['n_invalid_worlds'])}",
            f"illegal steps {int(r['n_illegal'])}",
            "FALLBACK to uniform" if bool(r["fallback_uniform"]) else "no fallback"]))
    if "cv_worlds" in records.tensors:
        cv_n = int(r["cv_worlds"])
        shift = [float(r["cv_shift"][k]) for k in range(len(hand)) if legal[k]]
        lines.append(f"control variate: {cv_n} worlds of its oracle; E[Q] moved by "
                     f"{min(shift):+.2f} .. {max(shift):+.2f} from the oracle's mean on the "
                     f"{n_worlds} worlds" if cv_n else
                     "control variate: not applied (the worlds were every consistent one)")
    if records.has_outcomes:
        final = records["final_points"][i].tolist()
        lines.append(f"outcome: realized value to go {float(r['realized_to_go']):+.0f} "
                     f"(actor frame); final points {final[0]}-{final[1]} (team 0 - team 1)")
    if debug:
        lines += [""] + debug_lines(records, i, hand, max_worlds)
    return lines


def debug_lines(records: DecisionRecords, i: int, hand, max_worlds: int | None) -> list[str]:
    """Per-world Q and weights of record i, heaviest worlds first."""
    import torch

    from ..rules.tables import tile_name
    if not records.has_debug:
        return ["debug: per-world Q and weights were not stored in these records "
                "(regenerate with eqfast-generate --store-worlds)"]
    w, q = records["world_weight"][i], records["world_q"][i]
    legal = records["legal_mask"][i]
    order = [int(k) for k in torch.argsort(w, descending=True, stable=True) if float(w[k]) > 0]
    shown = order if max_worlds is None else order[:max_worlds]
    cols = [k for k in range(len(hand)) if legal[k]]
    lines = [f"debug: {len(order)} worlds with weight > 0 (showing {len(shown)}, heaviest first); "
             "Q per legal move",
             "   world    weight  " + "".join(f"{tile_name(hand[k]):>8}" for k in cols)]
    for n in shown:
        qs = "".join(f"{float(q[n, k]):+8.2f}" for k in cols)
        lines.append(f"  {n:6d}  {float(w[n]):8.5f}  {qs}")
    check = (w[:, None] * q).sum(0)
    lines.append("  weighted mean    " + "".join(f"{float(check[k]):+8.2f}" for k in cols))
    return lines


# ---------------------------------------------------------------------------- navigation
def game_start(records: DecisionRecords, game: int) -> int | None:
    """Index of the first record of game_idx `game`, None if absent."""
    import torch
    hits = torch.nonzero(records["game_idx"] == int(game))[:, 0]
    return int(hits[0]) if len(hits) else None


def neighbour_game(records: DecisionRecords, i: int, step: int) -> int:
    """Record of the same decision (else the first) in the previous/next game (step -1/+1)."""
    import torch
    games = torch.unique(records["game_idx"])            # sorted
    g = int(records["game_idx"][i])
    pos = int(torch.searchsorted(games, torch.tensor(g))) + step
    if not 0 <= pos < len(games):
        return i
    target = int(games[pos])
    same = torch.nonzero((records["game_idx"] == target)
                         & (records["decision_idx"] == records["decision_idx"][i]))[:, 0]
    return int(same[0]) if len(same) else game_start(records, target)


def _interactive(records: DecisionRecords, start: int) -> None:
    import curses

    def prompt(scr, text: str) -> str:
        h, _ = scr.getmaxyx()
        curses.echo()
        curses.curs_set(1)
        scr.move(h - 1, 0)
        scr.clrtoeol()
        scr.addstr(h - 1, 0, text)
        try:
            return scr.getstr(h - 1, len(text), 20).decode(errors="replace").strip()
        finally:
            curses.noecho()
            curses.curs_set(0)

    def loop(scr):
        curses.curs_set(0)
        i, debug, top, msg = start, False, 0, ""
        while True:
            lines = render_record(records, i, debug, max_worlds=None)
            h, w = scr.getmaxyx()
            top = max(0, min(top, len(lines) - (h - 1)))
            scr.erase()
            for row, line in enumerate(lines[top:top + h - 1]):
                scr.addnstr(row, 0, line, w - 1)
            help_line = msg or ("<-/-> record  up/down game  j jump  g game  d debug  "
                                "PgUp/PgDn scroll  q quit")
            scr.addnstr(h - 1, 0, help_line, w - 1, curses.A_REVERSE)
            scr.refresh()
            key, msg = scr.getch(), ""
            if key == ord("q"):
                return
            if key == curses.KEY_RIGHT:
                i, top = min(i + 1, len(records) - 1), 0
            elif key == curses.KEY_LEFT:
                i, top = max(i - 1, 0), 0
            elif key in (curses.KEY_DOWN, curses.KEY_UP):
                i, top = neighbour_game(records, i, 1 if key == curses.KEY_DOWN else -1), 0
            elif key == curses.KEY_NPAGE:
                top += h - 2
            elif key == curses.KEY_PPAGE:
                top = max(0, top - (h - 2))
            elif key == ord("d"):
                debug = not debug
            elif key in (ord("j"), ord("g")):
                what = "record index" if key == ord("j") else "game_idx"
                text = prompt(scr, f"{what}: ")
                try:
                    n = int(text)
                except ValueError:
                    msg = f"not a number: {text!r}"
                    continue
                if key == ord("j"):
                    if 0 <= n < len(records):
                        i, top = n, 0
                    else:
                        msg = f"record index must be in [0, {len(records) - 1}]"
                else:
                    found = game_start(records, n)
                    if found is None:
                        msg = f"no game with game_idx {n} in these records"
                    else:
                        i, top = found, 0

    curses.wrapper(loop)


# ---------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eqfast-view", description="Terminal viewer of eqfast decision records "
        "(transcript by trick, hand, E[Q] +- sigma per legal move, diagnostics).",
        formatter_class=HelpFormatter)
    p.add_argument("path", type=path_type,
                   help="a shard (.safetensors/.json/.pt) or a dataset directory")
    p.add_argument("--split", default="all", help="dataset directory: train, val, test or all")
    p.add_argument("--print", dest="n_print", type=int, default=None, metavar="N",
                   help="print N records to stdout and exit (no curses; the default, with "
                        "N = 1, when stdout is not a terminal)")
    p.add_argument("--start", type=int, default=0, help="first record index")
    p.add_argument("--game", type=int, default=None, help="start at this game_idx")
    p.add_argument("--debug", action="store_true", help="include per-world Q and weights")
    p.add_argument("--skip-shard", action="append", default=[], metavar="[SPLIT/]SHARD",
                   help="leave this shard out (e.g. train/shard_000001-000001; repeatable): "
                        "read the rest of a dataset with a damaged shard; eqfast-generate on "
                        "the directory regenerates it")
    p.add_argument("--coverage", action="store_true",
                   help="dataset directory: list the seed ranges written (whatever process or "
                        "rank wrote them), the unfinished ones and the gaps between them, "
                        "instead of showing records")
    return p


def coverage(root) -> dict:
    """Seed coverage of a dataset directory: complete ranges merged into spans, the
    unfinished ranges (a write that never finished: a resume regenerates them), and the gaps
    between the first and the last seed written."""
    from ..data.shards import completed_seed_ranges, incomplete_seed_ranges

    done = completed_seed_ranges(root)
    spans: list[list[int]] = []
    for lo, hi in done:
        if spans and lo <= spans[-1][1] + 1:
            spans[-1][1] = max(spans[-1][1], hi)
        else:
            spans.append([lo, hi])
    gaps = [[a[1] + 1, b[0] - 1] for a, b in zip(spans, spans[1:])]
    # ranges that share seeds (runs of other batch sizes): each game counts once
    overlaps = []
    for i, a in enumerate(done):                  # sorted by first seed
        for b in itertools.takewhile(lambda b: b[0] <= a[1], done[i + 1:]):
            overlaps.append([list(a), list(b)])
    return {"games": sum(hi - lo + 1 for lo, hi in spans), "shards": len(done),
            "spans": spans, "gaps": gaps, "overlaps": overlaps,
            "unfinished": [list(r) for r in incomplete_seed_ranges(root)]}


@quiet_on_closed_stdout
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from ..data.shards import ShardError, load_records
    if args.coverage:
        if not args.path.is_dir():
            print(f"eqfast-view: --coverage needs a dataset directory, got {args.path}",
                  file=sys.stderr)
            return 2
        c = coverage(args.path)
        if not c["shards"] and not c["unfinished"]:
            print(f"eqfast-view: {args.path}: no eqfast-generate shards (expected "
                  "train/ val/ test/ with shard_*.safetensors and .json)", file=sys.stderr)
            return 2
        span = lambda r: f"{r[0]}..{r[1]}"  # noqa: E731
        print(f"{args.path}: {c['games']} games in {c['shards']} complete seed ranges")
        print("written:    " + (", ".join(span(r) for r in c["spans"]) or "nothing"))
        print("gaps:       " + (", ".join(span(r) for r in c["gaps"]) or "none"))
        print("unfinished: " + (", ".join(span(r) for r in c["unfinished"]) or "none"))
        if c["overlaps"]:
            print("overlaps:   " + ", ".join(f"{span(a)} with {span(b)}" for a, b in c["overlaps"])
                  + " (the readers refuse these: remove one range of each pair)")
            return 1
        return 0
    try:
        records, _ = load_records(args.path, args.split, skip=args.skip_shard)
    except ShardError as e:
        print(f"eqfast-view: {e}", file=sys.stderr)
        return 2
    for name in args.skip_shard:
        print(f"eqfast-view: skipping {name} (--skip-shard): its games are not shown",
              file=sys.stderr)
    if len(records) == 0:
        print(f"eqfast-view: {args.path} (split {args.split}): the shards hold no records",
              file=sys.stderr)
        return 2
    start = args.start
    if args.game is not None:
        found = game_start(records, args.game)
        if found is None:
            print(f"eqfast-view: no game with game_idx {args.game} in {args.path}", file=sys.stderr)
            return 2
        start = found
    if not 0 <= start < len(records):
        print(f"eqfast-view: --start {start} out of [0, {len(records) - 1}]", file=sys.stderr)
        return 2
    if args.n_print is None and sys.stdout.isatty():
        _interactive(records, start)
        return 0
    n = 1 if args.n_print is None else args.n_print
    if n < 0:
        print("eqfast-view: --print N needs N >= 0", file=sys.stderr)
        return 2
    for k, i in enumerate(range(start, min(start + n, len(records)))):
        if k:
            print("-" * 100)
        print("\n".join(render_record(records, i, args.debug)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
