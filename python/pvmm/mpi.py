"""Teams over an mpi4py communicator (mpi4py is an optional import)."""

from __future__ import annotations

from typing import Any

from . import _pvmm


def team_over_mpi(comm: Any, device: int = 0, timeout_ms: int = 30000) -> _pvmm.Team:
    """A pvmm team of the communicator's ranks: pvmm's exchanges go through ``comm.allgather``; nodes are the
    communicator's shared-memory groups, numbered by their lowest rank."""
    from mpi4py import MPI  # optional

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    lowest = local.allreduce(comm.Get_rank(), op=MPI.MIN)
    node = sorted(set(comm.allgather(lowest))).index(lowest)
    team = _pvmm.Team.over_allgather(
        lambda data: comm.allgather(data),
        comm.Get_rank(),
        comm.Get_size(),
        node,
        local.Get_rank(),
        local.Get_size(),
        device,
        timeout_ms,
    )
    local.Free()
    return team
