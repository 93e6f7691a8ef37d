"""Two label sets of the same games scored against the realized return
(eqfast/analysis/realized.py, benchmarks/label_realized.py)."""
from __future__ import annotations

import importlib.util

import pytest
import torch
from cliutil import REPO, generate_tiny

from eqfast.analysis.realized import LabelPairError, realized_error
from eqfast.data.schema import DecisionRecords
from eqfast.data.shards import load_records


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    out = tmp_path_factory.mktemp("realized") / "a"
    generate_tiny(out, "--games", "4", "--games-per-batch", "2", "--epsilon", "0.3")
    records, _ = load_records(out, "all")
    return out, records


def relabelled(records: DecisionRecords, e_q: torch.Tensor) -> DecisionRecords:
    return DecisionRecords({**records.tensors, "e_q_mean": e_q})


def taken(records: DecisionRecords, x: torch.Tensor) -> torch.Tensor:
    return x.gather(1, records["action_taken"][:, None])[:, 0].double()


def test_paired_difference_is_the_mean_over_decisions_of_the_squared_errors(played):
    _, a = played
    g = torch.Generator().manual_seed(3)
    b = relabelled(a, a["e_q_mean"] + 4 * torch.randn(a["e_q_mean"].shape, generator=g))
    r = realized_error(a, b)
    choice = a["legal_mask"].sum(1) > 1
    real = a["realized_to_go"].double()
    ea, eb = taken(a, a["e_q_mean"]) - real, taken(b, b["e_q_mean"]) - real
    assert r["games"] == 4 and r["games_only_a"] == r["games_only_b"] == 0
    assert r["decisions"] == int(choice.sum()) > 0
    assert r["mse_a"] == pytest.approx(float((ea[choice] ** 2).mean()))
    assert r["mse_b"] == pytest.approx(float((eb[choice] ** 2).mean()))
    assert r["diff"] == pytest.approx(r["mse_a"] - r["mse_b"])
    assert r["bias_a"] == pytest.approx(float(ea[choice].mean()))
    assert 0 < r["diff_half_width"] < float("inf")
    back = realized_error(b, a)
    assert back["diff"] == pytest.approx(-r["diff"])
    assert back["diff_half_width"] == pytest.approx(r["diff_half_width"])


def test_labels_equal_to_the_realized_return_have_no_error(played):
    _, a = played
    e_q = a["e_q_mean"].clone()
    e_q.scatter_(1, a["action_taken"][:, None], a["realized_to_go"][:, None])
    r = realized_error(a, relabelled(a, e_q))
    assert r["mse_b"] == 0 and r["diff"] == pytest.approx(r["mse_a"]) and r["mse_a"] > 0


def test_games_in_one_set_only_are_left_out_and_counted(played):
    _, a = played
    seeds = torch.unique(a["seed"])
    b = a.select(a["seed"] != seeds[0])
    r = realized_error(a, b)
    assert (r["games"], r["games_only_a"], r["games_only_b"]) == (3, 1, 0)


def test_sets_of_other_games_are_refused(played):
    _, a = played
    other = DecisionRecords({**a.tensors, "seed": a["seed"] + 10**6})
    with pytest.raises(LabelPairError, match="share no game seed"):
        realized_error(a, other)
    choice = torch.nonzero(a["legal_mask"].sum(1) > 1)[0, 0]
    moves = a["action_taken"].clone()
    legal = torch.nonzero(a["legal_mask"][choice])[:, 0]
    moves[choice] = legal[legal != moves[choice]][0]
    with pytest.raises(LabelPairError, match=f"game seed {int(a['seed'][choice])}"):
        realized_error(a, DecisionRecords({**a.tensors, "action_taken": moves}))


def test_command_prints_the_comparison_and_refuses_a_missing_directory(played, tmp_path, capsys):
    out, _ = played
    spec = importlib.util.spec_from_file_location("label_realized",
                                                  REPO / "benchmarks" / "label_realized.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([str(out), str(out)]) == 0
    text = capsys.readouterr().out
    assert "4 shared games" in text and "A - B: +0.00" in text
    assert script.main([str(out), str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert "nothing" in err and "no such file or directory" in err


def test_the_refusal_names_the_decision_whose_legal_moves_differ(played):
    _, a = played
    rows = a.select(torch.argsort(a["seed"] * 64 + a["decision_idx"]))
    last = len(rows) - 1
    legal = rows["legal_mask"].clone()
    legal[last] = ~legal[last]
    other = DecisionRecords({**rows.tensors, "legal_mask": legal})
    with pytest.raises(LabelPairError, match=f"game seed {int(rows['seed'][last])}, decision "
                                             f"{int(rows['decision_idx'][last])}:"):
        realized_error(rows, other)
