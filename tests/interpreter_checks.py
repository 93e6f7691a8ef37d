"""Out-of-bounds and cross-program race detection for Triton kernels run under the
interpreter.

Compiled on a GPU, a kernel that loads past the end of a tensor reads whatever lies there
(another tensor of the caching allocator, usually) and a store past the end corrupts it;
nothing fails, the answer is just wrong. The interpreter executes loads and stores as raw
host-memory accesses and does not check them either, so a CPU test can pass while the same
kernel misbehaves on a GPU.

`install()` wraps the interpreter's loads and stores: every lane whose mask is true must
address whole elements inside the extent of one tensor argument of the kernel being run
(the bytes its sizes and strides can reach from its data pointer, not its whole storage:
reading a neighbour inside a shared buffer is the same bug). A lane outside raises
`OutOfBounds` naming the kernel, the program id, the access and the nearest argument.
Lanes whose mask is false are not checked: a masked-off load never touches memory.

The interpreter also runs a grid's programs one after another, in order, where a GPU runs
them at once in no set order: a kernel whose program reads what another program of the
same launch writes, or two programs that write one element, gives the interpreter's answer
on the CPU and any answer on a GPU. So after each launch the element addresses written are
grouped by program: an element written by two programs, or written by one and read by
another, raises `Race` (none of the kernels uses atomics, which would make that legal).
Elements are compared by their start address, so two views of one buffer with different
element sizes in one kernel would escape this check.

The checker follows the interpreter's internals (`GridExecutor`, `_implicit_cvt`,
`interpreter_builder.create_masked_load/store`); `install()` raises if they are missing,
so a Triton upgrade that moves them fails loudly instead of silently checking nothing.
"""
from __future__ import annotations

import inspect
import threading

import numpy as np

_state = threading.local()
_interp = None               # triton.runtime.interpreter, once install() has run


class OutOfBounds(AssertionError):
    """A kernel lane accessed memory outside every tensor argument."""


class Race(AssertionError):
    """Two programs of one launch touched one element, and at least one wrote it."""


def _program() -> int:
    b = _interp.interpreter_builder
    x, y, z = b.grid_idx
    return (x * b.grid_dim[1] + y) * b.grid_dim[2] + z


def _record(kind: str, addr: np.ndarray, on: np.ndarray):
    hits = addr[on]
    if hits.size:
        _state.accesses[kind].append((hits.reshape(-1), _program()))


def _check_races():
    """Every element written in the launch belongs to one program, which alone reads it."""
    acc = _state.accesses
    if not acc["store"]:
        return
    w = np.concatenate([a for a, _ in acc["store"]])
    wp = np.concatenate([np.full(a.size, p, np.int64) for a, p in acc["store"]])
    order = np.lexsort((wp, w))
    w, wp = w[order], wp[order]
    clash = (w[1:] == w[:-1]) & (wp[1:] != wp[:-1])
    if clash.any():
        i = int(np.argmax(clash))
        raise Race(f"kernel {_state.kernel}: programs {wp[i]} and {wp[i + 1]} both store to "
                   f"{_describe(int(w[i]))}")
    if not acc["load"]:
        return
    keep = np.ones(w.size, dtype=bool)
    keep[1:] = w[1:] != w[:-1]
    w, wp = w[keep], wp[keep]                    # one writer per element now
    r = np.concatenate([a for a, _ in acc["load"]])
    rp = np.concatenate([np.full(a.size, p, np.int64) for a, p in acc["load"]])
    pos = np.clip(np.searchsorted(w, r), 0, w.size - 1)
    cross = (w[pos] == r) & (wp[pos] != rp)
    if cross.any():
        i = int(np.argmax(cross))
        raise Race(f"kernel {_state.kernel}: program {rp[i]} loads {_describe(int(r[i]))}, "
                   f"which program {wp[pos[i]]} of the same launch stores")


def _describe(address: int) -> str:
    for name, start, end in _state.regions:
        if start <= address < end:
            return f"byte {address - start} of argument '{name}'"
    return f"address {address:#x}"


