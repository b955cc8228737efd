"""What the team tests share: a store for ranks that are threads of this process, and running such ranks."""

import threading


class SharedStore:
    """A store for a team of threads in one process; get does not wait (the team's check polls first)."""

    def __init__(self):
        self.values, self.lock = {}, threading.Lock()

    def set(self, key, value):
        with self.lock:
            self.values[key] = value

    def check(self, keys):
        with self.lock:
            return all(k in self.values for k in keys)

    def get(self, key):
        with self.lock:
            return self.values[key]


def run_ranks_as_threads(run, size, timeout=60):
    """Runs run(rank) for every rank, each in a thread, and waits for them (bounded)."""
    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a rank did not finish in time"
