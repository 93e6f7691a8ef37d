"""evaluate(): the contract x bid-level matrix of one hand, as the documented schema
(docs/BIDDING.md "Fields").

Flow: completions from the model (common to every contract) -> V_PI per (completion,
contract) from the exact solver, or from the network with exact audits -> per-contract
score summaries and per-cell make rates with Wilson intervals -> optionally the lower
bracket on the first `lower_n` completions -> the contract choice (max of averages) beside
the fused average of max.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..rules.tables import tile_name
from .completions import CompletionModel, completion_model
from .hand import format_hand, parse_hand
from .levels import CONTRACTS, bid_levels, contract_name
from .stats import cell, contract_summary, fusion
from .stopping import StoppingRule, best_bid, decided
from .values import BIDDER, exact_lead_points, exact_values, network_values

SCHEMA = "eqfast-bid/1"
UPPER_METHOD = "perfect-information play on every seat (clairvoyant; optimistic)"
UPPER_METHOD_NET = ("perfect-information play on every seat (clairvoyant; optimistic), "
                    "network values, solver where audited")
FIXED_LEAD_METHOD = ("one opening lead for every completion (the best on average), "
                     "perfect-information play afterwards")
LOWER_METHOD = "E[Q] player on every seat, each from its own information (imperfect-information play)"


def p_label(model: str, method: str) -> str:
    return f"P_{model}(make | {method})"


#: completions valued per call when N is fixed (a progress line after each)
VALUE_CHUNK = 100


def evaluate(hand, n: int = 500, seed: int = 0, model: CompletionModel | str = "uniform_consistent",
             contracts=CONTRACTS, max_marks: int = 2, threads: int | None = None,
             stopping: StoppingRule | None = None, network=None, network_info: dict | None = None,
             audit=None,
             lower_engine=None, lower_n: int = 0, lower_info: dict | None = None,
             gap_warn: float = 0.15, progress: Callable[[str], None] | None = None,
             leads: bool = False) -> dict:
    """The full matrix of `hand` (a "6-6,6-5,..." string or 7 tile ids).

    n: completions (with `stopping`: ignored, the rule decides within its maximum).
    network: a Stage 1 oracle for bulk values (None: exact values for every completion);
    network_info labels the network in the output (name, path, sha256); audit: an
    `audit.AuditConfig` for the network path (default settings when None).
    lower_engine: an engine from `lower.lower_engine` to play the first `lower_n`
    completions on every seat (the lower bracket); lower_info labels it in the output.
    leads: on the exact path, also solve every opening lead (exact Q of each) for the
    fixed-lead figures (`first_lead`, `p_upper_fixed_lead`); V alone is 2.6x cheaper
    (docs/BIDDING.md "Speed").
    """
    tiles = parse_hand(hand) if isinstance(hand, str) else parse_hand(format_hand(hand))
    model = completion_model(model) if isinstance(model, str) else model
    contracts = tuple(int(c) for c in contracts)
    if not contracts or len(set(contracts)) != len(contracts) or not set(contracts) <= set(CONTRACTS):
        raise ValueError(f"contracts must be distinct declarations 0..9, got {contracts}")
    if stopping is None and n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    levels = bid_levels(max_marks)
    needs = [lv.need for lv in levels]
    say = progress or (lambda msg: None)
    t0 = time.perf_counter()

    lead_points = []   # exact path with leads: [n, C, 7] points after each opening lead

    def values(start, stop):
        comp = model.sample(tiles, seed, start, stop)
        if network is not None:
            return comp, network_values(comp, contracts, network)
        if leads:
            lead_points.append(exact_lead_points(comp, contracts, threads))
            return comp, lead_points[-1].max(2)
        return comp, exact_values(comp, contracts, threads)

    stop_info = None
    if stopping is None:
        # in chunks, so that progress shows; completions and values are per index, so the
        # result is the same as in one piece
        parts = []
        for lo in range(0, n, VALUE_CHUNK):
            parts.append(values(lo, min(n, lo + VALUE_CHUNK)))
            if n > VALUE_CHUNK:
                say(f"values: {min(n, lo + VALUE_CHUNK)}/{n} completions x {len(contracts)} "
                    f"contracts ({time.perf_counter() - t0:.1f} s)")
        comp = np.concatenate([c for c, _ in parts])
        v = np.concatenate([x for _, x in parts])
    else:
        comp, v = values(0, stopping.start)
        history = [best_bid(v, needs, stopping.target)]
        while True:
            ok, figures = decided(v, needs, stopping)
            stable = len(history) >= stopping.patience and len(set(history[-stopping.patience:])) == 1
            reason = "decided" if ok else "stable" if stable else \
                "maximum" if len(v) >= stopping.max_n else None
            say(f"{len(v)} completions: {reason or 'continuing'}")
            if reason:
                stop_info = {"rule": stopping.as_dict(), "reason": reason, "rounds": len(history),
                             "last_check": _columns_to_contracts(figures, contracts, levels)}
                break
            more_c, more_v = values(len(v), min(len(v) + stopping.step, stopping.max_n))
            comp, v = np.concatenate([comp, more_c]), np.concatenate([v, more_v])
            history.append(best_bid(v, needs, stopping.target))
    n = len(v)
    t_values = time.perf_counter() - t0
    say(f"values of {n} completions x {len(contracts)} contracts: {t_values:.1f} s")

    audit_out = None
    if network is not None:
        from .audit import AuditConfig, audit_network
        audit_out, v = audit_network(v, comp, contracts, needs, network, audit or AuditConfig(),
                                     threads=threads, progress=say)

    lower = None
    t1 = time.perf_counter()
    if lower_engine is not None and lower_n > 0:
        from .lower import play_out
        k = min(lower_n, n)
        say(f"lower bracket: the E[Q] player on every seat of {k} completions x "
            f"{len(contracts)} contracts")
        lower = play_out(lower_engine, comp[:k], contracts,
                         progress=lambda done, total: say(
                             f"lower bracket: {done}/{total} games "
                             f"({time.perf_counter() - t1:.1f} s)"))
        say(f"lower bracket, {k} completions x {len(contracts)} contracts: "
            f"{time.perf_counter() - t1:.1f} s")
    t_lower = time.perf_counter() - t1

    lead = np.concatenate(lead_points) if lead_points else None
    upper_label = p_label(model.label, UPPER_METHOD if network is None else UPPER_METHOD_NET)
    fixed_label = p_label(model.label, FIXED_LEAD_METHOD)
    lower_label = p_label(model.label, LOWER_METHOD)
    out_contracts = []
    for j, c in enumerate(contracts):
        entry = {"decl": c, "name": contract_name(c), "score_upper": contract_summary(v[:, j])}
        fixed = None
        if lead is not None:
            entry["first_lead"], fixed = _first_lead(lead[:, j], v[:, j], tiles)
        if lower is not None:
            entry["score_lower"] = contract_summary(lower[:, j])
        cells = []
        for lv in levels:
            made = v[:, j] >= lv.need
            x = {"level": lv.label, "need": lv.need, "marks": lv.marks,
                 "completion_model": model.label, "n": n, "seed": seed,
                 "p_upper": {"label": upper_label, **cell(made, lv.marks)}}
            if fixed is not None:
                x["p_upper_fixed_lead"] = {"label": fixed_label, **cell(fixed >= lv.need, lv.marks)}
            if lower is not None:
                k = len(lower)
                p_same = float(made[:k].mean())
                x["p_lower"] = {"label": lower_label, "n": k, **cell(lower[:, j] >= lv.need, lv.marks)}
                gap = p_same - x["p_lower"]["p"]
                x["gap"] = {"p_upper_same_completions": p_same, "gap": gap,
                            "warning": bool(abs(gap) > gap_warn)}
            if audit_out is not None:
                x["audit"] = audit_out["cells"][j][levels.index(lv)]
            cells.append(x)
        entry["cells"] = cells
        out_contracts.append(entry)

    fz = fusion(v, needs)
    best_c, best_k = best_bid(v, needs, stopping.target if stopping else 0.5)
    choice = {
        "criterion": "argmax over contracts of the mean bidder points (max of averages)",
        "contract": contracts[best_c], "name": contract_name(contracts[best_c]),
        "max_of_averages": fz["max_of_averages"],
        "fused_average_of_max_INVALID": fz["fused_average_of_max_INVALID"],
        "fusion_points": fz["fusion_points"],
        "per_level": [{"level": lv.label,
                       "best_contract": contracts[int(np.argmax((v >= lv.need).mean(0)))],
                       "max_of_p_upper": f["max_of_p"],
                       "fused_p_upper_INVALID": f["fused_p_INVALID"]}
                      for lv, f in zip(levels, fz["per_level"])],
    }
    result = {
        "schema": SCHEMA,
        "hand": format_hand(tiles), "bidder_seat": BIDDER, "leader": BIDDER,
        "completion_model": model.label, "n": n, "seed": seed,
        "values": ("exact solver (V_PI)" if network is None
                   else "network, exact where audited (see audit)"),
        "network": None if network is None else (network_info or {"name": type(network).__name__}),
        "labels": {"p_upper": upper_label, "p_lower": lower_label,
                   "p_upper_fixed_lead": fixed_label},
        "levels": [{"level": lv.label, "need": lv.need, "marks": lv.marks} for lv in levels],
        "contracts": out_contracts,
        "choice": choice,
        "best_bid": {"contract": contracts[best_c],
                     "level": levels[best_k].label if best_k >= 0 else None,
                     "target": stopping.target if stopping else 0.5,
                     "rule": "highest level whose p_upper reaches the target, on the chosen contract"},
        "stopping": stop_info,
        "lower_bracket": None if lower is None else {
            "policy": LOWER_METHOD, "n": len(lower), "gap_warn": gap_warn, **(lower_info or {})},
        "audit": None if audit_out is None else audit_out["summary"],
        "timing_s": {"values": t_values, "lower": t_lower, "total": time.perf_counter() - t0},
    }
    if lower is not None:
        result["warnings"] = []
        for c in out_contracts:
            flagged = [x for x in c["cells"] if x["gap"]["warning"]]
            if flagged:
                worst = max(flagged, key=lambda x: abs(x["gap"]["gap"]))
                result["warnings"].append(
                    f"{c['name']}: |p_upper - p_lower| > {gap_warn} at {len(flagged)} levels "
                    f"({', '.join(x['level'] for x in flagged)}), largest "
                    f"{worst['gap']['gap']:+.2f} at {worst['level']}")
    return result


def _first_lead(points: np.ndarray, v: np.ndarray, tiles) -> tuple[dict, np.ndarray]:
    """The opening lead chosen once for all completions (max over leads of the mean, the
    same rule as the contract choice), and the values with that lead: [n] points."""
    mean = points.mean(0)
    t = int(np.argmax(mean))
    fixed = points[:, t]
    return {"best_fixed_lead": tile_name(tiles[t]),
            "mean_points_fixed_lead": float(mean[t]),
            "fusion_points": float(v.mean() - mean[t]),
            "optimal_share": float(np.mean(fixed == v)),
            "mean_points_by_lead": {tile_name(x): float(m) for x, m in zip(tiles, mean)}}, fixed


def _columns_to_contracts(figures: dict, contracts, levels) -> dict:
    """The stopping check's figures with contract ids and level labels."""
    out = dict(figures)
    out["best_contract"] = contracts[out.pop("best_column")]
    k = out.pop("best_level_index")
    out["best_level"] = levels[k].label if k >= 0 else None
    out["cells"] = [{"level": levels[x.pop("level_index")].label, **x} for x in out["cells"]]
    if "runner_up_column" in out["ranking"]:
        out["ranking"] = dict(out["ranking"])
        out["ranking"]["runner_up"] = contracts[out["ranking"].pop("runner_up_column")]
    return out
