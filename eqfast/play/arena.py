"""Duplicate matches between two policies, and a round robin over several.

Duplicate format: every deal (game seed: deal, declarer and declaration from
`eqfast.engine.games.setup_games`) is played twice, policy A holding team 0's seats (0 and
2) in the first play and team 1's (1 and 3) in the second, B the other seats. Both sides
hold the same cards once each, so the luck of the deal cancels in A's result and what is
left is the difference in play. All the games of a batch of deals (both plays) advance in
lockstep, one decision index at a time; at each step every game's acting seat belongs to
A or B, and each policy decides its games in one call (so the E[Q] player's engine sees
batches, not single games).

Statistics of a match over n deals (2n hands):
- point differential of A per hand: A's team points minus B's in a hand; per deal the mean
  of its two hands, d_i. Reported: mean of d_i and a 95% Student-t interval over the n
  deals (mean +- t(0.975, n-1) * sd / sqrt(n); none for n = 1). Deals are independent;
  the two hands of a deal are not, which is why the interval is over deals.
- share of hands won by A (more than 21 of the 42 points; a 21-21 tie counts half) with a
  Wilson 95% interval over the 2n hands. The Wilson interval treats hands as independent;
  within a deal they are usually negatively correlated (the cards favour the same seats in
  both plays), which makes it wider than the hands' true uncertainty, not narrower.
- decisions per second of each policy: decisions it made / seconds inside its `decide`
  calls (the rules' state updates between calls are counted for neither).

A policy's games are identified by their seed and the decision index, so a policy that is
deterministic given (run seed, game seed, decision, what it is shown) plays the same moves
in whatever batch; a policy against itself therefore gives exactly 0 on every deal.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from ..bidding.stats import wilson
from ..engine.games import setup_games
from ..rules.batched import BatchedGames
from ..rules.tables import N_TRICKS, TOTAL_POINTS
from .policies import Policy

N_DECISIONS = 4 * N_TRICKS
HALF = TOTAL_POINTS // 2
DIFF_INTERVAL = "Student t 95% over deals"
WIN_INTERVAL = ("Wilson 95% on the effective number of hands (by deal: a deal's two hands "
                "count as one draw when they agree; ties count half)")


def won_by_deal(a_points: np.ndarray) -> np.ndarray:
    """A's hands won in each deal of a [deals, 2] points array (ties count half)."""
    return (a_points > HALF).sum(axis=1) + 0.5 * (a_points == HALF).sum(axis=1)


def wilson_by_deal(k_d: np.ndarray, n_d: np.ndarray) -> tuple[float, float, float, float]:
    """(share, low, high, effective hands) of k_d successes in n_d hands per deal (cluster):
    a Wilson 95% interval on n p (1 - p) over the variance of the successes summed by deal,
    at most n. Hands of one deal are not independent draws: in a duplicate match the deal's
    luck lands on both of A's hands, and in a league on every pair that plays the deal; the
    cap keeps the interval never narrower than the one that treats hands as independent."""
    k_d, n_d = np.asarray(k_d, np.float64), np.asarray(n_d, np.float64)
    k, n = float(k_d.sum()), float(n_d.sum())
    if n == 0:
        return math.nan, 0.0, 1.0, 0.0
    p, deals = k / n, len(k_d)
    var = float(((k_d - p * n_d) ** 2).sum()) / n ** 2 * (deals / (deals - 1) if deals > 1
                                                          else 1.0)
    n_eff = min(n, p * (1 - p) / var) if var > 0 else n
    lo, hi = wilson(p * n_eff, n_eff)
    return p, lo, hi, n_eff


