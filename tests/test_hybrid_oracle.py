"""HybridOracle: the exact solver on rows with few tricks left, the network elsewhere."""
from __future__ import annotations

import torch

from conftest import random_games
from eqfast.engine.public import hidden_info
from eqfast.engine.worlds import build_oracle_batch, true_world
from eqfast.oracle.exact import ExactOracle, HybridOracle
from eqfast.oracle.network import NetworkOracle, build_network, script_module


def _batch():
    games = random_games(24, seed=5, plays=(0, 27))
    return build_oracle_batch(games, hidden_info(games), true_world(games, hidden_info(games)))


def test_rows_are_routed_by_tricks_left():
    torch.manual_seed(0)
    net = NetworkOracle(script_module(build_network({"arch": "mlp", "hidden": 16, "depth": 1}).eval()))
    batch = _batch()
    hybrid = HybridOracle(net, exact_tricks=3)
    q, legal = hybrid.query(batch)
    q_net, legal_net = net.query(batch)
    q_ex, legal_ex = ExactOracle().query(batch)
    in_hands = torch.tensor([sum(bin(m).count("1") for m in row) for row in batch.remaining.tolist()])
    late = in_hands + (batch.trick >= 0).sum(1) <= 4 * 3     # at most 3 tricks left
    assert 0 < int(late.sum()) < len(batch)          # the fixture has both kinds of rows
    assert torch.equal(legal, legal_ex) and torch.equal(legal, legal_net)
    assert torch.equal(q[late], q_ex[late])
    assert torch.equal(q[~late], q_net[~late])


def test_zero_exact_tricks_is_the_network():
    torch.manual_seed(0)
    net = NetworkOracle(script_module(build_network({"arch": "mlp", "hidden": 16, "depth": 1}).eval()))
    batch = _batch()
    assert torch.equal(HybridOracle(net, 0).query(batch)[0], net.query(batch)[0])
