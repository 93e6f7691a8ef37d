"""Triton `hidden_info` (kernels/public.py) and `decision_tables` (kernels/tokenize.py)
against their references, bit for bit: every output field, same dtypes.

States are random playouts (conftest `random_games`): openings, every current-trick length,
late hands (down to the last play), voids, all 10 declarations, shortened deals of 1..7
tiles a seat. Every output is poisoned before each run (-1 where -1 is not a value the
kernel writes there, 0x55 elsewhere), so an element the kernel never writes fails. Runs
under TRITON_INTERPRET=1 on the CPU (conftest sets it) and natively on CUDA when present.
"""
from __future__ import annotations

import pytest
import torch

from conftest import assert_identical, poison, random_games
from eqfast.engine.public import hidden_info as reference_hidden_info, popcount
from eqfast.engine.tokens import decision_tables as reference_decision_tables
from eqfast.utils.checks import host_checks_off

import eqfast.kernels
import eqfast.kernels.public as public_module
import eqfast.kernels.tokenize as tokenize_module

pytestmark = pytest.mark.interpreter

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
POISON = 0x55      # pool and actor_tiles hold -1 / 0 legitimately: poison with a tile id no
                   # output can hold at a position the kernel must write


def to_device(x):
    return type(x)(**{f: getattr(x, f).to(DEVICE) for f in x.__dataclass_fields__})


def poisoned(module, name, monkeypatch):
    allocate = getattr(module, name)

    def allocate_poisoned(*a):
        out = allocate(*a)
        for t in (out.values() if isinstance(out, dict) else out):
            poison(t, POISON)
        return out
    monkeypatch.setattr(module, name, allocate_poisoned)


def check_hidden_info(games, monkeypatch):
    want = reference_hidden_info(games)
    poisoned(public_module, "_empty_outputs", monkeypatch)
    got = eqfast.kernels.hidden_info(to_device(games))
    for name in want.__dataclass_fields__:
        assert_identical(name, getattr(want, name), getattr(got, name))
    return want


def check_decision_tables(games, monkeypatch):
    info = reference_hidden_info(games)
    want = reference_decision_tables(games, info)
    poisoned(tokenize_module, "_empty_tables", monkeypatch)
    got = tokenize_module.decision_tables(to_device(games), to_device(info))
    for name, w, g in zip(("base", "pool", "rel", "actor_tiles"), want, got):
        assert_identical(name, w, g)


@pytest.mark.parametrize("hand_size", range(1, 8))
def test_hidden_info_kernel_equals_reference(hand_size, monkeypatch):
    games = random_games(40, 300 + hand_size, plays=(0, 27), hand_size=hand_size,
                         decl=torch.arange(40) % 10)
    info = check_hidden_info(games, monkeypatch)
    if hand_size == 7:
        assert int(info.n_pool.max()) == 21 and int(info.n_pool.min()) < 4


def test_hidden_info_kernel_with_voids(monkeypatch):
    games = random_games(40, 81, plays=(8, 26), decl=torch.arange(40) % 10)
    assert int((games.voids != 0).sum()) >= 10
    info = check_hidden_info(games, monkeypatch)
    assert (info.allowed[info.pool >= 0] != 7).any()      # voids restrict some tiles


def test_hidden_info_kernel_checks_consistency():
    games = random_games(2, 5, plays=(5, 5))
    games.remaining[1, :] = 0       # no seat holds a tile, yet tiles are unplayed: inconsistent
    with pytest.raises(ValueError, match="game 1"):
        reference_hidden_info(games)
    with pytest.raises(ValueError, match="game 1"):
        eqfast.kernels.hidden_info(to_device(games))
    with host_checks_off():        # inside a captured step the check is skipped; the kernel
        want = reference_hidden_info(games)           # stays in bounds and still agrees
        got = eqfast.kernels.hidden_info(to_device(games))
    assert int(want.n_pool[1]) == 21                  # 24 unplayed tiles, truncated to the pool
    for name in want.__dataclass_fields__:
        assert_identical(name, getattr(want, name), getattr(got, name))


@pytest.mark.parametrize("hand_size", range(1, 8))
def test_decision_tables_kernel_equals_reference(hand_size, monkeypatch):
    # every current-trick length 0..3 appears among 40 random playouts
    games = random_games(40, 500 + hand_size, plays=(0, 27), hand_size=hand_size,
                         decl=torch.arange(40) % 10)
    if hand_size >= 4:
        assert set((games.n_plays % 4).tolist()) == {0, 1, 2, 3}
    check_decision_tables(games, monkeypatch)


def test_kernels_accept_an_empty_batch():
    games = random_games(2, 3, plays=(0, 3))
    empty = type(games)(**{f: getattr(games, f)[:0] for f in games.__dataclass_fields__})
    info = eqfast.kernels.hidden_info(to_device(empty))
    assert info.pool.shape == (0, 21) and info.sizes.shape == (0, 3)
    base, pool, rel, actor_tiles = tokenize_module.decision_tables(to_device(empty), info)
    assert base.shape == (0, 28) and actor_tiles.shape == (0, 7)


@pytest.mark.parametrize("hand_size", [1, 3, 7])
def test_legal_mask_kernel_equals_reference(hand_size, monkeypatch):
    """Every current player of random playouts, including finished games (no legal slot)
    and every current-trick length: the same [G, 7] mask as `BatchedGames.legal_mask`."""
    allocate = public_module._empty_legal
    monkeypatch.setattr(public_module, "_empty_legal", lambda *a: poison(allocate(*a)))
    games = random_games(40, 600 + hand_size, plays=(0, 4 * hand_size), hand_size=hand_size,
                         decl=torch.arange(40) % 10)
    want = games.legal_mask()
    assert_identical("legal", want, public_module.legal_mask(to_device(games)))
    if hand_size == 7:            # the follow-suit rule restricts some hands
        in_hand = popcount(games.remaining.gather(1, games.current_player[:, None])[:, 0], 7)
        assert (want.sum(1) < in_hand).any()
