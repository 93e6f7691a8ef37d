"""Bidding evaluator benchmark: the full 10-contract matrix of a hand at N = 500 exact
(5,000 opening positions, V_PI from the solver's v_batch on every core; beside it the same
matrix with every opening lead solved, `leads=True`, the baseline), and the lower
bracket's cost (the E[Q] player on every seat). Goal: matrix <= 5 s on the
2-core CPU machine.

Run: pytest benchmarks/test_bench_bidding.py --benchmark-enable -s
(or `python benchmarks/test_bench_bidding.py [matrix|sequential|network|lower ...]` for the
same figures without pytest). Also timed: --sequential with the default rule, and the
network path at N = 500 with its default audits.
Hands: seat 0 of the deals of seeds 2000..2002, plus one strong hand; the solver's cost
varies a lot per hand, so the figures are per hand, wall and process CPU time.
"""
from __future__ import annotations

import time

import pytest

from eqfast.bidding import evaluate, format_hand
from eqfast.rules.deal import deal_from_seed

N = 500
HANDS = [format_hand(deal_from_seed(s)[0]) for s in (2000, 2001, 2002)] + \
    ["6-6,6-5,6-4,5-5,4-4,3-3,2-2"]


def matrix_times(hands=HANDS, n=N, threads=2, leads=False) -> list[dict]:
    rows = []
    for h in hands:
        w, c = time.perf_counter(), time.process_time()
        r = evaluate(h, n=n, threads=threads, leads=leads)
        rows.append({"hand": h, "n": n, "threads": threads, "wall_s": time.perf_counter() - w,
                     "cpu_s": time.process_time() - c, "choice": r["choice"]["name"]})
    return rows


def sequential_times(hands=HANDS, threads=2) -> list[dict]:
    """--sequential with the default rule: the completions it needs and their cost."""
    from eqfast.bidding import StoppingRule
    rows = []
    for h in hands:
        w = time.perf_counter()
        r = evaluate(h, stopping=StoppingRule(), threads=threads)
        rows.append({"hand": h, "n": r["n"], "reason": r["stopping"]["reason"],
                     "wall_s": time.perf_counter() - w, "best_bid": r["best_bid"]["level"]})
    return rows


def network_times(hands=HANDS[:2], n=N, threads=2) -> list[dict]:
    """--oracle network at N = 500 with the default audits."""
    from eqfast.oracle import load_default_oracle
    net = load_default_oracle()
    rows = []
    for h in hands:
        w = time.perf_counter()
        r = evaluate(h, n=n, threads=threads, network=net)
        a = r["audit"]
        rows.append({"hand": h, "n": n, "wall_s": time.perf_counter() - w,
                     "audited": a["audited_fraction"], "adversarial_solves": a["adversarial"]["solves"],
                     "worst_audited": a["worst_discrepancy_audited"],
                     "worst_search": a["adversarial"]["worst_discrepancy"]})
    return rows


def lower_times(hands=HANDS[:2], k=50, worlds=16) -> list[dict]:
    import torch

    from eqfast.bidding.lower import lower_engine
    from eqfast.oracle import load_default_oracle
    torch.set_num_threads(2)
    engine = lower_engine(load_default_oracle(), worlds)
    rows = []
    for h in hands:
        r = evaluate(h, n=k, lower_engine=engine, lower_n=k)
        games = k * len(r["contracts"])
        rows.append({"hand": h, "games": games, "worlds": worlds, "lower_s": r["timing_s"]["lower"],
                     "games_per_s": games / r["timing_s"]["lower"]})
    return rows


def _print(rows):
    for r in rows:
        print("  ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))


def _bench(benchmark, measure):
    rows = []
    benchmark.pedantic(lambda: rows.extend(measure()), rounds=1, iterations=1)
    _print(rows)
    benchmark.extra_info["hands"] = rows


@pytest.mark.benchmark(group="bidding")
def test_bench_matrix_n500_exact(benchmark):
    _bench(benchmark, matrix_times)


def matrix_side_by_side_times(hands=HANDS, n=N, threads=2) -> list[dict]:
    """Per hand: V alone, then every lead solved (the solver's TT cleared before each)."""
    from eqfast.solver import clear

    rows = []
    for h in hands:
        for leads in (False, True):
            clear()
            rows += matrix_times([h], n, threads, leads)
            rows[-1]["leads"] = leads
    return rows


@pytest.mark.benchmark(group="bidding")
def test_bench_matrix_v_alone_against_all_leads(benchmark):
    _bench(benchmark, matrix_side_by_side_times)


@pytest.mark.benchmark(group="bidding")
def test_bench_sequential_and_network(benchmark):
    _bench(benchmark, lambda: sequential_times() + network_times())


@pytest.mark.benchmark(group="bidding")
def test_bench_lower_bracket(benchmark):
    _bench(benchmark, lower_times)


if __name__ == "__main__":
    import os
    import sys
    parts = sys.argv[1:] or ["matrix", "sequential", "network", "lower"]
    print(f"load average before: {os.getloadavg()}")
    for part in parts:
        _print(globals()[f"{part}_times"]())
    print(f"load average after: {os.getloadavg()}")
