"""eqfast-average-stage2: the mean of Stage 2 models' parameters, its record, its refusals."""
from __future__ import annotations

import hashlib

import pytest
import torch

from eqfast.cli import average_stage2 as cli
from eqfast.stage2.average import average_stage2
from eqfast.stage2.model import build_model
from eqfast.stage2.weights import load_stage2_with_meta, save_stage2

ARCH = {"d_model": 32, "n_layers": 1, "n_heads": 4, "d_ff": 64, "var_head": 1, "seen_tiles": 2}


def saved(path, seed, arch=ARCH, data_hash="h"):
    torch.manual_seed(seed)
    save_stage2(path, build_model(arch), arch, data_hash, {"mse": 1.0}, {"step": 100 + seed})
    return path


def params(path):
    return load_stage2_with_meta(path)[0].state_dict()


def test_uniform_and_weighted_means(tmp_path):
    files = [saved(tmp_path / f"m{i}.safetensors", i) for i in range(3)]
    out = tmp_path / "soup.safetensors"
    record = average_stage2(files, out)
    got, each = params(out), [params(f) for f in files]
    assert set(got) == set(each[0])
    for k, v in got.items():
        want = (each[0][k].double() + each[1][k].double() + each[2][k].double()) / 3
        assert v.dtype == each[0][k].dtype
        torch.testing.assert_close(v.double(), want, rtol=0, atol=1e-6)
    # the sources differ, so the mean is none of them
    assert any(not torch.equal(got[k], each[0][k]) for k in got)
    assert [c["steps"] for c in record["average"]] == [100, 101, 102]
    assert record["average"][1]["sha256"] == hashlib.sha256(files[1].read_bytes()).hexdigest()

    record = average_stage2(files[:2], out, [3, 1])
    got = params(out)
    for k, v in got.items():
        want = (3 * each[0][k].double() + each[1][k].double()) / 4
        torch.testing.assert_close(v.double(), want, rtol=0, atol=1e-6)
    meta = load_stage2_with_meta(out)[1]
    assert meta["train"] == record and [c["weight"] for c in record["average"]] == [3.0, 1.0]
    assert meta["data_hash"] == "h" and meta["config"] == ARCH and meta["metrics"] == {}


def test_one_model_twice_plays_as_itself(tmp_path):
    a = saved(tmp_path / "a.safetensors", 4)
    b = tmp_path / "b.safetensors"
    b.write_bytes(a.read_bytes())
    average_stage2([a, b], tmp_path / "s.safetensors", [0.3, 0.7])
    tokens = torch.randint(0, 30, (5, 30, 8))  # clamped to each feature's range
    lengths = torch.tensor([30, 12, 1, 29, 7])
    with torch.no_grad():
        want = load_stage2_with_meta(a)[0](tokens, lengths)
        got = load_stage2_with_meta(tmp_path / "s.safetensors")[0](tokens, lengths)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def test_mixed_data_hashes_claim_none(tmp_path):
    a = saved(tmp_path / "a.safetensors", 1, data_hash="x")
    b = saved(tmp_path / "b.safetensors", 2, data_hash="y")
    average_stage2([a, b], tmp_path / "s.safetensors")
    assert load_stage2_with_meta(tmp_path / "s.safetensors")[1]["data_hash"] == ""


@pytest.mark.parametrize("case, needle", [
    ("one", "at least two"),
    ("twice", "named twice"),
    ("out_is_source", "is one of the sources"),
    ("arch", "only models of one architecture"),
    ("n_weights", "3 weights for 2 files"),
    ("negative", "weights must be finite"),
    ("zero", "weights must be finite"),
    ("missing", "does not exist"),
])
def test_refusals_name_the_problem(tmp_path, capsys, case, needle):
    a = saved(tmp_path / "a.safetensors", 1)
    b = saved(tmp_path / "b.safetensors", 2)
    out = tmp_path / "s.safetensors"
    args = {
        "one": [str(a)],
        "twice": [str(a), str(b), str(tmp_path / "." / "a.safetensors")],
        "out_is_source": [str(a), str(b)],
        "arch": [str(a), str(saved(tmp_path / "c.safetensors", 3, {**ARCH, "seen_tiles": 1}))],
        "n_weights": [str(a), str(b), "--weight", "1", "--weight", "1", "--weight", "1"],
        "negative": [str(a), str(b), "--weight", "1", "--weight", "-1"],
        "zero": [str(a), str(b), "--weight", "0", "--weight", "0"],
        "missing": [str(a), str(tmp_path / "nope.safetensors")],
    }[case]
    target = a if case == "out_is_source" else out
    before = a.read_bytes()
    assert cli.main([*args, "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("eqfast-average-stage2: ") and needle in err
    assert "Traceback" not in err
    assert a.read_bytes() == before
    assert not out.exists()


def test_cli_writes_and_reports(tmp_path, capsys):
    a = saved(tmp_path / "a.safetensors", 1)
    b = saved(tmp_path / "b.safetensors", 2)
    out = tmp_path / "sub" / "s.safetensors"
    assert cli.main([str(a), str(b), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out}: the mean of 2 models" in text and "101 steps" in text
    assert [c["path"] for c in load_stage2_with_meta(out)[1]["train"]["average"]] == [
        str(a), str(b)]


def test_a_mean_of_means_says_so(tmp_path, capsys):
    files = [saved(tmp_path / f"m{i}.safetensors", i) for i in range(3)]
    inner = tmp_path / "inner.safetensors"
    average_stage2(files[:2], inner)
    capsys.readouterr()
    assert cli.main([str(inner), str(files[2]), "--out", str(tmp_path / "outer.safetensors")]) == 0
    text = capsys.readouterr().out
    assert "(sha256 " in text and "the mean of 2 models)" in text and "102 steps)" in text
    cards = load_stage2_with_meta(tmp_path / "outer.safetensors")[1]["train"]["average"]
    assert cards[0]["average_of"] == 2 and "average_of" not in cards[1]


def test_help_lists_the_flags(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "--out" in text and "--weight" in text and "at least two" in text
