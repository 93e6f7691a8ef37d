"""The Stage 2 model as a behaviour model for the posterior: the value each past play had
from its player's own information set, in every sampled world.

The posterior (eqfast/engine/posterior.py) scores the last K plays of the transcript in
each world. The spec's behaviour model reads them with an oracle's perfect-information Q,
as if each player had seen every hand. An E[Q] player chooses from its own information set
instead: its hand and the public transcript. In a sampled world that hand is known, so
replaying the world's deal through the public plays gives, at every window step, the
transcript the player saw; the Stage 2 model turns it into E[Q] per move.

The values come back in the layout of `eqfast.engine.worlds.prefix_oracle_batch` (the
step's actor's initial-hand slots, ascending tile ids), so the posterior's code reads them
as it reads an oracle's Q. The acting player's own past plays get the same values in every
world (its hand and the transcript do not depend on the world), so they do not move the
weights, as a model of that player should have it.

Measured against the true deal in self-play (benchmarks/posterior_truth.py, variants
`beh=stage2`; benchmarks/RESULTS.md "The posterior against the true deal"). The reference
Engine takes it as its behaviour model (`Stage2Behaviour`; `eqfast-generate --posterior
--behaviour-oracle stage2[:PATH]`, built by `behaviour_from_spec`).
"""
from __future__ import annotations

import hashlib

import torch

from ..engine.pipeline import distinct_per_game
from ..engine.public import mask_to_sorted_ids
from ..rules.batched import BatchedGames
from .policy import stage2_mu


@torch.no_grad()
def window_values(model, games: BatchedGames, initial: torch.Tensor, window: int,
                  counts: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mu [G, N, K, 7] float32 points, legal [G, N, K, 7] bool) at the last K = `window`
    plays of every game in every world, in the frame and initial-hand slots of each step's
    actor; zeros / False at steps before the first play.

    games: the games at the decision (all at one number of plays); initial: [G, N, 4]
    28-bit initial-hand masks of the worlds (`eqfast.engine.worlds.world_tile_masks`).
    Each world's deal is replayed through the public plays (`BatchedGames.play_tile`, which
    refuses a tile the world's hand does not hold) and the model reads the actor's
    transcript at each window step (`stage2_mu`). Worlds that give a step's actor the same
    hand give it the same transcript, so each step's forward runs once per distinct
    (game, actor's hand): the acting player's own steps once per game. `counts`, if given,
    gains the rows the model evaluated under "rows".
    """
    G, N = initial.shape[:2]
    n = int(games.n_plays[0]) if G else 0
    if not bool((games.n_plays == n).all()):
        raise ValueError("window_values: the games must all be at one decision "
                         f"(plays so far: {sorted(set(games.n_plays.tolist()))})")
    dev = initial.device
    hands = mask_to_sorted_ids(initial, 7).reshape(G * N, 4, 7)
    first = torch.where(games.n_plays > 0, games.seats[:, 0], games.leader)
    world = BatchedGames.new(hands.cpu(), games.decl.repeat_interleave(N),
                             first.repeat_interleave(N), device=dev)
    mu = torch.zeros(G * N, window, 8, device=dev)
    legal = torch.zeros(G * N, window, 8, dtype=torch.bool, device=dev)
    for j in range(n):
        k = j - (n - window)
        if k >= 0:
            actor_hand = initial.gather(2, games.seats[:, j, None, None].expand(G, N, 1))
            rows, inverse = distinct_per_game(actor_hand[..., 0])
            m, lg, slot_of_pos = (t[inverse] for t in stage2_mu(model, world.select(rows)))
            if counts is not None:
                counts["rows"] = counts.get("rows", 0) + len(rows)
            # current-hand positions -> initial-hand slots; padding goes to spare column 7
            idx = torch.where(slot_of_pos >= 0, slot_of_pos, 7)
            mu[:, k].scatter_(1, idx, m.float())
            legal[:, k].scatter_(1, idx, lg)
        world = world.play_tile(games.tiles[:, j].repeat_interleave(N))
    return mu[..., :7].reshape(G, N, window, 7), legal[..., :7].reshape(G, N, window, 7)


class Stage2Behaviour:
    """The posterior's behaviour model from a Stage 2 model: `window_values` in the layout
    the Engine's posterior reads (eqfast.engine.pipeline.Engine, behaviour_oracle). It has
    no `query`: it is no oracle, and the fast pipeline cannot take it."""

    def __init__(self, model, device="cpu"):
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()

    def window_values(self, games: BatchedGames, initial: torch.Tensor, window: int,
                      counts: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return window_values(self.model, games, initial, window, counts)


def behaviour_from_spec(spec: str, device, eager: bool = False):
    """(behaviour model, identity) of a --behaviour-oracle spec: 'stage2' (the shipped Stage 2
    model) or 'stage2:PATH' as a Stage2Behaviour, any other spec through
    `eqfast.oracle.factory.oracle_from_spec`. The identity names the model as the spec,
    so a run's metadata rebuilds it. ValueError (naming the file) when it cannot load."""
    from ..oracle.factory import is_stage2_spec, oracle_from_spec, unknown_spec
    from .weights import load_stage2, stage2_weights

    problem = unknown_spec(spec, behaviour=True)
    if problem is not None:
        raise ValueError(problem)
    if not is_stage2_spec(spec):
        return oracle_from_spec(spec, device, eager=eager)
    path = stage2_weights(spec[len("stage2:"):])
    if not path.is_file():
        raise ValueError(f"{spec}: no such Stage 2 weights file {path}")
    model = load_stage2(path)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    label = "shipped Stage 2" if spec == "stage2" else f"Stage 2 {path.name}"
    return (Stage2Behaviour(model, device),
            {"name": spec, "path": str(path), "sha256": sha, "label": label})
