"""Shards on disk: safetensors (tensors) + a JSON sidecar (metadata), written atomically.

Layout under an output directory, one shard per (split, seed range), seeds inclusive:

    train/shard_000000-000099.safetensors   the record tensors (schema 2.1 fields)
    train/shard_000000-000099.json          sidecar: metadata + {"shard": size, sha256, ...}
    val/...   test/...                      same names (the split is a hash of the seed)
    train/shard_000000-000099.pt            only with format "pt": the earlier implementation's torch dict
                                            (every field tensor + "metadata")

The tensor file is written first and the sidecar last, each by temp file + os.replace, so a
sidecar on disk means its tensor file is complete; the sidecar records the tensor file's
size and SHA-256, so a truncated or modified file is caught on read. Reading never
unpickles: safetensors, JSON, and `.pt` through torch.load(weights_only=True).

One writer per output directory: `lock_output` holds an flock(2) lock on
`<root>/.eqfast-generate.lock` for the whole run (the kernel drops it when the process ends,
however it ends); the ranks of a run that splits the seeds share it, one writer per rank. Every reader lists a split's shards through `split_shards`, which refuses
overlapping seed ranges and a sidecar without its tensor file (or the reverse), so no game
is counted twice or lost without a word.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Callable, Iterator

import torch

from ..engine.transcript import F_DECL
from ..utils.atomic import atomic_write_bytes, atomic_write_text, canonical_safetensors
from .schema import (FIELDS, OPTIONAL_FIELDS, SCHEMA_VERSION, SPLIT_NAMES, DecisionRecords,
                     check_invariants)

SHARD_FORMAT = "eqfast-decisions"
FORMATS = ("safetensors", "pt")
_SHARD_RE = re.compile(r"shard_(\d+)-(\d+)")
LOCK_NAME = ".eqfast-generate.lock"
#: what `atomic_path` leaves behind when a writer is killed mid-write (never data)
STALE_TMP_GLOB = ".shard_*.tmp"


#: the safetensors name of `world_owner` packed 2 bits a tile (`pack_owners`)
PACKED_OWNER = "world_owner_packed"


def pack_owners(owner: torch.Tensor) -> torch.Tensor:
    """world_owner [..., 28] int8 (seats 0..3) -> uint8 [..., 7]: tile t in byte t // 4 at
    bits 2 (t % 4) and up, a quarter of the bytes (a world in 7 bytes)."""
    parts = owner.to(torch.uint8).reshape(*owner.shape[:-1], 7, 4)
    return (parts[..., 0] | (parts[..., 1] << 2) | (parts[..., 2] << 4)
            | (parts[..., 3] << 6)).contiguous()


def unpack_owners(packed: torch.Tensor) -> torch.Tensor:
    """The inverse of `pack_owners`: uint8 [..., 7] -> int8 [..., 28]."""
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.uint8)
    return ((packed[..., None] >> shifts) & 3).reshape(*packed.shape[:-1], 28).to(torch.int8)


class ShardError(Exception):
    """A shard that cannot be read: missing, truncated, corrupted or off-schema (names the file)."""


class OutputError(Exception):
    """An output directory that cannot be written, or that another writer holds (names it)."""


def shard_name(seed_lo: int, seed_hi: int) -> str:
    """'shard_000000-000099' for the inclusive seed range [seed_lo, seed_hi]."""
    if not 0 <= seed_lo <= seed_hi:
        raise ValueError(f"bad seed range [{seed_lo}, {seed_hi}]")
    return f"shard_{seed_lo:06d}-{seed_hi:06d}"


def shard_path(root, split: str, seed_lo: int, seed_hi: int, ext: str = "safetensors") -> Path:
    if split not in SPLIT_NAMES:
        raise ValueError(f"split must be one of {SPLIT_NAMES}, got {split!r}")
    return Path(root) / split / f"{shard_name(seed_lo, seed_hi)}.{ext}"


def _sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


def write_shard(records: DecisionRecords, metadata: dict, path, formats=("safetensors",),
                shard_info: dict | None = None) -> list[Path]:
    """Write `records` at `path` (any suffix; .safetensors/.json/.pt are derived from it).

    Returns the paths written. `shard_info` (e.g. split, seed range) goes to the sidecar's
    "shard" entry together with the record count and the tensor file's size and SHA-256.
    """
    from safetensors.torch import save

    path = Path(path)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"formats must be a non-empty subset of {FORMATS}, got {formats}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in records.tensors.items()}
    if "world_owner" in tensors:               # 2 bits a tile on disk (read_shard unpacks)
        tensors[PACKED_OWNER] = pack_owners(tensors.pop("world_owner"))
    meta_json = json.dumps(metadata, allow_nan=False, sort_keys=True)
    written = []
    # the .pt file first and the sidecar last: a sidecar on disk means every file of the
    # shard is complete (resume trusts sidecars)
    if "pt" in formats:
        pt_path = path.with_suffix(".pt")
        atomic_write_bytes(pt_path, pt_bytes(pt_payload(records, metadata)))
        written.append(pt_path)
    if "safetensors" in formats:
        blob = canonical_safetensors(save(
            tensors, metadata={"format": SHARD_FORMAT, "version": SCHEMA_VERSION,
                               "metadata": meta_json}))
        st_path = path.with_suffix(".safetensors")
        atomic_write_bytes(st_path, blob)
        sidecar = {"metadata": metadata,
                   "shard": {**(shard_info or {}), "format": SHARD_FORMAT,
                             "n_records": len(records), "tensor_file": st_path.name,
                             "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest(),
                             "fields": sorted(tensors)}}
        atomic_write_text(_sidecar(path), json.dumps(sidecar, allow_nan=False, indent=1,
                                                     sort_keys=True))
        written += [st_path, _sidecar(path)]
    return written


def pt_bytes(payload: dict) -> bytes:
    """torch.save of `payload` as bytes. Saved to memory, not to the temporary file: the
    zip archive's folder is named after the file it is saved to, and a temporary name is
    random, so the same payload would differ in bytes between runs."""
    import io

    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


#: .pt keys the earlier implementation's tools read, as copies of eqfast fields
PT_ALIASES = {"player": "actor", "actual_outcome": "realized_to_go"}
#: the .pt metadata key listing the metadata keys pt_payload added
PT_ADDED = "pt_added_keys"


def pt_payload(records: DecisionRecords, metadata: dict) -> dict:
    """The `.pt` dict: every record field, plus what the earlier implementation's viewer and
    scripts read (docs/DATASET.md, "The .pt file"): the PT_ALIASES copies, transcript tokens
    as int64, and in the metadata the record and game counts, the run seed as `seed`, one
    entry per game, and its summary's statistics under their names."""
    out = {k: v.detach().cpu().contiguous() for k, v in records.tensors.items()}
    out["transcript_tokens"] = out["transcript_tokens"].long()
    for alias, name in PT_ALIASES.items():
        if name in out:
            out[alias] = out[name].long() if out[name].dtype == torch.int8 else out[name].clone()
    meta = dict(metadata)
    summary = dict(meta.get("summary") or {})
    added_summary = []
    for alias, name in (("q_range", "q_legal"), ("ess_distribution", "ess"),
                        ("exploration_stats", "exploration_rates")):
        if name in summary and alias not in summary:
            summary[alias] = summary[name]
            added_summary.append(alias)
    if "summary" in meta:
        meta["summary"] = summary
    games = []
    for g in torch.unique(records["game_idx"]).tolist():
        rows = torch.nonzero(records["game_idx"] == g)[:, 0]
        first = int(rows[torch.argmin(records["decision_idx"][rows])])
        game = {"game_idx": g, "seed": int(records["seed"][first]),
                "decl": int(records["transcript_tokens"][first, 0, F_DECL]),
                "decisions": len(rows)}
        if int(records["decision_idx"][first]) == 0:
            game["declarer"] = int(records["actor"][first])
        if "final_points" in records:
            game["final_points"] = records["final_points"][first].tolist()
        games.append(game)
    extra = {"n_games": len(games), "n_decisions": len(records), "n_examples": len(records),
             "seed": metadata.get("run_seed"), "games": games}
    extra = {k: v for k, v in extra.items() if k not in meta}
    meta.update(extra)
    # what read_shard takes out again, so the file reads back as its safetensors twin
    meta[PT_ADDED] = {"metadata": sorted(extra), "summary": added_summary}
    return {**out, "metadata": meta}


