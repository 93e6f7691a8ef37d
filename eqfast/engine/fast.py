"""The fast path: static-shape decision steps captured into CUDA graphs, double-buffered batches.

`Engine` (pipeline.py) is the readable reference loop: it de-duplicates oracle rows and
checks invariants on the host at every step. Each of those host reads synchronizes the
device, which on a GPU leaves the oracle idle between launches. `FastEngine` produces the
same records with a different schedule:

1. One decision of G games x N worlds is a static-shape, host-read-free function
   (`DecisionStep`): public -> sample -> tokenize -> oracle (TorchScript) -> [posterior:
   tokenize the last K plays in every world -> oracle -> log-weights] -> reduce -> select
   -> advance. No de-duplication (a data-dependent shape), checks off
   (`host_checks_off`). Work that does not depend on a step's results is hoisted out of it:
   the policy's Philox draws of all 28 decisions are made once per batch, and the record
   fields (transcript tokens, current-hand order, ...) are computed once per batch over the
   28 x G stacked decision states (`batch_records`).
2. A batch (`play_batch`: 28 steps, then `batch_records`) is one static-shape function of
   fixed input buffers (the games, the 28 x G keys and draws, seeds, split), so on CUDA it
   is captured once per shape into one CUDA graph and replayed once per batch: one launch
   for the ~28 x 100 kernels of a batch (one graph per (G bucket, N); G is padded up to a
   power of two, so a run captures a handful). `--no-graphs` (graphs=False) runs the same
   function eagerly.
3. The batch's records go from the graph's output buffers to pinned host memory in one
   asynchronous copy on a side stream; an event marks its completion, and the next replay
   (which overwrites those buffers) waits for that event on the device, not on the host.
4. A writer thread takes finished batches (queue of one: double buffering), waits for the
   batch's event, checks the records (`require_invariants`) and hands them to the caller's
   sink (the shard writer), while the device already runs the next batch.

On the CPU there are no graphs or streams: the step runs eagerly and the writer thread
still overlaps shard writing with the next batch's compute. Records equal the reference
engine's for the same seeds (tests: CPU always, CUDA when present).
"""
from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from dataclasses import dataclass, fields

import numpy as np
import torch

from ..data.schema import DecisionRecords, require_invariants, split_of_seed
from ..oracle.network import forward_rows
from ..oracle.protocol import legal_slots
from ..rules.batched import BatchedGames
from ..rules.deal import mix_seeds
from ..utils.checks import host_checks_off
from ..utils.profiling import stage
from .games import setup_games
from .pipeline import (N_DECISIONS, STREAM_POLICY, STREAM_WORLDS, Backend, EngineConfig,
                       make_backend, oracle_precision)
from .moments import Moments, q_histogram
from .policy import Selection, policy_uniforms, select_with_uniforms
from .records import outcome_tensors, record_tensors
from .worlds import (build_oracle_batch, prefix_oracle_batch, scored_steps, world_owners,
                     world_tile_masks)


def bucket(g: int) -> int:
    """Games per step rounded up to a power of two (>= 8): few distinct graph shapes."""
    b = 8
    while b < g:
        b *= 2
    return b


