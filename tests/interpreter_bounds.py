"""Out-of-bounds detection for Triton kernels run under the interpreter.

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

The checker follows the interpreter's internals (`GridExecutor`, `_implicit_cvt`,
`interpreter_builder.create_masked_load/store`); `install()` raises if they are missing,
so a Triton upgrade that moves them fails loudly instead of silently checking nothing.
"""
from __future__ import annotations

import inspect
import threading

import numpy as np

_state = threading.local()
_installed = False


class OutOfBounds(AssertionError):
    """A kernel lane accessed memory outside every tensor argument."""


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
    from triton.runtime.interpreter import _get_np_dtype
    size = np.dtype(_get_np_dtype(elem_ty)).itemsize
    inside = np.zeros(addr.shape, dtype=bool)
    for _, start, end in regions:
        inside |= (addr >= start) & (addr + size <= end)
    bad = on & ~inside
    if not bad.any():
        return
    first = int(addr[bad].flat[0])
    name, start, end = min(regions, key=lambda r: min(abs(first - r[1]), abs(first - r[2])))
    where = (f"{first - end} bytes past the end of" if first >= end
             else f"{start - first} bytes before the start of" if first < start
             else "inside (misaligned element of)")
    from triton.runtime.interpreter import interpreter_builder
    raise OutOfBounds(
        f"kernel {_state.kernel}, program {tuple(interpreter_builder.grid_idx)}: {kind} of "
        f"{int(bad.sum())} lane(s) out of bounds; the first address is {where} argument "
        f"'{name}' ({end - start} bytes)")


def install():
    """Wrap the interpreter's launches, loads and stores (idempotent)."""
    global _installed
    if _installed:
        return
    import triton.runtime.interpreter as interp
    for attr in ("GridExecutor", "_implicit_cvt", "interpreter_builder"):
        if not hasattr(interp, attr):
            raise RuntimeError(f"triton.runtime.interpreter has no {attr}: the bounds "
                               "checker must be adapted to this Triton version")
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
        outer = (getattr(_state, "names", None), getattr(_state, "regions", None),
                 getattr(_state, "kernel", None))
        _state.names = [n for n, v in bound.items() if hasattr(v, "data_ptr")]
        _state.regions = []
        _state.kernel = getattr(self.fn, "__name__", repr(self.fn))
        try:
            return orig_call(self, *args, **kwargs)
        finally:
            _state.names, _state.regions, _state.kernel = outer

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
    _installed = True
