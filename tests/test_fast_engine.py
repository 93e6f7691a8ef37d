"""The fast path (eqfast.engine.fast): same records as the reference engine, a step with
no host reads (so it can be captured into a CUDA graph), and double buffering that never
mixes batches."""
from __future__ import annotations

import threading
import time

import pytest
import torch
from conftest import TEST_DEVICE
from fakes import HashOracle

from eqfast.engine.fast import FastEngine, GraphCache, bucket, play_batch
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.policy import ExplorationConfig
from eqfast.engine.posterior import PosteriorConfig
from eqfast.oracle.network import NetworkOracle, build_network, script_module
from eqfast.data.schema import FIELDS, POSTERIOR_FIELDS
from eqfast.utils.checks import HostSyncError, forbid_host_sync

CUDA = torch.cuda.is_available()



def _network_oracle(device="cpu"):
    torch.manual_seed(0)
    net = build_network({"arch": "mlp", "hidden": 32, "depth": 1}).to(device).eval()
    return NetworkOracle(script_module(net), device=device)


@pytest.mark.parametrize("posterior,store_worlds", [(None, False), (PosteriorConfig(window_k=4), False),
                                                    (PosteriorConfig(window_k=2), True)],
                         ids=["uniform", "posterior", "posterior-store-worlds"])
def test_fast_engine_equals_reference_on_cpu(posterior, store_worlds):
    """Every record field, including the per-world ones: the fast path assembles records
    once per batch (batch_records) and draws the policy's randomness once per batch."""
    cfg = EngineConfig(n_samples=16, posterior=posterior, seed=2, store_worlds=store_worlds,
                       exploration=ExplorationConfig(temperature=2.0, epsilon=0.2))
    ref = Engine(HashOracle(), cfg).play([3, 4, 5])
    fast = FastEngine(HashOracle(), cfg, backend="reference", graphs=False).play([3, 4, 5])
    names = (list(FIELDS) + ["policy_entropy"]
             + (list(POSTERIOR_FIELDS) if posterior is not None else [])
             + (["world_q", "world_weight", "world_owner"] if store_worlds else []))
    assert sorted(fast.tensors) == sorted(ref.tensors) and set(names) <= set(fast.tensors)
    for name in names:
        assert torch.equal(ref[name], fast[name]) or (
            ref[name].is_floating_point() and torch.allclose(ref[name], fast[name], equal_nan=True)), name


@pytest.mark.parametrize("backend", ["reference", pytest.param("triton", marks=pytest.mark.interpreter)])
def test_fast_engine_with_a_network_oracle_and_posterior_equals_reference(backend):
    """The network path of the fast step: worlds and the posterior's last-K-plays rows
    tokenized by the backend (tokenize_worlds, tokenize_prefix_worlds) and fed to the
    network's forward_codes. Against the reference engine (OracleBatch rows, de-duplicated):
    identical actions, transcripts and counts; float fields within float32 noise (the
    forward runs on differently composed batches)."""
    cfg = EngineConfig(n_samples=12, posterior=PosteriorConfig(window_k=5), seed=4)
    device = TEST_DEVICE if backend == "triton" else "cpu"
    oracle = _network_oracle(device)
    seeds = [6] if backend == "triton" and device == "cpu" else [6, 7]   # the interpreter is slow
    ref = Engine(oracle, cfg, device=device).play(seeds).to("cpu")
    fast = FastEngine(oracle, cfg, backend=backend, device=device, graphs=False).play(seeds)
    for name in FIELDS:
        if ref[name].is_floating_point():
            torch.testing.assert_close(
                fast[name], ref[name], rtol=1e-4, atol=1e-4, equal_nan=True,
                msg=lambda m: f"{name}: {m}\n{first_difference(ref, fast, atol=1e-4)}")
        else:
            assert torch.equal(ref[name], fast[name]), f"{name}: {first_difference(ref, fast)}"


