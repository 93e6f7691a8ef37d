"""Strategy fusion on small endgames: E[Q] against the information-set-consistent value.

The E[Q] engine scores a move a of the acting seat by E[Q](a), the mean over the worlds the
actor cannot tell apart of the perfect-information Q(a) in each world. Q lets every later
decision of the actor's team see that world's hidden hands ("strategy fusion"), so E[Q] can
prefer a move that only pays off when a later guess is made right in every world. This
module measures that gap exactly on endgames small enough to enumerate (docs/FUSION.md).

Definitions (all values in the actor frame: the actor's team's points minus the opponents'
from the position to the end of the hand, docs/RULES.md "Values the engine computes"):

- Worlds W: every assignment of the hidden tiles (the tiles in play minus the actor's hand
  and the tiles played) to the other three seats with their hand sizes, such that no seat
  holds a tile of a suit it has shown void in. Each world has weight 1/|W|: the record of
  play says nothing more for certain (docs/RULES.md, "Leading, following, voids"), and
  uniform weights keep the measure free of any card-play model.
- E[Q](a) = (1/|W|) * sum over w of Q_w(a), Q from the exact solver (eqfast.solver).
- V_IS(a) = max over team strategies s of (1/|W|) * sum over w of val_w(a, s), where a team
  strategy maps each information set of the actor and of its partner to one legal move,
  and val_w(a, s) is the value when the actor plays a, the team follows s, and the
  opponents minimize in world w knowing w (and s). A team information set is what its
  player knows when it is to play: its own hand and every play so far. The actor's hand is
  the same in every world, so its later information sets are the public histories; the
  partner's are (public history, partner's hand), finer than the actor's.

Opponents are "paranoid" (the best-defence model): they see every hand and best-respond to
the team's strategy in each world separately. That is the model under which Q itself is
computed (the solver's opponents see everything), so E[Q] and V_IS differ only in what the
team may know, which is the quantity of interest; it is also the only opponent model whose
value does not depend on an assumed opponent belief. The theorem V_IS(a) <= E[Q](a)
follows: a team strategy played in one world is a pure strategy of that world's perfect-
information game, so val_w(a, s) <= Q_w(a) for every s and w (Zermelo: Q_w(a) is the best
such value against a minimizer who sees w), and averaging keeps the inequality.

Method (exact): V_IS is computed on the public tree (nodes = public play histories), each
node carrying the subset S of worlds in which its history is a legal play sequence. F(h, S)
is the set of value vectors (one entry per world of S) that some team strategy of the
subtree achieves against per-world best responses, kept as its Pareto frontier:

- actor to play (one information set for all of S): the union over its moves of the
  children's sets;
- opponent to play: in each world it picks the move that minimizes, and the team's play in
  different child subtrees is independent (different public histories are different
  information sets), so F = { pointwise min over the moves legal in w of f_m[w] : one
  f_m from each child's set };
- partner to play: the worlds split by the partner's hand, one information set each; a
  "prescription" gives each group one legal move, the worlds of the groups that play m go
  on to child m, and F = union over prescriptions of the product of the children's sets
  (projected on those worlds). With a single group this is the plain union.

Every operation (union, pointwise min, concatenation, the final mean) is monotone, so
dropping a vector dominated by another in the same set never changes the final maximum;
the frontier is therefore exact, not a heuristic (unlike vector minimaxing, which keeps one
vector per node). V_IS(a) = reward(a) + max over F(h + a, W) of the mean.

Decomposition: when the actor has no later decision with two legal moves (every endgame
with 2 tricks left: the last trick is forced), every remaining team information set is the
partner's and contains the partner's hand, so worlds with different partner hands share no
information set: the team strategy is a product of one strategy per partner hand and the
objective a sum over those groups, whose maximum is the sum of the groups' maxima. Each
group is then solved on its own (a single group at every partner node: plain unions).

Complexity and sizes: 2 tricks left: |W| <= 90 (6 hidden tiles, 2 a seat), at most 15
partner-hand groups of <= 6 worlds, each a tree of a few dozen nodes; a decision (E[Q] and
V_IS of every move) takes about 20 ms. 3 tricks left: |W| <= 1680, and the actor's trick-2
decisions couple every partner hand, so a partner node enumerates prescriptions over up to
56 groups and an opponent node the products of its children's frontiers: exponential, as
the problem is (finding the best strategy in this best-defence model is NP-hard in
general). The search raises `FrontierTooLarge` past `limit` combinations at one node rather
than return an approximation; `study` counts those decisions and leaves them out.
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from ..rules.deal import deal_from_seed, mix_seed
from ..rules.state import GameState, trick_points, trick_winner
from ..rules.tables import FOLLOW_MASK, LED_SUIT, N_SEATS, N_SUITS, N_TILES, mask_of, tiles_of
from ..solver import q_values

#: Default cap on the vector combinations one node of the frontier search may form.
DEFAULT_LIMIT = 200_000


class FrontierTooLarge(RuntimeError):
    """The exact search would form more than `limit` vector combinations at one node."""


# --------------------------------------------------------------------------- worlds

def information_set_worlds(state: GameState) -> list[tuple[int, int, int, int]]:
    """Every world consistent with what the seat to play knows, as 4 hand masks (current
    hands, seat order; the actor's entry is its own hand). Ordered deterministically.

    Hidden tiles: the tiles still in play (all current hands; for a full deal, the 28
    tiles minus those played) minus the actor's hand. A seat void in suit s (state.voids)
    holds no tile of FOLLOW_MASK[decl, s]."""
    if state.is_over:
        raise ValueError("the hand is over: no decision")
    actor = state.current_player
    own = mask_of(state.hands[actor])
    pool = 0
    for h in state.hands:
        pool |= mask_of(h)
    pool &= ~own
    voids = state.voids()
    others = [(actor + 1 + j) % N_SEATS for j in range(3)]
    sizes = [len(state.hands[s]) for s in others]
    allowed = []
    for s in others:
        forbidden = 0
        for suit in voids[s]:
            forbidden |= int(FOLLOW_MASK[state.decl, suit])
        allowed.append(pool & ~forbidden)
    worlds = []
    pool_tiles = tiles_of(pool)
    for first in itertools.combinations([t for t in pool_tiles if allowed[0] >> t & 1], sizes[0]):
        m0 = mask_of(first)
        rest = [t for t in pool_tiles if not m0 >> t & 1]
        for second in itertools.combinations([t for t in rest if allowed[1] >> t & 1], sizes[1]):
            m1 = mask_of(second)
            m2 = pool & ~m0 & ~m1
            if m2 & ~allowed[2]:
                continue
            hands = [0] * N_SEATS
            hands[actor], hands[others[0]], hands[others[1]], hands[others[2]] = own, m0, m1, m2
            worlds.append(tuple(hands))
    return worlds


def world_state(state: GameState, world: Sequence[int]) -> GameState:
    """`state` with its hands replaced by those of `world` (same plays, trick, points)."""
    hands = tuple(tuple(tiles_of(m)) for m in world)
    return GameState(hands, state.decl, state.leader, state.trick, state.plays, state.points)


# --------------------------------------------------------------------------- E[Q]

def world_q(state: GameState, world: Sequence[int]) -> dict[int, int]:
    """Exact perfect-information Q of every legal move in one world (actor frame)."""
    return q_values([tiles_of(m) for m in world], state.decl, state.leader, state.trick,
                    actor_frame=True)


def eq_values(state: GameState, worlds: Sequence[Sequence[int]]) -> dict[int, Fraction]:
    """E[Q] of every legal move: the uniform mean of the solver's Q over `worlds`."""
    if not worlds:
        raise ValueError("no worlds")
    total: dict[int, int] = {}
    for w in worlds:
        for a, q in world_q(state, w).items():
            total[a] = total.get(a, 0) + q
    return {a: Fraction(v, len(worlds)) for a, v in sorted(total.items())}


# --------------------------------------------------------------------------- V_IS

def _prune(vectors) -> list[tuple[int, ...]]:
    """Pareto frontier (pointwise >=) of `vectors`, duplicates removed.

    A vector that dominates another and differs from it has a larger sum, so scanning by
    decreasing sum only has to compare each vector with those already kept."""
    kept: list[tuple[int, ...]] = []
    for v in sorted(set(vectors), key=sum, reverse=True):
        if not any(all(k >= x for k, x in zip(u, v)) for u in kept):
            kept.append(v)
    return kept


def _project(vectors, positions) -> list[tuple[int, ...]]:
    return _prune(tuple(v[i] for i in positions) for v in vectors)


class _Search:
    """The frontier search of one decision (see the module docstring)."""

    def __init__(self, state: GameState, worlds: Sequence[Sequence[int]], limit: int):
        self.decl = state.decl
        self.actor = state.current_player
        self.partner = (self.actor + 2) % N_SEATS
        self.worlds = [tuple(int(m) for m in w) for w in worlds]
        self.limit = limit
        self.follow = [int(FOLLOW_MASK[self.decl, s]) for s in range(N_SUITS)]
        self.led = [int(LED_SUIT[self.decl, t]) for t in range(N_TILES)]
        self.memo: dict = {}
        self.root = (state.leader, tuple(state.trick), 0)
        own = mask_of(state.hands[self.actor])
        if any(w[self.actor] != own for w in self.worlds):
            raise ValueError("every world must give the actor its own hand")

    # positions are (leader, trick tiles, mask of tiles played since the root)
    def legal(self, hand: int, trick: tuple[int, ...]) -> int:
        if not trick:
            return hand
        follow = hand & self.follow[self.led[trick[0]]]
        return follow or hand

    def step(self, pos, tile: int):
        """(next position, points of a trick `tile` completes, actor frame)."""
        leader, trick, played = pos
        trick = trick + (tile,)
        played |= 1 << tile
        if len(trick) < N_SEATS:
            return (leader, trick, played), 0
        winner = trick_winner(self.decl, leader, trick)
        pts = trick_points(trick)
        return (winner, (), played), (pts if winner % 2 == self.actor % 2 else -pts)

    def hand(self, w: int, seat: int, played: int) -> int:
        return self.worlds[w][seat] & ~played

    def actor_chooses_later(self, pos, S: tuple[int, ...], seen=None) -> bool:
        """Whether the actor has a decision with >= 2 legal moves below `pos` in some world."""
        seen = set() if seen is None else seen
        if (pos, S) in seen:
            return False
        seen.add((pos, S))
        leader, trick, played = pos
        seat = (leader + len(trick)) % N_SEATS
        hands = {w: self.hand(w, seat, played) for w in S}
        if not trick and not any(hands.values()):
            return False
        if seat == self.actor and bin(self.legal(hands[S[0]], trick)).count("1") >= 2:
            return True
        moves: dict[int, list[int]] = {}
        for w in S:
            for t in tiles_of(self.legal(hands[w], trick)):
                moves.setdefault(t, []).append(w)
        return any(self.actor_chooses_later(self.step(pos, t)[0], tuple(ws), seen)
                   for t, ws in moves.items())

    def frontier(self, pos, S: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Pareto frontier of the achievable value vectors over worlds S below `pos`."""
        key = (pos, S)
        if key not in self.memo:
            self.memo[key] = self._frontier(pos, S)
        return self.memo[key]

    def _child(self, pos, tile: int, S: tuple[int, ...]) -> list[tuple[int, ...]]:
        nxt, reward = self.step(pos, tile)
        f = self.frontier(nxt, S)
        return [tuple(x + reward for x in v) for v in f] if reward else f

    def _check(self, n: int) -> None:
        if n > self.limit:
            raise FrontierTooLarge(f"{n} combinations at one node (limit {self.limit})")

    def _frontier(self, pos, S):
        leader, trick, played = pos
        seat = (leader + len(trick)) % N_SEATS
        hands = [self.hand(w, seat, played) for w in S]
        if not trick and not any(hands):
            return [(0,) * len(S)]
        if seat == self.actor:
            legal = self.legal(hands[0], trick)
            return _prune(v for t in tiles_of(legal) for v in self._child(pos, t, S))
        if seat == self.partner:
            return self._partner(pos, S, hands)
        return self._opponent(pos, S, hands)

    def _opponent(self, pos, S, hands):
        trick = pos[1]
        moves: dict[int, list[int]] = {}  # tile -> positions in S of the worlds where legal
        for i, h in enumerate(hands):
            for t in tiles_of(self.legal(h, trick)):
                moves.setdefault(t, []).append(i)
        tiles = sorted(moves)
        children = [self._child(pos, t, tuple(S[i] for i in moves[t])) for t in tiles]
        n = 1
        for f in children:
            n *= len(f)
        self._check(n)
        # where[i]: (child index, index of world i in that child's vectors) for each move
        where: list[list[tuple[int, int]]] = [[] for _ in S]
        for c, t in enumerate(tiles):
            for j, i in enumerate(moves[t]):
                where[i].append((c, j))
        out = []
        for combo in itertools.product(*children):
            out.append(tuple(min(combo[c][j] for c, j in where[i]) for i in range(len(S))))
        return _prune(out)

    def _partner(self, pos, S, hands):
        trick = pos[1]
        groups: dict[int, list[int]] = {}  # partner hand -> positions in S
        for i, h in enumerate(hands):
            groups.setdefault(h, []).append(i)
        if len(groups) == 1:
            legal = self.legal(hands[0], trick)
            return _prune(v for t in tiles_of(legal) for v in self._child(pos, t, S))
        group_list = sorted(groups)
        options = [tiles_of(self.legal(h, trick)) for h in group_list]
        reach: dict[int, list[int]] = {}  # tile -> positions in S of the groups that may play it
        for h, opts in zip(group_list, options):
            for t in opts:
                reach.setdefault(t, []).extend(groups[h])
        for t in reach:
            reach[t].sort()
        child = {t: self._child(pos, t, tuple(S[i] for i in reach[t])) for t in reach}
        n_presc = 1
        for opts in options:
            n_presc *= len(opts)
        self._check(n_presc)
        out = []
        formed = 0
        for presc in itertools.product(*options):
            chosen: dict[int, list[int]] = {}
            for h, t in zip(group_list, presc):
                chosen.setdefault(t, []).extend(groups[h])
            parts = []
            n = 1
            for t, idx in chosen.items():
                idx.sort()
                at = {i: j for j, i in enumerate(reach[t])}
                parts.append((idx, _project(child[t], [at[i] for i in idx])))
                n *= len(parts[-1][1])
            formed += n
            self._check(formed)
            for combo in itertools.product(*(p[1] for p in parts)):
                v = [0] * len(S)
                for (idx, _), vec in zip(parts, combo):
                    for i, x in zip(idx, vec):
                        v[i] = x
                out.append(tuple(v))
        return _prune(out)

    def value(self, tile: int) -> Fraction:
        """V_IS of the actor's move `tile`."""
        nxt, reward = self.step(self.root, tile)
        S = tuple(range(len(self.worlds)))
        if self.actor_chooses_later(nxt, S):
            parts = [S]
        else:
            # no actor decision left: partner hands never share an information set
            groups: dict[int, list[int]] = {}
            for w in S:
                groups.setdefault(self.worlds[w][self.partner], []).append(w)
            parts = [tuple(g) for _, g in sorted(groups.items())]
        total = sum(max(sum(v) for v in self.frontier(nxt, part)) for part in parts)
        return reward + Fraction(total, len(S))


def vis_values(state: GameState, worlds: Sequence[Sequence[int]] | None = None,
               limit: int = DEFAULT_LIMIT) -> dict[int, Fraction]:
    """V_IS of every legal move of the seat to play, over `worlds` (default: its
    information set, `information_set_worlds`), uniform weights. Exact; raises
    FrontierTooLarge where the search would exceed `limit` combinations at one node."""
    worlds = information_set_worlds(state) if worlds is None else list(worlds)
    if not worlds:
        raise ValueError("no worlds")
    search = _Search(state, worlds, limit)
    return {a: search.value(a) for a in state.legal_moves()}


# --------------------------------------------------------------------------- the study

@dataclass
class Decision:
    """One measured decision: E[Q] and V_IS of every legal move."""

    index: int
    decl: int
    actor: int
    position: int  # plays already in the current trick (0: the actor leads)
    n_worlds: int
    eq: dict[int, Fraction]
    vis: dict[int, Fraction]

    @property
    def eq_best(self) -> list[int]:
        top = max(self.eq.values())
        return [a for a, v in self.eq.items() if v == top]

    @property
    def vis_best(self) -> list[int]:
        top = max(self.vis.values())
        return [a for a, v in self.vis.items() if v == top]

    @property
    def loss_worst(self) -> Fraction:
        """V_IS lost by E[Q]'s choice when its ties break worst."""
        return max(self.vis.values()) - min(self.vis[a] for a in self.eq_best)

    @property
    def loss_best(self) -> Fraction:
        """V_IS lost by E[Q]'s choice when its ties break best (> 0: every E[Q] argmax loses)."""
        return max(self.vis.values()) - max(self.vis[a] for a in self.eq_best)

    @property
    def loss_low_id(self) -> Fraction:
        """V_IS lost by the lowest-tile-id E[Q] argmax (the solver's tie rule)."""
        return max(self.vis.values()) - self.vis[min(self.eq_best)]


def random_position(seed: int, index: int, tricks: int) -> GameState:
    """Deal `mix_seed(seed, index)` played uniformly at random down to `tricks` tricks left
    (the current, possibly started, trick counted), then 0-3 more random plays into it."""
    rng = random.Random(mix_seed(seed, index))
    state = GameState.new(deal_from_seed(mix_seed(seed, index, 1)).tolist(),
                          decl=rng.randrange(10), leader=rng.randrange(N_SEATS))
    target = N_SEATS * (7 - tricks) + rng.randrange(N_SEATS)
    while len(state.plays) < target:
        state = state.play(rng.choice(state.legal_moves()))
    return state


def measure(state: GameState, index: int = 0, limit: int = DEFAULT_LIMIT) -> Decision:
    worlds = information_set_worlds(state)
    return Decision(index, state.decl, state.current_player, len(state.trick), len(worlds),
                    eq_values(state, worlds), vis_values(state, worlds, limit))


def study(positions: int, tricks: int, seed: int, limit: int = DEFAULT_LIMIT) -> dict:
    """Measure `positions` decisions (positions with >= 2 legal moves; forced ones are
    drawn again and counted; those past `limit` are counted in `too_large` and left out of
    the figures) and summarize; see `format_table`."""
    decisions: list[Decision] = []
    too_large: list[tuple[int, int]] = []  # (index, position) of the decisions given up
    forced = 0
    index = 0
    start = time.perf_counter()
    while len(decisions) + len(too_large) < positions:
        state = random_position(seed, index, tricks)
        if len(state.legal_moves()) < 2:
            forced += 1
        else:
            try:
                decisions.append(measure(state, index, limit))
            except FrontierTooLarge:
                too_large.append((index, len(state.trick)))
        index += 1
    rows = {}
    for name, where in [("all", range(N_SEATS))] + [(f"position {p}", (p,)) for p in range(N_SEATS)]:
        rows[name] = _summary([d for d in decisions if d.position in where])
        rows[name]["too_large"] = sum(p in where for _, p in too_large)
    return {"positions": positions, "tricks": tricks, "seed": seed, "limit": limit,
            "draws": index, "forced": forced, "too_large": too_large,
            "seconds": round(time.perf_counter() - start, 1), "rows": rows,
            "worst": _worst(decisions)}


def _summary(ds: list[Decision]) -> dict:
    n = len(ds)
    if not n:
        return {"decisions": 0}
    worst = [d.loss_worst for d in ds]
    low = [d.loss_low_id for d in ds]
    gap = [max(d.eq.values()) - max(d.vis.values()) for d in ds]
    return {
        "decisions": n,
        "mean_worlds": round(sum(d.n_worlds for d in ds) / n, 1),
        "fusion_free": sum(d.eq == d.vis for d in ds),
        "argmax_disjoint": sum(d.loss_best > 0 for d in ds),
        "argmax_tie_dependent": sum(d.loss_best == 0 < d.loss_worst for d in ds),
        "loss_low_id_mean": round(float(sum(low) / n), 4),
        "loss_low_id_max": round(float(max(low)), 4),
        "loss_worst_tie_mean": round(float(sum(worst) / n), 4),
        "loss_worst_tie_max": round(float(max(worst)), 4),
        "optimism_mean": round(float(sum(gap) / n), 4),
        "optimism_max": round(float(max(gap)), 4),
    }


def _worst(ds: list[Decision]) -> dict | None:
    if not ds:
        return None
    d = max(ds, key=lambda d: (d.loss_worst, -d.index))
    return {"index": d.index, "decl": d.decl, "actor": d.actor, "position": d.position,
            "worlds": d.n_worlds, "eq": {a: str(v) for a, v in d.eq.items()},
            "vis": {a: str(v) for a, v in d.vis.items()}, "loss": str(d.loss_worst)}


COLUMNS = (
    ("decisions", "decisions"), ("too_large", "too large"), ("mean_worlds", "mean |W|"),
    ("fusion_free", "V_IS = E[Q]"),
    ("argmax_disjoint", "argmax differ"), ("argmax_tie_dependent", "differ by tie"),
    ("loss_low_id_mean", "loss mean"), ("loss_low_id_max", "loss max"),
    ("loss_worst_tie_mean", "loss mean (worst tie)"), ("loss_worst_tie_max", "loss max (worst tie)"),
    ("optimism_mean", "E[Q]-V_IS mean"), ("optimism_max", "E[Q]-V_IS max"),
)


def format_table(result: dict) -> str:
    """The study as a Markdown table (one row per trick position, and all)."""
    lines = [
        f"positions={result['positions']} tricks={result['tricks']} seed={result['seed']} "
        f"draws={result['draws']} forced={result['forced']} too_large={len(result['too_large'])} "
        f"({result['seconds']} s)",
        "",
        "| rows | " + " | ".join(title for _, title in COLUMNS) + " |",
        "| --- |" + " --- |" * len(COLUMNS),
    ]
    for name, row in result["rows"].items():
        cells = [str(row.get(key, "")) for key, _ in COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m eqfast.analysis.fusion",
        description="E[Q] against the information-set-consistent value V_IS on random endgames "
                    "(docs/FUSION.md).")
    p.add_argument("--positions", type=int, default=200, help="decisions to measure (>= 2 legal moves)")
    p.add_argument("--tricks", type=int, default=2, choices=(1, 2, 3), help="tricks left, current one counted")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                   help="combinations one node of the exact search may form before it gives up")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    if args.positions < 1:
        p.error("--positions must be >= 1")
    result = study(args.positions, args.tricks, args.seed, args.limit)
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
