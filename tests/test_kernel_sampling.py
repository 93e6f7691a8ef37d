"""Triton `sample_worlds` and `completion_counts` against the reference: bit for bit.

Runs under TRITON_INTERPRET=1 on the CPU (conftest sets it when there is no CUDA device)
and natively on CUDA when present. The kernel's output buffer is poisoned with 0x55 before
every run (-1 is a legal owner value: pool padding), so an element it never writes fails.
Shapes stay small: the interpreter runs each program in numpy.
"""
from __future__ import annotations

import pytest
import torch

from conftest import assert_identical, poison, random_games
from eqfast.engine import sampling as reference
from eqfast.engine.public import hidden_info
from eqfast.rules.deal import mix_seed

import eqfast.kernels
import eqfast.kernels.sampling as kernel_module

pytestmark = pytest.mark.interpreter

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
POISON = 0x55


def run_both(games, n, monkeypatch, key_seed=0):
    """(reference sample on the CPU, kernel sample on DEVICE) for the same games and keys."""
    info = hidden_info(games)
    counts = reference.completion_counts(info)
    keys = torch.tensor([mix_seed(key_seed, g, int(games.n_plays[g]), 0)
                         for g in range(games.batch_size)])
    want = reference.sample_worlds(info, counts, keys, n)

    allocate = kernel_module._empty_owner
    monkeypatch.setattr(kernel_module, "_empty_owner",
                        lambda *a: poison(allocate(*a), POISON))
    dev_info = type(info)(**{f: getattr(info, f).to(DEVICE) for f in info.__dataclass_fields__})
    got = eqfast.kernels.sample_worlds(dev_info, counts.to(DEVICE), keys.to(DEVICE), n)
    return info, want, got


def assert_same(want, got):
    for name in ("owner", "valid", "n_worlds", "enumerated", "total"):
        assert_identical(name, getattr(want, name), getattr(got, name))


CASES = [  # (id, games, worlds, plays, hand size)
    ("G1-N1-opening", 1, 1, (0, 0), 7),
    ("G3-N7-any", 3, 7, (0, 27), 7),
    ("G3-N257-late", 3, 257, (18, 27), 7),
    ("G32-N100-mid", 32, 100, (4, 20), 7),
    ("G1-N100-opening", 1, 100, (0, 0), 7),
]


@pytest.mark.parametrize("G,N,plays,hand_size", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kernel_equals_reference(G, N, plays, hand_size, monkeypatch):
    games = random_games(G, 1000 + G * N, plays=plays, hand_size=hand_size)
    _, want, got = run_both(games, N, monkeypatch)
    assert_same(want, got)


def test_all_declarations_with_voids(monkeypatch):
    games = random_games(30, 77, plays=(6, 22), decl=torch.arange(30) % 10)
    assert set(games.decl.tolist()) == set(range(10))
    assert int((games.voids != 0).sum()) >= 10
    info, want, got = run_both(games, 7, monkeypatch, key_seed=3)
    assert (info.allowed[info.pool >= 0] != 7).any()      # voids restrict some tiles
    assert not want.enumerated.all()                       # the drawn path is exercised
    assert_same(want, got)


@pytest.mark.parametrize("hand_size", range(1, 8))
def test_hand_sizes(hand_size, monkeypatch):
    # shortened deals of 1..7 tiles a seat, played a little: pools of every size
    games = random_games(3, 40 + hand_size, plays=(0, 4 * hand_size - 1), hand_size=hand_size)
    _, want, got = run_both(games, 7, monkeypatch, key_seed=hand_size)
    assert_same(want, got)


def test_rejects_bad_inputs():
    games = random_games(2, 5, plays=(3, 3))
    info = hidden_info(games)
    counts = reference.completion_counts(info)
    with pytest.raises(ValueError, match="keys"):
        eqfast.kernels.sample_worlds(info, counts, torch.zeros(3, dtype=torch.int64), 4)
    with pytest.raises(ValueError, match="n "):
        eqfast.kernels.sample_worlds(info, counts, torch.zeros(2, dtype=torch.int64), 0)


# ----------------------------------------------------------------- completion_counts

def run_counts(games, monkeypatch):
    """(reference counts on the CPU, kernel counts on DEVICE, output poisoned) for games."""
    info = hidden_info(games)
    want = reference.completion_counts(info)
    allocate = kernel_module._empty_counts
    monkeypatch.setattr(kernel_module, "_empty_counts", lambda *a: poison(allocate(*a)))
    dev_info = type(info)(**{f: getattr(info, f).to(DEVICE) for f in info.__dataclass_fields__})
    return want, eqfast.kernels.completion_counts(dev_info)


@pytest.mark.parametrize("hand_size", range(1, 8))
def test_counts_kernel_equals_reference(hand_size, monkeypatch):
    # every pool size from 0 (last play) to 21 (opening lead), all declarations, voids
    games = random_games(40, 900 + hand_size, plays=(0, 27), hand_size=hand_size,
                         decl=torch.arange(40) % 10)
    want, got = run_counts(games, monkeypatch)
    assert_identical("counts", want, got)
    if hand_size == 7:
        assert int(want.max()) == 399072960        # 21!/(7!)^3: the opening lead is covered


def test_counts_kernel_with_voids(monkeypatch):
    games = random_games(30, 78, plays=(8, 24), decl=torch.arange(30) % 10)
    info = hidden_info(games)
    assert (info.allowed[info.pool >= 0] != 7).any()      # voids restrict some tiles
    want, got = run_counts(games, monkeypatch)
    assert_identical("counts", want, got)


def test_counts_kernel_empty_batch():
    games = random_games(1, 3, plays=(0, 0))
    info = hidden_info(games)
    empty = type(info)(**{f: getattr(info, f)[:0].to(DEVICE) for f in info.__dataclass_fields__})
    assert eqfast.kernels.completion_counts(empty).shape == (0, 22, 8, 8)