@pytest.mark.parametrize("backend", ["reference", pytest.param("triton", marks=pytest.mark.interpreter)])
def test_captured_batch_never_synchronizes(backend):
    """Capture-readiness on the CPU: after a warm-up batch (as before capture), a whole
    batch (`play_batch`: 28 steps with the posterior, then the record assembly, which is
    what one CUDA graph holds) runs with every device synchronization turned into an error:
    Python-level reads of tensor values and the aten ops that read data on the host or size
    outputs by it (a CUDA graph could contain neither)."""
    cfg = EngineConfig(n_samples=4, posterior=PosteriorConfig(window_k=3), store_worlds=True)
    device = TEST_DEVICE if backend == "triton" else "cpu"
    engine = FastEngine(_network_oracle(device), cfg, backend=backend, device=device, graphs=False)
    seeds = [1] if device == "cpu" else [1, 2]                 # the interpreter is slow
    i = engine.batch_inputs(seeds).map(lambda t: t.to(device))
    args = (engine.step, i.games, i.keys_w, i.u_p, i.seeds, i.split, True)
    play_batch(*args)          # warm-up: TorchScript optimizes in its first runs
    with forbid_host_sync():
        records = play_batch(*args)
    assert records["e_q_mean"].shape == (len(seeds) * 28, 7) and "world_q" in records


def test_oracle_chunks_give_the_same_records():
    """cfg.oracle_chunk splits the step's forwards into fixed slices (bounded activations
    for large oracles): a per-row oracle gives identical records, a network the same up to
    float32 noise, with the posterior's rows chunked too."""
    seeds = [2, 3]
    for oracle, exact in ((HashOracle(), True), (_network_oracle(), False)):
        whole, chunked = (FastEngine(oracle, EngineConfig(n_samples=12, oracle_chunk=chunk,
                                                          posterior=PosteriorConfig(window_k=3)),
                                     backend="reference", graphs=False).play(seeds)
                          for chunk in (16384, 7))
        for name in FIELDS:
            if exact or not whole[name].is_floating_point():
                assert torch.equal(whole[name], chunked[name]) or torch.allclose(
                    whole[name], chunked[name], equal_nan=True), name
            else:
                torch.testing.assert_close(chunked[name], whole[name], rtol=1e-5, atol=1e-5,
                                           equal_nan=True, msg=name)


def test_sync_trap_catches_host_reads_and_sync_ops():
    x = torch.arange(6)
    for sync in (lambda: bool(x[0]), lambda: x.tolist(), lambda: x[x > 2],
                 lambda: torch.nonzero(x), lambda: torch.unique(x), lambda: torch.equal(x, x),
                 lambda: torch.tensor([1, 2])):
        with pytest.raises(HostSyncError):
            with forbid_host_sync():
                sync()
    with forbid_host_sync():   # device-side equivalents pass
        torch.where(x > 2, x, 0).masked_fill_(x > 4, 0)


def test_double_buffering_with_a_slow_writer_keeps_batches_whole_and_ordered():
    engine = FastEngine(HashOracle(), EngineConfig(n_samples=4), backend="reference", graphs=False)
    batches = [[0, 1], [2, 3, 4], [5], [6, 7]]
    seen, threads = [], set()

    def slow_sink(seeds, records):
        threads.add(threading.current_thread().name)
        time.sleep(0.3)            # the device (here: the main thread) runs ahead meanwhile
        seen.append((list(seeds), records))

    assert engine.run(batches, slow_sink) == len(batches)
    assert threads == {"eqfast-writer"}
    assert [s for s, _ in seen] == batches
    for seeds, records in seen:
        assert len(records) == 28 * len(seeds)
        got = records["seed"].view(len(seeds), 28)
        assert got.tolist() == [[s] * 28 for s in seeds]
        assert records["decision_idx"].view(len(seeds), 28).tolist() == [list(range(28))] * len(seeds)
    # and a batch played alone gives the same records as inside the run
    alone = engine.play([2, 3, 4])
    assert torch.equal(alone["e_q_mean"], seen[1][1]["e_q_mean"])


def test_writer_error_stops_the_run():
    engine = FastEngine(HashOracle(), EngineConfig(n_samples=4), backend="reference", graphs=False)

    def failing_sink(seeds, records):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        engine.run([[0], [1], [2]], failing_sink)


def test_bucket_sizes():
    assert [bucket(g) for g in (1, 8, 9, 33, 64)] == [8, 8, 16, 64, 64]


