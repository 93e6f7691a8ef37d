"""eqfast.analysis.fusion: worlds, E[Q], the exact information-set value V_IS.

V_IS is checked against `brute_force_vis`, written here from the definition alone: it plays
each world with `GameState.play` and enumerates every team strategy (one move per
information set: seat, own hand, all plays so far) over the information sets reachable in
the worlds given. It shares no code with the frontier search.
"""
from __future__ import annotations

import itertools
import json
import random
from fractions import Fraction

import pytest

from eqfast.analysis import fusion
from eqfast.analysis.fusion import (
    FrontierTooLarge, eq_values, information_set_worlds, random_position, vis_values, world_q,
    world_state,
)
from eqfast.rules.state import GameState
from eqfast.rules.tables import FOLLOW_MASK, mask_of, tile_id as T, tiles_of


def brute_force_vis(state: GameState, worlds, move: int, max_strategies: int):
    """V_IS(move) by enumerating every team strategy; None when there are more than
    `max_strategies` of them."""
    team = state.current_player % 2
    sign = 1 if team == 0 else -1
    roots = [world_state(state, w).play(move) for w in worlds]
    infosets: dict = {}

    def collect(s: GameState):
        if s.is_over:
            return
        p, moves = s.current_player, s.legal_moves()
        if p % 2 == team and len(moves) >= 2:
            infosets[(p, s.hands[p], s.plays)] = moves
        for m in moves:
            collect(s.play(m))

    for r in roots:
        collect(r)
    keys = sorted(infosets)
    n = 1
    for k in keys:
        n *= len(infosets[k])
    if n > max_strategies:
        return None

    def value(s: GameState, strategy: dict) -> int:  # final score, actor frame
        if s.is_over:
            return sign * s.score
        p, moves = s.current_player, s.legal_moves()
        if p % 2 == team:
            return value(s.play(strategy.get((p, s.hands[p], s.plays), moves[0])), strategy)
        return min(value(s.play(m), strategy) for m in moves)

    best = max(sum(value(r, dict(zip(keys, choice))) for r in roots)
               for choice in itertools.product(*(infosets[k] for k in keys)))
    return Fraction(best, len(roots)) - sign * state.score


def _decisions(seed: int, tricks: int, count: int):
    """`count` random decisions (>= 2 legal moves) of `fusion.random_position`."""
    out, i = [], 0
    while len(out) < count:
        s = random_position(seed, i, tricks)
        if len(s.legal_moves()) >= 2:
            out.append(s)
        i += 1
    return out


def _true_world(state: GameState):
    return tuple(mask_of(h) for h in state.hands)


# Seats: actor 0 leads, 1 its left opponent (LHO), 2 its partner, 3 its right opponent (RHO).
A10, A55 = T(1, 0), T(5, 5)


def _guess_worlds(lho_last: tuple[int, int], rho_last: tuple[int, int]):
    """The two worlds of the hand-built cases: partner 6-6 + 2-2, LHO 1-1, RHO 3-1 are
    given; which opponent holds which of the two remaining tiles is not."""
    a, b = T(*lho_last), T(*rho_last)
    actor, partner = mask_of([A10, A55]), mask_of([T(6, 6), T(2, 2)])
    return [(actor, mask_of([T(1, 1), a]), partner, mask_of([T(3, 1), b])),
            (actor, mask_of([T(1, 1), b]), partner, mask_of([T(3, 1), a]))]


def _guess_state(worlds):
    return GameState.new([tiles_of(m) for m in worlds[0]], decl=9, leader=0)


