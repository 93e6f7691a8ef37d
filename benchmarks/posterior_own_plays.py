"""How much do the acting player's own plays move the posterior world weights?

The posterior (docs/DATASET.md; eqfast/engine/posterior.py) scores every play of the last
K, the acting player's own included, as spec 000 asks. The acting player chose its own
plays from its own information set, which is the same in every world it samples. So a
behaviour model of that player would give each world the same likelihood. The
perfect-information Q that the behaviour model reads does not: it differs by world. This
script measures the gap. Games are played with exact labels (world budgets 25, 50, 100, ...
by trick) and a posterior whose behaviour model is the shipped network. At every decision
whose window holds one of the actor's own plays, it computes a second set of weights with
those plays left out, and compares the two:

- total variation between the normalised weights, and the ratio of their ESS;
- the largest |E[Q] difference| over the legal moves, in points;
- how often the argmax differs (decisions with >= 2 legal moves), and the E[Q] lost, under
  the second weighting, by the move the first one picks.

Neither set of weights is "exact": this measures how much the choice matters, not which
one is right.

    python benchmarks/posterior_own_plays.py --games 200
"""
from __future__ import annotations

import argparse
import dataclasses

import torch

from eqfast.engine import pipeline
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.posterior import PosteriorConfig
from eqfast.engine.worlds import own_play_steps
from eqfast.oracle import ExactOracle, load_default_oracle

BUDGETS = (25, 50, 100, 100, 100, 100, 100)


class OwnPlaysProbe:
    """Wraps an Engine so that each main-world posterior is also computed without the actor's
    own plays, and collects one row of figures per decision that has such a play."""

    def __init__(self, engine: Engine):
        self.rows: list[tuple] = []
        self._own = None
        self._pair = None
        make_prefix = pipeline.prefix_oracle_batch

        def prefix(games, initial, window):
            self._own = own_play_steps(games, window)
            return make_prefix(games, initial, window)

        backend = engine.backend

        def posterior(q_past, legal_past, observed, step_valid, cfg, world_valid=None):
            logw, diag = backend.posterior_log_weights(q_past, legal_past, observed, step_valid,
                                                       cfg, world_valid=world_valid)
            other, _ = backend.posterior_log_weights(q_past, legal_past, observed,
                                                     step_valid & ~self._own, cfg,
                                                     world_valid=world_valid)
            self._pair = (logw, other, self._own)
            return logw, diag

        def moments(q, legal, logw):
            m = backend.weighted_moments(q, legal, logw)
            if self._pair is not None and self._pair[0] is logw:
                self._compare(q, legal, m, backend.weighted_moments(q, legal, self._pair[1]))
                self._pair = None
            return m

        pipeline.prefix_oracle_batch = prefix
        engine.backend = dataclasses.replace(backend, posterior_log_weights=posterior,
                                             weighted_moments=moments)

    def _compare(self, q, legal, spec, other):
        logw, logw_other, own = self._pair
        tv = 0.5 * (logw.exp() - logw_other.exp()).abs().sum(1)
        lg = legal.bool()
        diff = (spec.mean - other.mean).abs().masked_fill(~lg, 0.0).amax(1)
        pick = spec.mean.masked_fill(~lg, float("-inf")).argmax(1, keepdim=True)
        pick_other = other.mean.masked_fill(~lg, float("-inf")).argmax(1, keepdim=True)
        lost = (other.mean.gather(1, pick_other) - other.mean.gather(1, pick))[:, 0]
        multi = lg.sum(1) >= 2
        for g in torch.nonzero(own.any(1))[:, 0].tolist():
            self.rows.append((tv[g].item(), (spec.ess[g] / other.ess[g]).item(), diff[g].item(),
                              bool(multi[g]), bool(multi[g] and pick[g] != pick_other[g]),
                              lost[g].item()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", type=int, default=200)
    ap.add_argument("--seed-start", type=int, default=5_000_000, help="first game seed")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = EngineConfig(n_by_trick=BUDGETS, posterior=PosteriorConfig(), seed=0)
    engine = Engine(ExactOracle(), cfg, behaviour_oracle=load_default_oracle())
    probe = OwnPlaysProbe(engine)
    for start in range(a.seed_start, a.seed_start + a.games, 10):
        engine.play(list(range(start, min(start + 10, a.seed_start + a.games))))
    t = torch.tensor(probe.rows, dtype=torch.float64)
    multi = t[:, 3] > 0
    print(f"{a.games} games from seed {a.seed_start}; posterior {PosteriorConfig()}")
    print(f"decisions with one of the actor's own plays in the window: {len(t)} "
          f"({int(multi.sum())} with >= 2 legal moves)")
    print(f"total variation between the weightings: mean {t[:, 0].mean():.3f}, median "
          f"{t[:, 0].median():.3f}, 90th percentile {t[:, 0].quantile(0.9):.3f}")
    print(f"ESS with the own plays / without: mean {t[:, 1].mean():.3f}, median "
          f"{t[:, 1].median():.3f}")
    print(f"largest |E[Q] difference| over the legal moves (points): mean {t[:, 2].mean():.3f}, "
          f"median {t[:, 2].median():.3f}, 90th percentile {t[:, 2].quantile(0.9):.3f}, "
          f"max {t[:, 2].max():.3f}")
    print(f"argmax differs in {t[multi, 4].mean():.3f} of the decisions with >= 2 legal moves; "
          f"E[Q] lost under the second weighting by the spec's pick: mean "
          f"{t[multi, 5].mean():.4f} points")


if __name__ == "__main__":
    main()
