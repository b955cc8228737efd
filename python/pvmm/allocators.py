"""Allocator plug-ins: pvmm memory behind PyTorch and CuPy (both optional imports).

- PyTorch: ``torch_mem_pool(source)`` gives a ``torch.cuda.MemPool`` whose allocations come from ``source``
  through ``torch.cuda.memory.CUDAPluggableAllocator``: a ``pvmm.MemoryPool`` (stream-ordered pool allocations), a
  ``pvmm.CachingAllocator`` (pvmm's caching allocator on VMM, in the order of the stream PyTorch names; its
  ``stats()`` say what it holds and the driver calls it made), a ``pvmm.GrowableArena`` (one reserved range whose physical memory is mapped as allocations reach it and unmapped
  when the highest ones go: VMM growth, addresses never move) or a ``pvmm.SleepingAllocator``. The C entry points
  ``pvmm_torch_alloc`` / ``pvmm_torch_free`` live in the extension module itself.
- CuPy: ``cupy_set_allocator(source)`` routes ``cupy.cuda.set_allocator`` through ``CFunctionAllocator`` to a
  ``pvmm.MemoryPool`` or a ``pvmm.CachingAllocator``.
- Tags: ``with tag(sleeping, "weights"):`` makes the allocations PyTorch asks for inside the block carry the tag
  that ``sleeping.sleep(["weights"])`` selects (vLLM's sleep mode); nested blocks restore the outer tag.

Installing a closed source raises ``AlreadyReleasedError`` and leaves the installed source as it was.

Allocations through the C entry points come from the last source installed; a free reaches the source that made
it (an arena or sleeping allocator the entry points served stays alive while it holds allocations; a pool's frees go
to the last pool installed).
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any, Iterator, Union

from . import _pvmm

Source = Union[_pvmm.MemoryPool, _pvmm.CachingAllocator, _pvmm.GrowableArena, _pvmm.SleepingAllocator]


def library_path() -> str:
    """The shared library holding the C entry points (the extension module)."""
    path: str = _pvmm.__file__
    return path


def torch_allocator(source: Source) -> Any:
    """A ``torch.cuda.memory.CUDAPluggableAllocator`` allocating from ``source``."""
    import torch  # optional

    source.install_c_allocator()
    return torch.cuda.memory.CUDAPluggableAllocator(library_path(), "pvmm_torch_alloc", "pvmm_torch_free")


def torch_mem_pool(source: Source) -> Any:
    """A ``torch.cuda.MemPool`` backed by ``source``: ``with torch.cuda.use_mem_pool(pool): ...``."""
    import torch  # optional

    return torch.cuda.MemPool(torch_allocator(source).allocator())


@contextlib.contextmanager
def tag(sleeping: _pvmm.SleepingAllocator, name: str) -> Iterator[None]:
    """Allocations made through the C entry points (and ``allocate`` without a tag) inside the block are tagged
    ``name``; the tag in force before the block is restored after it (nested blocks nest)."""
    outer = sleeping.use_tag(name)
    try:
        yield
    finally:
        sleeping.use_tag(outer)


def cupy_set_allocator(pool: Union[_pvmm.MemoryPool, _pvmm.CachingAllocator], stream: Any = None) -> Any:
    """Makes CuPy allocate from ``pool`` (a pool or a caching allocator) in ``stream``'s order (default: CuPy's current stream at this call).
    Returns the ``CFunctionAllocator`` (keep it; ``cupy.cuda.set_allocator(None)`` undoes)."""
    import cupy  # optional

    pool.install_c_allocator()
    lib = ctypes.CDLL(library_path())
    handle = int(stream.ptr if stream is not None else cupy.cuda.get_current_stream().ptr)
    malloc = ctypes.cast(lib.pvmm_cupy_malloc, ctypes.c_void_p).value
    free = ctypes.cast(lib.pvmm_cupy_free, ctypes.c_void_p).value
    allocator = cupy.cuda.memory.CFunctionAllocator(handle, malloc, free, pool)
    cupy.cuda.set_allocator(allocator.malloc)
    return allocator
