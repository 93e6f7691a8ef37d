"""End to end on a tiny data set: generate shards, train, resume, evaluate (--json), export."""
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("eqfast.solver._csolver", reason="C solver not built")

from eqfast.cli import eval_oracle, export_oracle, train_oracle  # noqa: E402
from eqfast.oracle.card import build_card  # noqa: E402
from eqfast.oracle.dataset import load_shards  # noqa: E402
from eqfast.oracle.labelling import generate  # noqa: E402
from eqfast.oracle.weights import load_network  # noqa: E402

ARCH = ["--hidden", "24", "--depth", "1", "--roles", "1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    generate(d, shards=2, deals_per_shard=12, log=lambda *a, **k: None)
    generate(d / "mix", shards=1, deals_per_shard=12, deal_offset=10**7, short=True,
             log=lambda *a, **k: None)
    return d


def test_shards_and_card(data):
    card = build_card(data)
    assert card["shards"] == 2 and card["deals"] == 24 and card["rows"] == 24 * 28
    assert sum(card["decl_mix"].values()) == 24
    assert card["depth_histogram"] == [24] * 28
    assert sum(s["rows"] for s in card["splits"].values()) == card["rows"]
    rows = load_shards(data)
    assert rows["q"].shape == (24 * 28, 7) and rows["hands"].shape == (24 * 28, 4, 7)
    short = build_card(data / "mix")
    assert short["rows"] < 12 * 28 and short["deals"] == 12  # mid-hand starts are shorter
    with pytest.raises(ValueError, match="deals per shard"):
        generate(data, shards=3, deals_per_shard=5, log=lambda *a, **k: None)


def test_train_resume_eval_export(data, tmp_path, capsys):
    run = tmp_path / "run"
    common = ["--data", f"{data},{data / 'mix'}", "--run", str(run), *ARCH, "--batch", "64",
              "--eval-every", "10", "--ckpt-every", "10", "--val-rows", "200", "--warmup", "5"]
    # Interrupted at step 20, then resumed to the end (history keeps the earlier points).
    assert train_oracle.main([*common, "--steps", "30", "--stop-at", "20"]) == 0
    assert train_oracle.main([*common, "--steps", "30"]) == 0
    out = capsys.readouterr().out
    assert "resumed" in out and "at step 20" in out
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [10, 20, 30]
    # Determinism: a fresh run of 30 steps in one go gives the same weights as the resumed one.
    run2 = tmp_path / "run2"
    common2 = [a if a != str(run) else str(run2) for a in common]
    assert train_oracle.main([*common2, "--steps", "30"]) == 0
    a, _ = load_network(run / "last.safetensors")
    b, _ = load_network(run2 / "last.safetensors")
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name
    capsys.readouterr()

    w = str(run / "best.safetensors")
    # --init: a fresh run starts from those weights (its first evaluation is no worse than
    # theirs at a tiny learning rate); another architecture is refused, naming the file
    run3 = tmp_path / "run3"
    common3 = [a if a != str(run) else str(run3) for a in common]
    assert train_oracle.main([*common3, "--steps", "10", "--init", w, "--lr", "1e-9"]) == 0
    start, _ = load_network(w)
    tuned, _ = load_network(run3 / "last.safetensors")
    for (name, x), y in zip(start.state_dict().items(), tuned.state_dict().values()):
        torch.testing.assert_close(y, x, atol=1e-6, rtol=0, msg=name)
    capsys.readouterr()
    common4 = [a if a != str(run) else str(tmp_path / "run4") for a in common]
    assert train_oracle.main([*common4, "--hidden", "16", "--init", w]) == 2
    assert f"--init {w}: holds a" in capsys.readouterr().err
    assert eval_oracle.main(["--weights", w, "--data", str(data), "--split", "train",
                             "--json", "--speed-batch", "64"]) == 0
    m = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("q_gap", "q_gap_multi", "q_mae", "accuracy", "blunder_rate", "positions",
                "rows_per_s_eager", "rows_per_s_torchscript"):
        assert key in m
    assert len(m["per_trick"]) == 7 and m["positions"] > 0
    assert eval_oracle.main(["--weights", w, "--seed-start", "123456789", "--deals", "2",
                             "--json", "--no-speed"]) == 0
    m = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert m["positions"] == 56

    out = tmp_path / "oracle.pt"
    assert export_oracle.main(["--weights", w, "--out", str(out)]) == 0
    assert torch.jit.load(str(out)) is not None


def test_time_budget_stops_checkpointed_and_resume_sees_it_spent(data, tmp_path, capsys):
    """--time-budget: the run stops once the budget is spent, long before --steps, with a
    final evaluation and checkpoint; the learning rate decays over the spent time; running
    the command again trains no further step."""
    from eqfast.oracle.train import TrainConfig, lr_at

    run = tmp_path / "run"
    args = ["--data", str(data), "--run", str(run), *ARCH, "--batch", "32", "--steps",
            "10000000", "--time-budget", "1.5", "--eval-every", "1000000", "--val-rows", "50"]
    assert train_oracle.main(args) == 0
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert len(history) == 1 and 1.5 <= history[0]["wall_s"] < 30
    assert 0 < history[0]["step"] < 10000000 and (run / "checkpoint.safetensors").exists()
    capsys.readouterr()
    assert train_oracle.main(args) == 0
    assert "time budget of 2 s is spent" in capsys.readouterr().out
    assert len((run / "history.jsonl").read_text().splitlines()) == 1
    cfg = TrainConfig(data="", run="", lr=1.0, warmup=0, steps=10, min_lr_frac=0.0, time_budget=100)
    assert lr_at(cfg, 5, 0.0) == 1.0 and abs(lr_at(cfg, 5, 50.0) - 0.5) < 1e-9
    assert lr_at(cfg, 5, 100.0) == 0.0 == lr_at(cfg, 5, 500.0)
    assert train_oracle.main([*args[:-6], "--time-budget", "0"]) == 2


def test_label_oracle_command_resumes_and_refuses_another_layout(tmp_path, capsys):
    from eqfast.cli import label_oracle

    out = tmp_path / "labels"
    assert label_oracle.main(["--out", str(out), "--shards", "2", "--deals-per-shard", "2"]) == 0
    first = (out / "shard_00000.safetensors").stat().st_mtime_ns
    assert label_oracle.main(["--out", str(out), "--shards", "3", "--deals-per-shard", "2"]) == 0
    assert (out / "shard_00000.safetensors").stat().st_mtime_ns == first   # kept, not redone
    assert json.loads((out / "card.json").read_text())["shards"] == 3
    capsys.readouterr()
    assert label_oracle.main(["--out", str(out), "--deals-per-shard", "5"]) == 2
    assert "holds 2 deals per shard" in capsys.readouterr().err
    assert label_oracle.main(["--out", str(out), "--shards", "0"]) == 2
    assert "--shards must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["default", "accurate"])
def test_eval_oracle_takes_the_shipped_names(name, capsys):
    """eqfast-eval-oracle --weights default|accurate evaluates the shipped file that
    eqfast-generate --oracle means by that name (one resolution: oracle.factory.weights_path)."""
    from eqfast.oracle.factory import SHIPPED, weights_path

    assert weights_path(name) == SHIPPED[name][0]
    assert weights_path("some/file.safetensors") == Path("some/file.safetensors")
    assert eval_oracle.main(["--weights", name, "--seed-start", "123456789", "--deals", "1",
                             "--json", "--no-speed"]) == 0
    m = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert m["weights"] == str(SHIPPED[name][0]) and m["positions"] == 28
