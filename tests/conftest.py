"""Shared test fixtures and helpers: seeding, poisoning of torch.empty outputs, and random
mid-hand game states from playouts with BatchedGames.

Triton kernels run under the interpreter when no CUDA device is present: TRITON_INTERPRET
must be set before any `triton.jit` function is defined, so it is set here, before any
test module imports eqfast.kernels.
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import random
import sys

import numpy as np
import pytest
import torch

try:  # decide the Triton mode once, before any kernel module is imported
    _HAS_CUDA = torch.cuda.is_available()
except Exception:  # pragma: no cover - broken CUDA install
    _HAS_CUDA = False
if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
if os.environ.get("TRITON_INTERPRET") == "1":
    # Interpreted kernels get checks a GPU does not give: a lane that loads or stores
    # outside its tensor arguments, or two programs of a launch that share an element one
    # of them writes, fails the test (tests/interpreter_checks.py).
    from interpreter_checks import install as _install_interpreter_checks
    _install_interpreter_checks()

#: The device of tests that run Triton kernels: interpreted kernels on the CPU take CPU
#: tensors, compiled kernels (a CUDA machine) take CUDA tensors only.
TEST_DEVICE = "cuda" if _HAS_CUDA else "cpu"

from eqfast.rules.batched import BatchedGames  # noqa: E402
from eqfast.rules.deal import deal_from_seed  # noqa: E402


class _KernelsFinder:
    """`kernels/` installs as `eqfast.kernels`; in a plain checkout (no pip install) this
    finder maps the name to the folder, lazily, so imports work the same way."""

    root = pathlib.Path(__file__).resolve().parents[1] / "kernels"

    def find_spec(self, name, path=None, target=None):
        if name != "eqfast.kernels" or not (self.root / "__init__.py").exists():
            return None
        return importlib.util.spec_from_file_location(
            name, self.root / "__init__.py", submodule_search_locations=[str(self.root)])


sys.meta_path.append(_KernelsFinder())  # after the normal finders: an install wins


@pytest.fixture(autouse=True)
def seeded():
    """Every test starts from the same global RNG state (tests should still pass seeds)."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield


def poison(t: torch.Tensor, value=None) -> torch.Tensor:
    """Fill a tensor in place with a value no correct output contains (NaN for floats,
    -1 for integers, True for bools, or `value` where -1 is a legal output) so an
    element a kernel never writes shows up."""
    if value is not None:
        return t.fill_(value)
    if t.dtype.is_floating_point:
        return t.fill_(float("nan"))
    if t.dtype == torch.bool:
        return t.fill_(True)
    return t.fill_(-1)


def random_games(n_games: int, seed: int, plays=(0, 27), hand_size: int = 7,
                 decl=None, device="cpu") -> BatchedGames:
    """Games dealt from seeds seed..seed+n_games-1 (random leader; random decl unless
    given, e.g. `torch.arange(G) % 10`), each played with uniformly random legal moves
    for a random number of plays in [plays[0], plays[1]]. hand_size < 7 deals the first
    hand_size tiles of each seat (a shortened endgame)."""
    gen = torch.Generator().manual_seed(seed)
    hands = np.stack([deal_from_seed(seed + g)[:, :hand_size] for g in range(n_games)])
    random_decl = torch.randint(0, 10, (n_games,), generator=gen)
    decl = random_decl if decl is None else torch.as_tensor(decl).expand(n_games)
    leader = torch.randint(0, 4, (n_games,), generator=gen)
    games = BatchedGames.new(hands, decl, leader, device=device)
    lo, hi = plays
    hi = min(hi, 4 * hand_size - 1)
    target = torch.randint(lo, hi + 1, (n_games,), generator=gen)
    snapshots = [games]
    for _ in range(hi):
        legal = games.legal_mask().float()
        legal[games.is_over] = 1.0
        slot = torch.multinomial(legal, 1, generator=gen)[:, 0]
        games = games.play(slot.to(games.device))
        snapshots.append(games)
    rows = torch.arange(n_games)
    fields = {f: torch.stack([getattr(s, f) for s in snapshots])[target, rows]
              for f in BatchedGames.__dataclass_fields__}
    return BatchedGames(**fields)


def assert_identical(name: str, want: torch.Tensor, got: torch.Tensor) -> None:
    """Bit-for-bit equality of a kernel output with its reference (same shape and dtype),
    naming the output, the count of differing elements and the first one."""
    got = got.cpu()
    assert want.shape == got.shape and want.dtype == got.dtype, \
        (name, tuple(want.shape), tuple(got.shape), want.dtype, got.dtype)
    if not torch.equal(want, got):
        diff = torch.nonzero(want != got)
        raise AssertionError(f"{name}: {len(diff)} of {want.numel()} elements differ, "
                             f"first at {diff[0].tolist()}: want {want[tuple(diff[0])]}, "
                             f"got {got[tuple(diff[0])]}")
