"""eqfast-report: a dataset, an oracle training run or a league at a glance, as a PNG or an
HTML page.

    eqfast-report runs/quickstart --out report.html        # a dataset (eqfast-generate)
    eqfast-report runs/oracle/main --out curve.png          # a run (eqfast-train-oracle)
    eqfast-report runs/league --out league.png              # a league (eqfast-arena --league)

A dataset: E[Q] and sigma by decision index, ESS and max_w (sampled decisions; enumerated
ones apart), exploration modes and q_gap, E[Q] against the realized outcome, legal-move
counts, declarations. A run: the learning curve and the per-trick errors. A league: the
ratings with their intervals and the pairwise points matrix. Needs matplotlib
(`pip install -e '.[report]'`); eqfast/analysis/report.py says what each panel shows.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .common import HelpFormatter, path_type


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="eqfast-report", description=__doc__.split("\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("source", type=path_type,
                    help="a dataset directory (train/ val/ test/), a split directory or a shard "
                         "file; or a training run directory (it holds history.jsonl); or a "
                         "league directory or its league.json (eqfast-arena --league)")
    ap.add_argument("--out", required=True, type=path_type, help="report file: .png or .html")
    ap.add_argument("--skip-shard", action="append", default=[], metavar="[SPLIT/]SHARD",
                    help="leave this shard out (e.g. train/shard_000001-000001; repeatable): "
                         "read the rest of a dataset with a damaged shard; eqfast-generate on "
                         "the directory regenerates it")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return ap


def output_problem(out: Path) -> str | None:
    """Why the report cannot be written to `out` (None if it can), found before the work."""
    if out.suffix not in (".png", ".html"):
        return f"--out {out}: the report is a .png or an .html file"
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        return f"--out {out}: the directory {parent} is missing"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--out {out}: the directory {parent} is not writable"
    if out.is_dir():
        return f"--out {out} is a directory"
    return None


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    if not a.source.exists():
        print(f"eqfast-report: {a.source}: no such file or directory", file=sys.stderr)
        return 2
    problem = output_problem(a.out)
    if problem is not None:
        print(f"eqfast-report: {problem}", file=sys.stderr)
        return 2
    from ..data.shards import ShardError
    try:
        from ..analysis.report import write_report
        t0 = time.perf_counter()
        say = None if a.quiet else (lambda m: print(
            f"eqfast-report: [{time.perf_counter() - t0:5.1f} s] {m}", file=sys.stderr, flush=True))
        done = write_report(a.source, a.out, skip=a.skip_shard, progress=say)
    except (ImportError, ValueError, ShardError) as e:
        print(f"eqfast-report: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"eqfast-report: cannot write {a.out}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(json.dumps(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
