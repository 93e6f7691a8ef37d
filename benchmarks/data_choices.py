"""Data choices ranked by the player they make: one arm per way of making Stage 2 training
data, each given the same CPU time to generate, one fixed training recipe, and the same
duplicate matches on the same deals.

    python benchmarks/data_choices.py --arm cpu-default --out runs/data_choices
    python benchmarks/data_choices.py --arm network --out runs/data_choices
    python benchmarks/data_choices.py --table --out runs/data_choices

An arm runs three steps, each resumable (re-run the same command after a kill):
  data   `eqfast-generate` in continuous mode (one process, one thread) with the arm's
         flags, stopped with one SIGINT (the batch in flight is finished and saved) once
         the process has used --cpu-minutes of CPU time (user + system, read from
         /proc, so the machine's load does not change an arm's budget, only its wall
         time). The CPU spent so far is kept in ARM/state.json; a re-run continues with
         what is left.
  train  `eqfast-train-stage2` with one recipe for every arm (the E[Q] model's loss and
         summary: `--seen-tiles 2 --loss nll --centered-weight 1`, lr 2e-3, --steps
         steps of 256 records; steps, not seconds, so the load cannot favour an arm).
         `--init` starts every arm from the same weights instead of from scratch.
  play   duplicate matches of the arm's best weights against `expert` and against the
         E[Q] model `stage2:stage2_eq`, --hands hands each, deals from 4,000,000,000 (above the
         league's 3,000,000,000 range and every training seed; eqfast/play/league.py).
`--table` prints one row per trained model (arm and training seed): CPU minutes, games
made, the matches' points per hand with 95% intervals, ranked by the margin against
`expert`. `--train-seed S` trains and plays another model on an arm's data (the spread
between seeds is the yardstick for the differences between arms).

The arms (ARMS below) follow the list of what to compare: network labels against the CPU
default (exact solver with the network as control variate), the posterior on the CPU
default with the spec's behaviour model and with the Stage 2 model, and, on the network
arm, fewer against more worlds per decision (more games against better labels),
exploration on, and transcripts played by `expert` or the shipped Stage 2 instead of the
labels' argmax.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from eqfast.utils.atomic import atomic_write_text  # noqa: E402

#: arm -> eqfast-generate flags (on top of --threads 1 --quiet). The first two compare the
#: labels; the posterior arms add inference to the CPU default; the others vary one thing
#: of the network arm (N = 100 worlds of the shipped network), which makes 18x the games
#: of the CPU default per CPU-second: worlds against games, exploration, and who plays the
#: transcripts (the labels stay the network's E[Q] at N = 100).
NET = ["--oracle", "default", "--n-samples", "100"]
ARMS = {
    "network": NET,
    "cpu-default": [],
    "posterior": ["--posterior"],
    "posterior-stage2": ["--posterior", "--behaviour-oracle", "stage2:stage2_eq", "--tau", "3",
                         "--window", "16", "--pipeline", "reference"],
    "network-n25": ["--oracle", "default", "--n-samples", "25"],
    "network-n400": ["--oracle", "default", "--n-samples", "400"],
    "network-explore": NET + ["--epsilon", "0.05", "--blunder-rate", "0.1"],
    "network-expert-play": NET + ["--play-policy", "expert", "--pipeline", "reference"],
    "network-stage2-play": NET + ["--play-policy", "stage2:stage2_eq", "--pipeline",
                                  "reference"],
}
RECIPE = ["--seen-tiles", "2", "--loss", "nll", "--centered-weight", "1", "--lr", "2e-3",
          "--warmup", "300", "--eval-every", "500", "--val-rows", "10000", "--threads", "1",
          "--quiet"]
EVAL_SEED = 4_000_000_000
#: key in ARM/play*.json -> the opponent's spec. The Stage 2 arms and opponent are the E[Q]
#: model the table was measured with (`stage2_eq`), not whichever model ships now.
OPPONENTS = {"expert": "expert", "stage2": "stage2:stage2_eq"}
CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` and its reaped children (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + cutime + cstime) / CLK


def load_state(arm_dir: Path) -> dict:
    path = arm_dir / "state.json"
    return json.loads(path.read_text()) if path.exists() else {"cpu_s": 0.0}


def save_state(arm_dir: Path, state: dict) -> None:
    atomic_write_text(arm_dir / "state.json", json.dumps(state, indent=1) + "\n")


def step_data(arm: str, arm_dir: Path, budget_s: float, seed_start: int) -> dict:
    state = load_state(arm_dir)
    left = budget_s - state["cpu_s"]
    if left <= 0:
        return state
    cmd = [sys.executable, "-m", "eqfast.cli.generate", "--out", str(arm_dir / "data"),
           "--target-games", "0", "--seed-start", str(seed_start), "--games-per-batch", "32",
           "--threads", "1", "--quiet", *ARMS[arm]]
    print(f"[{arm}] data: {left / 60:.1f} CPU-minutes left: {' '.join(cmd[2:])}", flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, cwd=ROOT)
    spent, stopping = 0.0, False
    while proc.poll() is None:
        time.sleep(2.0)
        try:
            spent = cpu_seconds(proc.pid)
        except (FileNotFoundError, ProcessLookupError):
            break
        if not stopping and spent >= left:
            proc.send_signal(signal.SIGINT)      # finish the batch in flight, then exit
            stopping = True
        # a kill now keeps the CPU spent so far (the reaped total replaces it below)
        save_state(arm_dir, dict(state, cpu_s=state["cpu_s"] + spent))
    rc = proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)    # exact, now that it is reaped
    spent = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if rc not in (0, 130):
        raise SystemExit(f"[{arm}] eqfast-generate exited {rc}")
    state["cpu_s"] += spent
    state["games"], state["records"] = count_games(arm_dir / "data")
    save_state(arm_dir, state)
    return state


def count_games(data: Path) -> tuple[int, int]:
    """(games, records) written: seed ranges and record counts of the shards' sidecars."""
    ranges, records = set(), 0
    for sidecar in data.glob("*/*.json"):
        shard = json.loads(sidecar.read_text()).get("shard", {})
        ranges.add((shard["seed_lo"], shard["seed_hi"]))
        records += int(shard["n_records"])
    return sum(hi - lo + 1 for lo, hi in ranges), records


