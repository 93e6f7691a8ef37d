"""eqfast-view: --print output on a tiny generated dataset (exact oracle, 2 games, N = 8),
navigation helpers, and clear errors (exit 2) for bad paths and corrupted shards."""
from __future__ import annotations

import pytest
import torch

from eqfast.cli import generate, view
from eqfast.data.shards import load_records, read_shard, write_shard
from eqfast.rules.deal import deal_from_seed
from eqfast.rules.tables import DECL_NAMES, tile_name

SEEDS = (2, 3)          # both in the train split


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("view") / "ds"
    rc = generate.main(["--out", str(out), "--games", "2", "--games-per-batch", "2",
                        "--seed-start", str(SEEDS[0]), "--n-samples", "8", "--oracle", "exact",
                        "--store-worlds", "--quiet"])
    assert rc == 0
    records, metas = load_records(out)
    assert len(records) == 56
    return out, records


def _tiles(tokens, length, ttype):
    live = tokens[:length].long()
    rows = live[live[:, 7] == ttype]
    return [int(h * (h + 1) // 2 + l) for h, l in rows[:, :2].tolist()]


def _print(capsys, *args):
    rc = view.main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_print_shows_hand_chosen_move_and_transcript(dataset, capsys):
    root, records = dataset
    i = int(torch.nonzero((records["decision_idx"] == 9) & (records["seed"] == SEEDS[1]))[0])
    rc, out, _ = _print(capsys, root, "--print", 1, "--start", i)
    assert rc == 0
    tokens, length = records["transcript_tokens"][i], int(records["transcript_lengths"][i])
    plays = _tiles(tokens, length, 2)
    actor = int(records["actor"][i])
    # the hand, independently: the actor's dealt tiles minus every tile played so far
    hand = sorted(int(t) for t in deal_from_seed(SEEDS[1])[actor] if int(t) not in plays)
    assert "hand: " + "  ".join(tile_name(t) for t in hand) in out
    chosen = [line for line in out.splitlines() if line.startswith(" > ")]
    assert len(chosen) == 1
    assert tile_name(hand[int(records["action_taken"][i])]) in chosen[0]
    assert "<- chosen (greedy)" in chosen[0]
    # transcript: 9 plays = trick 1, 2 complete, trick 3 with one play, in play order
    lines = out.splitlines()
    t1 = next(line for line in lines if "trick 1:" in line)
    names = [w for w in t1.split() if "-" in w and w[0].isdigit()]
    assert names == [tile_name(t) for t in plays[:4]]
    assert "trick 3:" in out and "(in progress)" in out and "trick 4:" not in out
    decl = int(tokens[0, 6])
    assert DECL_NAMES[decl] in lines[0] and "decision 9" in lines[0]
    assert f"n_worlds {int(records['n_worlds'][i])}" in out


def test_print_several_records_and_game_option(dataset, capsys):
    root, records = dataset
    rc, out, _ = _print(capsys, root, "--print", 3, "--start", 26)
    assert rc == 0
    headers = [line for line in out.splitlines() if line.startswith("record ")]
    assert [h.split()[1] for h in headers] == ["26", "27", "28"]
    game = int(records["game_idx"][28])
    rc, out, _ = _print(capsys, root, "--print", 1, "--game", game, "--split", "train")
    assert rc == 0 and out.startswith("record 28 ")


def test_debug_view_with_and_without_worlds(dataset, capsys, tmp_path):
    root, records = dataset
    i = 5
    rc, out, _ = _print(capsys, root, "--print", 1, "--start", i, "--debug")
    assert rc == 0
    mean_line = next(line for line in out.splitlines() if "weighted mean" in line)
    legal = records["legal_mask"][i]
    expect = [f"{float(v):+.2f}" for v in records["e_q_mean"][i][legal]]
    assert mean_line.split()[2:] == expect
    # the same records without the debug fields
    shard = next((root / "train").glob("*.safetensors"))
    recs, meta = read_shard(shard)
    from eqfast.data.schema import DecisionRecords
    plain = DecisionRecords({k: v for k, v in recs.tensors.items()
                             if k not in ("world_q", "world_weight")})
    write_shard(plain, meta, tmp_path / "plain.safetensors")
    rc, out, _ = _print(capsys, tmp_path / "plain.json", "--print", 1, "--debug")
    assert rc == 0 and "not stored" in out and "--store-worlds" in out


def test_navigation_helpers(dataset):
    _, records = dataset
    assert view.game_start(records, int(records["game_idx"][40])) == 28
    assert view.game_start(records, 12345) is None
    j = view.neighbour_game(records, 3, +1)                    # same decision, next game
    assert int(records["decision_idx"][j]) == 3 and j == 31
    assert view.neighbour_game(records, j, -1) == 3
    assert view.neighbour_game(records, 3, -1) == 3            # no game before the first


def test_bad_paths_exit_2(dataset, capsys, tmp_path):
    root, _ = dataset
    rc, _, err = _print(capsys, tmp_path / "missing", "--print", 1)
    assert rc == 2 and "missing" in err and "no such file" in err
    rc, _, err = _print(capsys, tmp_path, "--print", 1)
    assert rc == 2 and "no shards" in err
    # a truncated tensor file: the ShardError names the file
    shard = next((root / "train").glob("*.safetensors"))
    bad = tmp_path / shard.name
    bad.write_bytes(shard.read_bytes()[:100])
    bad.with_suffix(".json").write_bytes(shard.with_suffix(".json").read_bytes())
    rc, _, err = _print(capsys, bad, "--print", 1)
    assert rc == 2 and str(bad) in err and "truncated" in err
    rc, _, err = _print(capsys, root, "--print", 1, "--start", 999)
    assert rc == 2 and "--start" in err


def _rewritten(dataset, tmp_path, change_records=None, change_meta=None):
    """A copy of the dataset's train shard, rewritten (valid size and hash) with a change."""
    root, _ = dataset
    shard = next(f for f in (root / "train").glob("*.safetensors") if len(read_shard(f)[0]))
    records, meta = read_shard(shard)
    if change_records is not None:
        records = change_records(records)
    if change_meta is not None:
        meta = change_meta(dict(meta))
    out = tmp_path / "train" / shard.name
    write_shard(records, meta, out)
    return out


def test_readers_refuse_nan_and_broken_invariants_naming_shard_and_field(dataset, capsys, tmp_path):
    from eqfast.data.schema import DecisionRecords

    def nan_in_eq(records):
        t = dict(records.tensors)
        t["e_q_mean"] = t["e_q_mean"].clone()
        t["e_q_mean"][3, 0] = float("nan")
        return DecisionRecords(t)

    bad = _rewritten(dataset, tmp_path, change_records=nan_in_eq)
    for target in (bad, tmp_path):
        rc, _, err = _print(capsys, target, "--print", 1)
        assert rc == 2 and bad.name in err and "e_q_mean" in err, err


def test_readers_check_the_schema_version(dataset, capsys, tmp_path):
    bad = _rewritten(dataset, tmp_path, change_meta=lambda m: {**m, "version": "3.0"})
    rc, _, err = _print(capsys, bad, "--print", 1)
    assert rc == 2 and bad.name in err and "3.0" in err and "2.1" in err, err


def test_coverage_of_a_directory_that_is_no_dataset_exits_2(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("not a dataset")
    rc, out, err = _print(capsys, tmp_path, "--coverage")
    assert rc == 2 and "no eqfast-generate shards" in err and str(tmp_path) in err