def t_quantile(p: float, df: float) -> float:
    """The p quantile (0.5 < p < 1) of Student's t with df > 0 degrees of freedom.

    Bisection on the CDF, which is 1/2 + the integral of the density over [0, x] by
    Simpson's rule on 4,096 intervals (far below the 1e-6 the reports need); no statistics
    package is a dependency of eqfast."""
    if not 0.5 < p < 1 or not df > 0:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df > 0, got p={p}, df={df}")
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        t = np.linspace(0.0, x, 4097)
        f = np.exp(log_c - (df + 1) / 2 * np.log1p(t * t / df))
        h = x / 4096
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    hi = 2.0
    while cdf(hi) < p:
        hi *= 2
    lo = 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def mean_interval(x) -> tuple[float, float | None, float | None]:
    """(mean, lo, hi): the mean of x and its 95% Student-t interval (None, None for n < 2)."""
    x = np.asarray(x, np.float64)
    n = len(x)
    mean = float(x.mean())
    if n < 2:
        return mean, None, None
    half = t_quantile(0.975, n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half


@dataclass
class Clock:
    """Decisions a policy made and the seconds spent inside its decide calls."""
    decisions: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float | None:
        return self.decisions / self.seconds if self.seconds > 0 else None


@dataclass
class MatchResult:
    """One duplicate match. a_points [n deals, 2]: A's team points in the play where A held
    team 0 (column 0) and team 1 (column 1)."""
    a: str
    b: str
    a_cheating: bool
    b_cheating: bool
    seeds: list[int]
    a_points: np.ndarray
    clocks: dict[str, Clock] = field(default_factory=lambda: {"a": Clock(), "b": Clock()})

    @property
    def deals(self) -> int:
        return len(self.seeds)

    @property
    def hands(self) -> int:
        return 2 * self.deals

    @property
    def deal_diffs(self) -> np.ndarray:
        """d_i: A's points minus B's, per hand, averaged over the deal's two hands."""
        return (2 * self.a_points - TOTAL_POINTS).mean(axis=1)

    def summary(self) -> dict:
        """The match as a JSON-ready dict (the fields of eqfast-arena --json)."""
        mean, lo, hi = mean_interval(self.deal_diffs)
        wins = int((self.a_points > HALF).sum())
        ties = int((self.a_points == HALF).sum())
        share, w_lo, w_hi, _ = wilson_by_deal(won_by_deal(self.a_points), np.full(self.deals, 2))
        rnd = lambda v, k=3: None if v is None else round(v, k)
        return {
            "a": self.a, "b": self.b, "a_cheating": self.a_cheating,
            "b_cheating": self.b_cheating, "deals": self.deals, "hands": self.hands,
            "seed_range": [min(self.seeds), max(self.seeds)],
            "mean_diff": rnd(mean), "diff_ci95": [rnd(lo), rnd(hi)],
            "diff_interval": DIFF_INTERVAL,
            "wins": wins, "ties": ties, "losses": self.hands - wins - ties,
            "win_share": rnd(share, 4), "win_ci95": [rnd(w_lo, 4), rnd(w_hi, 4)],
            "win_interval": WIN_INTERVAL,
            "decisions": {"a": self.clocks["a"].decisions, "b": self.clocks["b"].decisions},
            "seconds": {"a": rnd(self.clocks["a"].seconds), "b": rnd(self.clocks["b"].seconds)},
            "decisions_per_s": {"a": rnd(self.clocks["a"].rate, 1),
                                "b": rnd(self.clocks["b"].rate, 1)},
        }


def _timed_decide(policy: Policy, games: BatchedGames, seeds: list[int], decision: int,
                  clock: Clock) -> torch.Tensor:
    t0 = time.perf_counter()
    slot = policy.decide(games, seeds, decision)
    clock.seconds += time.perf_counter() - t0
    clock.decisions += games.batch_size
    slot = torch.as_tensor(slot, dtype=torch.int64, device=games.device)
    if tuple(slot.shape) != (games.batch_size,):
        raise ValueError(f"policy {policy.name!r} returned slots of shape {tuple(slot.shape)} "
                         f"for {games.batch_size} games")
    return slot


def play_batch(a: Policy, b: Policy, seeds: Sequence[int], decl_mode="hand", device="cpu",
               clocks: dict[str, Clock] | None = None, with_declarer: bool = False):
    """A's team points [len(seeds), 2] of the deals `seeds`, each played with A as team 0
    and as team 1, all in one lockstep batch. An illegal slot from a policy raises
    ValueError (`BatchedGames.play` checks every move).

    with_declarer: return (points, declarer_team [len(seeds)] int64) instead, the team (0
    or 1) of each deal's declarer (its first leader, `setup_games`); A declares in column
    declarer_team of its row (the play where A holds that team), B in the other."""
    clocks = clocks if clocks is not None else {"a": Clock(), "b": Clock()}
    seeds = [int(s) for s in seeds]
    n = len(seeds)
    hands, decl, leader = setup_games(seeds, decl_mode)
    games = BatchedGames.new(np.concatenate([hands, hands]), np.concatenate([decl, decl]),
                             np.concatenate([leader, leader]), device=device)
    a_team = torch.tensor([0] * n + [1] * n, device=games.device)
    both = seeds + seeds
    for d in range(N_DECISIONS):
        a_acts = games.current_player % 2 == a_team
        slot = torch.zeros(2 * n, dtype=torch.int64, device=games.device)
        for role, policy, mask in (("a", a, a_acts), ("b", b, ~a_acts)):
            idx = torch.nonzero(mask)[:, 0]
            if len(idx):
                slot[idx] = _timed_decide(policy, games.select(idx),
                                          [both[i] for i in idx.tolist()], d, clocks[role])
        games = games.play(slot)
    if not bool(games.is_over.all()):
        raise RuntimeError("games unfinished after 28 decisions")
    points = games.points.cpu().numpy()
    rows = np.arange(2 * n)
    a_points = points[rows, a_team.cpu().numpy()]
    out = np.stack([a_points[:n], a_points[n:]], axis=1)
    return (out, leader % 2) if with_declarer else out


def play_match(a: Policy, b: Policy, seeds: Sequence[int], batch: int = 64, decl_mode="hand",
               device="cpu", on_batch: Callable[[int], None] | None = None) -> MatchResult:
    """A duplicate match of A against B over the deals `seeds`, `batch` deals (2 x batch
    games) at a time; on_batch(hands) after each batch (progress)."""
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("a match needs at least one deal")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    result = MatchResult(a.name, b.name, bool(a.cheating), bool(b.cheating), seeds,
                         np.zeros((len(seeds), 2), np.int64))
    for lo in range(0, len(seeds), batch):
        chunk = seeds[lo:lo + batch]
        result.a_points[lo:lo + len(chunk)] = play_batch(a, b, chunk, decl_mode, device,
                                                         result.clocks)
        if on_batch is not None:
            on_batch(2 * len(chunk))
    return result


def round_robin(policies: Sequence[Policy], seeds: Sequence[int], batch: int = 64,
                decl_mode="hand", device="cpu", on_batch=None) -> list[MatchResult]:
    """Every pair (i < j) of `policies` in list order, as `play_match(policies[i],
    policies[j], ...)` on the same deals."""
    return [play_match(a, b, seeds, batch, decl_mode, device, on_batch)
            for a, b in itertools.combinations(policies, 2)]


def policy_rates(results: Sequence[MatchResult]) -> dict[str, dict]:
    """Decisions, seconds and decisions/s of each policy over all its matches."""
    total: dict[str, Clock] = {}
    for r in results:
        for role, name in (("a", r.a), ("b", r.b)):
            c = total.setdefault(name, Clock())
            c.decisions += r.clocks[role].decisions
            c.seconds += r.clocks[role].seconds
    return {name: {"decisions": c.decisions, "seconds": round(c.seconds, 3),
                   "decisions_per_s": None if c.rate is None else round(c.rate, 1)}
            for name, c in total.items()}


__all__ = ["Clock", "MatchResult", "play_batch", "play_match", "round_robin", "policy_rates",
           "mean_interval", "t_quantile", "won_by_deal", "wilson_by_deal", "DIFF_INTERVAL",
           "WIN_INTERVAL"]
