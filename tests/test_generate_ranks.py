"""eqfast-generate split across ranks (torchrun, a Slurm array, or --rank/--world-size): two
processes on one output directory write disjoint batches that together equal a one-process
run, record for record."""
from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import torch
from cliutil import TINY, cli_env

from eqfast.cli.generate import owned_ranges
from eqfast.cli.scaleout import launcher_rank
from eqfast.data.shards import (LOCK_NAME, OutputError, completed_seed_ranges, load_records,
                                 lock_output)

RUN = [a for a in TINY if a not in ("--games", "2")] + ["--games", "6", "--seed-start", "500"]
# (flags given after RUN override it: argparse keeps the last value)


def _generate(out, *extra):
    return subprocess.Popen([sys.executable, "-m", "eqfast.cli.generate", "--out", str(out),
                             *RUN, *extra], env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_ranks_together_equal_one_process(tmp_path):
    both = tmp_path / "ranks"
    procs = [_generate(both, "--rank", str(r), "--world-size", "2") for r in (0, 1)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    one = tmp_path / "one"
    p = _generate(one)
    assert p.communicate(timeout=300)[0] and p.returncode == 0
    # batch k (1 game each) belongs to rank k % 2: seeds 500, 502, 504 to rank 0
    assert completed_seed_ranges(both) == completed_seed_ranges(one) == \
        [(s, s) for s in range(500, 506)]
    a, metas = load_records(both)
    b, _ = load_records(one)
    assert sorted({tuple(m["rank"]) for m in metas}) == [(0, 2), (1, 2)]
    assert sorted(a.tensors) == sorted(b.tensors)
    for name in a.tensors:
        assert torch.equal(a[name], b[name]) or torch.allclose(a[name], b[name], equal_nan=True), name


def test_ranks_share_the_directory_but_exclude_a_plain_writer_and_a_second_copy(tmp_path):
    owns_even = lambda lo: lo % 2 == 0  # noqa: E731
    with lock_output(tmp_path, rank=0, owns=owns_even):
        with lock_output(tmp_path, rank=1, owns=lambda lo: lo % 2 == 1):   # a second rank
            assert (tmp_path / f"{LOCK_NAME}.rank1").exists()               # is let in
        with pytest.raises(OutputError, match="already has a writer for rank 0"):
            with lock_output(tmp_path, rank=0, owns=owns_even):
                pass
        with pytest.raises(OutputError, match="the ranks of an eqfast-generate run"):
            with lock_output(tmp_path):
                pass
    with lock_output(tmp_path):                             # a plain writer excludes ranks
        with pytest.raises(OutputError, match="does not split the seeds by rank"):
            with lock_output(tmp_path, rank=1, owns=owns_even):
                pass
        with pytest.raises(OutputError, match="being written by another eqfast-generate"):
            with lock_output(tmp_path):
                pass
    assert (tmp_path / LOCK_NAME).exists()


def test_a_rank_removes_only_its_own_stale_temporary_files(tmp_path):
    (tmp_path / "train").mkdir(parents=True)
    mine = tmp_path / "train" / ".shard_000004-000005.safetensors.abc.tmp"
    theirs = tmp_path / "train" / ".shard_000006-000007.safetensors.abc.tmp"
    mine.write_bytes(b"x")
    theirs.write_bytes(b"x")
    with lock_output(tmp_path, rank=0, owns=lambda lo: (lo // 2) % 2 == 0) as removed:
        assert removed == [mine]
    assert theirs.exists() and not mine.exists()


def test_rank_and_world_size_from_the_launcher():
    flags = argparse.Namespace(rank=None, world_size=None)
    assert launcher_rank(flags, {}) == (0, 1)
    assert launcher_rank(flags, {"RANK": "3", "WORLD_SIZE": "8"}) == (3, 8)
    assert launcher_rank(flags, {"SLURM_ARRAY_TASK_ID": "12", "SLURM_ARRAY_TASK_MIN": "10",
                                 "SLURM_ARRAY_TASK_COUNT": "4"}) == (2, 4)
    assert launcher_rank(argparse.Namespace(rank=1, world_size=2), {"RANK": "5"}) == (1, 2)
    with pytest.raises(ValueError, match="RANK='x'"):
        launcher_rank(flags, {"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="given together"):
        launcher_rank(argparse.Namespace(rank=1, world_size=None), {})


def test_owned_ranges_split_at_batch_boundaries():
    # batches of 4 from seed 10: [10,13] rank 0, [14,17] rank 1, [18,21] rank 0
    assert list(owned_ranges([(10, 21)], 10, 4, 0, 2)) == [(10, 13), (18, 21)]
    assert list(owned_ranges([(12, 15)], 10, 4, 1, 2)) == [(14, 15)]
    assert list(owned_ranges([(12, 15)], 10, 4, 0, 1)) == [(12, 15)]    # one process


def test_bad_rank_exits_2(tmp_path):
    p = _generate(tmp_path / "x", "--rank", "2", "--world-size", "2")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "rank 2 of world size 2" in err
    assert not (tmp_path / "x").exists()


def test_coverage_lists_spans_gaps_and_unfinished_ranges(tmp_path):
    from eqfast.cli.view import coverage, main as view_main

    out = tmp_path / "ds"
    for start, games in ((500, 2), (504, 1)):
        p = _generate(out, "--seed-start", str(start), "--games", str(games))
        assert p.communicate(timeout=300) and p.returncode == 0
    (out / "val" / "shard_000510-000511.safetensors").write_bytes(b"")    # a killed write
    c = coverage(out)
    assert c == {"games": 3, "shards": 3, "spans": [[500, 501], [504, 504]],
                 "gaps": [[502, 503]], "overlaps": [], "unfinished": [[510, 511]]}
    assert view_main([str(out), "--coverage"]) == 0


def test_ranks_must_agree_on_the_plan(tmp_path, capsys):
    """The first rank records the plan (first seed, games per batch, world size) in the
    directory; a rank started with another is refused before it writes, since its batches
    would overlap the others' and leave gaps. (The refusals run in-process: they stop
    before any game.)"""
    from eqfast.cli.generate import main

    out = tmp_path / "ds"
    p = _generate(out, "--rank", "0", "--world-size", "2", "--games-per-batch", "1")
    assert p.communicate(timeout=300) and p.returncode == 0
    before = completed_seed_ranges(out)
    for extra, needle in ((["--games-per-batch", "2"], "--games-per-batch"),
                          (["--games-per-batch", "1", "--world-size", "3"], "--world-size"),
                          (["--games-per-batch", "1", "--seed-start", "501"], "--seed-start")):
        capsys.readouterr()
        args = ["--out", str(out), *RUN, "--rank", "1", "--world-size", "2", *extra]
        assert main(args) == 2, extra
        err = capsys.readouterr().err
        assert needle in err and "plan" in err, (extra, err)
        assert completed_seed_ranges(out) == before
    p = _generate(out, "--rank", "1", "--world-size", "2", "--games-per-batch", "1")
    assert p.communicate(timeout=300) and p.returncode == 0
    assert completed_seed_ranges(out) == [(s, s) for s in range(500, 506)]


def test_coverage_counts_each_game_once_and_names_overlaps(tmp_path):
    from eqfast.cli.view import coverage, main as view_main

    out = tmp_path / "ds"
    p = _generate(out, "--games-per-batch", "2", "--games", "4")
    assert p.communicate(timeout=300) and p.returncode == 0
    for split in ("train", "val", "test"):           # a range of another batch size on top
        for ext in ("safetensors", "json"):
            src = out / split / f"shard_000502-000503.{ext}"
            (out / split / f"shard_000501-000502.{ext}").write_bytes(src.read_bytes())
    c = coverage(out)
    assert c["games"] == 4 and c["spans"] == [[500, 503]]
    assert c["overlaps"] == [[[500, 501], [501, 502]], [[501, 502], [502, 503]]]
    assert view_main([str(out), "--coverage"]) == 1             # the readers refuse them
