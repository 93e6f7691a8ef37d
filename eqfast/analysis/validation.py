"""Checks of generated E[Q] records against fresh computations (the logic of eqfast-validate).

Every record can be re-derived: a game is a pure function of its deal seed, and the record's
transcript lists every play before the decision. `replay_to_decision` rebuilds the position
(deal from `seed`, declaration from the transcript's declaration token, first leader from
the first play's seat) and replays the transcript's plays with `BatchedGames.play_tile`; the
replayed position must reproduce the record's transcript tokens exactly, else `ReplayError`
(the record does not belong to its seed). Then `Engine.decide` runs the engine stages for
that single decision. Three checks build on this:

(a) Recompute (`recompute_report`): the decision again with fresh worlds (another run seed,
    the record's own number of worlds `n_worlds`, the run's posterior settings), then per
    legal move

        z = (E_fresh - E_rec) / sqrt(se_rec^2 + se_fresh^2 + SE_FLOOR^2),
        se^2 = Var / max(ESS - 1, 1)   (cv_se^2 where a control variate corrected the
                                        label: `schema.label_variance`)

    Var/ESS is the squared standard error of a weighted mean of ESS independent draws; the
    recorded Var is the weighted population variance, which underestimates the spread by a
    factor (ESS - 1)/ESS, hence ESS - 1 (it matters at small N: on a clean 2-game N = 8
    exact-oracle dataset, 135 moves, mean |z| was 0.69 with ESS and 0.65 with ESS - 1). An
    enumerated decision has no sampling error (se = 0): both sides average every consistent
    world, so any difference there is a bug (or a different oracle). SE_FLOOR (0.01 points)
    keeps z finite where both sides are exact: float noise of the oracle gives |z| << 1,
    a tampered value gives a huge z. Under a correct pipeline z is about N(0, 1) on
    sampled decisions: mean |z| ~ 0.80 and P(|z| > 3) ~ 0.3%; far more means the records
    and the engine disagree (wrong oracle, changed rules, corrupted values).

(b) Outcomes (`outcome_report`): the record's E[Q] of the move taken against the realized
    value to go of the game from that decision (the records of a game hold its whole play:
    the decision-27 transcript plus its action), in the actor's frame:

        realized = sign(actor team) * (score_final - score_before_decision)

    with score = team 0 points - team 1 points. This matches the Q semantics (minimax value
    to go, points; a trick's points count when it completes, so points of the trick in
    progress are part of the value to go). Pearson r per decision index and overall, with
    the mean residual (realized - E[Q]). Games whose records are incomplete are skipped.

(c) Exact labels (`exact_report`): for each record, per legal move,

        E_rec    the record (the run's oracle on the run's worlds)
        E_same   the exact solver on the SAME worlds: the run seed and n_worlds reproduce
                 the run's draws bit for bit (draws are keyed by (run seed, game seed,
                 decision) and the world index); with stored worlds (`world_owner`) the
                 reproduction is checked against the file
        E_ref    the exact solver on a FRESH reference: another run seed (another key,
                 so no draw is shared with the record's), `max_enumerate` worlds, or every
                 consistent world when there are at most that many (enumerated)

    and per world the record oracle's Q against the solver's on the same world (the run's
    oracle rebuilt from the metadata, the hybrid's exact tricks included). Reported per
    trick (decision_idx // 4 + 1) and overall:

    oracle-induced error   E_rec - E_same: RMSE and mean abs over legal moves; per world:
                           RMSE of Q_rec - Q_exact, weighted by the world weights
    sampling floor         sqrt(Var_same / ESS): the standard error of a perfect oracle with
                           the record's worlds (0 for enumerated decisions), rms
    sampling error         E_same - E_ref, RMSE (~ the floor, plus the reference's own
                           sqrt(Var/M), also reported)
    total error            E_rec - E_ref, RMSE and mean abs
    decisions              over records with >= 2 legal moves only (a forced move has no
                           choice to get wrong): the record's greedy move (ties within
                           policy.TIE_TOL to the lowest slot, as the policy breaks them) is
                           best under E_ref (argmax agreement), its regret under E_ref, and
                           the same for E_same's move (what exact labels on the same worlds
                           would give)

    With posterior weighting on, E_same and E_ref weigh the worlds with the run's behaviour
    model: its own oracle's where the run had one (--behaviour-oracle), so the comparison
    is of Q alone; else the exact oracle's, so a weight difference counts as oracle error.
"""
from __future__ import annotations

