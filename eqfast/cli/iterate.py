"""eqfast-iterate: the improvement loop, each Stage 2 generation trained on the games of the last.

    eqfast-iterate --run runs/iterate --generations 5 --games 2000 --steps 4000

Generation 0 is the starting model (`--init`, default the shipped Stage 2). Generation k + 1:

1. data   eqfast-generate --play-policy stage2:gen-k (the moves of generation k, with the
          exploration flags acting on its values) labelled by the engine as usual, with
          generation k as the posterior's behaviour model (`--behaviour-oracle
          stage2:gen-k`, unless --no-posterior); seeds from --seed-start + k * SEED_STRIDE
2. train  eqfast-train-stage2's trainer from generation k's weights (`--init`), or from
          fixed weights BASE (`--train-from`: with --tricks and a split parent, BASE
          takes the place of the part that plays those tricks, the other stays the
          parent's), on its games (with --replay and --extra-data, more); best
          validation regret kept
3. match  a duplicate match of generation k + 1 against generation k (eqfast.play.arena)
          on --match-deals deals from --match-seed-start (disjoint from the league's and
          every training range)

Generation k + 1 beats generation k when the 95% interval of its points per hand lies
above 0. The loop stops at the first generation that does not (the best generation is its
parent), or after --generations trained generations.

Files (all written atomically; DIR/gen-K/card.json records the settings and every finished
step, so a rerun of the command skips finished steps, resumes the data through
eqfast-generate's own resume and the training through its checkpoint, and never touches a
finished generation):

    DIR/gen-0/weights.safetensors, card.json           the starting model
    DIR/gen-K/card.json          settings, the eqfast-generate arguments, steps done (with
                                 wall and CPU seconds), the match row and the verdict
    DIR/gen-K/data/              the eqfast-generate output
    DIR/gen-K/start.safetensors  with --train-from: the weights its training starts from
    DIR/gen-K/train/             the trainer's run directory (checkpoint, history.jsonl)
    DIR/gen-K/weights.safetensors  the generation's weights (train/best.safetensors)
    DIR/gen-K/data_card.json     where its training records came from
    DIR/gen-K/train.json         its training record (learning curve, final val figures)
    DIR/gen-K/match.json         the match against generation K - 1 (eqfast-arena's fields)
    DIR/iterate.json             one row per generation, the best one and why the loop
                                 stopped

See docs/STAGE2.md, "The improvement loop".
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from ..data.shards import ShardError
from ..paths import stage2_weights
from ..stage2.defaults import parse_tricks
from ..stage2.split import parse_part
from ..utils.atomic import atomic_path, atomic_write_text
from .common import HelpFormatter, path_type

#: the first data seed of generation 1; generation k starts SEED_STRIDE * (k - 1) later.
#: Above every seed range the project trains, labels or evaluates on (Stage 2 data from 0,
#: oracle labels below 2 x 10^8 and at 2 x 10^9, oracle evaluations at 10^9, the league at
#: 3 x 10^9: eqfast/play/league.py) and below MATCH_SEED_START's deals
DATA_SEED_START = 10_000_000_000
SEED_STRIDE = 100_000_000
#: the deals of the generation-against-parent matches: 4 x 10^9 is not in the league's
#: range (DEFAULT_SEED_START = 3 x 10^9 and up to 20,000 deals a pair) nor in any training
#: range, so no generation ever trained on a match deal
MATCH_SEED_START = 4_000_000_000
CARD = "card.json"
WEIGHTS = "weights.safetensors"
SUMMARY = "iterate.json"
#: the settings that define a generation: an unfinished generation resumes only with these
SETTING_KEYS = ("games", "games_per_batch", "seed_start", "run_seed", "oracle", "n_samples",
                "label_args", "posterior", "tau", "window", "temperature", "epsilon",
                "blunder_rate", "blunder_max_regret", "steps", "batch", "lr", "warmup",
                "loss", "centered_weight", "mc_weight", "train_seed", "eval_every",
                "val_rows", "match_deals", "match_seed_start", "replay", "tricks",
                "train_from", "ema", "min_worlds", "extra_data", "data_ranks")
#: a setting added since some runs started: its value in a card that lacks it
SETTING_DEFAULTS = {"replay": 1, "tricks": None, "train_from": None, "ema": 0.0,
                    "min_worlds": 1, "extra_data": [], "data_ranks": 1}
START = "start.safetensors"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eqfast-iterate", description=__doc__.split("\n")[0],
                                epilog="docs/STAGE2.md, 'The improvement loop'",
                                formatter_class=HelpFormatter)
    p.add_argument("--run", required=True, type=path_type, help="run directory (gen-0, gen-1, ...)")
    p.add_argument("--generations", type=int, default=10,
                   help="trained generations at most (the loop also stops at the first that "
                        "does not beat its parent)")
    p.add_argument("--init", default=None, metavar="WEIGHTS",
                   help="generation 0's Stage 2 weights; when left out, the shipped model "
                        "(eqfast/models/stage2.safetensors)")
    p.add_argument("--no-stop", action="store_true",
                   help="train all --generations whatever the matches say (each card still "
                        "records its verdict; the best generation is still the last of the "
                        "unbroken run of generations that beat their parents)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")

    d = p.add_argument_group("data of each generation (eqfast-generate)")
    d.add_argument("--games", type=int, default=2000, help="games a generation plays")
    d.add_argument("--games-per-batch", type=int, default=100,
                   help="games per shard (the unit of eqfast-generate's resume)")
    d.add_argument("--seed-start", type=int, default=DATA_SEED_START,
                   help=f"first game seed of generation 1; generation k starts "
                        f"{SEED_STRIDE:,} x (k - 1) later")
    d.add_argument("--run-seed", type=int, default=0, help="eqfast-generate --seed")
    d.add_argument("--data-ranks", type=int, default=1, metavar="N",
                   help="label with N eqfast-generate processes side by side (--rank r "
                        "--world-size N: the same records as one process, N times the "
                        "cores; docs/GENERATE.md, 'Scale-out'); --threads is each one's")
    d.add_argument("--oracle", default=None,
                   help="label oracle (eqfast-generate --oracle); when left out, "
                        "eqfast-generate's CPU default (exact labels, world budgets by trick, "
                        "the shipped network as control variate); 'rollout' or 'rollout:T': "
                        "the parent generation's Stage 2 rollouts (policy improvement: each "
                        "generation learns the values of the last one's play)")
    d.add_argument("--n-samples", type=int, default=None,
                   help="worlds per decision (eqfast-generate --n-samples); when left out, "
                        "eqfast-generate's default")
    d.add_argument("--label-args", default=None,
                   help="more eqfast-generate arguments, one string (e.g. "
                        "\"--n-by-trick 25,50,100,100,100,100,100 --control-variate none\"); "
                        "when left out, none")
    d.add_argument("--no-posterior", action="store_true",
                   help="uniform world weights (when left out, the posterior, with the "
                        "parent generation as its behaviour model)")
    d.add_argument("--tau", type=float, default=3.0, help="posterior behaviour temperature")
    d.add_argument("--window", type=int, default=16, help="posterior: plays scored")
    d.add_argument("--temperature", type=float, default=0.0,
                   help="Boltzmann temperature on the parent's values (0 = its argmax)")
    d.add_argument("--epsilon", type=float, default=0.05, help="random legal move probability")
    d.add_argument("--blunder-rate", type=float, default=0.0,
                   help="probability of a move the parent values up to --blunder-max-regret "
                        "below its best")
    d.add_argument("--blunder-max-regret", type=float, default=3.0, help="points")

    t = p.add_argument_group("training (eqfast-train-stage2's trainer, from the parent "
                             "unless --train-from)")
    t.add_argument("--steps", type=int, default=4000, help="optimizer steps a generation")
    t.add_argument("--batch", type=int, default=256, help="records per step")
    t.add_argument("--lr", type=float, default=5e-4, help="peak learning rate")
    t.add_argument("--warmup", type=int, default=200, help="warm-up steps")
    t.add_argument("--loss", choices=("mse", "nll"), default=None,
                   help="when left out, nll when the parent's config has a variance head "
                        "(a transformer's or belief model's), else mse (a split parent: the "
                        "split players' recipe)")
    t.add_argument("--centered-weight", type=float, default=1.0,
                   help="the centred term's weight (the shipped recipe's 1)")
    t.add_argument("--mc-weight", type=float, default=0.0, metavar="LAMBDA",
                   help="target of the move played: (1 - LAMBDA) E[Q] + LAMBDA realized_to_go")
    t.add_argument("--train-seed", type=int, default=0, help="trainer seed (batch order)")
    t.add_argument("--eval-every", type=int, default=500,
                   help="steps between validations (the best one is kept)")
    t.add_argument("--val-rows", type=int, default=30000, help="validation records used")
    t.add_argument("--replay", type=int, default=1, metavar="K",
                   help="train generation k on the games of the last K generations (its own "
                        "and those of the K - 1 before it, each labelled with its own "
                        "parent's values) instead of its own alone")
    t.add_argument("--tricks", default=None,
                   help="train and validate on these tricks' decisions only ('1-3', '1,2'); "
                        "with a split parent (eqfast.stage2.split) only the model that plays "
                        "them learns, the other stays the parent's. When left out, every "
                        "trick")
    t.add_argument("--train-from", default=None, metavar="BASE",
                   help="train every generation from these fixed weights instead of its "
                        "parent's: a Stage 2 weights file (a bare name is a file in "
                        "eqfast/models) or one part of a split file (FILE:early, FILE:late). "
                        "With --tricks and a split parent, BASE replaces only the part that "
                        "plays those tricks; the other stays the parent's")
    t.add_argument("--extra-data", action="append", default=[], metavar="DIR",
                   help="an eqfast-generate output every generation also trains on (games "
                        "from before the loop); repeat for more")
    t.add_argument("--ema", type=float, default=0.0, metavar="D",
                   help="evaluate and keep the weights' moving average (decay D) in their "
                        "place (eqfast-train-stage2 --ema); 0: off")
    t.add_argument("--min-worlds", type=int, default=1, metavar="N",
                   help="train on decisions labelled from >= N worlds only "
                        "(eqfast-train-stage2 --min-worlds)")

    m = p.add_argument_group("the match against the parent (eqfast.play.arena)")
    m.add_argument("--match-deals", type=int, default=5000,
                   help="duplicate deals (each played twice: 2 hands)")
    m.add_argument("--match-seed-start", type=int, default=MATCH_SEED_START,
                   help="first deal seed of every generation's match")
    return p


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1) + "\n")


def copy_atomic(src: Path, dst: Path) -> None:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def settings_of(args, arch: dict) -> dict:
    """The settings of a generation started now (SETTING_KEYS, the loss filled in)."""
    s = {k: getattr(args, k) for k in SETTING_KEYS
         if k not in ("loss", "posterior", "label_args", "extra_data")}
    s["extra_data"] = [str(Path(d).resolve()) for d in args.extra_data]
    s["posterior"] = not args.no_posterior
    s["label_args"] = args.label_args or ""
    s["loss"] = args.loss or ("nll" if arch.get("var_head") else "mse")
    s["eval_every"] = min(args.eval_every, args.steps)
    return s


def generate_argv(s: dict, gen: int, data: Path, parent: Path, threads: int) -> list[str]:
    """The eqfast-generate arguments of generation `gen` (settings `s`, parent weights)."""
    argv = ["--out", str(data), "--games", str(s["games"]),
            "--seed-start", str(s["seed_start"] + SEED_STRIDE * (gen - 1)),
            "--games-per-batch", str(s["games_per_batch"]), "--seed", str(s["run_seed"]),
            "--pipeline", "reference", "--threads", str(threads), "--quiet",
            "--play-policy", f"stage2:{parent}",
            "--temperature", str(s["temperature"]), "--epsilon", str(s["epsilon"]),
            "--blunder-rate", str(s["blunder_rate"]),
            "--blunder-max-regret", str(s["blunder_max_regret"])]
    if s["oracle"] is not None:
        argv += ["--oracle", parent_rollout(s["oracle"], parent)]
    if s["n_samples"] is not None:
        argv += ["--n-samples", str(s["n_samples"])]
    if s["data_ranks"] > 1:
        argv += ["--world-size", str(s["data_ranks"])]
    if s["posterior"]:
        argv += ["--posterior", "--behaviour-oracle", f"stage2:{parent}", "--tau",
                 str(s["tau"]), "--window", str(s["window"])]
    return argv + shlex.split(s["label_args"])


def replay_data(run: Path, gen: int, replay: int) -> list[str]:
    """The data directories generation `gen` trains on: its own, then those of the
    `replay` - 1 generations before it (as far back as generation 1). Their seeds never
    overlap (SEED_STRIDE apart)."""
    dirs = [run / f"gen-{g}" / "data" for g in range(gen, max(0, gen - replay), -1)]
    for d in dirs[1:]:
        if not (d / "train").is_dir():
            raise ValueError(f"--replay {replay}: {d} holds no data (an earlier generation's "
                             "games are read again; keep them or lower --replay)")
    return [str(d) for d in dirs]


def tricks_of(s: dict) -> list[int] | None:
    """A generation's --tricks as a list (None: every trick)."""
    return None if s["tricks"] is None else list(parse_tricks(s["tricks"]))


