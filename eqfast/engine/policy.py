"""Action selection of the transcript-generation policy, batched over G games.

Mechanisms, applied in this order for each decision (the first that fires wins):

1. blunder  (mode 3): with probability `blunder_rate`, a uniformly chosen *suboptimal*
   legal move whose regret (best E[Q] - its E[Q]) is > TIE_TOL and <= `blunder_max_regret`.
   If no move qualifies, the blunder does not happen and selection falls through.
2. epsilon  (mode 2): with probability `epsilon`, a uniformly chosen legal move.
3. boltzmann (mode 1): if `temperature > 0`, a draw from softmax(E[Q] / temperature)
   over the legal moves;
   greedy   (mode 0): otherwise argmax E[Q] over the legal moves (ties: lowest slot).

Ties: legal moves whose E[Q] is within TIE_TOL (1e-4 points) of the best legal E[Q] are
tied with it. Greedy takes the lowest tied slot, and a tied move is never a blunder. Equal
values reach the policy with float32 rounding of about 1e-5 points (a mean of 100 worlds
worth exactly 28 is 28.000025), and a different backend or device rounds differently, so
without a tolerance the choice between equal moves would follow the last bit. 1e-4 points
is far below any difference between moves that matters (exact Q values are whole points).

The mode records which mechanism chose, even when it happens to pick the greedy move.

A play policy (`policy_selection`; `eqfast-generate --play-policy`): the moves come from a
policy's own values (a Stage 2 model's μ) instead of the labels. The mechanisms above run
on those values (the blunder's regret, the Boltzmann draw and the greedy argmax are the
policy's), the policy's own greedy choice is recorded as mode 4 (`policy`), not 0, and
`q_gap` still measures the move taken against the labels, so it can be above 0 at mode 4.
Mode 0 therefore always means "the argmax of the labels", q_gap 0.
Recorded with each choice: `q_gap` = best legal E[Q] - E[Q] of the move taken (>= 0),
and `entropy` = entropy in nats of the temperature-1 softmax of E[Q] over legal moves.

Randomness: five Philox draws per decision at fixed counters of the decision's key
(`eqfast.utils.rng.uniform_float(key, c)`), whether or not a mechanism uses them, so a
choice depends on (key, e_q, legal, cfg) only:

    counter 0: blunder coin     1: blunder pick     2: epsilon coin
    counter 3: epsilon pick     4: boltzmann draw

A uniform pick among m candidates takes the floor(u * m)-th candidate in slot order.
`policy_uniforms(keys)` computes the five draws (about 150 elementwise ops of Philox in
PyTorch); `select_with_uniforms` takes them precomputed, which is how the fast path draws a
whole batch's 28 decisions at once, outside its captured per-decision step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..utils.checks import host_checks

from ..utils.rng import uniform_float

MODE_GREEDY, MODE_BOLTZMANN, MODE_EPSILON, MODE_BLUNDER, MODE_POLICY = 0, 1, 2, 3, 4
MODE_NAMES = ("greedy", "boltzmann", "epsilon", "blunder", "policy")
_C_BLUNDER_COIN, _C_BLUNDER_PICK, _C_EPS_COIN, _C_EPS_PICK, _C_BOLTZMANN = range(5)
N_DRAWS = 5
#: E[Q] within this many points of the best legal move count as tied (see the module doc)
TIE_TOL = 1e-4


@dataclass(frozen=True)
class ExplorationConfig:
    temperature: float = 0.0      # 0 = greedy
    epsilon: float = 0.0
    blunder_rate: float = 0.0
    blunder_max_regret: float = 3.0

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"ExplorationConfig.temperature must be >= 0, got {self.temperature}")
        for name in ("epsilon", "blunder_rate"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"ExplorationConfig.{name} must be in [0, 1], got {v}")
        if self.blunder_max_regret < 0:
            raise ValueError("ExplorationConfig.blunder_max_regret must be >= 0, "
                             f"got {self.blunder_max_regret}")


class Selection(NamedTuple):
    slot: torch.Tensor      # [G] int64, the chosen slot (same indexing as e_q)
    mode: torch.Tensor      # [G] int8, MODE_*
    q_gap: torch.Tensor     # [G] float32
    entropy: torch.Tensor   # [G] float32


def _pick_nth(candidates: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Slot of the floor(u * m)-th True of each row of candidates [G, 7] (m >= 1 assumed)."""
    m = candidates.sum(1)
    nth = (u * m.double()).floor().long().clamp(max=(m - 1).clamp(min=0))
    rank = torch.cumsum(candidates.long(), dim=1) - 1          # rank of each candidate
    hit = candidates & (rank == nth[:, None])
    return hit.long().argmax(dim=1)


def policy_uniforms(keys: torch.Tensor) -> torch.Tensor:
    """The decisions' five policy draws [..., 5] float64 in [0, 1), keys [...] int64."""
    keys = torch.as_tensor(keys, dtype=torch.int64)
    return uniform_float(keys[..., None], torch.arange(N_DRAWS, device=keys.device))