import math
from dataclasses import fields as dc_fields

import numpy as np
import torch

from ..data.schema import DecisionRecords, label_variance
from ..rules.batched import BatchedGames
from ..rules.deal import deal_from_seed
from ..rules.tables import N_SEATS
from ..engine.pipeline import N_DECISIONS, Engine, EngineConfig
from ..engine.policy import TIE_TOL
from ..engine.posterior import PosteriorConfig
from ..engine.transcript import F_DECL, F_HIGH, F_LOW, F_PLAYER, F_TYPE, TYPE_PLAY, transcript_tokens

#: standard-error floor (points) in the recompute z score; see the module doc
SE_FLOOR = 0.01
#: |z| above this flags a move in the recompute check
Z_FLAG = 3.0


class ReplayError(ValueError):
    """A record whose transcript cannot be replayed from its seed (names the record)."""


# ---------------------------------------------------------------------------- transcripts
def _token_tiles(tokens: torch.Tensor) -> torch.Tensor:
    hi, lo = tokens[..., F_HIGH].long(), tokens[..., F_LOW].long()
    return hi * (hi + 1) // 2 + lo


def transcript_plays(tokens: torch.Tensor, length: int) -> tuple[list[int], list[int]]:
    """(tiles, relative players) of the plays in one record's transcript, in play order."""
    live = tokens[:length]
    is_play = live[:, F_TYPE] == TYPE_PLAY
    tiles = _token_tiles(live)[is_play]
    return tiles.tolist(), live[is_play, F_PLAYER].long().tolist()


def _describe(records: DecisionRecords, i: int) -> str:
    return (f"record (game_idx {int(records['game_idx'][i])}, seed {int(records['seed'][i])}, "
            f"decision {int(records['decision_idx'][i])})")


# ---------------------------------------------------------------------------- replay
def replay_to_decision(records: DecisionRecords, device="cpu") -> BatchedGames:
    """BatchedGames at the decision of each record (all records at one decision index).

    Raises ReplayError when a replayed position does not reproduce the record's transcript.
    """
    d = torch.unique(records["decision_idx"])
    if len(d) != 1:
        raise ValueError("replay_to_decision: records must share one decision_idx, "
                         f"got {d.tolist()}")
    d = int(d[0])
    tokens, lengths = records["transcript_tokens"], records["transcript_lengths"]
    seeds = records["seed"].tolist()
    actor = records["actor"].long().tolist()
    plays, leader = [], []
    for i in range(len(records)):
        tiles, rel = transcript_plays(tokens[i], int(lengths[i]))
        if len(tiles) != d:
            raise ReplayError(f"{_describe(records, i)}: transcript holds {len(tiles)} plays")
        plays.append(tiles)
        # the first leader is the seat of play 0 (the actor itself at decision 0)
        leader.append((actor[i] + rel[0]) % N_SEATS if d else actor[i])
    hands = np.stack([deal_from_seed(s) for s in seeds]).astype(np.int64)
    decl = tokens[:, 0, F_DECL].long()
    games = BatchedGames.new(hands, decl, torch.tensor(leader), device=device)
    play_tiles = torch.tensor(plays, dtype=torch.int64, device=device).reshape(len(records), d)
    for j in range(d):
        try:
            games = games.play_tile(play_tiles[:, j])
        except ValueError as e:
            raise ReplayError(f"replay of decision {d}, play {j}: {e} (records do not match "
                              "their seeds' deals)") from None
    got, got_len = transcript_tokens(games)
    bad = ((got.cpu() != tokens).flatten(1).any(1) | (got_len.cpu() != lengths)
           | (games.current_player.cpu() != records["actor"].long()))
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0])
        raise ReplayError(f"{_describe(records, i)}: replaying its seed does not reproduce its "
                          "transcript (wrong seed, deal version or record)")
    return games


