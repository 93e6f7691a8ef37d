"""Stage 2 of the E[Q] engine: exactly uniform world sampling by counting (reference).

A *world* gives each hidden pool tile (see `public.HiddenInfo`) an owner among the three
hidden seats such that every seat gets exactly its remaining hand size and no seat holds
a tile it is known to be void in. Worlds are drawn exactly uniformly over all consistent
completions, with no rejection and no backtracking:

1. `completion_counts(info) -> counts [G, 22, 8, 8] int64`:
   counts[g, i, a, b] = number of ways to give pool tiles i, i+1, ... owners when hidden
   seats 0 and 1 still need a and b tiles (seat 2 needs c = n_pool - i - a - b).
   Dynamic programming from the last tile back; rows i >= n_pool hold [a == b == 0].
   `total = counts[g, 0, sizes0, sizes1]` is the number of consistent worlds; it is at most
   21! / (7!)^3 = 399,072,960 < 2**29, so counts and ranks also fit int32 (kernels).
2. `unrank(info, counts, ranks [G, N]) -> owner [G, N, 21] int8`: the rank-th world in a
   fixed order. Walk the tiles; at each tile the options are seat 0, 1, 2 in that order,
   option k covers `counts` of the state it leads to (0 if seat k may not hold the tile
   or needs no more tiles); pick the option whose range holds the rank and subtract the
   ranges before it. This is a bijection between 0..total-1 and the consistent worlds;
   `rank_worlds` is its inverse. Owner is the hidden seat 0..2, -1 at pool padding.
3. `sample_worlds(info, counts, keys [G] int64, n) -> WorldSample`:
   - total <= n ("enumerated"): world i has rank i % total. Rows i < total are every
     consistent world exactly once (valid True); rows i >= total repeat them (valid
     False), so every row is still a consistent world an oracle can evaluate.
   - total > n: world i has rank uniform_u64(keys[g], i) % total (eqfast.utils.rng:
     Philox-4x32-10 keyed by keys[g], counter = the world index, 63 random bits), so a
     Triton program can draw any world on its own and match this bit for bit.
     Modulo bias: P(rank) differs from 1/total by less than total / 2**63 < 2**-34
     relative, far below any sampling error. The draws are with replacement.
   keys come from `eqfast.rules.deal.mix_seed(seed, game_seed, decision_index, stream)`.

WorldSample: owner [G, N, 21] int8, valid [G, N] bool, n_worlds [G] int64 (distinct worlds
drawn: total if enumerated, else n), enumerated [G] bool, total [G] int64.

Helpers: `total_worlds(info, counts) -> [G]`, `world_ranks(total, keys, n) -> [G, N]` (the
ranks `sample_worlds` unranks, e.g. as world ids for de-duplication), `rank_worlds(info,
counts, owner) -> [G, N]` (inverse of unrank; -1 for an inconsistent world),
`option_table(info, counts)` (the per-tile option ranges unrank reads), `make_sample`.

`eqfast.kernels.sampling.sample_worlds` is the Triton version with the same signature.
"""
from __future__ import annotations


import torch

from ..utils.checks import host_checks
from ..utils.rng import uniform_u64
from ..contracts import (MAX_POOL, N_HIDDEN, N_NEED, N_STATES, HiddenInfo,  # noqa: F401
                         WorldSample, check_totals, checked_sample_args, make_sample,
                         total_worlds)

def completion_counts(info: HiddenInfo) -> torch.Tensor:
    """counts [G, 22, 8, 8] int64 of consistent completions (see module doc, step 1)."""
    may = (info.allowed[:, :, None] >> torch.arange(N_HIDDEN, device=info.device)) & 1
    return pool_completion_counts(may, info.n_pool)


def pool_completion_counts(may: torch.Tensor, n_pool: torch.Tensor,
                           n_need: int = N_NEED) -> torch.Tensor:
    """`completion_counts` from tensors alone (TorchScript-able: the Stage 2 model's
    holder chances count with it): may [G, 21, 3] int64, 1 where hidden seat j may hold
    pool tile i (0 at padding); n_pool [G] the pool tiles of each row."""
    G, n, dev = may.shape[0], may.shape[1], may.device
    need = torch.arange(n_need, device=dev)
    a, b = need[:, None], need[None, :]
    base = ((a == 0) & (b == 0)).long().expand(G, n_need, n_need)
    counts = torch.zeros(G, n + 1, n_need, n_need, dtype=torch.int64, device=dev)
    counts[:, n] = base
    for i in range(n - 1, -1, -1):
        nxt = counts[:, i + 1]
        # seat 0 takes tile i: (a, b) -> (a-1, b); seat 1: (a, b-1); seat 2: c -> c-1
        to0 = torch.nn.functional.pad(nxt[:, :-1, :], (0, 0, 1, 0))
        to1 = torch.nn.functional.pad(nxt[:, :, :-1], (1, 0))
        c = (n_pool - i)[:, None, None] - a - b
        to2 = torch.where(c >= 1, nxt, torch.zeros_like(nxt))
        m = may[:, i, :, None, None]
        here = m[:, 0] * to0 + m[:, 1] * to1 + m[:, 2] * to2
        counts[:, i] = torch.where((i < n_pool)[:, None, None], here, base)
    return counts


