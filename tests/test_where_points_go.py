"""benchmarks/where_points_go.py: each partition covers every decision once, a hybrid that
swaps nothing plays BASE's games and one that swaps everything OTHER's (deal for deal),
and a hybrid takes OTHER's move exactly at its kind's decisions."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from eqfast.play.arena import N_DECISIONS, play_match
from eqfast.play.policies import policy_from_spec

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("_where_points_go",
                                               ROOT / "benchmarks/where_points_go.py")
where = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(where)

SEEDS = range(50, 56)


@pytest.mark.parametrize("partition", ["place", "side", "trick", "all"])
def test_a_partition_covers_every_decision_once(partition):
    sets = list(where.kinds(partition).values())
    assert sorted(d for s in sets for d in s) == list(range(N_DECISIONS))


def test_unknown_partition_is_refused():
    with pytest.raises(ValueError, match="unknown partition 'seat'"):
        where.kinds("seat")


def test_no_swap_is_base_and_a_full_swap_is_other():
    base, other = policy_from_spec("rules"), policy_from_spec("expert")
    opponent = policy_from_spec("random", run_seed=3)
    for swap, same in ((frozenset(), base), (frozenset(range(N_DECISIONS)), other)):
        hybrid = where.SwapPolicy(base, other, swap, "x")
        got = play_match(hybrid, opponent, SEEDS, batch=3).a_points
        want = play_match(same, opponent, SEEDS, batch=3).a_points
        assert np.array_equal(got, want)
    # two games a deal, in each of which the hybrid's team makes half the decisions
    assert hybrid.other_decisions == len(SEEDS) * 2 * N_DECISIONS // 2


class Recorder:
    """A policy that plays as `inner` and notes the decisions it was asked."""

    cheating = False

    def __init__(self, inner):
        self.inner, self.name, self.asked = inner, inner.name, set()

    def decide(self, games, seeds, decision):
        self.asked.add(decision)
        return self.inner.decide(games, seeds, decision)


def test_other_decides_exactly_the_kind():
    base, other = Recorder(policy_from_spec("rules")), Recorder(policy_from_spec("expert"))
    lead = where.kinds("place")["lead"]
    hybrid = where.SwapPolicy(base, other, lead, "lead")
    play_match(hybrid, policy_from_spec("rules"), SEEDS, batch=3)
    assert other.asked == set(lead)
    assert base.asked == set(range(N_DECISIONS)) - set(lead)
    assert hybrid.name == "rules+expert@lead"


def test_a_cheating_policy_cannot_be_swapped_in():
    with pytest.raises(ValueError, match="cheating"):
        where.SwapPolicy(policy_from_spec("rules"), policy_from_spec("perfect"),
                         frozenset({0}), "x")


def test_bad_hands_exit_2(capsys):
    assert where.main(["--hands", "3", "--partitions", "all"]) == 2
    assert "even number" in capsys.readouterr().err
