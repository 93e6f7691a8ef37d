"""Reduction of per-world Q to posterior moments: the reference of `kernels/moments.py`.

Inputs (G decisions, N worlds each, the actor's 7 initial-hand slots):

    q     [G, N, 7] float  per-world Q in the actor frame (points)
    legal [G, 7]    bool   legal slots of the decision (identical in every world)
    logw  [G, N]    float  unnormalized log-weights; -inf = weight 0 (padding worlds,
                           worlds that contradict the transcript). Uniform = all zeros.

Output `Moments` (all [G, ...] float32):

    mean  [G, 7]  sum_i w_i q_i            (w normalized to sum 1)
    var   [G, 7]  sum_i w_i (q_i - mean)^2 (population variance under the same weights)
    ess   [G]     1 / sum_i w_i^2          (effective sample size, in [1, N])
    max_w [G]     max_i w_i
    u_mean, u_max [G]  mean / max of sqrt(var) over the legal slots (0 if none is legal)

Moments are computed for all 7 slots; only `u_mean`/`u_max` look at `legal`. Slots that
are illegal or padded carry whatever the oracle put there (finite by the oracle contract);
the records layer replaces padded slots. The Q of a world with weight 0 is never read
(it may be NaN or inf).

A row whose log-weights are all -inf has no distribution: every output of that row is NaN
(no exception, so that the Triton kernel, which cannot raise, behaves the same; the
posterior never produces such a row and `check_invariants` flags NaN).

Numerics: weights are exp(logw - max) (max-subtraction, so the largest is exactly 1),
and the variance is a two-pass weighted second central moment, never E[x^2] - E[x]^2:
with |Q| up to 42 and a spread of 0.01 the naive float32 formula loses every digit.

Batch independence: every sum over worlds is `_sum_worlds`, a pairwise tree of
elementwise adds in a fixed order, so a decision's moments are bit for bit the same
whatever other decisions share the call, and whatever the thread count. A batched matmul
(einsum) or torch's sum reduction picks its blocking, and so its float order, from the
shapes and threads: in a batch of 24 games three moves worth exactly 28 came out as
28.000017 / 28.000025 / 28.000025 and greedy chose another move than the same game alone.
"""
from __future__ import annotations

import torch

from ..contracts import Moments


def _check_shapes(q: torch.Tensor, legal: torch.Tensor, logw: torch.Tensor) -> None:
    if q.dim() != 3 or q.shape[2] != 7:
        raise ValueError(f"q must be [G, N, 7], got {tuple(q.shape)}")
    G, N, _ = q.shape
    if tuple(legal.shape) != (G, 7):
        raise ValueError(f"legal must be [G, 7] = [{G}, 7], got {tuple(legal.shape)}")
    if tuple(logw.shape) != (G, N):
        raise ValueError(f"logw must be [G, N] = [{G}, {N}], got {tuple(logw.shape)}")


def _sum_worlds(x: torch.Tensor) -> torch.Tensor:
    """Sum over dim 1 (worlds; the 7 slots for u_mean) of x [G, N, ...] as a pairwise tree: zero-pad N to a power of
    two, then add the upper half onto the lower half until one world is left. Each level is
    one elementwise add, exact per element, so the float order depends on N only."""
    n = x.shape[1]
    width = 1 << max(0, (n - 1).bit_length())
    if width != n:
        pad = torch.zeros((x.shape[0], width - n, *x.shape[2:]), dtype=x.dtype, device=x.device)
        x = torch.cat([x, pad], dim=1)
    while width > 1:
        width //= 2
        x = x[:, :width] + x[:, width:]
    return x[:, 0]


def _moments(q: torch.Tensor, legal: torch.Tensor, logw: torch.Tensor, dtype) -> Moments:
    _check_shapes(q, legal, logw)
    q = q.to(dtype)
    logw = logw.to(dtype)
    legal = legal.bool()
    top = logw.max(dim=1, keepdim=True).values                 # -inf for an all -inf row
    w = torch.exp(logw - top)                                  # NaN rows stay NaN
    total = _sum_worlds(w)[:, None]
    p = w / total                                              # [G, N]
    # a zero-weight world contributes nothing even if its Q is garbage (inf/NaN padding)
    q = torch.where(p[:, :, None] > 0, q, torch.zeros_like(q))
    mean = _sum_worlds(p[:, :, None] * q)
    centered = q - mean[:, None, :]
    var = _sum_worlds(p[:, :, None] * (centered * centered))
    ess = 1.0 / _sum_worlds(p * p)
    max_w = 1.0 / total[:, 0]                                  # the largest w is exactly 1
    u_mean, u_max = _spread(var, legal, dead=torch.isnan(total[:, 0]))
    return Moments(mean, var, ess, max_w, u_mean, u_max)


def _spread(var: torch.Tensor, legal: torch.Tensor, dead: torch.Tensor):
    """(u_mean, u_max) [G]: mean and max of sqrt(var) over the legal slots; NaN for the
    `dead` rows (all weights -inf: sd is NaN, but where() may hide it for illegal slots)."""
    sd = torch.sqrt(var.clamp(min=0))
    n_legal = legal.sum(dim=1)
    u_mean = _sum_worlds(torch.where(legal, sd, torch.zeros_like(sd))) / n_legal.clamp(min=1)
    u_max = torch.where(legal, sd, torch.zeros_like(sd)).amax(dim=1)
    nan = torch.full_like(u_mean, float("nan"))
    return torch.where(dead, nan, u_mean), torch.where(dead, nan, u_max)


def weighted_moments(q: torch.Tensor, legal: torch.Tensor, logw: torch.Tensor) -> Moments:
    """Posterior moments in float32 (the engine's reference backend); see the module doc."""
    return _moments(q, legal, logw, torch.float32)


