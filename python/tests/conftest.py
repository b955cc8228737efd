import subprocess
import sys
import textwrap

import pytest

import pvmm


@pytest.fixture
def stream():
    with pvmm.Stream.create(0) as s:
        yield s


def run_child(code, timeout=60):
    """Runs `code` in a child interpreter (a crash fails only the case that ran it) and returns its stdout; the
    child must exit 0."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"the child exited with {r.returncode}:\n{r.stdout}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.fixture
def child():
    return run_child
