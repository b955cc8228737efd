"""What the team tests share: stores for ranks that are threads of this process, and running such ranks."""

import threading


class MinimalStore:
    """Only set and a get that blocks until the key exists or its own timeout (1 s) passes: the least a store
    offers."""

    def __init__(self):
        self.values, self.changed = {}, threading.Condition()

    def set(self, key, value):
        with self.changed:
            self.values[key] = value
            self.changed.notify_all()

    def get(self, key):
        with self.changed:
            if not self.changed.wait_for(lambda: key in self.values, timeout=1.0):
                raise TimeoutError(f"key {key} did not arrive")
            return self.values[key]


class SharedStore(MinimalStore):
    """A store for a team of threads in one process, with check; get does not wait (the team's check polls
    first)."""

    def check(self, keys):
        with self.changed:
            return all(k in self.values for k in keys)

    def get(self, key):
        with self.changed:
            return self.values[key]


def run_ranks_as_threads(run, size, timeout=60):
    """Runs run(rank) for every rank, each in a thread, and waits for them (bounded)."""
    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a rank did not finish in time"
