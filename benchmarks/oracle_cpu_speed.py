"""Rows/s of one oracle on this CPU, one thread, four ways: eager PyTorch, TorchScript (what
the engine runs), int8 dynamic quantization of the Linear layers, and ONNX Runtime; with
the fidelity of each on fresh solver-labelled deals, so a faster runtime that changes the
answers shows it.

    python benchmarks/oracle_cpu_speed.py                          # the shipped oracle
    python benchmarks/oracle_cpu_speed.py --weights runs/equal_rows/attn-d32-l2-roles2/best.safetensors

Rows go through the whole OracleModule (tokenizer included) at `--batch` rows per call,
after a warm-up, for at least `--seconds` per runtime. ONNX needs the `onnx` extra; a
runtime that is missing or fails is reported as such, not skipped silently.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch


def rows_per_s(fn, inputs, seconds: float) -> float:
    fn(*inputs)
    rows, t0 = 0, time.perf_counter()
    while True:
        fn(*inputs)
        rows += inputs[0].shape[0]
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return rows / dt


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", default=None, help="weights file (default: the shipped oracle)")
    p.add_argument("--batch", type=int, default=1024, help="rows per call (default 1024)")
    p.add_argument("--seconds", type=float, default=2.0, help="timing per runtime (default 2)")
    p.add_argument("--fresh-deals", type=int, default=50,
                   help="fresh deals for the fidelity column (default 50: 1,400 positions)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    from eqfast.cli.eval_oracle import fresh_rows
    from eqfast.oracle.dataset import as_batch
    from eqfast.oracle.evaluate import fidelity
    from eqfast.oracle.export import INPUT_NAMES, export_onnx
    from eqfast.oracle.network import OracleModule, script_module
    from eqfast.oracle.weights import DEFAULT_MODEL, load_network

    weights = a.weights or str(DEFAULT_MODEL)
    network, meta = load_network(weights)
    network.eval()
    fresh = fresh_rows(1_000_000_000, a.fresh_deals)
    batch = as_batch(fresh)
    every = tuple(getattr(batch, n) for n in INPUT_NAMES)
    reps = -(-a.batch // len(batch))
    timing = tuple(t.repeat((reps,) + (1,) * (t.dim() - 1))[:a.batch] for t in every)

    runtimes = {"eager": OracleModule(network).eval(), "torchscript": script_module(network)}
    quantized = torch.ao.quantization.quantize_dynamic(
        OracleModule(network).eval(), {torch.nn.Linear}, dtype=torch.qint8)
    runtimes["int8 dynamic"] = quantized
    try:
        import onnxruntime

        path = Path(tempfile.mkdtemp()) / "oracle.onnx"
        export_onnx(weights, path, check_deals=1)
        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

        def ort(*inputs):
            return torch.from_numpy(session.run(None, {n: t.numpy() for n, t in
                                                       zip(INPUT_NAMES, inputs)})[0])
        runtimes["onnxruntime"] = ort
    except Exception as e:                      # reported in the table
        runtimes["onnxruntime"] = e
    out = {"weights": weights, "config": meta["config"], "batch": a.batch,
           "positions": len(batch), "runtimes": {}}
    for name, fn in runtimes.items():
        if isinstance(fn, Exception):
            out["runtimes"][name] = {"error": f"{type(fn).__name__}: {fn}"}
            continue
        with torch.no_grad():
            q = fn(*every)
            m = fidelity(q, fresh["q"], fresh["legal"])
            out["runtimes"][name] = {"rows_per_s": rows_per_s(fn, timing, a.seconds),
                                     "q_gap": m["q_gap"], "q_mae": m["q_mae"]}
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{weights} ({meta['config']}), batch {a.batch}, one thread; fidelity on "
          f"{len(batch)} positions of fresh deals")
    print(f"{'runtime':<16}{'rows/s':>12}{'q_gap':>9}{'q_mae':>8}")
    for name, r in out["runtimes"].items():
        if "error" in r:
            print(f"{name:<16}  failed: {r['error'][:90]}")
        else:
            print(f"{name:<16}{r['rows_per_s']:>12,.0f}{r['q_gap']:>9.4f}{r['q_mae']:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
