"""The summary of a benchmarks/gpu_session.sh run, rebuilt from what its steps have written so far.

    python benchmarks/gpu_summary.py RESULTS_DIR > RESULTS_DIR/summary.txt

Reads RESULTS_DIR/env.txt, steps.txt (one line per step: name, status, seconds) and
runs.jsonl (one JSON object per engine run or kernel stage, from profiling/profile_run.py
--jsonl and benchmarks/gpu_kernels.py --out) and prints the tables that go into
benchmarks/RESULTS.md. Missing files are skipped: the summary is valid after every step.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def _nan(x, scale=1.0, fmt="{:.1f}"):
    return fmt.format(x * scale) if isinstance(x, (int, float)) else "-"


def engine_table(runs: list[dict]) -> list[str]:
    lines = [f"{'run':<36}{'oracle':<34}{'G':>6}{'post':>5}{'graphs':>7}{'prec':>6}"
             f"{'games/s':>10}{'oracle rows/s':>15}{'alone%':>8}{'dev oracle%':>12}"]
    for r in runs:
        dev = r.get("device_share", {}).get("by_stage", {}).get("oracle")
        lines.append(
            f"{(r.get('label', '') + (' @' + r['commit'] if 'commit' in r else ''))[:35]:<36}"
            f"{r['oracle'][:33]:<34}{r.get('games_per_batch', 0):>6}"
            f"{'K' + str(8) if r['posterior'] else '-':>5}{'on' if r.get('graphs') else 'off':>7}"
            f"{r.get('oracle_precision', 'fp32'):>6}{r['games_per_s']:>10.1f}"
            f"{r['oracle_rows_per_s']:>15,.0f}{_nan(r.get('oracle_alone_share'), 100):>8}"
            f"{_nan(dev, 100):>12}")
    return lines


def kernel_table(rows: list[dict]) -> list[str]:
    card = next((r for r in rows if r["stage"] == "_card"), {})
    lines = [f"card {card.get('device', '?')}, device-to-device copy "
             f"{_nan(card.get('copy_gb_per_s'), 1, '{:.0f}')} GB/s (read + write); "
             f"G = {card.get('games', '?')}, N = {card.get('worlds', '?')}, "
             f"K = {card.get('window', '?')}",
             f"{'stage':<28}{'unit':>10}{'ref ms':>10}{'triton ms':>11}{'speedup':>9}"
             f"{'triton /s':>12}{'GB/s':>8}{'of copy':>9}"]
    for r in rows:
        if r["stage"] == "_card":
            continue
        ref, tri = r.get("reference", {}), r.get("triton", {})
        lines.append(f"{r['stage']:<28}{r['unit']:>10}{_nan(ref.get('ms'), 1, '{:.4f}'):>10}"
                     f"{_nan(tri.get('ms'), 1, '{:.4f}'):>11}{_nan(r.get('speedup'), 1, '{:.2f}x'):>9}"
                     f"{_nan(tri.get('per_s'), 1, '{:.3g}'):>12}"
                     f"{_nan(tri.get('gb_per_s'), 1, '{:.0f}'):>8}"
                     f"{_nan(tri.get('bandwidth_share'), 100, '{:.0f}%'):>9}")
    return lines


def tune_table(rows: list[dict]) -> list[str]:
    lines = [f"{'G':>7}{'BLOCK_G':>9}{'warps':>7}{'ms':>10}{'GB/s':>9}{'of copy':>9}"
             f"{'vs ref':>8}  max rel diff"]
    for r in rows:
        lines.append(f"{r['games']:>7}{r['block_g']:>9}{r['num_warps']:>7}{r['ms']:>10.4f}"
                     f"{r['gb_per_s']:>9.0f}{_nan(r.get('bandwidth_share'), 100, '{:.0f}%'):>9}"
                     f"{r['speedup_vs_reference']:>7.1f}x  {r.get('max_rel_diff', float('nan')):.1e}")
    return lines


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    d = Path(argv[0])
    out = []
    if (d / "env.txt").exists():
        out += ["== environment", (d / "env.txt").read_text().rstrip(), ""]
    if (d / "steps.txt").exists():
        out += ["== steps (name, status, seconds)", (d / "steps.txt").read_text().rstrip(), ""]
    records = []
    if (d / "runs.jsonl").exists():
        for n, line in enumerate((d / "runs.jsonl").read_text().splitlines(), 1):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:           # a line cut by a killed step
                out.append(f"(runs.jsonl line {n} unreadable: skipped)")
    runs = [r for r in records if r.get("kind") == "profile"]
    kernels = [r for r in records if r.get("kind") == "kernel"]
    if runs:
        out += ["== engine runs (N = 100 unless the label says; alone% = oracle forward alone "
                "on the run's rows / run wall time; dev oracle% = device time under the "
                "oracle stage, profiler runs only)"] + engine_table(runs) + [""]
    if kernels:
        out += ["== kernels vs reference (same card, same inputs)"] + kernel_table(kernels) + [""]
    tune = [r for r in records if r.get("kind") == "moments_tune"]
    if tune:
        out += ["== reduction launch configurations (benchmarks/gpu_moments_tune.py)"] + \
            tune_table(tune) + [""]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