class DecisionStep:
    """One decision of G games with N worlds each: static shapes, no host reads.

    `oracle_fn(batch) -> q [rows, 7]` must itself be host-read-free (a TorchScript network
    is; ExactOracle is not and only works with graphs off)."""

    def __init__(self, oracle_fn, cfg: EngineConfig, backend, codes_fn=None, device="cpu"):
        self.oracle_fn = oracle_fn
        self.device = torch.device(device)
        self.codes_fn = codes_fn      # network on tokenized rows, if the oracle has one
        self.cfg = cfg
        self.backend = backend

    def _in_chunks(self, forward, n_rows: int) -> torch.Tensor:
        """forward(slice) -> Q over rows [0, n_rows) in fixed slices of at most
        cfg.oracle_chunk rows (a captured graph holds them; bounds a large oracle's
        activations), as float32."""
        c = max(1, int(self.cfg.oracle_chunk))
        with oracle_precision(self.cfg.oracle_precision, self.device):
            parts = [forward(slice(i, i + c)).float() for i in range(0, n_rows, c)]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _codes_forward(self, codes, slot_tiles) -> torch.Tensor:
        """The network on tokenized rows, chunked."""
        return self._in_chunks(lambda s: self.codes_fn(codes[s], slot_tiles[s]), codes.shape[0])

    def _batch_forward(self, batch) -> torch.Tensor:
        """`oracle_fn` on an OracleBatch, chunked."""
        return self._in_chunks(lambda s: self.oracle_fn(batch.select(s)), len(batch))

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
                legal = self.backend.legal_mask(games)
            with stage("sample"):
                sample = self.backend.sample_worlds(info, counts, keys_w, N)
            if self.codes_fn is not None:
                with stage("tokenize"):
                    codes, slot_tiles = self.backend.tokenize_worlds(games, info, sample)
                with stage("oracle"):
                    q = self._codes_forward(codes, slot_tiles).view(G, N, 7)
            else:
                with stage("worlds"):
                    batch = build_oracle_batch(games, info, sample)
                with stage("oracle"):
                    q = self._batch_forward(batch).view(G, N, 7)
            post = {}
            if cfg.posterior is None:
                logw = torch.where(sample.valid, 0.0, float("-inf"))
            else:
                K = cfg.posterior.window_k
                if self.codes_fn is not None:
                    with stage("tokenize"):
                        past = self.backend.tokenize_prefix_worlds(games, info, sample, K)
                    with stage("oracle"):
                        q_past = self._codes_forward(past.codes, past.slot_tiles)
                    legal_past, observed, step_valid = past.legal, past.observed_slot, past.valid
                else:
                    with stage("worlds"):
                        initial, _ = world_tile_masks(games, info, sample)
                        prefix = prefix_oracle_batch(games, initial, K)
                    with stage("oracle"):
                        q_past = self._batch_forward(prefix.batch)
                    legal_past = legal_slots(prefix.batch)
                    observed, step_valid = prefix.observed_slot, prefix.valid
                # static shapes: the rows of steps left out are evaluated, then not scored
                step_valid = scored_steps(games, step_valid, cfg.posterior.own_plays)
                with stage("posterior"):
                    logw, diag = self.backend.posterior_log_weights(
                        q_past.view(G, N, K, 7), legal_past.view(G, N, K, 7), observed,
                        step_valid, cfg.posterior, world_valid=sample.valid)
                # the record's diagnostics: [G] tensors, static shapes like every output
                post = {POST_PREFIX + f.name: getattr(diag, f.name) for f in fields(diag)}
            with stage("reduce"):
                mom = self.backend.weighted_moments(q, legal, logw)
            with stage("select"):
                sel = select_with_uniforms(mom.mean, legal, cfg.exploration, u_p)
            with stage("advance"):
                nxt = self.backend.play(games, sel.slot)
        out = dict(mom._asdict(), **sel._asdict(), legal=legal, n_worlds=sample.n_worlds,
                   enumerated=sample.enumerated, **post)
        if cfg.store_worlds:
            out.update(world_q=q, logw=logw, world_owner=world_owners(games, info, sample))
        if cfg.q_pdf:
            with stage("reduce"):
                out["q_pdf"] = q_histogram(q, legal, logw)
        return out, nxt


#: DecisionStep's outputs that are the posterior's diagnostics (`PosteriorDiagnostics` names)
POST_PREFIX = "post_"


def batch_records(snapshots: list[BatchedGames], outputs: list[dict], seeds: torch.Tensor,
                  split: torch.Tensor, store_worlds: bool,
                  final: BatchedGames) -> dict[str, torch.Tensor]:
    """The schema 2.1 fields of a whole batch at once, ordered by (game, decision).

    snapshots[d]: the G games at decision d; outputs[d]: DecisionStep's outputs there;
    seeds, split [G]; final: the games after the last play (the outcome fields). The record fields (transcript tokens, current-hand order, ...) are
    row-wise functions of a game state and its outputs, so they are computed once over the
    28 x G stacked rows by the same `record_tensors` the reference uses, instead of ~120
    small ops in every one of the 28 steps."""
    n_dec = len(snapshots)
    stack = lambda ts: torch.stack(ts, 1).flatten(0, 1)          # [G, 28, ...] -> [G*28, ...]
    games = BatchedGames(**{f.name: stack([getattr(s, f.name) for s in snapshots])
                            for f in fields(BatchedGames)})
    out = {k: stack([o[k] for o in outputs]) for k in outputs[0]}
    per_game = lambda x: x.repeat_interleave(n_dec, dim=0)
    outcomes = outcome_tensors(games.points, games.current_player, per_game(final.points))
    return outcomes | record_tensors(games, Moments(*(out[k] for k in Moments._fields)), out["legal"],
                          Selection(*(out[k] for k in Selection._fields)),
                          n_worlds=out["n_worlds"], enumerated=out["enumerated"],
                          game_idx=per_game(seeds), seeds=per_game(seeds), split=per_game(split),
                          world_q=out["world_q"] if store_worlds else None,
                          logw=out["logw"] if store_worlds else None,
                          world_owner=out["world_owner"] if store_worlds else None,
                          q_pdf=out.get("q_pdf"),
                          post={k[len(POST_PREFIX):]: v for k, v in out.items()
                                if k.startswith(POST_PREFIX)} or None)