def _groups(records: DecisionRecords, by_worlds: bool):
    """{(decision, n): row indices}: rows that one Engine.decide call can handle together."""
    keys = records["decision_idx"] * (1 << 32) + (records["n_worlds"] if by_worlds else 0)
    out = {}
    for key in torch.unique(keys).tolist():
        rows = torch.nonzero(keys == key)[:, 0]
        out[(key >> 32, key & 0xFFFFFFFF)] = rows
    return out


# ---------------------------------------------------------------------------- engine runs
def engine_config(metadata: dict, *, seed: int, n_samples: int,
                  store_worlds: bool = False) -> EngineConfig:
    """EngineConfig of a run as its metadata records it (posterior on or off), with the seed
    and worlds per decision given; greedy selection (the move chosen is not compared)."""
    post = (metadata or {}).get("posterior") or {}
    posterior = None
    if post.get("enabled"):
        names = {f.name for f in dc_fields(PosteriorConfig)}
        posterior = PosteriorConfig(**{k: v for k, v in post.items() if k in names})
    # int8 lives in the oracle module (rebuilt by eqfast-validate); bf16/tf32 in the engine
    precision = (metadata or {}).get("oracle_precision") or "fp32"
    return EngineConfig(n_samples=int(n_samples), seed=int(seed), posterior=posterior,
                        store_worlds=store_worlds,
                        oracle_precision="fp32" if precision == "int8" else precision)


def run_decisions(records: DecisionRecords, oracle, metadata: dict, *, seed: int,
                  n_samples: int | None = None, device="cpu", backend="reference",
                  store_worlds: bool = False, behaviour_oracle=None,
                  progress=None) -> DecisionRecords:
    """Each record's decision re-run by the engine: rows aligned with `records`.

    seed: the run seed of the world draws (the record's run seed reproduces its worlds).
    n_samples: worlds per decision; None = each record's own n_worlds.
    store_worlds: keep the per-world fields (world_q, world_weight, world_owner); needs
    one number of worlds for all rows (n_samples given, or every record's n_worlds equal).
    behaviour_oracle: the posterior's behaviour model when the run had its own
    (--behaviour-oracle); None = `oracle`'s.
    progress(done, total): called with the records re-run so far, after each group of
    records of one decision index (and number of worlds).
    """
    out: list = [None] * len(records)
    done = 0
    for (d, n), rows in _groups(records, by_worlds=n_samples is None).items():
        part = records.select(rows)
        games = replay_to_decision(part, device)
        n = int(n) if n_samples is None else int(n_samples)
        engine = Engine(oracle, engine_config(metadata, seed=seed, n_samples=n,
                                              store_worlds=store_worlds),
                        backend=backend, device=device, behaviour_oracle=behaviour_oracle)
        fresh, _ = engine.decide(games, part["seed"].tolist(), int(d), part["game_idx"])
        for k, r in enumerate(rows.tolist()):
            out[r] = fresh.select(slice(k, k + 1))
        done += len(rows)
        if progress is not None:
            progress(done, len(records))
    if not out:
        return records.select(slice(0, 0))
    fresh = DecisionRecords.cat(out)
    if not torch.equal(fresh["legal_mask"], records["legal_mask"]):
        i = int(torch.nonzero((fresh["legal_mask"] != records["legal_mask"]).any(1))[0])
        raise ReplayError(f"{_describe(records, i)}: recomputed legal moves differ from the record")
    return fresh


