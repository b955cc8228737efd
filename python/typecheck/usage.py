"""Type-checked by mypy --strict in CI (tools/python-test.sh) against the generated stub: the calls the README shows."""

import pvmm


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
