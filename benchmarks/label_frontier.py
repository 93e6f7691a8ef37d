"""The fidelity/speed frontier of the label configurations: for each configuration, generate
the same fixed games (seeds, N, greedy play, worlds stored), time it on one and on two
threads, and measure its labels with `eqfast-validate --exact` (oracle-induced E[Q] error
on the records' own worlds, sampling error, total error against a fresh exact reference,
argmax agreement and regret over decisions with >= 2 legal moves, per trick).

    python benchmarks/label_frontier.py --out runs/frontier            # every configuration
    python benchmarks/label_frontier.py --out runs/frontier --only exact-n100,network
    python benchmarks/label_frontier.py --out runs/frontier --table    # the markdown table
    python benchmarks/label_frontier.py --out runs/timing --timing --only exact-by-trick,network

Each configuration's results land in OUT/<name>/ (records, generate and validate output)
and one line of OUT/frontier.jsonl; a configuration already in that file is skipped, so an
interrupted run resumes. Games/s comes from eqfast-generate's own summary (the run's wall
time, the oracle's load excluded); it moves with whatever else the machine runs, so the
table records the conditions. `--timing` measures games/s alone, side by side: rounds that
alternate the configurations, each on 1 and 2 threads (no records kept, nothing validated),
one line per run on stdout and in OUT/timing.txt.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

BUDGETS = "25,50,100,100,100,100,100"     # the CPU default's worlds per decision by trick
LEAN = "10,25,50,50,50,50,50"


def exact(budgets: str) -> list[str]:
    return ["--oracle", "exact", "--n-by-trick", budgets]


def cv(oracle: str = "default", worlds: int = 400) -> list[str]:
    """The control variate: `oracle` on `worlds` worlds per decision."""
    return ["--control-variate", oracle, "--cv-samples", str(worlds)]


#: posterior weights (K = 8) from the shipped network's behaviour model
POSTERIOR_NET = ["--posterior", "--behaviour-oracle", "default"]
#: adaptive on the corrected mean's standard error (cv_se), doubling from the budgets
SEM = ["--sem", "1.5", "--max-samples", "200"]

#: name -> eqfast-generate flags (besides the common ones below)
CONFIGS = {
    "network": ["--oracle", "default"],
    "accurate": ["--oracle", "accurate"],
    "network+exact3": ["--oracle", "default", "--exact-tricks", "3"],
    "network+exact5": ["--oracle", "default", "--exact-tricks", "5"],
    "accurate+exact5": ["--oracle", "accurate", "--exact-tricks", "5"],
    "exact-n100": ["--oracle", "exact"],
    "exact-n50": ["--oracle", "exact", "--n-samples", "50"],
    "exact-by-trick": exact(BUDGETS),
    "exact-sem": ["--oracle", "exact", "--n-samples", "25", "--sem", "1.0", "--max-samples", "100"],
    # the exact oracle's E[Q] corrected by a network on 400 worlds (control variate)
    "exact-by-trick+cv": exact(BUDGETS) + cv(),
    "exact-lean+cv": exact(LEAN) + cv(),
    "exact-by-trick+cv200": exact(BUDGETS) + cv(worlds=200),
    "exact-by-trick+cv-accurate": exact(BUDGETS) + cv("accurate"),
    "exact-n100+cv": ["--oracle", "exact", "--n-samples", "100"] + cv(),
    # posterior weights without and with the control variate (the CPU default with
    # --posterior is the second)
    "exact-by-trick+posterior-net": exact(BUDGETS) + POSTERIOR_NET,
    "exact-by-trick+cv+posterior-net": exact(BUDGETS) + POSTERIOR_NET + cv(),
    # the solver's own behaviour model: its K past positions of every world solved too
    "exact-by-trick+posterior-exact": exact(BUDGETS) + ["--posterior"],
    "exact-by-trick-x2+posterior-net": exact("50,100,200,200,200,200,200") + POSTERIOR_NET,
    "exact-by-trick+cv200+posterior-net": exact(BUDGETS) + POSTERIOR_NET + cv(worlds=200),
    "exact-by-trick+cv+sem1.5": exact(BUDGETS) + cv() + SEM,
    "exact-lean+cv+sem1.5": exact(LEAN) + cv() + SEM,
}
SEED_START = 880_000_000
COMMON = ["--games", "24", "--games-per-batch", "24", "--n-samples", "100",
          "--pipeline", "reference", "--quiet"]


def generate(flags: list[str], out: Path, threads: int, store: bool,
             seed_start: int = SEED_START) -> dict:
    if out.exists():
        shutil.rmtree(out)
    cmd = ["eqfast-generate", "--out", str(out), *COMMON, "--seed-start", str(seed_start),
           *flags, "--threads", str(threads)]
    if store:
        cmd.append("--store-worlds")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def timing(names: list[str], out: Path, rounds: int, seed_start: int = SEED_START) -> None:
    """games/s of each configuration on 1 and 2 threads, `rounds` rounds that alternate the
    configurations (so a change of machine load touches them alike)."""
    with (out / "timing.txt").open("a") as log:
        for r in range(1, rounds + 1):
            for name in names:
                for threads in (1, 2):
                    run = generate(CONFIGS[name], out / "timing_run", threads, store=False,
                                   seed_start=seed_start)
                    line = f"{r} {name} threads={threads} {run['games_per_s']}"
                    print(line, flush=True)
                    log.write(line + "\n")
    shutil.rmtree(out / "timing_run", ignore_errors=True)


def measure(name: str, out: Path, max_enumerate: int, seed_start: int = SEED_START) -> dict:
    flags = CONFIGS[name]
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    two = generate(flags, d / "timing2", 2, store=False, seed_start=seed_start)
    shutil.rmtree(d / "timing2")
    # worlds are stored where the run has one N per decision (validate then also reports
    # the per-world error); budgets by trick and --sem vary N, so their records cannot, and
    # a control variate's records hold corrected means, not per-world values
    one = generate(flags, d / "records", 1, seed_start=seed_start,
                   store=not any(f in flags for f in ("--n-by-trick", "--sem",
                                                      "--control-variate")))
    t0 = time.perf_counter()
    cmd = ["eqfast-validate", str(d / "records"), "--exact", "0", "--max-enumerate",
           str(max_enumerate), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    (d / "validate.txt").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])["exact"]
    report.pop("records", None)
    return {"config": name, "flags": flags, "seed_start": seed_start,
            "games_per_s_1": one["games_per_s"],
            "games_per_s_2": two["games_per_s"], "validate_s": round(time.perf_counter() - t0),
            # the work, independent of the machine's load: rows each oracle evaluated
            "oracle_rows": one["oracle_rows"], "cv_rows": one.get("cv_rows", 0),
            "exact": report}


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def table(rows: list[dict]) -> str:
    out = ["| configuration | oracle RMSE | oracle mean abs | sampling floor rms | total RMSE "
           "| argmax = exact | regret | oracle RMSE tricks 1..7 | total RMSE tricks 1..7 "
           "| games/s 1 / 2 threads |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for r in rows:
        e = r["exact"]
        def per_trick(key):
            return " / ".join(fmt(e["by_trick"][str(t)][key], 1) if str(t) in e["by_trick"]
                              else "-" for t in range(1, 8))
        out.append(f"| {r['config']} | {fmt(e['oracle_rmse'])} | {fmt(e['oracle_mae'])} | "
                   f"{fmt(e['sampling_floor_rms'])} | {fmt(e['total_rmse'])} | "
                   f"{fmt(100 * e['argmax_agreement'], 0)}% | {fmt(e['mean_regret'], 3)} | "
                   f"{per_trick('oracle_rmse')} | {per_trick('total_rmse')} | "
                   f"{fmt(r['games_per_s_1'])} / {fmt(r['games_per_s_2'])} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="results directory")
    ap.add_argument("--only", default=None, help="comma-separated configuration names "
                    f"(of {', '.join(CONFIGS)})")
    ap.add_argument("--max-enumerate", type=int, default=2000,
                    help="size of the fresh exact reference (eqfast-validate --max-enumerate)")
    ap.add_argument("--seed-start", type=int, default=SEED_START,
                    help="first game seed of the 24 (another set of games: another --out)")
    ap.add_argument("--table", action="store_true", help="print the markdown table and stop")
    ap.add_argument("--timing", action="store_true",
                    help="games/s only, side by side (see the module doc); nothing validated")
    ap.add_argument("--rounds", type=int, default=2, help="--timing: rounds over the configurations")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "frontier.jsonl"
    done = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    if a.table:
        order = {name: i for i, name in enumerate(CONFIGS)}
        print(table(sorted(done, key=lambda r: order.get(r["config"], 99))))
        return 0
    names = a.only.split(",") if a.only else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        ap.error(f"unknown configuration(s) {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")
    if a.timing:
        timing(names, out, a.rounds, a.seed_start)
        return 0
    for name in names:
        if any(r["config"] == name for r in done):
            print(f"{name}: done earlier", flush=True)
            continue
        t0 = time.perf_counter()
        row = measure(name, out, a.max_enumerate, a.seed_start)
        with results.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{name}: {time.perf_counter() - t0:.0f} s; oracle RMSE "
              f"{fmt(row['exact']['oracle_rmse'])}, total {fmt(row['exact']['total_rmse'])}, "
              f"{row['games_per_s_1']:.2f} games/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
