"""Two label sets of the same games scored against what the game then gave.

A record's `realized_to_go` is the points its actor's side took from the decision to the
end of the hand, under the play that followed. Given what the actor knows and the move
taken, its expectation is the move's value under that play (the deal is drawn uniformly,
then every seat plays as the game's policy does), which is what a label of the move
estimates. A label is a function of the actor's information and of worlds drawn
independently of the true deal, so

    E[(label - realized)^2] = E[(label - value)^2] + E[Var(realized | information, move)]

and the second term is the same for any two labels of the same games: the difference of
their squared errors against the realized return is the difference of their squared
errors against the true value, without knowing it. Most of either error is the hand's own
randomness (about 250 points^2 for rollout labels of Stage 2 play), so only the paired
difference is informative; it is reported with a 95% interval over games (the decisions
of one game are not independent).

Only the move actually taken has a realized return, so this scores the label of one move
per decision (decisions with a single legal move are left out: nothing to choose). It
ranks label settings (worlds, posterior, oracle) on one set of played games without a
match: `python benchmarks/label_realized.py DIR_A DIR_B`.
"""
from __future__ import annotations

import numpy as np
import torch

from ..data.schema import DecisionRecords
from .truth import paired_gain


class LabelPairError(ValueError):
    """The two record sets are not labels of the same games and moves."""


def _key(records: DecisionRecords) -> torch.Tensor:
    return records["seed"].long() * 64 + records["decision_idx"].long()


def common_games(a: DecisionRecords, b: DecisionRecords) -> tuple[DecisionRecords, DecisionRecords, dict]:
    """The rows of the games present in both, each set ordered by (seed, decision), and
    how many games each had alone (a directory still being generated has fewer)."""
    sa, sb = torch.unique(a["seed"]), torch.unique(b["seed"])
    both = sa[torch.isin(sa, sb)]
    if len(both) == 0:
        raise LabelPairError("the two record sets share no game seed")
    out = []
    for r in (a, b):
        r = r.select(torch.isin(r["seed"], both))
        out.append(r.select(torch.argsort(_key(r))))
    ra, rb = out
    if len(ra) != len(rb) or not torch.equal(_key(ra), _key(rb)):
        raise LabelPairError("the shared games do not have the same decisions in both sets")
    same = ((ra["action_taken"] == rb["action_taken"])
            & (ra["transcript_tokens"] == rb["transcript_tokens"]).flatten(1).all(1)
            & (ra["legal_mask"] == rb["legal_mask"]).all(1))
    if not bool(same.all()):
        i = int(torch.nonzero(~same)[0, 0])
        raise LabelPairError(f"game seed {int(ra['seed'][i])}, decision "
                             f"{int(ra['decision_idx'][i])}: the two sets played different "
                             "moves (labels of different games cannot be paired)")
    info = {"games": int(len(both)), "games_only_a": int(len(sa) - len(both)),
            "games_only_b": int(len(sb) - len(both))}
    return ra, rb, info


def realized_error(a: DecisionRecords, b: DecisionRecords) -> dict:
    """Squared error of each set's label of the move taken against its realized return,
    over the shared games' decisions with a choice, and the paired difference A - B
    (negative: A's labels are closer to the values) with its 95% half-width over games."""
    for name, r in (("A", a), ("B", b)):
        if not r.has_outcomes:
            raise LabelPairError(f"set {name} stores no realized_to_go (written without the "
                                 "game outcomes)")
    ra, rb, info = common_games(a, b)
    choice = ra["legal_mask"].sum(1) > 1
    ra, rb = ra.select(choice), rb.select(choice)
    real = ra["realized_to_go"].double()
    taken = ra["action_taken"].long()[:, None]
    err = [(r["e_q_mean"].double().gather(1, taken)[:, 0] - real) for r in (ra, rb)]
    _, game = torch.unique(ra["seed"], return_inverse=True)
    G = int(game.max()) + 1 if len(game) else 0

    def per_game(x: torch.Tensor) -> np.ndarray:
        return torch.zeros(G, dtype=torch.float64).index_add_(0, game, x).numpy()

    n = per_game(torch.ones_like(real))
    sq_a, sq_b = per_game(err[0] ** 2), per_game(err[1] ** 2)
    diff, half = paired_gain(sq_a, sq_b, n)
    return {**info, "decisions": int(n.sum()),
            "mse_a": float(sq_a.sum() / max(n.sum(), 1)), "mse_b": float(sq_b.sum() / max(n.sum(), 1)),
            "bias_a": float(err[0].mean()) if len(real) else float("nan"),
            "bias_b": float(err[1].mean()) if len(real) else float("nan"),
            "diff": diff, "diff_half_width": half}
