"""`expert`: a hand-written Texas 42 player that plays as a good club player would.

It sees only its seat's information: its own remaining hand, the transcript (who played
which tile, in order), the voids that transcript shows, the declaration and the declarer.
Every decision is a few dozen operations on 28-bit tile masks (Python ints), one game at a
time on the host.

What it knows (`Knowledge`)
---------------------------
- `out`: the tiles neither played nor in its hand (the other three hands together).
- `poss[s]`: the tiles seat s may hold: `out` less every tile that follows a suit s has
  shown void in (a seat that did not follow suit X holds no tile that follows X).
- `held[s]`: tiles s certainly holds, found by counting: every seat holds 7 less the tiles
  it has played; a seat whose possible tiles are exactly that many holds them all, and a
  tile only one seat may hold is that seat's. Both rules repeat until nothing changes.
An opponent can beat a tile of rank r in led suit L when it may hold a tile that outranks
r (`Tables.beat`) and may play it: one that follows L, or any other (a trump) when it may
be void in L, i.e. it is not known to hold a tile that follows L. A tile is a *sure
winner* when no opponent still to play in the trick can beat it; the partner may.

How it plays
------------
Leading:
  1. Draw trumps: while an opponent may hold a trump, lead the boss trump (the highest
     trump out) when it holds it.
  2. Cash sure winners, the most count first (a 5-5 no one can beat collects 10).
  3. Lead a likely winner: the tile with the best chance that the team wins the trick
     (`_p_team_wins_lead`: every outranking tile out must be the partner's, and neither
     opponent may be void with a higher trump), if that chance is at least `LIKELY`;
     off-suit tiles first (an early double usually walks).
  4. On the declaring team with two trumps or more, while an opponent may hold a trump:
     lead its highest countless trump, to pull theirs.
  5. Otherwise the cheapest lead: no count, no trump, the best chance, a low tile.
Following (legal tiles only):
  6. The partner wins the trick for sure (no opponent after the actor can beat its tile):
     give it the tile whose count gains most over keeping it (`_keep_value`: a 5-5 that
     is the boss of its suit brings its count home later anyway; a loose 5-0 does not).
  7. Otherwise the tile of the best expected trick margin less what it is worth kept:
     (2 P(team wins) - 1) x (count in the trick + its count + 1), plus the partner's
     expected feed when the actor's tile wins with the partner still to play, less
     `_keep_value` (count and control; a winner pays only part of its control, which it
     spends on this trick). P(team wins) comes from who may hold what (`_p_beats`).
The weights (`LIKELY`, `KEEP_*`, `Q_*`, `FEED`, `WON`) are set by hand: each choice was
kept when it lowered the regret of the expert's moves against E[Q] labels on its own
self-play positions (deals 6,000,000 on) and did not lose ground in duplicate matches
against `rules` and `eq:default:32` on deals 5,000,000 on; none was fitted on the
league's deals (docs/PLAY.md has its margins).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..rules.tables import (CALLED, FOLLOW_MASK, HAND_SIZE, LED_SUIT, N_DECLS,
                            N_SEATS, N_SUITS, N_TILES, POINTS, RANK)

ALL = (1 << N_TILES) - 1


@dataclass(frozen=True)
class Tables:
    """The rules tables as nested Python lists of ints (indexing a list of ints is ~10x
    faster than a numpy scalar lookup in this per-game host code)."""
    follow: list      # follow[d][s]: mask of tiles that follow led suit s under decl d
    trump: list       # trump[d]: mask of trumps (0 without trump power)
    led: list         # led[d][t]: suit t leads
    rank: list        # rank[d][s][t]
    beat: list        # beat[d][s][r]: mask of tiles whose rank in led suit s exceeds r
    points: list      # points[t]


def _build_tables() -> Tables:
    follow = [[int(FOLLOW_MASK[d, s]) for s in range(N_SUITS)] for d in range(N_DECLS)]
    trump = [follow[d][CALLED] if d <= 7 else 0 for d in range(N_DECLS)]
    led = LED_SUIT.astype(int).tolist()
    rank = RANK.astype(int).tolist()
    beat = [[[sum(1 << u for u in range(N_TILES) if RANK[d, s, u] > r) for r in range(64)]
             for s in range(N_SUITS)] for d in range(N_DECLS)]
    return Tables(follow, trump, led, rank, beat, POINTS.astype(int).tolist())


T = _build_tables()
TILE_BITS = [1 << t for t in range(N_TILES)]
#: a lead that wins for the team at least this often (by `_p_team_wins_lead`) is led
LIKELY = 0.5
#: what a kept trump, the boss trump and an off-suit boss are worth, in points
KEEP_TRUMP, KEEP_BOSS_TRUMP, KEEP_BOSS = 1.5, 2.0, 1.0
#: chance that a kept count tile's points end with the team: boss trump, trump, off-suit
#: boss, any other (`_keep_value`)
Q_BOSS_TRUMP, Q_TRUMP, Q_BOSS, Q_LOOSE = 0.95, 0.7, 0.75, 0.4
#: expected count the partner adds to a trick the team's tile wins, when it plays later
FEED = 2.0
#: share of a winner's kept value that winning this trick realizes (a boss trump that wins
#: now has spent its power on a trick, not wasted it); the last seat wins for certain and
#: pays the whole value, so it wins with its cheapest winner
WON = 0.5


def tiles_in(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


@dataclass
class Knowledge:
    """What the acting seat knows of the hidden hands (module doc)."""
    out: int
    poss: list        # [4] masks; the actor's own entry is its hand
    held: list        # [4] masks of tiles certainly held
    holders: list     # [28] how many other seats may hold each tile (0 for tiles not out)


def infer(d: int, me: int, hand: int, played: int, voids: list, n_left: list) -> Knowledge:
    """Knowledge of seat `me` (module doc). hand: its remaining tiles; played: every tile
    played so far (the current trick's included); voids[s]: 8-bit suit masks; n_left[s]:
    tiles seat s still holds."""
    out = ALL & ~hand & ~played
    poss = [0] * N_SEATS
    for s in range(N_SEATS):
        if s == me:
            poss[s] = hand
            continue
        m, v = out, voids[s]
        while v:
            low = v & -v
            m &= ~T.follow[d][low.bit_length() - 1]
            v ^= low
        poss[s] = m
    held = [0] * N_SEATS
    held[me] = hand
    others = [s for s in range(N_SEATS) if s != me]
    changed = True
    while changed:
        changed = False
        for s in others:
            # a tile only s may hold is s's
            alone = poss[s]
            for o in others:
                if o != s:
                    alone &= ~poss[o]
            if alone & ~held[s]:
                held[s] |= alone
                changed = True
            # s may hold exactly as many tiles as it holds: all of them are s's
            if poss[s] != held[s] and poss[s].bit_count() == n_left[s]:
                held[s] = poss[s]
                for o in others:
                    if o != s and poss[o] & poss[s]:
                        poss[o] &= ~poss[s]
                changed = True
            # s holds its n_left tiles: it holds nothing else
            if held[s].bit_count() == n_left[s] and poss[s] != held[s]:
                poss[s] = held[s]
                changed = True
    holders = [sum(poss[s] >> u & 1 for s in others) for u in range(N_TILES)]
    return Knowledge(out, poss, held, holders)


def can_beat(d: int, led: int, r: int, seat: int, k: Knowledge) -> bool:
    """Seat `seat` may hold and play a tile that outranks rank r in led suit `led`."""
    threat = k.poss[seat] & T.beat[d][led][r]
    if not threat:
        return False
    if threat & T.follow[d][led]:
        return True
    # only tiles that do not follow (trumps): playable only when void in the led suit
    return not (k.held[seat] & T.follow[d][led])


def _cost(d: int, t: int, hand: int, k: Knowledge) -> tuple:
    """Order of tiles to lead when nothing wins (rule 5), cheapest first: count, trump,
    boss (a tile no tile out outranks in its suit), rank, then the longer suit last."""
    led = T.led[d][t]
    r = T.rank[d][led][t]
    boss = not (k.out & T.beat[d][led][r] & T.follow[d][led])
    length = (hand & T.follow[d][led]).bit_count()
    return (T.points[t], bool(T.trump[d] >> t & 1), boss, r, length, t)


def _p_void(d: int, led: int, seat: int, k: Knowledge) -> float:
    """Chance that `seat` holds no tile that follows `led`: each such tile out that it may
    hold is elsewhere with probability 1 - 1 / (seats that may hold it)."""
    if k.held[seat] & T.follow[d][led]:
        return 0.0
    p = 1.0
    for u in tiles_in(k.poss[seat] & T.follow[d][led]):
        if k.held[seat] >> u & 1:
            return 0.0
        p *= 1.0 - 1.0 / k.holders[u]
    return p


def _p_holds(u: int, seat: int, k: Knowledge) -> float:
    """Chance that `seat` holds tile u (out): 1 when certain, else 1 / (the seats that may
    hold it), 0 when it cannot."""
    if k.held[seat] >> u & 1:
        return 1.0
    if not k.poss[seat] >> u & 1:
        return 0.0
    return 1.0 / k.holders[u]


def _p_beats(d: int, led: int, r: int, seat: int, k: Knowledge) -> float:
    """Chance that `seat` can beat rank r in led suit `led`: a following tile that
    outranks it, or, void in the led suit, a trump that does."""
    follow = k.poss[seat] & T.beat[d][led][r] & T.follow[d][led]
    p_none = 1.0
    for u in tiles_in(follow):
        p_none *= 1.0 - _p_holds(u, seat, k)
    ruff = k.poss[seat] & T.beat[d][led][r] & ~T.follow[d][led]
    if not ruff:
        return 1.0 - p_none
    p_no_ruff = 1.0
    for u in tiles_in(ruff):
        p_no_ruff *= 1.0 - _p_holds(u, seat, k)
    p_void = _p_void(d, led, seat, k)
    return p_void * (1.0 - p_no_ruff) + (1.0 - p_void) * (1.0 - p_none)


def _keep_value(d: int, t: int, hand: int, k: Knowledge, used: float = 0.0) -> float:
    """What tile t is worth kept for a later trick, in points of the team's margin
    (hand-set weights): its count, which ends with the team with probability q (a boss
    trump nearly always wins its own trick later, a loose count tile is often lost), so
    keeping it is worth (2q - 1) x count; and the control it gives: a trump wins a later
    trick or ruffs, the boss trump most of all; an off-suit boss may win a later trick."""
    led = T.led[d][t]
    r = T.rank[d][led][t]
    outranked = k.out & T.beat[d][led][r]
    if T.trump[d] >> t & 1:
        boss = not outranked
        q = Q_BOSS_TRUMP if boss else Q_TRUMP
        control = KEEP_TRUMP + (KEEP_BOSS_TRUMP if boss else 0.0) + 0.02 * r
    elif not outranked & T.follow[d][led]:
        q, control = Q_BOSS, KEEP_BOSS
    else:
        q, control = Q_LOOSE, 0.01 * r
    return (2.0 * q - 1.0) * T.points[t] + control * (1.0 - used)


def _p_team_wins_lead(d: int, t: int, me: int, k: Knowledge) -> float:
    """A rough chance that the team wins the trick `me` leads with t: every tile out that
    follows the led suit and outranks t must be the partner's, and no opponent may both be
    void in the led suit and hold an outranking trump (independence assumed throughout)."""
    led = T.led[d][t]
    r = T.rank[d][led][t]
    p = 1.0
    for u in tiles_in(k.out & T.beat[d][led][r] & T.follow[d][led]):
        p *= _p_holds(u, (me + 2) % N_SEATS, k)
        if p == 0.0:
            return 0.0
    ruffs = k.out & T.beat[d][led][r] & ~T.follow[d][led]
    if ruffs:
        for o in ((me + 1) % N_SEATS, (me + 3) % N_SEATS):
            mine = k.poss[o] & ruffs
            if not mine:
                continue
            p_none = 1.0
            for u in tiles_in(mine):
                p_none *= 1.0 - _p_holds(u, o, k)
            p *= 1.0 - _p_void(d, led, o, k) * (1.0 - p_none)
    return p


def expert_lead(d: int, me: int, declarer: int, hand: int, k: Knowledge) -> tuple[int, int]:
    """(tile, rule) of a lead (module doc, rules 1-5)."""
    opps = ((me + 1) % N_SEATS, (me + 3) % N_SEATS)
    mine = tiles_in(hand)
    trumps = T.trump[d]

    def sure(t: int) -> bool:
        led = T.led[d][t]
        r = T.rank[d][led][t]
        return not any(can_beat(d, led, r, o, k) for o in opps)

    opp_trumps = (k.poss[opps[0]] | k.poss[opps[1]]) & trumps
    my_trumps = [t for t in mine if trumps >> t & 1]
    if opp_trumps and my_trumps:                                   # rule 1
        top = max(my_trumps, key=lambda t: T.rank[d][CALLED][t])
        if sure(top):
            return top, 1
    winners = [t for t in mine if sure(t)]
    if winners:                                                    # rule 2
        return min(winners, key=lambda t: (-T.points[t], bool(trumps >> t & 1),
                                           -T.rank[d][T.led[d][t]][t], t)), 2
    # rule 3: the best chance to win, giving away as little as possible
    p = {t: _p_team_wins_lead(d, t, me, k) for t in mine}
    likely = [t for t in mine if p[t] >= LIKELY]
    if likely:
        return min(likely, key=lambda t: (bool(trumps >> t & 1), -p[t], -T.points[t], t)), 3
    if opp_trumps and len(my_trumps) >= 2 and declarer % 2 == me % 2:   # rule 4
        return max(my_trumps, key=lambda t: (-T.points[t], T.rank[d][CALLED][t])), 4
    return min(mine, key=lambda t: (T.points[t] > 0, bool(trumps >> t & 1), -round(p[t], 3),
                                    _cost(d, t, hand, k))), 5


def expert_follow(d: int, me: int, hand: int, legal: list, trick: list,
                  k: Knowledge) -> tuple[int, int]:
    """(tile, rule) of a follow (module doc, rules 6-7)."""
    pos = len(trick)
    leader = (me - pos) % N_SEATS
    led = T.led[d][trick[0]]
    ranks = [T.rank[d][led][t] for t in trick]
    best = max(ranks)
    winner = (leader + ranks.index(best)) % N_SEATS
    later = [(me + i) % N_SEATS for i in range(1, N_SEATS - pos)]
    later_opps = [s for s in later if s % 2 != me % 2]
    count = sum(T.points[t] for t in trick)

    def sure_at(r: int) -> bool:
        return not any(can_beat(d, led, r, o, k) for o in later_opps)

    if winner % 2 == me % 2 and sure_at(best):                     # rule 6
        return max(legal, key=lambda t: (round(T.points[t] - _keep_value(d, t, hand, k), 6),
                                         -t)), 6
    # rule 7: the tile of the best expected trick value less what it is worth kept
    partner = (me + 2) % N_SEATS
    p_partner_pos = {s: i for i, s in enumerate(later)}

    def p_win(t: int) -> float:
        r = T.rank[d][led][t]
        if r > best:                       # the actor's tile would win as things stand
            top, top_seat = r, me
        else:
            top, top_seat = best, winner
        if top_seat % 2 == me % 2:
            p = 1.0
            for o in later_opps:
                p *= 1.0 - _p_beats(d, led, top, o, k)
            return p
        if partner not in p_partner_pos:
            return 0.0
        # the partner must beat the opponent's tile, then hold it against those after it
        p = _p_beats(d, led, top, partner, k)
        for o in later[p_partner_pos[partner] + 1:]:
            p *= 0.5 if p else 1.0
        return p

    feed = FEED if partner in p_partner_pos else 0.0

    def score(t: int) -> float:
        p = p_win(t)
        stake = count + T.points[t] + 1
        mine = T.rank[d][led][t] > best
        extra = feed * p if mine else 0.0
        used = p * WON if mine and later_opps else 0.0
        return (2.0 * p - 1.0) * stake + extra - _keep_value(d, t, hand, k, used)

    best_t = max(legal, key=lambda t: (round(score(t), 6), -t))
    return best_t, 7


class ExpertPolicy:
    """The `expert` player (module doc); a few tens of microseconds a decision."""

    cheating = False
    name = "expert"

    def decide(self, games, seeds, decision):
        B = games.batch_size
        rows = torch.arange(B, device=games.device)
        actor = games.current_player
        hands = games.hands.cpu().numpy()
        remaining = games.remaining.cpu().numpy()
        legal = games.legal_mask().cpu().numpy()
        seats = games.seats.cpu().numpy()
        tiles = games.tiles.cpu().numpy()
        trick = games.trick.cpu().numpy()
        n_plays = games.n_plays.cpu().numpy()
        decl = games.decl.cpu().numpy()
        leader = games.leader.cpu().numpy()
        voids = games.voids.cpu().numpy()
        actor = actor.cpu().numpy()
        out = np.zeros(B, np.int64)
        self.last_rules = np.zeros(B, np.int64)     # the rule behind each move (diagnostics)
        bits = np.arange(HAND_SIZE)
        for g in range(B):
            me, d, n = int(actor[g]), int(decl[g]), int(n_plays[g])
            own = hands[g, me]
            in_hand = (int(remaining[g, me]) >> bits) & 1
            hand = 0
            for t in own[in_hand.astype(bool)].tolist():
                hand |= TILE_BITS[t]
            played = 0
            n_left = (hands[g] >= 0).sum(1).tolist()        # shortened hands pad with -1
            for s, t in zip(seats[g, :n].tolist(), tiles[g, :n].tolist()):
                played |= TILE_BITS[t]
                n_left[s] -= 1
            declarer = int(seats[g, 0]) if n else int(leader[g])
            k = infer(d, me, hand, played, voids[g].tolist(), n_left)
            cur = [int(t) for t in trick[g] if t >= 0]
            if cur:
                legal_tiles = own[legal[g]].tolist()
                tile, rule = expert_follow(d, me, hand, legal_tiles, cur, k)
            else:
                tile, rule = expert_lead(d, me, declarer, hand, k)
            self.last_rules[g] = rule
            out[g] = int(np.flatnonzero(own == tile)[0])
        return torch.from_numpy(out).to(rows.device)


__all__ = ["ExpertPolicy", "Knowledge", "infer", "can_beat", "expert_lead", "expert_follow"]
