"""eqfast-generate: simulate games and write posterior-weighted E[Q] decision records.

Games are identified by their seed (deal, declarer and declaration follow from it; see
eqfast.engine.games). The run covers seeds [--seed-start, --seed-start + --games) in
batches of --games-per-batch; each batch is written as one shard per split
(train/val/test, a stable hash of the game seed) named by its seed range. A batch whose
three sidecars exist is complete and skipped, so re-running the same command resumes;
a skipped shard is first checked against its sidecar (size, SHA-256), and a damaged one is
moved to <out>/damaged/ and its range generated again.

Ctrl+C finishes the batch in flight and writes it (a second Ctrl+C drops it); shards are
written atomically, so an interrupted run never loses or corrupts a saved shard. A run
holds the output directory's lock (a second generator on it is refused), removes the
temporary files of killed writes, and regenerates a seed range whose files are incomplete.
"""
from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys
import time
from typing import TYPE_CHECKING

from ..engine.precisions import ORACLE_PRECISIONS
from .common import HelpFormatter, device_problem, path_type
from .scaleout import (add_rank_arguments, drive, finish, interruptible,
                       launcher_rank,  # noqa: F401  (re-exported: tests and scripts use it)
                       rank_problem, resume_conflict, with_output_lock)

if TYPE_CHECKING:
    from ..engine.pipeline import EngineConfig

# torch and the engine are imported inside the functions that use them, so that --help and
# argument errors answer at once (importing torch takes 1.5-12 s)

