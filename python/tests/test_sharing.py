"""Two processes share a buffer and a pool: the exported objects pickle through multiprocessing (fds by DupFd)."""

import multiprocessing as mp

import numpy as np
import pytest

import pvmm

MIB = 1 << 20
pytestmark = pytest.mark.skipif(pvmm.BACKEND != "host", reason="reads memory through NumPy (host backend)")


def child_buffer(exported, q):
    with exported.open() as mapped:  # two lines: the parent's buffer, mapped here
        a = np.from_dlpack(mapped.view("uint32"))
        q.put(int(a[:1000].sum()))
        a[:] = 7  # written here, read back by the parent


def test_two_processes_share_a_growable_buffer():
    g = pvmm.GrowableBuffer.create(chunk_size=2 * MIB, reserve_size=8 * MIB, exportable=True)
    g.resize(4 * MIB)
    a = np.from_dlpack(g.view("uint32"))
    a[:] = np.arange(a.size, dtype=np.uint32)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with pvmm.export_buffer(g) as exported:
        p = ctx.Process(target=child_buffer, args=(exported, q))
        p.start()
        assert q.get(timeout=30) == sum(range(1000))
        p.join(30)
    assert p.exitcode == 0
    assert (a == 7).all()


def child_pool(exported, record, q):
    with exported.open() as pool, pvmm.Stream.create() as s:
        with pool.import_pointer(record, s) as alloc:
            q.put(bytes(np.from_dlpack(alloc)[:8]))


def test_two_processes_share_a_pool():
    with pvmm.MemoryPool.create(exportable=True) as pool, pvmm.Stream.create() as s:
        exported = pvmm.export_pool(pool)
        a = pool.allocate(MIB, s)
        np.from_dlpack(a)[:8] = np.frombuffer(b"pvmmpool", dtype=np.uint8)
        s.synchronize()
        record = pool.export_pointer(a.address)
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=child_pool, args=(exported, record, q))
        p.start()
        assert q.get(timeout=30) == b"pvmmpool"
        p.join(30)
        assert p.exitcode == 0
        exported.close()
        a.free(s)


def test_pool_import_refuses_a_bad_id():
    with pvmm.MemoryPool.create(exportable=True) as pool:
        with pvmm.export_pool(pool) as exported:
            with pytest.raises(pvmm.InvalidArgumentError) as e:
                pvmm.MemoryPool.import_fd(exported.fd, b"short")
            assert "16 bytes" in e.value.detail


def child_over_endpoint(name, q):
    """A process multiprocessing only started: the buffer comes over pvmm's own endpoint, not a pickle."""
    with pvmm.connect(name, timeout_ms=10000) as conn:
        with pvmm.sharing.receive_buffer(conn) as exported, exported.open() as mapped:
            a = np.from_dlpack(mapped.view("uint32"))
            q.put(int(a[5]))
            a[:] = 9
        conn.send([], b"done")


def test_buffer_over_pvmm_endpoints_and_transport_errors():
    name = f"pvmm-pytest-share-{id(object())}"
    g = pvmm.GrowableBuffer.create(chunk_size=2 * MIB, reserve_size=4 * MIB, exportable=True)
    g.resize(2 * MIB)
    a = np.from_dlpack(g.view("uint32"))
    a[:] = 5
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with pvmm.Listener.listen(name) as listener:
        assert listener.name == name and repr(listener) == f"<pvmm.Listener name={name}>"
        with pytest.raises(pvmm.AddressUnavailableError):
            pvmm.Listener.listen(name)  # the name is taken
        p = ctx.Process(target=child_over_endpoint, args=(name, q))
        p.start()
        with listener.accept(timeout_ms=30000) as conn, pvmm.export_buffer(g) as exported:
            assert conn.peer()["pid"] == p.pid
            pvmm.sharing.send(conn, exported)
            assert q.get(timeout=30) == 5
            assert conn.receive(timeout_ms=30000) == ([], b"done")
        p.join(30)
    assert p.exitcode == 0 and (a == 9).all()
    assert listener.closed
    with pytest.raises(pvmm.TimeoutError):
        pvmm.connect(name, timeout_ms=100)  # nobody listens any more
    with pvmm.Listener.listen(name) as listener:  # free again
        with pvmm.connect(name) as client, listener.accept() as server:
            client.send([], b"Xnot an export")
            with pytest.raises(pvmm.ProtocolError):
                pvmm.sharing.receive_buffer(server)  # the wrong kind is refused
            with pytest.raises(pvmm.TimeoutError):
                server.receive(timeout_ms=50)
            client.close()
            with pytest.raises(pvmm.PeerLostError):
                server.receive(timeout_ms=5000)
