"""Triton `posterior_log_weights`: behaviour log-likelihood of the observed plays in every
world, then the per-decision stabilization, in two kernels.

Same signature and outputs as the reference `eqfast.engine.posterior.posterior_log_weights`
(read its module doc for the model: A = Q - mean over legal, pi = (1 - beta) softmax(A/tau)
+ beta Unif(legal), the integrity rules, max-subtract / clip to [-delta, 0] / normalize,
and the ESS re-mixing). Float32 like the reference; equal to it within the tolerance of
tests/test_kernel_posterior.py, with the same -inf entries and the same integer and boolean
diagnostics. The reference issues ~120 small torch ops per decision step for this.

1. `_log_likelihood_kernel`, one program per (decision, block of worlds): the
   [BLOCK_N, BLOCK_K, 8] block of Q (K window steps and 7 slots, padded) and legal flags
   at once, the log behaviour probability of each step's observed slot, summed over the
   steps; writes loglik [G, N] and the per-world count of in-hand illegal observations.
2. `_stabilize_kernel`, one program per decision: four passes over its worlds (counts and
   max; log-sum-exp; sum of squared weights, hence the ESS and the re-mixing share; the
   final weights and diagnostics).

Integrity errors are host checks (skipped inside a captured step, as in the reference):
when one fails, the reference runs on the same inputs to raise its detailed message.

Naming: i_ program ids, o_ offsets, m_ masks, p_ pointers, b_ values in registers.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from eqfast.contracts import (PosteriorConfig, PosteriorDiagnostics, check_observations,
                              check_posterior_inputs, check_world_support)
from eqfast.utils.checks import host_checks

BLOCK_S = 8          # the 7 slots padded to a power of two


@triton.jit
def _logaddexp(a, b):
    m = tl.maximum(a, b)
    safe = tl.where(m == float("-inf"), 0.0, m)
    return tl.where(m == float("-inf"), float("-inf"),
                    safe + tl.log(tl.exp(a - safe) + tl.exp(b - safe)))


@triton.jit
def _log_likelihood_kernel(
    q_ptr, legal_ptr, slot_ptr, step_valid_ptr, world_valid_ptr, loglik_ptr, illegal_ptr,
    N, K, n_blocks, inv_tau, log_mix_soft, log_mix_unif,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_S: tl.constexpr,
):
    # the whole [BLOCK_N worlds, BLOCK_K steps, 8 slots] block at once: a world's K rows of
    # Q are contiguous, and the steps are independent until their sum, so no serial loop
    # over K (a loop kept 152 registers live a thread and one dependent chain per world)
    i_pid = tl.program_id(0)
    i_g = (i_pid // n_blocks).to(tl.int64)
    i_b = i_pid % n_blocks
    o_n = i_b.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
    o_k = tl.arange(0, BLOCK_K)
    o_s = tl.arange(0, BLOCK_S)
    m_n = o_n < N
    m_k = o_k < K
    m_nk = m_n[:, None] & m_k[None, :]
    m_nks = m_nk[:, :, None] & (o_s < 7)[None, None, :]
    b_world = tl.load(world_valid_ptr + i_g * N + o_n, mask=m_n, other=0) != 0
    b_step = tl.load(step_valid_ptr + i_g * K + o_k, mask=m_k, other=0) != 0

    o_row = (i_g * N + o_n)[:, None] * K + o_k[None, :]               # [G, N, K] row index
    o_elem = o_row[:, :, None] * 7 + o_s[None, None, :]
    b_q = tl.load(q_ptr + o_elem, mask=m_nks, other=0.0)
    b_legal = tl.load(legal_ptr + o_elem, mask=m_nks, other=0) != 0
    b_slot = tl.load(slot_ptr + o_row, mask=m_nk, other=-1)

    b_n_legal = tl.sum(b_legal.to(tl.int32), axis=2)
    b_n_div = tl.maximum(b_n_legal, 1).to(tl.float32)
    b_mean = tl.sum(tl.where(b_legal, b_q, 0.0), axis=2) / b_n_div
    b_adv = tl.where(b_legal, (b_q - b_mean[:, :, None]) * inv_tau, float("-inf"))
    b_top = tl.max(b_adv, axis=2)
    b_top = tl.where(b_top == float("-inf"), 0.0, b_top)
    b_lse = b_top + tl.log(tl.sum(tl.exp(b_adv - b_top[:, :, None]), axis=2))
    m_obs = (o_s[None, None, :] == b_slot[:, :, None]) & b_legal
    b_adv_obs = tl.sum(tl.where(m_obs, b_adv, 0.0), axis=2)
    b_obs_legal = tl.sum(m_obs.to(tl.int32), axis=2) != 0
    b_log_unif = log_mix_unif - tl.log(b_n_div)
    b_log_pi = _logaddexp(b_adv_obs - b_lse + log_mix_soft, b_log_unif)

    b_on = b_step[None, :] & b_world[:, None] & m_nk
    b_in_hand = b_slot >= 0
    # an observed play from outside the world's hand rules the world out (-inf); a legal
    # one adds its log-probability; an illegal in-hand one adds nothing and is counted
    b_term = tl.where(b_on & b_obs_legal, b_log_pi, 0.0)
    b_term = tl.where(b_on & ~b_in_hand, float("-inf"), b_term)
    b_ll = tl.sum(b_term, axis=1)
    b_illegal = tl.sum((b_on & b_in_hand & ~b_obs_legal).to(tl.int64), axis=1)

    b_ll = tl.where(b_world, b_ll, float("-inf"))
    tl.store(loglik_ptr + i_g * N + o_n, b_ll, mask=m_n)
    tl.store(illegal_ptr + i_g * N + o_n, b_illegal, mask=m_n)


@triton.jit
def _worlds_block(p_ll, p_valid, start, N, fallback, BLOCK_N: tl.constexpr):
    """One block of a decision's worlds: (offsets, in-range mask, valid, log-likelihood,
    consistent). Under `fallback` (no consistent world) every valid world counts, at 0."""
    o_n = start + tl.arange(0, BLOCK_N)
    m_n = o_n < N
    b_valid = (tl.load(p_valid + o_n, mask=m_n, other=0) != 0) & m_n
    b_ll = tl.load(p_ll + o_n, mask=m_n, other=float("-inf"))
    b_ll = tl.where(fallback, tl.where(b_valid, 0.0, b_ll), b_ll)
    b_cons = b_valid & (b_ll > float("-inf")) & (b_ll < float("inf"))
    return o_n, m_n, b_valid, b_ll, b_cons


@triton.jit
def _stabilize_kernel(
    loglik_ptr, world_valid_ptr, logw_ptr,
    ess_ptr, ess_before_ptr, max_w_ptr, n_invalid_ptr, remixed_ptr, lam_ptr, fallback_ptr,
    nll_ptr,
    N, delta, remix_threshold,
    BLOCK_N: tl.constexpr,
):
    i_g = tl.program_id(0).to(tl.int64)
    p_ll = loglik_ptr + i_g * N
    p_valid = world_valid_ptr + i_g * N
    p_logw = logw_ptr + i_g * N
    NEG = float("-inf")

    # pass 1: counts and the largest log-likelihood of a consistent world
    n_valid = tl.zeros([], tl.int32)
    n_cons = tl.zeros([], tl.int32)
    top = tl.full([], NEG, tl.float32)
    for start in range(0, N, BLOCK_N):
        o_n, m_n, b_valid, b_ll, b_cons = _worlds_block(p_ll, p_valid, start, N, False, BLOCK_N)
        n_valid += tl.sum(b_valid.to(tl.int32), axis=0)
        n_cons += tl.sum(b_cons.to(tl.int32), axis=0)
        top = tl.maximum(top, tl.max(tl.where(b_cons, b_ll, NEG), axis=0))
    fallback = n_cons == 0                  # every valid world contradicts: uniform over them
    n_used = tl.where(fallback, n_valid, n_cons)
    top = tl.where(fallback, 0.0, top)

    # pass 2: log-sum-exp of the clipped, shifted log-likelihoods
    total = tl.zeros([], tl.float32)
    for start in range(0, N, BLOCK_N):
        o_n, m_n, b_valid, b_ll, b_cons = _worlds_block(p_ll, p_valid, start, N, fallback,
                                                        BLOCK_N)
        b_shift = tl.where(b_cons, tl.maximum(b_ll - top, -delta), NEG)
        total += tl.sum(tl.exp(b_shift), axis=0)
    log_total = tl.log(total)

    # pass 3: ESS before re-mixing and the share of uniform that lifts it to the threshold
    sum_sq = tl.zeros([], tl.float32)
    for start in range(0, N, BLOCK_N):
        o_n, m_n, b_valid, b_ll, b_cons = _worlds_block(p_ll, p_valid, start, N, fallback,
                                                        BLOCK_N)
        b_w = tl.exp(tl.where(b_cons, tl.maximum(b_ll - top, -delta), NEG) - log_total)
        sum_sq += tl.sum(b_w * b_w, axis=0)
    ess_before = 1.0 / sum_sq
    target = remix_threshold * n_valid.to(tl.float32)
    remix = ess_before < target
    inv_n = 1.0 / n_used.to(tl.float32)
    keep_sq = (1.0 / tl.maximum(target, 1e-30) - inv_n) / tl.maximum(sum_sq - inv_n, 1e-30)
    keep = tl.sqrt(tl.minimum(tl.maximum(keep_sq, 0.0), 1.0))
    lam = tl.where(remix, 1.0 - keep, 0.0)

    # pass 4: final weights, their ESS, largest weight, weighted negative log-likelihood
    sum_sq_final = tl.zeros([], tl.float32)
    max_w = tl.zeros([], tl.float32)
    nll = tl.zeros([], tl.float32)
    for start in range(0, N, BLOCK_N):
        o_n, m_n, b_valid, b_ll, b_cons = _worlds_block(p_ll, p_valid, start, N, fallback,
                                                        BLOCK_N)
        b_logw = tl.where(b_cons, tl.maximum(b_ll - top, -delta), NEG) - log_total
        b_w = tl.exp(b_logw)
        b_mixed = (1.0 - lam) * b_w + lam * tl.where(b_cons, inv_n, 0.0)
        b_logw = tl.where(remix, tl.log(b_mixed), b_logw)
        b_w = tl.where(remix, b_mixed, b_w)
        tl.store(p_logw + o_n, b_logw, mask=m_n)
        sum_sq_final += tl.sum(b_w * b_w, axis=0)
        max_w = tl.maximum(max_w, tl.max(tl.where(m_n, b_w, 0.0), axis=0))
        nll += tl.sum(tl.where(b_cons, b_w * b_ll, 0.0), axis=0)

    tl.store(ess_ptr + i_g, 1.0 / sum_sq_final)
    tl.store(ess_before_ptr + i_g, ess_before)
    tl.store(max_w_ptr + i_g, max_w)
    tl.store(n_invalid_ptr + i_g, (n_valid - n_cons).to(tl.int64))
    tl.store(remixed_ptr + i_g, remix.to(tl.int8))
    tl.store(lam_ptr + i_g, lam)
    tl.store(fallback_ptr + i_g, fallback.to(tl.int8))
    tl.store(nll_ptr + i_g, -nll)


def _launch_config(n: int) -> tuple[int, int]:
    """(BLOCK_N, num_warps) of the stabilization: up to 256 worlds per block, no more
    than n needs."""
    block = min(256, max(16, triton.next_power_of_2(n)))
    return block, max(1, min(4, block // 64))


#: worlds x steps of one likelihood program (BLOCK_N = this / BLOCK_K) and its warps
LIKELIHOOD_ROWS = 256
LIKELIHOOD_WARPS = 4


def _likelihood_config(n: int, k: int, rows: int = LIKELIHOOD_ROWS) -> tuple[int, int]:
    """(BLOCK_N, BLOCK_K) of the likelihood kernel: all K steps of BLOCK_N worlds."""
    block_k = triton.next_power_of_2(max(k, 1))
    block_n = max(1, min(triton.next_power_of_2(n), rows // block_k))
    return block_n, block_k


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A boolean tensor as uint8 without a copy when it is contiguous."""
    t = t.contiguous()
    return t.view(torch.uint8) if t.dtype == torch.bool else t.to(torch.uint8)


