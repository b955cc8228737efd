"""Closing an object while other threads are inside it (issue 47, the holder): each call finishes on the object or
raises AlreadyReleasedError, never reads freed state. Runs in a child interpreter (a crash fails only this case)."""

from close_race import RACE, check_report

CHILD = RACE + """
s = pvmm.Stream.create()

def growable():
    g = pvmm.GrowableBuffer.create(chunk_size=2 * MIB, reserve_size=16 * MIB)
    g.resize(2 * MIB)
    return g

race(growable, lambda g: [lambda: g.resize(4 * MIB), lambda: g.resize(2 * MIB), lambda: g.view()])
race(lambda: pvmm.MemoryPool.create(),
     lambda p: [lambda: p.allocate(4096, s).free(), lambda: p.usage(), lambda: p.trim()])
race(lambda: pvmm.PinnedAllocation.create(MIB),
     lambda p: [lambda: p.copy_from(bytes(4096), s, 8192), lambda: bytes(memoryview(p)[:8])])
race(lambda: pvmm.Stream.create(), lambda st: [lambda: st.synchronize(), lambda: st.handle])
report()
"""


def test_close_while_other_threads_call_in(child):
    check_report(child(CHILD, timeout=120))
