"""`--store-worlds` stores the worlds themselves (`world_owner`: the seat holding each tile id
at the deal, per world), so a record can be recomputed from the file alone: this test decodes
the transcript tokens by the layout of docs/DATASET.md, builds each stored world's position
and asks the exact solver (`eqfast.solver.solve`) and the network oracle directly, without
eqfast's sampler or engine. Both pipelines store the same worlds."""
from __future__ import annotations

import pytest
import torch

from eqfast.data.schema import check_invariants
from eqfast.data.shards import read_shard
from eqfast.engine.fast import FastEngine
from eqfast.engine.pipeline import Engine, EngineConfig
from eqfast.engine.posterior import PosteriorConfig
from eqfast.oracle.exact import ExactOracle
from eqfast.oracle.protocol import OracleBatch
from eqfast.oracle.weights import load_default_oracle
from eqfast.solver import solve

# token features (docs/DATASET.md, "Transcript tokens")
HIGH, LOW, PLAYER, DECL, TYPE = 0, 1, 4, 6, 7
PLAY = 2


def _tile(token) -> int:
    hi, lo = int(token[HIGH]), int(token[LOW])
    return hi * (hi + 1) // 2 + lo


def _decode(records, i):
    """(decl, actor, current hand tile ids in slot order, plays [(seat, tile)]) of record i."""
    tokens = records["transcript_tokens"][i][: int(records["transcript_lengths"][i])]
    actor = int(records["actor"][i])
    hand = [_tile(t) for t in tokens if int(t[TYPE]) == 1]
    plays = [((actor + int(t[PLAYER])) % 4, _tile(t)) for t in tokens if int(t[TYPE]) == PLAY]
    return int(tokens[0][DECL]), actor, hand, plays


def _position(owner_row, plays):
    """(initial hands [4][sorted ids], remaining hands [4][ids], leader, trick) of one world."""
    initial = [sorted(t for t in range(28) if int(owner_row[t]) == s) for s in range(4)]
    played = {t for _, t in plays}
    remaining = [[t for t in h if t not in played] for h in initial]
    n_trick = len(plays) % 4
    trick = [t for _, t in plays[len(plays) - n_trick:]]
    leader = plays[len(plays) - n_trick][0] if n_trick else None
    return initial, remaining, leader, trick


def _recompute_exact(records, i):
    """World Q [N, hand] (actor frame, current-hand order, legal slots) and E[Q] by the solver."""
    decl, actor, hand, plays = _decode(records, i)
    legal = records["legal_mask"][i][: len(hand)]
    w = records["world_weight"][i].double()
    qs = []
    for owner_row in records["world_owner"][i]:
        _, remaining, leader, trick = _position(owner_row, plays)
        leader = actor if leader is None else leader
        assert sorted(remaining[actor]) == sorted(hand)          # the actor's own hand
        res = solve(remaining, decl, leader, trick, actor_frame=True, pv=False)
        assert sorted(res.q) == sorted(t for t, ok in zip(hand, legal.tolist()) if ok)
        qs.append([float(res.q.get(t, 0.0)) for t in hand])
    q = torch.tensor(qs, dtype=torch.float64)
    return q, (w[:, None] * q).sum(0)


def _oracle_batch(records, i) -> OracleBatch:
    """The stored worlds of record i as oracle rows (slot space: sorted initial hands)."""
    decl, actor, _, plays = _decode(records, i)
    rows = []
    for owner_row in records["world_owner"][i]:
        initial, remaining, leader, trick = _position(owner_row, plays)
        leader = actor if leader is None else leader
        rem = [sum(1 << k for k, t in enumerate(h) if t in remaining[s])
               for s, h in enumerate(initial)]
        rows.append((initial, rem, leader, trick + [-1] * (3 - len(trick))))
    return OracleBatch(hands=torch.tensor([r[0] for r in rows]),
                       remaining=torch.tensor([r[1] for r in rows]),
                       decl=torch.full((len(rows),), decl), leader=torch.tensor([r[2] for r in rows]),
                       trick=torch.tensor([r[3] for r in rows]), actor=torch.full((len(rows),), actor))


@pytest.fixture(scope="module")
def exact_records():
    return Engine(ExactOracle(), EngineConfig(n_samples=6, seed=3, store_worlds=True)).play([5])


def test_exact_records_are_recomputed_from_the_stored_worlds_alone(exact_records):
    r = exact_records
    assert r["world_owner"].shape == (28, 6, 28) and r["world_owner"].dtype == torch.int8
    assert check_invariants(r) == []
    for i in range(len(r)):
        hand = int(r["transcript_lengths"][i]) - 1 - int(r["decision_idx"][i])
        legal = r["legal_mask"][i][:hand]
        q, e_q = _recompute_exact(r, i)
        assert torch.equal(q[:, legal].float(), r["world_q"][i][:, :hand][:, legal]), i
        torch.testing.assert_close(e_q[legal].float(), r["e_q_mean"][i][:hand][legal],
                                   rtol=0, atol=1e-4)


def test_network_world_q_is_recomputed_from_the_stored_worlds():
    oracle = load_default_oracle(script=False)
    r = Engine(oracle, EngineConfig(n_samples=20, seed=1, store_worlds=True)).play([7, 8])
    for i in (0, 9, 30, 47):
        q, _ = oracle.query(_oracle_batch(r, i))
        hand = int(r["transcript_lengths"][i]) - 1 - int(r["decision_idx"][i])
        # slot space is the initial hand; the record's order is the current hand's
        decl, actor, cur, plays = _decode(r, i)
        initial = sorted(t for t in range(28) if int(r["world_owner"][i][0][t]) == actor)
        cols = [initial.index(t) for t in cur]
        torch.testing.assert_close(q[:, cols], r["world_q"][i][:, :hand], rtol=0, atol=1e-5)
        e_q = (r["world_weight"][i][:, None] * q[:, cols]).sum(0)
        legal = r["legal_mask"][i][:hand]
        torch.testing.assert_close(e_q[legal], r["e_q_mean"][i][:hand][legal], rtol=0, atol=1e-4)


@pytest.mark.parametrize("posterior", [None, PosteriorConfig(window_k=3)], ids=["uniform", "posterior"])
def test_both_pipelines_store_the_same_worlds(posterior):
    from fakes import HashOracle
    cfg = EngineConfig(n_samples=9, seed=2, store_worlds=True, posterior=posterior)
    ref = Engine(HashOracle(), cfg).play([11, 12])
    fast = FastEngine(HashOracle(), cfg, backend="reference", graphs=False).play([11, 12])
    assert torch.equal(ref["world_owner"], fast["world_owner"])
    assert torch.equal(ref["world_weight"], fast["world_weight"])


def test_generate_writes_the_worlds_and_the_shard_reads_back(tmp_path):
    from eqfast.cli import generate
    out = tmp_path / "ds"
    assert generate.main(["--out", str(out), "--games", "1", "--seed-start", "2", "--n-samples", "4",
                          "--oracle", "exact", "--store-worlds", "--quiet"]) == 0
    shard = next((out / "train").glob("*.safetensors"))
    records, meta = read_shard(shard)
    assert records["world_owner"].shape == (28, 4, 28)
    assert "world_owner" in meta["fields"]
    q, e_q = _recompute_exact(records, 20)
    legal = records["legal_mask"][20][: q.shape[1]]
    torch.testing.assert_close(e_q[legal].float(), records["e_q_mean"][20][: q.shape[1]][legal],
                               rtol=0, atol=1e-4)