def model_dir(arm_dir: Path, train_seed: int) -> Path:
    return arm_dir / ("model" if train_seed == 0 else f"model-s{train_seed}")


def play_path(arm_dir: Path, train_seed: int) -> Path:
    return arm_dir / ("play.json" if train_seed == 0 else f"play-s{train_seed}.json")


def step_train(arm: str, arm_dir: Path, steps: int, init: str | None, train_seed: int) -> Path:
    run = model_dir(arm_dir, train_seed)
    best = run / "best.safetensors"
    cmd = [sys.executable, "-m", "eqfast.cli.train_stage2", "--data", str(arm_dir / "data"),
           "--run", str(run), "--steps", str(steps), "--seed", str(train_seed), *RECIPE]
    if init:
        cmd += ["--init", init]
    print(f"[{arm}] train: {' '.join(cmd[2:])}", flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)        # resumes from its checkpoint
    return best


def step_play(arm: str, arm_dir: Path, weights: Path, hands: int, train_seed: int) -> dict:
    from eqfast.play.arena import play_match
    from eqfast.play.policies import policy_from_spec

    out_path = play_path(arm_dir, train_seed)
    done = json.loads(out_path.read_text()) if out_path.exists() else {}
    me = policy_from_spec(f"stage2:{weights}")
    for opp, spec in OPPONENTS.items():
        if opp in done and done[opp]["hands"] == hands:
            continue
        print(f"[{arm}] play: against {spec}, {hands} hands", flush=True)
        r = play_match(me, policy_from_spec(spec), range(EVAL_SEED, EVAL_SEED + hands // 2),
                       batch=250)
        done[opp] = r.summary()
        atomic_write_text(out_path, json.dumps(done, indent=1) + "\n")
    return done


def table(out: Path) -> str:
    rows = []
    for path in sorted(out.glob("*/play*.json")):
        arm_dir = path.parent
        state = load_state(arm_dir)
        play = json.loads(path.read_text())
        seed = path.stem.partition("-s")[2] or "0"
        cells = []
        for opp in OPPONENTS:
            s = play.get(opp)
            cells.append("" if s is None else
                         f"{s['mean_diff']:+.2f} [{s['diff_ci95'][0]:+.2f}, "
                         f"{s['diff_ci95'][1]:+.2f}] ({s['hands']})")
        key = play.get("expert", {}).get("mean_diff", float("-inf"))
        rows.append((key, arm_dir.name, seed, f"{state['cpu_s'] / 60:.0f}",
                     str(state.get("games", "")), *cells))
    rows.sort(key=lambda r: -r[0])
    head = ("arm", "training seed", "CPU min", "games", "vs expert (hands)",
            "vs stage2_eq (hands)")
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    lines += ["| " + " | ".join(r[1:]) + " |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--arm", choices=sorted(ARMS), help="the arm to run (all three steps)")
    p.add_argument("--out", type=Path, default=Path("runs/data_choices"))
    p.add_argument("--cpu-minutes", type=float, default=60.0,
                   help="CPU time of data generation per arm")
    p.add_argument("--steps", type=int, default=6000, help="training steps of 256 records")
    p.add_argument("--init", default=None,
                   help="Stage 2 weights every arm starts from (default: from scratch)")
    p.add_argument("--hands", type=int, default=10000, help="hands per evaluation match")
    p.add_argument("--seed-start", type=int, default=0,
                   help="first game seed of every arm's data (the same deals for all arms)")
    p.add_argument("--train-seed", type=int, default=0,
                   help="training seed (order of the records); seeds other than 0 train "
                        "into ARM/model-sSEED and play into ARM/play-sSEED.json, so one "
                        "arm's data gives several models and their spread")
    p.add_argument("--only", choices=("data", "train", "play"), default=None,
                   help="run one step only")
    p.add_argument("--table", action="store_true", help="print the table of finished arms")
    args = p.parse_args(argv)
    if args.table:
        print(table(args.out))
        return 0
    if args.arm is None:
        p.error("--arm is required (or --table)")
    if args.hands < 2 or args.hands % 2:
        p.error(f"--hands must be a positive even number, got {args.hands}")
    arm_dir = args.out / args.arm
    arm_dir.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "data"):
        state = step_data(args.arm, arm_dir, args.cpu_minutes * 60, args.seed_start)
        print(f"[{args.arm}] data: {state.get('games')} games in "
              f"{state['cpu_s'] / 60:.1f} CPU-minutes", flush=True)
    weights = model_dir(arm_dir, args.train_seed) / "best.safetensors"
    if args.only in (None, "train"):
        weights = step_train(args.arm, arm_dir, args.steps, args.init, args.train_seed)
    if args.only in (None, "play"):
        if not weights.exists():
            raise SystemExit(f"[{args.arm}] no trained weights at {weights}: run the train step")
        step_play(args.arm, arm_dir, weights, args.hands, args.train_seed)
        print(table(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
