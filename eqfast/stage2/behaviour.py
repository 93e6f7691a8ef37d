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
`beh=stage2`; benchmarks/RESULTS.md "The posterior against the true deal"). The engine
does not use it yet.
"""
from __future__ import annotations

import torch

from ..engine.public import mask_to_sorted_ids
from ..rules.batched import BatchedGames
from .policy import stage2_mu


@torch.no_grad()
def window_values(model, games: BatchedGames, initial: torch.Tensor,
                  window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mu [G, N, K, 7] float32 points, legal [G, N, K, 7] bool) at the last K = `window`
    plays of every game in every world, in the frame and initial-hand slots of each step's
    actor; zeros / False at steps before the first play.

    games: the games at the decision (all at one number of plays); initial: [G, N, 4]
    28-bit initial-hand masks of the worlds (`eqfast.engine.worlds.world_tile_masks`).
    Each world's deal is replayed through the public plays (`BatchedGames.play_tile`, which
    refuses a tile the world's hand does not hold) and the model reads the actor's
    transcript at each window step (`stage2_mu`).
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
            m, lg, slot_of_pos = stage2_mu(model, world)
            # current-hand positions -> initial-hand slots; padding goes to spare column 7
            idx = torch.where(slot_of_pos >= 0, slot_of_pos, 7)
            mu[:, k].scatter_(1, idx, m.float())
            legal[:, k].scatter_(1, idx, lg)
        world = world.play_tile(games.tiles[:, j].repeat_interleave(N))
    return mu[..., :7].reshape(G, N, window, 7), legal[..., :7].reshape(G, N, window, 7)
