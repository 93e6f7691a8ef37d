"""Writing a directory of solver-labelled shards (the format of dataset.py), resumably: shards
already present are skipped, and the data card (card.py) is rebuilt after each new one.
"""
from __future__ import annotations

import time
from pathlib import Path

from .card import write_card
from .dataset import shard_paths, write_shard


def generate(directory, shards: int, deals_per_shard: int, first_shard: int = 0,
             games_per_deal: int = 1, deal_offset: int = 0, short: bool = False,
             log=print) -> None:
    """Write shards first_shard .. first_shard+shards-1 that do not exist yet (resumable).

    Shard k holds deals deal_offset + [k*S, (k+1)*S) for S = deals_per_shard."""
    from safetensors import safe_open

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    existing = shard_paths(directory)
    if existing:  # shard k must mean deals [k*S, (k+1)*S) for one S per directory
        with safe_open(str(existing[0]), framework="np") as f:
            m = f.metadata()
        size = int(m["deal_stop"]) - int(m["deal_start"])
        first = int(existing[0].stem.split("_")[1])
        offset = int(m["deal_start"]) - first * size
        if size != deals_per_shard or offset != deal_offset:
            raise ValueError(f"{existing[0]} holds {size} deals per shard from deal offset "
                             f"{offset}, but --deals-per-shard is {deals_per_shard} and "
                             f"--deal-offset {deal_offset}")
    for k in range(first_shard, first_shard + shards):
        path = directory / f"shard_{k:05d}.safetensors"
        if path.exists():
            continue
        t0 = time.perf_counter()
        start = deal_offset + k * deals_per_shard
        meta = write_shard(path, range(start, start + deals_per_shard), games_per_deal, short)
        card = write_card(directory)
        dt = time.perf_counter() - t0
        log(f"shard {k}: {meta['rows']} rows in {dt:.1f}s ({int(meta['rows']) / dt:.0f} rows/s); "
            f"total {card['rows']} rows, {card['deals']} deals", flush=True)
