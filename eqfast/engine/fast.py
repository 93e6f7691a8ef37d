"""The fast path: static-shape decision steps captured into CUDA graphs, double-buffered batches.

`Engine` (pipeline.py) is the readable reference loop: it de-duplicates oracle rows and
checks invariants on the host at every step. Each of those host reads synchronizes the
device, which on a GPU leaves the oracle idle between launches. `FastEngine` produces the
same records with a different schedule:

1. One decision of G games x N worlds is a static-shape, host-read-free function
   (`DecisionStep`): public -> sample -> tokenize -> oracle (TorchScript) -> [posterior] ->
   reduce -> select -> advance. No de-duplication (a data-dependent shape), checks off
   (`host_checks_off`). Work that does not depend on the step's results is hoisted out of
   it: the policy's Philox draws of all 28 decisions are made once per batch, and the
   record fields (transcript tokens, current-hand order, ...) are computed once per batch
   over the 28 x G stacked decision states (`batch_records`). Its inputs and outputs live in fixed buffers, so on CUDA the whole
   step is captured once per shape into a CUDA graph and replayed 28 times per batch
   (one graph per (G bucket, N); G is padded up to a power of two, so a run captures a
   handful). `--no-graphs` (graphs=False) runs the same step eagerly.
2. The batch's records stay on the device and go to pinned host memory in one
   asynchronous copy per batch on a side stream; an event marks its completion.
3. A writer thread takes finished batches (queue of one: double buffering), waits for the
   batch's event, checks the records (`check_invariants`) and hands them to the caller's
   sink (the shard writer), while the device already runs the next batch.

On the CPU there are no graphs or streams: the step runs eagerly and the writer thread
still overlaps shard writing with the next batch's compute. Records equal the reference
engine's for the same seeds (tests: CPU always, CUDA when present).
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, fields

import torch

from ..data.schema import DecisionRecords, check_invariants, split_of_seed
from ..oracle.protocol import legal_slots
from ..rules.batched import BatchedGames
from ..rules.deal import mix_seed
from ..utils.checks import host_checks_off
from ..utils.profiling import stage
from .pipeline import N_DECISIONS, STREAM_POLICY, STREAM_WORLDS, Engine, EngineConfig
from .moments import Moments
from .policy import N_DRAWS, Selection, policy_uniforms, select_with_uniforms
from .posterior import posterior_log_weights
from .records import record_tensors
from .worlds import build_oracle_batch, prefix_oracle_batch, world_tile_masks


def bucket(g: int) -> int:
    """Games per step rounded up to a power of two (>= 8): few distinct graph shapes."""
    b = 8
    while b < g:
        b *= 2
    return b


class _StaticBatch:
    """Fixed input buffers of a captured step: a BatchedGames' fields, keys, seeds, split."""

    def __init__(self, games: BatchedGames):
        self.games = BatchedGames(**{f.name: getattr(games, f.name).clone()
                                     for f in fields(BatchedGames)})

    def load(self, games: BatchedGames):
        for f in fields(BatchedGames):
            getattr(self.games, f.name).copy_(getattr(games, f.name))


class DecisionStep:
    """One decision of G games with N worlds each: static shapes, no host reads.

    `oracle_fn(batch) -> q [rows, 7]` must itself be host-read-free (a TorchScript network
    is; ExactOracle is not and only works with graphs off)."""

    def __init__(self, oracle_fn, cfg: EngineConfig, backend, codes_fn=None):
        self.oracle_fn = oracle_fn
        self.codes_fn = codes_fn      # network on tokenized rows, if the oracle has one
        self.cfg = cfg
        self.backend = backend

    def __call__(self, games: BatchedGames, keys_w, u_p):
        """keys_w [G] int64: world-sampling keys; u_p [G, 5] float64: the policy's draws
        (`policy_uniforms` of the policy keys, drawn for all decisions of a batch at once).
        Returns (the decision's outputs {name: [G, ...]}, the games after the move)."""
        cfg = self.cfg
        N = cfg.n_samples
        G = games.batch_size
        with host_checks_off(), torch.no_grad():
            with stage("public"):
                info = self.backend.hidden_info(games)
                counts = self.backend.completion_counts(info)
                legal = games.legal_mask()
            with stage("sample"):
                sample = self.backend.sample_worlds(info, counts, keys_w, N)
            if self.codes_fn is not None:
                with stage("tokenize"):
                    codes, slot_tiles = self.backend.tokenize_worlds(games, info, sample)
                with stage("oracle"):
                    q = self.codes_fn(codes, slot_tiles).float().view(G, N, 7)
            else:
                with stage("worlds"):
                    batch = build_oracle_batch(games, info, sample)
                with stage("oracle"):
                    q = self.oracle_fn(batch).float().view(G, N, 7)
            if cfg.posterior is None:
                logw = torch.where(sample.valid, 0.0, float("-inf"))
            else:
                K = cfg.posterior.window_k
                with stage("worlds"):
                    initial, _ = world_tile_masks(games, info, sample)
                    prefix = prefix_oracle_batch(games, initial, K)
                with stage("oracle"):
                    q_past = self.oracle_fn(prefix.batch).float().view(G, N, K, 7)
                with stage("posterior"):
                    legal_past = legal_slots(prefix.batch).view(G, N, K, 7)
                    logw, _ = posterior_log_weights(q_past, legal_past, prefix.observed_slot,
                                                    prefix.valid, cfg.posterior,
                                                    world_valid=sample.valid)
            with stage("reduce"):
                mom = self.backend.weighted_moments(q, legal, logw)
            with stage("select"):
                sel = select_with_uniforms(mom.mean, legal, cfg.exploration, u_p)
            with stage("advance"):
                nxt = self.backend.play(games, sel.slot)
        out = dict(mom._asdict(), **sel._asdict(), legal=legal, n_worlds=sample.n_worlds,
                   enumerated=sample.enumerated)
        if cfg.store_worlds:
            out.update(world_q=q, logw=logw)
        return out, nxt


