"""Network weights as safetensors files with JSON metadata, checked on load: the one
implementation behind the oracle's (eqfast/oracle/weights.py) and the Stage 2 model's
(eqfast/stage2/weights.py) weights files, which differ only in their format tag, the
version they pin and the words of their messages (`WeightsKind`).

Metadata keys (all strings, as safetensors requires): `format`, `format_version`, the
kind's own version key, `config` (JSON: the architecture), `data_hash`, `metrics` and
`train` (JSON). Reading checks each, then the tensor names, dtypes and shapes against the
network the config builds, and that every value is finite; every problem raises the kind's
error naming the file. Nothing is ever unpickled.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from .atomic import atomic_write_bytes, canonical_safetensors


@dataclass(frozen=True)
class WeightsKind:
    name: str                  # in messages: "oracle weights", "Stage 2 weights"
    article: str               # "an" oracle weights file, "a" Stage 2 weights file
    format: str                # metadata "format"
    format_version: int
    version_key: str           # the input-encoding version the weights were trained on
    version: str
    writer: str                # the command that writes such files, for messages
    error: type                # a ValueError subclass
    other: Callable[[dict], str]   # what a safetensors file of another format holds


def save(path, network: torch.nn.Module, kind: WeightsKind, config: dict, data_hash: str = "",
         metrics: dict | None = None, train: dict | None = None) -> None:
    """Write `network`'s parameters and the metadata to `path` atomically."""
    from safetensors.torch import save as st_save

    tensors = {k: v.detach().cpu().contiguous() for k, v in network.state_dict().items()}
    meta = {"format": kind.format, "format_version": str(kind.format_version),
            kind.version_key: kind.version, "config": json.dumps(config),
            "data_hash": data_hash, "metrics": json.dumps(metrics or {}),
            "train": json.dumps(train or {})}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, canonical_safetensors(st_save(tensors, metadata=meta)))


def read(path, kind: WeightsKind) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, metadata with config/metrics/train decoded) after checking the header."""
    from safetensors import safe_open

    path = Path(path)
    if path.is_dir():
        raise kind.error(f"{path} is a directory, not {kind.article} {kind.name} file "
                         "(.safetensors)")
    if not path.is_file():
        raise kind.error(f"{kind.name} file {path} does not exist")
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = dict(f.metadata() or {})
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises its own error types for bad headers/lengths
        raise kind.error(f"{kind.name} file {path} is not a readable safetensors file: "
                         f"{not_safetensors(path, e, kind)}") from None
    if raw.get("format") != kind.format:
        raise kind.error(f"{kind.name} file {path}: {kind.other(raw)}")
    for key, want in (("format_version", str(kind.format_version)),
                      (kind.version_key, kind.version)):
        if raw.get(key) != want:
            raise kind.error(f"{kind.name} file {path}: metadata {key!r} is {raw.get(key)!r}, "
                             f"this code needs {want!r}")
    meta = dict(raw)
    for key in ("config", "metrics", "train"):
        try:
            meta[key] = json.loads(raw.get(key, "{}"))
        except json.JSONDecodeError as e:
            raise kind.error(f"{kind.name} file {path}: metadata {key!r} is not valid JSON: "
                             f"{e}") from None
    return tensors, meta


def load(path, kind: WeightsKind, build: Callable[[dict], torch.nn.Module]
         ) -> tuple[torch.nn.Module, dict]:
    """(network in eval mode, metadata): the network `build(config)` makes, with the file's
    weights; strict about names, dtypes, shapes and finiteness."""
    tensors, meta = read(path, kind)
    try:
        network = build(meta["config"])
    except (TypeError, ValueError) as e:
        raise kind.error(f"{kind.name} file {path}: bad 'config' {meta['config']!r}: {e}") from None
    expected = network.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise kind.error(f"{kind.name} file {path} does not match its config: missing tensors "
                         f"{missing}, unexpected tensors {unexpected}")
    for name, want in expected.items():
        got = tensors[name]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise kind.error(f"{kind.name} file {path}: tensor {name!r} is "
                             f"{got.dtype}{list(got.shape)}, the config needs "
                             f"{want.dtype}{list(want.shape)}")
        if got.is_floating_point() and not bool(torch.isfinite(got).all()):
            raise kind.error(f"{kind.name} file {path}: tensor {name!r} has non-finite values")
    network.load_state_dict(tensors)
    return network.eval(), meta


def not_safetensors(path: Path, error: Exception, kind: WeightsKind) -> str:
    """What a file that safetensors cannot open is, said so that the user knows what to
    pass instead; nothing here unpickles or runs the file."""
    import zipfile

    with open(path, "rb") as f:
        head = f.read(9)
    size = path.stat().st_size
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
        if any("/code/" in n for n in names):
            return ("it is a TorchScript file (as eqfast-export-oracle writes); pass the "
                    ".safetensors weights it was exported from (a training run's "
                    "best.safetensors, or a shipped model's name)")
        return ("it is a torch.save archive, i.e. a pickle, which eqfast never loads; pass a "
                f".safetensors file written by {kind.writer}")
    if head[:1] == b"\x80":
        return ("it is a Python pickle, which eqfast never loads; pass a .safetensors file "
                f"written by {kind.writer}")
    if len(head) == 9 and head[8:9] == b"{":
        header = int.from_bytes(head[:8], "little")
        if 8 + header > size:
            return f"it is truncated: its header alone needs {8 + header} bytes, it has {size}"
        return f"it is truncated or corrupt ({error})"
    return f"it is no safetensors file at all ({kind.name} are .safetensors files from {kind.writer})"
