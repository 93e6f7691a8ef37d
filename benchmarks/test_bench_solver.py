"""Exact solver benchmark: opening-lead solve (Q of every legal lead) of full 7-tile deals,
20 fixed seeds x all 10 declarations, one core. Goal: median <= 20 ms per deal.

Run: pytest benchmarks/test_bench_solver.py --benchmark-enable
(also: eqfast-solve --bench 200). Each deal starts from an empty TT (new deal = new TT
generation), as for a freshly sampled world.
"""
from __future__ import annotations

import statistics
import time

from eqfast import solver
from eqfast.rules.deal import deal_from_seed
from eqfast.rules.tables import N_DECLS

SEEDS = range(1000, 1020)
DEALS = [(deal_from_seed(s).tolist(), d) for s in SEEDS for d in range(N_DECLS)]


def _solve_all() -> tuple[list[float], int]:
    times, nodes = [], 0
    for hands, decl in DEALS:
        t0 = time.perf_counter()
        res = solver.solve(hands, decl, 0, pv=False)
        times.append(time.perf_counter() - t0)
        nodes += res.nodes
    return times, nodes


def test_bench_opening_lead_solve(benchmark):
    _solve_all()  # warm-up
    per_round: list[tuple[list[float], int]] = []

    def run():
        per_round.append(_solve_all())

    benchmark.pedantic(run, rounds=3, iterations=1)
    times = sorted(t for ts, _ in per_round for t in ts)
    total_nodes = sum(n for _, n in per_round)
    median_ms = statistics.median(times) * 1e3
    p90_ms = times[int(0.9 * len(times))] * 1e3
    benchmark.extra_info.update({
        "deals_per_round": len(DEALS),
        "median_ms_per_deal": round(median_ms, 3),
        "p90_ms_per_deal": round(p90_ms, 3),
        "mean_ms_per_deal": round(statistics.fmean(times) * 1e3, 3),
        "nodes_per_s": round(total_nodes / sum(times)),
    })
    print(f"\nsolver: deals={len(DEALS)} median_ms={median_ms:.3f} p90_ms={p90_ms:.3f} "
          f"nodes_per_s={total_nodes / sum(times):.0f}")
    assert len(times) == 3 * len(DEALS)
