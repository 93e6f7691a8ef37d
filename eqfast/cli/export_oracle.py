"""eqfast-export-oracle: write a frozen TorchScript file of an oracle's weights.

    eqfast-export-oracle --out oracle.pt                      # the shipped default model
    eqfast-export-oracle --weights runs/oracle/R/best.safetensors --out oracle.pt
"""
from __future__ import annotations

import argparse
import sys

from .common import HelpFormatter, device_problem


def build_parser() -> argparse.ArgumentParser:
    from ..oracle.weights import DEFAULT_MODEL

    ap = argparse.ArgumentParser(prog="eqfast-export-oracle", description=__doc__.split("\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--weights", default=str(DEFAULT_MODEL),
                    help="oracle weights (.safetensors) to export")
    ap.add_argument("--out", required=True, help="TorchScript file to write")
    ap.add_argument("--device", default="cpu", help="device the module is traced on: cpu, cuda "
                                                    "or cuda:N")
    return ap


def main(argv=None) -> int:
    from ..oracle.export import export_torchscript
    from ..oracle.weights import OracleWeightsError

    a = build_parser().parse_args(argv)
    problem = device_problem(a.device)
    if problem is None:
        try:
            meta = export_torchscript(a.weights, a.out, a.device)
        except OracleWeightsError as e:
            problem = f"--weights: {e}"
    if problem is not None:
        print(f"eqfast-export-oracle: {problem}", file=sys.stderr)
        return 2
    print(f"wrote {a.out} (config {meta['config']}, data {meta['data_hash']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