def write_split_shards(records: DecisionRecords, metadata: dict, root, seed_lo: int,
                       seed_hi: int, formats=("safetensors",), write_empty: bool = True
                       ) -> dict[str, list[Path]]:
    """Split records of the games with seeds in [seed_lo, seed_hi] into train/val/test
    shards under root. With write_empty, a split without games still gets an (empty)
    shard, so "all three sidecars exist" means the seed range is done."""
    seeds = records["seed"]
    if len(records) and bool(((seeds < seed_lo) | (seeds > seed_hi)).any()):
        raise ValueError(f"write_split_shards: records hold seeds outside [{seed_lo}, {seed_hi}]")
    out = {}
    for i, name in enumerate(SPLIT_NAMES):
        part = records.select(records["split"] == i)
        if len(part) == 0 and not write_empty:
            continue
        out[name] = write_shard(part, metadata, shard_path(root, name, seed_lo, seed_hi),
                                formats, {"split": name, "seed_lo": seed_lo, "seed_hi": seed_hi})
    return out


def _check_version(metadata: dict, where: Path) -> None:
    """ShardError unless the shard's schema version has this eqfast's major version (a
    minor version only adds optional fields)."""
    version = metadata.get("version") if isinstance(metadata, dict) else None
    if str(version).split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise ShardError(f"{where}: dataset schema version {version}, this eqfast reads "
                         f"schema {SCHEMA_VERSION} (major version {SCHEMA_VERSION.split('.')[0]})")