#: flags that only act together with another one: {switch: flags it enables}
DEPENDENT_FLAGS = {"posterior": ("tau", "beta", "window", "delta", "behaviour_oracle",
                                 "skip_own_plays"),
                   "sem": ("max_samples",), "control_variate": ("cv_samples",)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eqfast-generate",
        description="Generate Stage 2 training records: at every decision of simulated Texas 42 "
                    "games, sample N hidden-hand worlds consistent with what the actor knows, "
                    "query a perfect-information oracle in each, and record E[Q], Var[Q] and "
                    "diagnostics per legal move (dataset schema 2.1, docs/DATASET.md).",
        formatter_class=HelpFormatter)
    g = p.add_argument_group("run")
    g.add_argument("--out", required=True, type=path_type, help="output directory (train/ val/ test/)")
    g.add_argument("--games", type=int, default=64,
                   help="games to generate: seeds [seed-start, seed-start + games)")
    g.add_argument("--target-games", type=int, default=None,
                   help="continuous mode: total games to reach (0 = run until Ctrl+C); "
                        "overrides --games; missing seed ranges are filled first")
    g.add_argument("--seed-start", type=int, default=0, help="first game seed")
    g.add_argument("--games-per-batch", type=int, default=64,
                   help="games played in lockstep and written as one shard per split")
    g.add_argument("--seed", type=int, default=0, help="run seed for world and policy draws")
    g.add_argument("--format", choices=["safetensors", "pt"], default="safetensors",
                   help="'pt' also writes the .pt dict of the earlier implementation's format "
                        "beside each shard (the safetensors file and its JSON sidecar are always "
                        "written: resume and checks use them)")
    g.add_argument("--store-worlds", action="store_true",
                   help="keep the worlds, their weights and the oracle's Q in each in the records "
                        "(eqfast-view's debug view, eqfast-validate --truth; eqfast-relabel "
                        "labels them again with the solver: docs/GENERATE.md, 'Label later')")
    g.add_argument("--q-pdf", action="store_true",
                   help="keep each move's distribution of Q over the worlds (field q_pdf: 85 "
                        "whole-point bins -42..42, weighted like E[Q]; 2,380 bytes a record); "
                        "quantiles and P(Q >= t) follow from it (docs/DATASET.md)")
    g.add_argument("--decl", default="hand",
                   help="declaration per game: 'hand' (declarer's heuristic), 'uniform', or 0..9")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.add_argument("--profile", action="store_true", help="print a per-stage time table at the end")

    add_rank_arguments(p, "batch k (games-per-batch seeds from --seed-start)")

    o = p.add_argument_group("oracle and device")
    o.add_argument("--oracle", default=None,
                   help="'default' (the small network shipped in eqfast/models, fast on a CPU), "
                        "'accurate' (the larger shipped network, closer to the solver, ~7x the "
                        "cost per row), 'exact' (the solver), a path to oracle weights "
                        "(.safetensors), or 'rollout[:T[:WEIGHTS]]' (the Stage 2 model, "
                        "default the shipped one, plays each world on at every seat from "
                        "each seat's own information to the actor's T-th next turn, default "
                        "7: the end of the hand; 'rollout:exactK[:WEIGHTS]': to trick K, "
                        "then the solver's perfect-information value of the rest; reference "
                        "pipeline; docs/STAGE2.md, 'Rollout labels'). When left out: on CUDA 'accurate'; on the CPU (reference "
                        "pipeline) 'exact', with world budgets by trick 25,50,100,100,100,100,100 "
                        "(where --sem starts doubling) unless --n-samples, --n-by-trick or "
                        "--store-worlds says otherwise, "
                        "and the shipped network as --control-variate: unbiased labels with the "
                        "error of ~100 exact worlds at 3.6 games/s a core (benchmarks/RESULTS.md; "
                        "docs/GENERATE.md, 'Choosing the labels')")
    o.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    o.add_argument("--backend", choices=["reference", "triton", "auto"], default="auto",
                   help="device stages: pure PyTorch, Triton kernels, or auto (triton on CUDA)")
    o.add_argument("--eager", action="store_true", help="network oracle without TorchScript")
    o.add_argument("--exact-tricks", type=int, default=0,
                   help="with a network oracle: label positions with at most this many tricks "
                        "left with the exact solver instead (0 = never; 3 costs little on the CPU)")
    o.add_argument("--pipeline", choices=["auto", "fast", "reference"], default="auto",
                   help="'fast': static-shape steps (CUDA graphs on CUDA) with double-buffered "
                        "shard writing; 'reference': the readable loop that de-duplicates oracle "
                        "rows and supports --sem (faster on the CPU); auto = fast on CUDA")
    o.add_argument("--no-graphs", action="store_true",
                   help="fast pipeline without CUDA-graph capture (debugging)")
    o.add_argument("--oracle-precision", choices=list(ORACLE_PRECISIONS), default="fp32",
                   help="arithmetic of the network forward: fp32; tf32 (CUDA matmuls with TF32 "
                        "inputs); bf16 (autocast; on an H200 2x the rows/s of fp32 for a 1.2M "
                        "transformer, and on 2,800 fresh positions q_gap 0.525 vs 0.528 fp32, "
                        "argmax changed in 1%% of them); int8 (CPU: the Linear layers "
                        "quantized; 1.4x the engine's games/s for +0.02 q_gap); "
                        "benchmarks/RESULTS.md")
    o.add_argument("--threads", type=int, default=None,
                   help="torch and solver threads on the CPU (0 = as many as torch picks). "
                        "When left out, 1 with --device cpu, safe on a shared machine: on a "
                        "2-core VM under a load of 5, 2 threads ran the quick start 2.5-3x "
                        "slower than 1, while on an idle machine of your own 2 threads give "
                        "~1.7x the games/s of 1 (README); torch's choice with --device cuda, "
                        "where the host threads only feed the GPU. Records are the same "
                        "whatever the threads")

    s = p.add_argument_group("sampling")
    s.add_argument("--n-samples", type=int, default=None,
                   help="worlds per decision (N); when left out, 100, except for the CPU default "
                        "below")
    s.add_argument("--n-by-trick", default=None, metavar="N1,...,N7",
                   help="worlds per decision in each trick instead of --n-samples, e.g. "
                        "50,50,100,100,100,100,100 (an exact oracle's trick-1 world costs ~25x "
                        "a trick-3 one); reference pipeline, not with --store-worlds")
    s.add_argument("--sem", type=float, default=None,
                   help="adaptive: keep doubling N until every legal move's standard error is "
                        "below this many points (or --max-samples); with --control-variate, the "
                        "corrected mean's standard error (cv_se)")
    s.add_argument("--max-samples", type=int, default=800, help="adaptive: most worlds per decision")
    s.add_argument("--control-variate", default=None, metavar="ORACLE",
                   help="correct the oracle's E[Q] and Var[Q] with a cheaper, correlated one "
                        "('default', 'accurate' or a weights path) evaluated on --cv-samples "
                        "worlds: E[Q] = its mean on those + (the oracle's mean - its mean) on the "
                        "N worlds. Unbiased for the oracle's E[Q]; for the exact oracle and the "
                        "default network the sampling variance drops ~4x at the same solves "
                        "(docs/DATASET.md, 'Control variate'). Reference pipeline; not with "
                        "--store-worlds or --q-pdf; with --posterior, a --behaviour-oracle "
                        "other than --oracle. 'default' "
                        "when --oracle is left out on the CPU (see --oracle); 'none' turns "
                        "it off")
    s.add_argument("--cv-samples", type=int, default=400,
                   help="worlds per decision of the --control-variate oracle (at least N; "
                        "where --sem doubles N past it, the correction stops: the oracle's "
                        "own N worlds then)")

    q = p.add_argument_group("posterior weighting (eqfast/engine/posterior.py)")
    q.add_argument("--posterior", action="store_true", help="weight worlds by transcript likelihood")
    q.add_argument("--tau", type=float, default=10.0, help="behaviour-model temperature")
    q.add_argument("--beta", type=float, default=0.10, help="uniform mixing of the behaviour model")
    q.add_argument("--window", type=int, default=8, help="K: plays scored")
    q.add_argument("--delta", type=float, default=30.0, help="log-weight clip")
    q.add_argument("--skip-own-plays", action="store_true",
                   help="leave the actor's own plays out of the K scored (the spec scores "
                        "them; chosen from the actor's own information set, they carry no "
                        "evidence about the hidden hands; benchmarks/RESULTS.md measures the "
                        "difference); recorded as posterior.own_plays")
    q.add_argument("--behaviour-oracle", default=None, metavar="ORACLE",
                   help="the oracle whose Q at the last K plays defines the behaviour model "
                        "('default', 'accurate', 'exact' or a weights path), or 'stage2' / "
                        "'stage2:PATH': a Stage 2 model's values from each play's own "
                        "information set (eqfast/stage2/behaviour.py; 3-5x the spec's Brier "
                        "gain against the true deal; best with --tau 3 --window 16; about "
                        "0.7 s a game more than a network on this CPU at N = 64: "
                        "benchmarks/RESULTS.md). When left out, "
                        "--oracle itself, except for the CPU default (exact), which takes the "
                        "shipped network: a Stage 1 network's behaviour model, as "
                        "docs/DATASET.md describes it, at ~1/10 the cost of solving every "
                        "world's K past positions. Needed with --control-variate. Reference "
                        "pipeline")

    e = p.add_argument_group("play and exploration (eqfast/engine/policy.py)")
    e.add_argument("--play-policy", default=None, metavar="POLICY",
                   help="play the transcripts with this policy instead of the labels' argmax: "
                        "'stage2' (the shipped Stage 2 model), 'stage2:PATH', or any other "
                        "player of eqfast-arena that sees only its seat's information "
                        "('expert', 'endgame:5', 'eq:exact:100', ...; its draws keyed by "
                        "--seed). The labels are "
                        "computed as without it; the exploration flags below act on the "
                        "policy's values (Stage 2's mu; 1 at an arena player's move, 0 "
                        "elsewhere), and its own choice is recorded as exploration_mode 4 "
                        "(policy), whose q_gap may be above 0 (docs/DATASET.md). When left "
                        "out, the argmax of the labels. Reference pipeline")
    e.add_argument("--temperature", type=float, default=0.0, help="Boltzmann temperature (0 = greedy)")
    e.add_argument("--epsilon", type=float, default=0.0, help="random legal move probability")
    e.add_argument("--blunder-rate", type=float, default=0.0, help="bounded-regret blunder probability")
    e.add_argument("--blunder-max-regret", type=float, default=3.0, help="largest blunder regret (points)")
    return p


