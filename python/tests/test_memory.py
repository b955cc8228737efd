"""Owners, DLPack round trips with NumPy, lifetimes and errors (host backend in CI; every backend runs it)."""

import ctypes
import os
import re
from pathlib import Path

import numpy as np
import pytest

import pvmm

MIB = 1 << 20
# DLPack device types (dlpack.h): what each kind of memory must be labelled on each backend.
KDLCPU, KDLCUDA, KDLCUDAHOST, KDLROCM, KDLROCMHOST, KDLCUDAMANAGED = 1, 2, 3, 10, 11, 13


def owners(stream):
    """One of every memory owner, 1 MiB or more."""
    g = pvmm.GrowableBuffer.create(chunk_size=2 * MIB, reserve_size=16 * MIB)
    g.resize(2 * MIB)
    pool = pvmm.MemoryPool.create()
    r = pvmm.Reservation.reserve(pvmm.granularity()[0])
    phys = pvmm.PhysicalAllocation.create(r.size)
    r.map(0, phys)
    return {
        "growable": g,
        "pinned": pvmm.PinnedAllocation.create(MIB),
        "managed": pvmm.ManagedAllocation.create(MIB),
        "pool": pool.allocate(MIB, stream),
        "reservation": r,
    }


def expected_label(kind):
    if pvmm.BACKEND == "host":
        return KDLCPU
    rocm = pvmm.BACKEND == "hip"
    return {"pinned": KDLROCMHOST if rocm else KDLCUDAHOST, "managed": KDLCUDAMANAGED}.get(
        kind, KDLROCM if rocm else KDLCUDA
    )


def test_backend_and_devices():
    assert pvmm.backend()["name"] == pvmm.BACKEND
    assert pvmm.device_count() >= 1
    d = pvmm.device(0)
    assert d["ordinal"] == 0 and isinstance(d["capabilities"]["vmm"], bool)
    minimum, recommended = pvmm.granularity()
    assert minimum > 0 and recommended % minimum == 0


@pytest.mark.skipif(pvmm.BACKEND != "host", reason="NumPy imports only host-visible memory (kDLCPU)")
def test_dlpack_round_trip_every_owner_with_numpy(stream):
    for kind, owner in owners(stream).items():
        assert owner.__dlpack_device__() == (expected_label(kind), 0), kind
        a = np.from_dlpack(owner)
        assert a.dtype == np.uint8 and a.size == owner.size and a.flags.writeable
        assert a.ctypes.data == owner.address
        a[:] = 0
        a[:16] = np.arange(16, dtype=np.uint8)
        # read back through another path: a typed view of the same memory
        v = np.from_dlpack(owner.view("uint32", (4,)))
        assert v.tolist() == np.arange(16, dtype=np.uint8).view(np.uint32).tolist(), kind
        info = pvmm.query_pointer(owner.address + 8)
        assert info["base"] == owner.address or kind == "growable", kind
        owner.close()


@pytest.mark.skipif(pvmm.BACKEND != "host", reason="NumPy imports only host-visible memory")
def test_views_outlive_their_owner_and_close_twice_is_fine():
    g = pvmm.GrowableBuffer.create(chunk_size=2 * MIB, reserve_size=8 * MIB)
    g.resize(2 * MIB)
    a = np.from_dlpack(g.view("int64"))
    a[:] = np.arange(a.size)
    address = g.address
    g.close()
    g.close()
    assert g.closed and "closed" in repr(g)
    assert pvmm.query_pointer(address)["kind"] == "device"  # still mapped: the view holds it
    assert int(a[12345]) == 12345
    del a
    import gc

    gc.collect()
    assert pvmm.query_pointer(address)["kind"] == "none"  # gone with the last view
    with pytest.raises(pvmm.AlreadyReleasedError) as e:
        g.resize(4 * MIB)
    assert e.value.code == "already_released" and e.value.operation == "resize"


