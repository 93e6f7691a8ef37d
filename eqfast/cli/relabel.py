"""eqfast-relabel: label a dataset's records again with the exact solver on their stored worlds.

SRC is a directory written by `eqfast-generate --store-worlds` (any oracle, pipeline or
device). Every record's E[Q], Var[Q] and diagnostics are recomputed by the solver on the
same worlds and weights (eqfast.engine.relabel), optionally on the first `--n-by-trick`
worlds of each decision only and with the stored network Q as the control variate
(`--control-variate stored`: the CPU default's estimator). The output DST holds one shard
per split for every seed range of SRC, under the same names; the transcripts, moves,
seeds, splits and outcomes are SRC's byte for byte, and the metadata names the playing
oracle (`playing_oracle`) beside the labelling one (`oracle`).

Scale-out and safety are eqfast-generate's (eqfast.cli.scaleout): SRC's seed range k
belongs to rank k mod the world size (--rank/--world-size, torchrun, Slurm arrays), a
re-run resumes (ranges complete in DST are skipped, incomplete ones done again), one
writer per directory or rank (the lock), shards written atomically (a kill -9 loses at
most the range in flight), Ctrl+C finishes the range in flight.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

import torch

from ..data.metadata import build_metadata
from ..data.schema import SPLIT_NAMES, DecisionRecords, require_invariants
from ..data.shards import (ShardError, completed_seed_ranges, incomplete_seed_ranges,
                           output_problem, read_shard, run_metadata, shard_path,
                           write_split_shards)
from ..engine.pipeline import Engine, EngineConfig
from ..engine.policy import ExplorationConfig
from ..engine.posterior import PosteriorConfig
from ..engine.relabel import RelabelError, StoredValues, relabel_games
from ..utils.progress import Progress
from .common import HelpFormatter, path_type
from .generate import parse_n_by_trick, run_settings
from .scaleout import (add_rank_arguments, drive, finish, interruptible, rank_problem,
                       resume_conflict, with_output_lock)

PROG = "eqfast-relabel"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Label the records of a dataset written with eqfast-generate "
                    "--store-worlds again with the exact solver, on the same worlds and "
                    "weights (docs/GENERATE.md, 'Label later'; docs/DATASET.md).",
        formatter_class=HelpFormatter)
    p.add_argument("src", type=path_type, help="dataset directory written with --store-worlds")
    p.add_argument("--out", required=True, type=path_type, help="output directory (train/ val/ test/)")
    p.add_argument("--n-by-trick", default=None, metavar="N1,...,N7",
                   help="solve only the first Nt stored worlds of each decision in trick t "
                        "(each at most the stored N; the worlds eqfast-generate --n-by-trick "
                        "draws); default: every stored world")
    p.add_argument("--control-variate", choices=["stored", "none"], default="none",
                   help="'stored': the playing network's stored Q on all the stored worlds "
                        "as the control variate of the solver's mean on the first Nt (needs "
                        "--n-by-trick; unbiased; with a 400-world source and --n-by-trick "
                        "25,50,100,100,100,100,100 the CPU default's estimator, docs/GENERATE.md, "
                        "'Choosing the labels')")
    p.add_argument("--drop-worlds", action="store_true",
                   help="leave the per-world fields out of the output (they are left out "
                        "anyway with --n-by-trick or --control-variate, as eqfast-generate does)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads and the solver's C threads (0 = as many as torch "
                        "picks; 1 is fastest on a busy machine)")
    p.add_argument("--format", choices=["safetensors", "pt"], default="safetensors",
                   help="'pt' also writes the .pt dict beside each shard (as eqfast-generate)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--profile", action="store_true", help="print a per-stage time table at the end")
    add_rank_arguments(p, "SRC's seed range k (in seed order)")
    return p


class Source:
    """The stored-worlds dataset SRC: its completed seed ranges, run metadata and settings."""

    def __init__(self, root: Path):
        self.root = root
        self.ranges = completed_seed_ranges(root)
        self.unfinished = incomplete_seed_ranges(root)
        meta = run_metadata(root)
        if meta is None:
            raise ShardError(f"{root}: no complete seed range (no dataset written by "
                             "eqfast-generate here)")
        self.meta = meta
        self.settings = meta.get("settings") or {}
        if not self.settings.get("store_worlds"):
            raise ShardError(f"{root}: written without --store-worlds: there are no stored "
                             "worlds to label")
        if meta.get("relabel"):
            raise ShardError(f"{root}: already a relabelled dataset (label its source instead)")
        self.n_worlds = int(meta["n_samples"])
        post = meta.get("posterior") or {}
        names = {f.name for f in fields(PosteriorConfig)}
        self.posterior = (PosteriorConfig(**{k: v for k, v in post.items() if k in names})
                          if post.get("enabled") else None)
        self.exploration = ExplorationConfig(**(meta.get("exploration") or {}))
        self.oracle = meta.get("oracle") or {}

    def records(self, lo: int, hi: int) -> DecisionRecords:
        """Every record of seed range [lo, hi], all splits."""
        parts = [read_shard(shard_path(self.root, split, lo, hi))[0] for split in SPLIT_NAMES]
        return DecisionRecords.cat(parts).sort_by_game()


def check_args(args, src: Source) -> str | None:
    """The first problem with the arguments for this source, or None."""
    problem = rank_problem(args)
    if problem is not None:
        return problem
    if args.threads < 0:
        return f"--threads must be >= 0, got {args.threads}"
    if args.out.resolve() == args.src.resolve():
        return "--out must be another directory than SRC"
    budgets = None
    if args.n_by_trick is not None:
        try:
            budgets = parse_n_by_trick(args.n_by_trick)
        except ValueError as e:
            return f"--n-by-trick {args.n_by_trick!r}: {e}"
        if len(budgets) != 7 or min(budgets) < 1 or max(budgets) > src.n_worlds:
            return (f"--n-by-trick {args.n_by_trick}: 7 world counts, each 1..{src.n_worlds} "
                    f"(the worlds {args.src} stores per decision)")
    if src.posterior is not None and budgets is not None:
        return (f"{args.src} is posterior-weighted: its stored weights are normalized over "
                "all its worlds, so a subset (--n-by-trick) would need the behaviour model "
                "again; relabel every stored world")
    if args.control_variate == "stored":
        if src.oracle.get("name") == "exact":
            return (f"--control-variate stored: {args.src}'s stored Q is the solver's own, "
                    "the correction would be 0")
        if budgets is None or min(budgets) >= src.n_worlds:
            return ("--control-variate stored needs --n-by-trick below the stored "
                    f"{src.n_worlds} worlds somewhere: the solver's worlds are the first Nt "
                    "of the stored ones, which the stored Q covers all")
    return output_problem(args.out)


def engine_config(args, src: Source) -> EngineConfig:
    """The labelling engine: the source's run seed, worlds and declaration mode; uniform
    weights (a posterior source's stored weights come in through the script)."""
    budgets = parse_n_by_trick(args.n_by_trick) if args.n_by_trick is not None else None
    cv = args.control_variate == "stored"
    return EngineConfig(
        n_samples=src.n_worlds, seed=int(src.meta.get("run_seed", src.settings["run_seed"])),
        decl_mode=str(src.settings.get("decl_mode", "hand")), n_by_trick=budgets,
        store_worlds=budgets is None and not cv and not args.drop_worlds,
        q_pdf=bool(src.settings.get("q_pdf")) and not cv,
        cv_samples=src.n_worlds if cv else None, exploration=src.exploration)


class Relabeller:
    """The engine interface scaleout.drive runs (`run(batches, sink, on_batch)`): each batch
    is one of SRC's seed ranges, labelled on its stored worlds."""

    def __init__(self, engine: Engine, src: Source, control: bool):
        self.engine, self.src, self.control = engine, src, control

    def run(self, batches, sink, on_batch=None) -> int:
        written = 0
        for lo, hi in batches:
            source = self.src.records(lo, hi)
            seeds = list(range(lo, hi + 1))
            records = relabel_games(self.engine, source, seeds, control=self.control,
                                    weights=self.src.posterior is not None)
            sink((lo, hi), require_invariants(records, seeds, relabelled=True))
            written += 1
            if on_batch is not None and on_batch((lo, hi)):
                break
        return written


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        src = Source(args.src)
    except (ShardError, KeyError, TypeError, ValueError) as e:
        print(f"{PROG}: SRC: {e}", file=sys.stderr)
        return 2
    problem = check_args(args, src)
    if problem is not None:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return 2
    if src.unfinished:
        print(f"{PROG}: warning: {args.src} has unfinished seed ranges "
              f"{src.unfinished}: left out", file=sys.stderr)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    mine = {lo: k % args.world_size == args.rank for k, (lo, _) in enumerate(src.ranges)}
    # ranks own SRC's ranges by k mod the world size: ranks with another split would
    # leave some ranges to no rank, or relabel one twice (scaleout.with_output_lock)
    return with_output_lock(PROG, args, lambda lo: mine.get(lo, False),
                            lambda: run(args, src, [r for r in src.ranges if mine[r[0]]]),
                            plan={"world_size": args.world_size})


def run(args, src: Source, owned: list[tuple[int, int]]) -> int:
    """Relabel this rank's seed ranges `owned` of SRC into args.out (whose lock the caller
    holds); the exit status."""
    from ..oracle.factory import oracle_from_spec

    cfg = engine_config(args, src)
    control = args.control_variate == "stored"
    oracle, identity = oracle_from_spec("exact")
    playing = dict(src.oracle)
    cv_identity = ({"name": "stored", "stored_oracle": playing,
                    **({"sha256": playing["sha256"]} if "sha256" in playing else {})}
                   if control else None)
    behaviour = None
    if src.posterior is not None:                # the weights' model: the source's
        behaviour = src.meta.get("behaviour_oracle") or playing
    settings = {**run_settings(replace(cfg, posterior=src.posterior), identity, cv_identity,
                               behaviour), "relabel_of": src.settings}
    problem = resume_conflict(args.out, settings)
    if problem is not None:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return 2
    engine = Engine(oracle, cfg, backend="reference", device="cpu",
                    cv_oracle=StoredValues() if control else None)
    done = set(completed_seed_ranges(args.out))
    todo = [r for r in owned if r not in done]
    formats = ("safetensors", "pt") if args.format == "pt" else ("safetensors",)
    bar = Progress(total=sum(hi - lo + 1 for lo, hi in todo), desc=PROG, unit="games",
                   disable=args.quiet)
    written_games = 0
    t0 = time.perf_counter()

    def sink(seed_range, records):
        nonlocal written_games
        lo, hi = seed_range
        meta = build_metadata(
            posterior=src.posterior, exploration=src.exploration, oracle=identity,
            n_samples=cfg.n_samples, records=records,
            extra={"settings": settings, "seed_range": [lo, hi], "run_seed": cfg.seed,
                   "backend": engine.backend.name, "pipeline": "reference",
                   "device": str(engine.device), "decl_mode": cfg.decl_mode,
                   "oracle_precision": "fp32",
                   "adaptive": {"sem": None, "max_samples": cfg.max_samples},
                   "n_by_trick": list(cfg.n_by_trick) if cfg.n_by_trick is not None else None,
                   "control_variate": ({**cv_identity, "cv_samples": cfg.cv_samples}
                                       if cv_identity else None),
                   "behaviour_oracle": behaviour,
                   "rank": [args.rank, args.world_size],
                   "playing_oracle": playing,
                   "relabel": {"source": str(args.src), "labelling_oracle": identity,
                               "source_settings": src.settings,
                               "source_pipeline": src.meta.get("pipeline"),
                               "source_device": src.meta.get("device"),
                               "worlds": "stored", "n_stored": src.n_worlds}})
        write_split_shards(records, meta, args.out, lo, hi, formats)
        written_games += hi - lo + 1
        elapsed = time.perf_counter() - t0
        bar.update(hi - lo + 1, **{"games/s": f"{written_games / elapsed:.2f}"})

    with interruptible(PROG) as interrupt:
        try:
            status = drive(PROG, Relabeller(engine, src, control), iter(todo), sink, interrupt,
                           bar, out=args.out)
        except (RelabelError, ShardError) as e:
            print(f"{PROG}: {e}; saved shards are intact", file=sys.stderr)
            return 1
    if status is not None:
        return status
    return finish(args, engine, written_games, time.perf_counter() - t0, interrupt,
                  skipped_ranges=len(owned) - len(todo))

if __name__ == "__main__":
    sys.exit(main())