def pending_ranges(seed_start: int, n_games: int | None, per_batch: int, done):
    """Seed ranges [lo, hi] still to generate, in order (n_games None = forever).

    Seeds covered by any completed range are skipped whatever the batch size of the run
    that wrote them, and a batch never spans a covered seed, so a game is never written
    twice even when --games or --games-per-batch change between runs."""
    covered = sorted(done)
    end = None if n_games is None else seed_start + n_games
    seed, k = seed_start, 0
    while end is None or seed < end:
        while k < len(covered) and covered[k][1] < seed:
            k += 1
        if k < len(covered) and covered[k][0] <= seed:     # inside a finished range
            seed = covered[k][1] + 1
            continue
        hi = seed + per_batch - 1
        if end is not None:
            hi = min(hi, end - 1)
        if k < len(covered):
            hi = min(hi, covered[k][0] - 1)                  # stop before the next one
        yield seed, hi
        seed = hi + 1


def run_settings(cfg: EngineConfig, identity: dict, cv_identity: dict | None = None,
                 behaviour_identity: dict | None = None,
                 play_identity: dict | None = None) -> dict:
    """What must not change between runs writing into one output directory (cv_identity,
    behaviour_identity, play_identity: the control variate's and the behaviour model's
    oracles and the play policy, if any)."""
    from dataclasses import asdict

    from ..data.metadata import jsonable
    return jsonable({
        "run_seed": cfg.seed, "n_samples": cfg.n_samples, "sem": cfg.sem,
        "max_samples": cfg.max_samples if cfg.sem is not None else None,
        # own_plays only when False, so directories written before it existed still resume
        "posterior": ({k: v for k, v in asdict(cfg.posterior).items()
                       if k != "own_plays" or not v} if cfg.posterior is not None else None),
        "exploration": asdict(cfg.exploration), "decl_mode": str(cfg.decl_mode),
        "store_worlds": cfg.store_worlds,
        "oracle": identity.get("sha256") or identity.get("name"),
        # only when not fp32, so directories written before the switch existed still resume
        **({"oracle_precision": cfg.oracle_precision} if cfg.oracle_precision != "fp32" else {}),
        **({"n_by_trick": list(cfg.n_by_trick)} if cfg.n_by_trick is not None else {}),
        **({"q_pdf": True} if cfg.q_pdf else {}),
        **({"control_variate": {"oracle": cv_identity.get("sha256") or cv_identity.get("name"),
                                "cv_samples": cfg.cv_samples}} if cv_identity else {}),
        **({"behaviour_oracle": behaviour_identity.get("sha256") or behaviour_identity.get("name")}
           if behaviour_identity else {}),
        **({"play_policy": play_identity["sha256"]} if play_identity else {}),
    })


