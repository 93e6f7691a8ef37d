"""End-to-end E[Q] engine: games/s and decisions/s at N = 100, and the share of wall time
per stage (NVTX stage names), uniform and posterior-weighted, per pipeline and oracle.

Pipelines: "reference" (eqfast.engine.pipeline.Engine: de-duplicated oracle rows), "fast"
(eqfast.engine.fast.FastEngine without graphs) and, on CUDA, "graphs" (FastEngine with one
CUDA graph per batch of 28 decision steps). Backend auto: triton on CUDA, reference on the CPU.

Oracles: the shipped default (eqfast/models/default.safetensors, TorchScript) and, on CUDA
only (on the CPU they run at ~1K rows/s), transformers of the earlier implementation's 816K and 3.3M sizes
with random weights (speed does not depend on the weights; `speed_test_network` scales
the output head so Q stays a possible value).

Stage shares are host wall times; on CUDA they are synchronized at stage boundaries
(`set_sync(True)`) for the non-graph pipelines, so they are device times there. Graph
replays show as the single stage "replay".

Run: python -m pytest benchmarks/test_bench_engine.py --benchmark-enable -s
(set OMP_NUM_THREADS=1 on a loaded machine: torch's thread pool oversubscribes the cores).
"""
from __future__ import annotations

import pytest
import torch

from eqfast.engine.fast import FastEngine
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.posterior import PosteriorConfig
from eqfast.utils.profiling import STAGE_TIMES, reset_stage_times, set_sync, stage_table

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
GAMES = 256 if CUDA else 32        # G x N = 25.6K rows per step on a GPU (goal: >= 16K)
PIPELINES = ["reference", "fast"] + (["graphs"] if CUDA else [])
ORACLES = ["shipped"] + (["transformer816k", "transformer3m"] if CUDA else [])


def _oracle(name: str):
    from eqfast.oracle.network import (DEFAULT_CONFIGS, NetworkOracle, script_module,
                                       speed_test_network)
    from eqfast.oracle.weights import load_default_oracle
    if name == "shipped":
        return load_default_oracle(device=DEVICE)
    net = speed_test_network(DEFAULT_CONFIGS[name]).to(DEVICE)
    return NetworkOracle(script_module(net), device=DEVICE)


def _engine(pipeline: str, oracle, cfg):
    if pipeline == "reference":
        return Engine(oracle, cfg, backend="auto", device=DEVICE)
    return FastEngine(oracle, cfg, backend="auto", device=DEVICE, graphs=pipeline == "graphs")


@pytest.mark.parametrize("oracle_name", ORACLES)
@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("posterior", [False, True], ids=["uniform", "posterior"])
def test_engine_games_per_second(benchmark, posterior, pipeline, oracle_name):
    oracle = _oracle(oracle_name)
    cfg = EngineConfig(n_samples=100, posterior=PosteriorConfig() if posterior else None)
    engine = _engine(pipeline, oracle, cfg)
    engine.play(range(10_000, 10_000 + GAMES))     # warm-up: compiles, graph capture, profiling
    set_sync(CUDA and pipeline != "graphs")
    state = {}

    def run():
        reset_stage_times()
        engine.oracle_rows = engine.world_rows = 0
        state["records"] = engine.play(range(GAMES))
        if CUDA:
            torch.cuda.synchronize()

    try:
        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        set_sync(False)
    seconds = benchmark.stats.stats.median
    total = sum(STAGE_TIMES.values()) or 1.0
    oracle_share = STAGE_TIMES.get("oracle", 0.0) / total
    benchmark.extra_info.update({
        "device": DEVICE, "pipeline": pipeline, "oracle": oracle_name, "games": GAMES,
        "n_samples": 100, "posterior": posterior,
        "games_per_s": GAMES / seconds, "decisions_per_s": 28 * GAMES / seconds,
        "oracle_rows": engine.oracle_rows, "world_rows": engine.world_rows,
        "oracle_share": oracle_share,
        "stage_share": {k: v / total for k, v in STAGE_TIMES.items()},
    })
    print(f"\n[{'posterior' if posterior else 'uniform'} / {pipeline} / {oracle_name} / {DEVICE}] "
          f"{GAMES / seconds:.2f} games/s, {28 * GAMES / seconds:.1f} decisions/s, "
          f"oracle rows {engine.oracle_rows} for {engine.world_rows} world rows drawn, "
          f"oracle share {100 * oracle_share:.1f}%")
    print(stage_table())
    assert len(state["records"]) == 28 * GAMES
