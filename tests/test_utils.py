"""eqfast.utils.atomic (atomic writes) and eqfast.utils.progress (the progress bar)."""
from __future__ import annotations

import io
import os

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from eqfast.utils.atomic import (atomic_path, atomic_save_safetensors, atomic_write_bytes,
                                 atomic_write_text)
from eqfast.utils.progress import Progress, format_duration


# ---------------------------------------------------------------------------- atomic
def leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_write_bytes_and_text(tmp_path):
    p = tmp_path / "a.bin"
    atomic_write_bytes(p, b"\x00\x01hello")
    assert p.read_bytes() == b"\x00\x01hello"
    atomic_write_text(p, "line 1\nÅ\n")  # replaces, utf-8, no newline translation
    assert p.read_bytes() == "line 1\nÅ\n".encode()
    assert leftovers(tmp_path) == []


def test_atomic_path_yields_sibling_temp(tmp_path):
    p = tmp_path / "out.json"
    with atomic_path(p) as tmp:
        assert tmp.parent == tmp_path and tmp != p and tmp.exists()
        assert not p.exists()  # nothing visible until success
        tmp.write_text("{}")
    assert p.read_text() == "{}" and not tmp.exists()


def test_exception_keeps_old_file_and_removes_temp(tmp_path):
    p = tmp_path / "data.txt"
    atomic_write_text(p, "old contents")
    with pytest.raises(RuntimeError, match="writer failed"):
        with atomic_path(p) as tmp:
            tmp.write_text("partial new cont")
            raise RuntimeError("writer failed")
    assert p.read_text() == "old contents"
    assert leftovers(tmp_path) == []


def test_exception_on_new_file_leaves_nothing(tmp_path):
    p = tmp_path / "new.txt"
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(p) as tmp:
            tmp.write_text("half")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_permissions(tmp_path):
    umask = os.umask(0)
    os.umask(umask)
    p = tmp_path / "perm.txt"
    atomic_write_text(p, "x")
    assert p.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's private 0600
    os.chmod(p, 0o640)
    atomic_write_text(p, "y")
    assert p.stat().st_mode & 0o777 == 0o640  # an existing file keeps its mode


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        atomic_write_text(tmp_path / "no" / "such" / "f.txt", "x")


def test_save_safetensors(tmp_path):
    p = tmp_path / "w.safetensors"
    tensors = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(3)}
    atomic_save_safetensors(tensors, p, {"step": "12", "name": "test"})
    back = load_file(p)
    assert set(back) == {"w", "b"} and torch.equal(back["w"], tensors["w"])
    with safe_open(p, "pt") as f:
        assert f.metadata() == {"step": "12", "name": "test"}
    assert leftovers(tmp_path) == []


def test_save_safetensors_failure_keeps_old(tmp_path):
    p = tmp_path / "w.safetensors"
    atomic_save_safetensors({"x": torch.zeros(2)}, p)
    before = p.read_bytes()
    with pytest.raises(TypeError, match="'step'"):
        atomic_save_safetensors({"x": torch.ones(2)}, p, {"step": 12})
    with pytest.raises(Exception):
        atomic_save_safetensors({"x": "not a tensor"}, p)
    assert p.read_bytes() == before
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------------------- progress
class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_format_duration():
    assert format_duration(0) == "0:00:00"
    assert format_duration(61.4) == "0:01:01"
    assert format_duration(3 * 3600 + 125) == "3:02:05"


def test_line_fields():
    clock = FakeClock()
    bar = Progress(total=100, desc="gen", unit="games", stream=io.StringIO(), clock=clock)
    clock.t += 5.0
    bar.update(25, loss=0.123456, step=3)
    # 25 games in 5 s: 5.0 games/s, 75 left: eta 15 s
    assert bar.line() == ("gen: 25/100 (25.0%) 5.0 games/s elapsed 0:00:05 eta 0:00:15 "
                          "loss=0.1235 step=3")


def test_unknown_total_has_no_eta():
    clock = FakeClock()
    bar = Progress(desc="scan", unit="rows", stream=io.StringIO(), clock=clock)
    clock.t += 2.0
    bar.update(1000)
    assert bar.line() == "scan: 1000 rows 500 rows/s elapsed 0:00:02"


def test_log_mode_prints_plain_lines_every_few_seconds():
    clock, out = FakeClock(), io.StringIO()
    with Progress(total=1000, desc="job", stream=out, clock=clock) as bar:
        for _ in range(40):  # 4 s of fast updates: below the 5 s log interval
            clock.t += 0.1
            bar.update(10)
        assert out.getvalue() == ""
        clock.t += 1.0
        bar.update(10)
        assert out.getvalue().count("\n") == 1 and "410/1000" in out.getvalue()
    lines = out.getvalue().splitlines()
    # close() adds no copy of a line the log already holds (same count, same fields)
    assert len(lines) == 1 and "\r" not in out.getvalue()
    assert lines[-1].startswith("job: 410/1000 (41.0%)")
    with Progress(total=1000, desc="job", stream=out, clock=clock) as bar:
        clock.t += 6.0
        bar.update(10)
        bar.update(5, loss=0.5)            # after the last line: close() must show it
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[-1].startswith("job: 15/1000") and "loss=0.5" in lines[-1]


def test_tty_mode_redraws_in_place_at_most_10_per_second():
    clock, out = FakeClock(), FakeTTY()
    bar = Progress(total=500, desc="t", stream=out, clock=clock)
    for _ in range(500):  # 500 updates over 1 s
        clock.t += 0.002
        bar.update()
    draws = out.getvalue().count("\r")
    assert 5 <= draws <= 11  # ~10 per second, plus the final count reaching total
    assert "\n" not in out.getvalue()
    bar.close()
    assert out.getvalue().endswith("\n") and "500/500 (100.0%)" in out.getvalue()
    bar.close()  # idempotent
    assert out.getvalue().count("\n") == 1


def test_tty_blanks_a_shorter_line():
    clock, out = FakeClock(), FakeTTY()
    bar = Progress(total=10, stream=out, clock=clock)
    clock.t += 1
    bar.update(1, note="a long note here")
    first = out.getvalue().split("\r")[-1]
    bar.postfix.clear()
    clock.t += 1
    bar.update(1)
    second = out.getvalue().split("\r")[-1]
    assert len(second) == len(first) and second.endswith(" ")


def test_disable_counts_but_draws_nothing():
    clock, out = FakeClock(), FakeTTY()
    with Progress(total=3, stream=out, disable=True, clock=clock) as bar:
        for _ in range(3):
            clock.t += 10
            bar.update()
    assert bar.n == 3 and out.getvalue() == ""


def test_closes_on_exception():
    out = io.StringIO()
    with pytest.raises(ValueError):
        with Progress(total=10, desc="x", stream=out) as bar:
            bar.update(4)
            raise ValueError("boom")
    assert out.getvalue().startswith("x: 4/10") and out.getvalue().endswith("\n")


def test_bad_total():
    with pytest.raises(ValueError, match="total"):
        Progress(total=-1)
