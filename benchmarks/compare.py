"""Compare two pytest-benchmark JSON files: median times, ratios, rates; flag regressions.

    python -m pytest benchmarks --benchmark-enable --benchmark-json=base.json   # on main
    python -m pytest benchmarks --benchmark-enable --benchmark-json=bench.json  # on a change
    python benchmarks/compare.py base.json bench.json [--threshold 0.05]

Benchmarks are matched by `fullname` (file::test[params]). For each pair the table shows
the baseline and current median (or --stat) time, the ratio current/baseline, and every
numeric `*_per_s` rate in extra_info present in both (games_per_s, worlds_per_s, ...).
A benchmark is a regression when its time grows by more than the threshold (default 5%),
or one of its rates drops by more than the threshold. Exit status: 0 when no regression,
1 when there is one (so CI can gate), 2 when a file is missing or not benchmark JSON.
Benchmarks present on one side only are listed; --fail-on-missing turns a benchmark missing
from the current file into a failure.

Times from different machines are not comparable: the script warns when the two files'
machine/device info differ (it compares anyway).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

STATS = ("median", "min", "mean")


class BenchFileError(ValueError):
    """A benchmark JSON file that is missing or not pytest-benchmark output."""


def load_benchmarks(path) -> tuple[dict[str, dict], dict]:
    """({fullname: benchmark entry}, file-level info) of a pytest-benchmark JSON file."""
    path = Path(path)
    if not path.is_file():
        raise BenchFileError(f"{path}: no such file")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BenchFileError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise BenchFileError(f"{path}: no 'benchmarks' list (not pytest-benchmark "
                             "--benchmark-json output)")
    out = {}
    for i, bench in enumerate(data["benchmarks"]):
        name = (bench.get("fullname") or bench.get("name")) if isinstance(bench, dict) else None
        if not name or not isinstance(bench.get("stats"), dict):
            raise BenchFileError(f"{path}: benchmarks[{i}] has no fullname/name or no stats")
        if name in out:
            raise BenchFileError(f"{path}: benchmark {name!r} appears twice")
        out[name] = bench
    return out, {k: data.get(k) for k in ("machine_info", "commit_info", "datetime")}


def stat(bench: dict, name: str) -> float | None:
    value = bench["stats"].get(name)
    ok = isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def rates(bench: dict) -> dict[str, float]:
    """The numeric extra_info entries named *_per_s (higher is better)."""
    extra = bench.get("extra_info") or {}
    return {k: float(v) for k, v in extra.items()
            if k.lower().endswith("per_s") and isinstance(v, (int, float))
            and not isinstance(v, bool) and math.isfinite(v) and v > 0}


def compare(baseline: dict[str, dict], current: dict[str, dict], threshold: float = 0.05,
            stat_name: str = "median") -> dict:
    """Rows for benchmarks in both files, and the names present on one side only.

    Each row: name, base, cur (seconds), ratio (cur/base; > 1 is slower), rates
    {key: (base, cur, ratio cur/base; < 1 is slower)}, status 'regression' | 'faster' | 'ok'
    | 'no data' and reasons (what crossed the threshold).
    """
    rows = []
    for name in sorted(baseline.keys() & current.keys()):
        b, c = baseline[name], current[name]
        base, cur = stat(b, stat_name), stat(c, stat_name)
        ratio = cur / base if base and cur else None
        rb, rc = rates(b), rates(c)
        rate_rows = {k: (rb[k], rc[k], rc[k] / rb[k]) for k in sorted(rb.keys() & rc.keys())}
        reasons = []
        if ratio is not None and ratio > 1 + threshold:
            reasons.append(f"{stat_name} time x{ratio:.3f}")
        reasons += [f"{k} x{r:.3f}" for k, (_, _, r) in rate_rows.items() if r < 1 - threshold]
        if reasons:
            status = "regression"
        elif ratio is None and not rate_rows:
            status = "no data"
        elif ratio is not None and ratio < 1 - threshold:
            status = "faster"
        else:
            status = "ok"
        rows.append({"name": name, "base": base, "cur": cur, "ratio": ratio,
                     "rates": rate_rows, "status": status, "reasons": reasons})
    return {"rows": rows,
            "missing": sorted(baseline.keys() - current.keys()),
            "new": sorted(current.keys() - baseline.keys())}


def _seconds(t: float | None) -> str:
    if t is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return f"{t / scale:.3f} {unit}"
    return f"{t / 1e-9:.1f} ns"


def _rate(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def format_report(result: dict, stat_name: str = "median", threshold: float = 0.05) -> str:
    rows = result["rows"]
    width = max([len(r["name"]) for r in rows] + [9])
    lines = [f"{'benchmark':<{width}}  {'base ' + stat_name:>14}  {'current':>12}  "
             f"{'ratio':>7}  status",
             "-" * (width + 50)]
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        flag = r["status"].upper() if r["status"] == "regression" else r["status"]
        lines.append(f"{r['name']:<{width}}  {_seconds(r['base']):>14}  {_seconds(r['cur']):>12}"
                     f"  {ratio:>7}  {flag}")
        for k, (b, c, q) in r["rates"].items():
            lines.append(f"{'':<{width}}    {k}: {_rate(b)} -> {_rate(c)} (x{q:.3f})")
    for name in result["missing"]:
        lines.append(f"{name:<{width}}  missing from the current file")
    for name in result["new"]:
        lines.append(f"{name:<{width}}  new (no baseline)")
    regressions = [r for r in rows if r["status"] == "regression"]
    lines.append("")
    lines.append(f"{len(rows)} compared, {len(regressions)} regression(s) over "
                 f"{100 * threshold:g}%, {sum(r['status'] == 'faster' for r in rows)} faster, "
                 f"{len(result['missing'])} missing, {len(result['new'])} new")
    for r in regressions:
        lines.append(f"REGRESSION {r['name']}: {', '.join(r['reasons'])}")
    return "\n".join(lines)


def machine_warnings(base_info: dict, cur_info: dict) -> list[str]:
    """Differences in the fields that make timings incomparable (host, CPU, device)."""
    def fields(info: dict) -> dict:
        m = info.get("machine_info") or {}
        cpu, eq = m.get("cpu"), m.get("eqfast")
        return {"host": m.get("node"),
                "cpu": cpu.get("brand_raw") if isinstance(cpu, dict) else None,
                "device": eq.get("device") if isinstance(eq, dict) else None}

    base, cur = fields(base_info), fields(cur_info)
    return [f"warning: {key} differs (baseline {base[key]!r}, current {cur[key]!r}): "
            "timings from different machines are not comparable"
            for key in base if base[key] is not None and cur[key] is not None
            and base[key] != cur[key]]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="compare.py",
        description="Compare two pytest-benchmark JSON files (baseline, current); exit 1 on "
                    "a regression over the threshold.")
    p.add_argument("baseline", type=Path, help="baseline --benchmark-json file")
    p.add_argument("current", type=Path, help="current --benchmark-json file")
    p.add_argument("--threshold", type=float, default=0.05,
                   help="relative change that counts as a regression (default 0.05 = 5%%)")
    p.add_argument("--stat", choices=STATS, default="median", help="time statistic (default median)")
    p.add_argument("--fail-on-missing", action="store_true",
                   help="also exit 1 when a baseline benchmark is missing from the current file")
    args = p.parse_args(argv)
    if not (0 <= args.threshold < 1):
        p.error(f"--threshold must be in [0, 1), got {args.threshold}")
    try:
        base, base_info = load_benchmarks(args.baseline)
        cur, cur_info = load_benchmarks(args.current)
    except BenchFileError as exc:
        print(f"compare.py: {exc}", file=sys.stderr)
        return 2
    for w in machine_warnings(base_info, cur_info):
        print(w, file=sys.stderr)
    result = compare(base, cur, args.threshold, args.stat)
    print(format_report(result, args.stat, args.threshold))
    failed = any(r["status"] == "regression" for r in result["rows"])
    failed |= args.fail_on_missing and bool(result["missing"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
