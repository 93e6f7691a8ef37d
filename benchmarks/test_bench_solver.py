"""Exact solver benchmark: opening-lead solve (Q of every legal lead) of full 7-tile deals,
20 fixed seeds x all 10 declarations, one core. Goal: median <= 20 ms per deal.

Run: pytest benchmarks/test_bench_solver.py --benchmark-enable
(also: eqfast-solve --bench 200). Each deal starts from an empty TT (new deal = new TT
generation), as for a freshly sampled world.
"""
from __future__ import annotations

import statistics
import time

import pytest

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


# ---------------------------------------------------------------- E[Q] workload, old vs new
#
# The exact oracle's workload: one fresh deal ("world") per solve, Q of every legal move of
# the actor, mostly in tricks 1-2. Both benchmarks run the solver of commit 6fcbcf8
# (BASELINE, built from git into a temporary module) and the current one side by side in
# one process, so machine load hits both alike:
#
#   pytest benchmarks/test_bench_solver.py --benchmark-enable -k "worlds or generate" -s

BASELINE = "6fcbcf8"  # the solver before its E[Q]-workload changes (docs/SOLVER.md)
GEN_GAMES, GEN_SEED = 4, 100  # eqfast-generate --oracle exact, N = 100, seeds [100, 104)


def _build_baseline(tmp_dir):
    """The BASELINE solver as module `_csolver_base` (None when git or a compiler is missing)."""
    import importlib.util
    import subprocess
    import sys

    from benchmarks.conftest import ROOT

    try:
        src = subprocess.run(["git", "-C", str(ROOT), "show", f"{BASELINE}:eqfast/solver/_csolver.c"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    src = src.replace("PyInit__csolver(void)", "PyInit__csolver_base(void)")
    src = src.replace('"_csolver",', '"_csolver_base",')
    (tmp_dir / "_csolver_base.c").write_text(src)
    (tmp_dir / "setup.py").write_text(
        "from setuptools import setup, Extension\n"
        "setup(name='b', ext_modules=[Extension('_csolver_base', ['_csolver_base.c'], "
        "extra_compile_args=['-O3', '-std=c11'])])\n")
    build = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"],
                           cwd=tmp_dir, capture_output=True, text=True)
    so = sorted(tmp_dir.glob("_csolver_base*.so"))
    if build.returncode or not so:
        return None
    spec = importlib.util.spec_from_file_location("_csolver_base", so[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import numpy as np

    from eqfast.rules import tables as T
    mod.init_tables(np.ascontiguousarray(T.FOLLOW_MASK, dtype="<u4").tobytes(),
                    np.ascontiguousarray(T.RANK, dtype=np.int8).tobytes(),
                    np.ascontiguousarray(T.LED_SUIT, dtype=np.int8).tobytes(),
                    np.ascontiguousarray(T.POINTS, dtype=np.int8).tobytes())
    return mod


class _Baseline:
    """The baseline module behind the current wrapper's call (it has no threads argument)."""

    def __init__(self, mod):
        self.mod = mod

    def q_batch(self, hands, decl, leader, trick, threads=1):
        return self.mod.q_batch(hands, decl, leader, trick)

    def __getattr__(self, name):
        return getattr(self.mod, name)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    mod = _build_baseline(tmp_path_factory.mktemp("baseline_solver"))
    if mod is None:
        pytest.skip(f"cannot build the {BASELINE} solver (git or a C compiler missing)")
    return _Baseline(mod)


def _world_rows(trick_no: int, n: int = 100):
    """n fresh deals (seeded), random decl/leader, played at random to a decision of trick
    `trick_no` (0..3 tiles already in the trick): q_batch byte arguments."""
    import random

    import numpy as np

    from eqfast.rules.state import GameState
    from eqfast.rules.tables import mask_of

    rng = random.Random(77 + trick_no)
    hands, decl, leader, trick = [], [], [], []
    for _ in range(n):
        s = GameState.new(deal_from_seed(rng.randrange(2**31)).tolist(), rng.randrange(10),
                          rng.randrange(4))
        for _ in range(4 * (trick_no - 1) + rng.randrange(4)):
            s = s.play(rng.choice(s.legal_moves()))
        hands.append([mask_of(h) for h in s.hands])
        decl.append(s.decl)
        leader.append(s.leader)
        trick.append(list(s.trick) + [-1] * (3 - len(s.trick)))
    return (np.array(hands, "<u4").tobytes(), np.array(decl, np.uint8).tobytes(),
            np.array(leader, np.uint8).tobytes(), np.array(trick, np.int8).tobytes())


def _cpu_solve(mod, rows, reps: int = 3):
    """(nodes, best CPU seconds of `reps`) for one q_batch call on one thread."""
    best = float("inf")
    for _ in range(reps):
        mod.clear()
        t0 = time.thread_time()
        q, nodes = mod.q_batch(*rows)
        best = min(best, time.thread_time() - t0)
    return q, nodes, best


def test_bench_worlds_old_vs_new(benchmark, baseline):
    """Q of every legal move in 100 fresh worlds per trick (1, 2, 3), baseline vs current:
    nodes (exact) and CPU ms per world (best of 3, one thread)."""
    from eqfast.solver import _csolver

    table = {}
    for trick_no in (1, 2, 3):
        rows = _world_rows(trick_no)
        q_old, n_old, t_old = _cpu_solve(baseline, rows)
        q_new, n_new, t_new = _cpu_solve(_csolver, rows)
        assert q_old == q_new  # same exact Q
        table[f"trick{trick_no}"] = {
            "nodes_per_world_old": n_old // 100, "nodes_per_world_new": n_new // 100,
            "ms_per_world_old": round(t_old * 10, 3), "ms_per_world_new": round(t_new * 10, 3),
            "speedup": round(t_old / t_new, 2)}
        print(f"\ntrick {trick_no}: nodes/world {n_old // 100} -> {n_new // 100}, "
              f"ms/world {t_old * 10:.3f} -> {t_new * 10:.3f} ({t_old / t_new:.2f}x)")
    rows = _world_rows(1)
    benchmark.pedantic(lambda: _csolver.q_batch(*rows), rounds=3, iterations=1)
    benchmark.extra_info.update(table)


def _generate_seconds(tmp_dir, threads: int) -> float:
    import torch

    from eqfast.cli import generate

    before = torch.get_num_threads()
    t0 = time.perf_counter()
    try:
        rc = generate.main(["--out", str(tmp_dir), "--oracle", "exact", "--n-samples", "100",
                            "--games", str(GEN_GAMES), "--games-per-batch", str(GEN_GAMES),
                            "--seed-start", str(GEN_SEED), "--threads", str(threads), "--quiet"])
    finally:
        torch.set_num_threads(before)
    assert rc == 0
    return time.perf_counter() - t0


def test_bench_generate_exact_old_vs_new(benchmark, baseline, tmp_path, monkeypatch):
    """eqfast-generate --oracle exact --n-samples 100 on GEN_GAMES games: games/s with the
    baseline solver (1 thread), the current one (1 thread) and the current one on 2 threads,
    interleaved over 2 rounds (best round of each kept)."""
    import itertools

    import eqfast.solver as solver_api

    current = solver_api._csolver
    counter = itertools.count()
    best = {"old_1t": float("inf"), "new_1t": float("inf"), "new_2t": float("inf")}

    def run(name):
        threads = 2 if name == "new_2t" else 1
        monkeypatch.setattr(solver_api, "_csolver", baseline if name == "old_1t" else current)
        try:
            best[name] = min(best[name], _generate_seconds(tmp_path / f"r{next(counter)}", threads))
        finally:
            monkeypatch.setattr(solver_api, "_csolver", current)

    for _ in range(2):
        run("old_1t")
        run("new_2t")
    benchmark.pedantic(lambda: run("new_1t"), rounds=2, iterations=1)
    rates = {k: round(GEN_GAMES / v, 3) for k, v in best.items()}
    info = {f"games_per_s_{k}": v for k, v in rates.items()}
    info["speedup_1t"] = round(rates["new_1t"] / rates["old_1t"], 2)
    info["speedup_2t_vs_old_1t"] = round(rates["new_2t"] / rates["old_1t"], 2)
    benchmark.extra_info.update(info)
    print("\n" + " ".join(f"{k}={v}" for k, v in info.items()))
