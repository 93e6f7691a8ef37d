"""Policies: who plays the acting seat. One interface for every player the arena measures.

A policy answers `decide(games, seeds, decision) -> slot [B] int64` for a `BatchedGames`
batch whose games are all at the same decision index (0..27; the arena keeps its games in
lockstep, as the engine does): for every game, the slot (index into the acting seat's
initial 7-tile hand, as `BatchedGames.play` takes) of a legal move. `seeds` are the games'
seeds; every random draw of a policy is keyed by (run seed, game seed, decision), so a
game's moves do not depend on the batch it is played in. Each policy has a `name` (shown in
every report) and a `cheating` flag: True for a player that looks at hidden hands.

Policies (the spec string of `policy_from_spec`, registry `POLICIES`):

    random          a uniformly random legal move
    rules           the rule-based player below
    eq:ORACLE[:N]   the E[Q] player: N worlds (default 32) consistent with the actor's
                    information (`eqfast.engine.public`), the oracle's Q of every legal
                    move in each, the move of highest mean (`Engine.decide`, greedy: ties
                    within 1e-4 points go to the lowest slot). ORACLE: default, accurate,
                    exact or a weights path (`eqfast.oracle.factory.oracle_from_spec`)
    perfect         CHEATING: sees all four hands and plays the exact solver's best move
                    (`eqfast.solver.q_batch`; ties to the lowest slot)
    stage2[:W]      the Stage 2 model (weights W, default eqfast/models/stage2.safetensors):
                    one forward pass over the public transcript, no search, the legal move
                    of highest predicted E[Q] (`eqfast.stage2.policy.stage2_slots`; ties to
                    the lowest current-hand slot)
    search[:N[:T[:W]]]  Stage 2 with a look-ahead: N sampled worlds (default 16), every
                    legal move played on by Stage 2 at every seat to the actor's T-th
                    next turn (default 7: the end of the hand), valued by the points
                    taken and the actor's μ at the horizon (eqfast/play/search.py)
    endgame[:T[:W]] Stage 2 (weights W) before trick T (default 5), then the exact E[Q]
                    player over every world consistent with the actor's information (the
                    solver's Q of each legal move, uniform worlds): a forward pass for the
                    first T - 1 tricks, an exact endgame for the rest
    split:T:LATE[:EARLY]  two Stage 2 models, one forward pass a decision: EARLY (default
                    the shipped weights) before trick T, LATE from trick T on (a model
                    trained on those tricks alone: eqfast-train-stage2 --tricks)

The rules player
----------------
It sees what the actor sees: its own remaining hand, the tiles played so far (the
transcript, with the current trick), the declaration and who leads. "Outstanding" tiles are
those neither played nor in its hand (the other three hands together). A tile's strength
in a trick is its rank for the led suit (docs/RULES.md "Who wins a trick"). Its cost, when
giving a tile away, orders by (count points, trump or not, rank in its own suit, tile id):
a count tile is the dearest, then a trump, then a high tile.

Leading:
  1. a sure winner: a tile that outranks every outstanding tile in the suit it would lead
     (so no other hand can beat it, even by trumping) takes the trick; of those it leads
     the one with the most count (ties: lowest tile id).
  2. otherwise the cheapest tile of its longest suit (tiles grouped by the suit they would
     lead; ties: the group whose cheapest tile is cheapest, then the lower suit).
Following (its legal tiles only):
  3. the partner is winning the trick and cannot be beaten (the actor plays last, or no
     outstanding tile outranks the partner's): feed it the legal tile with the most count,
     or the cheapest legal tile when none has count;
  4. an opponent is winning, the trick holds count or the actor plays last, and some legal
     tile outranks the winning one: take the trick with the lowest-ranked such tile;
  5. otherwise the cheapest legal tile.

Adding a policy: write a class with `name`, `cheating` and `decide`, and register a
constructor `(arg: str | None, ctx: PolicyContext) -> Policy` under its name in
`POLICIES` (arg is the text after "name:", None without one; say how it is written in
`USAGE` if it takes one); `policy_from_spec`, the arena and eqfast-arena then know it.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import Callable, Protocol, Sequence

import numpy as np
import torch

from ..engine.public import solver_positions
from ..rules.batched import BatchedGames
from ..rules.deal import mix_seeds
from ..rules.tables import (HAND_SIZE, IN_CALLED, LED_SUIT, N_SEATS, N_TILES, N_TRICKS,
                            POINTS, RANK)
from ..utils.rng import uniform_float
from .names import USAGE  # noqa: F401  (defined without torch, for --help)

#: key stream of the random policy's draws (the engine's world and policy draws use 1 and 2)
STREAM_RANDOM = 3
#: worlds per decision of the E[Q] player when the spec names none
DEFAULT_WORLDS = 32
#: the posterior's temperature and window with the Stage 2 behaviour model (eqfast-generate
#: --behaviour-oracle stage2 --tau 3 --window 16; docs/STAGE2.md)
STAGE2_TAU, STAGE2_WINDOW = 3.0, 16


class Policy(Protocol):
    name: str
    cheating: bool

    def decide(self, games: BatchedGames, seeds: Sequence[int], decision: int) -> torch.Tensor:
        """Slot [B] int64 of a legal move of every game's acting seat."""


