"""Where a device run of the engine first parts from the CPU reference: every stage call
shadowed on the CPU with the engine's own inputs.

    python benchmarks/gpu_engine_diagnose.py --out diag.jsonl              # on a CUDA machine
    python benchmarks/gpu_engine_diagnose.py --device cpu --out diag.jsonl # the same, on the CPU

A records comparison (tests/test_fast_engine.py) says that two engines disagree and where
the records first part; it cannot say which stage made the difference, since each decision
feeds the next. Here each engine runs with a shadow backend and a shadow oracle: every
backend call (hidden_info, completion_counts, sample_worlds, tokenize_*, posterior, moments,
play) and every network forward is repeated on CPU copies of its exact inputs by the
pure-PyTorch reference (the network: a CPU copy of the same weights), and the outputs are
compared (integers and booleans bit for bit; floats within 1e-4 relative + 1e-3 absolute).
The engine goes on with its own outputs, so the first mismatching call is the stage that
parts first, on the inputs it was really given.

Cases: the configurations of the two CUDA tests that failed on an H100 (the network oracle
with the posterior), each run by the reference Engine and by the FastEngine (backend
reference and triton, graphs off), then by the reference Engine again with TorchScript's
fusers off, and each run's records against the reference Engine on the CPU. One JSON line
per finding, written as it comes.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def to_cpu(x):
    """A copy of x (tensors, dataclasses and tuples of them) on the CPU."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu").clone()
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: to_cpu(getattr(x, f.name))
                                         for f in dataclasses.fields(x) if f.init})
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(to_cpu(v) for v in x))
    if isinstance(x, (tuple, list)):
        return type(x)(to_cpu(v) for v in x)
    if isinstance(x, dict):
        return {k: to_cpu(v) for k, v in x.items()}
    return x


def leaves(x, path="out"):
    """(path, tensor) of every tensor inside x."""
    if isinstance(x, torch.Tensor):
        yield path, x
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            yield from leaves(getattr(x, f.name), f"{path}.{f.name}")
    elif isinstance(x, tuple) and hasattr(x, "_fields"):
        for name, v in zip(x._fields, x):
            yield from leaves(v, f"{path}.{name}")
    elif isinstance(x, (tuple, list)):
        for i, v in enumerate(x):
            yield from leaves(v, f"{path}[{i}]")
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from leaves(v, f"{path}.{k}")


def differences(want, got, rtol=1e-4, atol=1e-3) -> list[dict]:
    """The leaves of got that differ from want: count, first index and both values there."""
    found = []
    got_leaves = dict(leaves(to_cpu(got)))
    for path, w in leaves(want):
        g = got_leaves.get(path)
        if g is None or g.shape != w.shape or g.dtype != w.dtype:
            found.append({"field": path, "problem": "shape/dtype",
                          "want": [list(w.shape), str(w.dtype)],
                          "got": None if g is None else [list(g.shape), str(g.dtype)]})
            continue
        if w.is_floating_point():
            bad = ~torch.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        else:
            bad = g != w
        if bool(bad.any()):
            idx = [int(i) for i in torch.nonzero(bad)[0]]
            item = {"field": path, "count": int(bad.sum()), "of": w.numel(), "first": idx,
                    "want": w[tuple(idx)].item(), "got": g[tuple(idx)].item()}
            if w.is_floating_point():
                finite = torch.isfinite(w) & torch.isfinite(g)
                item["max_abs"] = float((g - w).abs()[finite].max()) if bool(finite.any()) else None
            found.append(item)
    return found


class Log:
    def __init__(self, path: Path):
        self.path = path

    def __call__(self, **item):
        line = json.dumps(item, default=str)
        print(line[:2000], flush=True)
        with open(self.path, "a") as f:
            f.write(line + "\n")


