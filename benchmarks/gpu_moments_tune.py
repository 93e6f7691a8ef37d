"""Launch configurations of the Triton reduction (`kernels/moments.py`) on one card.

    python benchmarks/gpu_moments_tune.py --out runs/moments.jsonl
    python benchmarks/gpu_moments_tune.py --device cpu --games 64      # a dry run (interpreter)

Times `weighted_moments` for every (BLOCK_G decisions per program, num_warps) pair at the
engine's sizes (G = 256 and 1024, N = 100) and far beyond L2 (G = 65,536: 183 MB of Q),
replayed from CUDA graphs (`gpu_kernels.time_ms`, median), against the PyTorch reference
and against the card's device-to-device copy bandwidth. Every configuration's result is
compared with the shipped configuration's (`max_rel_diff`, `same` when <= 1e-5), since the
reduction tree inside a program, and so the float rounding, depends on the warps; each
decision's result never depends on G. One JSON line per configuration goes to `--out`; the last
lines printed name the fastest configuration at each size.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (interpreter)")
    p.add_argument("--games", type=int, nargs="+", default=[256, 1024, 65536],
                   help="decisions per call (default 256 1024 65536)")
    p.add_argument("--worlds", type=int, default=100, help="worlds per decision (default 100)")
    p.add_argument("--out", type=Path, help="append one JSON line per configuration here")
    a = p.parse_args(argv)
    if not a.device.startswith("cuda"):
        os.environ.setdefault("TRITON_INTERPRET", "1")
    device = torch.device(a.device)
    import eqfast.kernels.moments as km
    from eqfast.engine.moments import weighted_moments as reference
    from gpu_kernels import big_reduction_inputs, copy_bandwidth, nbytes, time_ms

    bandwidth = copy_bandwidth(device)
    print(f"copy bandwidth {bandwidth:.0f} GB/s" if bandwidth else "cpu: interpreter figures")
    configs = [(bg, w) for bg in (1, 2, 4, 8) for w in (1, 2, 4, 8)]
    if device.type != "cuda":
        configs = configs[::7]
    for games in a.games:
        args = big_reduction_inputs(games, a.worlds, device)
        base = km._launch(*args)
        moved = nbytes(args) + nbytes(base)
        ref_ms = time_ms(lambda: reference(*args), device, 200)
        best = None
        print(f"G = {games}, N = {a.worlds}: {moved / 1e6:.1f} MB moved; reference "
              f"{ref_ms:.4f} ms")
        for bg, warps in configs:
            got = km._launch(*args, block_g=bg, num_warps=warps)
            rel = max(float(((x - y).abs() / (y.abs() + 1e-3)).nan_to_num(0.0).max())
                      for x, y in zip(got, base))
            same = rel <= 1e-5
            ms = time_ms(lambda: km._launch(*args, block_g=bg, num_warps=warps), device, 200)
            gbs = moved / (ms * 1e-3) / 1e9
            rec = {"kind": "moments_tune", "games": games, "worlds": a.worlds, "block_g": bg,
                   "num_warps": warps, "ms": ms, "gb_per_s": gbs,
                   "bandwidth_share": gbs / bandwidth if bandwidth else None,
                   "speedup_vs_reference": ref_ms / ms, "same_as_default": same,
                   "max_rel_diff": rel}
            if a.out is not None:
                with open(a.out, "a") as f:
                    f.write(json.dumps(rec) + "\n")
            share = f"{100 * rec['bandwidth_share']:5.1f}%" if bandwidth else "   - "
            print(f"  BLOCK_G {bg:>2} warps {warps}: {ms:8.4f} ms {gbs:8.1f} GB/s {share} of copy "
                  f"{ref_ms / ms:6.2f}x ref{'' if same else '  DIFFERS'}", flush=True)
            if same and (best is None or ms < best[0]):
                best = (ms, bg, warps, gbs)
        print(f"best at G = {games}: BLOCK_G {best[1]} warps {best[2]}: {best[0]:.4f} ms, "
              f"{best[3]:.0f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
