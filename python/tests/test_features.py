"""What Python users reach for (issue 47): query_memory, pool trim / peak marks / allocation counts, page-locking an
existing NumPy array, the buffer protocol, copy_to/copy_from, `closed` everywhere, owners that pickle through
multiprocessing, the symmetric heap and team.split."""

import multiprocessing as mp
import threading

import numpy as np
import pytest

import pvmm
from ranks import SharedStore

MIB = 1 << 20
host_only = pytest.mark.skipif(pvmm.BACKEND != "host", reason="reads the memory through NumPy (host backend)")


def test_query_memory():
    free, total = pvmm.query_memory(0)
    assert 0 < free <= total
    with pytest.raises(pvmm.InvalidDeviceError):
        pvmm.query_memory(99)


def test_pool_trim_peak_marks_and_allocation_counts(stream):
    pool = pvmm.MemoryPool.create()
    a = pool.allocate(4 * MIB, stream)
    raw = pool.allocate_async(MIB, stream)
    usage = pool.usage()
    assert (usage["allocations"], usage["allocations_made"]) == (2, 2)
    a.free()
    pool.free_async(raw, stream)
    stream.synchronize()
    usage = pool.usage()
    assert (usage["allocations"], usage["allocations_made"]) == (0, 2)
    assert usage["used_high"] >= 5 * MIB and usage["reserved_current"] >= 4 * MIB
    pool.reset_peak()
    assert pool.usage()["used_high"] == pool.usage()["used_current"] == 0
    pool.trim()
    assert pool.usage()["reserved_current"] == 0
    pool.close()
    with pytest.raises(pvmm.AlreadyReleasedError):
        pool.trim()


@host_only
def test_page_locking_an_existing_numpy_array(stream):
    array = np.zeros(MIB, dtype=np.uint8)
    with pvmm.HostRegistration.create(array) as registration:
        assert registration.address == array.ctypes.data and registration.size == MIB
        assert pvmm.query_pointer(array.ctypes.data)["kind"] == "registered"
        pinned = pvmm.PinnedAllocation.create(MIB)
        np.from_dlpack(pinned)[:] = 3
        registration.copy_from(pinned, stream)
        assert (array == 3).all()
    assert registration.closed
    assert pvmm.query_pointer(array.ctypes.data)["kind"] == "none"
    with pytest.raises(BufferError):
        pvmm.HostRegistration.create(b"read-only bytes")


@host_only
def test_buffer_protocol_and_copies_between_owners_and_python_buffers(stream):
    src = pvmm.PinnedAllocation.create(4096)
    view = memoryview(src)
    assert (view.nbytes, view.format, view.readonly) == (4096, "B", False)
    view[:4] = b"pvmm"
    assert bytes(src)[:4] == b"pvmm"
    view.release()
    g = pvmm.GrowableBuffer.create(chunk_size=2 * MIB, reserve_size=4 * MIB)
    g.resize(2 * MIB)
    g.copy_from(src, stream, offset=100)  # owner to owner, stream-ordered and waited for
    out = bytearray(8)
    g.copy_to(out, offset=100)  # a writable Python buffer; a new stream of the device
    assert bytes(out[:4]) == b"pvmm"
    g.copy_from(np.arange(4, dtype=np.uint32))
    assert np.frombuffer(bytes(memoryview(g)[:16]), dtype=np.uint32).tolist() == [0, 1, 2, 3]
    with pytest.raises(pvmm.OutOfRangeError):
        src.copy_from(bytes(4097))
    with pytest.raises(TypeError, match="^destination must be"):
        src.copy_to(42)
    with pytest.raises(BufferError):
        src.copy_to(b"immutable")


def test_every_closable_object_has_closed(stream):
    size = pvmm.granularity()[0]
    objects = [
        pvmm.Stream.create(),
        pvmm.Event.create(),
        pvmm.PhysicalAllocation.create(size),
        pvmm.Reservation.reserve(size),
        pvmm.PinnedAllocation.create(4096),
        pvmm.ManagedAllocation.create(4096),
        pvmm.PinnedPool.create(),
        pvmm.MemoryPool.create(),
        pvmm.MemoryPool.create().allocate(4096, stream),
        pvmm.Listener.listen(f"pvmm-closed-{id(stream)}"),
    ]
    for o in objects:
        assert o.closed is False, o
        o.close()
        assert o.closed is True, o
        o.close()  # twice is fine


def child_fill(buffer, pool, q):
    np.from_dlpack(buffer)[:] = 5  # an ImportedBuffer of the parent's memory
    q.put((type(buffer).__name__, type(pool).__name__, pool.usage()["reserved_current"] >= 0))


@host_only
def test_owners_pickle_through_multiprocessing():
    g = pvmm.GrowableBuffer.create(chunk_size=2 * MIB, reserve_size=4 * MIB, exportable=True)
    g.resize(2 * MIB)
    pool = pvmm.MemoryPool.create(exportable=True)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child_fill, args=(g, pool, q))
    p.start()
    assert q.get(timeout=60) == ("ImportedBuffer", "MemoryPool", True)
    p.join(30)
    assert p.exitcode == 0
    assert (np.from_dlpack(g) == 5).all()
    with pytest.raises(pvmm.HandleTypeNotRequestedError):
        import pickle

        pickle.dumps(pvmm.MemoryPool.create())


@host_only
def test_team_split_and_the_symmetric_heap():
    size, store, results = 4, SharedStore(), {}

    def run(rank):
        try:
            with pvmm.Team.over_store(store, rank, size, prefix="split", timeout_ms=20000) as team:
                with team.split(rank % 2, key=-rank, timeout_ms=20000) as half:
                    heap = pvmm.SymmetricHeap.create(half, 1 << 16, timeout_ms=20000)
                    offset = heap.allocate(1000)
                    np.from_dlpack(heap.buffer(half.rank, offset, 1000))[:] = rank
                    half.barrier()
                    seen = [int(np.from_dlpack(heap.buffer(r, offset, 1000))[999]) for r in range(half.size)]
                    half.barrier()
                    stats = heap.statistics()
                    heap.free(offset)
                    heap.close()
                    results[rank] = (half.size, half.rank, seen, stats["allocations"])
        except Exception as e:
            results[rank] = repr(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # colors 0: ranks 0, 2; 1: ranks 1, 3; key -rank ranks the higher parent rank first
    assert results == {
        0: (2, 1, [2, 0], 1),
        2: (2, 0, [2, 0], 1),
        1: (2, 1, [3, 1], 1),
        3: (2, 0, [3, 1], 1),
    }, results