def select_actions(e_q: torch.Tensor, legal: torch.Tensor, cfg: ExplorationConfig,
                   keys: torch.Tensor) -> Selection:
    """Choose one legal slot per decision. e_q [G,7] (actor frame), legal [G,7], keys [G] int64."""
    keys = torch.as_tensor(keys, dtype=torch.int64, device=e_q.device)
    if tuple(keys.shape) != (e_q.shape[0],):
        raise ValueError(f"keys must be [G] = [{e_q.shape[0]}], got {tuple(keys.shape)}")
    return select_with_uniforms(e_q, legal, cfg, policy_uniforms(keys))


def select_with_uniforms(e_q: torch.Tensor, legal: torch.Tensor, cfg: ExplorationConfig,
                         u: torch.Tensor) -> Selection:
    """`select_actions` with the draws given: u [G, 5] float64 = policy_uniforms(keys)."""
    if e_q.dim() != 2 or tuple(legal.shape) != tuple(e_q.shape):
        raise ValueError(f"e_q and legal must both be [G, K], got {tuple(e_q.shape)} "
                         f"and {tuple(legal.shape)}")
    legal = legal.bool()
    if host_checks() and bool((~legal.any(1)).any()):
        g = int(torch.nonzero(~legal.any(1))[0])
        raise ValueError(f"select_actions: decision {g} has no legal move")
    G = e_q.shape[0]
    dev = e_q.device
    if tuple(u.shape) != (G, N_DRAWS):
        raise ValueError(f"policy draws must be [G, {N_DRAWS}] = [{G}, {N_DRAWS}], "
                         f"got {tuple(u.shape)}")

    q = e_q.double()
    masked = torch.where(legal, q, torch.full_like(q, float("-inf")))
    best = masked.max(1).values
    regret = best[:, None] - q
    tied = legal & (regret <= TIE_TOL)
    greedy = tied.long().argmax(1)                                  # first True = lowest slot

    slot = greedy.clone()
    mode = torch.full((G,), MODE_GREEDY, dtype=torch.int8, device=dev)
    undecided = torch.ones(G, dtype=torch.bool, device=dev)

    if cfg.blunder_rate > 0:
        cands = legal & (regret > TIE_TOL) & (regret <= cfg.blunder_max_regret)
        fire = undecided & cands.any(1) & (u[:, _C_BLUNDER_COIN] < cfg.blunder_rate)
        slot = torch.where(fire, _pick_nth(cands, u[:, _C_BLUNDER_PICK]), slot)
        mode = torch.where(fire, torch.full_like(mode, MODE_BLUNDER), mode)
        undecided &= ~fire
    if cfg.epsilon > 0:
        fire = undecided & (u[:, _C_EPS_COIN] < cfg.epsilon)
        slot = torch.where(fire, _pick_nth(legal, u[:, _C_EPS_PICK]), slot)
        mode = torch.where(fire, torch.full_like(mode, MODE_EPSILON), mode)
        undecided &= ~fire
    if cfg.temperature > 0:
        probs = torch.softmax((masked - best[:, None]) / cfg.temperature, dim=1)
        cdf = torch.cumsum(probs, dim=1)
        drawn = (cdf <= u[:, _C_BOLTZMANN, None]).sum(1)            # first slot with cdf > u
        last_legal = legal.shape[1] - 1 - legal.flip(1).long().argmax(1)  # cdf[-1] < u by rounding
        drawn = torch.minimum(drawn, last_legal)
        slot = torch.where(undecided, drawn, slot)
        mode = torch.where(undecided, torch.full_like(mode, MODE_BOLTZMANN), mode)

    q_gap = best - q.gather(1, slot[:, None])[:, 0]
    log_p = torch.log_softmax(masked, dim=1)
    p = torch.exp(log_p)
    entropy = -torch.where(legal, p * log_p, torch.zeros_like(p)).sum(1)
    return Selection(slot, mode, q_gap.float(), entropy.float())


def policy_selection(values: torch.Tensor, policy_slot: torch.Tensor, e_q: torch.Tensor,
                     legal: torch.Tensor, cfg: ExplorationConfig, keys: torch.Tensor) -> Selection:
    """The move of a play policy under the exploration `cfg`, recorded against the labels.

    values [G, 7]: the policy's value of each initial-hand slot (points, actor frame; only
    legal slots are read); policy_slot [G]: the policy's own choice (its argmax, with its own
    tie rule); e_q [G, 7]: the labels. The mechanisms of `select_actions` run on `values`
    with the decision's draws; where none fires the move is `policy_slot` with mode
    MODE_POLICY. q_gap = best legal e_q - e_q of the move; entropy that of the labels (as
    `select_actions` has it)."""
    explore = select_actions(values, legal, cfg, keys)
    own = explore.mode == MODE_GREEDY
    slot = torch.where(own, policy_slot.to(explore.slot.device), explore.slot)
    mode = torch.where(own, torch.full_like(explore.mode, MODE_POLICY), explore.mode)
    legal = legal.bool()
    q = e_q.double()
    masked = torch.where(legal, q, torch.full_like(q, float("-inf")))
    q_gap = masked.max(1).values - q.gather(1, slot[:, None])[:, 0]
    log_p = torch.log_softmax(masked, dim=1)
    entropy = -torch.where(legal, log_p.exp() * log_p, torch.zeros_like(log_p)).sum(1)
    return Selection(slot, mode, q_gap.float(), entropy.float())
