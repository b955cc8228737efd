"""The sleeping allocator: addresses unchanged, contents restored when offloaded, memory given back asleep."""

import numpy as np
import pytest

import pvmm

MIB = 1 << 20
host_only = pytest.mark.skipif(pvmm.BACKEND != "host", reason="reads memory through NumPy (host backend)")


@host_only
def test_sleep_offload_wake_restores_contents_at_the_same_addresses():
    with pvmm.SleepingAllocator() as s:
        weights = [s.allocate(3 * MIB, "weights") for _ in range(2)]
        cache = s.allocate(MIB, "kv_cache")
        for i, p in enumerate(weights):
            a = np.from_dlpack(s.view(p, "int32"))
            a[:] = np.arange(i, i + a.size, dtype=np.int32)
        before = s.statistics()
        assert before["resident_bytes"] == before["reserved_bytes"] >= 7 * MIB

        s.sleep(["weights"], offload=True)
        st = s.statistics("weights")
        assert st["resident_bytes"] == 0 and st["asleep"] == 2 and st["offloaded_bytes"] == st["reserved_bytes"]
        for p in weights:  # memory given back, address kept
            assert pvmm.query_pointer(p)["mapped"] is False
        assert pvmm.query_pointer(cache)["mapped"] is True  # another tag stays awake
        s.sleep(["kv_cache"], offload=False)
        assert s.statistics()["resident_bytes"] == 0

        s.wake()
        after = s.statistics()
        assert after["resident_bytes"] == before["resident_bytes"] and after["offloaded_bytes"] == 0
        for i, p in enumerate(weights):
            assert pvmm.query_pointer(p)["mapped"] is True
            a = np.from_dlpack(s.view(p, "int32"))
            assert a.ctypes.data == p
            assert (a == np.arange(i, i + a.size, dtype=np.int32)).all()
        for p in weights + [cache]:
            s.free(p)
        assert s.statistics()["allocations"] == 0


def test_sleeping_allocator_errors():
    s = pvmm.SleepingAllocator()
    with pytest.raises(pvmm.InvalidSizeError):
        s.allocate(0)
    with pytest.raises(pvmm.InvalidArgumentError):
        s.free(4096)
    s.close()
    s.close()
    with pytest.raises(pvmm.AlreadyReleasedError):
        s.allocate(MIB)