def _empty_outputs(G: int, N: int, device) -> dict[str, torch.Tensor]:
    # one allocation point, so the tests can poison what the kernels must overwrite
    f32 = lambda *shape: torch.empty(*shape, dtype=torch.float32, device=device)
    i64 = lambda *shape: torch.empty(*shape, dtype=torch.int64, device=device)
    return {"loglik": f32(G, N), "illegal": i64(G, N), "logw": f32(G, N), "ess": f32(G),
            "ess_before_remix": f32(G), "max_w": f32(G), "n_invalid": i64(G),
            "remixed": torch.empty(G, dtype=torch.bool, device=device), "remix_lambda": f32(G),
            "fallback_uniform": torch.empty(G, dtype=torch.bool, device=device),
            "window_nll": f32(G)}


def _likelihood(q_past, legal_past, observed_slot, step_valid, world_valid, cfg, loglik,
                illegal, rows: int = LIKELIHOOD_ROWS, num_warps: int = LIKELIHOOD_WARPS):
    """Launch the likelihood kernel into loglik [G, N] and illegal [G, N] (`rows` and
    `num_warps` for the launch-configuration sweep, benchmarks/gpu_posterior_tune.py)."""
    G, N, K = q_past.shape[:3]
    block_n, block_k = _likelihood_config(N, K, rows)
    n_blocks = triton.cdiv(N, block_n)
    _log_likelihood_kernel[(G * n_blocks,)](
        q_past.float().contiguous(), _as_bytes(legal_past), observed_slot.long().contiguous(),
        _as_bytes(step_valid), _as_bytes(world_valid), loglik, illegal,
        N, K, n_blocks, 1.0 / cfg.tau,
        math.log1p(-cfg.beta) if cfg.beta < 1 else float("-inf"),
        math.log(cfg.beta) if cfg.beta > 0 else float("-inf"),
        BLOCK_N=block_n, BLOCK_K=block_k, BLOCK_S=BLOCK_S, num_warps=num_warps,
    )