def test_context_managers_and_repr(stream):
    with pvmm.PinnedAllocation.create(4096) as p:
        assert re.match(r"<pvmm.PinnedAllocation address=0x[0-9a-f]+ size=4096 device=0>", repr(p))
    assert p.closed
    with pvmm.MemoryPool.create() as pool:
        with pool.allocate(4096, stream) as a:
            assert "PoolAllocation" in repr(a)
        assert pool.usage()["used_current"] == 0  # the owner's close gave it back
    assert "closed" in repr(pool)
    assert "owned" in repr(stream)


def test_error_classes_are_the_errc_list() -> None:
    # The list is read from the source tree (tests run from a copy elsewhere name it with PVMM_SOURCE_DIR).
    root = Path(os.environ.get("PVMM_SOURCE_DIR") or Path(__file__).resolve().parents[2])
    header = root / "include/pvmm/errc_list.h"
    if not header.is_file():
        pytest.skip(f"[pvmm-skip] {header} not found: run from the source tree or set PVMM_SOURCE_DIR")
    listed = re.findall(r"X\((\w+), (\d+),", header.read_text())
    assert listed and {n: int(v) for n, v in listed} == {n: t[0] for n, t in pvmm.ERRC.items()}


def test_errors_are_generated_from_the_errc_list_and_carry_the_record(stream):
    for name, (value, meaning, cls) in pvmm.ERRC.items():
        assert issubclass(cls, pvmm.PvmmError) and cls is pvmm.error_class(name)
        camel = "".join(w.capitalize() for w in name.split("_"))
        assert cls.__name__ == (camel if camel.endswith("Error") else camel + "Error")  # protocol_error: ProtocolError
    with pytest.raises(pvmm.InvalidSizeError) as e:
        pvmm.PinnedAllocation.create(0)
    err = e.value
    assert (err.code, err.value) == ("invalid_size", pvmm.ERRC["invalid_size"][0])
    assert err.operation == "pvmm::pinned_allocation::create" and "size=0x0" in err.arguments
    assert err.detail == "size is zero" and err.native_name == "" and err.native_code == 0
    assert "invalid_size" in str(err)
    with pytest.raises(pvmm.InvalidDeviceError) as e:
        pvmm.device(99)
    assert e.value.code == "invalid_device"
    with pytest.raises(pvmm.InvalidArgumentError) as e:
        pvmm.PinnedAllocation.create(4096).view("complex7")
    assert "dtype" in e.value.arguments and e.value.hint
    with pytest.raises(pvmm.OutOfRangeError):
        pvmm.PinnedAllocation.create(4096).view("uint8", (4097,))
    with pytest.raises(TypeError, match="^stream must be a pvmm.Stream"):
        pvmm.Stream.borrow("not a stream")
    pool = pvmm.MemoryPool.create()
    with pytest.raises(pvmm.InvalidArgumentError):
        pool.free_async(12345, stream)
    with pytest.raises(pvmm.UnalignedError):
        pvmm.PhysicalAllocation.create(pvmm.granularity()[0] + 1)
    with pytest.raises(pvmm.HandleTypeNotRequestedError):
        g = pvmm.GrowableBuffer.create(chunk_size=2 * MIB, reserve_size=4 * MIB)
        g.resize(2 * MIB)
        g.export()
    r = pvmm.Reservation.reserve(pvmm.granularity()[0])
    with pytest.raises(pvmm.NotMappedError):
        r.unmap(0, r.size)


def test_streams_copy_and_borrow(stream):
    src = pvmm.PinnedAllocation.create(4096)
    dst = pvmm.PinnedAllocation.create(4096)
    if pvmm.BACKEND == "host":
        np.from_dlpack(src)[:] = 42
    stream.copy(dst.address, src.address, 4096)
    borrowed = pvmm.Stream.borrow(stream.handle)  # an int handle; objects with __cuda_stream__ work too
    borrowed.synchronize()
    assert pvmm.Stream.borrow(stream).handle == stream.handle  # via __cuda_stream__
    if pvmm.BACKEND == "host":
        assert (np.from_dlpack(dst) == 42).all()
    borrowed.close()
    borrowed.close()
    with pvmm.Event.create() as ev, pvmm.Stream.create() as other:
        ev.record(stream)
        other.wait(ev)
        ev.synchronize()
        assert ev.query() is True and "Event" in repr(ev)
    with pytest.raises(pvmm.AlreadyReleasedError):
        ev.record(stream)