def _check_records(tensors: dict, where: Path, metadata: dict) -> DecisionRecords:
    """The records of a shard once its version, fields, shapes and invariants (NaN, ranges,
    layout: schema.check_invariants; a relabelled shard's greedy moves may have q_gap > 0)
    are right; ShardError naming the file and the field."""
    _check_version(metadata, where)
    if PACKED_OWNER in tensors:
        tensors = dict(tensors)
        tensors["world_owner"] = unpack_owners(tensors.pop(PACKED_OWNER))
    missing = [f for f in FIELDS if f not in tensors]
    if missing:
        raise ShardError(f"{where}: missing fields {missing}")
    tensors = {k: v for k, v in tensors.items() if k in FIELDS or k in OPTIONAL_FIELDS}
    try:
        records = DecisionRecords(tensors)
    except ValueError as e:
        raise ShardError(f"{where}: {e}") from None
    problems = check_invariants(records, relabelled=isinstance(metadata, dict)
                                and "relabel" in metadata)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise ShardError(f"{where}: records break the schema invariants: "
                         f"{'; '.join(problems[:3])}{more}")
    return records


def read_shard(path) -> tuple[DecisionRecords, dict]:
    """(records, metadata) of a shard; `path` may name the .safetensors, .json or .pt file.

    Raises ShardError naming the file for a missing, truncated or corrupted shard.
    """
    path = Path(path)
    if path.suffix == ".pt":
        return _read_pt(path)
    st_path, side_path = path.with_suffix(".safetensors"), _sidecar(path)
    for p in (side_path, st_path):
        if not p.is_file():
            raise ShardError(f"{p}: shard file missing")
    try:
        sidecar = json.loads(side_path.read_text(encoding="utf-8"))
        info, metadata = sidecar["shard"], sidecar["metadata"]
        expected_bytes, expected_sha = int(info["bytes"]), info["sha256"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ShardError(f"{side_path}: corrupted sidecar ({type(e).__name__}: {e})") from None
    blob = st_path.read_bytes()
    if len(blob) != expected_bytes:
        raise ShardError(f"{st_path}: truncated or overwritten: {len(blob)} bytes, the sidecar "
                         f"{side_path.name} says {expected_bytes}")
    if hashlib.sha256(blob).hexdigest() != expected_sha:
        raise ShardError(f"{st_path}: corrupted: SHA-256 differs from the sidecar {side_path.name}")
    from safetensors.torch import load
    try:
        tensors = load(blob)
    except Exception as e:  # safetensors raises its own error types
        raise ShardError(f"{st_path}: not a readable safetensors file ({e})") from None
    records = _check_records(tensors, st_path, metadata)
    if len(records) != int(info.get("n_records", len(records))):
        raise ShardError(f"{st_path}: {len(records)} records, the sidecar says {info['n_records']}")
    return records, metadata


def _read_pt(path: Path) -> tuple[DecisionRecords, dict]:
    if not path.is_file():
        raise ShardError(f"{path}: shard file missing")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ShardError(f"{path}: not a readable .pt shard ({type(e).__name__}: {e})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        raise ShardError(f"{path}: not an eqfast .pt shard (expected a dict with 'metadata')")
    metadata = dict(obj.pop("metadata"))
    for alias in PT_ALIASES:                      # copies written for other tools
        obj.pop(alias, None)
    added = metadata.pop(PT_ADDED, None) or {}
    for key in added.get("metadata", []):
        metadata.pop(key, None)
    if added.get("summary") and isinstance(metadata.get("summary"), dict):
        metadata["summary"] = {k: v for k, v in metadata["summary"].items()
                               if k not in added["summary"]}
    tokens = obj.get("transcript_tokens")
    if isinstance(tokens, torch.Tensor) and tokens.dtype == torch.int64:
        obj["transcript_tokens"] = tokens.to(torch.int8)
    return _check_records(obj, path, metadata), metadata


def range_of(path: Path) -> tuple[int, int] | None:
    """(lo, hi) of a file named shard_<lo>-<hi>.<ext>, None for any other name."""
    m = _SHARD_RE.fullmatch(path.stem)
    return (int(m.group(1)), int(m.group(2))) if m else None


def check_disjoint(ranges: list[tuple[int, int]], where) -> None:
    """Raise ShardError if two seed ranges overlap (a game would be counted twice)."""
    ordered = sorted(ranges)
    for (lo1, hi1), (lo2, hi2) in zip(ordered, ordered[1:]):
        if lo2 <= hi1:
            raise ShardError(f"{where}: shards {shard_name(lo1, hi1)} and {shard_name(lo2, hi2)} "
                             "overlap: the same games would be read twice (written by two runs "
                             "with different --games-per-batch?); remove one of them")


def _named_ranges(folder: Path, ext: str) -> set[tuple[int, int]]:
    """Seed ranges of the files shard_<lo>-<hi>.<ext> in folder."""
    return {r for f in folder.glob(f"shard_*.{ext}") if (r := range_of(f)) is not None}


def parse_skip(names) -> set[tuple[str | None, str]]:
    """--skip-shard values ('train/shard_000001-000001', with or without a file suffix or
    a leading directory; a bare 'shard_...' means every split) as {(split or None, stem)}."""
    out = set()
    for name in names or ():
        path = Path(name)
        stem = path.name
        for ext in (".safetensors", ".json", ".pt"):
            stem = stem.removesuffix(ext)
        if _SHARD_RE.fullmatch(stem) is None:
            raise ShardError(f"--skip-shard {name}: not a shard name (expected "
                             "[SPLIT/]shard_<lo>-<hi>, e.g. train/shard_000001-000001)")
        split = path.parent.name if path.parent.name in SPLIT_NAMES else None
        out.add((split, stem))
    return out


def _skipped(folder: Path, lo: int, hi: int, skip) -> bool:
    stem = shard_name(lo, hi)
    return (None, stem) in skip or (folder.name, stem) in skip


def _skip_hint(folder: Path, lo: int, hi: int) -> str:
    return (f" (--skip-shard {folder.name}/{shard_name(lo, hi)} reads the other shards "
            "without it)")


def split_shards(folder, skip=()) -> list[Path]:
    """The tensor files of the shards in one split directory, in seed order, less those
    `skip` names (parse_skip's pairs: a reader's --skip-shard).

    Every reader lists shards through here, so all of them refuse the same things with a
    ShardError naming the file: a sidecar whose tensor file is missing (its games would be
    skipped), a tensor file without its sidecar (a write that never finished), and two
    shards whose seed ranges overlap (their games would be counted twice).
    """
    folder = Path(folder)
    sidecars, tensors = _named_ranges(folder, "json"), _named_ranges(folder, "safetensors")
    if skip:
        sidecars = {r for r in sidecars if not _skipped(folder, *r, skip)}
        tensors = {r for r in tensors if not _skipped(folder, *r, skip)}
    for lo, hi in sorted(sidecars ^ tensors):
        base = folder / shard_name(lo, hi)
        if (lo, hi) in sidecars:
            raise ShardError(f"{base}.safetensors: tensor file missing (its sidecar {base.name}"
                             f".json is there): the games of seeds {lo}..{hi} are lost; re-run "
                             "eqfast-generate on this directory to regenerate them"
                             + _skip_hint(folder, lo, hi))
        raise ShardError(f"{base}.safetensors: no sidecar {base.name}.json (a write that never "
                         f"finished); re-run eqfast-generate on this directory to regenerate "
                         f"seeds {lo}..{hi}" + _skip_hint(folder, lo, hi))
    check_disjoint(list(sidecars), folder)
    return [folder / f"{shard_name(lo, hi)}.safetensors" for lo, hi in sorted(sidecars)]


def read_dataset(root, split: str = "train") -> tuple[DecisionRecords, list[dict]]:
    """All safetensors shards of one split under root, concatenated in seed order.

    Raises ShardError when there are none, or for what `split_shards` refuses."""
    folder = Path(root) / split
    files = split_shards(folder)
    if not files:
        raise ShardError(f"{folder}: no shards")
    parts, metas = zip(*(read_shard(f) for f in files))
    return DecisionRecords.cat(parts), list(metas)


def completed_seed_ranges(root) -> list[tuple[int, int]]:
    """Seed ranges [lo, hi] whose train, val and test shards all exist, sidecar and tensor
    file (resume support). Files not named shard_<lo>-<hi>.<ext> are ignored."""
    ranges = None
    for split in SPLIT_NAMES:
        folder = Path(root) / split
        found = _named_ranges(folder, "json") & _named_ranges(folder, "safetensors")
        ranges = found if ranges is None else ranges & found
    return sorted(ranges or ())


def incomplete_seed_ranges(root) -> list[tuple[int, int]]:
    """Seed ranges some file of which exists under root but which are not complete (a
    write that never finished, a tensor file lost): resume regenerates them whole."""
    named = set()
    for split in SPLIT_NAMES:
        for ext in ("json", "safetensors"):
            named |= _named_ranges(Path(root) / split, ext)
    return sorted(named - set(completed_seed_ranges(root)))


def run_metadata(root) -> dict | None:
    """The metadata of the first completed shard under root whose sidecar reads (None if
    there is none; ShardError naming the first if none reads)."""
    first = None
    for lo, hi in completed_seed_ranges(root):
        side = _sidecar(shard_path(root, SPLIT_NAMES[0], lo, hi))
        try:
            meta = json.loads(side.read_text(encoding="utf-8"))["metadata"]
            if isinstance(meta, dict):
                return meta
            raise ValueError("'metadata' is not an object")
        except (OSError, ValueError, KeyError, TypeError) as e:
            first = first or ShardError(f"{side}: corrupted sidecar ({type(e).__name__}: {e})")
    if first is not None:
        raise first
    return None


#: where a resume moves the files of a damaged shard (root/DAMAGED_DIR/<split>/<file>)
DAMAGED_DIR = "damaged"


def shard_problem(path) -> str | None:
    """Why the shard whose tensor file is `path` does not match its sidecar (None if it
    does): files that are not plain files, a sidecar that does not parse or lacks its
    "shard" entry, a tensor file of another size or SHA-256. Reads the tensor file once,
    without deserializing it."""
    path = Path(path)
    side = _sidecar(path)
    for p in (side, path):
        if not p.is_file():
            return f"{p.name} is {'a directory' if p.is_dir() else 'missing or not a file'}"
    try:
        info = json.loads(side.read_text(encoding="utf-8"))["shard"]
        expected_bytes, expected_sha = int(info["bytes"]), str(info["sha256"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"sidecar {side.name} unreadable ({type(e).__name__}: {e})"
    try:
        size = path.stat().st_size
        if size != expected_bytes:
            return f"{size} bytes, the sidecar says {expected_bytes}"
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        return f"unreadable ({e.strerror})"
    if digest.hexdigest() != expected_sha:
        return "SHA-256 differs from the sidecar's"
    return None


def damaged_shards(root, ranges) -> list[tuple[Path, str]]:
    """(tensor file, problem) of every shard of the seed `ranges` under root (any split)
    that `shard_problem` finds wrong: what a resume must not skip."""
    found = []
    for lo, hi in ranges:
        for split in SPLIT_NAMES:
            path = shard_path(root, split, lo, hi)
            problem = shard_problem(path)
            if problem is not None:
                found.append((path, problem))
    return found


def move_aside(root, path) -> list[tuple[Path, Path]]:
    """Move every file of the shard at `path` (.safetensors, .json, .pt; a directory in
    their place too) to root/DAMAGED_DIR/<split>/, with a numbered suffix when that name is
    taken. Returns (from, to) pairs. The seed range is then incomplete, so a resume plays
    it again."""
    root, path = Path(root), Path(path)
    aside = root / DAMAGED_DIR / path.parent.name
    aside.mkdir(parents=True, exist_ok=True)
    moved = []
    for ext in (".safetensors", ".json", ".pt"):
        src = path.with_suffix(ext)
        if not (src.exists() or src.is_symlink()):
            continue
        dst, k = aside / src.name, 0
        while dst.exists() or dst.is_symlink():
            k += 1
            dst = aside / f"{src.name}.{k}"
        os.replace(src, dst)
        moved.append((src, dst))
    return moved


# ---------------------------------------------------------------------------- the writer
def output_problem(root) -> str | None:
    """Why `root` cannot become an output directory (None if it can), found without
    creating anything: the generator asks before it loads an oracle or plays a game."""
    root = Path(root)
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"--out {root}: {existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"--out {root}: {existing} is not writable"
    for split in SPLIT_NAMES:
        if (root / split).exists() and not (root / split).is_dir():
            return f"--out {root}: {root / split} is not a directory"
    return None


#: the plan the ranks of a directory share (first seed, games per batch, world size)
PLAN_NAME = ".eqfast-generate.plan.json"


def agree_on_plan(root, plan: dict) -> str | None:
    """Record `plan` ({flag name: value} of the flags that decide which rank owns which
    batch) as root/PLAN_NAME if no rank did yet, else compare it with the recorded one: why
    they differ, or None. The file is made by linking a complete temporary file, so two
    ranks that start together see one plan, whole."""
    root = Path(root)
    target = root / PLAN_NAME
    text = json.dumps(plan, sort_keys=True) + "\n"
    if not target.exists():
        fd, tmp = tempfile.mkstemp(prefix=".plan.", suffix=".tmp", dir=root)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, target)
            return None
        except FileExistsError:
            pass                                   # another rank recorded it first
        finally:
            os.unlink(tmp)
    try:
        recorded = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return f"--out {root}: {target} is unreadable ({e}); delete it if no rank is running"
    differ = [k for k in sorted(set(plan) | set(recorded)) if plan.get(k) != recorded.get(k)]
    if not differ:
        return None
    flags = lambda d: " ".join(f"--{k.replace('_', '-')} {d.get(k)}" for k in sorted(d))  # noqa: E731
    return (f"--out {root}: its ranks share the plan {flags(recorded)} ({target.name}); this "
            f"rank's {', '.join('--' + k.replace('_', '-') for k in differ)} differ "
            f"({flags({k: plan.get(k) for k in differ})}): its batches would overlap the "
            "other ranks' and leave gaps. Start every rank with the same plan, or delete "
            f"{target} once no rank of that plan is left to run")


@contextlib.contextmanager
def lock_output(root, rank: int | None = None,
                owns: Callable[[int], bool] | None = None,
                plan: dict | None = None) -> Iterator[list[Path]]:
    """Make `root` and its split directories, and hold the directory's writer lock for the
    body; yields the temporary files of killed writes it removed.

    A second writer gets OutputError: two generators on one directory would both write
    shards of the same seeds in ranges of their own batch sizes. The lock is flock(2) on
    root/LOCK_NAME, released by the kernel when the holder exits however it exits, so a
    lock file left on disk never blocks a later run; it is never deleted, because deleting
    it would race with a writer that has just opened it. Once the lock is held, no other
    writer exists, so every `.shard_*.tmp` file is a leftover and is removed.

    rank (one of several writers that split the seeds, e.g. torchrun ranks or a Slurm
    array): LOCK_NAME is held shared, so the ranks of one run coexist while a plain writer
    is excluded, and root/LOCK_NAME.rank<k> exclusively, so one rank runs once. Only the
    temporary files of ranges whose first seed `owns` accepts (this rank's) are removed:
    the others may be another rank's writes in progress. With `plan`, a rank first agrees
    on it with the directory's other ranks (`agree_on_plan`; OutputError if it differs), so
    that `owns` is the same partition for all of them.
    """
    root = Path(root)
    problem = output_problem(root)
    if problem is not None:
        raise OutputError(problem)
    names = [(LOCK_NAME, fcntl.LOCK_EX if rank is None else fcntl.LOCK_SH)]
    if rank is not None:
        names.append((f"{LOCK_NAME}.rank{rank}", fcntl.LOCK_EX))
    fds = []
    try:
        for name, mode in names:
            fds.append(_take_lock(root, name, mode, rank))
        if rank is not None and plan is not None:
            problem = agree_on_plan(root, plan)
            if problem is not None:
                raise OutputError(problem)
        yield _prepare_splits(root, owns if rank is not None else None)
    finally:
        for fd in fds:
            os.close(fd)


def _take_lock(root: Path, name: str, mode: int, rank: int | None) -> int:
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / name, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise OutputError(f"--out {root}: cannot create the lock file {name} "
                          f"({e.strerror})") from None
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        ranks_hold_it = False
        if rank is None:                      # shared holders only: the ranks of a split run
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                ranks_hold_it = True
            except BlockingIOError:
                pass
        os.close(fd)
        pid = f" (pid {holder})" if holder.isdigit() else ""
        if ranks_hold_it:
            what = "is being written by the ranks of an eqfast-generate run (--rank/--world-size)"
        elif rank is None:
            what = f"is being written by another eqfast-generate{pid}"
        elif name == LOCK_NAME:
            what = "is being written by an eqfast-generate that does not split the seeds by rank"
        else:
            what = f"already has a writer for rank {rank}{pid}"
        raise OutputError(f"--out {root} {what}: wait for it to finish, or write to another "
                          "directory") from None
    if mode == fcntl.LOCK_EX:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _prepare_splits(root: Path, owns: Callable[[int], bool] | None = None) -> list[Path]:
    """Create and probe the split directories (a read-only file system shows here, not
    after the first batch); remove leftover temporary files (with `owns`: only those of
    ranges whose first seed it accepts). Returns those removed."""
    removed = []
    for folder in (root, *(root / s for s in SPLIT_NAMES)):
        try:
            folder.mkdir(exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".shard_probe.", suffix=".tmp", dir=folder)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise OutputError(f"--out {root}: {folder} is not writable ({e.strerror})") from None
        # the .pt file is written before the sidecar: one without its sidecar is a write
        # that never finished, like the temporary files
        orphans = [f for f in folder.glob("shard_*.pt")
                   if range_of(f) is not None and not _sidecar(f).exists()]
        for stale in [*folder.glob(STALE_TMP_GLOB), *orphans]:
            m = _SHARD_RE.search(stale.name)
            if owns is not None and (m is None or not owns(int(m.group(1)))):
                continue
            stale.unlink(missing_ok=True)
            removed.append(stale)
    return removed


def pt_ranges(root) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(complete seed ranges with a .pt file in every split, complete ranges without)."""
    with_pt, without = [], []
    for lo, hi in completed_seed_ranges(root):
        whole = all(shard_path(root, s, lo, hi, "pt").is_file() for s in SPLIT_NAMES)
        (with_pt if whole else without).append((lo, hi))
    return with_pt, without


def add_pt_files(root, ranges) -> int:
    """Write the missing .pt files of the complete seed `ranges` from their safetensors
    shards (the same records and metadata, as `write_shard` writes them); the count."""
    written = 0
    for lo, hi in ranges:
        for split in SPLIT_NAMES:
            pt = shard_path(root, split, lo, hi, "pt")
            if pt.is_file():
                continue
            records, metadata = read_shard(pt.with_suffix(".safetensors"))
            atomic_write_bytes(pt, pt_bytes(pt_payload(records, metadata)))
            written += 1
    return written


def load_records(path, split: str = "all", skip=()) -> tuple[DecisionRecords, list[dict]]:
    """(records sorted by (game, decision), metadata of each shard read).

    path: a shard file (.safetensors/.json/.pt), a split directory of shards, or a dataset
    root with train/ val/ test/ (split picks one, "all" reads every split present).
    skip: shard names left out (a reader's --skip-shard; see parse_skip); a name that
    matches no shard is an error. Raises ShardError with a message naming the path.
    """
    path = Path(path)
    skip = parse_skip(skip)
    if not path.exists():
        raise ShardError(f"{path}: no such file or directory")
    if path.is_file():
        if path.suffix not in (".safetensors", ".json", ".pt"):
            raise ShardError(f"{path}: not a shard (expected .safetensors, .json or .pt)")
        records, meta = read_shard(path)
        return records.sort_by_game(), [meta]
    if split != "all" and split not in SPLIT_NAMES:
        raise ShardError(f"--split must be one of {SPLIT_NAMES} or 'all', got {split!r}")
    dirs = [path / s for s in (SPLIT_NAMES if split == "all" else (split,))]
    files = [f for d in dirs for f in split_shards(d, skip)]
    if not files:
        dirs = [path]
        files = split_shards(path, skip)                       # a split directory itself
    for where, stem in sorted(skip, key=str):
        if not any((d / f"{stem}{ext}").exists() for d in dirs
                   if where is None or d.name == where for ext in (".json", ".safetensors")):
            raise ShardError(f"--skip-shard {where + '/' if where else ''}{stem}: no such shard "
                             f"under {path}")
    if not files:
        where = path / split if split != "all" else path
        raise ShardError(f"{where}: no shards (expected shard_*.safetensors"
                         f"{' under train/ val/ test/' if split == 'all' else ''})")
    parts, metas = [], []
    for f in files:
        try:
            records, meta = read_shard(f)
        except ShardError as e:
            raise ShardError(f"{e}{_skip_hint(f.parent, *range_of(f))}") from None
        parts.append(records)
        metas.append(meta)
    return DecisionRecords.cat(parts).sort_by_game(), metas
