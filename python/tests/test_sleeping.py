"""The sleeping allocator (pvmm::sleeping_allocator): addresses unchanged, contents restored per tag policy, memory
given back asleep, tags nested, the host copy readable, generations and callbacks, exact errors (issue 47 items 6,
10; issue 49)."""

import numpy as np
import pytest

import pvmm
from pvmm import allocators

MIB = 1 << 20
host_only = pytest.mark.skipif(pvmm.BACKEND != "host", reason="reads memory through NumPy (host backend)")


def fill(s, p, seed):
    a = np.from_dlpack(s.view(p, "int32"))
    a[:] = np.arange(seed, seed + a.size, dtype=np.int32)
    del a


def holds(s, p, seed):
    a = np.from_dlpack(s.view(p, "int32"))
    ok = a.ctypes.data == p and bool((a == np.arange(seed, seed + a.size, dtype=np.int32)).all())
    del a
    return ok


@host_only
@pytest.mark.parametrize("policy", ["pinned", "pageable", "file", "discard"])
def test_each_policy_gives_memory_back_and_restores_it_at_the_same_addresses(policy):
    with pvmm.SleepingAllocator(staging_slot_bytes=64 << 10, staging_slots=3) as s:
        s.set_policy("weights", policy)
        assert s.policy("weights")["policy"] == policy
        weights = [s.allocate(3 * MIB, "weights") for _ in range(2)]
        cache = s.allocate(MIB, "kv_cache")
        for i, p in enumerate(weights):
            fill(s, p, i)
        before = s.statistics()
        assert before["resident_bytes"] == before["reserved_bytes"] >= 7 * MIB
        s.sleep(["weights"])
        st = s.statistics("weights")
        assert st["resident_bytes"] == 0 and st["asleep"] == 2
        assert st["offloaded_bytes"] == (0 if policy == "discard" else st["reserved_bytes"])
        for p in weights:  # memory given back, address kept
            assert pvmm.query_pointer(p)["mapped"] is False
        assert pvmm.query_pointer(cache)["mapped"] is True  # another tag stays awake
        s.wake(["weights"])
        after = s.statistics()
        assert after["resident_bytes"] == before["resident_bytes"] and after["offloaded_bytes"] == 0
        for i, p in enumerate(weights):
            assert pvmm.query_pointer(p)["mapped"] is True
            if policy != "discard":
                assert holds(s, p, i)
        for p in weights + [cache]:
            s.free(p)
        assert s.statistics()["allocations"] == 0


@host_only
def test_the_host_copy_of_a_sleeping_tag_reads_back_and_tag_of_answers_inside():
    with pvmm.SleepingAllocator() as s:
        p = s.allocate(2 * MIB, "weights")
        fill(s, p, 7)
        assert s.tag_of(p) == "weights" and s.tag_of(p + 2 * MIB - 1) == "weights"
        assert s.tag_of(12345) is None
        with pytest.raises(pvmm.InvalidArgumentError):
            s.read_host_copy(p, 16)  # awake: no host copy
        s.sleep()
        got = np.frombuffer(s.read_host_copy(p + 4096, 64, offset=8), dtype=np.int32)
        assert (got == np.arange(7 + 1026, 7 + 1026 + 16, dtype=np.int32)).all()
        with pytest.raises(pvmm.OutOfRangeError):
            s.read_host_copy(p, 2 * MIB + 1)
        s.wake()
        s.free(p)


def test_nested_tags_restore_the_outer_tag():
    """Issue 47 item 10: after an inner tag block ends, allocations in the outer block carry the outer tag."""
    with pvmm.SleepingAllocator() as s:
        with allocators.tag(s, "weights"):
            a = s.allocate(MIB)
            with allocators.tag(s, "kv_cache"):
                b = s.allocate(MIB)
            c = s.allocate(MIB)  # "default" before the fix: thrown away by a discarding sleep
        d = s.allocate(MIB)
        assert [s.tag_of(x) for x in (a, b, c, d)] == ["weights", "kv_cache", "weights", "default"]
        assert s.current_tag == "default"
        for x in (a, b, c, d):
            s.free(x)