def weighted_moments_float64(q: torch.Tensor, legal: torch.Tensor, logw: torch.Tensor) -> Moments:
    """The same computation in float64: the exact reference that tests compare against."""
    return _moments(q, legal, logw, torch.float64)


def control_variate_moments(main: Moments, cv_same: Moments, cv_wide: Moments,
                            legal: torch.Tensor, corrected: torch.Tensor) -> Moments:
    """Moments of the main oracle's Q corrected by a cheaper, correlated oracle (a control
    variate; docs/DATASET.md "Control variate").

    main: the main oracle's moments on the decision's worlds (set A); cv_same: the control
    oracle's moments on the same worlds A; cv_wide: the control oracle's moments on a larger
    set B (drawn the same way). corrected [G] bool: the rows to correct (the others, e.g.
    where A holds every consistent world, keep `main`, as do illegal slots in every row).
    With m = mean and v = variance under each set's weights:

        mean = m_B(cv) + (m_A(main) - m_A(cv))
        var  = v_B(cv) + (v_A(main) - v_A(cv))          (clamped at 0)

    The mean is unbiased for the main oracle's E[Q] whatever the control oracle's bias, and
    its variance is Var(main - cv)/|A| + Var(cv)/|B| instead of Var(main)/|A|: small when
    the two oracles differ by much less than Q varies over the worlds. The variance line is
    the same correction of variances (v(main) = v(cv) + v(main - cv) + 2 cov(cv, main - cv),
    the last two terms from A), so a constant offset of the control oracle cancels in both
    lines. The differences are formed first, so a control oracle equal to the main one on A
    gives cv_wide's moments exactly. The mean is clamped to the bound of Q, +-42 points.
    ESS and max_w stay those of A's weights (the main oracle's worlds); u_mean/u_max follow
    the new variance. Elementwise in the rows: batch independence is kept."""
    f = torch.float64
    mean = (cv_wide.mean.to(f) + (main.mean.to(f) - cv_same.mean.to(f))).clamp(-42.0, 42.0)
    var = (cv_wide.var.to(f) + (main.var.to(f) - cv_same.var.to(f))).clamp(min=0.0)
    keep = ~corrected.bool()[:, None] | ~legal.bool()
    mean = torch.where(keep, main.mean.to(f), mean).to(main.mean.dtype)
    var = torch.where(keep, main.var.to(f), var).to(main.var.dtype)
    u_mean, u_max = _spread(var, legal.bool(), dead=torch.isnan(main.max_w))
    return Moments(mean, var, main.ess, main.max_w, u_mean, u_max)


def control_variate_se(main: Moments, cv_same: Moments, cv_wide: Moments,
                       diff_var: torch.Tensor, wide_sampled: torch.Tensor) -> torch.Tensor:
    """[G, 7] float32: the standard error of `control_variate_moments`' mean, points.

    diff_var [G, 7]: v_A(main - control), the variance over A's worlds of the two oracles'
    difference; wide_sampled [G] bool: B was drawn (so A's worlds are B's first ones), not
    enumerated. With d = main - control:

        se^2 = v_A(d)/ess_A + v_B(control)/ess_B + 2 cov_A(d, control)/ess_B

    The last two terms are the variance of m_B(control), plus its covariance with m_A(d)
    through the worlds A and B share; cov_A(d, control) = (v_A(main) - v_A(d) -
    v_A(control)) / 2. An enumerated B has an exact mean: neither term then."""
    f = torch.float64
    d = diff_var.to(f)
    cov = (main.var.to(f) - d - cv_same.var.to(f)) / 2
    wide_term = (cv_wide.var.to(f) + 2 * cov) / cv_wide.ess.to(f)[:, None]
    se2 = d / main.ess.to(f)[:, None] + torch.where(wide_sampled.bool()[:, None], wide_term,
                                                     torch.zeros_like(d))
    return se2.clamp(min=0).sqrt().float()


#: bins of `q_histogram`: whole points -42..42
Q_BINS = 85


def q_histogram(q: torch.Tensor, legal: torch.Tensor, logw: torch.Tensor) -> torch.Tensor:
    """[G, 7, Q_BINS] float32: per slot, the weight of the worlds whose Q rounds to each
    whole point -42..42 (bin b = point b - 42), the weights normalized as for the mean, so a
    legal slot's bins sum to 1 and their mean is E[Q] up to the rounding (exact for integer
    Q, e.g. the solver's); 0 at illegal slots. Sums over worlds are the same pairwise tree
    as the moments', so the histogram does not depend on the batch either."""
    _check_shapes(q, legal, logw)
    logw = logw.float()
    w = torch.exp(logw - logw.max(dim=1, keepdim=True).values)
    p = w / _sum_worlds(w)[:, None]
    q = torch.where(p[:, :, None] > 0, q.float(), torch.zeros_like(q, dtype=torch.float32))
    bins = (q.round().clamp(-42, 42) + 42).long()
    onehot = torch.nn.functional.one_hot(bins, Q_BINS).float()           # [G, N, 7, bins]
    hist = _sum_worlds(p[:, :, None, None] * onehot)
    return torch.where(legal.bool()[:, :, None], hist, torch.zeros_like(hist))


def uniform_log_weights(world_valid: torch.Tensor) -> torch.Tensor:
    """Log-weights [G, N] of uniform averaging: 0 for valid worlds, -inf for padding."""
    zeros = torch.zeros(world_valid.shape, dtype=torch.float32, device=world_valid.device)
    return torch.where(world_valid.bool(), zeros, torch.full_like(zeros, float("-inf")))
