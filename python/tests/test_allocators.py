"""The C entry points PyTorch's CUDAPluggableAllocator and CuPy's CFunctionAllocator call, driven through ctypes
(the host backend has neither framework): allocations land in the installed pool, growable arena or sleeping
allocator."""

import ctypes

import numpy as np
import pytest

import pvmm
from close_race import RACE, check_report
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
        pool.install_c_allocator()
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
        sleeper.install_c_allocator()
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


def test_torch_entry_points_serve_a_growable_arena():
    """The VMM-backed plug-in: allocations from one reserved range, physical memory mapped as they reach it and
    given back when the highest ones go; freed blocks are reused; a full reservation refuses (NULL) and stays."""
    _, alloc, free = entry_points()
    chunk = 2 * MIB
    with pvmm.GrowableArena(reserve_size=16 * MIB, chunk_size=chunk) as arena:
        arena.install_c_allocator()
        base = arena.address
        assert arena.statistics()["reserved_bytes"] == 16 * MIB and arena.statistics()["mapped_bytes"] == 0
        a = alloc(1000, 0, None)
        b = alloc(3 * MIB, 0, None)
        assert a == base and b == base + 1024  # 512-byte alignment, packed from the start
        st = arena.statistics()
        assert st["allocations"] == 2 and st["allocated_bytes"] == 1024 + 3 * MIB and st["mapped_bytes"] == 2 * chunk
        view = np.from_dlpack(arena.view(b, "uint8")) if pvmm.BACKEND == "host" else None
        if view is not None:
            view[:] = 7
            assert view.size == 3 * MIB and int(view[-1]) == 7
        del view  # a live view pins the arena: free refuses while it lives (BusyError)
        free(a, 1000, 0, None)  # a hole below the top: reused, nothing unmapped
        assert alloc(512, 0, None) == base and arena.statistics()["mapped_bytes"] == 2 * chunk
        assert alloc(20 * MIB, 0, None) is None  # more than the reservation: refused, the arena unchanged
        assert arena.statistics()["allocations"] == 2
        free(b, 3 * MIB, 0, None)  # the highest allocation went: the chunk above what is left goes back
        st = arena.statistics()
        assert st["mapped_bytes"] == chunk and st["shrinks"] == 1 and st["peak_mapped_bytes"] == 2 * chunk
        free(base, 512, 0, None)
        assert arena.statistics()["mapped_bytes"] == 0 and arena.statistics()["allocations"] == 0
        big = [arena.allocate(4 * MIB) for _ in range(4)]  # exactly the reservation
        assert big == [base + i * 4 * MIB for i in range(4)]
        with pytest.raises(pvmm.OutOfMemoryError):
            arena.allocate(512)
        for p in reversed(big):
            arena.free(p)
        with pytest.raises(pvmm.InvalidArgumentError):
            arena.free(base)  # freed already
        with pytest.raises(pvmm.InvalidSizeError):
            arena.allocate(0)
        assert repr(arena).startswith("<pvmm.GrowableArena allocations=0 mapped_bytes=0")
    assert arena.closed and alloc(512, 0, None) is None  # closing uninstalls it
    with pytest.raises(pvmm.AlreadyReleasedError):
        arena.allocate(512)


@pytest.mark.skipif(pvmm.BACKEND != "host", reason="a foreign stream handle on the host backend must be pvmm's own")
def test_frees_reach_the_source_that_allocated_after_another_is_installed(stream):
    """PyTorch may free a segment after another source was installed (a MemPool outliving its turn) or after the
    source's Python owner closed: the free reaches the source that made it, which the entry points keep alive."""
    _, alloc, free = entry_points()
    pool = pvmm.MemoryPool.create()
    pool.install_c_allocator()
    from_pool = alloc(MIB, 0, stream.handle)
    arena = pvmm.GrowableArena(reserve_size=16 * MIB, chunk_size=2 * MIB)
    arena.install_c_allocator()
    from_arena = alloc(MIB, 0, None)
    sleeper = pvmm.SleepingAllocator()
    sleeper.install_c_allocator()
    from_sleeper = alloc(MIB, 0, None)
    free(from_arena, MIB, 0, None)  # the arena's, though the sleeping allocator is installed
    assert arena.statistics()["allocations"] == 0 and sleeper.statistics()["allocations"] == 1
    free(from_pool, MIB, 0, stream.handle)  # the last pool installed
    stream.synchronize()
    assert pool.usage()["used_current"] == 0
    arena.install_c_allocator()
    kept = alloc(MIB, 0, None)
    sleeper.install_c_allocator()
    arena.close()  # Python's owner goes; the entry points keep the arena while `kept` lives
    ctypes.memset(kept, 0x5A, MIB)  # still mapped
    assert ctypes.string_at(kept + MIB - 4, 4) == b"\x5a" * 4
    free(kept, MIB, 0, None)
    free(from_sleeper, MIB, 0, None)
    assert sleeper.statistics()["allocations"] == 0
    sleeper.close()
    assert alloc(MIB, 0, None) is None  # nothing installed


