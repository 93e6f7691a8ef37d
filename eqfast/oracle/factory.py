"""One way to build an oracle from a name: every command (generate, validate, bid) and the
profiling and benchmark scripts call `oracle_from_spec`, so a run's oracle can always be
rebuilt from what its metadata records.

    spec            oracle
    exact           the C solver (ExactOracle)
    default         the shipped CPU network (eqfast/models/default.safetensors)
    accurate        the shipped GPU network (eqfast/models/accurate.safetensors): larger,
                    closer to the exact solver, slower per row (docs/ORACLE.md)
    PATH            a weights file (.safetensors, weights.py format)
    random:ARCH     a random-weight network of DEFAULT_CONFIGS[ARCH] (speed measurements:
                    the cost per row of a trained one, Q kept inside [-42, 42])

Options: exact_tricks > 0 wraps a network in HybridOracle (positions with at most that many
tricks left go to the solver); quantize applies int8 dynamic quantization (CPU); eager
skips TorchScript. The identity dict names the oracle (name, path, sha256 of the weights,
exact_tricks, label) for the records' metadata.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from .weights import (ACCURATE_MODEL, DEFAULT_MODEL, OracleWeightsError, load_oracle,
                      quantize_linear)

SHIPPED = {"default": (DEFAULT_MODEL, "shipped default"),
           "accurate": (ACCURATE_MODEL, "shipped accurate")}

__all__ = ["oracle_from_spec", "default_spec", "weights_path", "OracleWeightsError",
           "unknown_spec"]


def weights_path(spec) -> Path:
    """The weights file a network spec names: 'default' and 'accurate' are the shipped files
    (SHIPPED), anything else is a path. The commands that take a weights file by name
    (eqfast-eval-oracle, eqfast-oracle-ladder) and oracle_from_spec resolve it here."""
    return SHIPPED[spec][0] if isinstance(spec, str) and spec in SHIPPED else Path(spec)


def unknown_spec(spec: str, behaviour: bool = False) -> str | None:
    """The message for a spec that names no oracle: neither a name of the module doc nor
    an existing path (None when it names one). behaviour: a --behaviour-oracle spec, which
    may also be 'stage2' or 'stage2:PATH'."""
    if spec in SHIPPED or spec == "exact" or spec.startswith("random:") or Path(spec).exists():
        return None
    if behaviour and is_stage2_spec(spec):
        return None
    names = ", ".join(f"'{n}'" for n in (*SHIPPED, "exact", *(("stage2",) if behaviour else ())))
    return (f"{spec!r} is not an oracle name ({names}{', stage2:PATH' if behaviour else ''}) "
            f"and the weights file {spec} does not exist (a .safetensors path)")


def default_spec(device) -> str:
    """The oracle a command uses when none is named: 'accurate' on CUDA (it answers millions
    of rows a second there, so its ~7x cost per row over 'default' is cheap, and it is
    closer to the solver), 'default' on the CPU, where the oracle is most of the engine's
    time (docs/ORACLE.md)."""
    import torch

    return "accurate" if torch.device(device).type == "cuda" else "default"


def is_stage2_spec(spec: str | None) -> bool:
    """'stage2' or 'stage2:PATH': a Stage 2 model as the posterior's behaviour model
    (eqfast.stage2.behaviour.behaviour_from_spec builds it), never an oracle."""
    return spec is not None and (spec == "stage2" or spec.startswith("stage2:"))


def oracle_from_spec(spec: str, device="cpu", *, exact_tricks: int = 0, quantize: bool = False,
                     eager: bool = False):
    """(oracle, identity dict) for `spec` (module doc). Raises OracleWeightsError (a
    ValueError) naming the file for a missing one or one that holds no weights, ValueError
    for an unknown architecture or a bad option."""
    from .exact import ExactOracle, HybridOracle

    if not 0 <= exact_tricks <= 7:
        raise ValueError(f"exact_tricks must be 0..7, got {exact_tricks}")
    if is_stage2_spec(spec) and not Path(spec).is_file():
        raise ValueError(f"{spec!r} is a behaviour model (it gives values of past plays from "
                         "their player's information set), not an oracle: use it as "
                         "--behaviour-oracle with --posterior")
    if spec == "exact":
        if quantize:
            raise ValueError("int8 quantizes a network oracle; the exact oracle has none")
        return ExactOracle(), {"name": "exact", "label": "exact"}
    problem = unknown_spec(spec)
    if problem is not None:
        raise OracleWeightsError(problem)
    if spec.startswith("random:"):
        oracle, identity = _random_network(spec.split(":", 1)[1], device, quantize, eager)
    else:
        path, label = weights_path(spec), SHIPPED.get(spec, (None, spec))[1]
        oracle = load_oracle(path, device=device, script=not eager, quantize=quantize)
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        identity = {"name": spec, "path": str(path), "sha256": sha, "label": label}
    if quantize:
        identity["label"] += " (int8)"
    if exact_tricks:
        oracle = HybridOracle(oracle, exact_tricks)
        identity.update(exact_tricks=exact_tricks, label=f"{identity['label']}+exact{exact_tricks}")
        if "sha256" in identity:
            identity["sha256"] = f"{identity['sha256']}+exact{exact_tricks}"
    return oracle, identity


def _random_network(arch: str, device, quantize: bool, eager: bool):
    from . import network as net

    if arch not in net.DEFAULT_CONFIGS:
        raise ValueError(f"random:{arch}: unknown architecture (choose from "
                         f"{', '.join(net.DEFAULT_CONFIGS)})")
    network = net.speed_test_network(net.DEFAULT_CONFIGS[arch]).to(device)
    params = net.count_parameters(network)
    if quantize:
        network = quantize_linear(network)
    module = net.OracleModule(network).eval() if eager else net.script_module(network)
    return (net.NetworkOracle(module, device=device),
            {"name": f"random:{arch}", "label": f"random-weight {arch} ({params:,} params)"})
