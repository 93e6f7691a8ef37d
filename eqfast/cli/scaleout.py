"""What eqfast-generate and eqfast-relabel share to write one dataset directory from many
processes (docs/GENERATE.md, "Scale-out"): the rank and world size from the flags or the launcher's
environment, the directory's writer lock, the resume check of the record-shaping settings,
and the batch loop that Ctrl+C stops between batches.

The shards themselves (atomic writes, sidecars, completed and incomplete seed ranges, the
lock files) are eqfast.data.shards'.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys

# the data modules (and torch under them) are imported inside the functions that use them,
# so that the commands' --help and argument errors answer at once


def add_rank_arguments(parser: argparse.ArgumentParser, unit: str) -> None:
    """--rank/--world-size; `unit` says what is dealt out to the ranks ("batch k (...)")."""
    r = parser.add_argument_group("several processes on one output directory (docs/GENERATE.md, "
                                  "'Scale-out')")
    r.add_argument("--rank", type=int, default=None,
                   help=f"this process's share: {unit} belongs to rank k mod --world-size; "
                        "when left out, torchrun's RANK, else a Slurm array's "
                        "SLURM_ARRAY_TASK_ID minus SLURM_ARRAY_TASK_MIN, else one process "
                        "does everything")
    r.add_argument("--world-size", type=int, default=None,
                   help="how many ranks share the work; when left out, torchrun's WORLD_SIZE, "
                        "else SLURM_ARRAY_TASK_COUNT, else 1")


def launcher_rank(args, env=None) -> tuple[int, int]:
    """(rank, world size): --rank/--world-size, else torchrun's RANK/WORLD_SIZE, else a
    Slurm array's task id (minus its first id) and task count, else (0, 1). ValueError
    naming the flag or variable for a value that is not an integer."""
    env = os.environ if env is None else env
    sources = [("--rank", args.rank, "--world-size", args.world_size)]
    if "RANK" in env or "WORLD_SIZE" in env:
        sources.append(("RANK", env.get("RANK"), "WORLD_SIZE", env.get("WORLD_SIZE")))
    if "SLURM_ARRAY_TASK_ID" in env:
        sources.append(("SLURM_ARRAY_TASK_ID", env.get("SLURM_ARRAY_TASK_ID"),
                        "SLURM_ARRAY_TASK_COUNT", env.get("SLURM_ARRAY_TASK_COUNT")))
    for rank_name, rank, world_name, world in sources:
        if rank is None and world is None:
            continue
        try:
            rank = int(rank) if rank is not None else None
            world = int(world) if world is not None else None
            if rank_name == "SLURM_ARRAY_TASK_ID":
                rank -= int(env.get("SLURM_ARRAY_TASK_MIN", "0"))
        except ValueError:
            raise ValueError(f"{rank_name}={rank!r} / {world_name}={world!r}: not integers") from None
        if rank is None or world is None:
            raise ValueError(f"{rank_name} and {world_name} must be given together")
        return rank, world
    return 0, 1


def rank_problem(args) -> str | None:
    """Fill args.rank and args.world_size from the flags or the launcher (launcher_rank);
    the problem with them, or None."""
    try:
        args.rank, args.world_size = launcher_rank(args)
    except ValueError as e:
        return str(e)
    if args.world_size < 1 or not 0 <= args.rank < args.world_size:
        return (f"rank {args.rank} of world size {args.world_size}: the rank must be "
                f"0..world size - 1")
    return None


def resume_conflict(out, settings: dict) -> str | None:
    """Why `out` cannot be resumed with `settings` (None if it can, or is new)."""
    from ..data.shards import ShardError, run_metadata
    try:
        previous = run_metadata(out)
    except ShardError as e:
        return str(e)
    if previous is None or previous.get("settings") == settings:
        return None
    old = previous.get("settings") or {}
    diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
    return (f"{out} holds shards made with other settings (differing: "
            f"{', '.join(diff) or 'settings missing'}); resume with the same flags or write "
            "to a new --out")


def os_error(e: OSError) -> str:
    """'No space left on device (errno 28, on PATH)' for an OSError."""
    where = f", on {e.filename}" if e.filename else ""
    return f"{e.strerror} (errno {e.errno}{where})" if e.strerror else str(e)


def with_output_lock(prog: str, args, owns, body, plan: dict | None = None) -> int:
    """body() under args.out's writer lock (shared among the ranks of a run with world size
    above 1, with one writer per rank; `owns(lo)`: whether the range starting at seed lo
    is this rank's, so only its leftover temporary files are removed; `plan`: what every
    rank of the directory must agree on, recorded by the first, see `lock_output`); exit
    2 with the reason when another writer holds it or the plan differs, 1 with one line
    for an OS error (a full disk, EIO) outside the batch loop."""
    from ..data.shards import OutputError, lock_output
    try:
        rank = args.rank if args.world_size > 1 else None
        with lock_output(args.out, rank=rank, owns=owns, plan=plan) as removed:
            if removed:
                print(f"{prog}: removed {len(removed)} temporary file(s) of an interrupted "
                      f"write under {args.out}", file=sys.stderr)
            return body()
    except OutputError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{prog}: {args.out}: {os_error(e)}; saved shards are intact", file=sys.stderr)
        return 1


class Interrupt:
    """First SIGINT: finish the batch in flight. Second: drop it (KeyboardInterrupt).

    Python runs a signal handler only between bytecodes, so two presses that arrive while
    the main thread is inside one C call (a solver batch, a network forward) reach it as
    one call. The presses are counted where they arrive instead: the C-level handler writes
    one byte per signal to the wakeup pipe (signal.set_wakeup_fd), which the handler
    drains, so a second press drops the batch as soon as the running call returns. (Two
    presses that reach a process not scheduled in between are one pending signal to the
    kernel, which no handler can tell apart.)"""

    def __init__(self, prog: str = "eqfast-generate"):
        self.prog = prog
        self.requested = False
        self.presses = 0
        self._pipe = self._old_fd = self._old_handler = None

    def __enter__(self):
        self._pipe = os.pipe()
        for fd in self._pipe:
            os.set_blocking(fd, False)
        self._old_fd = signal.set_wakeup_fd(self._pipe[1], warn_on_full_buffer=False)
        self._old_handler = signal.signal(signal.SIGINT, self)
        return self

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self._old_handler)
        signal.set_wakeup_fd(self._old_fd)
        for fd in self._pipe:
            os.close(fd)
        return False

    def __call__(self, signum, frame):
        try:
            arrived = os.read(self._pipe[0], 4096).count(bytes([signal.SIGINT]))
        except (BlockingIOError, OSError, TypeError):
            arrived = 0
        self.presses += max(1, arrived)
        if self.presses >= 2:
            raise KeyboardInterrupt
        self.requested = True
        print(f"\n{self.prog}: interrupt: finishing the batch in flight "
              "(Ctrl+C again to drop it)", file=sys.stderr, flush=True)


@contextlib.contextmanager
def interruptible(prog: str):
    """SIGINT handled by an `Interrupt` inside (yielded), the previous handler restored."""
    with Interrupt(prog) as interrupt:
        yield interrupt


def drive(prog: str, engine, batches, sink, interrupt: Interrupt, progress,
          out=None) -> int | None:
    """engine.run(batches, sink) inside `progress` (a Progress bar), stopping after the
    batch in flight once `interrupt` was requested; None when it ran to its end or was
    stopped so, else the exit status: 130 for a dropped batch, 1 for records breaking the
    invariants (nothing of that batch written), an OS error while writing (a full disk,
    EIO, a quota: that batch not saved) or memory running out."""
    from ..data.schema import InvariantError
    try:
        with progress:
            engine.run(batches, sink, on_batch=lambda seeds: interrupt.requested)
    except KeyboardInterrupt:
        print(f"{prog}: batch in flight dropped; saved shards are intact", file=sys.stderr)
        return 130
    except InvariantError as exc:
        print(f"{prog}: {exc}; nothing of that batch was written, saved shards are intact",
              file=sys.stderr)
        return 1
    except OSError as exc:                         # disk full, I/O error, quota, ...
        print(f"{prog}: cannot write the batch in flight under {out}: {os_error(exc)}; it was "
              "not saved, saved shards are intact: fix the cause and re-run the command to "
              "resume", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"{prog}: out of memory in a batch: lower the batch size or the worlds per "
              "decision; saved shards are intact", file=sys.stderr)
        return 1
    return None


def finish(args, engine, games: int, elapsed: float, interrupt: Interrupt, **extra) -> int:
    """Print a finished run's one-line JSON summary (games, seconds, games/s, the engine's
    oracle and world rows, `extra`, the output directory, the rank of a world size above 1)
    and, with --profile, the per-stage table on stderr; the exit status: 130 when Ctrl+C
    stopped it after a batch, else 0."""
    import json

    from ..utils.profiling import stage_table
    summary = {"games": games, "seconds": round(elapsed, 2),
               "games_per_s": round(games / elapsed, 3) if elapsed else None,
               "oracle_rows": engine.oracle_rows, "world_rows": engine.world_rows,
               **extra, "out": str(args.out)}
    if args.world_size > 1:
        summary["rank"] = [args.rank, args.world_size]
    print(json.dumps(summary))
    if args.profile:
        print(stage_table(), file=sys.stderr)
    return 130 if interrupt.requested else 0
