"""The data card of an oracle shard directory (`<dir>/card.json`): rows and deals per
split, declaration mix, depth and legal-move histograms, per-shard stats and content hashes,
and the directory's data hash. Rebuilt after each shard is written (labelling.py); the stats
of shards it already lists are reused, so a rebuild stays cheap.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from ..rules.tables import DECL_NAMES
from ..utils.atomic import atomic_write_bytes
from .dataset import DATASET_VERSION, EPS_MAX, SPLITS, file_hash, shard_paths


def shard_stats(cols: dict[str, np.ndarray]) -> dict:
    """Counts of one shard: rows and deals per split, declarations, depths, legal moves."""
    _, first = np.unique(cols["deal"], return_index=True)  # first row of each deal
    return {
        "rows": int(len(cols["q"])),
        "deals": int(len(first)),
        "mid_hand_deals": int((cols["depth"][first] > 0).sum()),
        "split_deals": [int(len(np.unique(cols["deal"][cols["split"] == s])))
                        for s in range(len(SPLITS))],
        "deal_start": int(cols["deal"].min()), "deal_stop": int(cols["deal"].max()) + 1,
        "split_rows": [int((cols["split"] == s).sum()) for s in range(len(SPLITS))],
        "decl": np.bincount(cols["decl"][first].astype(np.int64), minlength=10).tolist(),
        "depth": np.bincount(cols["depth"].astype(np.int64), minlength=28).tolist(),
        "legal_moves": np.bincount(cols["legal"].sum(1), minlength=8).tolist(),
    }


def build_card(directory, previous: dict | None = None) -> dict:
    """The data card of a shard directory: counts, declaration mix, depth histogram, hash.

    Per-shard stats and hashes of `previous` (the card on disk) are reused for shards whose
    names it lists, so rebuilding after each new shard stays cheap.
    """
    from safetensors.numpy import load_file

    known = (previous or {}).get("per_shard", {})
    per_shard = {}
    for p in shard_paths(directory):
        if p.name in known:
            per_shard[p.name] = known[p.name]
        else:
            per_shard[p.name] = {**shard_stats(load_file(str(p))), "hash": file_hash(p)}
    card = {"dataset_version": DATASET_VERSION, "shards": len(per_shard), "rows": 0,
            "deals": 0, "mid_hand_deals": 0, "splits": {s: {"rows": 0, "deals": 0} for s in SPLITS},
            "decl_mix": {n: 0 for n in DECL_NAMES}, "depth_histogram": [0] * 28,
            "legal_moves_histogram": [0] * 8, "epsilon_max": EPS_MAX,
            "generator": "eqfast.oracle.dataset: at each decision the solver's best move, or "
                         "with per-game probability epsilon ~ U(0, epsilon_max) a uniformly "
                         "random legal move; decl uniform 0..9, leader uniform 0..3; "
                         "mid_hand_deals start with k = 2..6 tiles a seat (--short)"}
    for st in per_shard.values():
        card["rows"] += st["rows"]
        card["deals"] += st.get("deals", st["rows"] // 28)
        card["mid_hand_deals"] += st.get("mid_hand_deals", 0)
        for s, name in enumerate(SPLITS):
            card["splits"][name]["rows"] += st["split_rows"][s]
            card["splits"][name]["deals"] += st.get("split_deals", [r // 28 for r in
                                                                    st["split_rows"]])[s]
        for d, c in enumerate(st["decl"]):
            card["decl_mix"][DECL_NAMES[d]] += c
        card["depth_histogram"] = [a + b for a, b in zip(card["depth_histogram"], st["depth"])]
        card["legal_moves_histogram"] = [a + b for a, b in
                                         zip(card["legal_moves_histogram"], st["legal_moves"])]
    h = hashlib.sha256()
    for name in sorted(per_shard):
        h.update(f"{name}:{per_shard[name]['hash']};".encode())
    card["data_hash"] = h.hexdigest()[:16]
    card["per_shard"] = per_shard
    return card


def read_card(directory) -> dict | None:
    path = Path(directory) / "card.json"
    return json.loads(path.read_text()) if path.exists() else None


def write_card(directory) -> dict:
    card = build_card(directory, read_card(directory))
    atomic_write_bytes(Path(directory) / "card.json", (json.dumps(card, indent=1) + "\n").encode())
    return card
