"""A team over the real mpi4py (built by tools/python-test.sh against the system's Open MPI), 2 ranks under mpirun:
each rank writes its window slot and reads its peer's. (team.split needs a bootstrap with point-to-point messages:
over a Python allgather it is not_supported, with that hint; test_features splits a team over a store.)"""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import pvmm

RANK_SCRIPT = """
import numpy as np
from mpi4py import MPI
import pvmm
from pvmm import mpi

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
with mpi.team_over_mpi(comm, timeout_ms=30000) as team, pvmm.Window.create(team, 1 << 16) as window:
    np.from_dlpack(window.get_buffer(rank, "int64"))[:] = 100 + rank
    team.barrier()
    seen = [int(np.from_dlpack(window.get_buffer(r, "int64"))[5]) for r in range(size)]
    team.barrier()
    print(f"rank {rank} team {team.rank}/{team.size} saw {seen}", flush=True)
"""


def test_team_over_mpi4py_under_mpirun(tmp_path):
    mpirun = shutil.which("mpirun")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        mpirun = None
    if pvmm.BACKEND != "host" or mpirun is None:
        reason = "[pvmm-skip] needs mpirun and mpi4py (tools/python-test.sh installs it) on the host backend"
        print(reason)
        pytest.skip(reason)
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent(RANK_SCRIPT))
    cmd = [mpirun, "-n", "2", "--oversubscribe", "--allow-run-as-root", "--mca", "btl", "self,vader",
           sys.executable, str(script)]
    env = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    lines = sorted(re.findall(r"rank \d team \d/\d saw \[\d+, \d+\]", r.stdout))  # ranks' lines may interleave
    assert lines == [
        "rank 0 team 0/2 saw [100, 101]",
        "rank 1 team 1/2 saw [100, 101]",
    ], r.stdout + r.stderr[-3000:]
