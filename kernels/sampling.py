"""Triton `completion_counts` and `sample_worlds`: exact-uniform world sampling.

`completion_counts(info)`: one program per decision runs the reference's dynamic program
(`eqfast.engine.sampling.completion_counts`, read its module doc) over the 21 pool
positions with the 64 (a, b) states in registers: one launch where the PyTorch version
issues ~350 small ops per decision step. The state shifts (seat 0 takes the tile:
a -> a - 1, i.e. state - 8; seat 1: state - 1) are sums over a fixed 64 x 64 one-hot shift
matrix, so every program stays in registers and needs no barrier. Exact int64 arithmetic:
equal to the reference bit for bit.

`sample_worlds`: one program per block of worlds.

Same signature and outputs, bit for bit, as the reference
`eqfast.engine.sampling.sample_worlds(info, counts, keys, n)` (read its module doc for the
counting, the rank order and the draw rule). Each program takes BLOCK_N consecutive worlds
of one decision: it draws their ranks with `tl.randint4x(key, world index)` (the reference's
`uniform_u64` = (r1 << 31) | (r0 >> 1), then % total; or world index % total when the
decision is enumerated), then walks the pool tiles, reading the decision's completion-count
table (22 x 64 int32, 5.5 KB, stays in L1/L2) to pick each tile's owner, and writes
owner [G, N, 21] int8.

Counts and ranks are below 21!/(7!)^3 < 2**29, so the walk runs in int32 (the table is cast
once by the launcher); only the 63-bit draw and its modulo use int64.

Naming: i_ program ids, o_ offsets, m_ masks, p_ pointers, b_ values in registers.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from eqfast.contracts import (MAX_POOL, N_NEED, N_STATES, HiddenInfo, WorldSample,
                              checked_sample_args, make_sample)


@triton.jit
def _completion_counts_kernel(
    allowed_ptr, n_pool_ptr, counts_ptr,
    MAX_POOL: tl.constexpr, N_NEED: tl.constexpr, N_STATES: tl.constexpr,
):
    """counts[g, i, s] (s = a*8 + b) for i = MAX_POOL down to 0, as the reference."""
    i_g = tl.program_id(0).to(tl.int64)
    o_s = tl.arange(0, N_STATES)                  # state this lane computes
    b_a = o_s // N_NEED
    b_b = o_s % N_NEED
    o_src = tl.arange(0, N_STATES)[:, None]       # state read from row i + 1
    # to0[s] = next[s - 8] if a >= 1; to1[s] = next[s - 1] if b >= 1 (one-hot columns)
    m_shift0 = (o_src == o_s[None, :] - N_NEED) & (b_a >= 1)[None, :]
    m_shift1 = (o_src == o_s[None, :] - 1) & (b_b >= 1)[None, :]

    b_n_pool = tl.load(n_pool_ptr + i_g)
    b_base = (o_s == 0).to(tl.int64)              # nothing left to give: a == b == 0
    p_counts = counts_ptr + i_g * ((MAX_POOL + 1) * N_STATES)
    tl.store(p_counts + MAX_POOL * N_STATES + o_s, b_base)
    b_next = b_base
    for j in range(0, MAX_POOL):
        i = MAX_POOL - 1 - j
        b_allowed = tl.load(allowed_ptr + i_g * MAX_POOL + i)
        b_to0 = tl.sum(tl.where(m_shift0, b_next[:, None], 0), axis=0)
        b_to1 = tl.sum(tl.where(m_shift1, b_next[:, None], 0), axis=0)
        b_c = b_n_pool - i - b_a - b_b            # seat 2 still needs c tiles
        b_to2 = tl.where(b_c >= 1, b_next, 0)
        b_here = (b_to0 * (b_allowed & 1) + b_to1 * ((b_allowed >> 1) & 1)
                  + b_to2 * ((b_allowed >> 2) & 1))
        b_row = tl.where(i < b_n_pool, b_here, b_base)
        tl.store(p_counts + i * N_STATES + o_s, b_row)
        b_next = b_row


def _empty_counts(G: int, device) -> torch.Tensor:
    # one allocation point, so the tests can poison what the kernel must overwrite
    return torch.empty(G, MAX_POOL + 1, N_NEED, N_NEED, dtype=torch.int64, device=device)


def completion_counts(info: HiddenInfo) -> torch.Tensor:
    """counts [G, 22, 8, 8] int64 of consistent completions; equal to the reference."""
    G = info.batch_size
    counts = _empty_counts(G, info.device)
    if G == 0:
        return counts
    _completion_counts_kernel[(G,)](
        info.allowed.contiguous(), info.n_pool.contiguous(), counts,
        MAX_POOL=MAX_POOL, N_NEED=N_NEED, N_STATES=N_STATES, num_warps=4,
    )
    return counts


@triton.jit
def _sample_worlds_kernel(
    counts_ptr, allowed_ptr, n_pool_ptr, sizes_ptr, keys_ptr, total_ptr, owner_ptr,
    N, n_blocks,
    MAX_POOL: tl.constexpr, N_NEED: tl.constexpr, N_STATES: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """owner[g, n, i] = hidden seat (0..2) of pool tile i in world n of decision g,
    -1 for i >= n_pool[g]; world n is the one of rank r(n) in the reference's order."""
    i_pid = tl.program_id(0)
    i_g = (i_pid // n_blocks).to(tl.int64)
    i_b = i_pid % n_blocks
    o_n = i_b.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
    m_n = o_n < N

    b_key = tl.load(keys_ptr + i_g)
    b_total = tl.load(total_ptr + i_g)
    b_n_pool = tl.load(n_pool_ptr + i_g).to(tl.int32)
    b_size0 = tl.load(sizes_ptr + i_g * 3 + 0).to(tl.int32)
    b_size1 = tl.load(sizes_ptr + i_g * 3 + 1).to(tl.int32)

    # ranks: enumerate when every world fits, else Philox(key, world index) % total
    r0, r1, _, _ = tl.randint4x(b_key, o_n)
    b_u = (r1.to(tl.uint64) << 31) | (r0 >> 1).to(tl.uint64)
    b_drawn = b_u.to(tl.int64) % b_total
    b_rank = tl.where(b_total <= N, o_n % b_total, b_drawn).to(tl.int32)

    b_state = tl.zeros([BLOCK_N], tl.int32) + b_size0 * N_NEED + b_size1   # a*8 + b
    p_counts = counts_ptr + i_g * ((MAX_POOL + 1) * N_STATES)
    p_owner = owner_ptr + (i_g * N + o_n) * MAX_POOL
    # a loop bound of MAX_POOL (constexpr) with the pool size as a mask, not range(b_n_pool):
    # Triton 3.6's interpreter cannot take a loaded scalar as a loop bound (numpy 2 refuses
    # int() of its 1-element array); the dead iterations only issue masked-off loads
    for i in range(0, MAX_POOL):
        b_live = i < b_n_pool
        b_allowed = tl.load(allowed_ptr + i_g * MAX_POOL + i)
        p_next = p_counts + (i + 1) * N_STATES
        # options in order seat 0, seat 1; seat 2's range is what is left of the rank.
        # (tl.where, not `&`, joins the scalar condition: the interpreter turns
        # block_bool & scalar_bool into an integer mask that tl.load rejects)
        m_0 = tl.where(b_live & ((b_allowed & 1) != 0), m_n & (b_state >= N_NEED), False)
        m_1 = tl.where(b_live & ((b_allowed & 2) != 0), m_n & ((b_state % N_NEED) >= 1), False)
        b_w0 = tl.load(p_next + b_state - N_NEED, mask=m_0, other=0)
        b_w1 = tl.load(p_next + b_state - 1, mask=m_1, other=0)
        b_past0 = b_rank >= b_w0
        b_rank = b_rank - tl.where(b_past0, b_w0, 0)
        b_past1 = b_past0 & (b_rank >= b_w1)
        b_rank = b_rank - tl.where(b_past1, b_w1, 0)
        b_owner = tl.where(b_live, b_past0.to(tl.int8) + b_past1.to(tl.int8),
                           tl.full([BLOCK_N], -1, tl.int8))
        tl.store(p_owner + i, b_owner, mask=m_n)
        b_state = b_state - tl.where(b_past0, 0, N_NEED) - tl.where(b_past0 & ~b_past1, 1, 0)


def _launch_config(n: int) -> tuple[int, int]:
    """(BLOCK_N, num_warps) for n worlds per decision: blocks of up to 256 worlds (one
    world per thread, 8 warps) and no larger than n needs (min 16)."""
    block = min(256, max(16, triton.next_power_of_2(n)))
    return block, max(1, min(8, block // 32))


def _empty_owner(G: int, n: int, device) -> torch.Tensor:
    # one allocation point, so the tests can poison what the kernel must overwrite
    return torch.empty(G, n, MAX_POOL, dtype=torch.int8, device=device)


def _sample_worlds(info: HiddenInfo, counts: torch.Tensor, keys: torch.Tensor, n: int,
                   total: torch.Tensor) -> torch.Tensor:
    G = info.batch_size
    dev = info.device
    owner = _empty_owner(G, n, dev)
    if G == 0:
        return owner
    block, warps = _launch_config(n)
    n_blocks = triton.cdiv(n, block)
    _sample_worlds_kernel[(G * n_blocks,)](
        counts.to(torch.int32).contiguous(), info.allowed.contiguous(), info.n_pool.contiguous(),
        info.sizes.contiguous(), keys.contiguous(), total.contiguous(), owner,
        n, n_blocks,
        MAX_POOL=MAX_POOL, N_NEED=N_NEED, N_STATES=N_STATES, BLOCK_N=block, num_warps=warps,
    )
    return owner


def sample_worlds(info: HiddenInfo, counts: torch.Tensor, keys: torch.Tensor, n: int) -> WorldSample:
    """n worlds per decision, exactly uniform; equal to the reference bit for bit."""
    keys, total = checked_sample_args(info, counts, keys, n)
    owner = _sample_worlds(info, counts, keys, n, total)
    return make_sample(owner, total, n)
