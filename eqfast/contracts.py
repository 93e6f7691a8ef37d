"""The data contracts between the device stages: the types one stage hands the next, their
shape checks and integrity errors. Both implementations of a stage, the pure-PyTorch
reference (`eqfast.engine`) and the Triton kernel (`eqfast.kernels`), build on this
module and on nothing of each other, so a kernel's errors read exactly as its
reference's.

    stage        produces          checked by
    public       HiddenInfo        check_hidden_sizes
    sample       WorldSample       checked_sample_args (counts, keys, totals), make_sample
    tokenize     PrefixTokens      (shapes built by the stage itself)
    posterior    PosteriorDiagnostics, from PosteriorConfig
                                   check_posterior_inputs, check_observations,
                                   check_world_support
    reduce       Moments

Integrity checks are skipped under `eqfast.utils.checks.host_checks_off` (inside a captured
step every check would be a device synchronization).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from .rules.tables import HAND_SIZE, N_SEATS
from .utils.checks import host_checks

#: Most hidden tiles at a decision: 3 seats x 7 tiles (the actor leads the first trick).
MAX_POOL = 3 * HAND_SIZE
N_HIDDEN = N_SEATS - 1
#: Hidden seats 0 and 1 need at most 7 more tiles each: states a, b in 0..7.
N_NEED = 8
N_STATES = N_NEED * N_NEED


# ---------------------------------------------------------------------------------- public
@dataclass(frozen=True)
class HiddenInfo:
    """What the acting seat knows about the hidden hands (eqfast.engine.public's doc)."""
    pool: torch.Tensor
    n_pool: torch.Tensor
    allowed: torch.Tensor
    sizes: torch.Tensor
    seats: torch.Tensor
    actor: torch.Tensor
    decl: torch.Tensor

    @property
    def batch_size(self) -> int:
        return self.pool.shape[0]

    @property
    def device(self) -> torch.device:
        return self.pool.device


def check_hidden_sizes(info: HiddenInfo) -> None:
    """Raise if the hidden hand sizes do not add up to the hidden tiles (an inconsistent
    BatchedGames)."""
    if host_checks() and bool((info.sizes.sum(1) != info.n_pool).any()):
        bad = int(torch.nonzero(info.sizes.sum(1) != info.n_pool)[0])
        raise ValueError(f"game {bad}: hidden hand sizes {info.sizes[bad].tolist()} do not add "
                         f"up to the {int(info.n_pool[bad])} hidden tiles (inconsistent "
                         "BatchedGames)")


# ---------------------------------------------------------------------------------- sample
@dataclass(frozen=True)
class WorldSample:
    owner: torch.Tensor       # [G, N, 21] int8 hidden seat of each pool tile, -1 at padding
    valid: torch.Tensor       # [G, N] bool
    n_worlds: torch.Tensor    # [G] int64
    enumerated: torch.Tensor  # [G] bool
    total: torch.Tensor       # [G] int64 number of consistent worlds

    @property
    def n(self) -> int:
        return self.owner.shape[1]


def total_worlds(info: HiddenInfo, counts: torch.Tensor) -> torch.Tensor:
    """Number of consistent worlds [G] int64 (the completion counts at the start state)."""
    rows = torch.arange(info.batch_size, device=info.device)
    return counts[rows, 0, info.sizes[:, 0], info.sizes[:, 1]]


def check_totals(total: torch.Tensor) -> None:
    """Raise if a decision has no consistent world (the public state contradicts itself)."""
    if host_checks() and bool((total < 1).any()):
        bad = int(torch.nonzero(total < 1)[0])
        raise ValueError(f"game {bad}: no hidden-hand completion is consistent with the "
                         f"voids and hand sizes (completion count {int(total[bad])})")


def checked_sample_args(info: HiddenInfo, counts: torch.Tensor, keys, n: int):
    """(keys as int64 [G], total [G]) after validating sample_worlds' arguments."""
    if n < 1:
        raise ValueError(f"n (worlds per decision) must be >= 1, got {n}")
    keys = torch.as_tensor(keys, dtype=torch.int64, device=info.device)
    if keys.shape != (info.batch_size,):
        raise ValueError(f"keys must be [G={info.batch_size}] int64, got {tuple(keys.shape)}")
    if counts.shape != (info.batch_size, MAX_POOL + 1, N_NEED, N_NEED):
        raise ValueError(f"counts must be [G, {MAX_POOL + 1}, {N_NEED}, {N_NEED}], "
                         f"got {tuple(counts.shape)}")
    total = total_worlds(info, counts)
    check_totals(total)
    return keys, total


def make_sample(owner: torch.Tensor, total: torch.Tensor, n: int) -> WorldSample:
    """WorldSample around drawn owners."""
    enumerated = total <= n
    valid = torch.arange(n, device=total.device)[None, :] < torch.where(enumerated, total, n)[:, None]
    n_worlds = torch.where(enumerated, total, torch.full_like(total, n))
    return WorldSample(owner=owner, valid=valid, n_worlds=n_worlds, enumerated=enumerated,
                       total=total)


# -------------------------------------------------------------------------------- tokenize
class PrefixTokens(NamedTuple):
    """The posterior's oracle rows, tokenized (`tokenize_prefix_worlds`)."""
    codes: torch.Tensor           # [G*N*K, 28] int64, row (g*N + i)*K + k
    slot_tiles: torch.Tensor      # [G*N*K, 7] int64, the step's actor's initial hand
    legal: torch.Tensor           # [G*N*K, 7] bool, that actor's legal slots at the step
    observed_slot: torch.Tensor   # [G, N, K] int64, slot of the tile played (-1: absent)
    valid: torch.Tensor           # [G, K] bool, False before the start of the transcript


# ------------------------------------------------------------------------------- posterior
@dataclass(frozen=True)
class PosteriorConfig:
    """Knobs of the posterior (eqfast.engine.posterior's doc)."""
    tau: float = 10.0
    beta: float = 0.10
    window_k: int = 8
    delta: float = 30.0
    ess_remix_threshold: float = 0.10   # fraction of the valid worlds; 0 = no re-mixing
    strict: bool = True
    # score the acting player's own plays in the window (spec 000: every one of the last
    # K); False leaves them out: chosen from its own information set, they carry no
    # evidence about the hidden hands (benchmarks/RESULTS.md, "The actor's own plays")
    own_plays: bool = True

    def __post_init__(self):
        if not self.tau > 0:
            raise ValueError(f"PosteriorConfig.tau must be > 0, got {self.tau}")
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"PosteriorConfig.beta must be in [0, 1], got {self.beta}")
        if self.window_k < 1:
            raise ValueError(f"PosteriorConfig.window_k must be >= 1, got {self.window_k}")
        if not self.delta > 0:
            raise ValueError(f"PosteriorConfig.delta must be > 0, got {self.delta}")
        if not 0.0 <= self.ess_remix_threshold <= 1.0:
            raise ValueError("PosteriorConfig.ess_remix_threshold must be in [0, 1], "
                             f"got {self.ess_remix_threshold}")
        if not isinstance(self.own_plays, bool):
            raise ValueError(f"PosteriorConfig.own_plays must be true or false, got "
                             f"{self.own_plays!r}")


