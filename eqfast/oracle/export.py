"""Export a trained oracle (weights.py format) to a frozen TorchScript or an ONNX file.

The exported module is `OracleModule` (tokenizer + network): it takes the OracleBatch
fields (hands [N,4,7], remaining [N,4], decl [N], trick [N,3], actor [N], all int64) and
returns Q [N,7] float32 in points, actor frame. Load the TorchScript with
`torch.jit.load(path)`, the ONNX file with any ONNX runtime (inputs named as the fields,
output `q`, batch dimension dynamic); neither needs eqfast to run. The legal mask is not
part of them (use `eqfast.oracle.legal_slots`).

The ONNX file is checked before it is kept: onnxruntime runs it on the positions of played
games (solver-labelled deals, every trick) and its Q must match the torch module's within
`ONNX_TOLERANCE` points.
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


INPUT_NAMES = ("hands", "remaining", "decl", "trick", "actor")
#: largest |Q_onnx - Q_torch| (points) an ONNX export may show on the check positions
ONNX_TOLERANCE = 1e-4


class OnnxUnavailable(RuntimeError):
    """The optional ONNX packages are missing."""


def check_positions(deals: int = 4, first_deal: int = 2_000_000_000) -> tuple[torch.Tensor, ...]:
    """OracleBatch inputs of every position of `deals` games played by the solver from
    deals first_deal.. (far from training deals): all 28 positions of each, every trick."""
    from .dataset import as_batch, label_game

    import numpy as np

    rows = [label_game(first_deal + d) for d in range(deals)]
    cols = {c: torch.from_numpy(np.concatenate([r[c] for r in rows]).astype(np.int64))
            for c in ("hands", "remaining", "decl", "leader", "trick", "actor")}
    batch = as_batch(cols)
    return tuple(getattr(batch, name) for name in INPUT_NAMES)


def export_onnx(weights, out, check_deals: int = 4) -> dict:
    """Write the ONNX file of the weights at `weights` to `out` after checking it against the
    torch module with onnxruntime; returns the weights' meta plus `onnx_max_abs_diff`.
    Raises OnnxUnavailable without the `onnx` extra, ValueError when the check fails
    (nothing is written then)."""
    try:
        import onnx
        import onnxruntime
        import onnxscript  # noqa: F401  (torch.onnx's exporter needs it)
    except ImportError as e:
        raise OnnxUnavailable(f"ONNX export needs the optional packages onnx, onnxscript and "
                              f"onnxruntime (pip install -e '.[onnx]'): {e}") from None
    from torch.export import Dim

    network, meta = load_network(weights)
    module = OracleModule(network).eval()
    batch = Dim("batch", min=1, max=1 << 20)
    shapes = {name: {0: batch} for name in INPUT_NAMES}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        program = torch.onnx.export(module, example_inputs(8), dynamo=True,
                                    dynamic_shapes=shapes, input_names=list(INPUT_NAMES),
                                    output_names=["q"], verbose=False)
        model = program.model_proto
        model.metadata_props.add(key="eqfast_oracle_meta.json", value=json.dumps(
            {k: meta[k] for k in ("config", "token_layout_version", "data_hash", "metrics")}))
        onnx.save(model, str(tmp))
        inputs = check_positions(check_deals)
        session = onnxruntime.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
        got = session.run(None, {n: t.numpy() for n, t in zip(INPUT_NAMES, inputs)})[0]
        with torch.no_grad():
            want = module(*inputs).numpy()
        diff = float(abs(got - want).max())
        if not diff <= ONNX_TOLERANCE:
            raise ValueError(f"ONNX export of {weights}: Q differs from the torch module by "
                             f"{diff:.3g} points on {len(want)} positions (tolerance "
                             f"{ONNX_TOLERANCE}); nothing written")
    return {**meta, "onnx_max_abs_diff": diff, "onnx_check_positions": int(len(want))}


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
