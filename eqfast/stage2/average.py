"""One Stage 2 model whose parameters are the mean of several models' ("a model soup").

Runs of the improvement loop and of replay all descend from one set of weights and so
lie in one basin; the mean of their parameters is a single model, as fast as any of them,
that plays better than each (docs/STAGE2.md, "Averaging the loop's models"). The mean is
taken in float64 over every tensor, uniform or with the given weights. The files must share
an architecture; that they also share a starting point is the caller's to know, since
nothing in a file says where its training began.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path


from .model import check_config
from .weights import load_stage2_with_meta, save_stage2


def average_stage2(sources, out, weights=None) -> dict:
    """Write the (weighted) mean of the Stage 2 files `sources` to `out` atomically and
    return its training record: each source's path, SHA-256, weight and own training steps.

    ValueError when there are fewer than two sources, a source is named twice or is `out`,
    the weights do not fit, or the architectures differ; Stage2WeightsError (a ValueError)
    for an unreadable file."""
    sources = [Path(s) for s in sources]
    if len(sources) < 2:
        raise ValueError(f"averaging needs at least two weights files, got {len(sources)}")
    resolved = [s.resolve() for s in sources]
    if len(set(resolved)) < len(resolved):
        twice = next(s for s, r in zip(sources, resolved) if resolved.count(r) > 1)
        raise ValueError(f"{twice} is named twice; give a weight instead to count it more")
    if Path(out).resolve() in resolved:
        raise ValueError(f"the output {out} is one of the sources; write to a new file")
    if weights is None:
        weights = [1.0] * len(sources)
    weights = [float(w) for w in weights]
    if len(weights) != len(sources):
        raise ValueError(f"{len(weights)} weights for {len(sources)} files")
    if not all(math.isfinite(w) and w >= 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"weights must be finite, >= 0 and not all 0, got {weights}")

    model, meta = load_stage2_with_meta(sources[0])
    config = check_config(meta["config"])
    total = {k: v.double() * weights[0] for k, v in model.state_dict().items()}
    cards = [_card(sources[0], meta, weights[0])]
    hashes = {meta.get("data_hash", "")}
    for src, w in zip(sources[1:], weights[1:]):
        other, m = load_stage2_with_meta(src)
        if check_config(m["config"]) != config:
            raise ValueError(f"{src} has the architecture {m['config']}, {sources[0]} "
                             f"{meta['config']}: only models of one architecture average")
        for k, v in other.state_dict().items():
            total[k] += v.double() * w
        cards.append(_card(src, m, w))
        hashes.add(m.get("data_hash", ""))
    scale = 1.0 / sum(weights)
    model.load_state_dict({k: (v * scale).to(model.state_dict()[k].dtype)
                           for k, v in total.items()})
    record = {"average": cards}
    # one data hash when every source saw the same data; otherwise none claims to hold
    save_stage2(out, model, meta["config"], hashes.pop() if len(hashes) == 1 else "",
                {}, record)
    return record


def _card(path: Path, meta: dict, weight: float) -> dict:
    card = {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "weight": weight, "steps": meta["train"].get("step"),
            "records_seen": meta["train"].get("records_seen")}
    if "average" in meta["train"]:          # itself a mean: no steps of its own
        card["average_of"] = len(meta["train"]["average"])
    return card
