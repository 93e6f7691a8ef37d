"""Stage 2 transcript tokens (docs/DATASET.md): its worked example by hand, the batched
tokenizer against the single-game loop on random mid-hand games, and current_hand_order."""
import torch

from conftest import random_games
from eqfast.engine.transcript import (MAX_TOKENS, current_hand_order, tokenize_transcript,
                                      transcript_tokens)
from eqfast.rules.batched import BatchedGames
from eqfast.rules.tables import tile_id


def test_documented_example_by_hand():
    # docs/DATASET.md's example: my_hand [5, 7, 12], plays (0, 20) then (1, 15), fives trump, player 1's view
    tokens = tokenize_transcript([12, 5, 7], [(0, 20), (1, 15)], decl_id=5, current_player=1)
    expected = [
        # high low dbl count player in_hand decl type
        [0, 0, 0, 0, 0, 0, 5, 0],     # declaration
        [2, 2, 1, 0, 0, 1, 5, 1],     # 5 = 2-2, hand, sorted first
        [3, 1, 0, 0, 0, 1, 5, 1],     # 7 = 3-1
        [4, 2, 0, 0, 0, 1, 5, 1],     # 12 = 4-2
        [5, 5, 1, 2, 3, 0, 5, 2],     # 20 = 5-5 (10 points) by seat 0 = right opponent of 1
        [5, 0, 0, 1, 0, 0, 5, 2],     # 15 = 5-0 (5 points) by seat 1 = me
    ]
    assert tokens.dtype == torch.int8
    assert tokens.tolist() == expected


def test_batched_example_seat_1_after_two_plays():
    # seat 0 leads the 5-5, seat 1 follows with the 5-0 (fives trump); seat 2 to play
    hands = [[[20, 0, 1, 2, 3, 4, 6], [15, 7, 8, 9, 10, 11, 12],
              [13, 14, 16, 17, 18, 19, 21], [22, 23, 24, 25, 26, 27, 5]]]
    g = BatchedGames.new(hands, decl=5, leader=0)
    g = g.play_tile(torch.tensor([20])).play_tile(torch.tensor([15]))
    tokens, lengths = transcript_tokens(g)
    assert tokens.shape == (1, MAX_TOKENS, 8) and lengths.tolist() == [1 + 7 + 2]
    hand2 = sorted([13, 14, 16, 17, 18, 19, 21])
    ref = tokenize_transcript(hand2, [(0, 20), (1, 15)], 5, current_player=2)
    assert torch.equal(tokens[0, :10], ref)
    assert tokens[0, 8].tolist() == [5, 5, 1, 2, 2, 0, 5, 2]     # seat 0 = relative 2 (partner)
    assert tokens[0, 9].tolist() == [5, 0, 0, 1, 3, 0, 5, 2]     # seat 1 = relative 3
    assert (tokens[0, 10:] == 0).all()
    assert tile_id(5, 5) == 20 and tile_id(5, 0) == 15


def test_batched_equals_single_game_loop_on_random_games():
    games = random_games(40, seed=123)
    tokens, lengths = transcript_tokens(games)
    actors = games.current_player
    slot_of_pos = current_hand_order(games)
    for g in range(games.batch_size):
        a = int(actors[g])
        hand = [int(games.hands[g, a, s]) for s in slot_of_pos[g].tolist() if s >= 0]
        n = int(games.n_plays[g])
        plays = list(zip(games.seats[g, :n].tolist(), games.tiles[g, :n].tolist()))
        ref = tokenize_transcript(hand, plays, int(games.decl[g]), a)
        assert int(lengths[g]) == ref.shape[0]
        assert torch.equal(tokens[g, :ref.shape[0]], ref), g
        assert (tokens[g, ref.shape[0]:] == 0).all(), g


def test_current_hand_order_lists_remaining_slots_in_order():
    games = random_games(30, seed=7, hand_size=5)
    order = current_hand_order(games)
    _, in_hand = games.hand_slots(games.current_player)
    for g in range(30):
        want = [s for s in range(7) if in_hand[g, s]]
        assert order[g].tolist() == want + [-1] * (7 - len(want))