def test_six_six_or_two_two_guess():
    """No trumps (decl 9), 2 tricks left, actor (seat 0) to lead holding 1-0 and 5-5.
    Known (say from the bidding): partner holds 6-6 and 2-2, LHO the 1-1, RHO the 3-1.
    Unknown: the 6-4 and 2-0 are split between LHO and RHO: 2 worlds, weight 1/2 each.
    W1: LHO 1-1 6-4, RHO 3-1 2-0.  W2: LHO 1-1 2-0, RHO 3-1 6-4.

    Lead 1-0: LHO must play 1-1, RHO must play 3-1, partner (no one) discards a double;
    1-1 wins (1 point to them) and LHO leads its last tile: 6-4 (W1) or 2-0 (W2). The kept
    double matching that suit takes trick 2 with the 5-5 and 6-4 in it (1 + 10 + 10 = 21);
    the other double loses it, 21 to them.
      Q (partner sees the world, keeps the right double): -1 + 21 = 20 in both worlds.
      E[Q](1-0) = 20.
      V_IS: partner's information set is the same in both worlds (its hand, 1-0 and 1-1
      played), so it keeps one double for both: 20 in one world, -1 - 21 = -22 in the
      other; V_IS(1-0) = (20 - 22) / 2 = -1.
    Lead 5-5: nobody holds a five, so it wins trick 1 (1 + 10 plus what they discard); the
    actor then leads 1-0. The opponents keep the tile that takes trick 2 and the 6-4 under
    it (W1: LHO discards 1-1, RHO keeps 3-1, which beats 1-0; W2: LHO keeps 1-1, RHO keeps
    6-4): 11 to us, 11 to them. The team has no choice that matters.
      Q = 0 in both worlds; E[Q](5-5) = V_IS(5-5) = 0.
    E[Q] picks 1-0 (20 > 0); under consistent play 5-5 is right (0 > -1): a 1-point loss.
    """
    worlds = _guess_worlds((6, 4), (2, 0))
    state = _guess_state(worlds)
    for w in worlds:
        assert world_q(state, w) == {A10: 20, A55: 0}
    assert eq_values(state, worlds) == {A10: 20, A55: 0}
    assert vis_values(state, worlds) == {A10: -1, A55: 0}
    for move in (A10, A55):
        assert brute_force_vis(state, worlds, move, 1 << 11) == vis_values(state, worlds)[move]


def test_no_guess_when_both_leads_are_sixes():
    """The same deal with the 2-0 replaced by the 6-0: LHO's trick-2 lead is a six in both
    worlds (W1: LHO 1-1 6-4, RHO 3-1 6-0; W2: LHO 1-1 6-0, RHO 3-1 6-4).

    Lead 1-0: trick 1 as before (1 to them); partner keeps the 6-6 in both worlds, which
    takes trick 2 (6-4, 5-5, 6-6, 6-0: 21). Q = 20 in both; E[Q] = V_IS = 20.
    Lead 5-5: trick 1 is ours (11), trick 2 theirs with the 6-4 in it (W1: RHO's 3-1 beats
    1-0, LHO discards 1-1 then plays 6-4; W2: LHO's 1-1, RHO's 6-4): Q = 0 in both;
    E[Q] = V_IS = 0. Both pick 1-0.
    """
    worlds = _guess_worlds((6, 4), (6, 0))
    state = _guess_state(worlds)
    for w in worlds:
        assert world_q(state, w) == {A10: 20, A55: 0}
    assert eq_values(state, worlds) == {A10: 20, A55: 0}
    assert vis_values(state, worlds) == {A10: 20, A55: 0}


def test_guess_under_the_full_information_set():
    """Without the assumed knowledge (all 90 splits of the 6 hidden tiles), E[Q] and V_IS
    still disagree on this deal: figures from the solver and the exact search."""
    worlds = _guess_worlds((6, 4), (2, 0))
    state = _guess_state(worlds)
    full = information_set_worlds(state)
    assert len(full) == 90
    eq, vis = eq_values(state, full), vis_values(state, full)
    assert eq == {A10: Fraction(-70, 9), A55: 14}
    assert vis == {A10: Fraction(-392, 45), A55: 14}