# ---------------------------------------------------------------------------- (a) recompute
def recompute_z(records: DecisionRecords, fresh: DecisionRecords) -> torch.Tensor:
    """z [R, 7] float64 per slot (NaN at illegal slots); see the module doc."""
    legal = records["legal_mask"]
    diff = fresh["e_q_mean"].double() - records["e_q_mean"].double()
    den = torch.sqrt(label_variance(records, ess_offset=1.0)
                     + label_variance(fresh, ess_offset=1.0) + SE_FLOOR ** 2)
    z = torch.where(legal, diff, torch.zeros_like(diff)) / den
    return torch.where(legal, z, torch.full_like(z, float("nan")))


def recompute_report(records: DecisionRecords, fresh: DecisionRecords, indices=None,
                     seed: int | None = None) -> dict:
    """Summary of `recompute_z`: mean |z|, share of |z| > 3, and every record flagged."""
    z = recompute_z(records, fresh)
    legal = records["legal_mask"]
    absz = z.abs()[legal]
    indices = list(range(len(records))) if indices is None else [int(i) for i in indices]
    per_record = []
    for k in range(len(records)):
        zk = z[k][legal[k]]
        per_record.append({
            "index": indices[k], "game_idx": int(records["game_idx"][k]),
            "decision_idx": int(records["decision_idx"][k]),
            "enumerated": bool(records["enumerated"][k]),
            "max_abs_z": float(zk.abs().max()),
            "z": [float(v) for v in zk],
        })
    flagged = [r for r in per_record if r["max_abs_z"] > Z_FLAG]
    # N(0, 1) is the reference for sampled decisions only; enumerated ones should give ~0
    both = records["enumerated"][:, None] | fresh["enumerated"][:, None]
    sampled = z.abs()[legal & ~both]
    enumerated = z.abs()[legal & both]
    return {
        "n_records": len(records), "n_moves": int(absz.numel()), "fresh_seed": seed,
        "mean_abs_z": float(absz.mean()) if absz.numel() else None,
        "frac_abs_z_gt_3": float((absz > Z_FLAG).double().mean()) if absz.numel() else None,
        "max_abs_z": float(absz.max()) if absz.numel() else None,
        "n_moves_sampled": int(sampled.numel()),
        "mean_abs_z_sampled": float(sampled.mean()) if sampled.numel() else None,
        "frac_abs_z_gt_3_sampled": (float((sampled > Z_FLAG).double().mean())
                                    if sampled.numel() else None),
        "max_abs_z_enumerated": float(enumerated.max()) if enumerated.numel() else None,
        "n_flagged_records": len(flagged),
        "flagged": [{k: r[k] for k in ("index", "game_idx", "decision_idx", "max_abs_z")}
                    for r in flagged],
        "records": per_record,
    }