@dataclass(frozen=True)
class PolicyContext:
    """What constructors may use besides their argument."""
    run_seed: int = 0
    device: str = "cpu"
    threads: int = 1          # C threads of the exact solver (perfect, eq:exact)


def _lowest_slot(mask: torch.Tensor) -> torch.Tensor:
    return mask.long().argmax(dim=1)


# ---------------------------------------------------------------------------- random
class RandomPolicy:
    """A uniformly random legal move: the floor(u * m)-th of the m legal slots, u a Philox
    draw keyed by (run seed, game seed, decision)."""

    cheating = False

    def __init__(self, run_seed: int = 0):
        self.run_seed = int(run_seed)
        self.name = "random"

    def decide(self, games, seeds, decision):
        legal = games.legal_mask()
        keys = torch.from_numpy(mix_seeds(self.run_seed, np.asarray(seeds, np.int64), decision,
                                          STREAM_RANDOM)).to(games.device)
        u = uniform_float(keys, torch.zeros_like(keys))
        m = legal.sum(1)
        nth = (u * m.double()).floor().long().clamp(max=(m - 1).clamp(min=0))
        rank = torch.cumsum(legal.long(), dim=1) - 1
        return _lowest_slot(legal & (rank == nth[:, None]))


# ---------------------------------------------------------------------------- rules
def _cost(decl: int, t: int) -> tuple:
    """Order of tiles to give away, cheapest first (module doc)."""
    trump = bool(IN_CALLED[decl, t]) and decl <= 7
    return (int(POINTS[t]), trump, int(RANK[decl, LED_SUIT[decl, t], t]), t)


def rules_move(decl: int, legal: Sequence[int], trick: Sequence[int],
               outstanding: np.ndarray) -> int:
    """The rules player's tile (module doc). legal: the actor's legal tiles; trick: the
    current trick's tiles in play order; outstanding: ids of the tiles neither played nor
    in the actor's hand."""
    cheapest = lambda tiles: min(tiles, key=lambda t: _cost(decl, t))
    if not trick:
        sure = [t for t in legal if not len(outstanding)
                or RANK[decl, LED_SUIT[decl, t], outstanding].max() < RANK[decl, LED_SUIT[decl, t], t]]
        if sure:
            return min(sure, key=lambda t: (-int(POINTS[t]), t))
        groups: dict[int, list[int]] = {}
        for t in legal:
            groups.setdefault(int(LED_SUIT[decl, t]), []).append(t)
        suit = min(groups, key=lambda s: (-len(groups[s]), _cost(decl, cheapest(groups[s])), s))
        return cheapest(groups[suit])
    led = int(LED_SUIT[decl, trick[0]])
    ranks = [int(RANK[decl, led, t]) for t in trick]
    best = max(ranks)
    winner_pos = ranks.index(best)
    partner_winning = winner_pos == len(trick) - 2       # the partner played two seats ago
    last = len(trick) == N_SEATS - 1
    if partner_winning:
        safe = last or not len(outstanding) or RANK[decl, led, outstanding].max() < best
        counted = [t for t in legal if POINTS[t] > 0]
        if safe and counted:
            return min(counted, key=lambda t: (-int(POINTS[t]),) + _cost(decl, t)[1:])
        return cheapest(legal)
    count = sum(int(POINTS[t]) for t in trick)
    beat = [t for t in legal if RANK[decl, led, t] > best]
    if beat and (count > 0 or last):
        return min(beat, key=lambda t: (int(RANK[decl, led, t]), t))
    return cheapest(legal)


