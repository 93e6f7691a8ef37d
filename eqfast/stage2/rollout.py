"""Stage 2 rollouts: the value of every legal move of a perfect-information position played
on by the Stage 2 model at every seat, each seat from its own information.

`rollout_values(model, worlds, turns)` takes positions as `BatchedGames` rows (one hidden
deal each, e.g. a sampled world of a real game: `eqfast.engine.worlds.world_games`) and,
for every legal initial-hand slot m of each row's actor: plays m, lets Stage 2 play every
seat on (each seat's move from its hand in that row and the public transcript, as the
`stage2` player would) until the actor's `turns`-th next turn or the end of the hand, and
returns the points the actor's team took on the way minus the other team's, plus, where
the actor is to play again, Stage 2's μ of its best legal move there (E[Q] to go in the
actor's team frame, docs/STAGE2.md). With turns = 7 every rollout reaches the end of the
hand and the value is the points alone.

`exact_from` (a play count, 4 (K - 1) for trick K) ends a rollout instead where the hand
reaches that many plays: the value is then the points taken so far plus the exact solver's
perfect-information value of the rest of the hand in that world (`eqfast.solver.v_batch`).
Stage 2 plays the tricks before K, where every seat's ignorance of the others' hands
matters, and perfect play the last ones, where few tiles are hidden and the exact
`endgame` player comes close to it (docs/PLAY.md). A decision at trick K or later is then
valued as the exact oracle values it.

The horizon is one of the actor's own turns because a μ read at another seat's turn is
that seat's expectation from its own information, blind to what the actor knows (a
partner about to lead does not know that the actor holds the boss trump), so it
undervalues the moves that keep the actor's strength in hand: as a `search` player with 16
worlds, a horizon at the end of the current trick lost 1.77 [0.68, 2.87] points a hand to
plain Stage 2 (300 hands from seed 7,000,000), while the horizon at the actor's next turn
did not (+0.63 [-0.78, +2.05]).

Two users: the `search` player (eqfast/play/search.py: the mean over sampled worlds, the
move of highest mean) and `RolloutOracle`, the same values as an engine oracle
(`eqfast-generate --oracle rollout[:T[:WEIGHTS]]`): E[Q] over worlds of the Stage 2
continuation, a label without the every-seat-sees-every-hand assumption of the
perfect-information oracles (docs/STAGE2.md, "Rollout labels").
"""
from __future__ import annotations

import hashlib

import torch

from ..rules.batched import BatchedGames
from .policy import stage2_mu, stage2_slots

#: rows per Stage 2 forward on the CPU: a [256, T, 64] activation stays in the cache; one
#: forward over 3,200 rollout rows took 1.7x the time of the same rows in chunks of 256
#: (2-core VM, one thread, 16 plays into the hand)
CHUNK_ROWS = 256
#: rows per forward on a GPU, where a 256-row forward is a few microseconds of work behind
#: each kernel launch: a generate batch of 2,048 games at N = 16 asks about 130,000 rollout
#: rows per simulated play, 8 forwards at this size instead of 500. The largest activation,
#: the attention scores, is 16,384 x 4 heads x 36 x 36 fp32 = 340 MB.
DEVICE_CHUNK_ROWS = 16384
DEFAULT_ROLLOUT_TURNS = 7


def chunk_rows(device) -> int:
    """Rows per Stage 2 forward on `device` (CHUNK_ROWS on the CPU, DEVICE_CHUNK_ROWS
    elsewhere); the values do not depend on it (tests/test_search.py)."""
    return CHUNK_ROWS if torch.device(device).type == "cpu" else DEVICE_CHUNK_ROWS


def chunked(fn, games: BatchedGames):
    """fn(games) over chunks of `chunk_rows(games.device)` rows, the outputs concatenated (a
    tensor or a tuple of tensors)."""
    rows = chunk_rows(games.device)
    if games.batch_size <= rows:
        return fn(games)
    outs = [fn(games.select(slice(i, i + rows)))
            for i in range(0, games.batch_size, rows)]
    if isinstance(outs[0], tuple):
        return tuple(torch.cat(parts) for parts in zip(*outs))
    return torch.cat(outs)


def check_turns(turns: int) -> None:
    """ValueError unless the look-ahead `turns` is 1..7 (the actor has at most 7 turns)."""
    if not 1 <= turns <= 7:
        raise ValueError(f"the look-ahead must be 1..7 of the actor's turns, got {turns}")


def exact_rest(games: BatchedGames) -> torch.Tensor:
    """Perfect-information value [B] (team-0 frame, points to go) of each row's rest of
    the hand, by the exact solver on the CPU."""
    from ..engine.public import solver_positions
    from ..solver import v_batch

    v = v_batch(*solver_positions(games))
    return torch.from_numpy(v.astype("float32")).to(games.device)


