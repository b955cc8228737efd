"""A team of 4 processes over a store (any object with set/get): each writes its window slot, reads every peer's."""

import multiprocessing as mp
import os
import time

import numpy as np
import pytest

import pvmm
from ranks import run_ranks_as_threads

pytestmark = pytest.mark.skipif(pvmm.BACKEND != "host", reason="reads window memory through NumPy (host backend)")
RANKS = 4


class FileStore:
    """A minimal store as torch.distributed.Store: set writes a file atomically, check says whether keys exist,
    get waits (bounded) until the key exists."""

    def __init__(self, path, timeout=30.0):
        self.path, self.timeout = path, timeout

    def set(self, key, value):
        name = os.path.join(self.path, key.replace("/", "_"))
        with open(name + ".tmp", "wb") as f:
            f.write(value)
        os.rename(name + ".tmp", name)

    def check(self, keys):
        return all(os.path.exists(os.path.join(self.path, k.replace("/", "_"))) for k in keys)

    def get(self, key):
        name = os.path.join(self.path, key.replace("/", "_"))
        until = time.monotonic() + self.timeout
        while not os.path.exists(name):
            if time.monotonic() > until:
                raise TimeoutError(f"key {key} did not arrive")
            time.sleep(0.002)
        with open(name, "rb") as f:
            return f.read()


def rank_main(rank, path, q):
    try:
        with pvmm.Team.over_store(FileStore(path), rank, RANKS, prefix="t", timeout_ms=30000) as team:
            with pvmm.Window.create(team, 1 << 20) as window:
                mine = np.from_dlpack(window.get_buffer(rank, "int64", (1024,)))
                mine[:] = rank * 1000 + np.arange(1024)
                team.barrier()
                seen = [int(np.from_dlpack(window.get_buffer(r, "int64", (1024,)))[7]) for r in range(RANKS)]
                team.barrier()  # nobody unmaps before everyone has read
                q.put((rank, seen, repr(team)))
    except Exception as e:  # report, so the parent's assertion names it
        q.put((rank, repr(e), ""))


