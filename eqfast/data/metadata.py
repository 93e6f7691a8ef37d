"""The metadata of a run's shards: schema version and semantics, generation knobs, the
oracle's identity, the fields, and a summary of the records (Q range, ESS, exploration
rates, ...); `jsonable` makes any of it strict JSON.
"""
from __future__ import annotations

import math
from dataclasses import asdict

import torch

from ..engine.policy import MODE_NAMES
from .schema import (FIELDS, OPTIONAL_FIELDS, SCHEMA_SEMANTICS, SCHEMA_VERSION, SPLIT_FRACTIONS,
                     DecisionRecords)

#: below this effective sample size a sampled decision's E[Q] rests on a few worlds; an
#: enumerated one has exact weights whatever its ESS (a late position has few worlds)
LOW_ESS = 10


def _quantiles(x: torch.Tensor, qs=(0.05, 0.5, 0.95)) -> dict:
    if x.numel() == 0:
        return {f"p{int(q * 100)}": None for q in qs} | {"min": None, "max": None}
    x = x.double()
    out = {f"p{int(q * 100)}": float(torch.quantile(x, q)) for q in qs}
    return out | {"min": float(x.min()), "max": float(x.max())}


def summary_stats(records: DecisionRecords) -> dict:
    """JSON-ready summary of a batch of records (Q range, ESS, exploration rates, ...)."""
    R = len(records)
    legal = records["legal_mask"]
    q_legal = records["e_q_mean"][legal]
    mode = records["exploration_mode"].long()
    n_legal = legal.sum(1)
    stats = {
        "n_records": R,
        "n_games": int(torch.unique(records["game_idx"]).numel()),
        "q_legal": _quantiles(q_legal),
        "ess": _quantiles(records["ess"]),
        "max_w": _quantiles(records["max_w"]),
        "u_mean": _quantiles(records["u_mean"]),
        "q_gap": _quantiles(records["q_gap"]),
        "n_worlds": _quantiles(records["n_worlds"].float()),
        "exploration_rates": {name: (float((mode == i).float().mean()) if R else None)
                              for i, name in enumerate(MODE_NAMES)},
        "enumerated_fraction": float(records["enumerated"].float().mean()) if R else None,
        # ESS of sampled decisions alone: an enumerated late position has exact weights and
        # as few worlds as exist, so its small ESS is not a degenerate posterior
        "ess_sampled": _quantiles(records["ess"][~records["enumerated"]]),
        "low_ess_sampled_fraction": (float((records["ess"][~records["enumerated"]] < LOW_ESS)
                                           .float().mean())
                                     if bool((~records["enumerated"]).any()) else None),
        "forced_fraction": float((n_legal == 1).float().mean()) if R else None,
    }
    if "policy_entropy" in records:
        stats["policy_entropy"] = _quantiles(records["policy_entropy"])
    if "ess_before_remix" in records:
        lam = records["remix_lambda"]
        stats["posterior_health"] = {
            "ess_before_remix": _quantiles(records["ess_before_remix"]),
            "window_nll": _quantiles(records["window_nll"]),
            "remix_fraction": float((lam > 0).float().mean()) if R else None,
            "remix_lambda": _quantiles(lam[lam > 0]),
            "fallback_fraction": (float(records["fallback_uniform"].float().mean())
                                  if R else None),
            "invalid_world_fraction": (float(records["n_invalid_worlds"].sum()
                                             / records["n_worlds"].sum()) if R else None),
            "n_illegal": int(records["n_illegal"].sum()),
        }
    return stats


def build_metadata(*, posterior=None, exploration=None, oracle: dict | None = None,
                   n_samples: int | None = None, records: DecisionRecords | None = None,
                   extra: dict | None = None) -> dict:
    """Schema 2.1 metadata: version, semantics, generation knobs, oracle identity, summary.

    posterior: a `PosteriorConfig` or None (uniform weights); exploration: an
    `ExplorationConfig`; oracle: identity of the oracle (e.g. {"name", "path", "sha256"});
    extra: anything else the generator wants to record (seed range, device, backend...).
    """
    import eqfast
    from ..rules.deal import DEAL_VERSION

    meta = {
        "version": SCHEMA_VERSION,
        "schema": dict(SCHEMA_SEMANTICS),
        "posterior": ({"enabled": True, **asdict(posterior)} if posterior is not None
                      else {"enabled": False}),
        "exploration": asdict(exploration) if exploration is not None else None,
        "exploration_modes": list(MODE_NAMES),
        "oracle": dict(oracle or {}),
        "n_samples": n_samples,
        "split_fractions": dict(SPLIT_FRACTIONS),
        "fields": {name: {"dtype": str(f.dtype).replace("torch.", ""), "shape": list(f.shape)}
                   for name, f in {**FIELDS, **OPTIONAL_FIELDS}.items()},
        "generator": {"eqfast_version": eqfast.__version__, "deal_version": DEAL_VERSION},
    }
    if records is not None:
        meta["summary"] = summary_stats(records)
    if extra:
        meta.update(extra)
    return jsonable(meta)


def jsonable(x):
    """x with NaN/inf floats replaced by None and tuples by lists (strict JSON)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
