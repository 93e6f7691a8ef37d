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
problem. Nothing is ever unpickled. The same layout as eqfast/oracle/weights.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..engine.transcript import TOKENIZER_VERSION
from ..utils.atomic import atomic_write_bytes
from .model import Stage2Model, build_model

FORMAT = "eqfast-stage2"
FORMAT_VERSION = 1
DEFAULT_STAGE2 = Path(__file__).resolve().parent.parent / "models" / "stage2.safetensors"


class Stage2WeightsError(ValueError):
    """A Stage 2 weights file is missing, unreadable or does not match the code."""


def save_stage2(path, model: torch.nn.Module, config: dict, data_hash: str = "",
                metrics: dict | None = None, train: dict | None = None) -> None:
    """Write `model`'s parameters and the metadata to `path` atomically."""
    from safetensors.torch import save

    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    meta = {"format": FORMAT, "format_version": str(FORMAT_VERSION),
            "tokenizer_version": TOKENIZER_VERSION, "config": json.dumps(config),
            "data_hash": data_hash, "metrics": json.dumps(metrics or {}, allow_nan=False),
            "train": json.dumps(train or {}, allow_nan=False)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, save(tensors, metadata=meta))


def read_stage2(path) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, metadata with config/metrics/train decoded) after checking the header."""
    from safetensors import safe_open

    path = Path(path)
    if path.is_dir():
        raise Stage2WeightsError(f"{path} is a directory, not a Stage 2 weights file "
                                 "(.safetensors)")
    if not path.is_file():
        raise Stage2WeightsError(f"Stage 2 weights file {path} does not exist")
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = dict(f.metadata() or {})
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises its own error types for bad headers/lengths
        raise Stage2WeightsError(f"Stage 2 weights file {path} is not a readable safetensors "
                                 f"file ({type(e).__name__}: {e}); pass a .safetensors file "
                                 "written by eqfast-train-stage2") from None
    if raw.get("format") != FORMAT:
        raise Stage2WeightsError(f"Stage 2 weights file {path}: {_other_format(raw)}")
    for key, want in (("format_version", str(FORMAT_VERSION)),
                      ("tokenizer_version", TOKENIZER_VERSION)):
        if raw.get(key) != want:
            raise Stage2WeightsError(f"Stage 2 weights file {path}: metadata {key!r} is "
                                     f"{raw.get(key)!r}, this code needs {want!r}")
    meta = dict(raw)
    for key in ("config", "metrics", "train"):
        try:
            meta[key] = json.loads(raw.get(key, "{}"))
        except json.JSONDecodeError as e:
            raise Stage2WeightsError(f"Stage 2 weights file {path}: metadata {key!r} is not "
                                     f"valid JSON: {e}") from None
    return tensors, meta


def _other_format(meta: dict) -> str:
    """What a safetensors file without the Stage 2 format tag holds."""
    if meta.get("format") == "eqfast-oracle":
        return "oracle (Stage 1) weights, not Stage 2 weights"
    if meta.get("format") == "eqfast-decisions":
        return "a dataset shard written by eqfast-generate, not Stage 2 weights"
    return (f"metadata 'format' is {meta.get('format')!r}, expected {FORMAT!r}: not Stage 2 "
            "weights")


def load_stage2_with_meta(path=DEFAULT_STAGE2) -> tuple[Stage2Model, dict]:
    """(model in eval mode, metadata) from a weights file; strict about names and shapes."""
    tensors, meta = read_stage2(path)
    try:
        model = build_model(meta["config"])
    except (TypeError, ValueError) as e:
        raise Stage2WeightsError(f"Stage 2 weights file {path}: bad 'config' "
                                 f"{meta['config']!r}: {e}") from None
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise Stage2WeightsError(f"Stage 2 weights file {path} does not match its config: "
                                 f"missing tensors {missing}, unexpected tensors {unexpected}")
    for name, want in expected.items():
        got = tensors[name]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise Stage2WeightsError(f"Stage 2 weights file {path}: tensor {name!r} is "
                                     f"{got.dtype}{list(got.shape)}, the config needs "
                                     f"{want.dtype}{list(want.shape)}")
        if got.is_floating_point() and not bool(torch.isfinite(got).all()):
            raise Stage2WeightsError(f"Stage 2 weights file {path}: tensor {name!r} has "
                                     "non-finite values")
    model.load_state_dict(tensors)
    return model.eval(), meta


def load_stage2(path=DEFAULT_STAGE2) -> Stage2Model:
    """The Stage 2 model (eval mode) of a weights file; the shipped one by default."""
    return load_stage2_with_meta(path)[0]


def copy_with_metadata(src, dst, metrics: dict | None = None, train: dict | None = None) -> None:
    """Write the weights of `src` to `dst` with `metrics` / `train` entries merged into its
    metadata (shipping a run's best weights with their test figures and data card)."""
    model, meta = load_stage2_with_meta(src)
    save_stage2(dst, model, meta["config"], meta.get("data_hash", ""),
                {**meta["metrics"], **(metrics or {})}, {**meta["train"], **(train or {})})
