"""eqfast-generate records -> the compact tensors Stage 2 trains and evaluates on.

Per record (docs/DATASET.md, schema 2.1):

    tokens   int8 [R, 36, 8]  transcript_tokens as stored (the model's input)
    lengths  int64 [R]        transcript_lengths
    q        float32 [R, 7]   e_q_mean in points at legal slots, 0 elsewhere
    s2       float32 [R, 7]   the label's sampling variance at legal slots, points²:
                              e_q_var / ess (the variance of a weighted mean of worlds with
                              normalized weights w is Var[Q] * sum w² = Var[Q] / ess), or
                              cv_se² where a control variate corrected the label; 0 where
                              every consistent world was enumerated (the label is exact
                              given the oracle) and at illegal slots
                              (`schema.label_variance`)
    legal    bool [R, 7]      legal_mask
    weight   float32 [R]      the decision's weight in the loss: 1, or `forced_weight` for a
                              forced decision (one legal move: nothing to choose, and its
                              value is learned from the other decisions of the position's
                              kind)
    action   int64 [R]        action_taken: the slot played (the auxiliary policy head's
                              target)
    target   float32 [R, 7]   only with mc_weight λ > 0: the training target, q except at
                              the slot of the move played (action_taken), where it is
                              (1 - λ) E[Q] + λ realized_to_go (the Monte Carlo return of that
                              move as the game went on: same frame and units as E[Q],
                              docs/DATASET.md); `mc_target`

`load_split` reads one eqfast-generate directory or the union of several (`data_dirs`).
`data_card` summarizes where the records came from (for the weights file's metadata) and
`data_hash` fingerprints the shards read, from the SHA-256 their sidecars record.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from ..data.schema import DecisionRecords, label_variance
from ..data.shards import ShardError, load_records, split_shards
from ..rules.tables import N_SEATS
from .defaults import FORCED_WEIGHT  # noqa: F401  (defined without torch, for --help)


def mc_target(q: torch.Tensor, taken: torch.Tensor, realized: torch.Tensor,
               mc_weight: float) -> torch.Tensor:
    """q [R, 7] with the slot `taken` [R] of each row replaced by (1 - mc_weight) q +
    mc_weight realized [R] (the other slots as they are)."""
    rows = torch.arange(q.shape[0])
    target = q.clone()
    target[rows, taken] = (1.0 - mc_weight) * q[rows, taken] + mc_weight * realized.to(q.dtype)
    return target


def prepare_rows(records: DecisionRecords, forced_weight: float = FORCED_WEIGHT,
                 mc_weight: float = 0.0) -> dict:
    """The compact tensors above, from records of any split. mc_weight > 0 needs the
    outcome field realized_to_go (every eqfast-generate run writes it)."""
    legal = records["legal_mask"].clone()
    q = torch.where(legal, records["e_q_mean"], torch.zeros_like(records["e_q_mean"]))
    s2 = torch.where(legal, label_variance(records).float(), torch.zeros_like(q))
    forced = legal.sum(1) == 1
    weight = torch.where(forced, torch.full(forced.shape, float(forced_weight)),
                         torch.ones(forced.shape))
    rows = {"tokens": records["transcript_tokens"].contiguous(),
            "lengths": records["transcript_lengths"].clone(),
            "q": q.float().contiguous(), "s2": s2.float().contiguous(),
            "legal": legal.contiguous(), "weight": weight.float(),
            "action": records["action_taken"].clone()}
    if mc_weight > 0:
        if "realized_to_go" not in records:
            raise ShardError("mc_weight > 0 needs the records' realized_to_go (written by "
                             "eqfast-generate since the outcome fields exist; these records "
                             "lack it)")
        rows["target"] = mc_target(rows["q"], records["action_taken"],
                                   records["realized_to_go"], mc_weight).contiguous()
    return rows


def own_targets_outside(rows: dict, decision_idx: torch.Tensor, tricks, mu: torch.Tensor) -> dict:
    """`rows` (prepare_rows) with the decisions outside `tricks` (1..7; trick =
    decision_idx // 4 + 1) given a model's own μ [R, 7] as their target at the legal slots:
    the run learns the data's labels in those tricks and keeps the model's values, so its
    play, everywhere else (self-distillation). Such rows get label variance 0 and
    `label_w` 0, which leaves them out of the variance head's term (their target is a
    model's value, not a sampled label). The same tensors changed in place."""
    outside = ~in_tricks(decision_idx, tricks)
    own = torch.where(rows["legal"], mu.to(rows["q"].dtype), torch.zeros_like(rows["q"]))
    for key in ("q", "target"):
        if key in rows:
            rows[key][outside] = own[outside]
    rows["s2"][outside] = 0.0
    rows["label_w"] = (~outside).float()
    return rows


def in_tricks(decision_idx: torch.Tensor, tricks) -> torch.Tensor:
    """Bool [R]: whether each decision (0..27) lies in one of `tricks` (1..7; trick =
    decision_idx // 4 + 1)."""
    trick = decision_idx // N_SEATS + 1
    return torch.isin(trick, torch.tensor(tuple(tricks), dtype=trick.dtype))


def rows_of_tricks(rows: dict, decision_idx: torch.Tensor, tricks) -> dict:
    """The rows of `rows` (prepare_rows) whose decisions lie in `tricks`, in their order: a
    model trained for part of the hand only (a late-hand model, played after another by
    the `split` policy)."""
    return select_rows(rows, in_tricks(decision_idx, tricks))


def select_rows(rows: dict, keep: torch.Tensor) -> dict:
    """The rows of `rows` (prepare_rows) where the bool [R] `keep` holds, in their order."""
    return {k: v[keep] for k, v in rows.items()}


def well_labelled(records: DecisionRecords, min_worlds: int) -> torch.Tensor:
    """Bool [R]: whether each decision's label rests on at least `min_worlds` worlds
    (n_worlds) or on every consistent world (enumerated). A run that labels only some
    tricks (`--n-by-trick 1,1,1,1,1680,1680,1680`) has one-world labels elsewhere, which
    this leaves out when its records join a model for more tricks."""
    return records["enumerated"] | (records["n_worlds"] >= min_worlds)


def data_dirs(data) -> list[Path]:
    """The eqfast-generate directories of `data`: one path, or a list or tuple of them (a
    model trained on the union of several runs' records, e.g. the improvement loop's
    replay of earlier generations)."""
    return [Path(d) for d in data] if isinstance(data, (list, tuple)) else [Path(data)]


def _load_one(root: Path, split: str) -> tuple[DecisionRecords, list[dict]]:
    if not (root / split).is_dir():
        raise ShardError(f"{root}: no {split}/ directory (expected the output of "
                         "eqfast-generate --out DIR)")
    records, metas = load_records(root, split=split)
    if len(records) == 0:
        raise ShardError(f"{root / split}: no records (generate more games: the {split} split "
                         "holds about 5% of them, train 90%)")
    return records, metas


def load_split(data, split: str) -> tuple[DecisionRecords, list[dict]]:
    """(records, shard metadata) of one split of an eqfast-generate directory, or of the
    union of several (`data_dirs`); ShardError naming the directory when a split has no
    shards or no records, or naming both directories when they hold the same game seed (a
    game read twice, or two games under one seed that later joins would confuse)."""
    parts, metas, owner = [], [], {}
    for root in data_dirs(data):
        records, m = _load_one(root, split)
        for seed in torch.unique(records["seed"]).tolist():
            if owner.setdefault(seed, root) != root:
                raise ShardError(f"{owner[seed]} and {root} both hold game seed {seed} in "
                                 f"{split}/: train on directories with disjoint seed ranges")
        parts.append(records)
        metas += m
    if len(parts) == 1:
        return parts[0], metas
    return DecisionRecords.cat(parts).sort_by_game(), metas


def data_hash(data, splits=("train", "val")) -> str:
    """Hash of the shards of `splits`: their names and the tensor files' SHA-256 (from the
    sidecars, which `read_shard` checks against the files); with several directories,
    each one's in the order given."""
    h = hashlib.sha256()
    for i, root in enumerate(data_dirs(data)):
        if i:
            h.update(f"|dir {i}|".encode())
        for split in splits:
            for path in split_shards(root / split):
                side = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
                h.update(f"{split}/{path.name}:{side['shard']['sha256']};".encode())
    return h.hexdigest()[:16]


def data_card(data, parts: dict[str, tuple[DecisionRecords, list[dict]]]) -> dict:
    """Where the records came from: path, games and records per split, seed range, and the
    generator's oracle, worlds per decision and run seed (from the first shard)."""
    meta = next(iter(parts.values()))[1][0]
    dirs = data_dirs(data)
    card = {"data": str(dirs[0]) if len(dirs) == 1 else [str(d) for d in dirs], "splits": {}}
    seeds = []
    for split, (records, _) in parts.items():
        s = records["seed"]
        seeds.append(s)
        card["splits"][split] = {"games": int(torch.unique(s).numel()), "records": len(records)}
    all_seeds = torch.cat(seeds)
    oracle = meta.get("oracle", {})
    card.update(seed_min=int(all_seeds.min()), seed_max=int(all_seeds.max()),
                oracle={k: oracle[k] for k in ("name", "path", "sha256") if k in oracle} or oracle,
                n_samples=meta.get("n_samples"), run_seed=meta.get("run_seed"),
                posterior=meta.get("posterior", {}).get("enabled"),
                exploration=meta.get("exploration"), decl_mode=meta.get("decl_mode"))
    if len(dirs) > 1:                   # each directory's labeller, not only the first's
        seen = {}
        for _, metas in parts.values():
            for m in metas:
                key = (m.get("oracle", {}).get("name"), m.get("n_samples"))
                seen.setdefault(key, {"name": key[0], "n_samples": key[1]})
        card["oracles"] = list(seen.values())
    return card
