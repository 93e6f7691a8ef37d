"""Export a trained oracle (weights.py format) to a frozen TorchScript file.

The exported module is `OracleModule` (tokenizer + network): it takes the OracleBatch
fields (hands [N,4,7], remaining [N,4], decl [N], trick [N,3], actor [N], all int64) and
returns Q [N,7] float32 in points, actor frame. Load it with `torch.jit.load(path)`; no
eqfast import is needed to run it. The legal mask is not part of it (use
`eqfast.oracle.legal_slots`).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..utils.atomic import atomic_path
from .network import OracleModule, script_module
from .weights import load_network


def export_torchscript(weights, out, device="cpu") -> dict:
    """Write the frozen TorchScript of the weights at `weights` to `out`; returns its meta."""
    network, meta = load_network(weights)
    module = script_module(network.to(device))
    extra = {"eqfast_oracle_meta.json": json.dumps(
        {k: meta[k] for k in ("config", "token_layout_version", "data_hash", "metrics")})}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        torch.jit.save(module, str(tmp), _extra_files=extra)
    return meta


def export_program(network: torch.nn.Module, n: int = 8):
    """`torch.export.export` of OracleModule(network) with a dynamic batch dimension."""
    from torch.export import Dim, export

    example = example_inputs(n)
    batch = Dim("batch", min=1, max=1 << 20)
    shapes = {"hands": {0: batch}, "remaining": {0: batch}, "decl": {0: batch},
              "trick": {0: batch}, "actor": {0: batch}}
    return export(OracleModule(network).eval(), example, dynamic_shapes=shapes)


def example_inputs(n: int = 8) -> tuple[torch.Tensor, ...]:
    """A valid batch of n start-of-hand positions (deals 0..n-1, decl n%10, actor 0)."""
    import numpy as np

    from ..rules.deal import deal_from_seed

    hands = torch.as_tensor(np.stack([deal_from_seed(i) for i in range(n)]), dtype=torch.int64)
    return (hands, torch.full((n, 4), 127, dtype=torch.int64),
            torch.arange(n, dtype=torch.int64) % 10, torch.full((n, 3), -1, dtype=torch.int64),
            torch.zeros(n, dtype=torch.int64))
