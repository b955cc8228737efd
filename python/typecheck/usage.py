"""Type-checked by mypy --strict in CI (tools/python-test.sh) against the generated stub: the calls the README shows,
and the plug-ins' entry points (python/pvmm's own modules and python/bench are checked alongside)."""

from typing import Any

import pvmm
from pvmm import allocators, mpi


def tour() -> int:
    with pvmm.GrowableBuffer.create(chunk_size=2 << 20, reserve_size=64 << 20) as buffer:
        outcome = buffer.resize(4 << 20)
        assert isinstance(outcome, dict)
        view = buffer.view("float32", [16])
        assert view is not None
        size: int = buffer.size
    with pvmm.Stream.create(0) as stream, pvmm.MemoryPool.create() as pool:
        a = pool.allocate(1 << 20, stream)
        a.free(stream)
    sleeping = pvmm.SleepingAllocator()
    p: int = sleeping.allocate(1 << 20, "weights")
    sleeping.sleep(["weights"], offload=True)
    sleeping.wake(["weights"])
    sleeping.free(p)
    sleeping.close()
    try:
        pvmm.PinnedAllocation.create(0)
    except pvmm.InvalidSizeError as e:
        print(e)
    return size


def plug_ins(comm: Any) -> None:
    with pvmm.GrowableArena(reserve_size=1 << 30, chunk_size=32 << 20) as arena:
        address: int = arena.allocate(4096)
        mapped: int = arena.statistics()["mapped_bytes"]
        arena.free(address)
        print(mapped, arena.address, allocators.library_path())
        mem_pool: Any = allocators.torch_mem_pool(arena)
        print(mem_pool)
    sleeper = pvmm.SleepingAllocator()
    with allocators.tag(sleeper, "weights"):
        pass
    team: pvmm.Team = mpi.team_over_mpi(comm)
    team.close()


def transport(name: str) -> bytes:
    with pvmm.Listener.listen(name) as listener, pvmm.connect(name, timeout_ms=1000) as client:
        with listener.accept(timeout_ms=1000) as server:
            buffer = pvmm.GrowableBuffer.create(exportable=True)
            pvmm.sharing.send(client, pvmm.export_buffer(buffer))
            exported: pvmm.ExportedBuffer = pvmm.sharing.receive_buffer(server)
            exported.close()
            fds, payload = server.receive(max_fds=4, timeout_ms=10)
            pid: int = server.peer()["pid"]
            print(fds, pid)
            return payload


def issue_47(team: pvmm.Team) -> None:
    """The calls issue 47 added: the timeout rule, memory queries, pool upkeep, host registration, copies, the
    buffer protocol, the symmetric heap and team.split."""
    free, total = pvmm.query_memory(0)
    assert pvmm.WAIT_FOREVER == -1 and free <= total
    with pvmm.MemoryPool.create() as pool:
        pool.trim()
        pool.reset_peak()
        live: int = pool.usage()["allocations"]
        print(live)
    data = bytearray(4096)
    with pvmm.HostRegistration.create(data) as registration, pvmm.PinnedAllocation.create(4096) as pinned:
        pinned.copy_from(registration)
        pinned.copy_to(data, None, 0)
        print(data[:4], pinned.closed)
    with team.split(0, key=team.rank, timeout_ms=pvmm.WAIT_FOREVER) as sub:
        heap = pvmm.SymmetricHeap.create(sub, 1 << 16)
        offset: int = heap.allocate(256)
        heap.free(offset)
        heap.close()
    try:
        pvmm.GrowableBuffer.create().resize(1 << 20)
    except BufferError as e:  # BusyError while a view lives
        print(e)