# ---------------------------------------------------------------------------- (b) outcomes
def realized_values(records: DecisionRecords, device="cpu") -> tuple[torch.Tensor, dict]:
    """(realized [R] float64, info): value to go of each record's game from its decision, in
    the actor frame; NaN for records of incomplete games (info counts them).

    A game is complete when its decision-27 record is present: its transcript is
    [decl, the last tile in hand, the 27 earlier plays] and its action plays that last
    tile, so it holds the whole play sequence.
    """
    R = len(records)
    realized = torch.full((R,), float("nan"), dtype=torch.float64)
    games_u, game_of = torch.unique(records["game_idx"], return_inverse=True)
    is_last = records["decision_idx"] == N_DECISIONS - 1
    # one decision-27 row per game (any one, should a game appear twice)
    last_of_game = torch.full((len(games_u),), -1, dtype=torch.int64)
    rows = torch.nonzero(is_last)[:, 0]
    last_of_game[game_of[rows.flip(0)]] = rows.flip(0)
    complete = last_of_game >= 0
    info = {"n_games": len(games_u), "n_complete_games": int(complete.sum())}
    if not bool(complete.any()):
        return realized, info
    last = records.select(last_of_game[complete])
    tokens = last["transcript_tokens"]
    tiles = _token_tiles(tokens)
    if bool((last["transcript_lengths"] != 2 + N_DECISIONS - 1).any()):
        raise ReplayError("a decision-27 record whose transcript does not hold 27 plays")
    seqs = torch.cat([tiles[:, 2:2 + N_DECISIONS - 1], tiles[:, 1:2]], dim=1).to(device)
    # replay every complete game from its deal, keeping the score before each play;
    # the first leader is the seat of play 0 (token 2)
    hands = np.stack([deal_from_seed(s) for s in last["seed"].tolist()]).astype(np.int64)
    leader = (last["actor"].long() + tokens[:, 2, F_PLAYER].long()) % N_SEATS
    games = BatchedGames.new(hands, tokens[:, 0, F_DECL].long(), leader, device=device)
    G = len(last)
    score_before = torch.zeros(G, N_DECISIONS, dtype=torch.int64)
    actor_at = torch.zeros(G, N_DECISIONS, dtype=torch.int64)
    for j in range(N_DECISIONS):
        score_before[:, j] = games.score().cpu()
        actor_at[:, j] = games.current_player.cpu()
        try:
            games = games.play_tile(seqs[:, j])
        except ValueError as e:
            raise ReplayError(f"full replay, play {j}: {e} (records do not match their "
                              "seeds' deals)") from None
    final = games.score().cpu()

    # every record of a complete game: same actor and same move as the replayed game
    k_of_game = torch.cumsum(complete.long(), 0) - 1
    has = complete[game_of]
    r_idx = torch.nonzero(has)[:, 0]
    k = k_of_game[game_of[r_idx]]
    d = records["decision_idx"][r_idx]
    actor = actor_at[k, d]
    pos = (1 + records["action_taken"][r_idx]).clamp(max=tiles.shape[1] - 1)
    rec_tiles = _token_tiles(records["transcript_tokens"][r_idx])
    taken = rec_tiles.gather(1, pos[:, None])[:, 0]
    bad = (actor != records["actor"][r_idx].long()) | (taken != seqs.cpu()[k, d])
    if bool(bad.any()):
        r = int(r_idx[torch.nonzero(bad)[0]])
        raise ReplayError(f"{_describe(records, r)}: actor or move taken differs from its "
                          "game's decision-27 transcript")
    sign = torch.where(actor % 2 == 0, 1.0, -1.0).double()
    realized[r_idx] = sign * (final[k] - score_before[k, d]).double()
    return realized, info


def pearson(x: torch.Tensor, y: torch.Tensor):
    """Pearson r of two samples; None below 3 points or with no spread."""
    if len(x) < 3:
        return None
    xc, yc = x - x.mean(), y - y.mean()
    den = math.sqrt(float((xc * xc).sum()) * float((yc * yc).sum()))
    return float((xc * yc).sum()) / den if den > 0 else None


def outcome_report(records: DecisionRecords, device="cpu") -> dict:
    """Pearson r of E[Q] of the move taken vs the realized value to go, per decision index:
    the records' own `realized_to_go` where stored, else replayed from the deals."""
    if records.has_outcomes:
        realized = records["realized_to_go"].double()
        games = torch.unique(records["game_idx"])
        info = {"n_games": len(games), "n_complete_games": len(games), "source": "records"}
    else:
        realized, info = realized_values(records, device)
        info["source"] = "replay"
    taken = records["e_q_mean"].double().gather(1, records["action_taken"][:, None])[:, 0]
    ok = ~torch.isnan(realized)
    x, y, d = taken[ok], realized[ok], records["decision_idx"][ok]

    def stats(m):
        resid = y[m] - x[m]
        n = int(m.sum())
        return {"n": n, "pearson_r": pearson(x[m], y[m]),
                "mean_residual": float(resid.mean()) if n else None,
                "rmse": float(resid.pow(2).mean().sqrt()) if n else None}

    return {**info, "n_records": int(ok.sum()),
            "overall": stats(torch.ones_like(d, dtype=torch.bool)),
            "by_decision": {int(k): stats(d == k) for k in torch.unique(d).tolist()}}