def parse_n_by_trick(text: str) -> tuple[int, ...]:
    """'50,50,100,...' -> integers (EngineConfig checks there are 7, each >= 1)."""
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError("expected 7 integers separated by commas") from None


def batch_rank(seed: int, seed_start: int, per_batch: int, world: int) -> int:
    """The rank owning the batch that holds `seed`: batch k (seeds seed_start +
    [k, k+1) * per_batch) belongs to rank k mod world."""
    return ((seed - seed_start) // per_batch) % world


def owned_ranges(ranges, seed_start: int, per_batch: int, rank: int, world: int):
    """The parts of seed ranges [lo, hi] that fall in this rank's batches (`batch_rank`),
    cut at batch boundaries. One process (world 1) keeps the ranges as they are."""
    if world == 1:
        yield from ranges
        return
    for lo, hi in ranges:
        while lo <= hi:
            end = min(hi, seed_start + ((lo - seed_start) // per_batch + 1) * per_batch - 1)
            if batch_rank(lo, seed_start, per_batch, world) == rank:
                yield lo, end
            lo = end + 1


def owned_seeds(lo: int, end: int, seed_start: int, per_batch: int, rank: int,
                world: int) -> int:
    """How many seeds of [lo, end) lie in this rank's batches (`batch_rank`), counted
    without listing them."""
    def below(x: int) -> int:                     # owned seeds of [seed_start, x)
        full, rest = divmod(max(0, x - seed_start), per_batch * world)
        return full * per_batch + min(per_batch, max(0, rest - rank * per_batch))
    return below(max(lo, end)) - below(lo)


def pending_count(seed_start: int, end: int, done, per_batch: int, rank: int,
                  world: int) -> int:
    """The seeds of [seed_start, end) in this rank's batches that no range of `done`
    covers: what owned_ranges(pending_ranges(...)) yields, counted in O(len(done))."""
    count = owned_seeds(seed_start, end, seed_start, per_batch, rank, world)
    merged: list[list[int]] = []
    for lo, hi in sorted(done):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    for lo, hi in merged:
        lo, stop = max(lo, seed_start), min(hi + 1, end)
        if lo < stop:
            count -= owned_seeds(lo, stop, seed_start, per_batch, rank, world)
    return count


def batch_owner(args):
    """Whether this rank owns the batch that holds seed `lo` (see owned_ranges)."""
    return lambda lo: batch_rank(lo, args.seed_start, args.games_per_batch,
                                 args.world_size) == args.rank


#: the CPU default's world budgets by trick and control variate (README, "Choosing the
#: labels")
DEFAULT_EXACT_BUDGETS = "25,50,100,100,100,100,100"
DEFAULT_CONTROL_VARIATE = "default"
DEFAULT_BEHAVIOUR_ORACLE = "default"
DEFAULT_N = 100


def apply_default_labels(args) -> None:
    """Fill in the oracle and the worlds the user left out: on CUDA the accurate network,
    N = 100; on the CPU's reference pipeline the exact solver with DEFAULT_EXACT_BUDGETS
    (unless N, budgets or --store-worlds were given: then N, default 100; --sem doubles
    from the budgets), the shipped network as its control variate (unless
    --control-variate, --store-worlds or --q-pdf was given) and, with --posterior, as its
    behaviour oracle (unless --behaviour-oracle was given); the shipped network elsewhere
    (the CPU's fast pipeline, or with --exact-tricks or a reduced --oracle-precision, which
    only a network has). --control-variate none turns the control variate off."""
    from ..engine.factory import resolve_pipeline
    from ..oracle.factory import default_spec

    if args.oracle is None:
        # --exact-tricks and a reduced precision are settings of a network oracle
        wants_network = args.exact_tricks > 0 or args.oracle_precision != "fp32"
        exact = (default_spec(args.device) == "default" and not wants_network
                 and resolve_pipeline(args.pipeline, args.device) == "reference")
        args.oracle = "exact" if exact else default_spec(args.device)
        if (exact and args.n_samples is None and args.n_by_trick is None
                and not args.store_worlds):
            args.n_by_trick = DEFAULT_EXACT_BUDGETS
        if exact and args.posterior and args.behaviour_oracle is None:
            args.behaviour_oracle = DEFAULT_BEHAVIOUR_ORACLE
        if (exact and args.control_variate is None and not args.store_worlds
                and not args.q_pdf):
            args.control_variate = DEFAULT_CONTROL_VARIATE
    if args.control_variate == "none":
        args.control_variate = None
    if args.n_samples is None:
        args.n_samples = DEFAULT_N


#: game seeds are int64 in the records and in the seed mixing (eqfast.rules.deal.mix_seeds)
MAX_SEED = 2**63 - 1
#: most games in one batch, and most worlds of one decision (--n-samples, --max-samples,
#: --cv-samples, each --n-by-trick entry): every world of a batch's decision is in memory at
#: once, so their product is bounded too
MAX_GAMES_PER_BATCH = 65_536
MAX_WORLDS = 100_000
MAX_WORLD_ROWS = 2**24
#: flags that take a real number, which must be finite
FLOAT_FLAGS = ("sem", "tau", "beta", "delta", "temperature", "epsilon", "blunder_rate",
               "blunder_max_regret")


def limit_problem(args) -> str | None:
    """The first flag outside what the engine can hold: seeds past int64, batches or
    worlds that cannot fit in memory, real numbers that are NaN or infinite."""
    import math

    flag = lambda name: f"--{name.replace('_', '-')}"  # noqa: E731
    for name in FLOAT_FLAGS:
        value = getattr(args, name)
        if value is not None and not math.isfinite(value):
            return f"{flag(name)} must be a finite number, got {value}"
    if args.seed_start > MAX_SEED:
        return f"--seed-start {args.seed_start}: the largest game seed is {MAX_SEED} (2**63 - 1)"
    n_games = args.target_games or args.games
    if args.seed_start + n_games - 1 > MAX_SEED:
        which = "--target-games" if args.target_games else "--games"
        return (f"--seed-start {args.seed_start} with {which} {n_games} goes past the largest "
                f"game seed, {MAX_SEED} (2**63 - 1)")
    if args.games_per_batch > MAX_GAMES_PER_BATCH:
        return f"--games-per-batch must be <= {MAX_GAMES_PER_BATCH:,}, got {args.games_per_batch}"
    worlds = [("n_samples", args.n_samples), ("cv_samples", args.cv_samples),
              ("max_samples", args.max_samples if args.sem is not None else None)]
    if args.n_by_trick is not None:
        worlds.append(("n_by_trick", max(parse_n_by_trick(args.n_by_trick), default=None)))
    for name, n in worlds:
        if n is not None and n > MAX_WORLDS:
            return f"{flag(name)} must be <= {MAX_WORLDS:,} worlds per decision, got {n}"
        if n is not None and n * args.games_per_batch > MAX_WORLD_ROWS:
            return (f"{flag(name)} {n} x --games-per-batch {args.games_per_batch} = "
                    f"{n * args.games_per_batch:,} worlds in memory at once (at most "
                    f"{MAX_WORLD_ROWS:,}): lower one of them")
    return None


def check_args(args) -> str | None:
    """The first problem with the arguments, or None; fills in the device's default
    --oracle once the device is known to be valid, and the rank and world size from the
    launcher's environment."""
    for name in ("games", "games_per_batch", "n_samples", "cv_samples"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}"
    for name in ("seed_start", "target_games", "threads"):
        if (getattr(args, name) or 0) < 0:
            return f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}"
    if args.n_by_trick is not None:
        try:
            parse_n_by_trick(args.n_by_trick)
        except ValueError as e:
            return f"--n-by-trick {args.n_by_trick!r}: {e}"
    problem = limit_problem(args)
    if problem is not None:
        return problem
    if not 0 <= args.exact_tricks <= 7:
        return "--exact-tricks must be 0..7"
    problem = rollout_problem(args)
    if problem is not None:
        return problem
    problem = rank_problem(args)
    if problem is not None:
        return problem
    if args.control_variate not in (None, "none"):
        if args.control_variate == "exact":
            return ("--control-variate exact: the control variate must be a network oracle, "
                    "cheaper than --oracle (e.g. default)")
        if args.control_variate == args.oracle:
            return (f"--control-variate {args.control_variate} is --oracle itself: the "
                    "correction would be 0")
    from ..data.shards import output_problem
    from ..engine.games import parse_decl_mode
    try:
        parse_decl_mode(args.decl)
    except ValueError:
        return f"--decl must be 'hand', 'uniform' or a declaration 0..9, got {args.decl!r}"
    problem = device_problem(args.device) or output_problem(args.out)
    if problem is not None:
        return problem
    if args.threads is None:
        args.threads = 1 if args.device.startswith("cpu") else 0
    apply_default_labels(args)
    from ..engine.factory import pipeline_problem
    if args.behaviour_oracle == args.oracle:
        args.behaviour_oracle = None                 # the main oracle's behaviour model
    if args.posterior and args.control_variate is not None and args.behaviour_oracle is None:
        return ("--control-variate with --posterior needs a --behaviour-oracle other than "
                f"--oracle ({args.oracle}): the control's extra worlds need weights, e.g. "
                "--behaviour-oracle default")
    try:
        cfg = engine_config(args)
    except ValueError as e:
        return str(e)
    return pipeline_problem(args.pipeline, args.device, cfg,
                            solver_in_step=args.oracle == "exact" or args.exact_tricks > 0,
                            own_behaviour=args.behaviour_oracle is not None,
                            play_policy=args.play_policy is not None)


def rollout_problem(args) -> str | None:
    """What --oracle rollout cannot be combined with (None when it is not asked for or
    can run): its Q needs whole games, which only the reference pipeline keeps per world,
    and it is no network (no --exact-tricks, no reduced precision) and no behaviour model."""
    from ..engine.factory import resolve_pipeline
    from ..stage2.rollout import is_rollout_spec

    if not is_rollout_spec(args.oracle):
        for flag in ("control_variate", "behaviour_oracle"):
            if is_rollout_spec(getattr(args, flag)):
                return (f"--{flag.replace('_', '-')} {getattr(args, flag)}: Stage 2 rollouts "
                        "can only be the main --oracle")
        return None
    if resolve_pipeline(args.pipeline, args.device) != "reference":
        return "--oracle rollout runs on the reference pipeline only; use --pipeline reference"
    if args.exact_tricks > 0 or args.oracle_precision != "fp32":
        return ("--oracle rollout takes no --exact-tricks or --oracle-precision (settings "
                "of a network oracle)")
    if args.control_variate not in (None, "none"):
        return ("--oracle rollout takes no --control-variate (not measured with rollouts; "
                "the CPU default's control variate corrects the exact solver)")
    if args.posterior and args.behaviour_oracle in (None, args.oracle):
        return ("--oracle rollout with --posterior needs a --behaviour-oracle (e.g. default, "
                "or stage2): the rollouts are not a behaviour model")
    return None


def engine_config(args) -> EngineConfig:
    """EngineConfig from the arguments (raises ValueError naming a bad knob)."""
    from ..engine.pipeline import EngineConfig
    from ..engine.policy import ExplorationConfig
    from ..engine.posterior import PosteriorConfig
    return EngineConfig(
        n_samples=args.n_samples, seed=args.seed, sem=args.sem, max_samples=args.max_samples,
        store_worlds=args.store_worlds, decl_mode=args.decl, q_pdf=args.q_pdf,
        cv_samples=args.cv_samples if args.control_variate is not None else None,
        oracle_precision=args.oracle_precision,
        n_by_trick=parse_n_by_trick(args.n_by_trick) if args.n_by_trick is not None else None,
        posterior=(PosteriorConfig(tau=args.tau, beta=args.beta, window_k=args.window,
                                   delta=args.delta, own_plays=not args.skip_own_plays)
                   if args.posterior else None),
        exploration=ExplorationConfig(temperature=args.temperature, epsilon=args.epsilon,
                                      blunder_rate=args.blunder_rate,
                                      blunder_max_regret=args.blunder_max_regret))


def unused_flags(args, parser: argparse.ArgumentParser) -> list[str]:
    """Warnings for flags given a value while the switch they belong to is off."""
    notes = []
    for switch, names in DEPENDENT_FLAGS.items():
        if getattr(args, switch) not in (None, False):
            continue
        given = [f"--{n.replace('_', '-')}" for n in names
                 if getattr(args, n) != parser.get_default(n)]
        if given:
            notes.append(f"{', '.join(given)} {'has' if len(given) == 1 else 'have'} no effect "
                         f"without --{switch.replace('_', '-')}")
    return notes


def _exit_now(signum, frame):
    """SIGINT outside a batch (imports, loading the oracles, checking the saved shards):
    exit 130 at once. Raising KeyboardInterrupt there could land inside a C++ callback
    (torch's import), which aborts the process; nothing written there needs finishing,
    since every file is written atomically and the lock is the kernel's."""
    os.write(2, b"\neqfast-generate: interrupted (Ctrl+C) with no batch in flight; saved "
                b"shards are intact\n")
    os._exit(130)


def main(argv=None, restore_sigint: bool = True) -> int:
    """The command. restore_sigint False (the `eqfast-generate` entry point, `command`):
    leave SIGINT ignored on return instead of restoring the caller's handler, since the
    process is about to exit with its work saved and reported, and a Ctrl+C landing in
    torch's exit handlers would otherwise print a KeyboardInterrupt traceback."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    previous = signal.signal(signal.SIGINT, _exit_now)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGINT, previous if restore_sigint else signal.SIG_IGN)


def command() -> int:
    """The `eqfast-generate` entry point: `main` for a process that exits after it."""
    return main(restore_sigint=False)


def _main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = check_args(args)
    if problem is not None:
        print(f"eqfast-generate: {problem}", file=sys.stderr)
        return 2
    cfg = engine_config(args)                  # check_args built it once without error
    for note in unused_flags(args, parser):
        print(f"eqfast-generate: warning: {note}", file=sys.stderr)
    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    from ..oracle.factory import oracle_from_spec
    from ..stage2.behaviour import behaviour_from_spec
    from ..stage2.rollout import is_rollout_spec, rollout_from_spec
    try:
        if is_rollout_spec(args.oracle):
            oracle, identity = rollout_from_spec(args.oracle, args.device)
        else:
            oracle, identity = oracle_from_spec(args.oracle, args.device, eager=args.eager,
                                                exact_tricks=args.exact_tricks,
                                                quantize=args.oracle_precision == "int8")
    except ValueError as e:                 # OracleWeightsError names the file
        print(f"eqfast-generate: --oracle: {e}", file=sys.stderr)
        return 2
    extra = {}                   # the control variate's and the behaviour model's oracles
    for flag, spec in (("control_variate", args.control_variate),
                       ("behaviour_oracle", args.behaviour_oracle if args.posterior else None)):
        if spec is None:
            continue
        try:
            extra[flag] = (behaviour_from_spec(spec, args.device, eager=args.eager)
                           if flag == "behaviour_oracle"
                           else oracle_from_spec(spec, args.device, eager=args.eager))
        except ValueError as e:
            print(f"eqfast-generate: --{flag.replace('_', '-')}: {e}", file=sys.stderr)
            return 2
    if args.play_policy is not None:
        from ..stage2.policy import play_policy_from_spec
        try:
            extra["play_policy"] = play_policy_from_spec(
                args.play_policy, args.device, run_seed=args.seed, threads=args.threads or 1)
        except ValueError as e:                 # Stage2WeightsError names the file
            print(f"eqfast-generate: --play-policy: {e}", file=sys.stderr)
            return 2
    plan = {"seed_start": args.seed_start, "games_per_batch": args.games_per_batch,
            "world_size": args.world_size}
    return with_output_lock("eqfast-generate", args, batch_owner(args),
                            lambda: run(args, cfg, oracle, identity, extra), plan=plan)


def run(args, cfg: EngineConfig, oracle, identity: dict, extra: dict | None = None) -> int:
    """Generate into args.out, whose lock the caller holds; the exit status. extra: the
    (oracle, identity) of the control variate ('control_variate'), of the behaviour
    model ('behaviour_oracle') and the play policy ('play_policy'), where the run has them."""
    from ..data.metadata import build_metadata
    from ..data.shards import (add_pt_files, completed_seed_ranges, damaged_shards,
                               incomplete_seed_ranges, move_aside, pt_ranges, range_of,
                               write_split_shards)
    from ..engine.factory import build_engine, resolve_pipeline
    from ..utils.progress import Progress

    extra = extra or {}
    cv_oracle, cv_identity = extra.get("control_variate", (None, None))
    behaviour_oracle, behaviour_identity = extra.get("behaviour_oracle", (None, None))
    play_policy, play_identity = extra.get("play_policy", (None, None))
    settings = run_settings(cfg, identity, cv_identity, behaviour_identity, play_identity)
    n_games = None if args.target_games == 0 else (args.target_games or args.games)
    mine = batch_owner(args)
    end = None if n_games is None else args.seed_start + n_games
    # the saved ranges this run would skip are checked against their sidecars first; a
    # damaged one is moved aside, so that it counts as unfinished and is played again
    skipped = [r for r in completed_seed_ranges(args.out)
               if r[1] >= args.seed_start and (end is None or r[0] < end) and mine(r[0])]
    for path, why in damaged_shards(args.out, skipped):
        moved = move_aside(args.out, path)
        where = ", ".join(str(dst.relative_to(args.out)) for _, dst in moved) or "nothing to move"
        lo, hi = range_of(path)
        print(f"eqfast-generate: damaged shard {path.relative_to(args.out)} ({why}): moved "
              f"aside to {where}; seeds {lo}..{hi} are played again", file=sys.stderr)
    problem = resume_conflict(args.out, settings)
    if problem is not None:
        print(f"eqfast-generate: {problem}", file=sys.stderr)
        return 2
    # a directory is a union of seed ranges, so another --seed-start adds a range beside
    # the saved ones; say so, since a resume with a mistyped --seed-start does the same
    saved = completed_seed_ranges(args.out)
    outside = [(lo, hi) for lo, hi in saved
               if hi < args.seed_start or (end is not None and lo >= end)]
    if outside:
        print(f"eqfast-generate: {args.out} holds {sum(hi - lo + 1 for lo, hi in outside)} "
              f"games outside this run's seeds (from {min(lo for lo, _ in outside)} to "
              f"{max(hi for _, hi in outside)}); this run adds its own beside them "
              f"(--seed-start {args.seed_start}: to resume a run, give its own)",
              file=sys.stderr)
    # one format across the directory: --format pt adds the .pt files of the saved ranges
    # (this rank's), and a directory with .pt files is resumed only with --format pt
    with_pt, without_pt = pt_ranges(args.out)
    if args.format == "pt":
        added = add_pt_files(args.out, [r for r in without_pt if mine(r[0])])
        if added:
            print(f"eqfast-generate: --format pt: wrote the .pt files of {added} saved "
                  "shard(s) that had none", file=sys.stderr)
    elif with_pt:
        print(f"eqfast-generate: {args.out} holds .pt files beside its shards ({len(with_pt)} "
              "seed ranges, written with --format pt): resume with --format pt, or the new "
              "ranges would lack them", file=sys.stderr)
        return 2
    pipeline = resolve_pipeline(args.pipeline, args.device)
    engine = build_engine(oracle, cfg, pipeline=pipeline, backend=args.backend,
                          device=args.device, graphs=False if args.no_graphs else None,
                          cv_oracle=cv_oracle, behaviour_oracle=behaviour_oracle,
                          play_policy=play_policy)

    # a range with a file missing is played again with its own bounds, so that the new
    # shards replace the old ones instead of overlapping them
    redo_all = [(lo, hi) for lo, hi in incomplete_seed_ranges(args.out)
                if hi >= args.seed_start and (end is None or lo < end)]
    # several ranks: each redoes the unfinished ranges that start in its batches and takes
    # its own batches of what is left; the others' count as done (their writers own them)
    redo = [r for r in redo_all if mine(r[0])]
    done = saved + redo_all
    pending = owned_ranges(pending_ranges(args.seed_start, n_games, args.games_per_batch, done),
                           args.seed_start, args.games_per_batch, args.rank, args.world_size)
    # planned as it goes: a huge --games allocates nothing per batch up front
    total_games = (None if end is None else sum(hi - lo + 1 for lo, hi in redo)
                   + pending_count(args.seed_start, end, done, args.games_per_batch, args.rank,
                                   args.world_size))
    formats = ("safetensors", "pt") if args.format == "pt" else ("safetensors",)
    batches = (list(range(lo, hi + 1)) for lo, hi in itertools.chain(redo, pending))
    written_games = 0
    t0 = time.perf_counter()
    bar = Progress(total=total_games, desc="eqfast-generate", unit="games", disable=args.quiet)

    def sink(seeds, records):
        nonlocal written_games
        meta = build_metadata(
            posterior=cfg.posterior, exploration=cfg.exploration, oracle=identity,
            n_samples=cfg.n_samples, records=records,
            extra={"settings": settings, "seed_range": [seeds[0], seeds[-1]], "run_seed": cfg.seed,
                   "backend": engine.backend.name, "pipeline": pipeline,
                   "device": str(engine.device), "decl_mode": cfg.decl_mode,
                   "oracle_precision": cfg.oracle_precision,
                   "adaptive": {"sem": cfg.sem, "max_samples": cfg.max_samples},
                   "n_by_trick": list(cfg.n_by_trick) if cfg.n_by_trick is not None else None,
                   "control_variate": ({**cv_identity, "cv_samples": cfg.cv_samples}
                                       if cv_identity else None),
                   "behaviour_oracle": behaviour_identity,
                   "play_policy": play_identity,
                   "rank": [args.rank, args.world_size]})
        write_split_shards(records, meta, args.out, seeds[0], seeds[-1], formats)
        written_games += len(seeds)
        elapsed = time.perf_counter() - t0
        bar.update(len(seeds), **{"games/s": f"{written_games / elapsed:.2f}",
                                  "worlds/s": f"{engine.world_rows / elapsed:.0f}"})

    with interruptible("eqfast-generate") as interrupt:
        status = drive("eqfast-generate", engine, batches, sink, interrupt, bar, out=args.out)
    if status is not None:
        return status
    # rows the other oracles evaluated (after de-duplication)
    extra = {**({"cv_rows": engine.cv_rows} if cv_oracle is not None else {}),
             **({"behaviour_rows": engine.behaviour_rows} if behaviour_oracle is not None
                else {})}
    return finish(args, engine, written_games, time.perf_counter() - t0, interrupt, **extra)

if __name__ == "__main__":
    sys.exit(command())
