"""The C entry points PyTorch's CUDAPluggableAllocator and CuPy's CFunctionAllocator call, driven through ctypes
(the host backend has neither framework): allocations land in the installed pool or sleeping allocator."""

import ctypes

import pytest

import pvmm
from pvmm import allocators

MIB = 1 << 20


def entry_points():
    lib = ctypes.CDLL(allocators.library_path())
    alloc = lib.pvmm_torch_alloc
    alloc.restype, alloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    free = lib.pvmm_torch_free
    free.restype, free.argtypes = None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    return lib, alloc, free


@pytest.mark.skipif(pvmm.BACKEND != "host", reason="a foreign stream handle on the host backend must be pvmm's own")
def test_torch_entry_points_allocate_from_the_installed_pool(stream):
    lib, alloc, free = entry_points()
    with pvmm.MemoryPool.create() as pool:
        pool._install_c_allocator()
        p = alloc(MIB, 0, stream.handle)
        assert p and pvmm.query_pointer(p)["kind"] == "pool"
        assert pool.usage()["used_current"] == MIB
        free(p, MIB, 0, stream.handle)
        stream.synchronize()
        assert pool.usage()["used_current"] == 0
        cupy_malloc = lib.pvmm_cupy_malloc
        cupy_malloc.restype, cupy_malloc.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        q = cupy_malloc(stream.handle, 4096, 0)  # CuPy's param is the stream
        assert pvmm.query_pointer(q)["kind"] == "pool"
        pool.free_async(q, stream)


def test_torch_entry_points_serve_a_sleeping_allocator_with_tags():
    _, alloc, free = entry_points()
    with pvmm.SleepingAllocator() as sleeper:
        sleeper._install_c_allocator()
        with allocators.tag(sleeper, "weights"):
            w = alloc(3 * MIB, 0, None)
        kv = alloc(MIB, 0, None)
        assert sleeper.statistics("weights")["allocations"] == 1
        assert sleeper.statistics("default")["allocations"] == 1
        sleeper.sleep(["weights"])
        assert sleeper.statistics("weights")["resident_bytes"] == 0
        assert sleeper.statistics("default")["resident_bytes"] > 0
        sleeper.wake()
        free(w, 3 * MIB, 0, None)
        free(kv, MIB, 0, None)
        assert sleeper.statistics()["allocations"] == 0
