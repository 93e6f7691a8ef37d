"""Label a dataset's games again on their stored worlds (eqfast-relabel).

A dataset written with `--store-worlds` holds, per decision, the worlds the playing oracle
saw (`world_owner`), their weights and that oracle's Q on each. `relabel_games` replays the
games with the reference `Engine` and a `StoredPlay` script: at every decision the engine
draws its worlds with the source run's keys (the counter-based draws give the same worlds
whatever the pipeline, backend or device that played; checked against `world_owner` tile
for tile), the labelling oracle (the exact solver) evaluates them, and the script supplies
what the engine must not compute again:

- the move and its exploration mode: the source's `action_taken` and `exploration_mode`,
  so the transcript goes on as it was played;
- the stored network Q as the control variate's values (its oracle is `StoredValues`:
  every row is served from the decision's row cache, filled from `world_q`), with the
  stored worlds as the control's set B and the first `n_by_trick` of them as the solver's
  set A, which is the estimator of the CPU default (docs/DATASET.md, "Control variate");
- the stored weights, for a posterior-weighted source (its behaviour model is not run
  again).

The records are then those `eqfast-generate --oracle exact` (with the same budgets and
control variate) writes for these games on these worlds and weights; the fields that do
not depend on the labels (transcript, moves, seeds, splits, outcomes) are checked equal to
the source's byte for byte.
"""
from __future__ import annotations

import torch

from ..data.schema import DecisionRecords
from .policy import Selection
from .sampling import world_ranks
from .transcript import current_hand_order, transcript_tokens
from .worlds import world_owners

#: fields a relabelled record shares with its source record, byte for byte
KEPT_FIELDS = ("transcript_tokens", "transcript_lengths", "legal_mask", "action_taken",
               "game_idx", "decision_idx", "train_mask", "split", "exploration_mode", "actor",
               "seed", "realized_to_go", "final_points")


class RelabelError(Exception):
    """A source record the relabel cannot reproduce (names the game and decision)."""


class StoredValues:
    """The control variate's oracle of a relabel: Q read from the source's `world_q`, which
    `StoredPlay.begin` puts in the decision's row cache; the engine asks it for no row
    (a row outside the stored worlds is a bug, and raises)."""
    stored = True

    def query(self, batch, rows=None):
        raise RuntimeError("a world outside the stored worlds was asked of the stored "
                           "network values")


def _initial_order(x: torch.Tensor, slot_of_pos: torch.Tensor) -> torch.Tensor:
    """x [G, N, 7] in current-hand order -> initial-slot order (0 at slots not in hand)."""
    G, N, _ = x.shape
    out = torch.zeros_like(x)
    held = slot_of_pos >= 0                                            # [G, 7]
    g, p = torch.nonzero(held, as_tuple=True)
    out[g, :, slot_of_pos[g, p]] = x[g, :, p]
    return out


