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
raises `OracleWeightsError` naming the file and the problem (eqfast/utils/weights_file.py,
shared with the Stage 2 model's files).
"""
from __future__ import annotations

import torch

from ..paths import ACCURATE_MODEL, DEFAULT_MODEL  # noqa: F401  (re-exported)
from ..utils import weights_file
from .network import NetworkOracle, OracleModule, build_network, script_module
from .tokenizer import TOKEN_LAYOUT_VERSION

FORMAT = "eqfast-oracle"
FORMAT_VERSION = 1


class OracleWeightsError(ValueError):
    """A weights file is missing, unreadable or does not match what the code expects."""


def save_weights(path, network: torch.nn.Module, config: dict, data_hash: str = "",
                 metrics: dict | None = None, train: dict | None = None) -> None:
    """Write `network`'s parameters and metadata to `path` atomically (temp + os.replace)."""
    weights_file.save(path, network, KIND, config, data_hash, metrics, train)


def read_weights(path) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, metadata with config/metrics/train decoded) after checking the header."""
    return weights_file.read(path, KIND)


def _other_safetensors(meta: dict) -> str:
    """What a safetensors file without the oracle's format tag holds."""
    if meta.get("format") == "eqfast-decisions":
        return ("a dataset shard written by eqfast-generate (decision records), not oracle "
                "weights")
    if "dataset_version" in meta:
        return ("an oracle training-data shard (eqfast-label-oracle), not oracle "
                "weights")
    return f"metadata 'format' is {meta.get('format')!r}, expected {FORMAT!r}: not oracle weights"


KIND = weights_file.WeightsKind(
    name="oracle weights", article="an", format=FORMAT, format_version=FORMAT_VERSION,
    version_key="token_layout_version", version=str(TOKEN_LAYOUT_VERSION),
    writer="eqfast-train-oracle", error=OracleWeightsError, other=_other_safetensors)


def load_network(path) -> tuple[torch.nn.Module, dict]:
    """(network in eval mode, metadata) from a weights file; strict about names and shapes."""
    return weights_file.load(path, KIND, build_network)


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