def test_worlds_match_a_naive_enumeration():
    """information_set_worlds == every split of the hidden tiles with the right sizes and
    no tile of a shown void, filtered from all permutations; the true world is among them."""
    for state in _decisions(3, 2, 12):
        actor = state.current_player
        voids = state.voids()
        pool = sorted(t for s in range(4) if s != actor for t in state.hands[s])
        others = [s for s in range(4) if s != actor]
        expected = set()
        for perm in itertools.permutations(pool):
            hands, at = [0] * 4, 0
            hands[actor] = mask_of(state.hands[actor])
            for s in others:
                hands[s] = mask_of(perm[at:at + len(state.hands[s])])
                at += len(state.hands[s])
            if all(not hands[s] & int(FOLLOW_MASK[state.decl, v]) for s in others for v in voids[s]):
                expected.add(tuple(hands))
        got = information_set_worlds(state)
        assert len(got) == len(set(got)) and set(got) == expected
        assert _true_world(state) in expected


def test_one_world_means_no_fusion():
    """With one world (everything known) V_IS == E[Q] == the solver's Q, move by move."""
    for tricks in (2, 3):
        for state in _decisions(4, tricks, 6):
            world = [_true_world(state)]
            q = world_q(state, world[0])
            assert eq_values(state, world) == q
            assert vis_values(state, world) == q


@pytest.mark.parametrize("tricks, subset, count", [(2, 8, 30), (3, 2, 40)], ids=["2tricks", "3tricks"])
def test_vis_equals_brute_force(tricks, subset, count):
    """The frontier search equals the enumeration of every team strategy. World subsets of
    the actor's information set keep the enumeration small; the search is exact for any
    world set, and with 3 tricks left the actor's own trick-2 choices couple the worlds
    (the prescription path of the search)."""
    rng = random.Random(tricks)
    compared = coupled = 0
    for state in _decisions(10 + tricks, tricks, count):
        worlds = information_set_worlds(state)
        worlds = rng.sample(worlds, min(subset, len(worlds)))
        vis = vis_values(state, worlds)
        search = fusion._Search(state, worlds, fusion.DEFAULT_LIMIT)
        for move in state.legal_moves():
            expected = brute_force_vis(state, worlds, move, 1 << 11)
            if expected is None:
                continue
            assert vis[move] == expected, (state, move)
            compared += 1
            coupled += search.actor_chooses_later(search.step(search.root, move)[0],
                                                  tuple(range(len(worlds))))
    assert compared >= count // 2, compared
    assert tricks == 2 or coupled >= 10


def test_vis_never_exceeds_eq():
    """Theorem (module docstring): V_IS(a) <= E[Q](a), since a team strategy played in one
    world is one of that world's perfect-information strategies. Equality when the team has
    no decision left (2 tricks left, partner already played in this trick): the only team
    strategy is the forced one, and each world's value is its Q. Checked on full
    information sets."""
    seen_strict = False
    for state in _decisions(5, 2, 40):
        worlds = information_set_worlds(state)
        eq, vis = eq_values(state, worlds), vis_values(state, worlds)
        assert eq.keys() == vis.keys() == set(state.legal_moves())
        assert all(vis[a] <= eq[a] for a in eq)
        if len(state.trick) >= 2:
            assert vis == eq
        seen_strict |= any(vis[a] < eq[a] for a in eq)
    assert seen_strict


def test_refuses_past_the_limit():
    """A 3-trick lead with the full information set is past a tiny limit: it raises."""
    state = next(s for s in _decisions(6, 3, 20) if not s.trick)
    with pytest.raises(FrontierTooLarge):
        vis_values(state, limit=10)


def test_cli_json(capsys):
    assert fusion.main(["--positions", "6", "--tricks", "2", "--seed", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["rows"]
    assert rows["all"]["decisions"] == 6 == sum(rows[f"position {p}"]["decisions"] for p in range(4))
    assert out["draws"] == 6 + out["forced"]
    assert out["too_large"] == [] and rows["all"]["too_large"] == 0
    assert fusion.main(["--positions", "3", "--tricks", "2", "--seed", "1"]) == 0
    assert "| all | 3 |" in capsys.readouterr().out