@torch.no_grad()
def rollout_values(model, worlds: BatchedGames, turns: int = DEFAULT_ROLLOUT_TURNS,
                   exact_from: int | None = None) -> torch.Tensor:
    """Value [R, 7] float32 (points, the actor's team frame) of every legal initial-hand
    slot of each row's actor (module doc); -inf at the other slots. Rows finished already
    have no legal slot. `exact_from`: the play count from which the solver's value ends
    the rollout (module doc); None: Stage 2 plays to the horizon."""
    check_turns(turns)
    legal = worlds.legal_mask()
    r_of, slot_of = torch.nonzero(legal, as_tuple=True)
    sim = worlds.select(r_of)
    value = torch.zeros(sim.batch_size, device=worlds.device)
    # the rows still playing: their index into value, and their actor, sign, score at the
    # start and turns seen so far; rows that end or reach the horizon leave these
    live = torch.arange(sim.batch_size, device=worlds.device)
    actor = worlds.current_player[r_of]
    sign = torch.where(actor % 2 == 0, 1, -1)
    start = sim.score()
    seen = torch.zeros_like(actor)
    sim = sim.play(slot_of)
    while live.numel():
        gained = (sign * (sim.score() - start)).float()
        over = sim.is_over
        at_actor = (sim.current_player == actor) & ~over
        seen = seen + at_actor.long()
        stop = at_actor & (seen >= turns)
        value[live[over]] = gained[over]
        if exact_from is not None:
            # the exact rest of the hand ends the rollout (before any μ horizon there)
            solve = (sim.n_plays >= exact_from) & ~over
            if bool(solve.any()):
                rest = exact_rest(sim.select(solve))
                value[live[solve]] = gained[solve] + sign[solve].float() * rest
            stop = stop & ~solve
        else:
            solve = torch.zeros_like(over)
        if bool(stop.any()):
            mu, leg, _ = chunked(lambda g: stage2_mu(model, g), sim.select(stop))
            best = torch.where(leg, mu.float(), torch.full_like(mu, float("-inf"),
                                                                 dtype=torch.float32))
            value[live[stop]] = gained[stop] + best.max(1).values
        keep = ~(over | stop | solve)
        if not bool(keep.all()):
            sim, live = sim.select(keep), live[keep]
            actor, sign, start, seen = actor[keep], sign[keep], start[keep], seen[keep]
        if live.numel():
            sim = sim.play(chunked(lambda g: stage2_slots(model, g), sim))
    out = torch.full((worlds.batch_size, 7), float("-inf"), device=worlds.device)
    out[r_of, slot_of] = value
    return out


class RolloutOracle:
    """`rollout_values` as an engine oracle over whole games (`Engine` asks
    `query_worlds(worlds)` with one row per sampled world, the transcript included,
    instead of `query(OracleBatch)`, which holds positions without their history). Q at
    the legal slots is the rollout value clamped to [-42, 42] (a horizon μ may stray past
    the possible range); 0 at the other slots."""

    def __init__(self, model, turns: int = DEFAULT_ROLLOUT_TURNS, exact_from: int | None = None):
        check_turns(turns)
        self.model = model.eval()
        self.turns = turns
        self.exact_from = exact_from

    def query_worlds(self, worlds: BatchedGames) -> tuple[torch.Tensor, torch.Tensor]:
        v = rollout_values(self.model, worlds, self.turns, self.exact_from)
        legal = torch.isfinite(v)
        return torch.where(legal, v.clamp(-42.0, 42.0), torch.zeros_like(v)), legal


def is_rollout_spec(spec: str | None) -> bool:
    return spec is not None and (spec == "rollout" or spec.startswith("rollout:"))


def rollout_from_spec(spec: str, device="cpu"):
    """(RolloutOracle, identity) for 'rollout[:T[:WEIGHTS]]' (T default 7, the shipped
    Stage 2 model by default) or 'rollout:exactK[:WEIGHTS]' (Stage 2 plays to trick K,
    the exact solver's value of the rest: `exact_from` 4 (K - 1)). ValueError naming the
    problem."""
    from .weights import load_stage2, stage2_weights

    parts = spec.split(":", 2)[1:]
    turns, exact_trick = DEFAULT_ROLLOUT_TURNS, None
    if parts and parts[0].startswith("exact"):
        text = parts[0][len("exact"):]
        if not (text.isdigit() and 2 <= int(text) <= 7):
            raise ValueError(f"{spec!r}: exactK needs the first exact trick K, 2..7, got "
                             f"{parts[0]!r}")
        exact_trick = int(text)
    elif parts and parts[0]:
        if not parts[0].isdigit():
            raise ValueError(f"{spec!r}: the look-ahead T must be a whole number 1..7 or "
                             f"exactK, got {parts[0]!r}")
        turns = int(parts[0])
    path = stage2_weights(parts[1] if len(parts) > 1 else None)
    model = load_stage2(path).to(device)                 # Stage2WeightsError names the file
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    exact_from = None if exact_trick is None else 4 * (exact_trick - 1)
    oracle = RolloutOracle(model, turns, exact_from)
    if exact_trick is None:
        tag, label = f"rollout{turns}", ("to the end" if turns == 7 else f"{turns} turns")
    else:
        tag, label = f"rollout-exact{exact_trick}", f"to trick {exact_trick}, then exact"
    return oracle, {"name": spec, "path": str(path), "sha256": f"{sha}+{tag}",
                    "label": f"Stage 2 rollouts ({label})"}


__all__ = ["rollout_values", "RolloutOracle", "rollout_from_spec", "is_rollout_spec",
           "chunked", "chunk_rows", "check_turns", "exact_rest", "CHUNK_ROWS", "DEVICE_CHUNK_ROWS",
           "DEFAULT_ROLLOUT_TURNS"]
