"""Does the posterior move weight toward the true deal, and which settings move it best?

The posterior (eqfast/engine/posterior.py, spec 000 4.5) reweights the sampled worlds by how
likely each makes the last K plays under a behaviour model. In self-play the true deal is
known, so the weights can be scored against it. Three scores, each computed under uniform
weights and under every posterior variant, on the same worlds of the same decisions:

- P(true): for every *contested* tile (its owner differs between the decision's worlds:
  the hidden tiles the sample is unsure of), the weight on the seat that really holds it;
- Brier: for the same tiles, the sum over seats of (P(seat) - [seat holds it])^2, a proper
  score (lower is better): no weighting beats the true posterior on it in expectation, so
  unlike P(true) it punishes overconfident weights;
- E[Q] error: (E[Q] - Q in the true deal)^2 over the legal moves of decisions with >= 2,
  with the true deal's Q from the exact solver. E[Q] is the best predictor of the true
  deal's Q under the true posterior, so a better posterior lowers it; most of it is the
  hidden information itself (an RMSE of ~17 points), so its differences are noisy.

One run plays the games under the first variant (the others only reweight the same worlds,
so every comparison is paired: same decisions, same worlds). The behaviour model's rows
are computed for the longest window of all variants; a variant with a shorter window
scores only its last K steps of them, and a variant without the actor's own plays masks
those steps. Intervals are 95% over games (the tiles and moves of one game are not
independent).

A variant with `beh=stage2` scores the plays with a Stage 2 model (`--stage2`; by default
the E[Q] model `stage2_eq` the recorded figures used) instead of the
network's perfect-information Q (`eqfast.stage2.behaviour.window_values`): each world's
deal is replayed through the public plays and, at every window step, the actor's
transcript in that world (its hand there, the plays so far) gives the model's E[Q] per
move, the value an E[Q] player reads from its own information set. The actor's own plays
then weigh every world alike, as they should.

The players are the E[Q] engine's greedy players with the shipped network as oracle
(`--oracle exact`: the solver, as in the CPU default) and the network as behaviour model
(N worlds per decision): the behaviour model scores plays with
perfect-information Q, while the players chose them by E[Q] over their own worlds. So this
measures how much the model's reading of a play says about the hidden hands of such
players, not of people.

    python benchmarks/posterior_truth.py --games 400
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch

from eqfast.analysis.truth import SCORE_KEYS, decision_scores, paired_gain, true_owner, true_q
from eqfast.engine import pipeline
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.posterior import PosteriorConfig
from eqfast.stage2.behaviour import window_values
from eqfast.stage2.weights import load_stage2, stage2_weights
from eqfast.engine.worlds import own_play_steps
from eqfast.oracle import ExactOracle, load_default_oracle

NAMED = {
    "spec": PosteriorConfig(),
    "skip-own-plays": PosteriorConfig(own_plays=False),
}
DEFAULT_VARIANTS = ("spec,skip-own-plays,tau=3,tau=5,tau=20,tau=30,beta=0,beta=0.3,window_k=4,"
                    "window_k=16,window_k=28,tau=20+window_k=16,tau=20+window_k=28,"
                    "ess_remix_threshold=0,delta=10")


def parse_variant(text: str) -> tuple[PosteriorConfig, str]:
    """(config, behaviour model) of a named variant, or of PosteriorConfig fields joined by
    '+' ('tau=3+window_k=16'), where 'beh=stage2' scores the plays with the --stage2
    model instead of the network's perfect-information Q ('beh=network', the default)."""
    if text in NAMED:
        return NAMED[text], "network"
    fields = {f.name for f in dataclasses.fields(PosteriorConfig)}
    kw, beh = {}, "network"
    for part in text.split("+"):
        key, _, value = part.partition("=")
        if key == "beh" and value in ("network", "stage2"):
            beh = value
            continue
        if key not in fields or not value:
            raise ValueError(f"variant {text!r}: {part!r} is not FIELD=VALUE with FIELD one of "
                             f"{', '.join(sorted(fields))}, or beh=network|stage2")
        kw[key] = (value.lower() == "true" if key in ("own_plays", "strict")
                   else int(value) if key == "window_k" else float(value))
    return PosteriorConfig(**kw), beh