def test_team_of_four_processes_over_a_store(tmp_path):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, str(tmp_path), q)) for r in range(RANKS)]
    for p in procs:
        p.start()
    results = sorted(q.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
    for rank, seen, text in results:
        assert seen == [r * 1000 + 7 for r in range(RANKS)], (rank, seen)
        assert text == f"<pvmm.Team rank={rank} size={RANKS}>"
    assert [p.exitcode for p in procs] == [0] * RANKS


def test_team_errors():
    class Broken:
        def set(self, key, value):
            raise OSError("store is down")

        def get(self, key):
            raise OSError("store is down")

    with pytest.raises(OSError, match="^store is down$"):  # a callback's exception propagates as itself
        pvmm.Team.over_store(Broken(), 0, 2, timeout_ms=2000)


def test_team_of_threads_over_a_python_allgather():
    """Team.over_allgather (what pvmm.mpi.team_over_mpi uses with comm.allgather): ranks are threads here, their
    allgather a Barrier; the GIL is released while pvmm waits and taken back for each callback."""
    import threading

    size = 3
    barrier = threading.Barrier(size, timeout=30)
    slots: dict = {}
    results: dict = {}

    def allgather_for(rank):
        def allgather(data):
            slots[rank] = data
            barrier.wait()
            out = [slots[r] for r in range(size)]
            barrier.wait()
            return out

        return allgather

    def run(rank):
        try:
            with pvmm.Team.over_allgather(allgather_for(rank), rank, size) as team:
                with pvmm.Window.create(team, 1 << 16) as window:
                    np.from_dlpack(window.get_buffer(rank, "int32"))[:] = rank + 10
                    team.barrier()
                    results[rank] = [int(np.from_dlpack(window.get_buffer(r, "int32"))[5]) for r in range(size)]
                    team.barrier()
        except Exception as e:
            results[rank] = repr(e)

    run_ranks_as_threads(run, size, 60)
    assert results == {r: [10, 11, 12] for r in range(size)}

    with pytest.raises(pvmm.ProtocolError):  # a peer's bytes are not trusted: a wrong count is refused
        pvmm.Team.over_allgather(lambda data: [data], 0, 2, timeout_ms=2000)
    with pytest.raises(pvmm.InvalidArgumentError):
        pvmm.Team.over_allgather(lambda data: [data], 2, 2)
    with pvmm.Team.over_allgather(lambda data: [data], 0, 1) as team:  # the signal path is checked before any exchange
        with pytest.raises(pvmm.InvalidArgumentError, match="neither 'kernel' nor 'driver'"):
            pvmm.Window.create(team, 1 << 16, signal_channels=1, stream_signals="spin")


def test_team_over_pvmm_endpoints():
    """Team.over_endpoints: ranks meet at a named endpoint (threads of this process here)."""
    import threading

    name = f"pvmm-pytest-{os.getpid()}"
    results: dict = {}

    def run(rank):
        try:
            with pvmm.Team.over_endpoints(name, rank, 2, timeout_ms=10000) as team:
                with pvmm.Window.create(team, 1 << 16) as window:
                    np.from_dlpack(window.get_buffer(rank, "int32"))[:] = rank + 1
                    team.barrier()
                    results[rank] = [int(np.from_dlpack(window.get_buffer(r, "int32"))[0]) for r in range(2)]
                    team.barrier()
        except Exception as e:
            results[rank] = repr(e)

    run_ranks_as_threads(run, 2, 30)
    assert results == {0: [1, 2], 1: [1, 2]}


def signal_rank_main(rank, path, q, stream_signals):
    try:
        with pvmm.Team.over_store(FileStore(path), rank, 2, prefix="s", timeout_ms=30000) as team:
            with pvmm.Window.create(
                team, 1 << 16, signal_channels=1, stream_signals=stream_signals
            ) as window, pvmm.Stream.create(0) as stream:
                assert window.device_pointer_table() != 0
                mine = np.from_dlpack(window.get_buffer(rank, "int64", (16,)))
                mine[:] = rank + 100
                window.barrier(0, stream, 10000)  # stream-ordered: every slot written before anyone reads
                stream.synchronize()
                seen = [int(np.from_dlpack(window.get_buffer(r, "int64", (16,)))[3]) for r in range(2)]
                window.barrier(0, stream, 10000)  # nobody unmaps before everyone has read
                stream.synchronize()
                window.signal_status()
                if rank == 1:  # rank 0 never signals this channel again: a bounded wait, reported as a timeout
                    window.wait_signal(0, 0, stream, 200)
                    stream.synchronize()
                    with pytest.raises(pvmm.TimeoutError) as e:
                        window.signal_status()
                    assert "for rank 0 on channel 0" in str(e.value)
                with pytest.raises(pvmm.InvalidArgumentError):
                    window.put_signal(rank, 0, stream)  # itself
                team.barrier()
                q.put((rank, seen))
    except Exception as e:  # report, so the parent's assertion names it
        q.put((rank, repr(e)))


@pytest.mark.parametrize("stream_signals", ["kernel", "driver"])
def test_window_signals_between_two_processes(tmp_path, stream_signals):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=signal_rank_main, args=(r, str(tmp_path), q, stream_signals)) for r in range(2)]
    for p in procs:
        p.start()
    results = sorted(q.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
    assert results == [(0, [100, 101]), (1, [100, 101])]
    assert [p.exitcode for p in procs] == [0, 0]


class FakeMpi:
    """What pvmm.mpi uses of mpi4py, for ranks that are threads of this process (mpi4py is an optional import):
    COMM_TYPE_SHARED and MIN, and a communicator's Get_rank/Get_size/allgather/allreduce/Split_type/Free."""

    COMM_TYPE_SHARED = "shared"
    MIN = min

    class Comm:
        def __init__(self, rank, size, shared, freed):
            self.rank, self.size, self.shared, self.freed = rank, size, shared, freed

        def Get_rank(self):
            return self.rank

        def Get_size(self):
            return self.size

        def allgather(self, value):
            self.shared["slots"][self.rank] = value
            self.shared["barrier"].wait()
            out = [self.shared["slots"][r] for r in range(self.size)]
            self.shared["barrier"].wait()
            return out

        def allreduce(self, value, op):
            return op(self.allgather(value))

        def Split_type(self, kind):
            assert kind == FakeMpi.COMM_TYPE_SHARED
            return self  # one host: the shared-memory group is everyone

        def Free(self):
            self.freed.append(self.rank)


def test_team_over_an_mpi_communicator(monkeypatch):
    """pvmm.mpi.team_over_mpi: the team's exchanges go through comm.allgather (threads as ranks, mpi4py's
    interface faked: mpi4py is not a dependency; the real one is tested below where it is installed)."""
    import sys
    import threading
    import types

    from pvmm import mpi

    monkeypatch.setitem(sys.modules, "mpi4py", types.SimpleNamespace(MPI=FakeMpi))
    size, shared, freed, results = 3, {"slots": {}, "barrier": threading.Barrier(3, timeout=30)}, [], {}

    def run(rank):
        try:
            with mpi.team_over_mpi(FakeMpi.Comm(rank, size, shared, freed), timeout_ms=10000) as team:
                with pvmm.Window.create(team, 1 << 16) as window:
                    np.from_dlpack(window.get_buffer(rank, "int32"))[:] = rank + 20
                    team.barrier()
                    results[rank] = ([int(np.from_dlpack(window.get_buffer(r, "int32"))[9]) for r in range(size)],
                                     repr(team))
                    team.barrier()
        except Exception as e:
            results[rank] = repr(e)

    run_ranks_as_threads(run, size, 60)
    assert results == {r: ([20, 21, 22], f"<pvmm.Team rank={r} size={size}>") for r in range(size)}
    assert sorted(freed) == [0, 1, 2]  # the shared-memory communicator is freed


def test_team_over_mpi4py_comm_world():
    """The real mpi4py where installed: this process alone is COMM_WORLD (a singleton, no mpirun)."""
    try:
        from mpi4py import MPI
    except ImportError:
        print("[pvmm-skip] mpi4py not installed")
        pytest.skip("[pvmm-skip] mpi4py not installed")
    from pvmm import mpi

    comm = MPI.COMM_WORLD
    with mpi.team_over_mpi(comm) as team, pvmm.Window.create(team, 1 << 16) as window:
        mine = np.from_dlpack(window.get_buffer(comm.Get_rank(), "int64"))
        mine[:] = 42
        team.barrier()
        assert int(np.from_dlpack(window.get_buffer(comm.Get_rank(), "int64"))[3]) == 42
        assert repr(team) == f"<pvmm.Team rank={comm.Get_rank()} size={comm.Get_size()}>"
