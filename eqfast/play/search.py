"""The `search` player: Stage 2 with a look-ahead over sampled worlds.

Stage 2 alone (`stage2`) plays the legal move of highest μ, one forward pass over the
acting seat's transcript. `search:N:T` looks further at each decision with two or more
legal moves:

1. Draw N worlds uniformly among the deals consistent with what the actor knows (its own
   hand, the plays, the voids they showed: `eqfast.engine.sampling`, the E[Q] player's
   sampler, keyed by (run seed, game seed, decision, STREAM_SEARCH)).
2. In every world, value every legal move by a Stage 2 rollout
   (`eqfast.stage2.rollout.rollout_values`): the move, then Stage 2 at every seat, each
   from its own information in that world, until the actor's T-th next turn (its μ there
   closes the value) or the end of the hand (T = 7, the default: a full rollout).
3. Play the move of highest mean value over the worlds (enumerated worlds count once;
   ties to the lowest slot). A single legal move is played without search.

The same N worlds serve every move (common random numbers), so the differences between
moves carry less noise than each value. Nothing hidden is read: the worlds are drawn from
public information, and in each world every seat's move is Stage 2's from that world's
information (tests/test_arena.py swaps the hidden hands and checks the moves;
tests/test_search.py checks the values against the real deal played on). Cost: one Stage
2 forward over (legal moves x N) rows per game for every play simulated; docs/PLAY.md has
its strength and speed.
"""
from __future__ import annotations

import numpy as np
import torch

from ..engine.public import hidden_info
from ..engine.sampling import completion_counts, sample_worlds
from ..engine.worlds import world_games
from ..rules.batched import BatchedGames
from ..rules.deal import mix_seeds
from ..stage2.rollout import DEFAULT_ROLLOUT_TURNS, check_turns, rollout_values

#: key stream of the search's world draws (the engine uses 1 and 2, `random` 3)
STREAM_SEARCH = 4
DEFAULT_SEARCH_WORLDS = 16
DEFAULT_SEARCH_TURNS = DEFAULT_ROLLOUT_TURNS


class SearchPolicy:
    """`search[:N[:T[:WEIGHTS]]]`: see the module doc."""

    cheating = False

    def __init__(self, n_worlds: int = DEFAULT_SEARCH_WORLDS,
                 turns: int = DEFAULT_SEARCH_TURNS, path=None, run_seed: int = 0,
                 device="cpu"):
        from ..stage2.weights import fingerprint, load_stage2, stage2_weights

        if n_worlds < 1:
            raise ValueError(f"the number of worlds must be >= 1, got {n_worlds}")
        check_turns(turns)
        self.model = load_stage2(stage2_weights(path)).to(device).eval()
        self.n_worlds, self.turns, self.run_seed = n_worlds, turns, run_seed
        self.name = f"search:{n_worlds}:{turns}" + ("" if path is None else f":{path}")
        # what its play depends on beyond the name (the league refuses a changed file)
        self.identity = {"name": "stage2", "sha256": fingerprint(stage2_weights(path))}

    @torch.no_grad()
    def values(self, games: BatchedGames, seeds, decision: int) -> torch.Tensor:
        """Mean look-ahead value [G, 7] (points, the actor's team frame) of every legal
        initial-hand slot of each game's actor; -inf at the other slots."""
        G, N, dev = games.batch_size, self.n_worlds, games.device
        info = hidden_info(games)
        keys = torch.from_numpy(mix_seeds(self.run_seed, np.asarray(seeds, dtype=np.int64),
                                          decision, STREAM_SEARCH)).to(dev)
        sample = sample_worlds(info, completion_counts(info), keys, N)
        worlds = world_games(games, info, sample.owner.long())              # G*N rows
        q = rollout_values(self.model, worlds, self.turns).reshape(G, N, 7)
        w = sample.valid.float()[:, :, None]
        mean = (torch.where(torch.isfinite(q), q, 0.0) * w).sum(1) / w.sum(1)
        return torch.where(games.legal_mask(), mean, float("-inf"))

    def decide(self, games, seeds, decision):
        legal = games.legal_mask()
        slot = legal.long().argmax(1)                       # the lowest legal slot
        todo = torch.nonzero(legal.sum(1) > 1)[:, 0]
        if todo.numel():
            seeds = np.asarray(seeds, dtype=np.int64)[todo.cpu().numpy()]
            v = self.values(games.select(todo), seeds, decision)
            slot[todo] = v.argmax(1)                        # first maximum: lowest slot
        return slot


__all__ = ["SearchPolicy", "STREAM_SEARCH"]