def first_difference(want, got, rtol=1e-4, atol=1e-3) -> str:
    """Where two record sets first part (a diagnosis for a failed comparison): the record
    (game, decision), the fields that differ there, and the posterior diagnostics of both
    sides (a weight near the delta clip or an ESS near the re-mix threshold turns a last-bit
    difference of Q into a different move)."""
    want, got = want.to("cpu"), got.to("cpu")
    bad = torch.zeros(len(want), dtype=torch.bool)
    fields = {}
    for name in want.tensors:
        a, b = want[name], got[name]
        if a.is_floating_point():
            d = ~torch.isclose(b, a, rtol=rtol, atol=atol, equal_nan=True)
        else:
            d = a != b
        d = d.reshape(len(want), -1).any(1)
        if bool(d.any()):
            fields[name] = int(d.sum())
        bad |= d
    if not bool(bad.any()):
        return "no difference"
    i = int(torch.nonzero(bad)[0])
    show = lambda r: {k: r[k][i].tolist() for k in ("e_q_mean", "ess", "max_w", "action_taken",
                                                    "n_worlds", "enumerated") if k in r}  # noqa: E731
    return (f"first difference at record {i} (game {int(want['game_idx'][i])}, decision "
            f"{int(want['decision_idx'][i])}); records differing per field: {fields}; "
            f"want {show(want)}; got {show(got)}")


def assert_same_records(want, got, context=""):
    """Every field: integers and booleans bit for bit; floats within float32 noise of a
    differently composed forward (the reference de-duplicates rows, the fast path does
    not): 1e-4 relative + 1e-3 absolute on points (E[Q], world Q), NaN where NaN."""
    want, got = want.to("cpu"), got.to("cpu")
    assert sorted(want.tensors) == sorted(got.tensors), context
    for name in want.tensors:
        a, b = want[name], got[name]
        if a.is_floating_point():
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-3, equal_nan=True,
                                       msg=lambda m: f"{context}{name}: {m}\n"
                                                     f"{first_difference(want, got)}")
        else:
            assert torch.equal(a, b), f"{context}{name}: {first_difference(want, got)}"


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("posterior", [None, PosteriorConfig(window_k=4)], ids=["uniform", "posterior"])
def test_graphs_on_equals_graphs_off_equals_reference_on_cuda(posterior):
    """16 real games with exploration on (temperature and epsilon: every policy input
    buffer is read) and the per-world outputs stored: compiled kernels with graphs on,
    graphs off, and the reference Engine (pure PyTorch stages) on the same device."""
    cfg = EngineConfig(n_samples=32, posterior=posterior, seed=5, store_worlds=True,
                       exploration=ExplorationConfig(temperature=2.0, epsilon=0.2))
    oracle = _network_oracle("cuda")
    seeds = list(range(100, 116))
    on = FastEngine(oracle, cfg, backend="triton", device="cuda", graphs=True).play(seeds)
    off = FastEngine(oracle, cfg, backend="triton", device="cuda", graphs=False).play(seeds)
    ref = Engine(oracle, cfg, backend="reference", device="cuda").play(seeds)
    assert len(ref) == 16 * 28 and "world_q" in ref.tensors
    assert_same_records(off, on, "graphs on vs off: ")
    assert_same_records(ref, on, "graphs on vs reference: ")
    assert bool((on["exploration_mode"] != 0).any()), "exploration never taken: test is weak"


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_capture_while_the_writer_waits_on_a_held_copy():
    """A second shape is captured while the previous batch's copy out of graph buffers is
    still pending on the copy stream (held there by a device-side sleep), so the writer
    thread is blocked in event.synchronize() during the capture: thread_local capture mode
    must allow that, and the records must still equal the reference."""
    cfg = EngineConfig(n_samples=16, seed=11)
    oracle = _network_oracle("cuda")
    engine = FastEngine(oracle, cfg, backend="triton", device="cuda", graphs=True)
    pending_at_capture = []
    capture, to_host = engine._capture, engine._to_host

    def capture_and_look(inputs):
        last = engine._last_copy
        pending_at_capture.append(last is not None and not last.query())
        return capture(inputs)

    def held_to_host(stacked, seeds):
        engine._copy_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(engine._copy_stream):
            torch.cuda._sleep(400_000_000)          # ~0.2 s at ~2 GHz
        return to_host(stacked, seeds)

    engine.graph_cache._build = capture_and_look
    engine._to_host = held_to_host
    got = []
    batches = [[0, 1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11, 12]]          # buckets 8 then 16
    assert engine.run(batches, lambda seeds, records: got.append((seeds, records))) == 2
    assert pending_at_capture == [False, True], pending_at_capture
    ref = FastEngine(oracle, cfg, backend="reference", device="cuda", graphs=False)
    for seeds, records in got:
        assert_same_records(ref.play(seeds), records, f"seeds {seeds}: ")


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_graph_cache_is_bounded_on_cuda():
    """max_graphs=1 over three shapes: at most one graph alive, each re-captured when its
    shape returns, records unchanged."""
    cfg = EngineConfig(n_samples=8, seed=3)
    oracle = _network_oracle("cuda")
    engine = FastEngine(oracle, cfg, backend="triton", device="cuda", graphs=True, max_graphs=1)
    ref = FastEngine(oracle, cfg, backend="reference", device="cuda", graphs=False)
    for seeds in ([0, 1], list(range(2, 12)), [12, 13]):           # buckets 8, 16, 8
        assert_same_records(ref.play(seeds), engine.play(seeds), f"seeds {seeds}: ")
        assert len(engine.graph_cache) == 1
    assert engine.graph_cache.built == 3


