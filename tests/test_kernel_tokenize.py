"""Triton `tokenize_worlds` against the reference: identical codes and slot tiles, bit for bit.

The reference (`eqfast.engine.tokens`) is tokenize(build_oracle_batch(...)); the kernel reads
the public state and the sampled owners directly. States are random playouts (conftest
`random_games`): openings, every current-trick length 0..3, late hands, voids, all 10
declarations, shortened deals. Worlds come from the reference sampler. Both kernel outputs
are poisoned with -1 before every run (no code and no clamped slot tile is negative), so an
element the kernel never writes fails. Runs under TRITON_INTERPRET=1 on the CPU (conftest
sets it) and natively on CUDA when present; shapes stay small for the interpreter.
"""
from __future__ import annotations

import pytest
import torch

from conftest import assert_identical, poison, random_games
from eqfast.engine import sampling
from eqfast.engine.public import hidden_info
from eqfast.engine.tokens import tokenize_worlds as reference_tokenize_worlds
from eqfast.engine.worlds import true_world
from eqfast.oracle.protocol import OracleBatch
from eqfast.oracle.tokenizer import N_STATUS, actor_slot_tiles, tokenize_batch
from eqfast.rules.batched import BatchedGames
from eqfast.rules.deal import mix_seed

import eqfast.kernels
import eqfast.kernels.tokenize as kernel_module

pytestmark = pytest.mark.interpreter

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def to_device(x):
    """A dataclass of tensors (BatchedGames, HiddenInfo, WorldSample) moved to DEVICE."""
    return type(x)(**{f: getattr(x, f).to(DEVICE) for f in x.__dataclass_fields__})


def sample_for(games, n, key_seed=0):
    info = hidden_info(games)
    keys = torch.tensor([mix_seed(key_seed, g, int(games.n_plays[g]), 1)
                         for g in range(games.batch_size)])
    return info, sampling.sample_worlds(info, sampling.completion_counts(info), keys, n)


def run_both(games, info, sample, monkeypatch):
    """(reference outputs on the CPU, kernel outputs on DEVICE, poisoned before the run)."""
    want = reference_tokenize_worlds(games, info, sample)
    allocate = kernel_module._empty_outputs
    monkeypatch.setattr(kernel_module, "_empty_outputs",
                        lambda *a: tuple(poison(t) for t in allocate(*a)))
    got = eqfast.kernels.tokenize_worlds(to_device(games), to_device(info), to_device(sample))
    return want, got


def assert_same(want, got):
    for name, w, g in zip(("codes", "slot_tiles"), want, got):
        assert_identical(name, w, g)


CASES = [  # (id, games, worlds, plays, hand size)
    ("G1-N1-opening", 1, 1, (0, 0), 7),
    ("G1-N257-opening", 1, 257, (0, 0), 7),
    ("G3-N7-any", 3, 7, (0, 27), 7),
    ("G3-N100-mid", 3, 100, (5, 15), 7),
    ("G3-N257-late", 3, 257, (18, 27), 7),
    ("G32-N1-any", 32, 1, (0, 27), 7),
    ("G32-N100-mid", 32, 100, (4, 20), 7),
]


