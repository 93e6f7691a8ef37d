"""Oracle tokenizer: a hand-checked position, batched == one by one, seat-rotation invariance."""
import numpy as np
import pytest
import torch

from eqfast.oracle.dataset import position_of
from eqfast.oracle.protocol import OracleBatch
from eqfast.oracle.tokenizer import N_CODES, N_STATUS, tokenize, tokenize_batch, trick_status
from eqfast.rules.deal import deal_from_seed
from eqfast.rules.state import GameState


def random_positions(n, seed=0):
    """n (initial hands, GameState) pairs at random depths of random games."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        hands = deal_from_seed(1000 + i).astype(np.int64)
        state = GameState.new(hands.tolist(), int(rng.integers(10)), int(rng.integers(4)))
        for _ in range(int(rng.integers(28))):
            state = state.play(int(rng.choice(state.legal_moves())))
        out.append((hands, state))
    return out


def test_hand_checked_example():
    # Deal 1, fives trump (decl 5), seat 1 leads. Trick 1: 5-1 (16), 5-0 (15), 5-5 (20), 6-5 (26);
    # the 5-5 wins, seat 3 leads 6-6 (27), seat 0 plays 6-2 (23): seat 1 acts, trick [27, 23].
    hands = deal_from_seed(1).astype(np.int64)
    state = GameState.new(hands.tolist(), 5, 1)
    for t in (16, 15, 20, 26, 27, 23):
        state = state.play(t)
    b = position_of(hands, state)
    assert b.remaining.tolist() == [[31, 123, 111, 47]]
    assert b.leader.item() == 3 and b.actor.item() == 1 and b.trick.tolist() == [[27, 23, -1]]
    codes = tokenize_batch(b)[0]
    # code = (decl*28 + tile)*11 + status; relative seats from actor 1: seat1 0, seat2 1,
    # seat3 2, seat0 3; trick of k=2: position 0 -> status 5, position 1 -> status 6.
    expected = {16: (5 * 28 + 16) * 11 + 10,   # 5-1 played in trick 1: gone
                15: (5 * 28 + 15) * 11 + 10,   # 5-0 gone too
                27: (5 * 28 + 27) * 11 + 5,     # 6-6 led this trick (by seat 3)
                23: (5 * 28 + 23) * 11 + 6,     # 6-2 second in this trick (seat 0)
                1: (5 * 28 + 1) * 11 + 0,       # 1-0 in the actor's hand
                0: (5 * 28 + 0) * 11 + 1,       # 0-0 held by seat 2, the left opponent
                9: (5 * 28 + 9) * 11 + 2,       # 3-3 held by seat 3, the partner
                2: (5 * 28 + 2) * 11 + 3}       # 1-1 held by seat 0, the right opponent
    for tile, code in expected.items():
        assert codes[tile].item() == code, tile
    assert [1726, 1715, 1842, 1799, 1551, 1541, 1641, 1565] == list(expected.values())
    assert trick_status(0, 2) == 5 and trick_status(1, 2) == 6


def test_codes_in_range_and_one_status_per_tile():
    pos = random_positions(40)
    codes = tokenize_batch(OracleBatch.cat([position_of(h, s) for h, s in pos]))
    assert codes.dtype == torch.int64 and codes.shape == (40, 28)
    assert int(codes.min()) >= 0 and int(codes.max()) < N_CODES
    tile = (codes // N_STATUS) % 28
    assert (tile == torch.arange(28)).all()
    status = codes % N_STATUS
    for (hands, state), st in zip(pos, status):
        in_hands = sum(len(h) for h in state.hands)
        assert int((st < 4).sum()) == in_hands
        assert int(((st >= 4) & (st < 10)).sum()) == len(state.trick)
        assert int((st == 10).sum()) == 28 - in_hands - len(state.trick)


def test_batched_equals_one_by_one():
    pos = random_positions(64, seed=1)
    rows = [position_of(h, s) for h, s in pos]
    batched = tokenize_batch(OracleBatch.cat(rows))
    single = torch.cat([tokenize_batch(r) for r in rows])
    assert torch.equal(batched, single)


@pytest.mark.parametrize("shift", [1, 2, 3])
def test_seat_rotation_leaves_codes_unchanged(shift):
    # Codes only see seats relative to the actor: renaming seat s -> s+shift changes nothing.
    b = OracleBatch.cat([position_of(h, s) for h, s in random_positions(32, seed=2)])
    perm = [(s - shift) % 4 for s in range(4)]  # new seat s holds old seat s-shift's hand
    rotated = OracleBatch(hands=b.hands[:, perm], remaining=b.remaining[:, perm], decl=b.decl,
                          leader=(b.leader + shift) % 4, trick=b.trick,
                          actor=(b.actor + shift) % 4)
    assert torch.equal(tokenize_batch(rotated), tokenize_batch(b))


def test_padded_hands_read_as_gone():
    hands = torch.tensor([[[0, 1, -1], [2, 3, -1], [4, 5, -1], [6, 7, -1]]])
    hands = torch.cat([hands, torch.full((1, 4, 4), -1)], dim=2)
    codes = tokenize(hands, torch.tensor([[3, 1, 3, 3]]), torch.tensor([9]),
                     torch.tensor([[-1, -1, -1]]), torch.tensor([0]))[0]
    status = (codes % N_STATUS).tolist()
    assert status[:8] == [0, 0, 1, 10, 2, 2, 3, 3]
    assert status[8:] == [10] * 20


def test_tokenize_is_scriptable_and_matches():
    b = OracleBatch.cat([position_of(h, s) for h, s in random_positions(16, seed=3)])
    scripted = torch.jit.script(tokenize)
    assert torch.equal(scripted(b.hands, b.remaining, b.decl, b.trick, b.actor), tokenize_batch(b))
