"""Is a control-variate label's standard error (cv_se) honest? Re-solve every corrected record
of a dataset on a fresh exact reference and compare the error with cv_se, per trick:
z = (e_q_mean - E_ref) / sqrt(cv_se^2 + se_ref^2) over the legal moves of the corrected
records should have a root mean square near 1 and few |z| > 3 (0.27% for a normal law).
The same z with the plain sqrt(e_q_var / ess), which describes the main oracle's worlds
alone, shows how much it overstates the error (over the moves whose corrected e_q_var is
above 0: the clamp at 0 leaves some at 0 while their mean is still uncertain).

    python benchmarks/cv_calibration.py runs/frontier_b/exact-by-trick+cv/records
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from eqfast.analysis.validation import run_decisions, trick_of
from eqfast.cli.validate import resolve_behaviour_oracle
from eqfast.data.schema import label_variance
from eqfast.data.shards import load_records, run_metadata
from eqfast.oracle.exact import ExactOracle


def calibration(root: str, reference_worlds: int, threads: int) -> dict:
    records, _ = load_records(root)
    if "cv_se" not in records:
        raise SystemExit(f"{root}: no cv_se field (not made with --control-variate)")
    meta = run_metadata(root)
    # a posterior run's reference weighs its worlds with the run's own behaviour model
    behaviour, warning = resolve_behaviour_oracle(meta, "cpu")
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    ref = run_decisions(records, ExactOracle(threads=threads), meta,
                        seed=int(meta["run_seed"]) + 1, n_samples=reference_worlds,
                        behaviour_oracle=behaviour)
    legal = records["legal_mask"]
    corrected = (records["cv_worlds"] > 0)[:, None] & legal
    se_ref2 = label_variance(ref)
    plain2 = records["e_q_var"].double() / records["ess"].double()[:, None]
    err = records["e_q_mean"].double() - ref["e_q_mean"].double()
    z = err / (records["cv_se"].double() ** 2 + se_ref2).sqrt()
    z_plain = err / (plain2 + se_ref2).clamp(min=1e-12).sqrt()
    spread = records["e_q_var"] > 0
    trick = trick_of(records)
    out = {}
    for t in [*range(1, 8), None]:
        rows = corrected & (torch.ones_like(corrected) if t is None else (trick == t)[:, None])
        if not bool(rows.any()):
            continue
        rms = lambda x, m=rows: round(float(x[m].pow(2).mean().sqrt()), 3)
        out["all" if t is None else t] = {
            "moves": int(rows.sum()), "rms_z": rms(z),
            "rms_z_plain_se": rms(z_plain, rows & spread),
            "rms_error": rms(err), "rms_cv_se": rms(records["cv_se"].double()),
            "share_abs_z_over_3": round(float((z[rows].abs() > 3).double().mean()), 4)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("records", help="an eqfast-generate --control-variate output directory")
    ap.add_argument("--reference-worlds", type=int, default=2000,
                    help="worlds of the fresh exact reference (all consistent ones if fewer)")
    ap.add_argument("--threads", type=int, default=1, help="solver and torch threads")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    print(json.dumps(calibration(a.records, a.reference_worlds, a.threads), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