@pytest.mark.parametrize("G,N,plays,hand_size", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kernel_equals_reference(G, N, plays, hand_size, monkeypatch):
    games = random_games(G, 500 + G * N, plays=plays, hand_size=hand_size)
    info, sample = sample_for(games, N)
    assert_same(*run_both(games, info, sample, monkeypatch))


def test_trick_positions_voids_and_declarations(monkeypatch):
    # 40 games at random depths, every declaration: the current trick holds 0..3 tiles,
    # hidden seats have voids (so worlds are restricted) and some hands are nearly empty.
    games = random_games(40, 91, plays=(1, 27), decl=torch.arange(40) % 10)
    assert set(games.decl.tolist()) == set(range(10))
    assert set(games.trick_len.tolist()) == {0, 1, 2, 3}
    assert int((games.voids != 0).any(1).sum()) >= 10
    assert int(games.n_plays.max()) >= 20
    info, sample = sample_for(games, 7, key_seed=5)
    want, got = run_both(games, info, sample, monkeypatch)
    assert_same(want, got)
    # the worlds differ from each other, so the pool-tile codes really vary per world
    codes = want[0].reshape(40, 7, 28)
    assert bool((codes != codes[:, :1]).any())


@pytest.mark.parametrize("hand_size", [1, 3, 5])
def test_shortened_deals(hand_size, monkeypatch):
    # undealt tiles read as gone (status 10) in every world
    games = random_games(3, 60 + hand_size, plays=(0, 4 * hand_size - 1), hand_size=hand_size)
    info, sample = sample_for(games, 7, key_seed=hand_size)
    want, got = run_both(games, info, sample, monkeypatch)
    assert_same(want, got)
    dealt = torch.zeros(3, 29, dtype=torch.bool)
    dealt.scatter_(1, torch.where(games.hands >= 0, games.hands, 28).reshape(3, -1), True)
    undealt = ~dealt[:, :28].repeat_interleave(7, 0)
    assert int(undealt.sum()) == 7 * 3 * (28 - 4 * hand_size)
    assert bool((want[0][undealt] % N_STATUS == 10).all())


def real_position(games: BatchedGames) -> OracleBatch:
    """The real current position of every game as an oracle batch (no sampling)."""
    return OracleBatch(hands=games.hands, remaining=games.remaining, decl=games.decl,
                       leader=games.leader, trick=games.trick[:, :3], actor=games.current_player)


def test_true_world_equals_real_position(monkeypatch):
    # tokens of the world that is the real deal == tokens of the real position
    games = random_games(24, 123, plays=(0, 27), decl=torch.arange(24) % 10)
    info = hidden_info(games)
    sample = true_world(games, info)
    real = real_position(games)
    want_codes = tokenize_batch(real)
    want_slots = actor_slot_tiles(real.hands, real.actor)
    ref = reference_tokenize_worlds(games, info, sample)
    assert torch.equal(ref[0], want_codes) and torch.equal(ref[1], want_slots)
    _, got = run_both(games, info, sample, monkeypatch)
    assert_same((want_codes, want_slots), got)


def test_rejects_bad_inputs():
    games = random_games(2, 5, plays=(3, 3))
    info, sample = sample_for(games, 4)
    bad_shape = type(sample)(**{**sample.__dict__, "owner": sample.owner[:, :, :20]})
    with pytest.raises(ValueError, match="owner"):
        eqfast.kernels.tokenize_worlds(games, info, bad_shape)
    bad_dtype = type(sample)(**{**sample.__dict__, "owner": sample.owner.long()})
    with pytest.raises(ValueError, match="int8"):
        eqfast.kernels.tokenize_worlds(games, info, bad_dtype)
    with pytest.raises(ValueError, match="decisions"):
        eqfast.kernels.tokenize_worlds(games.select(slice(0, 1)), info, sample)


def test_no_decisions():
    games = random_games(2, 5, plays=(3, 3)).select(slice(0, 0))
    info, sample = sample_for(games, 4)
    for codes, slots in (reference_tokenize_worlds(games, info, sample),
                         eqfast.kernels.tokenize_worlds(games, info, sample)):
        assert codes.shape == (0, 28) and slots.shape == (0, 7) and codes.dtype == torch.int64


# ------------------------------------------------------------ the posterior's prefix rows

@pytest.mark.parametrize("hand_size,window", [(7, 8), (7, 1), (4, 5), (2, 8), (1, 3)])
def test_prefix_kernel_equals_reference(hand_size, window, monkeypatch):
    """Every field of `tokenize_prefix_worlds` (codes, slot tiles, legal slots, observed
    slot, step validity), bit for bit, poisoned: window steps before the transcript's start,
    steps in every trick position, late hands, shortened deals, all declarations."""
    from eqfast.engine.tokens import tokenize_prefix_worlds as reference_prefix

    allocate = kernel_module._empty_prefix

    def allocate_poisoned(*a):   # -1 where no output is negative, 0x55 for observed slots
        out = allocate(*a)
        return type(out)(*(poison(t, 0x55 if name == "observed_slot" else None)
                           for name, t in zip(out._fields, out)))
    monkeypatch.setattr(kernel_module, "_empty_prefix", allocate_poisoned)
    games = random_games(20, 900 + 10 * hand_size + window, plays=(0, 27),
                         hand_size=hand_size, decl=torch.arange(20) % 10)
    info, sample = sample_for(games, 6, key_seed=window)
    want = reference_prefix(games, info, sample, window)
    got = eqfast.kernels.tokenize_prefix_worlds(to_device(games), to_device(info),
                                                to_device(sample), window)
    for name in want._fields:
        assert_identical(name, getattr(want, name), getattr(got, name))
    assert not want.valid.all() and want.valid.any()
    assert (want.observed_slot >= 0).any()


def test_prefix_kernel_rejects_a_bad_window():
    games = random_games(2, 3, plays=(4, 4))
    info, sample = sample_for(games, 2)
    with pytest.raises(ValueError, match="window"):
        eqfast.kernels.tokenize_prefix_worlds(games, info, sample, 0)
