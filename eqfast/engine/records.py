"""Decision records (dataset schema 2.1) from the engine's per-step outputs (their metadata
and summary: eqfast/data/metadata.py).

The engine works in the actor's 7 initial-hand slots (the oracle's slot space); the
dataset indexes the actor's CURRENT hand in hand-token order (docs/DATASET.md). This module
does that remapping once, with `current_hand_order`:

    record[..., i] = engine[..., slot_of_position[i]]   for i < hand size
    record[..., i] = padding (-inf mean, 0 var, False legal) beyond it
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..data.schema import SPLIT_TRAIN, DecisionRecords, policy_entropy, split_of_seed
from .moments import Moments
from .policy import Selection
from .transcript import current_hand_order, transcript_tokens


class ControlVariate(NamedTuple):
    """The control variate's record fields of one step, in initial-slot space: shift [G,7]
    (its correction of the mean), se [G,7] (the corrected mean's standard error), worlds [G]
    (its oracle's worlds; 0 where not applied)."""
    shift: torch.Tensor
    se: torch.Tensor
    worlds: torch.Tensor


def _to_current_order(x: torch.Tensor, slot_of_pos: torch.Tensor, pad) -> torch.Tensor:
    """x [G, ..., 7] in initial-slot order -> current-hand order, `pad` beyond the hand."""
    idx = slot_of_pos.clamp(min=0)
    view = idx.view(idx.shape[0], *([1] * (x.dim() - 2)), 7).expand_as(x)
    out = torch.gather(x, -1, view)
    keep = (slot_of_pos >= 0).view(view.shape[0], *([1] * (x.dim() - 2)), 7)
    return torch.where(keep, out, torch.full_like(out, pad))


def records_from_step(games, moments: Moments, legal: torch.Tensor, selection: Selection, *,
                      n_worlds: torch.Tensor, enumerated: torch.Tensor, game_idx: torch.Tensor,
                      seeds: torch.Tensor, rows: torch.Tensor | None = None,
                      world_q: torch.Tensor | None = None, logw: torch.Tensor | None = None,
                      world_owner: torch.Tensor | None = None,
                      q_pdf: torch.Tensor | None = None,
                      cv: "ControlVariate | None" = None,
                      post: dict | None = None) -> DecisionRecords:
    """Records of one decision step of G games (returned on the CPU).

    games: `BatchedGames` at the decision (before the move is played). In initial-slot
    space: moments (from `weighted_moments`), legal [G,7], selection.slot [G]. Per game:
    n_worlds, enumerated, game_idx, seeds [G]. rows: optional bool mask [G] of the games to
    record (e.g. the unfinished ones). world_q [G,N,7] and logw [G,N] (both or neither):
    store the per-world debug fields; world_owner [G,N,28] (`worlds.world_owners`) stores
    the worlds themselves; q_pdf [G,7,85] (`moments.q_histogram`) each move's distribution;
    cv the control variate's fields (`Engine._control_variate`); post the posterior's
    diagnostics {name: [G]} (`PosteriorDiagnostics` fields, see `posterior_fields`).
    """
    G = games.batch_size
    wanted = rows.bool() if rows is not None else torch.ones(G, dtype=torch.bool,
                                                             device=games.device)
    slot_of_pos = current_hand_order(games)
    chosen = slot_of_pos == selection.slot[:, None]
    if bool((wanted & ~chosen.any(1)).any()):
        g = int(torch.nonzero(wanted & ~chosen.any(1))[0])
        raise ValueError(f"records_from_step: game {g}: selected slot {int(selection.slot[g])} "
                         "is not in the actor's current hand")
    if (world_q is None) != (logw is None):
        raise ValueError("records_from_step: give both world_q and logw, or neither")
    seeds = torch.as_tensor(seeds, dtype=torch.int64)
    split = split_of_seed(seeds).to(games.device)
    tensors = record_tensors(games, moments, legal, selection, n_worlds=n_worlds,
                             enumerated=enumerated, game_idx=game_idx,
                             seeds=seeds.to(games.device), split=split,
                             world_q=world_q, logw=logw, world_owner=world_owner, q_pdf=q_pdf,
                             slot_of_pos=slot_of_pos, cv=cv, post=post)
    tensors = {k: v.contiguous().cpu() for k, v in tensors.items()}
    records = DecisionRecords(tensors)
    return records.select(rows.cpu()) if rows is not None else records


def record_tensors(games, moments: Moments, legal: torch.Tensor, selection: Selection, *,
                   n_worlds, enumerated, game_idx, seeds, split, world_q=None, logw=None,
                   world_owner=None, slot_of_pos=None, q_pdf=None,
                   cv=None, post=None) -> dict[str, torch.Tensor]:
    """The record fields of one decision step as tensors on the games' device.

    Pure device work (no checks, no host reads), so the graph path can keep a whole batch
    of decisions on the device and copy it to the host once; `records_from_step` is the
    checked eager entry. seeds and split are [G] tensors on the device.
    """
    G = games.batch_size
    if slot_of_pos is None:
        slot_of_pos = current_hand_order(games)
    tokens, lengths = transcript_tokens(games)
    legal = legal.bool()
    e_q_mean = _to_current_order(moments.mean.float(), slot_of_pos, float("-inf"))
    e_q_var = _to_current_order(moments.var.float(), slot_of_pos, 0.0)
    legal_cur = _to_current_order(legal, slot_of_pos, False)
    chosen = slot_of_pos == selection.slot[:, None]
    # as64 may return a view of its input (game_idx, seeds): in the graph path those are
    # static input buffers, which is why fast.py clones every record field after a replay
    as64 = lambda x: torch.as_tensor(x, dtype=torch.int64, device=games.device).expand(G)
    n_worlds = as64(n_worlds)
    # 1 / sum w^2 in float32 overshoots N by ~1.5e-5 for N = 100 equal weights; the schema
    # documents ess in [1, n_worlds] (NaN, a row without weight, stays NaN)
    ess = torch.minimum(moments.ess.float(), n_worlds.float()).clamp(min=1.0)
    tensors = {
        "transcript_tokens": tokens,
        "transcript_lengths": lengths.long(),
        "e_q_mean": e_q_mean,
        "e_q_var": e_q_var,
        "legal_mask": legal_cur,
        "action_taken": chosen.long().argmax(1),
        "game_idx": as64(game_idx),
        "decision_idx": games.n_plays.long(),
        "train_mask": split == SPLIT_TRAIN,
        "split": split.to(torch.int8),
        "u_mean": moments.u_mean.float(),
        "u_max": moments.u_max.float(),
        "ess": ess,
        "max_w": moments.max_w.float(),
        "exploration_mode": selection.mode.to(torch.int8),
        "q_gap": selection.q_gap.float(),
        "n_worlds": n_worlds,
        "enumerated": torch.as_tensor(enumerated, dtype=torch.bool, device=games.device).expand(G),
        "actor": games.current_player.to(torch.int8),
        "seed": as64(seeds),
        # the exploration policy's spread (000 §4.7): over the same legal E[Q] either way
        "policy_entropy": policy_entropy(moments.mean, legal),
    }
    if post is not None:
        tensors.update(posterior_fields(post, n_worlds))
    if world_q is not None:
        tensors["world_q"] = _to_current_order(world_q.float(), slot_of_pos, 0.0)
        tensors["world_weight"] = torch.softmax(logw.float(), dim=1)
    if world_owner is not None:
        tensors["world_owner"] = world_owner.to(torch.int8)
    if q_pdf is not None:                  # [G, 7, bins]: reorder the slots, pad with 0
        tensors["q_pdf"] = _to_current_order(q_pdf.float().transpose(1, 2), slot_of_pos,
                                             0.0).transpose(1, 2).contiguous()
    if cv is not None:
        tensors["cv_shift"] = _to_current_order(cv.shift.float(), slot_of_pos, 0.0)
        tensors["cv_se"] = _to_current_order(cv.se.float(), slot_of_pos, 0.0)
        tensors["cv_worlds"] = as64(cv.worlds)
    return tensors


def posterior_fields(post: dict, n_worlds: torch.Tensor) -> dict[str, torch.Tensor]:
    """The posterior's record fields from its diagnostics {name: [G]} (the names of
    `PosteriorDiagnostics`): ess_before_remix clamped to [1, n_worlds] like ess (1 / sum w^2
    in float32 overshoots N slightly for equal weights)."""
    before = torch.minimum(post["ess_before_remix"].float(), n_worlds.float()).clamp(min=1.0)
    return {"ess_before_remix": before,
            "window_nll": post["window_nll"].float() + 0.0,         # -0.0 -> 0.0
            "n_invalid_worlds": post["n_invalid"].long(),
            "n_illegal": post["n_illegal"].long(),
            "remix_lambda": post["remix_lambda"].float(),
            "fallback_uniform": post["fallback_uniform"].bool()}


def outcome_tensors(points_before: torch.Tensor, actor: torch.Tensor,
                    final_points: torch.Tensor) -> dict[str, torch.Tensor]:
    """The outcome fields of R records: points_before [R, 2] (team 0, team 1) at the
    decision, actor [R] seats, final_points [R, 2] at the end of the hand. Pure device work
    (the graph path computes them inside the captured batch)."""
    margin = lambda p: (p[:, 0] - p[:, 1]).float()                       # team-0 frame
    sign = 1.0 - 2.0 * (actor.long() % 2).float()
    return {"realized_to_go": sign * (margin(final_points) - margin(points_before)),
            "final_points": final_points.to(torch.int8)}
