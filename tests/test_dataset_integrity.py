"""No record is lost or counted twice without a word: one writer per output directory,
readers that refuse overlapping shards and sidecars without data, resume that regenerates
what is missing, and an unusable --out found before any work (all as subprocesses)."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from cliutil import assert_usage_error, generate_tiny, run_cli
from eqfast.data.shards import load_records
from eqfast.data.schema import SPLIT_NAMES
from eqfast.data.shards import ShardError, completed_seed_ranges, read_dataset


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    out = tmp_path_factory.mktemp("integrity") / "ds"
    generate_tiny(out)
    assert completed_seed_ranges(out) == [(0, 0), (1, 1)]
    return out


@pytest.fixture
def ds(template, tmp_path):
    """A private copy of the 2-game dataset (seed ranges 0..0 and 1..1)."""
    return shutil.copytree(template, tmp_path / "ds")


def _shard_files(root):
    return sorted(p.relative_to(root) for p in root.rglob("shard_*"))


def _split_with_records(root, seed):
    """The split whose shard of seed range seed..seed holds the game."""
    for split in SPLIT_NAMES:
        side = root / split / f"shard_{seed:06d}-{seed:06d}.json"
        if json.loads(side.read_text())["shard"]["n_records"]:
            return split
    raise AssertionError(f"no split holds seed {seed}")


def test_second_writer_is_refused(ds):
    from eqfast.data import lock_output

    before = _shard_files(ds)
    with lock_output(ds):                 # as a running eqfast-generate holds it
        proc = run_cli("generate", "--out", ds, "--games", "4", "--games-per-batch", "1",
                       "--n-samples", "4", "--oracle", "exact", "--quiet")
    assert_usage_error(proc, str(ds), "another eqfast-generate")
    assert _shard_files(ds) == before
    # once the first writer is done, the same command runs
    assert generate_tiny(ds, "--games", "3")["games"] == 1


def test_readers_refuse_overlapping_shards(ds):
    # shards of seeds 0..1 beside those of 0..0 and 1..1, as two generators with other
    # batch sizes would have left them
    for split in SPLIT_NAMES:
        for ext in ("safetensors", "json"):
            src = ds / split / f"shard_000001-000001.{ext}"
            shutil.copy(src, ds / split / f"shard_000000-000001.{ext}")
    split = _split_with_records(ds, 1)
    assert_usage_error(run_cli("view", ds, "--print", "1"), "overlap")
    assert_usage_error(run_cli("view", ds, "--split", split, "--print", "1"), "overlap")
    assert_usage_error(run_cli("view", ds / split, "--print", "1"), "overlap")
    assert_usage_error(run_cli("validate", ds, "--outcomes"), "overlap")
    with pytest.raises(ShardError, match="overlap"):
        read_dataset(ds, split)


def test_sidecar_without_its_tensor_file_is_an_error_and_resume_regenerates_it(ds):
    split = _split_with_records(ds, 1)
    lost = ds / split / "shard_000001-000001.safetensors"
    lost.unlink()
    assert_usage_error(run_cli("view", ds, "--print", "1"), lost.name, "missing")
    assert_usage_error(run_cli("validate", ds, "--outcomes"), lost.name, "missing")
    with pytest.raises(ShardError, match=lost.name):
        read_dataset(ds, split)
    assert completed_seed_ranges(ds) == [(0, 0)]
    # resume plays seed 1 again (with a batch of any size) and restores the file
    assert generate_tiny(ds, "--games-per-batch", "2")["games"] == 1
    assert lost.is_file() and completed_seed_ranges(ds) == [(0, 0), (1, 1)]
    records, _ = load_records(ds)
    assert len(records) == 2 * 28


def test_temporary_files_of_a_killed_write_are_removed_on_start(ds):
    stale = [ds / "train" / ".shard_000002-000002.safetensors.k9a1b2.tmp",
             ds / "val" / ".shard_000001-000001.json.x0y1z2.tmp"]
    for f in stale:
        f.write_bytes(b"\0" * 4096)
    keep = ds / "train" / "notes.tmp"         # not ours: left alone
    keep.write_text("mine")
    assert generate_tiny(ds)["games"] == 0
    assert not [f for f in stale if f.exists()] and keep.exists()


def test_output_path_that_is_a_file_is_refused_before_any_work(tmp_path):
    target = tmp_path / "a-file"
    target.write_text("not a directory")
    # a batch that takes minutes with the exact oracle: refused at once, before it starts
    slow = ["--games", "16", "--games-per-batch", "16", "--n-samples", "100", "--oracle",
            "exact", "--quiet"]
    assert_usage_error(run_cli("generate", "--out", target, *slow, timeout=60), str(target),
                       "not a directory")
    assert_usage_error(run_cli("generate", "--out", target / "sub", *slow, timeout=60),
                       str(target))
    assert target.read_text() == "not a directory"


@pytest.mark.skipif(os.access("/sys", os.W_OK) and not os.path.ismount("/sys"),
                    reason="no directory here that even root cannot write")
def test_unwritable_output_directory_is_refused_before_any_work():
    """Root-proof: sysfs refuses new entries to every user (a read-only directory does not
    stop root, so the test below cannot run as root)."""
    out = "/sys/eqfast-test-out"
    proc = run_cli("generate", "--out", out, "--games", "16", "--games-per-batch", "16",
                   "--n-samples", "100", "--oracle", "exact", "--quiet", timeout=60)
    assert_usage_error(proc, out)
    assert not os.path.exists(out)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes into read-only directories")
def test_read_only_output_directory_is_refused_before_any_work(tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        proc = run_cli("generate", "--out", out, "--games", "16", "--games-per-batch", "16",
                       "--n-samples", "100", "--oracle", "exact", "--quiet", timeout=60)
    finally:
        out.chmod(0o755)
    assert_usage_error(proc, str(out), "not writable")


def _damage(path, how):
    """Damage one shard's files as a disk, a copy or a hand might."""
    side = path.with_suffix(".json")
    if how == "truncated":
        path.write_bytes(path.read_bytes()[:-100])
    elif how == "bit-flip":
        blob = bytearray(path.read_bytes())
        blob[len(blob) // 2] ^= 0x10
        path.write_bytes(bytes(blob))
    elif how == "sidecar-without-shard":
        doc = json.loads(side.read_text())
        del doc["shard"]
        side.write_text(json.dumps(doc))
    elif how == "directory":
        path.unlink()
        path.mkdir()
        (path / "x").write_text("not a shard")


@pytest.mark.parametrize("how", ["truncated", "bit-flip", "sidecar-without-shard", "directory"])
def test_resume_verifies_what_it_skips_and_regenerates_a_damaged_range(ds, how):
    """A resume checks each saved range it would skip against its sidecar (size and
    SHA-256); a damaged one is moved aside under damaged/ (named in the message) and played
    again, so the dataset reads whole afterwards."""
    split = _split_with_records(ds, 1)
    bad = ds / split / "shard_000001-000001.safetensors"
    good = (ds / split / "shard_000000-000000.safetensors").read_bytes()
    _damage(bad, how)
    proc = run_cli("generate", "--out", ds, "--games", "2", "--games-per-batch", "1",
                   "--n-samples", "4", "--oracle", "exact", "--pipeline", "reference",
                   "--threads", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "damaged" in proc.stderr and "shard_000001-000001" in proc.stderr, proc.stderr
    assert '"games": 1' in proc.stdout
    aside = sorted(p.relative_to(ds) for p in (ds / "damaged").rglob("shard_000001-000001*"))
    assert aside, list((ds / "damaged").rglob("*"))
    assert all(str(p).startswith(f"damaged/{split}/") for p in aside)
    records, _ = load_records(ds)
    assert len(records) == 2 * 28 and sorted(set(records["seed"].tolist())) == [0, 1]
    assert (ds / split / "shard_000000-000000.safetensors").read_bytes() == good


def test_readers_skip_a_named_bad_shard_only_when_asked(ds):
    split = _split_with_records(ds, 1)
    _damage(ds / split / "shard_000001-000001.safetensors", "bit-flip")
    name = f"{split}/shard_000001-000001"
    assert_usage_error(run_cli("view", ds, "--print", "1"), "shard_000001-000001",
                       "--skip-shard")
    proc = run_cli("view", ds, "--print", "1", "--skip-shard", name)
    assert proc.returncode == 0 and "seed 0" in proc.stdout, proc.stderr
    assert "skipping" in proc.stderr and name in proc.stderr
    proc = run_cli("validate", ds, "--outcomes", "--skip-shard", f"{name}.safetensors")
    assert proc.returncode == 0, proc.stderr
    records, _ = load_records(ds, skip=[name])
    assert sorted(set(records["seed"].tolist())) == [0]
    # a name that matches no shard is an error, not a silent no-op
    assert_usage_error(run_cli("view", ds, "--print", "1", "--skip-shard", "shard_000009-000009"),
                       "shard_000009-000009")


def test_an_orphan_pt_file_of_a_killed_write_is_removed(ds):
    """The .pt file is written first and the sidecar last: a .pt without its sidecar is a
    write that never finished, removed (and named) when the next run starts."""
    orphan = ds / "train" / "shard_000002-000002.pt"
    orphan.write_bytes(b"a .pt whose sidecar was never written")
    proc = run_cli("generate", "--out", ds, "--games", "2", "--games-per-batch", "1",
                   "--n-samples", "4", "--oracle", "exact", "--pipeline", "reference",
                   "--threads", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert not orphan.exists() and "removed 1" in proc.stderr, proc.stderr


def test_resume_keeps_the_pt_format_consistent(ds):
    """A safetensors-only directory resumed with --format pt gets the .pt files of its
    saved ranges too (each read back equal to its shard); a directory with .pt files resumed
    without --format pt is refused, since its new ranges would lack them."""
    from eqfast.data.shards import read_shard

    args = ["--games", "3", "--games-per-batch", "1", "--n-samples", "4", "--oracle", "exact",
            "--pipeline", "reference", "--threads", "1", "--quiet"]
    proc = run_cli("generate", "--out", ds, *args, "--format", "pt")
    assert proc.returncode == 0, proc.stderr
    for split in SPLIT_NAMES:
        for seed in range(3):
            base = ds / split / f"shard_{seed:06d}-{seed:06d}"
            a, meta_a = read_shard(base.with_suffix(".pt"))
            b, meta_b = read_shard(base.with_suffix(".safetensors"))
            assert meta_a == meta_b and sorted(a.tensors) == sorted(b.tensors)
    assert_usage_error(run_cli("generate", "--out", ds, *args[:-1], "--games", "4"),
                       "--format pt")