class RulesPolicy:
    """The documented rule-based player (module doc), one game at a time on the host
    (a few tens of microseconds a decision; docs/PLAY.md has the measured rate)."""

    cheating = False
    name = "rules"

    def decide(self, games, seeds, decision):
        B = games.batch_size
        rows = torch.arange(B, device=games.device)
        actor = games.current_player
        hand = games.hands[rows, actor].cpu().numpy()
        in_hand = ((games.remaining[rows, actor, None].cpu()
                    >> torch.arange(HAND_SIZE)) & 1).bool().numpy()
        legal = games.legal_mask().cpu().numpy()
        played = games.tiles.cpu().numpy()
        trick = games.trick.cpu().numpy()
        n_trick = games.trick_len.cpu().numpy()
        decl = games.decl.cpu().numpy()
        out = np.zeros(B, np.int64)
        for g in range(B):
            own = hand[g][in_hand[g]]
            gone = np.zeros(N_TILES, bool)
            gone[played[g][played[g] >= 0]] = True
            gone[own] = True
            outstanding = np.flatnonzero(~gone)
            tile = rules_move(int(decl[g]), hand[g][legal[g]].tolist(),
                              trick[g][:n_trick[g]].tolist(), outstanding)
            out[g] = int(np.flatnonzero(hand[g] == tile)[0])
        return torch.from_numpy(out).to(games.device)


# ---------------------------------------------------------------------------- E[Q]
class EQPolicy:
    """The E[Q] player: `Engine.decide` with greedy selection (no records built), world
    weights uniform or, with `posterior`, the transcript posterior of spec 000
    (eqfast/engine/posterior.py) under a behaviour model: an oracle's perfect-information
    Q (the spec's; for the exact oracle the shipped network, as eqfast-generate uses) or
    the Stage 2 model's information-set E[Q] (`stage2[:PATH]`, tau 3 and window 16, the
    settings measured best against the true deal: benchmarks/RESULTS.md)."""

    cheating = False

    def __init__(self, oracle_spec: str, n_worlds: int = DEFAULT_WORLDS, run_seed: int = 0,
                 device="cpu", threads: int = 1, posterior: str | None = None):
        from ..engine.factory import build_engine
        from ..engine.pipeline import EngineConfig
        from ..oracle.exact import ExactOracle
        from ..oracle.factory import is_stage2_spec, oracle_from_spec

        oracle, self.identity = oracle_from_spec(oracle_spec, device)
        if isinstance(oracle, ExactOracle):
            oracle.threads = threads
        post_cfg, behaviour = None, None
        if posterior is not None:
            from ..engine.posterior import PosteriorConfig
            from ..stage2.behaviour import behaviour_from_spec

            spec = posterior or ("default" if isinstance(oracle, ExactOracle) else None)
            post_cfg = (PosteriorConfig(tau=STAGE2_TAU, window_k=STAGE2_WINDOW)
                        if spec is not None and is_stage2_spec(spec) else PosteriorConfig())
            if spec is not None and spec != oracle_spec:
                behaviour, _ = behaviour_from_spec(spec, device)
        self.engine = build_engine(oracle, EngineConfig(n_samples=n_worlds, seed=run_seed,
                                                        posterior=post_cfg),
                                   pipeline="reference", device=device,
                                   behaviour_oracle=behaviour)
        self.name = f"eq:{oracle_spec}:{n_worlds}" + (
            "" if posterior is None else ":posterior" + (f"={posterior}" if posterior else ""))

    def decide(self, games, seeds, decision):
        seeds = [int(s) for s in seeds]
        with torch.no_grad():
            _, slot = self.engine.decide(games, seeds, decision, torch.as_tensor(seeds),
                                         record=False)
        return slot


# ---------------------------------------------------------------------------- perfect
class PerfectPolicy:
    """CHEATING: the exact solver's best move with all four hands known (perfect
    information), i.e. the value the E[Q] player would reach if it knew the deal."""

    cheating = True
    name = "perfect"

    def __init__(self, threads: int = 1):
        self.threads = threads

    def decide(self, games, seeds, decision):
        from ..solver import ILLEGAL, q_batch

        B = games.batch_size
        rows = torch.arange(B)
        g = games if games.device.type == "cpu" else \
            BatchedGames(**{f.name: getattr(games, f.name).cpu() for f in fields(games)})
        q = q_batch(*solver_positions(g), threads=self.threads)
        actor = g.current_player
        tiles = g.hands[rows, actor]
        q_slot = torch.from_numpy(q.astype(np.int64))[rows[:, None], tiles.clamp(min=0)]
        legal = g.legal_mask()
        if not torch.equal(legal, (q_slot != ILLEGAL) & (tiles >= 0)):
            bad = int(torch.nonzero((legal != (q_slot != ILLEGAL)).any(1))[0])
            raise RuntimeError(f"game {bad}: the solver's legal moves differ from the rules'")
        sign = torch.where(actor % 2 == 0, 1, -1)[:, None]
        value = torch.where(legal, q_slot * sign, torch.full_like(q_slot, -10_000))
        best = value.max(1, keepdim=True).values
        return _lowest_slot(legal & (value == best)).to(games.device)


