"""End-to-end E[Q] engine: games/s and decisions/s at N = 100, and the share of wall time
per stage (NVTX stage names), uniform and posterior-weighted.

Oracle: the shipped default (eqfast/models/default.safetensors, TorchScript) when present,
else a random-weight network of the default architecture (same cost per row). The device is
CUDA when present (backend auto = triton there), else the CPU with the reference backend.

Run: python -m pytest benchmarks/test_bench_engine.py --benchmark-enable -s
(set OMP_NUM_THREADS=1 on a loaded machine: torch's thread pool oversubscribes the cores).
"""
from __future__ import annotations

import pytest
import torch

from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.posterior import PosteriorConfig
from eqfast.utils.profiling import STAGE_TIMES, reset_stage_times, stage_table

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
GAMES = 32


def _oracle():
    try:
        from eqfast.oracle.weights import load_default_oracle
        return load_default_oracle(device=DEVICE), "shipped default"
    except Exception:  # no shipped model in this checkout
        from eqfast.oracle.network import DEFAULT_CONFIGS, NetworkOracle, build_network, script_module
        torch.manual_seed(0)
        net = build_network(DEFAULT_CONFIGS["mlp"]).to(DEVICE).eval()
        return NetworkOracle(script_module(net), device=DEVICE), "random-weight mlp"


@pytest.mark.parametrize("posterior", [False, True], ids=["uniform", "posterior"])
def test_engine_games_per_second(benchmark, posterior):
    oracle, name = _oracle()
    cfg = EngineConfig(n_samples=100, posterior=PosteriorConfig() if posterior else None)
    engine = Engine(oracle, cfg, backend="auto", device=DEVICE)
    engine.play(range(10_000, 10_004))              # warm-up (TorchScript profiling runs)
    state = {}

    def run():
        reset_stage_times()
        engine.oracle_rows = engine.world_rows = 0
        state["records"] = engine.play(range(GAMES))

    benchmark.pedantic(run, rounds=1, iterations=1)
    seconds = benchmark.stats.stats.median
    total = sum(STAGE_TIMES.values())
    benchmark.extra_info.update({
        "device": DEVICE, "oracle": name, "games": GAMES, "n_samples": 100,
        "games_per_s": GAMES / seconds, "decisions_per_s": 28 * GAMES / seconds,
        "oracle_rows": engine.oracle_rows, "world_rows": engine.world_rows,
        "stage_share": {k: v / total for k, v in STAGE_TIMES.items()},
    })
    print(f"\n[{'posterior' if posterior else 'uniform'}] {name} on {DEVICE}: "
          f"{GAMES / seconds:.2f} games/s, {28 * GAMES / seconds:.1f} decisions/s, "
          f"oracle rows {engine.oracle_rows} of {engine.world_rows} world rows drawn")
    print(stage_table())
    assert len(state["records"]) == 28 * GAMES
