"""eqfast-bid as a user runs it: the JSON schema, --out, bad hands (exit 2), batch resume."""
from __future__ import annotations

import json

import pytest

from cliutil import assert_usage_error, run_cli

FAST = ["--completions", "12", "--lower", "3", "--lower-worlds", "4", "--threads", "2", "--quiet"]


def test_cli_prints_the_table_and_writes_the_full_json(tmp_path):
    out = tmp_path / "m.json"
    proc = run_cli("bid", "--hand", "6-4,5-5,5-0,4-1,3-2,2-0,1-0", *FAST, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "P_uniform_consistent(make | perfect-information" in proc.stdout
    assert "fused average of max (INVALID" in proc.stdout
    r = json.loads(out.read_text())
    assert r["schema"] == "eqfast-bid/1" and r["n"] == 12 and r["completion_model"] == "uniform_consistent"
    assert [c["decl"] for c in r["contracts"]] == list(range(10))
    cell = r["contracts"][8]["cells"][0]
    assert {"p_upper", "p_lower", "gap", "completion_model", "n", "seed"} <= set(cell)
    assert r["lower_bracket"]["n"] == 3 and r["lower_bracket"]["worlds"] == 4


def test_cli_json_to_stdout_is_one_object():
    proc = run_cli("bid", "--hand", "6-6,6-5,6-4,6-3,6-2,6-1,6-0", *FAST, "--lower", "0",
                   "--contracts", "6", "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["contracts"][0]["score_upper"]["worst"] == 42 and r["lower_bracket"] is None


@pytest.mark.parametrize("hand,needle", [
    ("6-6,6-5,6-4", "7 tiles, got 3"),
    ("6-6,6-6,6-4,6-3,6-2,6-1,6-0", "appears twice"),
    ("6-6,9-5,6-4,6-3,6-2,6-1,6-0", "unknown tile"),
    ("6-6,six,6-4,6-3,6-2,6-1,6-0", "cannot read"),
], ids=["count", "duplicate", "unknown", "unreadable"])
def test_bad_hands_exit_2_with_a_message(hand, needle):
    assert_usage_error(run_cli("bid", "--hand", hand), "--hand", needle)


def test_network_path_names_its_weights():
    proc = run_cli("bid", "--hand", "6-4,5-5,5-0,4-1,3-2,2-0,1-0", "--completions", "8", "--lower", "0",
                   "--contracts", "5", "--oracle", "network", "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert len(r["network"]["sha256"]) == 64 and r["audit"]["audited_fraction"] > 0
    assert "network values" in r["labels"]["p_upper"]


def test_bad_flags_exit_2(tmp_path):
    missing = tmp_path / "none.safetensors"
    assert_usage_error(run_cli("bid", "--hand", "6-6,6-5,6-4,6-3,6-2,6-1,6-0", "--oracle", "network",
                               "--weights", missing), "oracle", "none.safetensors")
    assert_usage_error(run_cli("bid", "--hand", "6-6,6-5,6-4,6-3,6-2,6-1,6-0", "--contracts", "11"),
                       "contracts")
    assert_usage_error(run_cli("bid", "--batch", "2"), "--out")
    assert_usage_error(run_cli("bid", "--hand", "6-6,6-5,6-4,6-3,6-2,6-1,6-0", "--out",
                               tmp_path / "no" / "such" / "m.json"), "--out", "cannot write")


def test_batch_mode_appends_and_resumes(tmp_path):
    out = tmp_path / "hands.jsonl"
    args = ["--completions", "6", "--lower", "0", "--contracts", "5,9", "--quiet", "--out", out]
    proc = run_cli("bid", "--batch", "2", *args)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1]
    with out.open("a") as f:
        f.write('{"index": 2, "torn')              # an interrupted write
    proc = run_cli("bid", "--batch", "3", *args)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["skipped"] == 2
    rows2 = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["index"] for r in rows2] == [0, 1, 2] and rows2[:2] == rows
    other = run_cli("bid", "--batch", "3", *args[:-2], "--completions", "7", "--out", out)
    assert_usage_error(other, "other settings")
    # --leads and --gap-warn change what a line holds: a file is not resumed across them
    assert_usage_error(run_cli("bid", "--batch", "3", *args, "--leads"), "other settings")
    assert_usage_error(run_cli("bid", "--batch", "3", *args, "--gap-warn", "0.3"),
                       "other settings")
    # a file written before they were recorded holds the defaults: it still resumes
    old = [{**r, "settings": {k: v for k, v in r["settings"].items()
                              if k not in ("leads", "gap_warn")}} for r in rows2]
    out.write_text("".join(json.dumps(r) + "\n" for r in old))
    proc = run_cli("bid", "--batch", "3", *args)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["skipped"] == 3


def test_plot_draws_the_labelled_matrix(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "m.png"
    proc = run_cli("bid", "--hand", "6-6,6-5,6-4,5-5,4-4,3-3,2-2", "--completions", "6",
                   "--contracts", "5,7", "--lower", "0", "--plot", png, "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_usage_error(run_cli("bid", "--hand", "6-6,6-5,6-4,5-5,4-4,3-3,2-2",
                               "--plot", tmp_path / "m.txt"), "--plot", "m.txt")
    assert_usage_error(run_cli("bid", "--batch", "2", "--out", tmp_path / "b.jsonl",
                               "--plot", png), "--plot", "--batch")


@pytest.mark.parametrize("flags,needle", [
    (["--completions", "1000000000"], "--completions"),
    (["--target", "nan"], "--target"),
    (["--audit-margin", "inf"], "--audit-margin"),
    (["--sequential", "--max-completions", "1000000000"], "--max-completions"),
])
def test_limits_and_non_finite_numbers_exit_2(flags, needle):
    assert_usage_error(run_cli("bid", "--hand", "6-6,6-5,6-4,6-3,6-2,6-1,6-0", "--lower", "0",
                               *flags), needle)


def test_progress_on_stderr_and_the_same_result_in_chunks(tmp_path):
    """The values are computed in chunks with a progress line after each, and the lower
    bracket reports its games; the result equals the one-piece computation, which
    --sequential with one round of all completions gives."""
    hand = "6-6,6-5,6-4,5-5,4-4,3-3,2-2"
    proc = run_cli("bid", "--hand", hand, "--contracts", "6", "--completions", "250",
                   "--lower", "3", "--lower-worlds", "4", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "values: 100/250" in proc.stderr and "values: 250/250" in proc.stderr
    assert "lower bracket: 3/3 games" in proc.stderr
    one = run_cli("bid", "--hand", hand, "--contracts", "6", "--sequential", "--start", "250",
                  "--max-completions", "250", "--lower", "0", "--json")
    chunked, whole = json.loads(proc.stdout), json.loads(one.stdout)
    assert [c["p_upper"] for c in chunked["contracts"][0]["cells"]] == \
        [c["p_upper"] for c in whole["contracts"][0]["cells"]]
    quiet = run_cli("bid", "--hand", hand, "--contracts", "6", "--completions", "250",
                    "--lower", "0", "--quiet")
    assert quiet.returncode == 0 and quiet.stderr == ""
