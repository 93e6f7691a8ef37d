"""Oracle throughput on this machine: rows/s of the tokenizer alone, the shipped network
eager and TorchScript, and a random-weight transformer of the earlier implementation's 816K size.

Run: PYTHONPATH=. python -m pytest benchmarks/test_bench_oracle.py --benchmark-enable
     (add -k "4096" for one batch size; EQFAST_BENCH_THREADS=n sets torch threads, default 1)
Each row's extra_info holds rows_per_s, the batch size, threads, device and commit.
"""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from eqfast.oracle.dataset import position_of
from eqfast.oracle.network import (DEFAULT_CONFIGS, OracleModule, build_network,
                                   count_parameters, script_module)
from eqfast.oracle.protocol import OracleBatch
from eqfast.oracle.tokenizer import tokenize
from eqfast.oracle.weights import DEFAULT_MODEL, load_network
from eqfast.rules.deal import deal_from_seed
from eqfast.rules.state import GameState

ROOT = Path(__file__).resolve().parents[1]
BATCHES = [100, 512, 1024, 4096]
THREADS = int(os.environ.get("EQFAST_BENCH_THREADS", "1"))


def _commit():
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=5).stdout.strip()
    except Exception:
        return "unknown"


@pytest.fixture(scope="module", autouse=True)
def threads():
    old = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def positions():
    """4096 positions at random depths of random games (mid-trick states included)."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(256):
        hands = deal_from_seed(i).astype(np.int64)
        state = GameState.new(hands.tolist(), int(rng.integers(10)), int(rng.integers(4)))
        for depth in range(28):
            if depth % 2 == 0 and len(rows) < 4096:
                rows.append(position_of(hands, state))
            state = state.play(int(rng.choice(state.legal_moves())))
    b = OracleBatch.cat(rows)
    reps = -(-4096 // len(b))
    return OracleBatch.cat([b] * reps).select(slice(0, 4096))


def _shipped_network():
    if DEFAULT_MODEL.exists():
        return load_network(DEFAULT_MODEL)[0]
    return build_network(DEFAULT_CONFIGS["mlp"]).eval()


def _run(benchmark, fn, n, what, params=None):
    benchmark.extra_info.update(what=what, batch=n, threads=THREADS, device="cpu",
                                commit=_commit())
    if params is not None:
        benchmark.extra_info["parameters"] = params
    with torch.no_grad():
        benchmark.pedantic(fn, rounds=5, iterations=1, warmup_rounds=1)
    benchmark.extra_info["rows_per_s"] = n / benchmark.stats.stats.median


@pytest.mark.parametrize("n", BATCHES)
def test_tokenizer(benchmark, positions, n):
    b = positions.select(slice(0, n))
    _run(benchmark, lambda: tokenize(b.hands, b.remaining, b.decl, b.trick, b.actor), n,
         "tokenizer")


@pytest.mark.parametrize("n", BATCHES)
def test_network_eager(benchmark, positions, n):
    net = _shipped_network()
    module = OracleModule(net).eval()
    b = positions.select(slice(0, n))
    _run(benchmark, lambda: module(b.hands, b.remaining, b.decl, b.trick, b.actor), n,
         "shipped network, eager (tokenizer included)", count_parameters(net))


@pytest.mark.parametrize("n", BATCHES)
def test_network_torchscript(benchmark, positions, n):
    net = _shipped_network()
    module = script_module(net)
    b = positions.select(slice(0, n))
    _run(benchmark, lambda: module(b.hands, b.remaining, b.decl, b.trick, b.actor), n,
         "shipped network, frozen TorchScript (tokenizer included)", count_parameters(net))


@pytest.mark.parametrize("n", BATCHES)
def test_transformer_816k(benchmark, positions, n):
    torch.manual_seed(0)
    net = build_network(DEFAULT_CONFIGS["transformer816k"]).eval()
    module = script_module(net)
    b = positions.select(slice(0, n))
    _run(benchmark, lambda: module(b.hands, b.remaining, b.decl, b.trick, b.actor), n,
         "transformer d128 x4 layers (816K size), random weights, TorchScript",
         count_parameters(net))