def batch_records(snapshots: list[BatchedGames], outputs: list[dict], seeds: torch.Tensor,
                  split: torch.Tensor, store_worlds: bool) -> dict[str, torch.Tensor]:
    """The schema 2.1 fields of a whole batch at once, ordered by (game, decision).

    snapshots[d]: the G games at decision d; outputs[d]: DecisionStep's outputs there;
    seeds, split [G]. The record fields (transcript tokens, current-hand order, ...) are
    row-wise functions of a game state and its outputs, so they are computed once over the
    28 x G stacked rows by the same `record_tensors` the reference uses, instead of ~120
    small ops in every one of the 28 steps."""
    n_dec = len(snapshots)
    stack = lambda ts: torch.stack(ts, 1).flatten(0, 1)          # [G, 28, ...] -> [G*28, ...]
    games = BatchedGames(**{f.name: stack([getattr(s, f.name) for s in snapshots])
                            for f in fields(BatchedGames)})
    out = {k: stack([o[k] for o in outputs]) for k in outputs[0]}
    per_game = lambda x: x.repeat_interleave(n_dec)
    return record_tensors(games, Moments(*(out[k] for k in Moments._fields)), out["legal"],
                          Selection(*(out[k] for k in Selection._fields)),
                          n_worlds=out["n_worlds"], enumerated=out["enumerated"],
                          game_idx=per_game(seeds), seeds=per_game(seeds), split=per_game(split),
                          world_q=out["world_q"] if store_worlds else None,
                          logw=out["logw"] if store_worlds else None)


class _GraphedStep:
    """A DecisionStep captured into a CUDA graph for one (G, N) shape, replayed per call."""

    def __init__(self, step: DecisionStep, example: BatchedGames):
        self.static = _StaticBatch(example)
        dev = example.device
        G = example.batch_size
        self.keys_w = torch.zeros(G, dtype=torch.int64, device=dev)
        self.u_p = torch.zeros(G, N_DRAWS, dtype=torch.float64, device=dev)
        args = (self.static.games, self.keys_w, self.u_p)
        # warm up on a side stream: Triton compiles, TorchScript's profiling executor
        # optimizes (it runs aten.equal, a sync, in its first two runs), the allocator settles
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step(*args)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out, self.out_games = step(*args)

    def __call__(self, games, keys_w, u_p):
        self.static.load(games)
        self.keys_w.copy_(keys_w, non_blocking=True)
        self.u_p.copy_(u_p, non_blocking=True)
        # the stages inside a captured graph emit their NVTX ranges only at capture time, so
        # the replay gets its own range (Nsight shows the graph's kernels under it)
        with stage("replay"):
            self.graph.replay()
        return self.out, self.out_games


@dataclass
class _Finished:
    """A batch whose records are on their way to the host."""
    records: dict          # field -> host tensor [G_real * 28, ...] (pinned on CUDA)
    event: object          # torch.cuda.Event, or None on the CPU
    seeds: list


