"""Solver-labelled training positions for the Stage 1 oracle: how a deal's positions are
labelled, and the shard format that holds them (card.py summarizes a shard directory,
labelling.py writes one, `eqfast-label-oracle` is the command).

Deal number g (an int >= 0) fixes everything about its game:
    hands  = deal_from_seed(g)
    rng    = numpy PCG64 seeded with mix_seed(GAME_TAG, g)  -> decl (uniform 0..9),
             leader (uniform 0..3), epsilon (uniform 0..EPS_MAX)
    split  = mix_seed(SPLIT_TAG, g) % 100: < 90 train, < 95 val, else test
The game is played to the end; at each of its 28 decisions the position is labelled with the
solver's exact Q of every legal move, then the actor plays a uniformly random legal move with
probability epsilon, else the solver's best move (ties -> lowest tile id). So every depth is
covered, along lines from near-optimal to half random. (This offline generator uses numpy
randomness; the engine's Philox streams are for the engine's own draws.) With `short`
(`--short`), two deals in three start mid-hand instead (see `label_deal`).

Shards: `<dir>/shard_<k:05d>.safetensors` holds deals offset + [k*S, (k+1)*S) (S = deals
per shard, recorded in metadata), 28 rows per full-hand game, columns:
    hands [R,4,7] int8, remaining [R,4] uint8, decl/leader/actor/depth/split [R] int8,
    trick [R,3] int8 (-1 pad), q [R,7] float32 (actor frame, 0 at illegal), legal [R,7] bool,
    deal [R] int64.
`<dir>/card.json` is the data card (card.py).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from ..rules.deal import deal_from_seed, mix_seed
from ..rules.state import GameState
from ..utils.atomic import atomic_write_bytes
from .exact import solve_row
from .protocol import OracleBatch

DATASET_VERSION = 1
GAME_TAG = 0x0A11CE
SPLIT_TAG = 0x5B117
EPS_MAX = 0.5
P_FULL = 1 / 3  # share of full hands when generating with short games mixed in
SPLITS = ("train", "val", "test")
COLUMNS = ("hands", "remaining", "decl", "leader", "actor", "depth", "split", "trick", "q",
           "legal", "deal")


def split_of(deal: int) -> int:
    """0 train, 1 val, 2 test: a stable function of the deal number."""
    h = mix_seed(SPLIT_TAG, deal) % 100
    return 0 if h < 90 else 1 if h < 95 else 2


def game_setup(deal: int) -> tuple[np.ndarray, int, int, float, np.random.Generator]:
    """(hands [4,7], decl, leader, epsilon, rng) of deal number `deal`."""
    rng = np.random.default_rng(mix_seed(GAME_TAG, deal))
    decl = int(rng.integers(10))
    leader = int(rng.integers(4))
    eps = float(rng.uniform(0.0, EPS_MAX))
    return deal_from_seed(deal).astype(np.int64), decl, leader, eps, rng


def remaining_masks(hands: np.ndarray, state: GameState) -> np.ndarray:
    """7-bit slot masks [4] of the tiles each seat of `state` still holds (initial `hands`)."""
    return np.array([sum(1 << i for i in range(7) if hands[s, i] in state.hands[s])
                     for s in range(4)], np.int64)


def position_of(hands: np.ndarray, state: GameState) -> OracleBatch:
    """The one-row OracleBatch of `state` (a game started from initial `hands` [4,7])."""
    trick = list(state.trick) + [-1] * (3 - len(state.trick))
    as_t = lambda x: torch.as_tensor(np.asarray(x), dtype=torch.int64)[None]
    return OracleBatch(hands=as_t(hands), remaining=as_t(remaining_masks(hands, state)),
                       decl=as_t(state.decl), leader=as_t(state.leader), trick=as_t(trick),
                       actor=as_t(state.current_player))


def label_deal(deal: int, games: int = 1, short: bool = False) -> dict[str, np.ndarray]:
    """Labelled positions of `games` games played from deal number `deal` (columns as in the
    module doc). Game 0 uses the epsilon of `game_setup`; each further game draws its own
    epsilon ~ U(0, EPS_MAX) from the same stream. A position already recorded for this deal
    (same hands left, same trick) is not recorded twice.

    Why several games per deal: the solver's table persists across the games of one deal,
    so extra games give more rows per CPU second (from the same deals): ~1.8x with 4 games
    per deal, one thread, 400 full deals (docs/ORACLE.md, "Data").

    `short`: with probability 1 - P_FULL the game starts mid-hand instead: each seat keeps
    a random k of its 7 tiles (k uniform in 2..6; the others count as played in earlier
    tricks) and k tricks are played, depths 28-4k .. 27. Such a solve costs ~2 ms instead
    of ~16 ms for a full hand, so late positions come from many more independent deals."""
    hands, decl, leader, eps, rng = game_setup(deal)
    split = split_of(deal)
    tricks = 7
    start = [h.tolist() for h in hands]
    if short and rng.random() >= P_FULL:
        tricks = int(rng.integers(2, 7))
        start = [sorted(rng.choice(hands[s], tricks, replace=False).tolist()) for s in range(4)]
    rows = {c: [] for c in COLUMNS}
    seen = set()
    for game in range(games):
        if game > 0:
            eps = float(rng.uniform(0.0, EPS_MAX))
        state = GameState.new(start, decl, leader)
        for depth in range(28 - 4 * tricks, 28):
            actor = state.current_player
            remaining = remaining_masks(hands, state)
            q, legal = solve_row(hands, remaining, decl, state.leader, list(state.trick), actor)
            key = (tuple(remaining.tolist()), state.trick)
            if key not in seen:
                seen.add(key)
                trick = list(state.trick) + [-1] * (3 - len(state.trick))
                for name, value in (("hands", hands), ("remaining", remaining), ("decl", decl),
                                    ("leader", state.leader), ("actor", actor),
                                    ("depth", depth), ("split", split), ("trick", trick),
                                    ("q", q), ("legal", legal), ("deal", deal)):
                    rows[name].append(value)
            slots = np.flatnonzero(legal)
            if rng.random() < eps:
                slot = int(rng.choice(slots))
            else:
                slot = int(slots[np.argmax(q[slots])])  # first max = lowest tile id
            state = state.play(int(hands[actor, slot]))
    return {c: np.asarray(v) for c, v in rows.items()}


def label_game(deal: int) -> dict[str, np.ndarray]:
    """The 28 labelled positions of one game from deal number `deal`."""
    return label_deal(deal, 1)


_DTYPES = {"hands": np.int8, "remaining": np.uint8, "decl": np.int8, "leader": np.int8,
           "actor": np.int8, "depth": np.int8, "split": np.int8, "trick": np.int8,
           "q": np.float32, "legal": np.bool_, "deal": np.int64}


def write_shard(path: Path, deals: range, games_per_deal: int = 1, short: bool = False) -> dict:
    """Label `deals` and write them as one safetensors shard (atomically). Returns its meta."""
    from safetensors.numpy import save

    games = [label_deal(g, games_per_deal, short) for g in deals]
    cols = {c: np.ascontiguousarray(np.concatenate([g[c] for g in games]).astype(_DTYPES[c]))
            for c in COLUMNS}
    meta = {"dataset_version": str(DATASET_VERSION), "deal_start": str(deals.start),
            "deal_stop": str(deals.stop), "rows": str(len(cols["q"])),
            "games_per_deal": str(games_per_deal), "short": str(int(short))}
    atomic_write_bytes(path, save(cols, metadata=meta))
    return meta


class OracleDataError(ValueError):
    """A directory that holds no oracle training shards (names it and says what it holds)."""


def shard_paths(directory) -> list[Path]:
    return sorted(Path(directory).glob("shard_*.safetensors"))


def check_shard_dir(directory) -> list[Path]:
    """The shard files of `directory` once each is known to carry the training columns
    (only headers are read); OracleDataError naming the directory or file otherwise, so
    a command fails before it creates anything."""
    from safetensors import safe_open

    d = Path(directory)
    fix = "oracle training shards are written by `eqfast-label-oracle --out DIR`"
    if not d.is_dir():
        raise OracleDataError(f"{d}: no such directory ({fix})")
    paths = shard_paths(d)
    if not paths:
        what = ("an eqfast-generate dataset (Stage 2 decision records), "
                if any((d / s).is_dir() for s in SPLITS) else "")
        raise OracleDataError(f"{d}: {what}no shard_*.safetensors files; {fix}")
    for p in paths:
        try:
            with safe_open(str(p), framework="np") as f:
                meta, names = f.metadata() or {}, set(f.keys())
        except Exception as e:  # safetensors raises its own error types
            raise OracleDataError(f"{p}: not a readable safetensors file ({e})") from None
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            what = ("a shard of eqfast-generate (Stage 2 decision records)"
                    if meta.get("format") == "eqfast-decisions" else "not an oracle training shard")
            raise OracleDataError(f"{p}: {what}, without the columns {', '.join(missing)}; {fix}")
    return paths


def load_shards(directory, split: str | None = None, max_shards: int | None = None
                ) -> dict[str, torch.Tensor]:
    """All rows of the shards in `directory` (optionally one split) as int64/float/bool tensors."""
    from safetensors.numpy import load_file

    paths = shard_paths(directory)[:max_shards]
    if not paths:
        raise FileNotFoundError(f"no shard_*.safetensors files in {directory}")
    parts = []
    for p in paths:
        try:
            parts.append(load_file(str(p)))
        except Exception as e:
            raise ValueError(f"cannot read oracle data shard {p}: {e}") from e
    cols = {c: np.concatenate([part[c] for part in parts]) for c in COLUMNS}
    if split is not None:
        keep = cols["split"] == SPLITS.index(split)
        cols = {c: v[keep] for c, v in cols.items()}
    return as_tensors(cols)


def as_tensors(cols: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Shard columns as tensors: q float32 and legal bool as they are, the integer columns
    as int64 (what OracleBatch and the networks take)."""
    return {c: torch.from_numpy(np.ascontiguousarray(v)) if v.dtype in (np.bool_, np.float32)
            else torch.from_numpy(v.astype(np.int64)) for c, v in cols.items()}


def as_batch(data: dict[str, torch.Tensor], index=slice(None)) -> OracleBatch:
    """The OracleBatch of rows `index` of loaded shard columns."""
    return OracleBatch(hands=data["hands"][index], remaining=data["remaining"][index],
                       decl=data["decl"][index], leader=data["leader"][index],
                       trick=data["trick"][index], actor=data["actor"][index])


def file_hash(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def data_hash(paths) -> str:
    """Short content hash of a list of shard files (their names and bytes)."""
    h = hashlib.sha256()
    for p in sorted(Path(p) for p in paths):
        h.update(f"{p.name}:{file_hash(p)};".encode())
    return h.hexdigest()[:16]
