"""Helpers for tests that run eqfast's commands as a user does: in a subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: the cheapest generator run that still writes every split: 2 games of one batch each,
#: N = 4 worlds, the exact oracle on the reference pipeline (no network to load)
TINY = ["--games", "2", "--games-per-batch", "1", "--n-samples", "4", "--oracle", "exact",
        "--pipeline", "reference", "--threads", "1", "--quiet"]


def cli_env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")


def run_cli(command: str, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    """`eqfast-<command> args...` as `python -m eqfast.cli.<module>`, text output captured."""
    module = command.replace("-", "_")
    return subprocess.run([sys.executable, "-m", f"eqfast.cli.{module}", *map(str, args)],
                          env=cli_env(), capture_output=True, text=True, timeout=timeout)


def generate_tiny(out: Path, *extra) -> dict:
    """Run `eqfast-generate --out out` with TINY settings; its JSON summary."""
    proc = run_cli("generate", "--out", out, *TINY, *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_usage_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit status 2, a one-line style message naming each needle, never a traceback."""
    err = proc.stderr
    assert proc.returncode == 2, (proc.returncode, err)
    assert "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