class FastEngine(Engine):
    """Graph-captured, double-buffered engine (see module doc). `graphs` defaults to CUDA."""

    def __init__(self, oracle, cfg: EngineConfig = EngineConfig(), backend="auto", device="cpu",
                 graphs: bool | None = None):
        super().__init__(oracle, cfg, backend, device)
        if cfg.sem is not None:
            raise ValueError("FastEngine runs a fixed N per decision: adaptive sampling (sem) "
                             "needs the reference Engine")
        self.graphs = (self.device.type == "cuda") if graphs is None else bool(graphs)
        if self.graphs and self.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        codes_fn = None
        if hasattr(oracle, "query_codes"):
            module = oracle.module
            codes_fn = lambda codes, slot_tiles: module.forward_codes(codes, slot_tiles)
        self.step = DecisionStep(self._oracle_fn(oracle), cfg, self.backend, codes_fn)
        self._graphs: dict = {}
        self._copy_stream = torch.cuda.Stream() if self.device.type == "cuda" else None

    @staticmethod
    def _oracle_fn(oracle):
        module = getattr(oracle, "module", None)
        if module is not None:   # NetworkOracle: call the (TorchScript) module directly
            return lambda b: module(b.hands, b.remaining, b.decl, b.trick, b.actor)
        return lambda b: oracle.query(b)[0]

    # ------------------------------------------------------------------ device side
    def _keys_all(self, seeds, stream):
        return torch.tensor([[mix_seed(self.cfg.seed, s, d, stream) for s in seeds]
                             for d in range(N_DECISIONS)], dtype=torch.int64)

    def run_batch(self, seeds) -> _Finished:
        """Play all decisions of `seeds` on the device; records start their way to the host."""
        seeds = [int(s) for s in seeds]
        G_real = len(seeds)
        G = bucket(G_real) if self.graphs else G_real
        padded = seeds + [seeds[-1]] * (G - G_real)       # padding games replay the last one
        dev = self.device
        games = self.new_games(padded)
        keys_w = self._keys_all(padded, STREAM_WORLDS).to(dev)
        # the policy's Philox draws for all 28 decisions in one pass, outside the step
        u_p = policy_uniforms(self._keys_all(padded, STREAM_POLICY).to(dev))   # [28, G, 5]
        step = self._graph_for(games) if self.graphs else self.step
        snapshots, outputs = [], []
        for d in range(N_DECISIONS):
            snapshots.append(games)
            out, games = step(games, keys_w[d], u_p[d])
            if self.graphs:
                # a replay overwrites its output buffers: keep copies (device to device)
                out = {k: v.clone() for k, v in out.items()}
                games = BatchedGames(**{f.name: getattr(games, f.name).clone()
                                        for f in fields(BatchedGames)})
            outputs.append(out)
        self.world_rows += G_real * self.cfg.n_samples * N_DECISIONS
        window = self.cfg.posterior.window_k if self.cfg.posterior is not None else 0
        self.oracle_rows += G * self.cfg.n_samples * (1 + window) * N_DECISIONS
        real = lambda t: t[:G_real]                       # drop the padding games
        with torch.no_grad(), stage("record"):
            records = batch_records(
                [BatchedGames(**{f.name: real(getattr(s, f.name)) for f in fields(BatchedGames)})
                 for s in snapshots],
                [{k: real(v) for k, v in o.items()} for o in outputs],
                torch.tensor(seeds, dtype=torch.int64, device=dev),
                split_of_seed(torch.tensor(seeds)).to(dev), self.cfg.store_worlds)
        return self._to_host(records, seeds)

    def _graph_for(self, games: BatchedGames):
        key = (games.batch_size, self.cfg.n_samples)
        if key not in self._graphs:
            self._graphs[key] = _GraphedStep(self.step, games)
        return self._graphs[key]

    def _to_host(self, stacked: dict, seeds) -> _Finished:
        if self.device.type != "cuda":
            return _Finished({k: v.contiguous() for k, v in stacked.items()}, None, seeds)
        copy = self._copy_stream
        copy.wait_stream(torch.cuda.current_stream())
        host = {}
        with torch.cuda.stream(copy):
            for k, v in stacked.items():
                buf = torch.empty(v.shape, dtype=v.dtype, pin_memory=True)
                buf.copy_(v, non_blocking=True)
                v.record_stream(copy)
                host[k] = buf
            event = torch.cuda.Event()
            event.record(copy)
        return _Finished(host, event, seeds)

    # ------------------------------------------------------------------ host side
    @staticmethod
    def finish(batch: _Finished) -> DecisionRecords:
        """Wait for a batch's copy, check its records and return them (host tensors)."""
        if batch.event is not None:
            batch.event.synchronize()
        records = DecisionRecords(batch.records)
        problems = check_invariants(records)
        if problems:
            raise RuntimeError(f"records of seeds {batch.seeds[0]}..{batch.seeds[-1]} fail "
                               f"the invariants: {problems[:5]}")
        return records

    def play(self, game_seeds, game_idx=None) -> DecisionRecords:
        if game_idx is not None:
            raise ValueError("FastEngine.play: game_idx is the game seed")
        return self.finish(self.run_batch(game_seeds))

    def run(self, batches, sink, on_batch=None) -> int:
        """Play every seed list in `batches`, calling sink(seeds, records) from a writer
        thread while the device plays the next batch (double buffering). Returns the number
        of batches written. An exception in the sink stops the run and is re-raised here.
        `on_batch(seeds)` (main thread) is called after each batch was handed to the writer;
        returning True stops after that batch."""
        handoff: queue.Queue = queue.Queue(maxsize=1)
        errors: list = []
        written = [0]

        def writer():
            while True:
                item = handoff.get()
                if item is None:
                    return
                try:
                    if not errors:
                        sink(item.seeds, self.finish(item))
                        written[0] += 1
                except BaseException as e:  # surfaced in the main thread
                    errors.append(e)

        thread = threading.Thread(target=writer, name="eqfast-writer", daemon=True)
        thread.start()
        try:
            for seeds in batches:
                if errors:
                    break
                finished = self.run_batch(seeds)
                handoff.put(finished)        # blocks while the previous batch is still written
                if on_batch is not None and on_batch(seeds):
                    break
        finally:
            handoff.put(None)
            thread.join()
        if errors:
            raise errors[0]
        return written[0]


