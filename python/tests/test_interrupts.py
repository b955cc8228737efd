"""Issue 47, items 8 and 9: blocking calls see Ctrl-C within 100 ms, a Python callback's exception propagates as
itself, a team aborts cleanly (its peers get peer_lost naming the rank), and a minimal store costs no store timeout
per collective. Signals are sent in a child interpreter (the `child` fixture): pytest's own process never gets one."""

import threading
import time

import pytest

import pvmm
from ranks import MinimalStore, SharedStore

pytestmark = pytest.mark.skipif(pvmm.BACKEND != "host", reason="thread ranks share one device (host backend)")

PRELUDE = """
import os, signal, threading, time
import pvmm

def interrupt_after(seconds):
    threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT)).start()

class DictStore:
    def __init__(self):
        self.values = {}
    def set(self, key, value):
        self.values[key] = value
    def check(self, keys):
        return all(k in self.values for k in keys)
    def get(self, key):
        return self.values[key]
"""


def test_8_ctrl_c_during_listener_accept_arrives_within_100_ms(child):
    out = child(PRELUDE + """
with pvmm.Listener.listen(f"pvmm-sigint-{os.getpid()}") as listener:
    interrupt_after(0.3)
    start = time.monotonic()
    try:
        listener.accept(timeout_ms=10000)
        print("accepted")
    except KeyboardInterrupt:
        print("interrupted", round(time.monotonic() - start, 1) < 1.0)
""")
    assert out.split("\n")[0] == "interrupted True", out


def test_8_ctrl_c_during_team_creation_waiting_for_a_missing_rank(child):
    out = child(PRELUDE + """
interrupt_after(0.3)
start = time.monotonic()
try:
    pvmm.Team.over_store(DictStore(), 0, 2, prefix="lonely", timeout_ms=4000)
    print("made")
except KeyboardInterrupt:
    print("interrupted", round(time.monotonic() - start, 1) < 1.5)
except pvmm.PvmmError as e:
    print("pvmm", e.code, round(time.monotonic() - start, 1))
""")
    assert out.split("\n")[0] == "interrupted True", out


def test_8_keyboard_interrupt_in_a_store_callback_propagates_at_once(child):
    out = child(PRELUDE + """
class Interrupted:  # a minimal store: set and a get (that raises)
    def set(self, key, value):
        pass
    def get(self, key):
        raise KeyboardInterrupt("from the store")
start = time.monotonic()
try:
    pvmm.Team.over_store(Interrupted(), 0, 1, timeout_ms=3000)
    print("made")
except KeyboardInterrupt as e:
    print("KeyboardInterrupt", e.args, time.monotonic() - start < 1.0)
except pvmm.PvmmError as e:
    print("pvmm", e.code)
""")
    assert out.split("\n")[0] == "KeyboardInterrupt ('from the store',) True", out


def test_8_an_allgather_exception_propagates_as_itself():
    class Boom(ValueError):
        pass

    def allgather(data):
        raise Boom("boom")

    with pytest.raises(Boom) as e:
        pvmm.Team.over_allgather(allgather, 0, 1, timeout_ms=3000)
    assert str(e.value) == "boom" and e.value.__traceback__ is not None


def test_8_a_rank_whose_store_callback_raises_aborts_and_its_peer_gets_peer_lost_naming_it():
    class FailingAfterFirst:
        """Rank 0's view: its get raises KeyboardInterrupt once team creation is past the first collective."""

        def __init__(self, shared):
            self.shared = shared

        def set(self, key, value):
            self.shared.set(key, value)

        def check(self, keys):
            return self.shared.check(keys)

        def get(self, key):
            if key.startswith("abort-test/1/"):
                raise KeyboardInterrupt("rank 0 interrupted")
            return self.shared.get(key)

    shared = SharedStore()
    results = {}

    def run(rank):
        store = FailingAfterFirst(shared) if rank == 0 else shared
        try:
            pvmm.Team.over_store(store, rank, 2, prefix="abort-test", timeout_ms=5000)
            results[rank] = "made"
        except BaseException as e:  # KeyboardInterrupt on rank 0 is the case's point
            results[rank] = (type(e).__name__, str(e))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results[0] == ("KeyboardInterrupt", "rank 0 interrupted"), results
    assert results[1][0] == "PeerLostError" and "rank 0" in results[1][1], results
    assert time.monotonic() - start < 4, "the peer saw the abort, not its timeout"


def test_9_a_minimal_store_costs_no_store_timeout_per_collective():
    store, errors = MinimalStore(), []

    def run(rank):
        try:
            with pvmm.Team.over_store(store, rank, 2, prefix="minimal", timeout_ms=20000) as team:
                with pvmm.Window.create(team, 1 << 16):
                    team.barrier()
        except Exception as e:
            errors.append(repr(e))

    start = time.monotonic()
    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    elapsed = time.monotonic() - start
    assert not errors, errors
    assert elapsed < 1.0, f"team + window + barrier took {elapsed:.1f} s over a minimal store"
