"""Launch configurations of the posterior's likelihood kernel (`kernels/posterior.py`).

    python benchmarks/gpu_posterior_tune.py --out runs/posterior.jsonl
    python benchmarks/gpu_posterior_tune.py --device cpu --games 8     # a dry run (interpreter)

At the engine's sizes (G = 256 and 1,024 decisions, N = 100 worlds, K = 8 plays; real game
states, `gpu_kernels.stage_inputs`), times `posterior_log_weights` whole (both kernels and
the wrapper's casts) against the PyTorch reference, then the likelihood kernel alone for
every (worlds x steps per program, num_warps) pair, replayed from CUDA graphs
(`gpu_kernels.time_ms`, median). Each configuration's log-likelihoods are compared with
the shipped configuration's (`same`: equal -inf entries and counts, the rest within 1e-5
relative: the sum over the K steps is a tree whose shape follows the block). One JSON
line per measurement goes to `--out`; the last line per size names the fastest.
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
    p.add_argument("--games", type=int, nargs="+", default=[256, 1024],
                   help="decisions per call (default 256 1024)")
    p.add_argument("--worlds", type=int, default=100, help="worlds per decision (default 100)")
    p.add_argument("--window", type=int, default=8, help="plays scored, K (default 8)")
    p.add_argument("--out", type=Path, help="append one JSON line per measurement here")
    a = p.parse_args(argv)
    if not a.device.startswith("cuda"):
        os.environ.setdefault("TRITON_INTERPRET", "1")
    device = torch.device(a.device)
    import eqfast.kernels.posterior as kp
    from eqfast.engine.posterior import posterior_log_weights as reference
    from gpu_kernels import stage_inputs, time_ms

    def emit(rec):
        if a.out is not None:
            with open(a.out, "a") as f:
                f.write(json.dumps(rec) + "\n")

    configs = [(rows, w) for rows in (64, 128, 256, 512, 1024) for w in (1, 2, 4, 8)]
    if device.type != "cuda":
        configs = configs[::7]
    reps = 200 if device.type == "cuda" else 1
    for games in a.games:
        args = stage_inputs(games, a.worlds, a.window, device)["posterior_log_weights"][0]
        q, legal, slot, step_valid, cfg, world_valid = args
        ref_ms = time_ms(lambda: reference(*args), device, reps)
        whole_ms = time_ms(lambda: kp.posterior_log_weights(*args), device, reps)
        rec = {"kind": "posterior_tune", "what": "whole", "games": games, "worlds": a.worlds,
               "window": a.window, "reference_ms": ref_ms, "triton_ms": whole_ms,
               "speedup_vs_reference": ref_ms / whole_ms,
               "rows": kp.LIKELIHOOD_ROWS, "num_warps": kp.LIKELIHOOD_WARPS}
        emit(rec)
        print(f"G = {games}, N = {a.worlds}, K = {a.window}: reference {ref_ms:.4f} ms, "
              f"posterior_log_weights {whole_ms:.4f} ms ({ref_ms / whole_ms:.2f}x)", flush=True)
        G, N = world_valid.shape
        base_ll = torch.empty(G, N, device=device)
        base_ill = torch.empty(G, N, dtype=torch.int64, device=device)
        kp._likelihood(q, legal, slot, step_valid, world_valid, cfg, base_ll, base_ill)
        finite = torch.isfinite(base_ll)
        best = None
        for rows, warps in configs:
            ll = torch.full_like(base_ll, float("nan"))
            ill = torch.full_like(base_ill, -1)

            def run():
                kp._likelihood(q, legal, slot, step_valid, world_valid, cfg, ll, ill,
                               rows=rows, num_warps=warps)

            run()
            same = (torch.equal(ill, base_ill) and torch.equal(torch.isfinite(ll), finite)
                    and bool(((ll[finite] - base_ll[finite]).abs()
                              <= 1e-5 * (base_ll[finite].abs() + 1)).all()))
            ms = time_ms(run, device, reps)
            emit({"kind": "posterior_tune", "what": "likelihood", "games": games,
                  "worlds": a.worlds, "window": a.window, "rows": rows, "num_warps": warps,
                  "ms": ms, "same_as_default": same})
            print(f"  likelihood rows {rows:>4} warps {warps}: {ms:8.4f} ms"
                  f"{'' if same else '  DIFFERS'}", flush=True)
            if same and (best is None or ms < best[0]):
                best = (ms, rows, warps)
        print(f"best at G = {games}: rows {best[1]} warps {best[2]}: {best[0]:.4f} ms",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
