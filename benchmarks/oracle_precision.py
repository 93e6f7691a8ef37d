"""What the oracle precision switch costs in fidelity: the same network under fp32, bf16
autocast and (CPU) int8 dynamic quantization (`EngineConfig.oracle_precision`,
`eqfast-generate --oracle-precision`), on fresh solver-labelled deals.

    python benchmarks/oracle_precision.py --seed-start 1000000000 --deals 100

bf16 autocast runs on the CPU too (TF32 is a CUDA-only matmul mode, so on the CPU its row
equals fp32 and is not printed). Reports q_gap / q_mae against the exact labels for each
precision and the largest and mean |Q_bf16 - Q_fp32| over legal moves; benchmarks/gpu_session.sh
reports the matching speeds (benchmarks/RESULTS.md).
"""
from __future__ import annotations

import argparse
import json
import sys

import torch


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed-start", type=int, default=1_000_000_000,
                   help="first fresh deal (default 1000000000, never in training data)")
    p.add_argument("--deals", type=int, default=100, help="deals to label (default 100)")
    p.add_argument("--oracle", default=None, help="weights file (default: the shipped oracle)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = p.parse_args(argv)

    from eqfast.cli.eval_oracle import fresh_rows
    from eqfast.engine.pipeline import oracle_precision
    from eqfast.oracle.evaluate import fidelity, predict
    from eqfast.oracle.dataset import as_batch
    from eqfast.oracle.factory import oracle_from_spec

    device = torch.device(a.device)
    spec = a.oracle or "default"
    oracle, _ = oracle_from_spec(spec, device)
    rows = fresh_rows(a.seed_start, a.deals)
    batch = as_batch(rows)
    legal = rows["legal"]
    precisions = ["fp32", "bf16"] + (["tf32"] if device.type == "cuda" else ["int8"])
    quantized = oracle_from_spec(spec, device, quantize=True)[0] if device.type == "cpu" else None
    q = {}
    report = {"deals": f"{a.seed_start}..{a.seed_start + a.deals - 1}",
              "positions": len(batch), "device": str(device)}
    for prec in precisions:
        with oracle_precision(prec, device):
            q[prec] = predict(quantized if prec == "int8" else oracle, batch)
        m = fidelity(q[prec], rows["q"], legal)
        report[prec] = {k: m[k] for k in ("q_gap", "q_gap_multi", "q_mae", "accuracy")}
    for prec in precisions[1:]:
        diff = (q[prec] - q["fp32"]).abs()[legal]
        report[prec]["max_abs_dq_vs_fp32"] = float(diff.max())
        report[prec]["mean_abs_dq_vs_fp32"] = float(diff.mean())
        report[prec]["argmax_changed_vs_fp32"] = float(
            (torch.where(legal, q[prec], -1e9).argmax(1) !=
             torch.where(legal, q["fp32"], -1e9).argmax(1)).float().mean())
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['positions']} positions of fresh deals {report['deals']} on {device}")
        for prec in precisions:
            r = report[prec]
            extra = (f"  |dQ| vs fp32 max {r['max_abs_dq_vs_fp32']:.3f} mean "
                     f"{r['mean_abs_dq_vs_fp32']:.4f}, argmax changed "
                     f"{100 * r['argmax_changed_vs_fp32']:.2f}%") if prec != "fp32" else ""
            print(f"{prec:<5} q_gap {r['q_gap']:.4f}  q_gap(>=2 legal) {r['q_gap_multi']:.4f}  "
                  f"q_mae {r['q_mae']:.4f}  accuracy {r['accuracy']:.4f}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
