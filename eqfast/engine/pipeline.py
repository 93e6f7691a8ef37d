"""The E[Q] engine: G games in lockstep, one decision step at a time.

One step for the G games in flight (every game has 28 decisions, so they stay aligned):

    public   backend.hidden_info, completion_counts what the actor knows (voids, sizes),
                                                    and how many worlds agree with it
    sample   backend.sample_worlds                  N exactly-uniform worlds per game
    tokenize backend.tokenize_worlds                network oracles: codes straight from
      or worlds  build_oracle_batch                 the worlds; other oracles: OracleBatch
    oracle   on the UNIQUE worlds only              Q [G, N, 7] actor frame
    posterior (optional) prefix_oracle_batch + oracle + backend.posterior_log_weights
    reduce   backend.weighted_moments               E[Q], Var[Q], ESS, u_mean/u_max
    control  (optional) a cheap oracle on the same  E[Q], Var[Q] corrected, cv_se
      variate  worlds and on cv_samples worlds      (moments.control_variate_moments)
    select   select_actions                         exploration policy (or a play policy's
                                                    move: policy_selection)
    record   records_from_step                      schema 2.1 rows (CPU)
    advance  backend.play                           the chosen moves

The backend ("reference" pure PyTorch, "triton" eqfast.kernels) supplies hidden_info,
completion_counts, sample_worlds, tokenize_worlds, tokenize_prefix_worlds (the posterior's
rows; used by fast.py), posterior_log_weights, weighted_moments, and the rules' legal_mask
and play (`BatchedGames.legal_mask`, `BatchedGames.play`) with identical signatures.
`fast.py` runs the same stages with static shapes for CUDA graphs.

Never the same oracle row twice: within one game a world is identified by its rank
(`sampling.world_ranks`), and the current position and every window position of a world
are functions of (game, rank). Duplicate draws (sampling is with replacement) and the
repeated rows of an enumeration therefore share one oracle row. Late in a hand, where
the number of consistent worlds is below N, this cuts oracle rows by up to ~N/total.
Across one decision, row caches keyed by (game, rank) (`_DecisionCaches`) hold every row
evaluated so far, so adaptive rounds evaluate only their new worlds, and the control
variate's wide worlds B, whose first n are the main worlds A, evaluate neither the control
oracle nor (for their posterior weights) the behaviour oracle on A again: on 20 games of
the CPU default with --posterior, 20% fewer behaviour-oracle rows (1,014,691 to 811,315),
the same records bit for bit.

Randomness: world draws use key mix_seed(seed, game_seed, decision, STREAM_WORLDS) with
the world index as the counter; policy draws use STREAM_POLICY. A record is therefore a
pure function of (seed, game seed, config, oracle): the batch a game ran in, the backend
and the device do not matter (integer stages are bit-identical across backends; float
stages agree to the tolerance stated in the tests).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Callable

import numpy as np
import torch

from ..oracle.protocol import Oracle, OracleBatch, legal_slots
from ..rules.batched import BatchedGames
from ..rules.deal import mix_seeds
from ..utils.profiling import stage
from .games import setup_games
from .moments import Moments, control_variate_moments, control_variate_se, q_histogram
from .policy import ExplorationConfig, policy_selection, select_actions
from .posterior import PosteriorConfig
from .records import ControlVariate, outcome_tensors, records_from_step
from .sampling import world_ranks
from .worlds import (build_oracle_batch, prefix_oracle_batch, scored_steps, world_games,
                     world_owners, world_tile_masks)
from ..data.schema import DecisionRecords, require_invariants
# int8: the oracle's Linear layers quantized at load (CPU; see oracle.weights.load_oracle):
# the forward then needs no context here
from .precisions import ORACLE_PRECISIONS

STREAM_WORLDS = 1
STREAM_POLICY = 2
N_DECISIONS = 28




@contextmanager
def oracle_precision(precision: str, device: torch.device):
    """The arithmetic of the network forwards inside: 'fp32' as the process has it, 'tf32'
    (float32 matmuls may round their inputs to TF32 on CUDA: torch's "high" matmul
    precision, restored on exit) or 'bf16' (autocast to bfloat16, which reaches the
    TorchScript oracle too); 'int8' is in the oracle module itself (nothing to do here).
    A captured CUDA graph keeps the kernels chosen at capture."""
    if precision == "bf16":
        with torch.autocast(device.type, dtype=torch.bfloat16):
            yield
    elif precision == "tf32":
        saved = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(saved)
    else:
        yield


@dataclass(frozen=True)
class EngineConfig:
    n_samples: int = 100                      # N worlds per decision
    posterior: PosteriorConfig | None = None  # None = uniform weights
    exploration: ExplorationConfig = field(default_factory=ExplorationConfig)
    seed: int = 0                             # run seed (mixed with each game seed)
    sem: float | None = None                  # adaptive: target standard error (points)
    max_samples: int = 1000                   # adaptive: most worlds per decision
    store_worlds: bool = False                # keep per-world Q and weights (debug)
    decl_mode: str = "hand"                   # see engine.games
    # most oracle rows per forward call: bounds a large oracle's activations (the 3.3M
    # transformer: ~3.7 GB per feed-forward activation at 32K rows) while a uniform step
    # of 256 games x N = 100 (25.6K rows) stays one call
    oracle_chunk: int = 32768
    # arithmetic of the network forward (see oracle_precision): fp32, tf32 (CUDA matmuls
    # with TF32 inputs) or bf16 (autocast); records differ from fp32 by the rounding
    oracle_precision: str = "fp32"
    # worlds per decision by trick (7 numbers, trick 1 first) instead of n_samples: spends
    # solves where they matter (an exact oracle's trick-1 world costs ~25x a trick-3 one);
    # the reference Engine only (the fast path's steps have one static N)
    n_by_trick: tuple[int, ...] | None = None
    # keep each move's distribution of Q over the worlds (field q_pdf, 85 whole-point bins)
    q_pdf: bool = False
    # control variate (Engine's cv_oracle; moments.control_variate_moments): the worlds
    # of the cheaper, correlated oracle per decision, at least the main oracle's first N
    # (sem's doubling may pass it); the reference Engine only
    cv_samples: int | None = None

    def n_for(self, decision: int) -> int:
        """Worlds for decision `decision` (0..27) before any adaptive doubling."""
        return self.n_samples if self.n_by_trick is None else self.n_by_trick[decision // 4]

    def __post_init__(self):
        if self.oracle_precision not in ORACLE_PRECISIONS:
            raise ValueError(f"oracle_precision must be one of {', '.join(ORACLE_PRECISIONS)}, "
                             f"got {self.oracle_precision!r}")
        if self.n_samples < 1:
            raise ValueError(f"n_samples must be >= 1, got {self.n_samples}")
        if self.sem is not None and (self.sem <= 0 or self.max_samples < self.n_samples):
            raise ValueError(f"adaptive sampling needs sem > 0 and max_samples >= n_samples, "
                             f"got sem={self.sem}, max_samples={self.max_samples}")
        if self.n_by_trick is not None:
            if len(self.n_by_trick) != 7 or min(self.n_by_trick) < 1:
                raise ValueError(f"n_by_trick needs 7 world counts >= 1 (tricks 1..7), got "
                                 f"{tuple(self.n_by_trick)}")
            if self.store_worlds:
                raise ValueError("store_worlds and n_by_trick cannot be combined: the number "
                                 "of worlds differs between decisions")
            if self.sem is not None and self.max_samples < max(self.n_by_trick):
                raise ValueError(f"max_samples {self.max_samples} is below the largest "
                                 f"n_by_trick {max(self.n_by_trick)}")
        if self.cv_samples is not None:
            most = max(self.n_by_trick) if self.n_by_trick is not None else self.n_samples
            if self.cv_samples < most:
                raise ValueError(f"cv_samples ({self.cv_samples}) must be at least the main "
                                 f"oracle's worlds per decision ({most})")
            clash = [name for name, on in (("store_worlds", self.store_worlds),
                                           ("q_pdf", self.q_pdf)) if on]
            if clash:
                raise ValueError(f"a control variate cannot be combined with {', '.join(clash)}: "
                                 "it corrects the mean and variance over the worlds, not "
                                 "per-world values or distributions")
        if self.store_worlds and self.sem is not None:
            raise ValueError("store_worlds and adaptive sampling (sem) cannot be combined: "
                             "the number of worlds differs between decisions")


@dataclass(frozen=True)
class Backend:
    """The device stages by name; reference and Triton versions share signatures."""
    name: str
    hidden_info: Callable
    completion_counts: Callable
    sample_worlds: Callable
    tokenize_worlds: Callable
    weighted_moments: Callable
    play: Callable
    posterior_log_weights: Callable
    tokenize_prefix_worlds: Callable
    legal_mask: Callable


def make_backend(name: str = "reference", device="cpu") -> Backend:
    """'reference' (pure PyTorch), 'triton' (eqfast.kernels) or 'auto' (triton on CUDA)."""
    device = torch.device(device)
    if name == "auto":
        name = "triton" if device.type == "cuda" else "reference"
    if name == "reference":
        from .moments import weighted_moments
        from .posterior import posterior_log_weights
        from .public import hidden_info
        from .sampling import completion_counts, sample_worlds
        from .tokens import tokenize_prefix_worlds
        from .tokens import tokenize_worlds_split as tokenize_worlds
        play = BatchedGames.play
        legal_mask = BatchedGames.legal_mask
    elif name == "triton":
        if device.type != "cuda":
            # Triton kernels run on the CPU only under its interpreter (slow: for tests and
            # debugging). The variable is read when kernels are defined, i.e. on import.
            os.environ.setdefault("TRITON_INTERPRET", "1")
        from .. import kernels
        if device.type != "cuda" and not kernels.INTERPRETED:
            raise ValueError(
                f"backend 'triton' on device {device}: the Triton kernels of this process were "
                "compiled for CUDA (eqfast.kernels was imported without TRITON_INTERPRET=1), "
                "so they take CUDA tensors only; use device='cuda', backend 'reference', or "
                "set TRITON_INTERPRET=1 before eqfast.kernels is first imported")
        from ..kernels import (completion_counts, hidden_info, legal_mask, play,
                               posterior_log_weights, sample_worlds, tokenize_prefix_worlds,
                               tokenize_worlds, weighted_moments)
    else:
        raise ValueError(f"unknown backend {name!r} (choose reference, triton or auto)")
    return Backend(name, hidden_info, completion_counts, sample_worlds, tokenize_worlds,
                   weighted_moments, play, posterior_log_weights, tokenize_prefix_worlds,
                   legal_mask)


def _chunked_query(oracle: Oracle, batch: OracleBatch, chunk: int):
    return _chunked(lambda sl: oracle.query(batch.select(sl)), len(batch), chunk)


def _chunked(fetch, n_rows: int, chunk: int):
    """fetch(slice) -> (q, legal) over [0, n_rows) in slices of at most `chunk` rows."""
    if n_rows <= chunk:
        return fetch(slice(0, n_rows))
    parts = [fetch(slice(i, i + chunk)) for i in range(0, n_rows, chunk)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def distinct_per_game(values: torch.Tensor):
    """(representative flat row [U], inverse [G*N]) of the distinct (game, value) pairs of
    `values` [G, N] (integers in [0, 2**32)): the worlds' ranks, or a step's actor's hand
    masks (eqfast.stage2.behaviour)."""
    G, N = values.shape
    key = torch.arange(G, device=values.device)[:, None] * (1 << 32) + values
    uniq, inverse = torch.unique(key.reshape(-1), return_inverse=True)
    rep = torch.empty(len(uniq), dtype=torch.int64, device=values.device)
    rep.scatter_(0, inverse, torch.arange(G * N, device=values.device))
    return rep, inverse


@dataclass
class _RowCache:
    """Oracle rows already evaluated at this decision (adaptive rounds reuse them):
    (world keys sorted, their Q, their legal masks), or None before the first round."""
    rows: tuple | None = None


@dataclass
class _DecisionCaches:
    """The row caches of one decision, keyed by (game, world rank), so a world evaluated once
    is never evaluated again at that decision: `main` the main oracle's rows, `control` the
    control variate oracle's (on A and B), `behaviour` the behaviour oracle's window rows
    [K * 7] of the posterior, shared by A and B (B's first n worlds are A's) and by the
    adaptive rounds."""
    main: _RowCache = field(default_factory=_RowCache)
    control: _RowCache = field(default_factory=_RowCache)
    behaviour: _RowCache = field(default_factory=_RowCache)


class Engine:
    """Plays games with an oracle and records every decision (reference or Triton stages)."""

    def __init__(self, oracle: Oracle, cfg: EngineConfig = EngineConfig(),
                 backend: str | Backend = "reference", device="cpu",
                 cv_oracle: Oracle | None = None, behaviour_oracle: Oracle | None = None,
                 play_policy=None):
        """cv_oracle: the control variate's oracle (cheap, correlated with `oracle`), given
        exactly when cfg.cv_samples is set. behaviour_oracle: the oracle whose Q at the last
        K plays defines the posterior's behaviour model (engine.posterior); None = `oracle`.
        A network there makes an exact oracle's posterior ~10x cheaper (its K past
        positions per world are no longer solved), and a control variate with posterior
        weights needs it: the control's extra worlds need weights too.
        play_policy: where the played moves come from instead of the labels' argmax, an
        object whose `choose(games, seeds, decision)` gives (values [G, 7], slot [G]) in
        initial-hand slots (`eqfast.stage2.policy.Stage2Play`, `ArenaPlay`); the
        exploration config then acts on its values and the labels are unchanged (`eqfast.engine.policy.policy_selection`)."""
        if (cv_oracle is None) != (cfg.cv_samples is None):
            raise ValueError("a control variate needs both cv_oracle and cfg.cv_samples")
        if cv_oracle is not None and cfg.posterior is not None and behaviour_oracle is None:
            raise ValueError("a control variate with posterior weights needs a behaviour "
                             "oracle other than the main oracle: the control's extra worlds "
                             "need weights, which the main oracle would have to compute on "
                             "K past positions each")
        self.oracle = oracle
        self.cv_oracle = cv_oracle
        self.behaviour_oracle = behaviour_oracle
        self.play_policy = play_policy
        self.cfg = cfg
        self.device = torch.device(device)
        self.backend = backend if isinstance(backend, Backend) else make_backend(backend, self.device)
        self.oracle_rows = 0      # oracle rows evaluated (after de-duplication)
        self.world_rows = 0       # world rows drawn (before de-duplication)
        self.cv_rows = 0          # rows evaluated by the control variate's oracle
        self.behaviour_rows = 0   # rows evaluated by a separate behaviour oracle

    # ------------------------------------------------------------------ games
    def new_games(self, game_seeds, deals=None) -> BatchedGames:
        """The games of `game_seeds` (deal, declarer and declaration from each seed), or
        `deals` = (hands [G, 4, 7], decl [G], leader [G]) given by the caller."""
        hands, decl, leader = deals if deals is not None else setup_games(game_seeds,
                                                                          self.cfg.decl_mode)
        return BatchedGames.new(hands, decl, leader, device=self.device)

    def play(self, game_seeds, game_idx=None, script=None, deals=None) -> DecisionRecords:
        """All 28 decisions of each game seed, as records ordered by (game, decision).
        deals: (hands, decl, leader) to play instead of the seeds' own deals; the seeds
        still key every random draw (`eqfast.engine.game.generate_eq_game`).

        script: plays given moves on stored worlds instead of the engine's own choices
        (`eqfast.engine.relabel.StoredPlay`: a dataset's games labelled again); it answers
        begin(engine, games, decision, keys, legal, caches), log_weights(sub, n) and
        select(games, e_q, legal), see `decide`."""
        seeds = [int(s) for s in game_seeds]
        game_idx = torch.as_tensor(game_idx if game_idx is not None else seeds, dtype=torch.int64)
        games = self.new_games(seeds, deals)
        steps, before = [], []
        for d in range(N_DECISIONS):
            before.append((games.points, games.current_player))
            records, slot = self.decide(games, seeds, d, game_idx, script=script)
            steps.append(records)
            with stage("advance"):
                games = self.backend.play(games, slot)
        # the hand is over: every decision's record learns how the game went from there
        steps = [DecisionRecords({**r.tensors, **{k: v.cpu() for k, v in
                                                  outcome_tensors(p, a, games.points).items()}})
                 for r, (p, a) in zip(steps, before)]
        return DecisionRecords.cat(steps).sort_by_game()

    def run(self, batches, sink, on_batch=None) -> int:
        """The engine interface commands drive (FastEngine.run has the same contract): play
        every seed list of `batches` and call sink(seeds, records) with each batch's records
        once `require_invariants` passed; `on_batch(seeds)` returning True stops after that
        batch. Returns the number of batches written. Here: batch after batch on the
        calling thread."""
        written = 0
        for seeds in batches:
            sink(seeds, require_invariants(self.play(seeds), seeds))
            written += 1
            if on_batch is not None and on_batch(seeds):
                break
        return written

    # ------------------------------------------------------------------ one decision
    def _keys(self, seeds, decision: int, stream: int) -> torch.Tensor:
        keys = mix_seeds(self.cfg.seed, np.asarray(seeds, dtype=np.int64), decision, stream)
        return torch.from_numpy(keys).to(self.device)

    def decide(self, games: BatchedGames, seeds, decision: int, game_idx, record: bool = True,
               script=None):
        """Records of one decision of every game (None when not `record`: a player that
        only needs the move skips building them, ~7% of an E[Q] player's decision at
        N = 32), and the slot each actor plays.

        script (`Engine.play`'s, or None): fills the decision's control-variate row cache
        and the worlds' weights from stored values, and gives the move played and its
        exploration mode (a `Selection`).

        Adaptive sampling (cfg.sem): games whose standard error of some legal move is above
        cfg.sem are re-run with twice the worlds (up to cfg.max_samples); the first n worlds
        of a game are the same at every size (counter-based draws) and their oracle rows are
        reused, so a round costs only the new worlds. The standard error is sqrt(var/ESS),
        or with a control variate its corrected mean's (cv_se), which every round recomputes
        on the round's worlds.
        """
        cfg = self.cfg
        G = games.batch_size
        with stage("public"):
            legal = self.backend.legal_mask(games)
        keys = self._keys(seeds, decision, STREAM_WORLDS)

        sub = torch.arange(G, device=self.device)
        n = cfg.n_for(decision)
        caches = _DecisionCaches()
        if script is not None:
            script.begin(self, games, decision, keys, legal, caches)
        # the control variate's moments on the wide worlds B, which are the same in each
        # round: B is evaluated once per decision
        cv_wide = {}
        mom = n_worlds = enumerated = world_q = world_logw = world_owner = pdf = cv = None
        post = None
        while True:
            part = games if len(sub) == G else games.select(sub)
            sample, q, logw, owner, p = self._evaluate(
                part, sub, keys[sub], n, legal[sub], caches,
                logw=script.log_weights(sub, n) if script is not None else None)
            with stage("reduce"):
                m = self.backend.weighted_moments(q, legal[sub], logw)
                h = q_histogram(q, legal[sub], logw) if cfg.q_pdf else None
            c = None
            if self.cv_oracle is not None:
                with stage("control variate"):
                    m, c = self._control_variate(part, sub, keys[sub], n, legal[sub], m, q,
                                                 logw, sample.enumerated, caches, cv_wide)
            if mom is None:
                mom, n_worlds, enumerated, pdf, cv = m, sample.n_worlds, sample.enumerated, h, c
                world_q, world_logw, world_owner, post = q, logw, owner, p
            else:
                mom = Moments(*[_scatter_rows(full, sub, new) for full, new in zip(mom, m)])
                n_worlds = _scatter_rows(n_worlds, sub, sample.n_worlds)
                enumerated = _scatter_rows(enumerated, sub, sample.enumerated)
                if pdf is not None:
                    pdf = _scatter_rows(pdf, sub, h)
                if cv is not None:
                    cv = ControlVariate(*[_scatter_rows(full, sub, new)
                                          for full, new in zip(cv, c)])
                if post is not None:
                    post = {k: _scatter_rows(post[k], sub, p[k]) for k in post}
            if cfg.sem is None or n >= cfg.max_samples:
                break
            se = (m.var / m.ess[:, None].clamp(min=1)).sqrt() if c is None else c.se
            need = ((se > cfg.sem) & legal[sub]).any(1) & ~sample.enumerated
            if not bool(need.any()):
                break
            sub = sub[need]
            n = min(2 * n, cfg.max_samples)

        with stage("select"):
            if script is None and self.play_policy is not None:
                values, own = self.play_policy.choose(games, seeds, decision)
                sel = policy_selection(values, own, mom.mean, legal, cfg.exploration,
                                       self._keys(seeds, decision, STREAM_POLICY))
            elif script is None:
                sel = select_actions(mom.mean, legal, cfg.exploration,
                                     self._keys(seeds, decision, STREAM_POLICY))
            else:
                sel = script.select(games, mom.mean, legal)
        if not record:
            return None, sel.slot
        with stage("record"):
            records = records_from_step(
                games, mom, legal, sel, n_worlds=n_worlds, enumerated=enumerated,
                game_idx=game_idx, seeds=torch.tensor(seeds, dtype=torch.int64),
                world_q=world_q if cfg.store_worlds else None,
                logw=world_logw if cfg.store_worlds else None,
                world_owner=world_owner if cfg.store_worlds else None, q_pdf=pdf, cv=cv,
                post=post)
        return records, sel.slot

    def _control_variate(self, games, gid, keys, n, legal, main: Moments, main_q, main_logw,
                         enumerated, caches, wide_of_batch):
        """The main oracle's moments `main` (its Q main_q [G,n,7] on the decision's n worlds,
        set A, weights main_logw) corrected by the control variate: its oracle on A and on
        cfg.cv_samples worlds (set B, the same counter-based draws, so A's worlds lead B's
        unless B enumerates; where adaptive rounds take n to cv_samples or past it, B is A
        and the correction is 0). Rows whose A holds every consistent world are exact
        already and keep `main`. gid: the games' indices in the decision's batch, keys of
        the decision's row caches `caches`; wide_of_batch: B's moments of every game of
        the decision, filled by the first round (which holds them all) and read by the
        others. Returns (moments, ControlVariate fields of the records)."""

        def control_on(m, logw=None):
            sample, q, logw, _, _ = self._evaluate(games, gid, keys, m, legal, caches,
                                                oracle=self.cv_oracle, logw=logw)
            with stage("reduce"):
                return sample, q, self.backend.weighted_moments(q, legal, logw)

        # A with the main oracle's weights (the same worlds, the same behaviour model); B
        # after it, sharing the row caches, so B's worlds that are A's are not evaluated
        # again, by the control oracle or (for B's weights) by the behaviour oracle
        same_sample, q_same, same = control_on(n, main_logw)
        if n >= self.cfg.cv_samples:
            wide, wide_sampled = same, ~same_sample.enumerated
            wide_worlds = same_sample.n_worlds
        else:
            if not wide_of_batch:
                wide_sample, _, moments = control_on(self.cfg.cv_samples)
                wide_of_batch.update(moments=moments, sampled=~wide_sample.enumerated,
                                     worlds=wide_sample.n_worlds)
            wide = Moments(*[x[gid] for x in wide_of_batch["moments"]])
            wide_sampled = wide_of_batch["sampled"][gid]
            wide_worlds = wide_of_batch["worlds"][gid]
        corrected = ~enumerated.to(self.device)
        out = control_variate_moments(main, same, wide, legal, corrected)
        with stage("reduce"):
            diff = self.backend.weighted_moments(main_q - q_same, legal, main_logw)
        se = control_variate_se(main, same, wide, diff.var, wide_sampled)
        applied = corrected[:, None] & legal.bool()
        zero = torch.zeros_like(main.mean)
        return out, ControlVariate(
            shift=torch.where(applied, out.mean - main.mean, zero),
            se=torch.where(applied, se, zero),
            worlds=torch.where(corrected, wide_worlds, torch.zeros_like(wide_worlds)))

    def _evaluate(self, games, gid, keys, n, legal, caches, oracle=None, logw=None):
        """Sample n worlds per game, query the oracle on the distinct ones, weight them:
        (sample, q [G,n,7], logw [G,n], the worlds' tile owners [G,n,28] or None unless
        cfg.store_worlds, the posterior's diagnostics {name: [G]} or None where the weights
        are uniform or given).

        gid: the games' indices in the full batch (keys of the decision's row caches
        `caches`); oracle: self.oracle unless given (the control variate's); logw: these
        worlds' weights when already known (the control variate on the main oracle's
        worlds)."""
        cfg = self.cfg
        G = games.batch_size
        main = oracle is None
        oracle = self.oracle if main else oracle
        with stage("public"):
            info = self.backend.hidden_info(games)
            counts = self.backend.completion_counts(info)
        with stage("sample"):
            sample = self.backend.sample_worlds(info, counts, keys, n)
            ranks = world_ranks(sample.total, keys, n)
        rep, inverse = distinct_per_game(ranks)
        g_of_u = torch.div(rep, n, rounding_mode="floor")
        if hasattr(oracle, "query_codes"):
            # network oracle: the backend tokenizes the worlds (Triton: straight from the
            # owners, no OracleBatch); the legal slots are the rules' (world-independent)
            with stage("tokenize"):
                codes, slot_tiles = self.backend.tokenize_worlds(games, info, sample)

            def fetch(rows):
                g = torch.div(rows, n, rounding_mode="floor")
                return oracle.query_codes(codes[rows], slot_tiles[rows]), legal[g]
        elif hasattr(oracle, "query_worlds"):
            # an oracle that plays each world on from the real history (Stage 2 rollouts,
            # eqfast/stage2/rollout.py): whole games, not OracleBatch positions
            with stage("worlds"):
                wgames = world_games(games, info, sample.owner.long())

            def fetch(rows):
                return oracle.query_worlds(wgames.select(rows))
        elif getattr(oracle, "stored", False):
            # a Script's stored values: the caches hold every row, no position is built
            def fetch(rows):
                return oracle.query(None, rows)
        else:
            with stage("worlds"):
                batch = build_oracle_batch(games, info, sample)

            def fetch(rows):
                return oracle.query(batch.select(rows))
        with stage("oracle"), oracle_precision(cfg.oracle_precision, self.device):
            cache = caches.main if main else caches.control
            q_u, legal_u, n_new = self._query_cached(fetch, rep, ranks, gid, cache)
        if main:
            self.world_rows += G * n
            self.oracle_rows += n_new
        else:
            self.cv_rows += n_new
        # integrity (OracleBatch path): the oracle's legal slots, computed from each world's
        # reconstructed position, must equal the rules' legal slots of the real game (they
        # cannot depend on the hidden hands). On the token path legal_u *is* legal[g]; the
        # reconstruction is covered by tests/test_worlds.py and the kernel equivalence tests.
        if not torch.equal(legal_u, legal[g_of_u]):
            bad = int(g_of_u[(legal_u != legal[g_of_u]).any(1)][0])
            raise RuntimeError(f"game {int(gid[bad])}: oracle legal mask differs from the "
                               "rules' legal mask (world reconstruction bug)")
        q = q_u[inverse].view(G, n, 7)

        post = None
        if logw is None and cfg.posterior is None:
            logw = torch.where(sample.valid, 0.0, float("-inf"))
        elif logw is None:
            logw, diag = self._posterior(games, gid, info, sample, ranks, rep, inverse,
                                         caches.behaviour)
            post = {f.name: getattr(diag, f.name) for f in fields(diag)}
        owner = world_owners(games, info, sample) if cfg.store_worlds else None
        return sample, q, logw, owner, post

    def _query_cached(self, fetch, rep, ranks, gid, cache):
        """(q, legal, rows evaluated) of the oracle rows `rep` (fetch(index) -> (q, legal)),
        reusing the rows `cache` holds (earlier rounds, or the other world set of the
        control variate)."""
        n = ranks.shape[1]
        key = gid[torch.div(rep, n, rounding_mode="floor")] * (1 << 32) + ranks.reshape(-1)[rep]
        old = cache.rows
        if old is None:
            todo = torch.ones(len(rep), dtype=torch.bool, device=rep.device)
        else:
            todo = ~torch.isin(key, old[0])
        sub = rep[todo]
        if len(sub) == 0:  # all held already: no zero-row query
            pos = torch.searchsorted(old[0], key)
            return old[1][pos], old[2][pos], 0
        q_new, l_new = _chunked(lambda sl: fetch(sub[sl]), len(sub), cfg_chunk(self.cfg))
        q = torch.empty(len(rep), *q_new.shape[1:], dtype=q_new.dtype, device=q_new.device)
        lg = torch.empty(len(rep), *l_new.shape[1:], dtype=torch.bool, device=q_new.device)
        q[todo], lg[todo] = q_new, l_new
        if old is not None and bool((~todo).any()):
            pos = torch.searchsorted(old[0], key[~todo])
            q[~todo], lg[~todo] = old[1][pos], old[2][pos]
        if old is not None:  # keep the rows of games that left the adaptive loop too
            key, q_all, lg_all = torch.cat([old[0], key[todo]]), torch.cat([old[1], q[todo]]), \
                torch.cat([old[2], lg[todo]])
        else:
            q_all, lg_all = q, lg
        order = torch.argsort(key)
        cache.rows = (key[order], q_all[order], lg_all[order])
        return q, lg, len(sub)

    def _posterior(self, games, gid, info, sample, ranks, rep, inverse, cache):
        """(log w [G, n] of the sampled worlds, their `PosteriorDiagnostics`): the behaviour
        oracle's Q at each of the last K plays in each distinct world (rows of worlds in
        `cache`, evaluated earlier at this decision, are reused), then the backend's
        posterior."""
        cfg = self.cfg
        G, n = ranks.shape
        K = cfg.posterior.window_k
        with stage("worlds"):
            initial, _ = world_tile_masks(games, info, sample)
            prefix = prefix_oracle_batch(games, initial, K)
            scored = scored_steps(games, prefix.valid, cfg.posterior.own_plays)   # [G, K]
        behaviour = self.behaviour_oracle or self.oracle
        if hasattr(behaviour, "window_values"):
            return self._information_set_posterior(behaviour, games, initial, prefix, scored,
                                                   sample.valid)

        def fetch(worlds):
            # the scored window steps of these worlds (flat world rows), [len, K * 7]
            step_ok = scored[torch.div(worlds, n, rounding_mode="floor")]
            rows = (worlds[:, None] * K + torch.arange(K, device=worlds.device))[step_ok]
            q_w = torch.zeros(len(worlds), K, 7, device=self.device)
            l_w = torch.zeros(len(worlds), K, 7, dtype=torch.bool, device=self.device)
            if len(rows):
                qk, lk = _chunked_query(behaviour, prefix.batch.select(rows), cfg_chunk(cfg))
                if self.behaviour_oracle is None:
                    self.oracle_rows += len(rows)
                else:
                    self.behaviour_rows += len(rows)
                q_w[step_ok], l_w[step_ok] = qk.to(q_w.dtype), lk
            return q_w.view(len(worlds), K * 7), l_w.view(len(worlds), K * 7)

        with stage("oracle"), oracle_precision(cfg.oracle_precision, self.device):
            q_u, l_u, _ = self._query_cached(fetch, rep, ranks, gid, cache)
        with stage("posterior"):
            q_past = q_u[inverse].view(G, n, K, 7)
            legal_past = l_u[inverse].view(G, n, K, 7)
            logw, diag = self.backend.posterior_log_weights(
                q_past, legal_past, prefix.observed_slot, scored, cfg.posterior,
                world_valid=sample.valid)
        return logw, diag

    def _information_set_posterior(self, behaviour, games, initial, prefix, scored, valid):
        """(log w [G, n], diagnostics) from an information-set behaviour model (eqfast.stage2.behaviour):
        its values at the last K plays of every world, read like an oracle's Q. Its legal
        moves at the scored steps of valid worlds must be the prefix positions' (the same
        rules on the same replayed hands; a difference is a reconstruction bug)."""
        G, n = valid.shape
        K = self.cfg.posterior.window_k
        counts = {}
        with stage("oracle"):
            q_past, legal_past = behaviour.window_values(games, initial, K, counts)
        self.behaviour_rows += counts.get("rows", 0)
        on = scored[:, None, :, None] & valid[:, :, None, None]
        expected = legal_slots(prefix.batch).view(G, n, K, 7)
        if not torch.equal(legal_past & on, expected & on):
            raise RuntimeError("the behaviour model's legal moves at a window step differ from "
                               "the prefix position's (world replay bug)")
        with stage("posterior"):
            logw, diag = self.backend.posterior_log_weights(
                q_past, legal_past, prefix.observed_slot, scored, self.cfg.posterior,
                world_valid=valid)
        return logw, diag


def _scatter_rows(full: torch.Tensor, rows: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    out = full.clone()
    out[rows] = new.to(out.dtype)
    return out


def cfg_chunk(cfg: EngineConfig) -> int:
    return max(1, int(cfg.oracle_chunk))
