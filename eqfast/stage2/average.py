"""One Stage 2 model whose parameters are the mean of several models' ("a model soup").

Runs of the improvement loop and of replay all descend from one set of weights and so
lie in one basin; the mean of their parameters is a single model, as fast as any of them,
that can play better than each (measured: docs/STAGE2.md, "Averaging the loop's models"). The mean is
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

    model = config = None
    total: dict = {}
    cards, hashes = [], set()
    for src, w in zip(sources, weights):
        loaded, meta = load_stage2_with_meta(src)
        if model is None:
            model, config, first = loaded, check_config(meta["config"]), (src, meta["config"])
        elif check_config(meta["config"]) != config:
            raise ValueError(f"{src} has the architecture {meta['config']}, {first[0]} "
                             f"{first[1]}: only models of one architecture average")
        for k, v in loaded.state_dict().items():
            total[k] = total.get(k, 0.0) + v.double() * w
        cards.append({**source_card(src, meta), "weight": w})
        hashes.add(meta.get("data_hash", ""))
    scale = 1.0 / sum(weights)
    model.load_state_dict({k: (v * scale).to(model.state_dict()[k].dtype)
                           for k, v in total.items()})
    record = {"average": cards}
    # one data hash when every source saw the same data; otherwise none claims to hold
    save_stage2(out, model, first[1], hashes.pop() if len(hashes) == 1 else "", {}, record)
    return record


def source_card(path, meta: dict) -> dict:
    """What a run or a mean records of a weights file it starts from: path, SHA-256 and the
    file's own steps and records seen, or for a mean of models (no steps of its own) how
    many it averages."""
    path = Path(path)
    card = {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "steps": meta["train"].get("step"),
            "records_seen": meta["train"].get("records_seen")}
    if "average" in meta["train"]:
        card["average_of"] = len(meta["train"]["average"])
    return card


def describe(card: dict) -> str:
    """'N steps', 'the mean of N models', or for a file with no steps of its own (a split
    file joined from two) 'no steps of its own', for a log line."""
    if "average_of" in card:
        return f"the mean of {card['average_of']} models"
    if card.get("steps") is None:
        return "no steps of its own"
    return f"{card['steps']} steps"