def option_table(info: HiddenInfo, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(w0, w1) [21, G, 64]: the rank range of options seat 0 and seat 1 at tile i in state
    s = a*8 + b (seat 2's range is the rest). Zero where the seat may not hold the tile,
    needs no more tiles, or i is padding (then seat 2 is "chosen" and the state is kept).
    Layout [21, G, 64] makes each tile's table one contiguous [G, 64] block."""
    G, dev = info.batch_size, info.device
    nxt = counts[:, 1:]                                               # [G,21,8,8]
    to0 = torch.nn.functional.pad(nxt[:, :, :-1, :], (0, 0, 1, 0))
    to1 = torch.nn.functional.pad(nxt[:, :, :, :-1], (1, 0))
    live = (torch.arange(MAX_POOL, device=dev) < info.n_pool[:, None])
    w0 = to0 * ((info.allowed & 1) * live)[:, :, None, None]
    w1 = to1 * ((info.allowed >> 1 & 1) * live)[:, :, None, None]
    return (w0.reshape(G, MAX_POOL, N_STATES).transpose(0, 1).contiguous(),
            w1.reshape(G, MAX_POOL, N_STATES).transpose(0, 1).contiguous())


def unrank(info: HiddenInfo, counts: torch.Tensor, ranks: torch.Tensor) -> torch.Tensor:
    """owner [G, N, 21] int8 of the worlds with ranks [G, N] (0 <= rank < total)."""
    w0_tab, w1_tab = option_table(info, counts)
    state = (info.sizes[:, 0] * N_NEED + info.sizes[:, 1])[:, None].expand_as(ranks)
    r = ranks.clone()
    owner = torch.empty(*ranks.shape, MAX_POOL, dtype=torch.int8, device=ranks.device)
    # tiles past the longest pool are padding everywhere (filled below): mid-hand this skips
    # about half the loop (one host sync for the bound)
    # (under host_checks_off, e.g. CUDA-graph capture, the loop runs over all 21 positions)
    n_live = (int(info.n_pool.max()) if info.batch_size else 0) if host_checks() else MAX_POOL
    for i in range(n_live):
        w0 = w0_tab[i].gather(1, state)
        w1 = w1_tab[i].gather(1, state)
        past0 = r >= w0                      # not seat 0
        r = r - w0 * past0
        past1 = past0 & (r >= w1)            # not seat 1 either: seat 2
        r = r - w1 * past1
        owner[:, :, i] = past0.to(torch.int8) + past1.to(torch.int8)
        # seat 0 took it: a -= 1 (state -= 8); seat 1: b -= 1 (state -= 1)
        state = state - N_NEED * (~past0) - (past0 & ~past1).long()
    pad = (info.pool < 0)[:, None, :]
    return owner.masked_fill_(pad, -1)


def rank_worlds(info: HiddenInfo, counts: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
    """Inverse of `unrank`: ranks [G, N] int64 of worlds owner [G, N, 21]; -1 for a world
    that is not consistent (a seat holding a tile it may not hold, or wrong hand sizes)."""
    w0_tab, w1_tab = option_table(info, counts)
    owner = owner.long()
    state = (info.sizes[:, 0] * N_NEED + info.sizes[:, 1])[:, None].expand(owner.shape[:2])
    r = torch.zeros(owner.shape[:2], dtype=torch.int64, device=owner.device)
    ok = torch.ones(owner.shape[:2], dtype=torch.bool, device=owner.device)
    rows = torch.arange(info.batch_size, device=owner.device)
    for i in range(MAX_POOL):
        live = (i < info.n_pool)[:, None]
        o = owner[:, :, i]
        w0 = w0_tab[i].gather(1, state)
        w1 = w1_tab[i].gather(1, state)
        # the chosen option must have a non-empty range (seat 2's range: the rest)
        w_all = counts[rows, i].reshape(-1, N_STATES).gather(1, state)
        w_chosen = torch.where(o == 0, w0, torch.where(o == 1, w1, w_all - w0 - w1))
        ok = ok & (~live | (((o >= 0) & (o <= 2)) & (w_chosen > 0)))
        r = r + torch.where(live & (o >= 1), w0, 0) + torch.where(live & (o == 2), w1, 0)
        state = state - torch.where(live & (o == 0), N_NEED, 0) - (live & (o == 1)).long()
        state = state.clamp(0, N_STATES - 1)
    return torch.where(ok, r, torch.full_like(r, -1))


def world_ranks(total: torch.Tensor, keys: torch.Tensor, n: int) -> torch.Tensor:
    """Ranks [G, n] int64 of the worlds to draw (see module doc, step 3)."""
    idx = torch.arange(n, device=total.device)
    drawn = uniform_u64(keys[:, None], idx[None, :]) % total[:, None]
    listed = idx[None, :] % total[:, None]
    return torch.where((total <= n)[:, None], listed, drawn)


def sample_worlds(info: HiddenInfo, counts: torch.Tensor, keys: torch.Tensor, n: int) -> WorldSample:
    """n worlds per decision, exactly uniform (see module doc, step 3)."""
    keys, total = checked_sample_args(info, counts, keys, n)
    ranks = world_ranks(total, keys, n)
    owner = unrank(info, counts, ranks)
    return make_sample(owner, total, n)
