"""eqfast-export-oracle: write a frozen TorchScript file of an oracle's weights.

    eqfast-export-oracle --out oracle.pt                      # the shipped default model
    eqfast-export-oracle --weights runs/oracle/R/best.safetensors --out oracle.pt
"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    from ..oracle.export import export_torchscript
    from ..oracle.weights import DEFAULT_MODEL

    ap = argparse.ArgumentParser(prog="eqfast-export-oracle", description=__doc__.split("\n")[0])
    ap.add_argument("--weights", default=str(DEFAULT_MODEL), help="weights .safetensors")
    ap.add_argument("--out", required=True, help="TorchScript file to write")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    meta = export_torchscript(a.weights, a.out, a.device)
    print(f"wrote {a.out} (config {meta['config']}, data {meta['data_hash']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
