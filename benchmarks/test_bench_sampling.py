"""World sampler benchmarks: worlds/s of the reference (PyTorch) and the Triton kernel.

States: 64 games at the opening (21 hidden tiles, no voids) and 64 mid-hand games (12
random legal plays, most with voids), 1000 worlds each. Timed: completion counts + draws +
unranking (`sample_worlds`), and separately stage 3 (`build_oracle_batch`) in rows/s.
Goal for the reference on the CPU: >= 1M worlds/s mid-hand with voids.

On a machine without CUDA the kernel runs under TRITON_INTERPRET=1 (numpy emulation, set
below before the kernel is imported) on fewer worlds: that figure is the interpreter's, not
a kernel speed. With CUDA everything runs on the GPU and the kernel is compared with the
reference on the same device.

Run: python -m pytest benchmarks/test_bench_sampling.py --benchmark-enable -s
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

import pytest
import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

from eqfast.engine import sampling as reference  # noqa: E402
from eqfast.engine.public import hidden_info  # noqa: E402
from eqfast.engine.worlds import build_oracle_batch  # noqa: E402
from conftest import random_played_games  # noqa: E402
from eqfast.rules.batched import BatchedGames  # noqa: E402
from eqfast.rules.deal import mix_seed  # noqa: E402

DEVICE = "cuda" if CUDA else "cpu"
GAMES, WORLDS = 64, 1000
KERNEL_GAMES, KERNEL_WORLDS = (GAMES, WORLDS) if CUDA else (8, 256)   # interpreter: small


def _kernels():
    """eqfast.kernels, also from a plain checkout where kernels/ is not installed."""
    try:
        import eqfast.kernels as kernels
    except ModuleNotFoundError:
        root = pathlib.Path(__file__).resolve().parents[1] / "kernels"
        spec = importlib.util.spec_from_file_location(
            "eqfast.kernels", root / "__init__.py", submodule_search_locations=[str(root)])
        kernels = importlib.util.module_from_spec(spec)
        sys.modules["eqfast.kernels"] = kernels
        spec.loader.exec_module(kernels)
    return kernels


def _games(n_games: int, n_plays: int, seed: int) -> BatchedGames:
    return random_played_games(n_games, n_plays, seed, DEVICE)


STATES = {"opening": (0, 1), "midhand-voids": (12, 2)}


def _setup(state: str, n_games: int):
    n_plays, seed = STATES[state]
    games = _games(n_games, n_plays, seed)
    info = hidden_info(games)
    keys = torch.tensor([mix_seed(7, g, n_plays, 0) for g in range(n_games)], device=DEVICE)
    return games, info, keys


def _sync():
    if CUDA:
        torch.cuda.synchronize()


def _record(benchmark, label, n_items, unit, games):
    median = benchmark.stats.stats.median
    rate = n_items / median
    benchmark.extra_info.update({
        "device": torch.cuda.get_device_name() if CUDA else "cpu",
        "interpreter": (not CUDA) and "kernel" in label,
        f"{unit}_per_s": round(rate), "items": n_items,
        "games_with_voids": int((games.voids != 0).any(1).sum()),
        "torch_threads": torch.get_num_threads(),
    })
    print(f"\n{label}: {n_items} {unit} median {median * 1e3:.2f} ms -> {rate / 1e6:.3f} M {unit}/s")


@pytest.mark.parametrize("state", list(STATES))
def test_bench_reference_sampler(benchmark, state):
    games, info, keys = _setup(state, GAMES)

    def run():
        out = reference.sample_worlds(info, reference.completion_counts(info), keys, WORLDS)
        _sync()
        return out

    sample = benchmark.pedantic(run, rounds=7, iterations=1, warmup_rounds=1)
    assert sample.owner.shape == (GAMES, WORLDS, 21)
    _record(benchmark, f"reference sampler [{state}, {DEVICE}]", GAMES * WORLDS, "worlds", games)


@pytest.mark.parametrize("state", list(STATES))
def test_bench_kernel_sampler(benchmark, state):
    kernels = _kernels()
    games, info, keys = _setup(state, KERNEL_GAMES)
    counts = reference.completion_counts(info)

    def run():
        out = kernels.sample_worlds(info, counts, keys, KERNEL_WORLDS)
        _sync()
        return out

    sample = benchmark.pedantic(run, rounds=3 if not CUDA else 20, iterations=1, warmup_rounds=1)
    want = reference.sample_worlds(info, counts, keys, KERNEL_WORLDS)
    assert torch.equal(sample.owner, want.owner)
    mode = "kernel" if CUDA else "kernel under TRITON_INTERPRET (not a kernel speed)"
    _record(benchmark, f"{mode} sampler [{state}, {DEVICE}]", KERNEL_GAMES * KERNEL_WORLDS,
            "worlds", games)


@pytest.mark.parametrize("state", list(STATES))
def test_bench_build_oracle_batch(benchmark, state):
    games, info, keys = _setup(state, GAMES)
    sample = reference.sample_worlds(info, reference.completion_counts(info), keys, WORLDS)

    def run():
        out = build_oracle_batch(games, info, sample)
        _sync()
        return out

    batch = benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    assert len(batch) == GAMES * WORLDS
    _record(benchmark, f"build_oracle_batch [{state}, {DEVICE}]", GAMES * WORLDS, "rows", games)