def test_graph_cache_evicts_least_recently_used():
    built, evictions = [], []
    cache = GraphCache(2, lambda key: built.append(key) or f"graph{key}",
                       before_evict=lambda: evictions.append(list(cache.keys())))
    assert cache.get(8, 8) == "graph8" and cache.get(16, 16) == "graph16"
    assert cache.get(8, 8) == "graph8"                  # hit: 8 becomes most recent
    cache.get(32, 32)                                   # evicts 16, the least recent
    assert cache.keys() == [8, 32] and built == [8, 16, 32]
    assert evictions == [[16, 8]]                       # keys, least recent first
    cache.get(16, 16)                                   # evicts 8
    assert cache.keys() == [32, 16] and cache.built == 4 and len(cache) == 2
    with pytest.raises(ValueError, match="capacity"):
        GraphCache(0, lambda key: key)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_graphed_double_buffered_run_on_cuda_equals_reference():
    """Several batches through run(): graph reuse across batches (a smaller batch padded to
    its bucket), a second shape captured while the slow writer still waits on the previous
    batch's copy event, pinned copies on the side stream."""
    cfg = EngineConfig(n_samples=32, seed=9)
    oracle = _network_oracle("cuda")
    engine = FastEngine(oracle, cfg, backend="triton", device="cuda", graphs=True)
    batches = [[0, 1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11, 12], [13, 14, 15]]   # buckets 8, 16, 8
    got = []

    def slow_sink(seeds, records):
        time.sleep(0.2)
        got.append((seeds, records))

    assert engine.run(batches, slow_sink) == 3
    ref = FastEngine(oracle, cfg, backend="reference", device="cuda", graphs=False)
    for seeds, records in got:
        expect = ref.play(seeds)
        for name in ("transcript_tokens", "action_taken", "legal_mask", "seed", "decision_idx"):
            assert torch.equal(records[name], expect[name]), name
        legal = expect["legal_mask"]
        torch.testing.assert_close(records["e_q_mean"][legal], expect["e_q_mean"][legal],
                                   rtol=1e-4, atol=1e-3)


def test_first_difference_names_the_record_and_the_fields():
    cfg = EngineConfig(n_samples=6, seed=2)
    a = Engine(HashOracle(), cfg).play([3, 4])
    assert first_difference(a, a) == "no difference"
    b = {k: v.clone() for k, v in a.tensors.items()}
    b["e_q_mean"][30, 0] += 1.0
    from eqfast.data.schema import DecisionRecords
    text = first_difference(a, DecisionRecords(b))
    assert "record 30 (game 4, decision 2)" in text and "'e_q_mean': 1" in text