def posterior_log_weights(q_past: torch.Tensor, legal_past: torch.Tensor,
                          observed_slot: torch.Tensor, step_valid: torch.Tensor,
                          cfg: PosteriorConfig = PosteriorConfig(),
                          world_valid: torch.Tensor | None = None
                          ) -> tuple[torch.Tensor, PosteriorDiagnostics]:
    """Normalized posterior log-weights [G, N] and their diagnostics, as the reference."""
    G, N = q_past.shape[:2]
    dev = q_past.device
    if world_valid is None:
        world_valid = torch.ones(G, N, dtype=torch.bool, device=dev)
    check_posterior_inputs(q_past, legal_past, observed_slot, step_valid, world_valid)
    out = _empty_outputs(G, N, dev)
    if G > 0 and N > 0:
        _likelihood(q_past, legal_past, observed_slot, step_valid, world_valid, cfg,
                    out["loglik"], out["illegal"])
        block, warps = _launch_config(N)
        _stabilize_kernel[(G,)](
            out["loglik"], _as_bytes(world_valid), out["logw"], out["ess"],
            out["ess_before_remix"], out["max_w"], out["n_invalid"],
            out["remixed"].view(torch.int8), out["remix_lambda"],
            out["fallback_uniform"].view(torch.int8), out["window_nll"],
            N, cfg.delta, cfg.ess_remix_threshold, BLOCK_N=block, num_warps=warps,
        )
    n_illegal = out["illegal"].sum(1)
    if host_checks():
        # the reference's integrity errors, in its order (observations, then world support)
        if cfg.strict and bool(n_illegal.any()):
            check_observations(legal_past, observed_slot, step_valid, world_valid)
        check_world_support(world_valid, out["fallback_uniform"], cfg.strict)
    diag = {k: out[k] for k in ("ess", "ess_before_remix", "max_w", "n_invalid", "remixed",
                                "remix_lambda", "fallback_uniform", "window_nll")}
    return out["logw"], PosteriorDiagnostics(n_illegal=n_illegal, **diag)
