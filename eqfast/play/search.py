"""The `search` player: Stage 2 with a look-ahead over sampled worlds.

Stage 2 alone (`stage2`) plays the legal move of highest μ, one forward pass over the
acting seat's transcript. `search:N:T` looks further at each decision with two or more
legal moves:

1. Draw N worlds uniformly among the deals consistent with what the actor knows (its own
   hand, the plays, the voids they showed: `eqfast.engine.sampling`, the E[Q] player's
   sampler, keyed by (run seed, game seed, decision, STREAM_SEARCH)).
2. In every world, for every legal move m: play m, then let every seat play on with the
   Stage 2 model, each from its own information in that world (its hand there and the
   public transcript), until the actor's T-th turn after this one, or to the end of the
   hand (T = 7 always reaches it: a full rollout).
3. The move's value in that world is the points the actor's team took minus the points
   the other team took on the way, plus, where the actor is to play again, the Stage 2 μ
   of its best legal move there (μ is E[Q] to go in the actor's team frame,
   docs/STAGE2.md).
4. It plays the move of highest mean value over the worlds (enumerated worlds count once;
   ties to the lowest slot). A single legal move is played without search.

Why the horizon is one of the actor's own turns: a value read from another seat's μ is
that seat's expectation from its information, blind to what the actor knows (a partner
leading next does not know the actor still holds the boss trump), so a horizon at the end
of a trick, where the trick's winner leads, undervalues exactly the moves that keep the
actor's strength in hand. Measured on 300 hands against Stage 2: horizon at the end of
the trick -1.77 [-2.87, -0.68] points a hand, at the actor's next turn +0.63 [-0.78,
+2.05], full rollout +2.37 [+0.93, +3.81] (docs/PLAY.md has the league figures).

The same N worlds serve every move (common random numbers), so the differences between
moves carry less noise than each value. Nothing hidden is read: the worlds are drawn from
public information, and in each world every seat's move is Stage 2's from that world's
information (tests/test_arena.py swaps the hidden hands and checks the moves;
tests/test_search.py checks the values against the real deal played on). Cost: one Stage
2 forward over (legal moves x N) rows per game for every play simulated.
"""
from __future__ import annotations

from dataclasses import fields

import numpy as np
import torch

from ..engine.public import hidden_info
from ..engine.sampling import completion_counts, sample_worlds
from ..engine.worlds import remaining_slots, world_hands
from ..rules.batched import BatchedGames
from ..rules.deal import mix_seeds
from ..rules.tables import N_SEATS

#: key stream of the search's world draws (the engine uses 1 and 2, `random` 3)
STREAM_SEARCH = 4
DEFAULT_SEARCH_WORLDS = 16
DEFAULT_SEARCH_TURNS = 7


def _played_all(games: BatchedGames) -> torch.Tensor:
    """28-bit mask [B] of every tile played so far."""
    bits = torch.where(games.tiles >= 0, 1 << games.tiles.clamp(min=0),
                       torch.zeros_like(games.tiles))
    return bits.sum(1)                       # distinct tiles: the sum is the union


def world_games(games: BatchedGames, owner: torch.Tensor) -> BatchedGames:
    """The G*N games (row g*N + i) of game g's position in its world i: the sampled hidden
    hands `owner` [G, N, 21], everything public as in `games`."""
    G, N = owner.shape[:2]
    info = hidden_info(games)
    hands = world_hands(games, info, owner)                              # [G,N,4,7]
    rem = remaining_slots(hands, _played_all(games)[:, None, None])      # [G,N,4]
    rep = lambda x: x.repeat_interleave(N, dim=0)
    return BatchedGames(hands=hands.reshape(G * N, N_SEATS, -1), remaining=rem.reshape(G * N, N_SEATS),
                        decl=rep(games.decl), leader=rep(games.leader), trick=rep(games.trick),
                        n_plays=rep(games.n_plays), seats=rep(games.seats),
                        tiles=rep(games.tiles), points=rep(games.points), voids=rep(games.voids))


#: rows per Stage 2 forward: a [256, T, 64] activation stays in the CPU's cache; one forward
#: over 3,200 rollout rows took 1.7x the time of the same rows in chunks of 256 (2-core VM,
#: one thread, 16 plays into the hand)
CHUNK_ROWS = 256


def _chunked(fn, games: BatchedGames):
    """fn(games) over chunks of CHUNK_ROWS rows, the outputs concatenated (a tensor or a
    tuple of tensors)."""
    if games.batch_size <= CHUNK_ROWS:
        return fn(games)
    outs = [fn(games.select(slice(i, i + CHUNK_ROWS)))
            for i in range(0, games.batch_size, CHUNK_ROWS)]
    if isinstance(outs[0], tuple):
        return tuple(torch.cat(parts) for parts in zip(*outs))
    return torch.cat(outs)