def write_start(base: str, parent: Path, tricks: list[int] | None, out: Path) -> dict:
    """Write the weights a --train-from generation starts from to `out` (atomically) and
    return their record: BASE whole when it has the parent's architecture, or, with
    `tricks` and a split parent, the parent with BASE in place of the part that plays
    those tricks (BASE that part's architecture, or a split file of the parent's layout:
    its same part). ValueError when BASE fits neither."""
    from ..stage2.average import source_card
    from ..stage2.model import check_config
    from ..stage2.split import join_models, load_part
    from ..stage2.weights import load_stage2_with_meta, save_stage2

    model, config, card = load_part(base)
    start, meta = load_stage2_with_meta(parent)
    have, want = check_config(config), check_config(meta["config"])
    if want.get("arch") == "split" and tricks is not None:
        first = want["first_trick"]
        if max(tricks) < first:
            part = "early"
        elif min(tricks) >= first:
            part = "late"
        else:
            raise ValueError(f"--train-from with --tricks {tricks[0]}-{tricks[-1]}: the split "
                             f"parent changes model at trick {first}, so those tricks span "
                             "both of its parts; train one part's tricks")
        if have == want:                        # a split file laid out as the parent
            model, have, card = getattr(model, part), want[part], {**card, "part": part}
        if have != want[part]:
            raise ValueError(f"--train-from {base}: its architecture {have} is not that of "
                             f"the parent's {part} part ({want[part]})")
        parts = {"early": (start.early, want["early"]), "late": (start.late, want["late"])}
        parts[part] = (model, have)
        other = "late" if part == "early" else "early"
        record = {"split": {"first_trick": first, part: card,
                            other: {**source_card(parent, meta), "part": other}}}
        join_models(*parts["early"], *parts["late"], first, out, record)
        return record
    if have != want:
        raise ValueError(f"--train-from {base}: its architecture {have} is not the parent's "
                         f"({want}); give --tricks to replace one part of a split parent")
    record = {"start": card}
    save_stage2(out, model, have, "", {}, record)
    return record