def test_allocate_of_a_size_whose_round_up_overflows_is_out_of_memory():
    """Issue 47 item 6: 2**64 - 1 rounded up to the granularity wrapped to 0 ("size is zero")."""
    with pvmm.SleepingAllocator() as s:
        for size in (2**64 - 1, 2**64 - s.granularity + 1):
            with pytest.raises(pvmm.OutOfMemoryError):
                s.allocate(size, "t")
        with pytest.raises(pvmm.InvalidSizeError):
            s.allocate(0)


def test_generations_change_with_the_backing_and_callbacks_see_the_old_one():
    with pvmm.SleepingAllocator() as s:
        seen = []

        def on_change(change):
            seen.append((change["reason"], change["old_generation"], change["new_generation"], change["tag"],
                         s.generation(change["address"]) if change["reason"] != "free" else None))

        cb = s.add_backing_callback(on_change)
        p = s.allocate(MIB, "w")
        g0 = s.generation(p)
        s.sleep()
        g1 = s.generation(p)
        s.wake()
        g2 = s.generation(p)
        s.free(p)
        assert len({g0, g1, g2}) == 3
        assert seen == [("sleep", g0, g1, "w", g1), ("wake", g1, g2, "w", g2), ("free", g2, 0, "w", None)]
        s.remove_backing_callback(cb)
        s.free(s.allocate(MIB))
        assert len(seen) == 3


def test_prepare_host_memory_page_locks_ahead_what_the_next_sleep_takes():
    with pvmm.SleepingAllocator(staging_slot_bytes=64 << 10, staging_slots=3) as s:
        s.set_policy("paged", "pageable")
        w = s.allocate(3 * MIB, "weights")
        p = s.allocate(MIB, "paged")
        s.prepare_host_memory(["weights"])
        kept = s.statistics()["kept_host_bytes"]
        assert kept >= 3 * MIB
        s.prepare_host_memory()  # "weights" is covered, "paged" is not pinned: nothing more
        assert s.statistics()["kept_host_bytes"] == kept
        s.sleep()
        assert s.statistics()["kept_host_bytes"] == 0  # the sleep took it
        s.wake()
        s.prepare_host_memory()
        s.trim_host_memory()
        assert s.statistics()["kept_host_bytes"] == 0
        s.free(w)
        s.free(p)
    with pytest.raises(pvmm.AlreadyReleasedError):
        s.prepare_host_memory()


def test_prepare_host_memory_refuses_what_is_not_a_list_of_tags():
    with pvmm.SleepingAllocator() as s:
        with pytest.raises(TypeError):
            s.prepare_host_memory("weights")  # type: ignore[arg-type]  # a tag, not a list of tags
        with pytest.raises(TypeError):
            s.prepare_host_memory([1])  # type: ignore[list-item]
        assert s.statistics()["kept_host_bytes"] == 0


def test_sleeping_allocator_errors():
    s = pvmm.SleepingAllocator()
    with pytest.raises(pvmm.InvalidArgumentError):
        s.free(4096)
    with pytest.raises(pvmm.InvalidArgumentError):
        s.set_policy("t", "nowhere")
    with pytest.raises(pvmm.InvalidArgumentError):
        pvmm.SleepingAllocator(copy_streams=0)
    s.close()
    s.close()
    assert s.closed
    with pytest.raises(pvmm.AlreadyReleasedError):
        s.allocate(MIB)
    with pytest.raises(pvmm.AlreadyReleasedError):
        s.tag_of(4096)


@pytest.mark.skipif(pvmm.BACKEND != "cuda", reason="a CUDA graph (cuda backend, torch)")
def test_a_captured_cuda_graph_replays_bit_exact_after_each_wake():
    """Issue 49: every address and every CUDA graph that uses them stays valid across sleep/wake cycles."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    sleeper = pvmm.SleepingAllocator()
    pool = allocators.torch_mem_pool(sleeper)
    with torch.cuda.use_mem_pool(pool), allocators.tag(sleeper, "weights"):
        x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
        y = torch.empty_like(x)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y.copy_(x * 2 + 1)  # warm-up outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        y.copy_(x * 2 + 1)
    expected = torch.arange(1 << 20, dtype=torch.float32, device="cuda") * 2 + 1
    for cycle in range(20):
        y.zero_()
        torch.cuda.synchronize()
        sleeper.sleep(["weights"])
        sleeper.wake(["weights"])
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, expected), cycle
    del graph, x, y, expected
    torch.cuda.synchronize()