def _assign(games: BatchedGames, idx: torch.Tensor, sub: BatchedGames) -> BatchedGames:
    """`games` with rows `idx` replaced by the rows of `sub`."""
    out = {}
    for f in fields(games):
        x = getattr(games, f.name).clone()
        x[idx] = getattr(sub, f.name)
        out[f.name] = x
    return BatchedGames(**out)


class SearchPolicy:
    """`search[:N[:T[:WEIGHTS]]]`: see the module doc."""

    cheating = False

    def __init__(self, n_worlds: int = DEFAULT_SEARCH_WORLDS,
                 turns: int = DEFAULT_SEARCH_TURNS, path=None, run_seed: int = 0,
                 device="cpu"):
        from ..stage2.weights import DEFAULT_STAGE2, load_stage2

        if n_worlds < 1:
            raise ValueError(f"the number of worlds must be >= 1, got {n_worlds}")
        if not 1 <= turns <= 7:
            raise ValueError(f"the look-ahead must be 1..7 of the actor's turns, got {turns}")
        self.model = load_stage2(DEFAULT_STAGE2 if path is None else path).to(device).eval()
        self.n_worlds, self.turns, self.run_seed = n_worlds, turns, run_seed
        self.name = f"search:{n_worlds}:{turns}" + ("" if path is None else f":{path}")

    @torch.no_grad()
    def values(self, games: BatchedGames, seeds, decision: int) -> torch.Tensor:
        """Mean look-ahead value [G, 7] (points, the actor's team frame) of every legal
        initial-hand slot of each game's actor; -inf at the other slots."""
        from ..stage2.policy import stage2_mu, stage2_slots

        G, N, dev = games.batch_size, self.n_worlds, games.device
        n_now = int(games.n_plays[0])
        if bool((games.n_plays != n_now).any()):
            raise ValueError("search: the games of a batch must be at the same play")
        info = hidden_info(games)
        keys = torch.from_numpy(mix_seeds(self.run_seed, np.asarray(seeds, dtype=np.int64),
                                          decision, STREAM_SEARCH)).to(dev)
        sample = sample_worlds(info, completion_counts(info), keys, N)
        worlds = world_games(games, sample.owner.long())                    # G*N rows

        legal = games.legal_mask()                                           # [G,7]
        g_of, slot_of = torch.nonzero(legal, as_tuple=True)                  # P candidates
        P = g_of.shape[0]
        rows = (g_of[:, None] * N + torch.arange(N, device=dev)).reshape(-1)  # P*N
        sim = worlds.select(rows)
        actor = games.current_player[g_of].repeat_interleave(N)
        tile = games.hands[g_of, games.current_player[g_of], slot_of].repeat_interleave(N)
        sign = torch.where(actor % 2 == 0, 1, -1)
        start = sim.score()
        sim = sim.play_tile(tile)
        R = sim.batch_size
        value = torch.zeros(R, device=dev)
        done = torch.zeros(R, dtype=torch.bool, device=dev)
        turns = torch.zeros(R, dtype=torch.int64, device=dev)
        while not bool(done.all()):
            over = sim.is_over & ~done
            value = torch.where(over, (sign * (sim.score() - start)).float(), value)
            done |= over
            at_actor = (sim.current_player == actor) & ~done
            turns += at_actor.long()
            stop = at_actor & (turns >= self.turns)
            if bool(stop.any()):
                idx = torch.nonzero(stop)[:, 0]
                mu, leg, _ = _chunked(lambda g: stage2_mu(self.model, g), sim.select(idx))
                best = torch.where(leg, mu.float(), torch.full_like(mu, float("-inf"),
                                                                     dtype=torch.float32))
                value[idx] = (sign * (sim.score() - start))[idx].float() + best.max(1).values
                done |= stop
            idx = torch.nonzero(~done)[:, 0]
            if idx.numel():
                sub = sim.select(idx)
                slots = _chunked(lambda g: stage2_slots(self.model, g), sub)
                sim = _assign(sim, idx, sub.play(slots))
        w = sample.valid[g_of].float()                                       # [P, N]
        mean = (value.reshape(P, N) * w).sum(1) / w.sum(1)
        out = torch.full((G, 7), float("-inf"), device=dev)
        out[g_of, slot_of] = mean
        return out

    def decide(self, games, seeds, decision):
        legal = games.legal_mask()
        slot = legal.long().argmax(1)                       # the lowest legal slot
        todo = torch.nonzero(legal.sum(1) > 1)[:, 0]
        if todo.numel():
            seeds = np.asarray(seeds, dtype=np.int64)[todo.cpu().numpy()]
            v = self.values(games.select(todo), seeds, decision)
            slot[todo] = v.argmax(1)                        # first maximum: lowest slot
        return slot


__all__ = ["SearchPolicy", "world_games", "STREAM_SEARCH"]