def play_batch(step: DecisionStep, games: BatchedGames, keys_w, u_p, seeds, split,
               store_worlds: bool) -> dict[str, torch.Tensor]:
    """All 28 decisions of a batch, then its records: keys_w [28, G], u_p [28, G, 5], seeds
    and split [G]. Static shapes and no host reads: capturable as one CUDA graph."""
    snapshots, outputs = [], []
    for d in range(N_DECISIONS):
        snapshots.append(games)
        out, games = step(games, keys_w[d], u_p[d])
        outputs.append(out)
    with torch.no_grad(), stage("record"):
        return batch_records(snapshots, outputs, seeds, split, store_worlds, final=games)


@dataclass
class _BatchInputs:
    """Everything a batch starts from: the games at decision 0 and the batch's randomness."""
    games: BatchedGames
    keys_w: torch.Tensor       # [28, G] int64 world-sampling keys
    u_p: torch.Tensor          # [28, G, 5] float64 policy draws
    seeds: torch.Tensor        # [G] int64
    split: torch.Tensor        # [G] int8

    def map(self, fn) -> "_BatchInputs":
        games = BatchedGames(**{f.name: fn(getattr(self.games, f.name))
                                for f in fields(BatchedGames)})
        return _BatchInputs(games, fn(self.keys_w), fn(self.u_p), fn(self.seeds), fn(self.split))

    def tensors(self) -> list[torch.Tensor]:
        return [getattr(self.games, f.name) for f in fields(BatchedGames)] + \
            [self.keys_w, self.u_p, self.seeds, self.split]


class _GraphedBatch:
    """`play_batch` captured into one CUDA graph for one (G, N) shape, replayed per batch.

    Inputs are copied into fixed device buffers before each replay (asynchronously, from
    pinned host memory); the returned records are the graph's output buffers, valid until
    the next replay."""

    def __init__(self, step: DecisionStep, example: _BatchInputs, device, store_worlds: bool):
        self.inputs = example.map(lambda t: t.to(device, copy=True))
        i = self.inputs
        args = (step, i.games, i.keys_w, i.u_p, i.seeds, i.split, store_worlds)
        # warm up on a side stream: Triton compiles, TorchScript's profiling executor
        # optimizes (it runs aten.equal, a sync, in its first two runs: 28 calls per batch
        # are plenty), the allocator settles
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            play_batch(*args)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: a new shape can be captured mid-run while the writer thread waits on
        # the previous batch's copy event, a CUDA call the default ("global") mode forbids
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.records = play_batch(*args)

    def __call__(self, inputs: _BatchInputs) -> dict:
        for dst, src in zip(self.inputs.tensors(), inputs.tensors()):
            dst.copy_(src, non_blocking=True)
        # stages inside a captured graph emit their NVTX ranges only at capture time, so the
        # replay gets its own range (Nsight shows the batch's kernels under it)
        with stage("replay"):
            self.graph.replay()
        return self.records


