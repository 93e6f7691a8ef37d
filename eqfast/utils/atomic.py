"""Atomic file writes: a reader sees either the old file or the complete new one.

The data goes to a temporary file in the destination's directory (same filesystem, so
`os.replace` is an atomic rename), is fsync'ed, and replaces the destination only when the
writer finished without an exception; on an exception the temporary file is removed and
the old destination, if any, is left untouched. The directory is fsync'ed after the
rename so the new name survives a crash too (best effort: not every OS allows it).

    with atomic_path("out/shard-0003.safetensors") as tmp:
        some_library_that_wants_a_path(tmp)
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator, Mapping

# Read once at import: os.umask can only be read by setting it, which is not thread-safe.
_UMASK = os.umask(0)
os.umask(_UMASK)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open a directory
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it becomes `path` atomically.

    The temporary file exists (empty) when yielded; the caller may overwrite it. The final
    file gets the old file's permissions, or the usual ones for a new file (0666 & ~umask)
    rather than mkstemp's private 0600.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise FileNotFoundError(f"atomic write to {path}: directory {directory} does not exist")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(f"atomic write to {path}: the writer removed {tmp}")
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_UMASK
        os.chmod(tmp, mode)
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_dir(directory)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """Write `text` to `path` atomically (no newline translation)."""
    atomic_write_bytes(path, text.encode(encoding))


def canonical_safetensors(blob: bytes) -> bytes:
    """`blob` (a safetensors file) with its header in one order: `__metadata__` first with
    sorted keys, then the tensors by data offset (then name), compact JSON padded with
    spaces to 8 bytes. The safetensors library writes its metadata map in the order of a
    per-process hash, so equal shards would otherwise differ in bytes between runs. The
    tensor data is left as it is (offsets are relative to the end of the header)."""
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", None)
    ordered = {} if meta is None else {"__metadata__": dict(sorted(meta.items()))}
    for name in sorted(header, key=lambda k: (header[k]["data_offsets"][0], k)):
        ordered[name] = header[name]
    text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + blob[8 + n:]


def atomic_save_safetensors(tensors: Mapping, path: str | os.PathLike,
                            metadata: Mapping[str, str] | None = None) -> None:
    """`safetensors.torch.save_file(tensors, path, metadata)`, atomically, with the header
    in canonical order (`canonical_safetensors`).

    safetensors metadata must map str to str; a wrong type is reported by key here rather
    than as an opaque error from the Rust side.
    """
    from safetensors.torch import save

    if metadata is not None:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"safetensors metadata must map str to str; key {k!r} has "
                                f"value {v!r} of type {type(v).__name__}")
        metadata = dict(metadata)
    atomic_write_bytes(path, canonical_safetensors(save(dict(tensors), metadata=metadata)))


__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "atomic_save_safetensors",
           "canonical_safetensors"]
