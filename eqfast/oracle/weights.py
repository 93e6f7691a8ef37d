"""Oracle weights as safetensors files with the config in the metadata (never pickled).

Metadata keys (all strings, as safetensors requires):
    format                "eqfast-oracle"
    format_version        "1"
    token_layout_version  tokenizer.TOKEN_LAYOUT_VERSION the network was trained on
    config                JSON: the architecture config passed to `build_network`
    data_hash             hash of the training shards (dataset.data_hash)
    metrics               JSON: evaluation figures at save time (may be "{}")
    train                 JSON: training settings (seed, steps, rows seen, wall time, ...)

Loading checks every one of these and the tensor names/shapes against the config, and
raises `OracleWeightsError` naming the file and the problem.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..utils.atomic import atomic_write_bytes
from .network import NetworkOracle, OracleModule, build_network, script_module
from .tokenizer import TOKEN_LAYOUT_VERSION

FORMAT = "eqfast-oracle"
FORMAT_VERSION = 1
DEFAULT_MODEL = Path(__file__).resolve().parent.parent / "models" / "default.safetensors"
ACCURATE_MODEL = DEFAULT_MODEL.with_name("accurate.safetensors")


class OracleWeightsError(ValueError):
    """A weights file is missing, unreadable or does not match what the code expects."""


def save_weights(path, network: torch.nn.Module, config: dict, data_hash: str = "",
                 metrics: dict | None = None, train: dict | None = None) -> None:
    """Write `network`'s parameters and metadata to `path` atomically (temp + os.replace)."""
    from safetensors.torch import save

    tensors = {k: v.detach().cpu().contiguous() for k, v in network.state_dict().items()}
    meta = {"format": FORMAT, "format_version": str(FORMAT_VERSION),
            "token_layout_version": str(TOKEN_LAYOUT_VERSION), "config": json.dumps(config),
            "data_hash": data_hash, "metrics": json.dumps(metrics or {}),
            "train": json.dumps(train or {})}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, save(tensors, metadata=meta))


def read_weights(path) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, metadata with config/metrics/train decoded) after checking the header."""
    from safetensors import safe_open

    path = Path(path)
    if path.is_dir():
        raise OracleWeightsError(f"{path} is a directory, not an oracle weights file "
                                 "(.safetensors)")
    if not path.is_file():
        raise OracleWeightsError(f"oracle weights file {path} does not exist")
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = dict(f.metadata() or {})
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises its own error types for bad headers/lengths
        raise OracleWeightsError(f"oracle weights file {path} is not a readable safetensors "
                                 f"file: {_not_safetensors(path, e)}") from None
    if raw.get("format") != FORMAT:
        raise OracleWeightsError(f"oracle weights file {path}: {_other_safetensors(raw)}")
    for key, want in (("format_version", FORMAT_VERSION),
                      ("token_layout_version", TOKEN_LAYOUT_VERSION)):
        if raw.get(key) != str(want):
            raise OracleWeightsError(f"oracle weights file {path}: metadata {key!r} is "
                                     f"{raw.get(key)!r}, this code needs {want!r}")
    meta = dict(raw)
    for key in ("config", "metrics", "train"):
        try:
            meta[key] = json.loads(raw.get(key, "{}"))
        except json.JSONDecodeError as e:
            raise OracleWeightsError(f"oracle weights file {path}: metadata {key!r} is not "
                                     f"valid JSON: {e}") from e
    return tensors, meta


def _not_safetensors(path: Path, error: Exception) -> str:
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
                    "best.safetensors, or 'default' for the shipped network)")
        return ("it is a torch.save archive, i.e. a pickle, which eqfast never loads; pass a "
                ".safetensors file written by eqfast-train-oracle")
    if head[:1] == b"\x80":
        return ("it is a Python pickle, which eqfast never loads; pass a .safetensors file "
                "written by eqfast-train-oracle")
    if len(head) == 9 and head[8:9] == b"{":
        header = int.from_bytes(head[:8], "little")
        if 8 + header > size:
            return f"it is truncated: its header alone needs {8 + header} bytes, it has {size}"
        return f"it is truncated or corrupt ({error})"
    return ("it is no safetensors file at all (oracle weights are .safetensors files from "
            "eqfast-train-oracle)")


def _other_safetensors(meta: dict) -> str:
    """What a safetensors file without the oracle's format tag holds."""
    if meta.get("format") == "eqfast-decisions":
        return ("a dataset shard written by eqfast-generate (decision records), not oracle "
                "weights")
    if "dataset_version" in meta:
        return ("an oracle training-data shard (eqfast-label-oracle), not oracle "
                "weights")
    return f"metadata 'format' is {meta.get('format')!r}, expected {FORMAT!r}: not oracle weights"


def load_network(path) -> tuple[torch.nn.Module, dict]:
    """(network in eval mode, metadata) from a weights file; strict about names and shapes."""
    tensors, meta = read_weights(path)
    try:
        network = build_network(meta["config"])
    except (TypeError, ValueError) as e:
        raise OracleWeightsError(f"oracle weights file {path}: bad 'config' "
                                 f"{meta['config']!r}: {e}") from e
    expected = network.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise OracleWeightsError(f"oracle weights file {path} does not match its config: "
                                 f"missing tensors {missing}, unexpected tensors {unexpected}")
    for name, want in expected.items():
        got = tensors[name]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise OracleWeightsError(f"oracle weights file {path}: tensor {name!r} is "
                                     f"{got.dtype}{list(got.shape)}, the config needs "
                                     f"{want.dtype}{list(want.shape)}")
        if got.is_floating_point() and not bool(torch.isfinite(got).all()):
            raise OracleWeightsError(f"oracle weights file {path}: tensor {name!r} has "
                                     f"non-finite values")
    network.load_state_dict(tensors)
    return network.eval(), meta


def quantize_linear(network: torch.nn.Module) -> torch.nn.Module:
    """int8 dynamic quantization of a network's Linear layers (CPU inference)."""
    import warnings
    # torch.ao.quantization is marked deprecated (in favour of the separate torchao
    # package) but works in torch 2.13; the warning is not the user's to act on
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.ao.quantization is deprecated",
                                category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions",
                                category=UserWarning)
        return torch.ao.quantization.quantize_dynamic(network.eval(), {torch.nn.Linear},
                                                      dtype=torch.qint8)


def load_oracle(path, device="cpu", script: bool = True, quantize: bool = False) -> NetworkOracle:
    """A NetworkOracle on the weights at `path` (frozen TorchScript by default, else eager).

    quantize: int8 dynamic quantization of the Linear layers (weights int8, activations
    quantized per batch; CPU only). The shipped oracle runs 2.3x the rows/s on one thread
    (193K -> 440K at 1,024 rows, tokenizer included) for +0.02 q_gap on fresh deals
    (benchmarks/RESULTS.md, "Oracle precision")."""
    network, meta = load_network(path)
    if quantize:
        if torch.device(device).type != "cpu":
            raise ValueError(f"int8 dynamic quantization runs on the cpu, not {device}")
        network = quantize_linear(network)
    network = network.to(device)
    module = script_module(network) if script else OracleModule(network).eval()
    return NetworkOracle(module, device=device, config=meta)


def load_default_oracle(device="cpu", script: bool = True, quantize: bool = False) -> NetworkOracle:
    """The oracle shipped in the package (eqfast/models/default.safetensors)."""
    return load_oracle(DEFAULT_MODEL, device=device, script=script, quantize=quantize)