def test_pool_allocation_outlives_its_stream():
    pool = pvmm.MemoryPool.create()
    s = pvmm.Stream.create()
    a = pool.allocate(MIB, s)
    s.close()  # Python may destroy the stream first: the allocation's destructor frees on the pool's own stream
    a.close()
    del a
    assert pool.usage()["used_current"] == 0


def test_pool_release_threshold_reads_back_and_gives_back_at_a_synchronize():
    pool = pvmm.MemoryPool.create()
    assert pool.release_threshold == 2**64 - 1  # pvmm's default keeps everything
    s = pvmm.Stream.create()
    pool.free_async(pool.allocate_async(4 * MIB, s), s)
    s.synchronize()
    assert pool.usage()["reserved_current"] >= 4 * MIB
    pool.release_threshold = 0
    assert pool.release_threshold == 0
    pool.free_async(pool.allocate_async(4096, s), s)
    s.synchronize()
    assert pool.usage()["reserved_current"] == 0
    assert pvmm.MemoryPool.default().release_threshold >= 0  # the driver's, readable


def test_pinned_pool_reuses_a_block_once_its_copy_has_completed():
    s = pvmm.Stream.create()
    target = pvmm.MemoryPool.create().allocate(MIB, s)
    with pvmm.PinnedPool.create() as pool:
        assert pool.source in ("driver_pool", "pinned_allocations")
        p = pool.allocate(MIB)
        ctypes_buffer = (ctypes.c_ubyte * MIB).from_address(p)
        ctypes_buffer[0], ctypes_buffer[MIB - 1] = 7, 9  # the host writes at once
        s.copy(target.address, p, MIB)
        pool.deallocate(p, s)
        s.synchronize()
        assert pool.allocate(MIB) == p  # its copy has completed: reused
        back = bytearray(2)
        s.copy(ctypes.addressof((ctypes.c_ubyte * 1).from_buffer(back)), target.address, 1)
        s.copy(ctypes.addressof((ctypes.c_ubyte * 1).from_buffer(back, 1)), target.address + MIB - 1, 1)
        s.synchronize()
        assert back == bytearray([7, 9])
        pool.deallocate(p, s)
        s.synchronize()
        stats = pool.stats()
        assert stats["cache_hits"] == 1 and stats["new_blocks"] == 1 and stats["live_blocks"] == 0
        pool.trim()
        assert pool.stats()["reserved"] == 0
        with pytest.raises(pvmm.InvalidArgumentError):
            pool.deallocate(p + 4096, s)
    assert pool.closed
    target.close()


@pytest.mark.skipif(pvmm.BACKEND != "host", reason="reads memory through NumPy (host backend)")
def test_physical_allocation_exported_and_mapped_twice():
    import os

    size = pvmm.granularity()[0]
    phys = pvmm.PhysicalAllocation.create(size, exportable=True)
    first = pvmm.Reservation.reserve(size)
    first.map(0, phys)
    fd = phys.export_fd()
    try:
        theirs = pvmm.PhysicalAllocation.import_fd(fd, size)
    finally:
        os.close(fd)
    second = pvmm.Reservation.reserve(size)
    second.map(0, theirs)
    assert first.mapping_count == 1 and first.address != second.address
    np.from_dlpack(first.view("uint64"))[:8] = 0xC0FFEE
    assert (np.from_dlpack(second.view("uint64"))[:8] == 0xC0FFEE).all()  # the same memory, another address
    second.unmap(0, size)
    with pytest.raises(pvmm.NotMappedError) as e:
        second.unmap(0, size)
    assert e.value.operation == "pvmm::address_reservation::unmap"
    with pytest.raises(pvmm.HandleTypeNotRequestedError):
        pvmm.PhysicalAllocation.create(size).export_fd()