def _extent(t) -> tuple[int, int]:
    """[start, end) byte addresses a view can reach through its sizes and strides."""
    start = t.data_ptr()
    if t.numel() == 0:
        return start, start
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def _check(kind: str, ptrs, mask, elem_ty):
    regions = getattr(_state, "regions", None)
    if regions is None:        # an access outside a kernel launch we saw: nothing to check
        return
    addr = np.asarray(ptrs.data, dtype=np.uint64).astype(np.int64)
    on = np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape)
    size = np.dtype(_interp._get_np_dtype(elem_ty)).itemsize
    inside = np.zeros(addr.shape, dtype=bool)
    for _, start, end in regions:
        inside |= (addr >= start) & (addr + size <= end)
    bad = on & ~inside
    if not bad.any():
        _record(kind, addr, on)
        return
    first = int(addr[bad].flat[0])
    name, start, end = min(regions, key=lambda r: min(abs(first - r[1]), abs(first - r[2])))
    where = (f"{first - end} bytes past the end of" if first >= end
             else f"{start - first} bytes before the start of" if first < start
             else "inside (misaligned element of)")
    raise OutOfBounds(
        f"kernel {_state.kernel}, program {tuple(_interp.interpreter_builder.grid_idx)}: {kind} of "
        f"{int(bad.sum())} lane(s) out of bounds; the first address is {where} argument "
        f"'{name}' ({end - start} bytes)")


def install():
    """Wrap the interpreter's launches, loads and stores (idempotent)."""
    global _interp
    if _interp is not None:
        return
    import triton.runtime.interpreter as interp
    for attr in ("GridExecutor", "_implicit_cvt", "interpreter_builder", "_get_np_dtype"):
        if not hasattr(interp, attr):
            raise RuntimeError(f"triton.runtime.interpreter has no {attr}: the checks must "
                               "be adapted to this Triton version")
    builder = interp.interpreter_builder
    for attr in ("create_masked_load", "create_masked_store"):
        if not hasattr(builder, attr):
            raise RuntimeError(f"the interpreter builder has no {attr}: adapt the checker")

    orig_call = interp.GridExecutor.__call__
    orig_cvt = interp._implicit_cvt
    orig_load = builder.create_masked_load
    orig_store = builder.create_masked_store

    def call(self, *args, **kwargs):
        # Tensor parameters in signature order: _implicit_cvt meets them in that order.
        sig = inspect.signature(self.fn)
        own = {k: v for k, v in kwargs.items() if k in sig.parameters}   # not num_warps etc.
        bound = sig.bind_partial(*args, **own).arguments
        outer = tuple(getattr(_state, a, None) for a in ("names", "regions", "kernel", "accesses"))
        _state.names = [n for n, v in bound.items() if hasattr(v, "data_ptr")]
        _state.regions = []
        _state.kernel = getattr(self.fn, "__name__", repr(self.fn))
        _state.accesses = {"load": [], "store": []}
        try:
            result = orig_call(self, *args, **kwargs)
            _check_races()
            return result
        finally:
            _state.names, _state.regions, _state.kernel, _state.accesses = outer

    def cvt(arg):
        out = orig_cvt(arg)
        regions = getattr(_state, "regions", None)
        if regions is not None and hasattr(arg, "data_ptr"):
            names = _state.names
            name = names[len(regions)] if len(regions) < len(names) else f"#{len(regions)}"
            regions.append((name, *_extent(arg)))
        return out

    def load(ptrs, mask, other, *rest):
        _check("load", ptrs, mask, ptrs.get_element_ty())
        return orig_load(ptrs, mask, other, *rest)

    def store(ptrs, value, mask, *rest):
        _check("store", ptrs, mask, ptrs.get_element_ty())
        return orig_store(ptrs, value, mask, *rest)

    interp.GridExecutor.__call__ = call
    interp._implicit_cvt = cvt
    builder.create_masked_load = load
    builder.create_masked_store = store
    _interp = interp