class GraphCache:
    """Captured graphs by shape key, least recently used first out beyond `capacity`.

    Each graph holds its own memory pool (activations of 28 steps: hundreds of MB for a
    large oracle at G = 1024), so a long run over many (G bucket, N) shapes must not keep
    them all. `before_evict()` runs before a graph is dropped (the engine waits there for
    the last copy out of graph buffers)."""

    def __init__(self, capacity: int, build, before_evict=lambda: None):
        if capacity < 1:
            raise ValueError(f"GraphCache capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._build = build
        self._before_evict = before_evict
        self._graphs: OrderedDict = OrderedDict()
        self.built = 0

    def get(self, key, *args):
        if key in self._graphs:
            self._graphs.move_to_end(key)
            return self._graphs[key]
        while len(self._graphs) >= self.capacity:
            self._before_evict()
            self._graphs.popitem(last=False)
        graph = self._graphs[key] = self._build(*args)
        self.built += 1
        return graph

    def keys(self) -> list:
        return list(self._graphs)

    def __len__(self) -> int:
        return len(self._graphs)


@dataclass
class _Finished:
    """A batch whose records are on their way to the host."""
    records: dict          # field -> host tensor [G_real * 28, ...] (pinned on CUDA)
    event: object          # torch.cuda.Event, or None on the CPU
    seeds: list


class FastEngine:
    """Graph-captured, double-buffered engine (see module doc). `graphs` defaults to CUDA.
    The same interface as `Engine`: play(seeds), run(batches, sink), backend, device and the
    oracle_rows / world_rows counters (here every world's rows: no de-duplication)."""

    def __init__(self, oracle, cfg: EngineConfig = EngineConfig(), backend="auto", device="cpu",
                 graphs: bool | None = None, max_graphs: int = 4):
        self.oracle = oracle
        self.cfg = cfg
        self.device = torch.device(device)
        self.backend = backend if isinstance(backend, Backend) else make_backend(backend, self.device)
        self.oracle_rows = 0
        self.world_rows = 0
        if cfg.sem is not None or cfg.n_by_trick is not None:
            raise ValueError("FastEngine runs a fixed N per decision: adaptive sampling (sem) "
                             "and per-trick world budgets (n_by_trick) need the reference "
                             "Engine")
        self.graphs = (self.device.type == "cuda") if graphs is None else bool(graphs)
        if self.graphs and self.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        codes_fn = None
        if hasattr(oracle, "query_codes"):
            module = oracle.module
            codes_fn = lambda codes, slot_tiles: forward_rows(module.forward_codes, codes, slot_tiles)
        self.step = DecisionStep(lambda b: oracle.query(b)[0], cfg, self.backend, codes_fn,
                                 self.device)
        self.graph_cache = GraphCache(max_graphs, self._capture, self._wait_last_copy)
        self._copy_stream = torch.cuda.Stream() if self.device.type == "cuda" else None
        self._last_copy = None     # event of the last records copy out of a graph's buffers

    # ------------------------------------------------------------------ device side
    def batch_inputs(self, seeds: list[int]) -> _BatchInputs:
        """A batch's inputs, built on the host only (no device work, so it overlaps the
        device's work on the previous batch); pinned when the device is CUDA."""
        games = BatchedGames.new(*setup_games(seeds, self.cfg.decl_mode), device="cpu")
        decisions = np.arange(N_DECISIONS)[:, None]
        keys = lambda stream: torch.from_numpy(mix_seeds(self.cfg.seed, np.asarray(seeds)[None, :],
                                                         decisions, stream))
        seed_t = torch.tensor(seeds, dtype=torch.int64)
        inputs = _BatchInputs(games, keys(STREAM_WORLDS), policy_uniforms(keys(STREAM_POLICY)),
                              seed_t, split_of_seed(seed_t))
        return inputs.map(torch.Tensor.pin_memory) if self.device.type == "cuda" else inputs

    def run_batch(self, seeds) -> _Finished:
        """Play all decisions of `seeds` on the device; records start their way to the host."""
        seeds = [int(s) for s in seeds]
        G_real = len(seeds)
        G = bucket(G_real) if self.graphs else G_real
        padded = seeds + [seeds[-1]] * (G - G_real)       # padding games replay the last one
        inputs = self.batch_inputs(padded)
        if self.graphs:
            graph = self._graph_for(inputs)
            if self._last_copy is not None:
                # the replay overwrites the buffers the last batch's records are copied from
                torch.cuda.current_stream().wait_event(self._last_copy)
            records = graph(inputs)
        else:
            i = inputs.map(lambda t: t.to(self.device, non_blocking=True))
            records = play_batch(self.step, i.games, i.keys_w, i.u_p, i.seeds, i.split,
                                 self.cfg.store_worlds)
        self.world_rows += G_real * self.cfg.n_samples * N_DECISIONS
        window = self.cfg.posterior.window_k if self.cfg.posterior is not None else 0
        self.oracle_rows += G * self.cfg.n_samples * (1 + window) * N_DECISIONS
        # records are ordered by (game, decision): the real games' rows come first
        real = {k: v[:G_real * N_DECISIONS] for k, v in records.items()}
        return self._to_host(real, seeds)

    def _graph_for(self, inputs: _BatchInputs) -> _GraphedBatch:
        return self.graph_cache.get((inputs.games.batch_size, self.cfg.n_samples), inputs)

    def _capture(self, inputs: _BatchInputs) -> _GraphedBatch:
        return _GraphedBatch(self.step, inputs, self.device, self.cfg.store_worlds)

    def _wait_last_copy(self) -> None:
        """Before a graph is dropped: its buffers may still be the source of a copy."""
        if self._last_copy is not None:
            self._last_copy.synchronize()

    def _to_host(self, stacked: dict, seeds) -> _Finished:
        """One asynchronous copy of the batch's record fields into pinned host memory, on
        the side stream after the compute stream's work; an event marks its end."""
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
        self._last_copy = event
        return _Finished(host, event, seeds)

    # ------------------------------------------------------------------ host side
    @staticmethod
    def finish(batch: _Finished) -> DecisionRecords:
        """Wait for a batch's copy, check its records and return them (host tensors)."""
        if batch.event is not None:
            batch.event.synchronize()
        return require_invariants(DecisionRecords(batch.records), batch.seeds)

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


