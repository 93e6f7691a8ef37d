"""Triton `weighted_moments`: posterior mean/variance of per-world Q in one pass over memory.

Same signature and outputs as the reference `eqfast.engine.moments.weighted_moments`
(read its module doc for the definitions). One program per decision streams the decision's
N worlds in blocks of BLOCK_N, keeping a running max-rescaled weight sum and a running
weighted mean / second central moment per slot, merged block by block with the weighted
form of Chan's parallel update:

    M2 = M2_a + M2_b + (mean_b - mean_a)^2 * W_a W_b / (W_a + W_b)

so Q and the log-weights are read exactly once and the variance never goes through
E[x^2] - E[x]^2. When a block raises the running max, the old sums are scaled by
exp(old_max - new_max) (as in online softmax). -inf log-weights give weight 0 and their Q
is never used; a row whose log-weights are all -inf writes NaN everywhere, as the
reference does.

Naming: i_ program ids, o_ offsets, m_ masks, p_ pointers, b_ values in registers.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from eqfast.contracts import Moments

N_SLOTS = 7
BLOCK_K = 8          # the 7 slots padded to a power of two


@triton.jit
def _weighted_moments_kernel(
    q_ptr, legal_ptr, logw_ptr,
    mean_ptr, var_ptr, ess_ptr, max_w_ptr, u_mean_ptr, u_max_ptr,
    G, N,
    stride_qg, stride_qn, stride_qk,
    stride_lg, stride_lk,
    stride_wg, stride_wn,
    N_SLOTS: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """For each decision g of this program's BLOCK_G: w_n = exp(logw_n - max), p = w / sum w;
    writes mean_k = sum p q_k, var_k = sum p (q_k - mean_k)^2, ess = 1/sum p^2,
    max_w = max p, and the mean / max of sqrt(var) over the legal slots (0 when none is
    legal). Tiles are [BLOCK_G, BLOCK_N, BLOCK_K]: several decisions per program keep more
    loads in flight than one decision of N = 100 worlds does."""
    o_g = tl.program_id(0).to(tl.int64) * BLOCK_G + tl.arange(0, BLOCK_G).to(tl.int64)
    m_g = o_g < G
    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < N_SLOTS

    b_max = tl.full([BLOCK_G], float("-inf"), tl.float32)   # running max of the log-weights
    b_sum = tl.zeros([BLOCK_G], dtype=tl.float32)           # sum of exp(logw - b_max)
    b_sum_sq = tl.zeros([BLOCK_G], dtype=tl.float32)        # sum of exp(logw - b_max)^2
    b_mean = tl.zeros([BLOCK_G, BLOCK_K], dtype=tl.float32)
    b_m2 = tl.zeros([BLOCK_G, BLOCK_K], dtype=tl.float32)

    for n0 in range(0, N, BLOCK_N):
        o_n = n0 + tl.arange(0, BLOCK_N)
        m_gn = m_g[:, None] & (o_n < N)[None, :]                       # [G, N]
        p_w = logw_ptr + o_g[:, None] * stride_wg + o_n[None, :] * stride_wn
        b_logw = tl.load(p_w, mask=m_gn, other=float("-inf")).to(tl.float32)
        p_q = (q_ptr + o_g[:, None, None] * stride_qg + o_n[None, :, None] * stride_qn
               + o_k[None, None, :] * stride_qk)
        b_q = tl.load(p_q, mask=m_gn[:, :, None] & m_k[None, None, :], other=0.0).to(tl.float32)

        new_max = tl.maximum(b_max, tl.max(b_logw, axis=1))
        safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)   # all -inf so far
        rescale = tl.exp(b_max - safe_max)                           # 0 while b_max = -inf
        b_w = tl.exp(b_logw - safe_max[:, None])                     # 0 for -inf weights
        live = b_w[:, :, None] > 0
        b_q = tl.where(live, b_q, 0.0)                               # never read a dead Q

        blk_sum = tl.sum(b_w, axis=1)
        blk_mean = tl.sum(b_w[:, :, None] * b_q, axis=1) / tl.maximum(blk_sum, 1e-30)[:, None]
        b_dev = tl.where(live, b_q - blk_mean[:, None, :], 0.0)
        blk_m2 = tl.sum(b_w[:, :, None] * b_dev * b_dev, axis=1)

        old_sum = b_sum * rescale
        new_sum = old_sum + blk_sum
        frac = blk_sum / tl.maximum(new_sum, 1e-30)                  # 0 when both are empty
        delta = blk_mean - b_mean
        b_mean = b_mean + delta * frac[:, None]
        b_m2 = b_m2 * rescale[:, None] + blk_m2 + delta * delta * (old_sum * frac)[:, None]
        b_sum_sq = b_sum_sq * rescale * rescale + tl.sum(b_w * b_w, axis=1)
        b_sum = new_sum
        b_max = new_max

    dead = b_sum == 0.0                                               # every logw was -inf
    nan = float("nan")
    b_var = tl.maximum(b_m2 / b_sum[:, None], 0.0)
    b_var = tl.where(dead[:, None], nan, b_var)
    b_mean = tl.where(dead[:, None], nan, b_mean)
    m_gk = m_g[:, None] & m_k[None, :]
    o_gk = o_g[:, None] * N_SLOTS + o_k[None, :]
    tl.store(mean_ptr + o_gk, b_mean, mask=m_gk)
    tl.store(var_ptr + o_gk, b_var, mask=m_gk)
    tl.store(ess_ptr + o_g, tl.where(dead, nan, b_sum * b_sum / b_sum_sq), mask=m_g)
    tl.store(max_w_ptr + o_g, tl.where(dead, nan, 1.0 / b_sum), mask=m_g)   # top weight exp(0)

    p_l = legal_ptr + o_g[:, None] * stride_lg + o_k[None, :] * stride_lk
    b_legal = tl.load(p_l, mask=m_gk, other=0) != 0
    b_sd = tl.where(b_legal, tl.sqrt(b_var), 0.0)
    n_legal = tl.sum(b_legal.to(tl.float32), axis=1)
    u_mean = tl.sum(b_sd, axis=1) / tl.maximum(n_legal, 1.0)
    u_max = tl.max(b_sd, axis=1)
    tl.store(u_mean_ptr + o_g, tl.where(dead, nan, u_mean), mask=m_g)
    tl.store(u_max_ptr + o_g, tl.where(dead, nan, u_max), mask=m_g)


#: (BLOCK_G, num_warps) of the launch, chosen on an H200 with benchmarks/gpu_moments_tune.py
#: (N = 100, CUDA-graph replays): one decision per program and one warp was the fastest of
#: 16 configurations at G = 256, 1024 and 65,536 (0.0953 ms at 65,536, 53% of the copy
#: bandwidth, against 0.1458 ms with 4 warps): the kernel is issue-bound (ncu: SM 86%,
#: DRAM 30% with 4 warps), and one warp reduces over worlds within its lanes instead of
#: through shared memory. Fixed, not chosen per call: the warps set the float rounding
#: of the sums, and records must not depend on the batch size.
MOMENTS_CONFIG = {"block_g": 1, "num_warps": 1}


def _launch_config(n_worlds: int, block_g: int | None = None,
                   num_warps: int | None = None) -> tuple[int, int, int]:
    """(BLOCK_G, BLOCK_N, num_warps): tiles of BLOCK_G decisions x at most 128 worlds per
    step (N = 100 fits one block)."""
    block_n = min(128, max(16, triton.next_power_of_2(n_worlds)))
    block_g = MOMENTS_CONFIG["block_g"] if block_g is None else block_g
    num_warps = num_warps or MOMENTS_CONFIG["num_warps"] or \
        max(1, min(8, block_g * (4 if block_n >= 128 else 2)))
    return block_g, block_n, num_warps


def _launch(q: torch.Tensor, legal: torch.Tensor, logw: torch.Tensor,
            block_g: int | None = None, num_warps: int | None = None) -> Moments:
    if q.dim() != 3 or q.shape[2] != N_SLOTS:
        raise ValueError(f"q must be [G, N, 7], got {tuple(q.shape)}")
    G, N, _ = q.shape
    if tuple(legal.shape) != (G, N_SLOTS):
        raise ValueError(f"legal must be [G, 7] = [{G}, 7], got {tuple(legal.shape)}")
    if tuple(logw.shape) != (G, N):
        raise ValueError(f"logw must be [G, N] = [{G}, {N}], got {tuple(logw.shape)}")
    if legal.dtype == torch.bool:
        legal = legal.view(torch.uint8)        # same bytes, a type Triton loads everywhere
    dev = q.device
    mean = torch.empty(G, N_SLOTS, dtype=torch.float32, device=dev)
    var = torch.empty(G, N_SLOTS, dtype=torch.float32, device=dev)
    ess, max_w, u_mean, u_max = (torch.empty(G, dtype=torch.float32, device=dev) for _ in range(4))
    if G == 0 or N == 0:                       # no world at all: no distribution (NaN rows)
        for t in (mean, var, ess, max_w, u_mean, u_max):
            t.fill_(float("nan"))
        return Moments(mean, var, ess, max_w, u_mean, u_max)
    block_g, block_n, num_warps = _launch_config(N, block_g, num_warps)
    _weighted_moments_kernel[(triton.cdiv(G, block_g),)](
        q, legal, logw, mean, var, ess, max_w, u_mean, u_max,
        G, N,
        q.stride(0), q.stride(1), q.stride(2),
        legal.stride(0), legal.stride(1),
        logw.stride(0), logw.stride(1),
        N_SLOTS=N_SLOTS, BLOCK_G=block_g, BLOCK_N=block_n, BLOCK_K=BLOCK_K, num_warps=num_warps,
    )
    return Moments(mean, var, ess, max_w, u_mean, u_max)


def weighted_moments(q: torch.Tensor, legal: torch.Tensor, logw: torch.Tensor) -> Moments:
    """Triton twin of `eqfast.engine.moments.weighted_moments` (same inputs, same outputs)."""
    return _launch(q, legal, logw)