class Probe:
    """Wraps an Engine: each decision's posterior is computed for every variant on the same
    inputs (the first variant's weights go back to the engine and decide the play), and
    each recorded decision is scored under every variant and under uniform weights."""

    def __init__(self, engine: Engine, variants: dict[str, tuple[PosteriorConfig, str]],
                 stage2=None):
        self.variants = variants
        self.stage2 = stage2
        self.sums: dict[int, dict[str, np.ndarray]] = {}       # game seed -> [7] per key
        self._own = None
        self._logw = None
        make_prefix = pipeline.prefix_oracle_batch
        make_records = pipeline.records_from_step
        backend = engine.backend

        def prefix(games, initial, window):
            self._own = own_play_steps(games, window)
            self._s2 = None
            if any(beh == "stage2" for _, beh in self.variants.values()):
                self._s2 = window_values(self.stage2, games, initial, window)
            return make_prefix(games, initial, window)

        def posterior(q_past, legal_past, observed, step_valid, cfg, world_valid=None):
            K = step_valid.shape[1]
            out = {}
            for name, (v, beh) in self.variants.items():
                steps = step_valid & (torch.arange(K) >= K - v.window_k)[None, :]
                if not v.own_plays:
                    steps = steps & ~self._own
                q, lg = q_past, legal_past
                if beh == "stage2":
                    q, lg = self._s2
                    on = steps[:, None, :, None] & world_valid[:, :, None, None]
                    if not torch.equal(lg & on, legal_past.bool() & on):
                        raise RuntimeError("Stage 2's legal moves at a window step differ "
                                           "from the prefix batch's")
                out[name] = backend.posterior_log_weights(
                    q, lg, observed, steps, dataclasses.replace(v, window_k=K),
                    world_valid=world_valid)
            self._logw = {n: lw for n, (lw, _) in out.items()}
            return out[next(iter(self.variants))]

        def records(games, moments, legal, selection, **kw):
            self._score(games, legal, kw)
            return make_records(games, moments, legal, selection, **kw)

        self._restore = (make_prefix, make_records)
        pipeline.prefix_oracle_batch = prefix
        pipeline.records_from_step = records
        engine.backend = dataclasses.replace(backend, posterior_log_weights=posterior)

    def close(self):
        """Put back the pipeline functions the probe wrapped (the engine stays wrapped)."""
        pipeline.prefix_oracle_batch, pipeline.records_from_step = self._restore

    def _score(self, games, legal, kw):
        rows = kw.get("rows")
        keep = (torch.ones(games.batch_size, dtype=torch.bool) if rows is None
                else rows.bool().cpu())
        owner = kw["world_owner"].long().cpu()                      # [G, N, 28]
        wq = kw["world_q"].double().cpu()                           # [G, N, 7] initial slots
        qt, solver_legal = true_q(games)                            # [G, 7]
        if not torch.equal(solver_legal, legal.bool().cpu()):
            raise RuntimeError("the solver's legal moves differ from the engine's")
        seeds = torch.as_tensor(kw["seeds"]).tolist()
        weights = {n: lw.double().exp().cpu() for n, lw in self._logw.items()}
        on = weights[next(iter(weights))] > 0
        weights["uniform"] = on.double() / on.sum(1, keepdim=True)
        trick = (games.n_plays // 4).tolist()
        names = list(weights)
        stacked = torch.stack([weights[n] for n in names], 1)                  # [G, V, N]
        for g in torch.nonzero(keep)[:, 0].tolist():
            acc = self.sums.setdefault(seeds[g], {})
            t = trick[g]
            s = decision_scores(stacked[g][:, on[g]], owner[g, on[g]], true_owner(seeds[g]),
                                wq[g, on[g]], qt[g])
            for key in SCORE_KEYS:
                for v, name in enumerate(names):
                    acc.setdefault(f"{key}:{name}", np.zeros(7))[t] += float(s[key][v])
            acc.setdefault("tiles", np.zeros(7))[t] += s["tiles"]
            acc.setdefault("moves", np.zeros(7))[t] += s["moves"]

    def table(self) -> dict[str, np.ndarray]:
        """key -> [games, 7] sums."""
        seeds = sorted(self.sums)
        return {k: np.stack([self.sums[s][k] for s in seeds]) for k in self.sums[seeds[0]]}


def report(t: dict[str, np.ndarray], names: list[str]) -> list[str]:
    tiles, moves = t["tiles"], t["moves"]
    lines = [f"{len(tiles)} games, {int(tiles.sum())} contested tiles, {int(moves.sum())} "
             "legal moves of decisions with >= 2",
             f"uniform: P(true) {t['p:uniform'].sum() / tiles.sum():.4f}, Brier "
             f"{t['brier:uniform'].sum() / tiles.sum():.4f}, E[Q] RMSE "
             f"{np.sqrt(t['sq:uniform'].sum() / moves.sum()):.3f} points",
             "gain over uniform (+ = better), 95% over games; then Brier gain by trick 1..6",
             f"{'variant':26s} {'P(true)':>17s} {'Brier':>17s} {'E[Q] sq. error':>15s}  "
             "Brier gain by trick"]
    for name in names:
        p = paired_gain(t[f"p:{name}"], t["p:uniform"], tiles)
        b = paired_gain(t["brier:uniform"], t[f"brier:{name}"], tiles)
        s = paired_gain(t["sq:uniform"], t[f"sq:{name}"], moves)
        by = [(t["brier:uniform"][:, k].sum() - t[f"brier:{name}"][:, k].sum())
              / max(tiles[:, k].sum(), 1) for k in range(6)]
        lines.append(f"{name:26s} {p[0]:+.4f} +- {p[1]:.4f} {b[0]:+.4f} +- {b[1]:.4f} "
                     f"{s[0]:+6.2f} +- {s[1]:5.2f}  " + " ".join(f"{x:+.4f}" for x in by))
    first = names[0]
    lines.append(f"difference to {first} (+ = better than {first}), 95% over games")
    for name in names[1:]:
        b = paired_gain(t[f"brier:{first}"], t[f"brier:{name}"], tiles)
        s = paired_gain(t[f"sq:{first}"], t[f"sq:{name}"], moves)
        lines.append(f"{name:26s} Brier {b[0]:+.4f} +- {b[1]:.4f}   E[Q] sq. error "
                     f"{s[0]:+6.2f} +- {s[1]:5.2f}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", type=int, default=400)
    ap.add_argument("--seed-start", type=int, default=7_000_000, help="first game seed")
    ap.add_argument("--n-samples", type=int, default=64, help="worlds per decision")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS,
                    help="comma-separated, the first one plays: spec, skip-own-plays, or "
                         "PosteriorConfig fields joined by '+' (tau=3+window_k=16)")
    ap.add_argument("--oracle", choices=("default", "exact"), default="default",
                    help="the players' oracle: the shipped network, or the exact solver (the "
                         "behaviour model stays the network, as in the CPU default)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--stage2", default="stage2_eq", metavar="WEIGHTS",
                    help="the Stage 2 model of beh=stage2 variants (a file, or the name of one "
                         "in eqfast/models; the E[Q] model by default, as the recorded figures)")
    a = ap.parse_args()
    names = a.variants.split(",")
    try:
        variants = {n: parse_variant(n) for n in names}
    except ValueError as e:
        ap.error(f"--variants: {e}")
    torch.set_num_threads(a.threads)
    network = load_default_oracle()
    window = max(v.window_k for v, _ in variants.values())
    first, beh = variants[names[0]]
    if beh != "network":
        ap.error("--variants: the first variant plays the games: it must use the network")
    played = dataclasses.replace(first, window_k=window)
    engine = Engine(ExactOracle() if a.oracle == "exact" else network,
                    EngineConfig(n_samples=a.n_samples, posterior=played, seed=0,
                                 store_worlds=True), behaviour_oracle=network)
    stage2 = (load_stage2(stage2_weights(a.stage2)) if any(b == "stage2" for _, b in variants.values()) else None)
    probe = Probe(engine, variants, stage2)
    players = "the exact solver" if a.oracle == "exact" else "the shipped network"
    print(f"{a.games} games from seed {a.seed_start}, N = {a.n_samples}, greedy players "
          f"under {names[0]} with {players} as oracle, the shipped network as behaviour "
          f"model; behaviour rows over the last {window} plays")
    for n in names:
        print(f"  {n}: {dataclasses.asdict(variants[n][0])}, behaviour {variants[n][1]}")
    t0 = time.perf_counter()
    seeds = list(range(a.seed_start, a.seed_start + a.games))
    try:
        for i in range(0, len(seeds), 20):
            engine.play(seeds[i:i + 20])
    finally:
        probe.close()
    print(f"{time.perf_counter() - t0:.0f} s")
    for line in report(probe.table(), names):
        print(line, flush=True)


if __name__ == "__main__":
    main()