def parent_rollout(oracle: str, parent: Path) -> str:
    """'rollout' or 'rollout:T' labels with the parent generation's rollouts
    ('rollout:T:PARENT'); any other oracle spec as given."""
    parts = oracle.split(":", 2)
    if parts[0] != "rollout" or len(parts) > 2:
        return oracle
    turns = parts[1] if len(parts) > 1 and parts[1] else "7"
    return f"rollout:{turns}:{parent}"


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


class Timer:
    """Wall and CPU seconds (this process and the data ranks it ran) of one step."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), cpu_seconds()
        return self

    def __exit__(self, *exc):
        self.wall = round(time.perf_counter() - self.wall, 1)
        self.cpu = round(cpu_seconds() - self.cpu, 1)


def _die_with_parent() -> None:
    """In a data rank: SIGTERM when eqfast-iterate dies (even by SIGKILL), so no orphan
    keeps writing the directory a rerun resumes (Linux prctl PR_SET_PDEATHSIG)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def run_ranks(argv: list[str], ranks: int) -> int:
    """eqfast-generate `argv` as `ranks` processes side by side (--rank 0..ranks-1): the
    first non-zero exit status, else 0. Ctrl+C reaches them all (one process group);
    each finishes its range in flight."""
    procs = [subprocess.Popen([sys.executable, "-m", "eqfast.cli.generate", *argv,
                               "--rank", str(r)], preexec_fn=_die_with_parent)
             for r in range(ranks)]
    try:
        statuses = [p.wait() for p in procs]
    except KeyboardInterrupt:                  # the ranks have it too: let them finish
        statuses = [p.wait() for p in procs] + [130]
    return next((st for st in statuses if st != 0), 0)


