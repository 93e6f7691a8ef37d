"""Replay the golden rule traces (tests/golden/rules_traces.json) and compare every step.

The traces were written by tests/make_golden_traces.py (`make golden`); a failure here
means the rules now behave differently from when the file was made. If the change is
intended, regenerate the file and review its diff.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from eqfast.rules import POINTS, BatchedGames, GameState, deal_from_seed

HERE = Path(__file__).parent


def _load_generator():
    # by path: tests/ is not a package, and this keeps working under any pytest import mode
    spec = importlib.util.spec_from_file_location("make_golden_traces", HERE / "make_golden_traces.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()
TRACES = json.loads(gen.GOLDEN_PATH.read_text())
GAMES = TRACES["games"]


def test_file_covers_declarations_leaders_and_short_hands():
    assert TRACES["format"] == gen.FORMAT_VERSION
    assert {g["decl"] for g in GAMES} == set(range(10))
    assert {g["leader"] for g in GAMES} == set(range(4))
    assert {g["k"] for g in GAMES} > {7}
    assert gen.GOLDEN_PATH.stat().st_size < 300_000
    for g in GAMES:
        assert len(g["steps"]) == 4 * g["k"]
        assert deal_from_seed(g["seed"])[:, :g["k"]].tolist() == g["hands"]


@pytest.mark.parametrize("game", GAMES, ids=lambda g: f"g{g['game']}-d{g['decl']}-L{g['leader']}-k{g['k']}")
def test_replay_game_state(game):
    state = GameState.new(game["hands"], game["decl"], game["leader"])
    for i, step in enumerate(game["steps"]):
        assert gen.summarize(state) == step["state"], f"step {i}: state"
        assert state.legal_moves() == step["legal"], f"step {i}: legal moves"
        state = state.play(step["action"])
        assert gen.summarize(state) == step["next"], f"step {i}: next state"
    assert state.is_over
    count = sum(int(POINTS[t]) for hand in game["hands"] for t in hand)
    assert sum(state.points) == game["k"] + count  # 42 for a full hand


def summarize_batched(games: BatchedGames, g: int) -> dict:
    """The same summary as make_golden_traces.summarize, read from the batched tensors."""
    hands = games.hands[g].tolist()
    remaining = games.remaining[g].tolist()
    over = bool(games.is_over[g])
    voids = games.voids[g].tolist()
    return {
        "hands": [[t for i, t in enumerate(hands[s]) if remaining[s] >> i & 1] for s in range(4)],
        "leader": int(games.leader[g]),
        "player": None if over else int(games.current_player[g]),
        "trick": [t for t in games.trick[g].tolist() if t >= 0],
        "points": games.points[g].tolist(),
        "voids": [[s for s in range(8) if voids[seat] >> s & 1] for seat in range(4)],
        "over": over,
    }


@pytest.mark.parametrize("k", sorted({g["k"] for g in GAMES}))
def test_replay_batched(k):
    batch = [g for g in GAMES if g["k"] == k]
    games = BatchedGames.new([g["hands"] for g in batch], [g["decl"] for g in batch],
                             [g["leader"] for g in batch])
    for i in range(4 * k):
        legal = games.legal_mask()
        player = games.current_player
        for b, g in enumerate(batch):
            step = g["steps"][i]
            assert summarize_batched(games, b) == step["state"], f"game {g['game']} step {i}"
            tiles = games.hands[b, player[b]].tolist()
            assert sorted(tiles[j] for j in range(7) if legal[b, j]) == step["legal"]
        games = games.play_tile(torch.tensor([g["steps"][i]["action"] for g in batch]))
        for b, g in enumerate(batch):
            assert summarize_batched(games, b) == g["steps"][i]["next"], f"game {g['game']} step {i}"
    assert games.is_over.all()


def test_generator_reproduces_file():
    # The script is deterministic and in sync with the checked-in file.
    assert gen.dumps(gen.build_traces()) == gen.GOLDEN_PATH.read_text()
