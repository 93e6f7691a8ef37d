"""Benchmark-suite setup: Triton mode, and provenance in every saved JSON.

Run the suite with `python -m pytest benchmarks --benchmark-enable --benchmark-json=bench.json`
(pyproject disables benchmarks by default so the test run stays fast).

Triton kernels run under TRITON_INTERPRET=1 when no CUDA device is present, decided here
once, before any benchmark module imports eqfast.kernels (the variable is read when kernels
are defined), as tests/conftest.py does for the tests.

Provenance: `--benchmark-json` output gets `machine_info["eqfast"]` and, in every
benchmark's extra_info, `provenance` = {commit, dirty, date, torch, triton, cuda, device,
torch_threads, triton_interpret, python}, so a JSON file copied out of CI still says what
produced it. benchmarks/compare.py warns when two files' devices differ.
"""
from __future__ import annotations

import datetime
import functools
import os
import platform
import subprocess
from pathlib import Path

import torch

try:
    _HAS_CUDA = torch.cuda.is_available()
except Exception:  # pragma: no cover - broken CUDA install
    _HAS_CUDA = False
if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def provenance() -> dict:
    """Where and with what the benchmarks ran (computed once per pytest session)."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(status) if status is not None else None,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "triton": triton_version,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name() if _HAS_CUDA else f"cpu: {_cpu_name()}",
        "torch_threads": torch.get_num_threads(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
        "python": platform.python_version(),
    }


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["eqfast"] = provenance()


def pytest_benchmark_update_json(config, benchmarks, output_json):
    for bench in output_json.get("benchmarks", []):
        extra = bench.setdefault("extra_info", {})
        extra.setdefault("provenance", provenance())


def random_played_games(n_games: int, n_plays: int, seed: int, device: str):
    """n_games deals (random decl/leader) after n_plays uniformly random legal plays: the
    benchmark states (opening: n_plays = 0; mid-hand with voids: ~12)."""
    import numpy as np

    from eqfast.rules.batched import BatchedGames
    from eqfast.rules.deal import deal_from_seed

    gen = torch.Generator().manual_seed(seed)
    hands = np.stack([deal_from_seed(seed + g) for g in range(n_games)])
    games = BatchedGames.new(hands, torch.randint(0, 10, (n_games,), generator=gen),
                             torch.randint(0, 4, (n_games,), generator=gen), device=device)
    for _ in range(n_plays):
        slot = torch.multinomial(games.legal_mask().float().cpu(), 1, generator=gen)[:, 0]
        games = games.play(slot.to(device))
    return games
