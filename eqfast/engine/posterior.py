"""Posterior world weights from the recent transcript , on queried oracle output.

For each decision (G of them) and each sampled world (N), the pipeline has re-queried an
oracle (the main one, or the Engine's behaviour_oracle) at the last K plays of the
transcript, in the frame of the player who made each play. This module turns those
per-step Q into log-weights:

    log w_i = sum over valid window steps j of log pi_beh(a_j | I_j(w_i))

(the engines pass the acting player's own plays as invalid steps when
PosteriorConfig.own_plays is False)

with the behaviour model

    A(a)    = Q(a) - mean over legal a' of Q(a')
    p_soft  = softmax over legal of A / tau
    pi_beh  = (1 - beta) p_soft + beta Unif(legal)

computed in log space as logaddexp(log(1-beta) + log_softmax, log(beta) - log n_legal):
exact, and needs no small constant inside a log even when beta = 0.

Integrity, per (game, step, world):
- observed tile not in the actor's reconstructed hand (observed slot -1): the world
  contradicts the transcript, log w = -inf.
- observed tile in hand but illegal there: a reconstruction or rules bug. `strict` raises a
  ValueError naming game, step and world; otherwise the step is skipped for that world
  (contributes 0) and counted in `n_illegal`.

Stabilization, per decision: subtract the max, clip to [-delta, 0] (-inf stays
-inf), normalize. Then ESS-triggered re-mixing, the rule chosen here:

    if ESS < ess_remix_threshold * n_valid:
        w <- (1 - lam) w + lam * Unif(consistent worlds)

with the smallest lam that lifts the ESS exactly to the threshold. With S = sum w^2 and n
consistent (finite log-weight) worlds, sum w'^2 = 1/n + (1-lam)^2 (S - 1/n), so

    (1 - lam)^2 = (1/T - 1/n) / (S - 1/n),   T = ess_remix_threshold * n_valid,

clamped to lam in [0, 1] (lam = 1, plain uniform over the consistent worlds, when T > n).
Worlds that contradict the transcript keep weight 0: re-mixing never resurrects them.
`ess_remix_threshold = 0` turns re-mixing off.

Padding worlds (`world_valid` False, e.g. an enumeration shorter than N) get weight 0 and
are not counted anywhere. A decision whose valid worlds all contradict the transcript
raises in `strict` mode; otherwise it falls back to uniform over its valid worlds and is
flagged in `fallback_uniform`.
"""
from __future__ import annotations

import math

import torch

from ..contracts import (PosteriorConfig, PosteriorDiagnostics, check_observations,  # noqa: F401
                         check_posterior_inputs, check_world_support,
                         illegal_observations)

NEG_INF = float("-inf")


