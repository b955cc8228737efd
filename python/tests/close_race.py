"""Closing an object while other threads are inside it (issue 47): what the close-race cases share. RACE is child
code (the cases run it in a child interpreter: a crash fails only that case) defining race(make, calls_of): each of
calls_of(obj) runs in a loop on a thread of its own while obj is closed under them, and each call must finish on the
object or raise AlreadyReleasedError (BusyError counts as finishing: another thread's resize in flight); anything
else lands in `errors`. The child's code ends with report(); the parent passes its output to check_report."""

RACE = """
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

def report():
    print("errors", errors)
    print("calls", calls[0] > 0)
"""


def check_report(out):
    """No call raised anything but AlreadyReleasedError (or BusyError), and some calls went through."""
    assert out.split("\n")[:2] == ["errors []", "calls True"], out