# ---------------------------------------------------------------------------- (c) exact
def trick_of(records: DecisionRecords) -> torch.Tensor:
    """Trick number 1..7 [R] of each record's decision."""
    return records["decision_idx"] // 4 + 1


def greedy_slot(e_q: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """The policy's greedy slot [R]: lowest legal slot within TIE_TOL of the best E[Q]."""
    q = torch.where(legal, e_q.double(), torch.full_like(e_q, float("-inf"), dtype=torch.float64))
    best = q.max(1).values
    return (legal & (q >= best[:, None] - TIE_TOL)).long().argmax(1)


def _world_sq_error(rec: DecisionRecords, same: DecisionRecords) -> torch.Tensor:
    """Per record [R]: world-weighted mean over worlds and legal moves of (Q_rec - Q_exact)^2
    on the same worlds (NaN where the per-world fields are missing)."""
    R = len(rec)
    if "world_q" not in rec or "world_q" not in same or rec["world_q"].shape != same["world_q"].shape:
        return torch.full((R,), float("nan"), dtype=torch.float64)
    d2 = (rec["world_q"].double() - same["world_q"].double()) ** 2          # [R, N, 7]
    legal = rec["legal_mask"][:, None, :]
    w = rec["world_weight"].double()[:, :, None]
    per_move = (w * torch.where(legal, d2, torch.zeros_like(d2))).sum(1)    # [R, 7]
    return per_move.sum(1) / rec["legal_mask"].sum(1).clamp(min=1)


def exact_metrics(rows: torch.Tensor, legal, rec, sam, ref, floor2, ref_floor2, world_sq,
                  choice) -> dict:
    """The figures of one table row (see the module doc) over the records `rows` (bool [R])."""
    lm = legal & rows[:, None]
    n_moves = int(lm.sum())

    def rmse(a, b):
        return float(((a - b)[lm] ** 2).mean().sqrt()) if n_moves else None

    def mae(a, b):
        return float((a - b)[lm].abs().mean()) if n_moves else None

    multi = rows & (legal.sum(1) >= 2)
    n_dec = int(multi.sum())
    ref_best = torch.where(legal, ref, torch.full_like(ref, float("-inf"))).max(1).values

    def regret(slot):
        return ref_best - ref.gather(1, slot[:, None])[:, 0]

    r_rec, r_same = regret(choice["rec"]), regret(choice["same"])
    agree_same = sam.gather(1, choice["rec"][:, None])[:, 0] >= \
        torch.where(legal, sam, torch.full_like(sam, float("-inf"))).max(1).values - TIE_TOL
    ws = world_sq[rows & ~torch.isnan(world_sq)]
    mean = lambda x: float(x.double().mean()) if n_dec else None
    return {
        "n_records": int(rows.sum()), "n_moves": n_moves, "n_decisions": n_dec,
        "oracle_rmse": rmse(rec, sam), "oracle_mae": mae(rec, sam),
        "oracle_world_rmse": float(ws.mean().sqrt()) if ws.numel() else None,
        "sampling_floor_rms": float(floor2[lm].mean().sqrt()) if n_moves else None,
        "sampling_rmse": rmse(sam, ref),
        "reference_floor_rms": float(ref_floor2[lm].mean().sqrt()) if n_moves else None,
        "total_rmse": rmse(rec, ref), "total_mae": mae(rec, ref),
        "argmax_agreement": mean(r_rec[multi] <= TIE_TOL),
        "argmax_agreement_same_worlds": mean(agree_same[multi]),
        "mean_regret": mean(r_rec[multi]),
        "exact_same_worlds_regret": mean(r_same[multi]),
    }


def exact_report(records: DecisionRecords, same: DecisionRecords, ref: DecisionRecords,
                 rec_again: DecisionRecords | None = None, indices=None) -> dict:
    """Label error of the records against exact E[Q], per trick and overall (module doc).

    same: the exact oracle on the records' own worlds; ref: the exact oracle on a fresh
    reference; rec_again: the records' oracle re-run on the same worlds (per-world Q), or
    None; rows aligned with `records`. Per-world figures need world_q in `same` and in
    `rec_again` (else in `records`, from --store-worlds).
    """
    legal = records["legal_mask"]
    rec, sam, ex = (r["e_q_mean"].double() for r in (records, same, ref))
    rec_worlds = rec_again if rec_again is not None and "world_q" in rec_again else records
    world_sq = _world_sq_error(rec_worlds, same)
    floor2, ref_floor2 = label_variance(same), label_variance(ref)
    choice = {"rec": greedy_slot(rec, legal), "same": greedy_slot(sam, legal)}
    args = (legal, rec, sam, ex, floor2, ref_floor2, world_sq, choice)
    trick = trick_of(records)
    R = len(records)
    out = {**exact_metrics(torch.ones(R, dtype=torch.bool), *args),
           "by_trick": {int(t): exact_metrics(trick == t, *args)
                        for t in torch.unique(trick).tolist()},
           "exact_enumerated_fraction": float(ref["enumerated"].double().mean()) if R else None,
           "forced_fraction": float((legal.sum(1) < 2).double().mean()) if R else None,
           "worlds_mismatch": int((same["n_worlds"] != records["n_worlds"]).sum())}
    if "world_owner" in records and "world_owner" in same:
        # the file's worlds against the re-drawn ones: the same-world split is exact only if equal
        out["stored_worlds_mismatch"] = int(
            (records["world_owner"] != same["world_owner"]).flatten(1).any(1).sum())
    main = rec
    if "cv_shift" in records:
        # a control variate moved each E[Q] by cv_shift: without it, the records' oracle's
        # own mean on the records' worlds is left, which is what a re-run reproduces
        shift = records["cv_shift"].double()
        main = rec - shift
        out["control_variate"] = {
            "shift_rms": float(shift[legal].pow(2).mean().sqrt()) if bool(legal.any()) else None,
            "applied_fraction": float((records["cv_worlds"] > 0).double().mean())}
    if rec_again is not None:
        diff = (rec_again["e_q_mean"].double() - main)[legal].abs()
        out["reproduced_max_abs_diff"] = float(diff.max()) if diff.numel() else None
    indices = list(range(R)) if indices is None else [int(i) for i in indices]
    out["records"] = [{
        "index": indices[k], "game_idx": int(records["game_idx"][k]),
        "decision_idx": int(records["decision_idx"][k]), "n_legal": int(legal[k].sum()),
        "exact_enumerated": bool(ref["enumerated"][k]), "n_worlds_ref": int(ref["n_worlds"][k]),
        "oracle_mae": float((rec[k] - sam[k]).abs()[legal[k]].mean()),
        "sampling_mae": float((sam[k] - ex[k]).abs()[legal[k]].mean()),
        "regret": float(ex[k][legal[k]].max() - ex[k][choice["rec"][k]]),
    } for k in range(R)]
    return out


# ---------------------------------------------------------------------------- sampling
def pick_records(records: DecisionRecords, k: int, seed: int = 0,
                 decisions: tuple[int, int] | None = None) -> torch.Tensor:
    """Up to k record indices, uniformly without replacement (sorted), among decisions
    [lo, hi] when given."""
    ok = torch.ones(len(records), dtype=torch.bool)
    if decisions is not None:
        d = records["decision_idx"]
        ok = (d >= decisions[0]) & (d <= decisions[1])
    pool = torch.nonzero(ok)[:, 0]
    gen = torch.Generator().manual_seed(int(seed))
    pick = pool[torch.randperm(len(pool), generator=gen)[:max(0, int(k))]]
    return torch.sort(pick).values
