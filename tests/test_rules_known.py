"""Hand-traced known answers for the play rules, every declaration 0..9.

Every expected value below was worked out by hand from docs/RULES.md, not by
running the code: tiles are written as "high-low" names and turned into ids with the
docs/RULES.md formula id = high*(high+1)/2 + low (not with eqfast's own helper). Each case is
checked three ways: the tables, the immutable `GameState`, and the batched `BatchedGames`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from eqfast.rules import BatchedGames, GameState, legal_tiles, trick_points, trick_winner
from eqfast.rules.tables import FOLLOWS, HIGH, IN_CALLED, IS_DOUBLE, LED_SUIT, LOW, POINTS

CALLED = 7  # the led-suit index of the called suit (docs/RULES.md: 0..6 pips, then the called suit)


def tid(name: str) -> int:
    """Tile id of "h-l" by the docs/RULES.md formula."""
    h, l = (int(x) for x in name.split("-"))
    assert 6 >= h >= l >= 0, name
    return h * (h + 1) // 2 + l


def tids(names: str) -> list[int]:
    return [tid(n) for n in names.split()]


# ---------------------------------------------------------------------------- tiles
def test_tile_numbering_and_count():
    # docs/RULES.md: 0:(0,0) 1:(1,0) 2:(1,1) 3:(2,0) 4:(2,1) 5:(2,2) 6:(3,0) 15:(5,0) 20:(5,5)
    # 26:(6,5) 27:(6,6)
    for t, (h, l) in {0: (0, 0), 1: (1, 0), 2: (1, 1), 3: (2, 0), 4: (2, 1), 5: (2, 2),
                      6: (3, 0), 15: (5, 0), 20: (5, 5), 26: (6, 5), 27: (6, 6)}.items():
        assert (HIGH[t], LOW[t]) == (h, l), t
    assert IS_DOUBLE.sum() == 7 and list(np.nonzero(IS_DOUBLE)[0]) == [0, 2, 5, 9, 14, 20, 27]
    count = {tid("5-5"): 10, tid("6-4"): 10, tid("5-0"): 5, tid("4-1"): 5, tid("3-2"): 5}
    for t in range(28):
        assert POINTS[t] == count.get(t, 0), t
    assert int(POINTS.sum()) + 7 == 42


@pytest.mark.parametrize("decl, members", [
    (0, "0-0 1-0 2-0 3-0 4-0 5-0 6-0"),
    (1, "1-0 1-1 2-1 3-1 4-1 5-1 6-1"),
    (2, "2-0 2-1 2-2 3-2 4-2 5-2 6-2"),
    (3, "3-0 3-1 3-2 3-3 4-3 5-3 6-3"),
    (4, "4-0 4-1 4-2 4-3 4-4 5-4 6-4"),
    (5, "5-0 5-1 5-2 5-3 5-4 5-5 6-5"),
    (6, "6-0 6-1 6-2 6-3 6-4 6-5 6-6"),
    (7, "0-0 1-1 2-2 3-3 4-4 5-5 6-6"),
    (8, "0-0 1-1 2-2 3-3 4-4 5-5 6-6"),
    (9, ""),
], ids=lambda x: str(x) if isinstance(x, int) else None)
def test_called_suit_members(decl, members):
    assert sorted(np.nonzero(IN_CALLED[decl])[0].tolist()) == sorted(tids(members))


def test_called_suit_tile_belongs_only_to_it():
    # fives trump: the 5-3 is a trump, never a three; it leads the called suit
    assert LED_SUIT[5, tid("5-3")] == CALLED
    assert FOLLOWS[5, CALLED, tid("5-3")] and not FOLLOWS[5, 3, tid("5-3")]
    assert not FOLLOWS[5, 5, tid("5-3")]
    # doubles as a suit: the 3-3 is a double, never a three
    assert LED_SUIT[8, tid("3-3")] == CALLED and not FOLLOWS[8, 3, tid("3-3")]
    # no trump: the 3-3 is a three; the 6-3 leads sixes but follows a three lead
    assert LED_SUIT[9, tid("3-3")] == 3 and FOLLOWS[9, 3, tid("3-3")]
    assert LED_SUIT[9, tid("6-3")] == 6 and FOLLOWS[9, 3, tid("6-3")]


# ---------------------------------------------------------------------------- tricks
@dataclass(frozen=True)
class Trick:
    decl: int
    leader: int
    tiles: str  # four tiles in play order, from the leader
    led: int  # expected led suit (0..6 pip, 7 called)
    winner: int  # expected winning seat
    why: str

    @property
    def id(self):
        return f"d{self.decl}-L{self.leader}-{self.tiles.replace(' ', '_')}"


TRICKS = [
    # decl 0: blanks trump
    Trick(0, 0, "6-6 6-5 6-4 5-4", 6, 0, "non-trump double leads sixes and is the top six"),
    Trick(0, 1, "3-0 6-0 0-0 6-6", CALLED, 3, "trump lead; 0-0 is the top trump; 6-6 is off"),
    Trick(0, 2, "6-5 6-6 5-5 1-0", 6, 1, "the low trump 1-0 beats the 6-6"),
    Trick(0, 3, "4-2 4-3 6-4 5-5", 4, 1, "by pip sum among fours: 6-4 (10); 5-5 cannot win"),
    # decl 1: ones trump
    Trick(1, 0, "4-4 6-4 4-1 4-0", 4, 2, "4-1 is a trump, not a four, and wins"),
    Trick(1, 0, "6-1 1-1 5-1 6-6", CALLED, 1, "the 1-1 is the top trump"),
    Trick(1, 3, "6-5 6-6 1-0 6-4", 6, 1, "the low trump 1-0 beats the 6-6"),
    Trick(1, 1, "3-2 2-2 3-0 3-3", 3, 0, "3-2 leads threes (high pip); 3-3 tops; 2-2 is off"),
    # decl 2: twos trump
    Trick(2, 0, "2-2 6-2 6-6 5-2", CALLED, 0, "the trump double leads and is highest"),
    Trick(2, 2, "3-2 2-0 6-2 5-5", CALLED, 0, "trumps by pip sum: 6-2 (8) > 3-2 (5) > 2-0"),
    Trick(2, 1, "5-4 5-5 2-0 5-3", 5, 3, "the lowest trump 2-0 beats the 5-5"),
    Trick(2, 0, "6-3 6-0 6-5 3-3", 6, 2, "6-5 (11) tops the sixes; 3-3 is off"),
    # decl 3: threes trump
    Trick(3, 0, "5-5 5-3 6-5 5-0", 5, 1, "5-3 is a trump here and beats the 5-5"),
    Trick(3, 3, "3-3 6-3 4-3 3-0", CALLED, 3, "the trump double wins"),
    Trick(3, 0, "6-6 6-5 6-4 3-0", 6, 3, "the lowest trump 3-0 beats the 6-6"),
    Trick(3, 2, "1-0 1-1 6-1 2-0", 1, 3, "1-1 tops the ones; 2-0 is off"),
    # decl 4: fours trump
    Trick(4, 1, "0-0 6-0 4-0 1-0", 0, 3, "4-0 is a trump, not a blank, and wins"),
    Trick(4, 0, "6-4 4-4 5-4 4-0", CALLED, 1, "the 4-4 is the top trump"),
    Trick(4, 2, "6-5 6-6 4-1 5-5", 6, 0, "the trump 4-1 beats the 6-6"),
    Trick(4, 0, "5-2 2-1 2-0 6-6", 5, 0, "5-2 leads fives, not twos: nobody else follows"),
    # decl 5: fives trump
    Trick(5, 0, "3-3 5-3 6-3 3-0", 3, 1, "docs/RULES.md example: 5-3 is a trump, never a three"),
    Trick(5, 1, "5-0 6-5 5-5 5-4", CALLED, 3, "the 5-5 is the top trump"),
    Trick(5, 3, "6-4 6-6 5-0 4-4", 6, 1, "the lowest trump 5-0 beats the 6-6"),
    Trick(5, 0, "4-1 4-0 6-4 4-3", 4, 2, "by pip sum among fours: 6-4 (10)"),
    # decl 6: sixes trump
    Trick(6, 2, "6-6 6-5 6-4 5-5", CALLED, 2, "the trump double leads and wins"),
    Trick(6, 0, "6-0 6-1 5-5 6-2", CALLED, 3, "trumps by pip sum: 6-2 (8)"),
    Trick(6, 1, "5-5 5-4 6-0 5-3", 5, 3, "the lowest trump 6-0 beats the 5-5"),
    Trick(6, 0, "5-4 4-4 5-0 5-5", 5, 3, "5-5 tops the fives; 4-4 is off"),
    # decl 7: doubles trump, ranked by pip value
    Trick(7, 0, "3-3 1-1 6-6 2-2", CALLED, 2, "doubles by pip value: 6-6"),
    Trick(7, 1, "0-0 6-5 1-1 5-4", CALLED, 3, "1-1 beats 0-0; 6-5 is off"),
    Trick(7, 0, "6-5 6-4 0-0 6-3", 6, 2, "the lowest trump 0-0 beats every six"),
    Trick(7, 3, "6-1 6-2 5-1 6-0", 6, 0, "6-2 (8) tops the sixes; 5-1 is off"),
    # decl 8: doubles are a suit with no trump power, ranked by pip value
    Trick(8, 0, "2-2 5-5 6-5 1-1", CALLED, 1, "doubles led: 5-5 is the top double"),
    Trick(8, 2, "4-4 0-0 6-6 3-3", CALLED, 0, "doubles led: 6-6 by pip value"),
    Trick(8, 1, "6-1 6-6 6-0 1-1", 6, 1, "6-6 is a double, not a six, and cannot win"),
    Trick(8, 0, "5-3 5-4 3-3 6-5", 5, 3, "fives by pip sum: 6-5 (11); 3-3 is off"),
    # decl 9: no trump; the led suit is the high pip
    Trick(9, 0, "4-4 4-2 6-4 4-0", 4, 0, "the 4-4 tops the fours"),
    Trick(9, 3, "2-1 1-1 6-2 2-2", 2, 2, "2-1 leads twos; 2-2 tops; 1-1 is off"),
    Trick(9, 1, "6-3 3-3 6-0 5-5", 6, 1, "6-3 leads sixes: the 3-3 cannot win"),
    Trick(9, 2, "3-1 6-1 1-1 3-3", 3, 1, "3-1 leads threes: ones do not follow"),
]


def test_every_declaration_has_tricks():
    assert sorted({c.decl for c in TRICKS}) == list(range(10))
    assert {c.leader for c in TRICKS} == {0, 1, 2, 3}


@pytest.mark.parametrize("case", TRICKS, ids=lambda c: c.id)
def test_trick_tables(case):
    tiles = tids(case.tiles)
    assert LED_SUIT[case.decl, tiles[0]] == case.led, case.why
    assert trick_winner(case.decl, case.leader, tiles) == case.winner, case.why


def _one_tile_hands(case):
    """Shortened hands (k=1): the seat at position i after the leader holds tiles[i]."""
    tiles = tids(case.tiles)
    hands = [[0]] * 4
    for i, t in enumerate(tiles):
        hands[(case.leader + i) % 4] = [t]
    return hands


@pytest.mark.parametrize("case", TRICKS, ids=lambda c: c.id)
def test_trick_game_state(case):
    tiles = tids(case.tiles)
    s = GameState.new(_one_tile_hands(case), case.decl, case.leader)
    for i, t in enumerate(tiles):
        assert s.current_player == (case.leader + i) % 4
        assert s.legal_moves() == [t]
        s = s.play(t)
    assert s.is_over and s.legal_moves() == []
    assert s.leader == case.winner, case.why
    pts = 1 + sum(int(POINTS[t]) for t in tiles)
    want = (pts, 0) if case.winner % 2 == 0 else (0, pts)
    assert s.points == want
    assert s.score == want[0] - want[1]


def test_tricks_batched():
    games = BatchedGames.new([_one_tile_hands(c) for c in TRICKS],
                             [c.decl for c in TRICKS], [c.leader for c in TRICKS])
    for i in range(4):
        assert games.current_player.tolist() == [(c.leader + i) % 4 for c in TRICKS]
        if i == 1:
            assert games.led_suit().tolist() == [c.led for c in TRICKS]
        games = games.play(torch.zeros(len(TRICKS), dtype=torch.int64))
    assert games.is_over.all()
    assert games.leader.tolist() == [c.winner for c in TRICKS]
    for g, c in enumerate(TRICKS):
        pts = 1 + sum(int(POINTS[t]) for t in tids(c.tiles))
        want = [pts, 0] if c.winner % 2 == 0 else [0, pts]
        assert games.points[g].tolist() == want, c.id


# ---------------------------------------------------------------------------- following
@dataclass(frozen=True)
class Follow:
    decl: int
    lead: str
    hand: str
    legal: str  # expected legal tiles

    @property
    def id(self):
        return f"d{self.decl}-{self.lead}-[{self.hand.replace(' ', '_')}]"


FOLLOWS_CASES = [
    Follow(0, "6-5", "6-0 6-1 2-2", "6-1"),            # 6-0 is a trump, not a six
    Follow(0, "3-0", "5-0 5-5 4-3", "5-0"),            # trump led: must trump
    Follow(0, "3-0", "5-5 4-3 2-1", "5-5 4-3 2-1"),    # void in trumps: anything
    Follow(1, "4-4", "4-1 2-0 3-3", "4-1 2-0 3-3"),    # 4-1 is a trump: void in fours
    Follow(1, "4-4", "4-1 4-2", "4-2"),
    Follow(2, "6-3", "6-2 3-3 1-0", "6-2 3-3 1-0"),    # sixes led; 3-3 does not follow
    Follow(2, "6-3", "6-2 6-6 1-0", "6-6"),
    Follow(3, "1-0", "3-1 2-0 6-6", "3-1 2-0 6-6"),    # 2-0 has no one; 3-1 is a trump
    Follow(3, "1-0", "3-1 1-1", "1-1"),
    Follow(3, "6-3", "3-3 6-6 6-5", "3-3"),            # trump led
    Follow(4, "5-2", "5-4 2-2 3-1", "5-4 2-2 3-1"),    # fives led (not twos)
    Follow(4, "5-2", "5-4 5-0 2-2", "5-0"),
    Follow(5, "3-3", "5-3 2-1 6-6", "5-3 2-1 6-6"),    # 5-3 is never a three
    Follow(5, "3-3", "5-3 3-2 6-6", "3-2"),
    Follow(5, "5-0", "6-5 3-3 5-2", "6-5 5-2"),
    Follow(6, "5-4", "6-5 4-4 1-1", "6-5 4-4 1-1"),
    Follow(6, "5-4", "6-5 5-5 5-0", "5-5 5-0"),
    Follow(7, "6-1", "6-6 2-0 1-0", "6-6 2-0 1-0"),    # 6-6 is a trump, not a six
    Follow(7, "6-1", "6-6 6-0", "6-0"),
    Follow(7, "3-3", "4-4 3-1 6-3", "4-4"),            # a double led: follow with doubles
    Follow(7, "3-3", "6-3 3-1", "6-3 3-1"),
    Follow(8, "6-1", "6-6 1-1 2-0", "6-6 1-1 2-0"),    # 6-6 belongs to the doubles only
    Follow(8, "2-2", "2-1 0-0 6-2", "0-0"),            # doubles led: follow with a double
    Follow(8, "2-2", "2-1 6-2", "2-1 6-2"),
    Follow(9, "3-1", "1-1 6-1 3-0", "3-0"),            # threes led, not ones
    Follow(9, "3-1", "1-1 6-1", "1-1 6-1"),
    Follow(9, "6-3", "3-3 3-0", "3-3 3-0"),
    Follow(9, "6-3", "6-6 3-3", "6-6"),
]


@pytest.mark.parametrize("case", FOLLOWS_CASES, ids=lambda c: c.id)
def test_follow_legal_tiles(case):
    assert legal_tiles(tids(case.hand), case.decl, tid(case.lead)) == sorted(tids(case.legal))
    # leading: the whole hand is legal
    assert legal_tiles(tids(case.hand), case.decl, None) == sorted(tids(case.hand))


def _follow_deal(case):
    """Hands where seat 0 leads `lead` and seat 1 holds `hand`; fillers from unused tiles."""
    hand, lead = tids(case.hand), tid(case.lead)
    spare = [t for t in range(28) if t not in hand and t != lead]
    k = len(hand)
    seat0 = [lead] + spare[:k - 1]
    spare = spare[k - 1:]
    return [seat0, hand, spare[:k], spare[k:2 * k]]


@pytest.mark.parametrize("case", FOLLOWS_CASES, ids=lambda c: c.id)
def test_follow_game_state_and_batched(case):
    hands = _follow_deal(case)
    want = sorted(tids(case.legal))
    s = GameState.new(hands, case.decl, 0).play(tid(case.lead))
    assert s.current_player == 1 and s.legal_moves() == want
    illegal = [t for t in tids(case.hand) if t not in want]
    for t in illegal:
        with pytest.raises(ValueError):
            s.play(t)

    g = BatchedGames.new([hands], [case.decl], [0]).play_tile(torch.tensor([tid(case.lead)]))
    tiles, _ = g.hand_slots(g.current_player)
    mask = g.legal_mask()[0]
    assert sorted(tiles[0][mask].tolist()) == want
    if illegal:
        with pytest.raises(ValueError):
            g.play_tile(torch.tensor([illegal[0]]))


# ---------------------------------------------------------------------------- voids
# A deal traced by hand: seat 0 holds all seven sixes, seat 1 the fives and the 4-4,
# seat 2 the remaining fours and threes, seat 3 the rest.
SIXES_DEAL = [tids("6-6 6-5 6-4 6-3 6-2 6-1 6-0"),
              tids("5-5 5-4 5-3 5-2 5-1 5-0 4-4"),
              tids("4-3 4-2 4-1 4-0 3-3 3-2 3-1"),
              tids("3-0 2-2 2-1 2-0 1-1 1-0 0-0")]


def _voids_of_batched(games, g=0):
    return [{s for s in range(8) if int(games.voids[g, seat]) >> s & 1} for seat in range(4)]


def test_sixes_trump_sweep_scores_42_and_voids():
    # Sixes trump, seat 0 leads: every lead is a trump nobody else holds, so seat 0 wins all
    # seven tricks (42 points) and seats 1..3 are void in the called suit after trick one.
    s = GameState.new(SIXES_DEAL, 6, 0)
    g = BatchedGames.new([SIXES_DEAL], [6], [0])
    for trick in range(7):
        assert s.leader == 0 and s.current_player == 0
        lead = s.hands[0][-1]
        for seat in range(4):
            if seat > 0:  # no trump in hand: anything is legal
                assert s.legal_moves() == sorted(SIXES_DEAL[seat])[trick:] == list(s.hands[seat])
            t = s.legal_moves()[0] if seat else lead
            s, g = s.play(t), g.play_tile(torch.tensor([t]))
        want_voids = [set(), {CALLED}, {CALLED}, {CALLED}]
        assert s.voids() == want_voids and _voids_of_batched(g) == want_voids
        # traced: others shed their lowest tile; counts 5-0+3-2 (trick 1), 6-4 (2),
        # 4-1 (4), 5-5 (6)
        assert s.points == ([1, 12, 23, 24, 30, 31, 42][trick], 0)
    assert s.is_over and s.points == (42, 0) and s.score == 42
    assert g.points[0].tolist() == [42, 0] and bool(g.is_over[0])


def test_no_trump_voids_and_count():
    # No trump, seat 1 leads 5-5: fives led. Seat 2 and seat 3 hold no five (any tile is
    # legal; they play 4-1 and 3-0), seat 0 must play its only five, 6-5. 5-5 wins.
    s = GameState.new(SIXES_DEAL, 9, 1)
    assert s.legal_moves() == sorted(SIXES_DEAL[1])
    s = s.play(tid("5-5"))
    assert s.legal_moves() == sorted(SIXES_DEAL[2])
    s = s.play(tid("4-1"))
    assert s.legal_moves() == sorted(SIXES_DEAL[3])
    s = s.play(tid("3-0"))
    assert s.legal_moves() == [tid("6-5")]
    s = s.play(tid("6-5"))
    # 1 + 10 (5-5) + 5 (4-1) = 16 points to team 1 (seat 1)
    assert s.leader == 1 and s.points == (0, 16)
    assert s.voids() == [set(), set(), {5}, {5}]
    # seat 1 leads 5-4 (fives again); seat 2 still void; seat 3 plays 2-2, seat 0 has no
    # five left now and may play anything: it plays 6-6 (a six, cannot win).
    for t in ("5-4", "3-3", "2-2", "6-6"):
        s = s.play(tid(t))
    assert s.leader == 1 and s.points == (0, 17)
    assert s.voids() == [{5}, set(), {5}, {5}]

    g = BatchedGames.new([SIXES_DEAL], [9], [1])
    for t in ("5-5", "4-1", "3-0", "6-5", "5-4", "3-3", "2-2", "6-6"):
        g = g.play_tile(torch.tensor([tid(t)]))
    assert _voids_of_batched(g) == [{5}, set(), {5}, {5}]
    assert g.points[0].tolist() == [0, 17] and int(g.leader[0]) == 1
    assert g.n_plays.tolist() == [8]
    assert g.seats[0, :8].tolist() == [1, 2, 3, 0, 1, 2, 3, 0]


def test_void_in_pip_suit_when_playing_a_trump():
    # Fives trump, seat 0 leads 3-3 (threes). Seat 1 plays 5-3: a trump, not a three, so
    # seat 1 shows void in threes (suit 3), never in the called suit. Seat 2 follows with
    # 3-1, seat 3 follows with 6-3: neither is void. 5-3 wins.
    hands = [tids("3-3 0-0"), tids("5-3 1-1"), tids("3-1 2-2"), tids("6-3 4-4")]
    s = GameState.new(hands, 5, 0)
    for t in ("3-3", "5-3", "3-1", "6-3"):
        s = s.play(tid(t))
    assert s.voids() == [set(), {3}, set(), set()]
    assert s.leader == 1 and s.points == (0, 1)
    g = BatchedGames.new([hands], [5], [0])
    for t in ("3-3", "5-3", "3-1", "6-3"):
        g = g.play_tile(torch.tensor([tid(t)]))
    assert _voids_of_batched(g) == [set(), {3}, set(), set()]
    # trick two: seat 1 leads 1-1 (ones); everyone else is out of ones
    for t in ("1-1", "2-2", "4-4", "0-0"):
        s = s.play(tid(t))
        g = g.play_tile(torch.tensor([tid(t)]))
    assert s.voids() == [{1}, {3}, {1}, {1}] == _voids_of_batched(g)
    assert s.points == (0, 2) and g.points[0].tolist() == [0, 2]


# ---------------------------------------------------------------------------- scoring
def test_trick_points_by_hand():
    assert trick_points(tids("5-5 6-4 5-0 3-2")) == 31  # 1 + 10 + 10 + 5 + 5
    assert trick_points(tids("4-1 0-0 6-6 2-1")) == 6
    assert trick_points(tids("1-0 2-0 3-0 4-0")) == 1


def test_score_counts_for_winning_team():
    # No trump, seat 3 leads 6-4 (sixes): seat 0 follows 6-6 and wins for team 0.
    hands = [tids("6-6"), tids("5-5"), tids("3-2"), tids("6-4")]
    s = GameState.new(hands, 9, 3)
    for t in ("6-4", "6-6", "5-5", "3-2"):
        s = s.play(tid(t))
    assert s.leader == 0 and s.points == (26, 0) and s.score == 26
    # Same tiles, sixes trump: 6-6 still wins (top trump); fives trump: 5-5 (seat 1) wins.
    s = GameState.new(hands, 5, 3)
    for t in ("6-4", "6-6", "5-5", "3-2"):
        s = s.play(tid(t))
    assert s.leader == 1 and s.points == (0, 26) and s.score == -26