@dataclass(frozen=True)
class PosteriorDiagnostics:
    """Per-decision diagnostics [G]."""
    ess: torch.Tensor               # float32, after re-mixing
    ess_before_remix: torch.Tensor  # float32
    max_w: torch.Tensor             # float32, after re-mixing
    n_invalid: torch.Tensor         # int64, valid worlds that contradict the transcript
    n_illegal: torch.Tensor         # int64, (world, step) pairs skipped as illegal (non-strict)
    remixed: torch.Tensor           # bool
    remix_lambda: torch.Tensor      # float32, the uniform share mixed in (0 if not remixed)
    fallback_uniform: torch.Tensor  # bool, every valid world contradicted the transcript
    window_nll: torch.Tensor        # float32, -sum_i w_i log-lik_i over consistent worlds


def check_posterior_inputs(q_past, legal_past, observed_slot, step_valid, world_valid) -> None:
    """The shapes of posterior_log_weights' inputs (ValueError naming the first wrong one)."""
    if q_past.dim() != 4 or q_past.shape[3] != 7:
        raise ValueError(f"q_past must be [G, N, K, 7], got {tuple(q_past.shape)}")
    G, N, K, _ = q_past.shape
    expect = {"legal_past": (legal_past, (G, N, K, 7)),
              "observed_slot": (observed_slot, (G, N, K)),
              "step_valid": (step_valid, (G, K)),
              "world_valid": (world_valid, (G, N))}
    for name, (t, shape) in expect.items():
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must be {list(shape)}, got {list(t.shape)}")


def illegal_observations(legal_past: torch.Tensor, observed_slot: torch.Tensor,
                         step_valid: torch.Tensor, world_valid: torch.Tensor) -> torch.Tensor:
    """[G, N, K] bool: the observed tile is in the step actor's reconstructed hand but not a
    legal slot there (a reconstruction or rules bug), at live steps of valid worlds."""
    slot = observed_slot.long()
    in_hand = slot >= 0
    obs_legal = torch.gather(legal_past.bool(), -1, slot.clamp(0, 6)[..., None])[..., 0] & in_hand
    step_on = step_valid.bool()[:, None, :] & world_valid.bool()[:, :, None]
    return step_on & in_hand & ~obs_legal


def check_observations(legal_past, observed_slot, step_valid, world_valid) -> None:
    """Raise on the first in-hand illegal observation (strict mode)."""
    if not host_checks():
        return
    illegal = illegal_observations(legal_past, observed_slot, step_valid, world_valid)
    if bool(illegal.any()):
        g, i, k = (int(x) for x in torch.nonzero(illegal)[0])
        raise ValueError(
            f"posterior integrity: game {g}, window step {k}, world {i}: the observed "
            f"tile is in the actor's reconstructed hand (slot {int(observed_slot[g, i, k])}) but "
            f"illegal there (legal slots {legal_past[g, i, k].int().tolist()}); a state "
            "reconstruction or rules bug (PosteriorConfig.strict=False counts it instead)")


def check_world_support(world_valid: torch.Tensor, fallback: torch.Tensor, strict: bool) -> None:
    """Raise if a decision has no valid world, or (strict) if every valid world contradicts
    the observed transcript (`fallback` [G])."""
    if not host_checks():
        return
    n_valid = world_valid.bool().sum(1)
    if bool((n_valid == 0).any()):
        g = int(torch.nonzero(n_valid == 0)[0])
        raise ValueError(f"posterior: decision {g} has no valid world (world_valid all False)")
    if strict and bool(fallback.any()):
        g = int(torch.nonzero(fallback)[0])
        raise ValueError(f"posterior integrity: decision {g}: every one of its {int(n_valid[g])} "
                         "worlds contradicts the observed transcript (observed tile not in hand)")


# ---------------------------------------------------------------------------------- reduce
class Moments(NamedTuple):
    mean: torch.Tensor
    var: torch.Tensor
    ess: torch.Tensor
    max_w: torch.Tensor
    u_mean: torch.Tensor
    u_max: torch.Tensor
