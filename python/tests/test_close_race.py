"""Closing an object while other threads are inside it (issue 47, the holder): each call finishes on the object or
raises AlreadyReleasedError, never reads freed state. Runs in a child interpreter (a crash fails only this case)."""

import pvmm

CHILD = """
import threading
import pvmm

MIB = 1 << 20
errors, calls = [], [0]

def hammer(call, stop):
    while not stop.is_set():
        try:
            call()
            calls[0] += 1
        except pvmm.AlreadyReleasedError:
            return
        except pvmm.BusyError:  # another thread's resize in flight
            pass
        except BaseException as e:
            errors.append(repr(e))
            return

def race(make, calls_of, rounds=20):
    for _ in range(rounds):
        obj = make()
        stop = threading.Event()
        threads = [threading.Thread(target=hammer, args=(c, stop)) for c in calls_of(obj)]
        for t in threads:
            t.start()
        obj.close()
        stop.set()
        for t in threads:
            t.join(30)
        assert obj.closed

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
print("errors", errors)
print("calls", calls[0] > 0)
"""


def test_close_while_other_threads_call_in(child):
    out = child(CHILD, timeout=120)
    assert out.split("\n")[:2] == ["errors []", "calls True"], out