class Shadow:
    """Counts calls per stage and logs the first few that differ from the CPU reference."""

    def __init__(self, log: Log, case: str, keep: int = 3):
        self.log, self.case, self.keep = log, case, keep
        self.calls: dict[str, int] = {}
        self.bad: dict[str, int] = {}

    def wrap(self, name: str, fn, ref):
        def shadowed(*args, **kwargs):
            out = fn(*args, **kwargs)
            i = self.calls[name] = self.calls.get(name, 0) + 1
            want = ref(*to_cpu(args), **to_cpu(kwargs))
            diff = differences(want, out)
            if diff:
                n = self.bad[name] = self.bad.get(name, 0) + 1
                if n <= self.keep:
                    self.log(case=self.case, stage=name, call=i, differences=diff[:6])
            return out
        return shadowed

    def summary(self):
        self.log(case=self.case, calls=self.calls, calls_differing=self.bad)


def shadow_backend(shadow: Shadow, backend, device):
    from eqfast.engine.pipeline import make_backend
    ref = make_backend("reference", "cpu")
    names = [f.name for f in dataclasses.fields(backend) if f.name != "name"]
    return dataclasses.replace(backend, **{n: shadow.wrap(n, getattr(backend, n), getattr(ref, n))
                                           for n in names})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True, help="JSON lines, appended as findings come")
    ap.add_argument("--cases", default="test1,graphs", help="comma-separated: test1, graphs")
    args = ap.parse_args()
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from test_fast_engine import _network_oracle, first_difference
    from eqfast.engine.fast import FastEngine
    from eqfast.engine.pipeline import Engine, EngineConfig, make_backend
    from eqfast.engine.policy import ExplorationConfig
    from eqfast.engine.posterior import PosteriorConfig

    log = Log(Path(args.out))
    dev = args.device
    log(what="start", device=torch.cuda.get_device_name() if dev.startswith("cuda") else "cpu",
        torch=torch.__version__, commit=os.environ.get("EQFAST_COMMIT", "?"))
    cases = {
        "test1": (EngineConfig(n_samples=12, posterior=PosteriorConfig(window_k=5), seed=4), [6, 7]),
        "graphs": (EngineConfig(n_samples=32, posterior=PosteriorConfig(window_k=4), seed=5,
                                store_worlds=True,
                                exploration=ExplorationConfig(temperature=2.0, epsilon=0.2)),
                   list(range(100, 104))),
    }
    cpu_oracle = _network_oracle("cpu")
    for case in args.cases.split(","):
        cfg, seeds = cases[case]
        t0 = time.time()
        want = Engine(cpu_oracle, cfg, device="cpu").play(seeds)
        log(case=case, run="reference Engine, cpu", seconds=round(time.time() - t0, 1))
        # the last run repeats the reference Engine with TorchScript's fusers off
        runs = [("Engine", "reference", None), ("FastEngine", "reference", None),
                ("FastEngine", "triton", None), ("Engine", "reference", "none")]
        for kind, backend, fuser in runs:
            label = f"{case}: {kind} backend={backend} on {dev}" + (f" fuser={fuser}" if fuser else "")
            fusing = torch.jit.fuser(fuser) if fuser else contextlib.nullcontext()
            try:
                t0 = time.time()
                shadow = Shadow(log, label)
                oracle = _network_oracle(dev)
                # the network forwards: the device module against its CPU copy
                oracle.query_codes = shadow.wrap("oracle.query_codes", oracle.query_codes,
                                                 cpu_oracle.query_codes)
                oracle.query = shadow.wrap("oracle.query", oracle.query, cpu_oracle.query)
                b = shadow_backend(shadow, make_backend(backend, dev), dev)
                if kind == "Engine":
                    engine = Engine(oracle, cfg, backend=b, device=dev)
                else:
                    engine = FastEngine(oracle, cfg, backend=b, device=dev, graphs=False)
                    if engine.step.codes_fn is not None:
                        cpu_module = cpu_oracle.module
                        from eqfast.oracle.network import forward_rows
                        engine.step.codes_fn = shadow.wrap(
                            "network.forward_codes", engine.step.codes_fn,
                            lambda c, s: forward_rows(cpu_module.forward_codes, c, s))
                with fusing:
                    got = engine.play(seeds)
                shadow.summary()
                log(case=label, seconds=round(time.time() - t0, 1),
                    records=first_difference(want, got))
            except Exception as e:  # noqa: BLE001 - a diagnosis reports and goes on
                log(case=label, error=f"{type(e).__name__}: {e}",
                    trace=traceback.format_exc()[-1500:])
    log(what="end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
