"""Stage 2 weights as safetensors files with the config and the data card in the metadata.

Metadata keys (all strings, as safetensors requires):
    format             "eqfast-stage2"
    format_version     "1"
    tokenizer_version  the transcript tokenizer the model reads ("transcript_v1")
    config             JSON: the architecture config passed to `build_model`
    data_hash          hash of the training shards (train.data_hash)
    metrics            JSON: evaluation figures at save time (may be "{}")
    train              JSON: the training record (seed, steps, wall time, loss, device, and
                       the data card: data path, games, records, seeds, oracle, N)

Loading checks every one of these, the tensor names, shapes and dtypes against the
config, and that every value is finite; `Stage2WeightsError` names the file and the
problem. Nothing is ever unpickled. The same layout and code as the oracle's files
(eqfast/utils/weights_file.py).
"""
from __future__ import annotations

import hashlib

import torch

from ..engine.transcript import TOKENIZER_VERSION
from ..paths import DEFAULT_STAGE2, stage2_weights  # noqa: F401  (re-exported)
from ..utils import weights_file
from .model import Stage2Model, build_model

FORMAT = "eqfast-stage2"
FORMAT_VERSION = 1


class Stage2WeightsError(ValueError):
    """A Stage 2 weights file is missing, unreadable or does not match the code."""


def save_stage2(path, model: torch.nn.Module, config: dict, data_hash: str = "",
                metrics: dict | None = None, train: dict | None = None) -> None:
    """Write `model`'s parameters and the metadata to `path` atomically."""
    weights_file.save(path, model, KIND, config, data_hash, metrics, train)


def fingerprint(path) -> str:
    """The first 16 hex digits of the file's SHA-256: what a player built on these weights
    plays by (the league stores it and refuses a changed file under the same name)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def read_stage2(path) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, metadata with config/metrics/train decoded) after checking the header."""
    return weights_file.read(path, KIND)


def _other_format(meta: dict) -> str:
    """What a safetensors file without the Stage 2 format tag holds."""
    if meta.get("format") == "eqfast-oracle":
        return "oracle (Stage 1) weights, not Stage 2 weights"
    if meta.get("format") == "eqfast-decisions":
        return "a dataset shard written by eqfast-generate, not Stage 2 weights"
    return (f"metadata 'format' is {meta.get('format')!r}, expected {FORMAT!r}: not Stage 2 "
            "weights")


KIND = weights_file.WeightsKind(
    name="Stage 2 weights", article="a", format=FORMAT, format_version=FORMAT_VERSION,
    version_key="tokenizer_version", version=TOKENIZER_VERSION, writer="eqfast-train-stage2",
    error=Stage2WeightsError, other=_other_format)


def load_stage2_with_meta(path=DEFAULT_STAGE2) -> tuple[Stage2Model, dict]:
    """(model in eval mode, metadata) from a weights file; strict about names and shapes."""
    return weights_file.load(path, KIND, build_model)


def load_stage2(path=DEFAULT_STAGE2) -> Stage2Model:
    """The Stage 2 model (eval mode) of a weights file; the shipped one by default."""
    return load_stage2_with_meta(path)[0]


def is_oracle_file(path) -> bool:
    """Whether `path` is an oracle's (Stage 1) weights file, by its metadata 'format' (the
    tensors are not read); False for anything else, unreadable files included (the
    loader that follows names their problem)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return (f.metadata() or {}).get("format") == "eqfast-oracle"
    except Exception:  # not a safetensors file: not an oracle's either
        return False


def copy_with_metadata(src, dst, metrics: dict | None = None, train: dict | None = None) -> None:
    """Write the weights of `src` to `dst` with `metrics` / `train` entries merged into its
    metadata (shipping a run's best weights with their test figures and data card)."""
    model, meta = load_stage2_with_meta(src)
    save_stage2(dst, model, meta["config"], meta.get("data_hash", ""),
                {**meta["metrics"], **(metrics or {})}, {**meta["train"], **(train or {})})