# ---------------------------------------------------------------------------- Stage 2
class Stage2Policy:
    """The Stage 2 model: one forward pass over the acting seat's public transcript, then
    the legal move with the highest predicted E[Q] (eqfast/stage2/policy.py)."""

    cheating = False

    def __init__(self, path=None, device="cpu"):
        from ..stage2.weights import fingerprint, load_stage2, stage2_weights

        file = stage2_weights(path)
        self.model = load_stage2(file).to(device)
        self.name = "stage2" if path is None else f"stage2:{path}"
        # what its play depends on beyond the name (the league refuses a changed file)
        self.identity = {"name": "stage2", "sha256": fingerprint(file)}

    def decide(self, games, seeds, decision):
        from ..stage2.policy import stage2_slots

        return stage2_slots(self.model, games)


# ---------------------------------------------------------------------------- endgame
#: worlds of the endgame player's E[Q]: the most a decision from trick 5 on can have (at
#: the lead of trick 5 the other three seats hold 3 tiles each: 9! / (3!)³ = 1,680), so from
#: trick 5 on every consistent world is enumerated; an earlier first trick samples this many
ENDGAME_WORLDS = 1680
DEFAULT_ENDGAME_TRICK = 5


class EndgamePolicy:
    """Stage 2's move before trick `first_trick`, the exact E[Q] player's from there on.
    Late in the hand few tiles are hidden and the worlds' perfect-information values
    nearly agree, which one forward pass does not reach (docs/PLAY.md, "Where the E[Q]
    player's edge comes from"), while enumerating the worlds costs the solver little."""

    cheating = False

    def __init__(self, first_trick: int = DEFAULT_ENDGAME_TRICK, path=None, run_seed: int = 0,
                 device="cpu", threads: int = 1):
        if not 1 <= first_trick <= N_TRICKS:
            raise ValueError(f"the first exact trick must be in 1..{N_TRICKS}, got {first_trick}")
        self.stage2 = Stage2Policy(path, device=device)
        self.exact = EQPolicy("exact", ENDGAME_WORLDS, run_seed=run_seed, device=device,
                              threads=threads)
        self.first_decision = N_SEATS * (first_trick - 1)
        self.name = f"endgame:{first_trick}" + ("" if path is None else f":{path}")
        self.identity = self.stage2.identity     # its play depends on that file alone

    def decide(self, games, seeds, decision):
        if decision >= self.first_decision:
            return self.exact.decide(games, seeds, decision)
        return self.stage2.decide(games, seeds, decision)


# ---------------------------------------------------------------------------- split
class SplitPolicy:
    """Stage 2 with one model for the early tricks and another from `first_trick` on: still
    one forward pass a decision, but the late model spends all its parameters on the
    positions where exact values are cheap to label and the shipped model errs most
    (docs/STAGE2.md, "A model for the late tricks")."""

    cheating = False

    def __init__(self, first_trick: int, late_path, early_path=None, device="cpu"):
        if not 2 <= first_trick <= N_TRICKS:
            raise ValueError(f"the late model's first trick must be in 2..{N_TRICKS}, got "
                             f"{first_trick}")
        self.early = Stage2Policy(early_path, device=device)
        self.late = Stage2Policy(late_path, device=device)
        self.first_decision = N_SEATS * (first_trick - 1)
        self.name = f"split:{first_trick}:{late_path}" + ("" if early_path is None
                                                          else f":{early_path}")
        # its play depends on both files (and the trick, which its name carries)
        both = f"{self.early.identity['sha256']}+{self.late.identity['sha256']}"
        self.identity = {"name": "split", "sha256": hashlib.sha256(both.encode()).hexdigest()}

    def decide(self, games, seeds, decision):
        side = self.late if decision >= self.first_decision else self.early
        return side.decide(games, seeds, decision)


# ---------------------------------------------------------------------------- registry
def _no_arg(name: str, arg: str | None) -> None:
    if arg is not None:
        raise ValueError(f"{name!r} takes no argument, got {arg!r}")