def behaviour_log_likelihood(q_past: torch.Tensor, legal_past: torch.Tensor,
                             observed_slot: torch.Tensor, step_valid: torch.Tensor,
                             cfg: PosteriorConfig, world_valid: torch.Tensor | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Window log-likelihood [G, N] float32 of the observed plays, and n_illegal [G].

    q_past [G,N,K,7] (frame of each step's actor), legal_past [G,N,K,7] bool, observed_slot
    [G,N,K] int (-1 = observed tile not in that actor's reconstructed hand), step_valid [G,K].
    Padding worlds get -inf. Raises on an in-hand illegal observation when cfg.strict.
    """
    G, N, K, _ = q_past.shape
    if world_valid is None:
        world_valid = torch.ones(G, N, dtype=torch.bool, device=q_past.device)
    check_posterior_inputs(q_past, legal_past, observed_slot, step_valid, world_valid)
    q = q_past.float()
    legal = legal_past.bool()
    step_on = step_valid.bool()[:, None, :] & world_valid.bool()[:, :, None]    # [G,N,K]

    n_legal = legal.sum(-1)                                                   # [G,N,K]
    zeros = torch.zeros_like(q)
    mean_legal = torch.where(legal, q, zeros).sum(-1) / n_legal.clamp(min=1)
    adv = (q - mean_legal[..., None]) / cfg.tau
    adv = torch.where(legal, adv, torch.full_like(adv, NEG_INF))
    log_soft = torch.log_softmax(adv, dim=-1)          # NaN only where no slot is legal
    log_mix_soft = math.log1p(-cfg.beta) if cfg.beta < 1 else NEG_INF
    log_mix_unif = math.log(cfg.beta) if cfg.beta > 0 else NEG_INF
    log_unif = log_mix_unif - torch.log(n_legal.clamp(min=1).float())
    log_pi = torch.logaddexp(log_soft + log_mix_soft, log_unif[..., None])      # [G,N,K,7]

    slot = observed_slot.long()
    in_hand = slot >= 0
    slot_c = slot.clamp(0, 6)
    obs_legal = torch.gather(legal, -1, slot_c[..., None])[..., 0] & in_hand
    illegal = illegal_observations(legal, observed_slot, step_valid, world_valid)
    if cfg.strict:
        check_observations(legal, observed_slot, step_valid, world_valid)
    obs_log_pi = torch.gather(log_pi, -1, slot_c[..., None])[..., 0]
    contradicts = step_on & ~in_hand
    scored = step_on & obs_legal
    step_ll = torch.where(scored, obs_log_pi, torch.zeros_like(obs_log_pi))
    step_ll = torch.where(contradicts, torch.full_like(step_ll, NEG_INF), step_ll)
    loglik = step_ll.sum(-1)
    loglik = torch.where(world_valid.bool(), loglik, torch.full_like(loglik, NEG_INF))
    return loglik, illegal.sum(dim=(1, 2))


def stabilize_log_weights(loglik: torch.Tensor, world_valid: torch.Tensor, cfg: PosteriorConfig
                          ) -> tuple[torch.Tensor, dict]:
    """Max-subtract, clip to [-delta, 0], normalize and ESS-remix log-likelihoods [G, N].

    Returns normalized log-weights [G, N] (logsumexp 0 per row, -inf = weight 0) and a dict
    of per-decision diagnostics (see `PosteriorDiagnostics`).
    """
    valid = world_valid.bool()
    loglik = torch.where(valid, loglik.float(), torch.full_like(loglik.float(), NEG_INF))
    consistent = valid & torch.isfinite(loglik)
    n_valid = valid.sum(1)
    n_cons = consistent.sum(1)
    n_invalid = n_valid - n_cons
    fallback = n_cons == 0
    check_world_support(valid, fallback, cfg.strict)
    # fallback rows: uniform over the valid worlds
    loglik = torch.where(fallback[:, None] & valid, torch.zeros_like(loglik), loglik)
    consistent = consistent | (fallback[:, None] & valid)
    n_cons = consistent.sum(1)

    top = loglik.max(dim=1, keepdim=True).values                   # finite: n_cons >= 1
    # clamp() would lift -inf to -delta, so the zero-weight worlds are put back to -inf
    shifted = (loglik - top).clamp(min=-cfg.delta)
    shifted = torch.where(consistent, shifted, torch.full_like(shifted, NEG_INF))
    logw = shifted - torch.logsumexp(shifted, dim=1, keepdim=True)
    w = torch.exp(logw)
    sum_sq = (w * w).sum(1)
    ess_before = 1.0 / sum_sq

    target = cfg.ess_remix_threshold * n_valid.float()
    remix = ess_before < target
    inv_n = 1.0 / n_cons.float()
    keep_sq = (1.0 / target.clamp(min=1e-30) - inv_n) / (sum_sq - inv_n).clamp(min=1e-30)
    keep = torch.sqrt(keep_sq.clamp(0.0, 1.0))
    lam = torch.where(remix, 1.0 - keep, torch.zeros_like(keep))
    unif = torch.where(consistent, inv_n[:, None].expand_as(w), torch.zeros_like(w))
    w_mixed = (1.0 - lam[:, None]) * w + lam[:, None] * unif
    logw = torch.where(remix[:, None], torch.log(w_mixed), logw)
    w = torch.where(remix[:, None], w_mixed, w)

    nll_terms = torch.where(consistent & torch.isfinite(loglik), w * loglik, torch.zeros_like(w))
    diag = {
        "ess": 1.0 / (w * w).sum(1),
        "ess_before_remix": ess_before,
        "max_w": w.max(1).values,
        "n_invalid": n_invalid,
        "remixed": remix,
        "remix_lambda": lam,
        "fallback_uniform": fallback,
        "window_nll": -nll_terms.sum(1),
    }
    return logw, diag


def posterior_log_weights(q_past: torch.Tensor, legal_past: torch.Tensor,
                          observed_slot: torch.Tensor, step_valid: torch.Tensor,
                          cfg: PosteriorConfig = PosteriorConfig(),
                          world_valid: torch.Tensor | None = None
                          ) -> tuple[torch.Tensor, PosteriorDiagnostics]:
    """Normalized posterior log-weights [G, N] (-inf = weight 0) and their diagnostics.

    Shapes as in `behaviour_log_likelihood`; world_valid [G, N] bool (default all True).
    Feed the result to `weighted_moments` as `logw`.
    """
    G, N = q_past.shape[:2]
    if world_valid is None:
        world_valid = torch.ones(G, N, dtype=torch.bool, device=q_past.device)
    loglik, n_illegal = behaviour_log_likelihood(q_past, legal_past, observed_slot, step_valid,
                                                 cfg, world_valid)
    logw, d = stabilize_log_weights(loglik, world_valid, cfg)
    return logw, PosteriorDiagnostics(n_illegal=n_illegal, **d)
