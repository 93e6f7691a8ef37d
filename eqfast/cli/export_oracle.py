"""eqfast-export-oracle: write a frozen TorchScript or a checked ONNX file of an oracle's weights.

    eqfast-export-oracle --out oracle.pt                      # the shipped default model
    eqfast-export-oracle --weights runs/oracle/R/best.safetensors --out oracle.pt
    eqfast-export-oracle --format onnx --out oracle.onnx      # needs pip install -e '.[onnx]'
"""
from __future__ import annotations

import argparse
import sys

from .common import HelpFormatter, device_problem, path_arg


def build_parser() -> argparse.ArgumentParser:
    from ..paths import DEFAULT_MODEL

    ap = argparse.ArgumentParser(prog="eqfast-export-oracle", description=__doc__.split("\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--weights", default=str(DEFAULT_MODEL),
                    help="oracle weights (.safetensors) to export")
    ap.add_argument("--out", required=True, type=path_arg, help="file to write")
    ap.add_argument("--format", choices=["torchscript", "onnx"], default="torchscript",
                    help="torchscript (torch.jit.load) or onnx (any ONNX runtime; checked with "
                         "onnxruntime against the torch module on every position of 4 played "
                         "games, within 1e-4 points, before it is kept)")
    ap.add_argument("--device", default="cpu", help="device the TorchScript module is traced on: "
                                                    "cpu, cuda or cuda:N (ONNX: cpu). On CUDA, "
                                                    "call the file's forward_codes on rows "
                                                    "tokenized outside it, or its forward under "
                                                    "torch.jit.fuser('none') (docs/ORACLE.md, "
                                                    "Export)")
    return ap


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    from ..oracle.export import OnnxUnavailable, export_onnx, export_torchscript
    from ..oracle.weights import OracleWeightsError

    problem = device_problem(a.device)
    if problem is None and a.format == "onnx" and a.device != "cpu":
        problem = f"--device {a.device}: the ONNX export runs on the cpu"
    if problem is None:
        try:
            if a.format == "onnx":
                meta = export_onnx(a.weights, a.out)
            else:
                meta = export_torchscript(a.weights, a.out, a.device)
        except OracleWeightsError as e:
            problem = f"--weights: {e}"
        except OnnxUnavailable as e:
            problem = str(e)
    if problem is not None:
        print(f"eqfast-export-oracle: {problem}", file=sys.stderr)
        return 2
    check = (f"; onnxruntime vs torch max |dQ| {meta['onnx_max_abs_diff']:.2g} points on "
             f"{meta['onnx_check_positions']} positions" if a.format == "onnx" else "")
    print(f"wrote {a.out} (config {meta['config']}, data {meta['data_hash']}{check})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