def _make_eq(arg: str | None, ctx: PolicyContext) -> EQPolicy:
    spec, n, posterior = (arg or "default"), DEFAULT_WORLDS, None
    head, sep, tail = spec.partition(":posterior")
    if sep:
        if tail and not tail.startswith("="):
            raise ValueError(f"write the behaviour model as :posterior=SPEC, got {arg!r}")
        spec, posterior = head, tail[1:]
        if tail == "=":
            raise ValueError(f"posterior= needs a behaviour model, got {arg!r}")
    head, sep, tail = spec.rpartition(":")
    if sep and tail.lstrip("-").isdigit():
        spec, n = head, int(tail)
    if not spec:
        raise ValueError("eq:ORACLE[:N][:posterior[=BEHAVIOUR]] needs an oracle (default, "
                         "accurate, exact or a path)")
    if n < 1:
        raise ValueError(f"the number of worlds must be >= 1, got {n}")
    return EQPolicy(spec, n, run_seed=ctx.run_seed, device=ctx.device, threads=ctx.threads,
                    posterior=posterior)


def _make_random(arg, ctx):
    _no_arg("random", arg)
    return RandomPolicy(ctx.run_seed)


def _make_rules(arg, ctx):
    _no_arg("rules", arg)
    return RulesPolicy()


def _make_expert(arg, ctx):
    from .expert import ExpertPolicy

    _no_arg("expert", arg)
    return ExpertPolicy()


def _make_perfect(arg, ctx):
    _no_arg("perfect", arg)
    return PerfectPolicy(threads=ctx.threads)


def _make_stage2(arg, ctx):
    return Stage2Policy(arg, device=ctx.device)


def _make_search(arg, ctx):
    from .search import DEFAULT_SEARCH_TURNS, DEFAULT_SEARCH_WORLDS, SearchPolicy

    parts = [] if arg is None else arg.split(":", 2)
    nums = []
    for text, what in zip(parts[:2], ("worlds", "turns")):
        if not text.isdigit():
            raise ValueError(f"the number of {what} must be a whole number, got {text!r}")
        nums.append(int(text))
    n = nums[0] if nums else DEFAULT_SEARCH_WORLDS
    t = nums[1] if len(nums) > 1 else DEFAULT_SEARCH_TURNS
    return SearchPolicy(n, t, path=parts[2] if len(parts) > 2 else None,
                        run_seed=ctx.run_seed, device=ctx.device)


def _make_endgame(arg, ctx):
    text, _, path = (arg or "").partition(":")
    if text and not text.isdigit():
        raise ValueError(f"the first exact trick must be a whole number, got {text!r}")
    return EndgamePolicy(int(text) if text else DEFAULT_ENDGAME_TRICK, path or None,
                         run_seed=ctx.run_seed, device=ctx.device, threads=ctx.threads)


def _make_split(arg, ctx):
    parts = (arg or "").split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(f"write split:T:LATE[:EARLY] (T the late model's first trick), got "
                         f"{arg!r}")
    if not parts[0].isdigit():
        raise ValueError(f"the late model's first trick must be a whole number, got "
                         f"{parts[0]!r}")
    return SplitPolicy(int(parts[0]), parts[1], parts[2] if len(parts) > 2 else None,
                       device=ctx.device)


#: policy name -> constructor(arg, ctx); see "Adding a policy" in the module doc
POLICIES: dict[str, Callable[[str | None, PolicyContext], Policy]] = {
    "random": _make_random,
    "rules": _make_rules,
    "expert": _make_expert,
    "eq": _make_eq,
    "perfect": _make_perfect,
    "stage2": _make_stage2,
    "search": _make_search,
    "endgame": _make_endgame,
    "split": _make_split,
}


def policy_from_spec(spec: str, run_seed: int = 0, device="cpu", threads: int = 1) -> Policy:
    """The policy a spec names ("random", "rules", "eq:default:32", "perfect", ...).
    ValueError naming the spec for an unknown name or a bad argument (an oracle weights
    file that cannot be read included)."""
    name, sep, arg = spec.strip().partition(":")
    if name not in POLICIES:
        raise ValueError(f"unknown policy {spec!r} (choose from "
                         f"{', '.join(USAGE.get(n, n) for n in POLICIES)})")
    try:
        return POLICIES[name](arg if sep else None, PolicyContext(run_seed, str(device), threads))
    except ValueError as e:
        raise ValueError(f"policy {spec!r}: {e}") from None



__all__ = ["Policy", "PolicyContext", "POLICIES", "USAGE", "policy_from_spec",
           "RandomPolicy", "RulesPolicy", "EQPolicy", "PerfectPolicy", "rules_move"]
