"""Oracle-token benchmarks: rows/s of `tokenize_worlds`, reference (PyTorch) vs Triton kernel.

A row is one world of one decision: its 28 codes and 7 actor slot tiles. States: 64 games at
the opening (21 hidden tiles) and 64 mid-hand games (12 random legal plays, most with voids),
worlds from the reference sampler. Timed: the whole public function (the kernel's figure
includes its per-decision host tables). GB/s counts the bytes a fused kernel must move per
row: the 21-byte owner row read, 28 + 7 int64 written (301 bytes).

On a machine without CUDA the kernel runs under TRITON_INTERPRET=1 (numpy emulation, set
below before the kernel is imported) on fewer rows: that figure is the interpreter's, not a
kernel speed. With CUDA both run on the GPU on the same inputs.

Run: python -m pytest benchmarks/test_bench_tokenize.py --benchmark-enable -s
"""
from __future__ import annotations

import os

import pytest
import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import eqfast.kernels as kernels  # noqa: E402
from eqfast.engine import sampling  # noqa: E402
from eqfast.engine.public import MAX_POOL, hidden_info  # noqa: E402
from eqfast.engine.tokens import tokenize_worlds as reference_tokenize_worlds  # noqa: E402
from conftest import random_played_games  # noqa: E402
from eqfast.rules.batched import BatchedGames  # noqa: E402
from eqfast.rules.deal import mix_seed  # noqa: E402

DEVICE = "cuda" if CUDA else "cpu"
GAMES, WORLDS = (256, 1000) if CUDA else (64, 1000)
KERNEL_GAMES, KERNEL_WORLDS = (GAMES, WORLDS) if CUDA else (8, 256)   # interpreter: small
BYTES_PER_ROW = MAX_POOL + (28 + 7) * 8
STATES = {"opening": (0, 1), "midhand-voids": (12, 2)}


def _games(n_games: int, n_plays: int, seed: int) -> BatchedGames:
    return random_played_games(n_games, n_plays, seed, DEVICE)


def _setup(state: str, n_games: int, n_worlds: int):
    n_plays, seed = STATES[state]
    games = _games(n_games, n_plays, seed)
    info = hidden_info(games)
    keys = torch.tensor([mix_seed(11, g, n_plays, 1) for g in range(n_games)], device=DEVICE)
    sample = sampling.sample_worlds(info, sampling.completion_counts(info), keys, n_worlds)
    return games, info, sample


def _sync():
    if CUDA:
        torch.cuda.synchronize()


def _record(benchmark, label, rows, interpreter):
    median = benchmark.stats.stats.median
    rate = rows / median
    benchmark.extra_info.update({
        "device": torch.cuda.get_device_name() if CUDA else "cpu",
        "interpreter": interpreter, "rows": rows, "rows_per_s": round(rate),
        "gb_per_s": round(rate * BYTES_PER_ROW / 1e9, 3),
        "torch_threads": torch.get_num_threads(),
    })
    print(f"\n{label}: {rows} rows median {median * 1e3:.2f} ms -> {rate / 1e6:.3f} M rows/s, "
          f"{rate * BYTES_PER_ROW / 1e9:.3f} GB/s")


def _timed(benchmark, fn, rounds):
    def run():
        out = fn()
        _sync()
        return out
    return benchmark.pedantic(run, rounds=rounds, iterations=1, warmup_rounds=1)


@pytest.mark.parametrize("state", list(STATES))
def test_bench_reference_tokenize(benchmark, state):
    games, info, sample = _setup(state, GAMES, WORLDS)
    codes, _ = _timed(benchmark, lambda: reference_tokenize_worlds(games, info, sample), 5)
    assert codes.shape == (GAMES * WORLDS, 28)
    _record(benchmark, f"reference tokenize_worlds [{state}, {DEVICE}]", GAMES * WORLDS, False)


@pytest.mark.parametrize("state", list(STATES))
def test_bench_kernel_tokenize(benchmark, state):
    games, info, sample = _setup(state, KERNEL_GAMES, KERNEL_WORLDS)
    codes, slots = _timed(benchmark, lambda: kernels.tokenize_worlds(games, info, sample),
                          20 if CUDA else 3)
    want = reference_tokenize_worlds(games, info, sample)
    assert torch.equal(codes, want[0]) and torch.equal(slots, want[1])
    mode = "kernel" if CUDA else "kernel under TRITON_INTERPRET (not a kernel speed)"
    _record(benchmark, f"{mode} tokenize_worlds [{state}, {DEVICE}]",
            KERNEL_GAMES * KERNEL_WORLDS, not CUDA)