def beats(match: dict) -> bool:
    """The stopping rule: the 95% interval of points per hand lies above 0."""
    lo = match["diff_ci95"][0]
    return lo is not None and lo > 0


def start_generation0(run: Path, init: str | None) -> dict:
    from ..stage2.weights import load_stage2_with_meta

    src = stage2_weights(init)
    g0 = run / "gen-0"
    card_path = g0 / CARD
    if card_path.exists():
        card = read_json(card_path)
        if init is not None and sha256(src) != card["weights_sha256"]:
            raise ValueError(f"--init {src} is not the run's generation 0 ({card['source']})")
        return card
    load_stage2_with_meta(src)                      # refuses a bad file before anything
    g0.mkdir(parents=True, exist_ok=True)
    copy_atomic(src, g0 / WEIGHTS)
    card = {"generation": 0, "source": str(src), "weights_sha256": sha256(g0 / WEIGHTS),
            "finished": True}
    write_json(card_path, card)
    return card


def run_generation(run: Path, gen: int, args, log, argv=None) -> dict | int:
    """Generation `gen` (>= 1): its finished card, or an exit status (interrupted/failed)."""
    from ..play.arena import play_match
    from ..play.policies import Stage2Policy
    from ..stage2.train import TrainConfig, train
    from ..stage2.weights import load_stage2_with_meta
    from . import generate

    here, parent = run / f"gen-{gen}", run / f"gen-{gen - 1}" / WEIGHTS
    card_path = here / CARD
    _, parent_meta = load_stage2_with_meta(parent)
    arch = parent_meta["config"]
    wanted = settings_of(args, arch)
    if card_path.exists():
        card = read_json(card_path)
        if card.get("finished"):
            return card
        card["settings"] = {**SETTING_DEFAULTS, **card["settings"]}
        diff = {k: (card["settings"].get(k), wanted[k]) for k in SETTING_KEYS
                if card["settings"].get(k) != wanted[k]}
        if diff:
            raise ValueError(f"{card_path}: generation {gen} was started with other settings ("
                             + ", ".join(f"{k}: {a!r} there, {b!r} now"
                                         for k, (a, b) in diff.items())
                             + "); resume with the same ones")
        if card["parent_sha256"] != sha256(parent):
            raise ValueError(f"{card_path}: the parent's weights {parent} changed")
    else:
        here.mkdir(parents=True, exist_ok=True)
        start = {}
        if wanted["train_from"] is not None:    # refuses a BASE that does not fit at once,
            start = {"start": write_start(wanted["train_from"], parent,     # not after the data
                                          tricks_of(wanted), here / START)}
        # the card, written after the start file, is what makes the generation exist
        card = {"generation": gen, "settings": wanted, "parent": str(parent),
                "parent_sha256": sha256(parent), "arch": arch, **start,
                "generate_argv": generate_argv(wanted, gen, here / "data", parent,
                                               args.threads),
                "command": ["eqfast-iterate", *(sys.argv[1:] if argv is None else argv)],
                "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "steps": {}, "finished": False}
        write_json(card_path, card)
    s, steps = card["settings"], card["steps"]

    def done(step: str, info: dict) -> None:
        steps[step] = info
        write_json(card_path, card)

    if "data" not in steps:
        log(f"gen {gen}: data: eqfast-generate {shlex.join(card['generate_argv'])}")
        with Timer() as tm:
            status = (generate.main(card["generate_argv"]) if s["data_ranks"] == 1
                      else run_ranks(card["generate_argv"], s["data_ranks"]))
        if status != 0:
            return status
        done("data", {"wall_s": tm.wall, "cpu_s": tm.cpu})

    if "train" not in steps:
        tricks = tricks_of(s)
        init = parent if s["train_from"] is None else here / START   # written with the card
        log(f"gen {gen}: train {s['steps']} steps from {init}")
        cfg = TrainConfig(data=replay_data(run, gen, s["replay"]) + s["extra_data"],
                          run=str(here / "train"),
                          arch=arch, loss=s["loss"], centered_weight=s["centered_weight"],
                          steps=s["steps"], batch=s["batch"], lr=s["lr"], warmup=s["warmup"],
                          seed=s["train_seed"], val_rows=s["val_rows"],
                          eval_every=s["eval_every"], ckpt_every=s["eval_every"],
                          init=str(init), mc_weight=s["mc_weight"], tricks=tricks,
                          ema=s["ema"], min_worlds=s["min_worlds"])
        with Timer() as tm:
            train(cfg, log=lambda *a, **k: log(f"gen {gen}: " + " ".join(map(str, a))),
                  progress=False)
        best = here / "train" / "best.safetensors"
        _, meta = load_stage2_with_meta(best)
        copy_atomic(best, here / WEIGHTS)
        write_json(here / "data_card.json", meta["train"]["data_card"])
        history = [json.loads(line) for line in
                   (here / "train" / "history.jsonl").read_text().splitlines() if line]
        write_json(here / "train.json", {"train": meta["train"], "val_metrics": meta["metrics"],
                                         "history": history})
        done("train", {"wall_s": tm.wall, "cpu_s": tm.cpu,
                       "weights_sha256": sha256(here / WEIGHTS),
                       "best_step": meta["train"]["step"],
                       "val_regret": meta["metrics"].get("regret")})

    if "match" not in steps:
        deals = list(range(s["match_seed_start"], s["match_seed_start"] + s["match_deals"]))
        log(f"gen {gen}: match against gen {gen - 1}, {len(deals)} deals")
        with Timer() as tm:
            result = play_match(Stage2Policy(here / WEIGHTS), Stage2Policy(parent), deals)
        row = result.summary()
        row.update(a=f"gen-{gen}", b=f"gen-{gen - 1}")
        write_json(here / "match.json", row)
        done("match", {"wall_s": tm.wall, "cpu_s": tm.cpu})
    row = read_json(here / "match.json")
    card.update(match={k: row[k] for k in ("hands", "mean_diff", "diff_ci95", "win_share")},
                beats_parent=beats(row), finished=True)
    write_json(card_path, card)
    log(f"gen {gen}: {row['mean_diff']:+.3f} points a hand against gen {gen - 1} "
        f"[{row['diff_ci95'][0]}, {row['diff_ci95'][1]}] over {row['hands']} hands: "
        + ("beats it" if card["beats_parent"] else "does not beat it"))
    return card


def write_summary(run: Path, cards: list[dict], stopped: str) -> dict:
    rows = []
    for c in cards:
        row = {"generation": c["generation"], "weights": str(run / f"gen-{c['generation']}"
                                                           / WEIGHTS)}
        if c["generation"] > 0:
            cpu = sum(v.get("cpu_s", 0) for v in c["steps"].values())
            wall = sum(v.get("wall_s", 0) for v in c["steps"].values())
            row.update(c["match"], beats_parent=c["beats_parent"],
                       val_regret=c["steps"]["train"]["val_regret"],
                       cpu_hours=round(cpu / 3600, 3), wall_hours=round(wall / 3600, 3))
        rows.append(row)
    best = 0
    for c in cards[1:]:
        if not c["beats_parent"]:
            break
        best = c["generation"]
    summary = {"generations": rows, "best": best, "stopped": stopped}
    write_json(run / SUMMARY, summary)
    return summary


def check_args(a) -> str | None:
    for name in ("generations", "threads", "games", "games_per_batch", "steps", "batch",
                 "eval_every", "val_rows", "match_deals", "replay", "min_worlds",
                 "data_ranks"):
        if getattr(a, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}"
    if a.games > SEED_STRIDE:
        return f"--games must be at most {SEED_STRIDE:,} (the seed stride between generations)"
    if not 0 <= a.mc_weight <= 1:
        return f"--mc-weight must be in [0, 1], got {a.mc_weight}"
    if a.tricks is not None:
        try:
            parse_tricks(a.tricks)
        except ValueError as e:
            return f"--tricks: {e}"
    if not 0 <= a.ema < 1:
        return f"--ema must be in [0, 1), got {a.ema}"
    if a.init is not None and not stage2_weights(a.init).is_file():
        return f"--init {a.init}: no such file"
    if a.train_from is not None and not stage2_weights(parse_part(a.train_from)[0]).is_file():
        return f"--train-from {a.train_from}: no such file"
    for d in a.extra_data:
        if not (Path(d) / "train").is_dir():
            return f"--extra-data {d}: not an eqfast-generate output (no train/ folder)"
    return None


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    problem = check_args(args)
    if problem is not None:
        print(f"eqfast-iterate: {problem}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    run = args.run.resolve()
    run.mkdir(parents=True, exist_ok=True)
    log = lambda msg: print(f"eqfast-iterate: {msg}", flush=True)
    with open(run / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print(f"eqfast-iterate: {run} is in use by another eqfast-iterate",
                  file=sys.stderr)
            return 2
        try:
            cards = [start_generation0(run, args.init)]
            stopped = f"reached --generations {args.generations}"
            for gen in range(1, args.generations + 1):
                card = run_generation(run, gen, args, log, argv)
                if not isinstance(card, dict):
                    return card                       # eqfast-generate's status
                cards.append(card)
                if not card["beats_parent"] and not args.no_stop:
                    stopped = f"generation {gen} does not beat generation {gen - 1}"
                    break
        except (ValueError, ShardError) as e:   # other settings, a bad weights file,
            print(f"eqfast-iterate: {e}", file=sys.stderr)   # an empty split
            return 2
        summary = write_summary(run, cards, stopped)
    best = summary["best"]
    log(f"stopped: {stopped}; best generation {best} ({run / f'gen-{best}' / WEIGHTS})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
