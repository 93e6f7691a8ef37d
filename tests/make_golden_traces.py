"""Regenerate the golden rule traces (OpenSpiel-playthrough style) in tests/golden/.

    PYTHONPATH=. python tests/make_golden_traces.py           # rewrite the file
    PYTHONPATH=. python tests/make_golden_traces.py --check   # exit 1 if it would change

For a fixed list of games (seeded deals, every declaration, every leader, two shortened
hands) it plays every step with an action drawn from Philox (eqfast.utils.rng) keyed by
mix_seed(GOLDEN_SEED, game) at counter = step, so the traces depend on nothing but the
rules, the deal algorithm and the Philox reference. Each step records the state summary,
the legal moves, the action and the next state summary (points and voids included).
tests/test_rules_golden.py replays the file through GameState and BatchedGames.

Only regenerate after an intended rules change, and review the diff: the file is the
record of what the rules did before.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from eqfast.rules import GameState, deal_from_seed, mix_seed
from eqfast.utils.atomic import atomic_write_text
from eqfast.utils.rng import uniform_u64

GOLDEN_PATH = Path(__file__).parent / "golden" / "rules_traces.json"
GOLDEN_SEED = 42_4242
FORMAT_VERSION = 1

#: (deal seed, decl, leader, tiles per seat). Decls 0..9 once each with leaders cycling
#: through 0..3, then two shortened hands (the k lowest tiles of each seat of the deal).
GAMES = [(1000 + d, d, d % 4, 7) for d in range(10)] + [(2001, 5, 3, 3), (2002, 8, 1, 4)]


def summarize(state: GameState) -> dict:
    """The public-and-private state of a game as plain JSON values."""
    return {
        "hands": [list(h) for h in state.hands],
        "leader": state.leader,
        "player": None if state.is_over else state.current_player,
        "trick": list(state.trick),
        "points": list(state.points),
        "voids": [sorted(v) for v in state.voids()],
        "over": state.is_over,
    }


def pick(game: int, step: int, n: int) -> int:
    """Index in [0, n) drawn from Philox keyed by (GOLDEN_SEED, game) at counter `step`."""
    key = torch.tensor(mix_seed(GOLDEN_SEED, game), dtype=torch.int64)
    return int(uniform_u64(key, torch.tensor(step, dtype=torch.int64))) % n


def trace_game(game: int, seed: int, decl: int, leader: int, k: int) -> dict:
    hands = deal_from_seed(seed)[:, :k].tolist()
    state = GameState.new(hands, decl, leader)
    steps = []
    while not state.is_over:
        legal = state.legal_moves()
        action = legal[pick(game, len(steps), len(legal))]
        nxt = state.play(action)
        steps.append({"state": summarize(state), "legal": legal, "action": action,
                      "next": summarize(nxt)})
        state = nxt
    return {"game": game, "seed": seed, "decl": decl, "leader": leader, "k": k,
            "hands": hands, "steps": steps}


def build_traces() -> dict:
    return {"format": FORMAT_VERSION, "golden_seed": GOLDEN_SEED,
            "games": [trace_game(g, *spec) for g, spec in enumerate(GAMES)]}


def dumps(traces: dict) -> str:
    """Compact JSON with one step per line, so a rules change reads as a small diff."""
    games = []
    for g in traces["games"]:
        head = {k: v for k, v in g.items() if k != "steps"}
        steps = ",\n".join("    " + json.dumps(s, separators=(",", ":")) for s in g["steps"])
        games.append(json.dumps(head, separators=(",", ":"))[:-1] + ',"steps":[\n' + steps + "\n  ]}")
    head = {k: v for k, v in traces.items() if k != "games"}
    return (json.dumps(head, separators=(",", ":"))[:-1] + ',"games":[\n  '
            + ",\n  ".join(games) + "\n]}\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=GOLDEN_PATH)
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args(argv)
    text = dumps(build_traces())
    if args.check:
        same = args.out.exists() and args.out.read_text() == text
        print(f"{args.out}: {'up to date' if same else 'DIFFERS from the regenerated traces'}")
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, text)
    print(f"wrote {args.out} ({len(text.encode()) / 1024:.0f} KiB, {len(GAMES)} games)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