@pytest.mark.skipif(pvmm.BACKEND != "host", reason="a foreign stream handle on the host backend must be pvmm's own")
def test_torch_and_cupy_entry_points_serve_the_caching_allocator(stream):
    """Issue 49: the library's caching allocator as the plug-ins' source, its stats() reachable from Python."""
    lib, alloc, free = entry_points()
    with pvmm.CachingAllocator() as cache:
        cache.install_c_allocator()
        p = alloc(3 * MIB, 0, stream.handle)
        assert p and cache.size_of(p) == 3 * MIB
        st = cache.stats()
        assert st["live"] == 3 * MIB and st["live_blocks"] == 1 and st["reserved"] >= 3 * MIB
        free(p, 3 * MIB, 0, stream.handle)
        q = alloc(MIB, 0, stream.handle)  # from the cache: no new chunk
        assert cache.stats()["cache_hits"] == 1 and cache.stats()["chunks_created"] == st["chunks_created"]
        free(q, MIB, 0, stream.handle)
        cupy_malloc, cupy_free = lib.pvmm_cupy_malloc, lib.pvmm_cupy_free
        cupy_malloc.restype, cupy_malloc.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        cupy_free.restype, cupy_free.argtypes = None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        r = cupy_malloc(stream.handle, 4096, 0)
        assert cache.size_of(r) == 4096
        cupy_free(stream.handle, r, 0)
        assert cache.stats()["live"] == 0
        direct = cache.allocate(MIB, stream)
        cache.free(direct, stream)
        cache.trim()
        assert cache.stats()["reserved"] == 0
        cache.reset_peaks()
        assert cache.stats()["peak_live"] == 0
        with pytest.raises(TypeError, match="^stream must be"):
            cache.allocate(MIB, "x")
    assert alloc(MIB, 0, stream.handle) is None  # closing uninstalled it


@pytest.mark.parametrize("make", [lambda: pvmm.MemoryPool.create(), lambda: pvmm.CachingAllocator(),
                                  lambda: pvmm.GrowableArena(reserve_size=16 * MIB, chunk_size=2 * MIB),
                                  lambda: pvmm.SleepingAllocator()])
def test_install_c_allocator_on_a_closed_object_is_refused_and_uninstalls_nothing(make):
    """Issue 47 item 11: install_c_allocator() on a closed MemoryPool succeeded and uninstalled the current source."""
    _, alloc, free = entry_points()
    with pvmm.SleepingAllocator() as current:
        current.install_c_allocator()
        closed = make()
        closed.close()
        with pytest.raises(pvmm.AlreadyReleasedError):
            closed.install_c_allocator()
        p = alloc(MIB, 0, None)  # still the sleeping allocator's
        assert p and current.tag_of(p) == "default"
        free(p, MIB, 0, None)


def test_arena_close_while_threads_allocate_and_free(child):
    """Issue 47 item 5: GrowableArena.close() while 4 threads allocate and free crashed (SIGSEGV). Each call now
    finishes on the arena or raises AlreadyReleasedError. In a child interpreter: a crash fails only this case."""
    check_report(child(RACE + """
def churn(arena):
    mine = []

    def call():  # one thread's allocations: a new block, the oldest freed past four; a full arena is no error
        try:
            mine.append(arena.allocate(64 << 10))
        except pvmm.OutOfMemoryError:
            return
        if len(mine) > 4:
            arena.free(mine.pop(0))
    return call

race(lambda: pvmm.GrowableArena(reserve_size=64 * MIB, chunk_size=2 * MIB), lambda a: [churn(a) for _ in range(4)])
report()
""", timeout=120))


@pytest.mark.parametrize("grow, maps", [(True, 1), (False, 2)])
def test_caching_allocator_grows_a_region_in_place_unless_told_not_to(stream, grow, maps):
    """A free 4 MiB block at the end of its region and an 8 MiB request: grown in place, one chunk is mapped after
    it; with grow_in_place=False, a new region of two chunks is stitched."""
    with pvmm.CachingAllocator(chunk_size=4 * MIB, grow_in_place=grow) as cache:
        cache.free(cache.allocate(4 * MIB, stream), stream)
        before = cache.stats()["maps"]
        p = cache.allocate(8 * MIB, stream)
        assert cache.stats()["maps"] - before == maps
        cache.free(p, stream)
