"""The interpreter's checks (tests/interpreter_checks.py), which conftest installs for every
test when kernels are interpreted. Bounds: a load or store one element past a tensor, or
before it, or past a view inside a larger buffer, is caught; masked-off lanes and exact fits
pass. Races: two programs storing one element, or one program loading what another stores
in the same launch, are caught; programs that keep to their own elements, and a program
that reads back its own store, pass."""
from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="checks the interpreter; compiled kernels are not checked")

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from interpreter_checks import OutOfBounds, Race  # noqa: E402


@triton.jit
def _copy(src, dst, n, shift, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    i = tl.arange(0, BLOCK)
    if MASKED:
        x = tl.load(src + i + shift, mask=i < n, other=0)
        tl.store(dst + i, x, mask=i < n)
    else:
        x = tl.load(src + i + shift)
        tl.store(dst + i, x)


@triton.jit
def _store_at(dst, at):
    tl.store(dst + at, 7)


def _run(src, dst, n, shift=0, block=8, masked=True):
    _copy[(1,)](src, dst, n, shift, BLOCK=block, MASKED=masked)


def test_exact_fit_and_masked_tail_pass():
    src = torch.arange(8, dtype=torch.int32)
    dst = torch.full((8,), -1, dtype=torch.int32)
    _run(src, dst, 8, masked=False)
    assert torch.equal(dst, src)
    short_src, short_dst = torch.arange(5, dtype=torch.int32), torch.zeros(5, dtype=torch.int32)
    _run(short_src, short_dst, 5, block=8, masked=True)       # lanes 5..7 are masked off
    assert torch.equal(short_dst, short_src)


def test_load_one_past_the_end_is_caught():
    src, dst = torch.arange(8, dtype=torch.int32), torch.zeros(8, dtype=torch.int32)
    with pytest.raises(Exception, match=r"_copy.*load of 1 lane\(s\).*0 bytes past the end of argument 'src'"):
        _run(src, dst, 8, shift=1, masked=False)


def test_load_before_the_start_is_caught():
    src, dst = torch.arange(8, dtype=torch.int32), torch.zeros(8, dtype=torch.int32)
    with pytest.raises(Exception, match=r"before the start of argument 'src'"):
        _run(src, dst, 8, shift=-1, masked=False)


def test_unmasked_tail_is_caught_where_the_masked_one_passes():
    src, dst = torch.arange(5, dtype=torch.int32), torch.zeros(5, dtype=torch.int32)
    with pytest.raises(Exception, match=r"load of 3 lane\(s\)"):
        _run(src, dst, 5, block=8, masked=False)


def test_a_view_is_bounded_by_its_own_extent_not_its_storage():
    buf = torch.arange(16, dtype=torch.int32)
    src, dst = buf[:8], torch.zeros(8, dtype=torch.int32)
    _run(src, dst, 8, masked=False)
    with pytest.raises(Exception, match=r"past the end of argument 'src'"):
        _run(src, dst, 8, shift=1, masked=False)         # element 8 of buf exists, but not of src
    strided = buf[::2]                                    # extent: elements 0, 2, .., 14
    _store_at[(1,)](strided, 14)                          # byte 56 = buf[14], inside the extent
    assert buf[14] == 7
    with pytest.raises(Exception, match=r"store of 1 lane\(s\).*past the end of argument 'dst'"):
        _store_at[(1,)](strided, 15)


def test_store_past_the_end_is_caught_and_nothing_is_written():
    buf = torch.zeros(9, dtype=torch.int32)
    with pytest.raises(Exception, match="OutOfBounds|out of bounds"):
        _store_at[(1,)](buf[:8], 8)
    assert buf[8] == 0


def test_the_error_type():
    src, dst = torch.arange(8, dtype=torch.int32), torch.zeros(8, dtype=torch.int32)
    with pytest.raises(Exception) as info:
        _run(src, dst, 8, shift=1, masked=False)
    assert isinstance(info.value, OutOfBounds) or "OutOfBounds" in str(info.value)


@triton.jit
def _shifted_sum(src, dst, shift, BLOCK: tl.constexpr):
    """Program p stores block p of dst = src + (block p + shift of dst): with shift 0 each
    program reads back its own store; otherwise it reads a neighbour's."""
    p = tl.program_id(0)
    i = p * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i))
    j = (p + shift) % tl.num_programs(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(dst + i) + tl.load(dst + j, mask=j >= 0, other=0))


@triton.jit
def _all_to_one(dst):
    tl.store(dst, tl.program_id(0))


def test_programs_on_their_own_elements_pass():
    src, dst = torch.arange(16, dtype=torch.int32), torch.zeros(16, dtype=torch.int32)
    _shifted_sum[(4,)](src, dst, 0, BLOCK=4)
    assert torch.equal(dst, 2 * src)


def test_a_load_of_another_programs_store_is_a_race():
    src, dst = torch.arange(16, dtype=torch.int32), torch.zeros(16, dtype=torch.int32)
    with pytest.raises(Race, match=r"_shifted_sum: program \d+ loads byte \d+ of argument "
                                   r"'dst', which program \d+ of the same launch stores"):
        _shifted_sum[(4,)](src, dst, 1, BLOCK=4)


def test_two_programs_storing_one_element_is_a_race():
    dst = torch.zeros(4, dtype=torch.int32)
    _all_to_one[(1,)](dst)
    with pytest.raises(Race, match=r"programs 0 and 1 both store to byte 0 of argument 'dst'"):
        _all_to_one[(3,)](dst)