class StoredPlay:
    """Engine script (`Engine.play(..., script=)`) for one batch of games of a source
    dataset: `records` holds every decision of the games of `seeds`, in that order.

    control: use the stored `world_q` as the control variate's values (the engine's
    cv_oracle is then a `StoredValues`); weights: use the stored `world_weight` as the
    worlds' weights (a posterior-weighted source; the engine runs without a posterior)."""

    def __init__(self, records: DecisionRecords, seeds, *, control: bool = False,
                 weights: bool = False):
        records = records.sort_by_game()
        if list(seeds) != sorted(set(int(s) for s in seeds)):
            raise ValueError("StoredPlay: seeds must be distinct and in increasing order")
        if (records["seed"].unique().tolist() != list(seeds) or len(records) != 28 * len(seeds)
                or not torch.equal(records["game_idx"], records["seed"])):
            raise RelabelError(f"source records of seeds {seeds[0]}..{seeds[-1]}: expected the "
                               f"28 decisions of each of {len(seeds)} games (game_idx = seed), "
                               f"got {len(records)} records")
        if "world_owner" not in records or "world_q" not in records:
            raise RelabelError("the source records hold no stored worlds (world_owner, "
                               "world_q): write them with eqfast-generate --store-worlds")
        self.records = records                      # by (seed, decision)
        self.by_decision = [records.select(torch.nonzero(records["decision_idx"] == d)[:, 0])
                            for d in range(28)]
        self.control = control
        self.weights = weights
        self.n_stored = records["world_owner"].shape[1]
        self._now = None

    def _where(self, d: int, g: int) -> str:
        return f"seed {int(self.by_decision[d]['seed'][g])}, decision {d}"

    def begin(self, engine, games, decision: int, keys, legal, caches) -> None:
        """Check the replayed position and the engine's draw of the stored worlds against
        the source; with `control`, fill the control oracle's row cache from world_q."""
        src = self.by_decision[decision]
        self._now = src
        tokens, lengths = transcript_tokens(games)
        bad = ((tokens.cpu() != src["transcript_tokens"]).flatten(1).any(1)
               | (lengths.cpu() != src["transcript_lengths"]))
        if bool(bad.any()):
            raise RelabelError(f"{self._where(decision, int(torch.nonzero(bad)[0]))}: the replayed "
                               "transcript differs from the source record (deal version or "
                               "declaration mode?)")
        info = engine.backend.hidden_info(games)
        counts = engine.backend.completion_counts(info)
        sample = engine.backend.sample_worlds(info, counts, keys, self.n_stored)
        owner = world_owners(games, info, sample).cpu()
        bad = (owner != src["world_owner"]).flatten(1).any(1)
        if bool(bad.any()):
            raise RelabelError(f"{self._where(decision, int(torch.nonzero(bad)[0]))}: the stored "
                               "worlds are not the draws of the source's run seed (a source "
                               "written with other settings?)")
        if not self.control:
            return
        G, N = owner.shape[:2]
        ranks = world_ranks(sample.total, keys, N)
        slot_of_pos = current_hand_order(games)
        q = _initial_order(src["world_q"].to(engine.device), slot_of_pos)
        key = (torch.arange(G, device=engine.device)[:, None] * (1 << 32) + ranks).reshape(-1)
        uniq, first = _first_of_each(key)
        g_of = torch.div(first, N, rounding_mode="floor")
        caches.control.rows = (uniq, q.reshape(G * N, 7)[first], legal.bool()[g_of])

    def log_weights(self, sub, n: int):
        """The stored worlds' log weights [G', n] of the games `sub`, or None (the engine
        weighs them itself)."""
        if not self.weights:
            return None
        if n != self.n_stored:
            raise RelabelError(f"stored weights are for {self.n_stored} worlds, the relabel "
                               f"asks {n}")
        return self._now["world_weight"][sub.cpu()].double().log().to(sub.device)

    def select(self, games, mean: torch.Tensor, legal: torch.Tensor) -> Selection:
        """The source's move (initial slot) and exploration mode; q_gap under the new E[Q]."""
        src = self._now
        slot_of_pos = current_hand_order(games)
        taken = src["action_taken"].to(slot_of_pos.device)
        slot = slot_of_pos.gather(1, taken[:, None])[:, 0]
        if bool((slot < 0).any()):
            raise RelabelError("a source action_taken is beyond the actor's hand")
        q = mean.double()
        best = torch.where(legal.bool(), q, torch.full_like(q, float("-inf"))).max(1).values
        q_gap = best - q.gather(1, slot[:, None])[:, 0]
        mode = src["exploration_mode"].to(slot.device)
        return Selection(slot, mode, q_gap.float(), torch.zeros_like(q_gap, dtype=torch.float32))


def _first_of_each(key: torch.Tensor):
    """(sorted distinct keys, index of each one's first occurrence in `key`)."""
    uniq, inverse = torch.unique(key, return_inverse=True)
    first = torch.full((len(uniq),), len(key), dtype=torch.int64, device=key.device)
    first.scatter_reduce_(0, inverse, torch.arange(len(key), device=key.device), "amin")
    return uniq, first


def relabel_games(engine, source: DecisionRecords, seeds, **script_kw) -> DecisionRecords:
    """The records of the games `seeds` of `source` (every decision of each) labelled by
    `engine` (its oracle, budgets and control variate) on their stored worlds, with the
    source's moves; the KEPT_FIELDS equal the source's (RelabelError otherwise)."""
    script = StoredPlay(source, seeds, **script_kw)
    out = engine.play(seeds, game_idx=script.by_decision[0]["game_idx"], script=script)
    src = script.records
    for name in KEPT_FIELDS:
        if (name in src) != (name in out):
            raise RelabelError(f"field {name}: in the source but not in the relabel, or the "
                               "reverse")
        if name in src and not torch.equal(src[name], out[name]):
            i = int(torch.nonzero((src[name] != out[name]).reshape(len(src), -1).any(1))[0])
            raise RelabelError(f"seed {int(src['seed'][i])}, decision "
                               f"{int(src['decision_idx'][i])}: {name} differs from the source")
    return out
