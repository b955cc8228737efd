// pvmm/bootstrap_mpi.hpp - a bootstrap over an MPI communicator (library pvmm::mpi, built where MPI is found;
// find_package(pvmm COMPONENTS mpi) finds MPI for the consumer).
// This is how a team spans machines: on the job's existing launcher (mpirun, srun), not a home-made one.
// - the adapter works on a duplicate of the caller's communicator with MPI_ERRORS_RETURN set, so an MPI error is
//   a pvmm error, never the end of the job; errors in the duplication itself go to the caller's communicator's
//   handler (pvmm does not change it), which is why MPI_COMM_NULL, an intercommunicator and an MPI not (or no
//   longer) initialised are refused (errc::invalid_argument) before any MPI call that could raise one;
// - every wait, creation included, is a non-blocking MPI call (MPI_Comm_idup, MPI_Iallgather, MPI_Ibarrier,
//   MPI_Isend/Irecv) tested in short slices until the deadline, then errc::timeout. MPI cannot say which ranks
//   are missing: a collective reports nothing until every rank took part, so the error names the call, the
//   collective's number on this bootstrap and the rank count. Send and receive name their peer;
// - node(): ranks on the same machine (boot id and host name; the equivalent of MPI_COMM_TYPE_SHARED, found by
//   one allgather, since MPI_Comm_split_type has no deadline), or options.node to simulate nodes;
// - allgather's byte count is checked first (errc::team_mismatch naming the ranks that differ) so a mismatch is
//   an error, not MPI's undefined truncation; receive's count likewise;
// - abort() breaks this rank's bootstrap only (its call in progress returns errc::peer_lost within a slice):
//   MPI has no way to tell the others short of MPI_Abort, which would end the job; they see errc::timeout at
//   their deadline.
// After a timeout or abort a collective is still in flight: MPI forbids cancelling it, so pvmm keeps its buffers
// for the life of the process (a late rank may still complete it). End the job (or MPI_Abort) rather than
// MPI_Finalize, which may wait for it.
// Threading: as pvmm/bootstrap.hpp; MPI must be initialised with at least MPI_THREAD_SERIALIZED if several
// threads use bootstraps.
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>

#include <pvmm/bootstrap.hpp>

namespace pvmm {

/// How long make_mpi_bootstrap waits for every rank when no timeout is given.
inline constexpr std::chrono::milliseconds default_mpi_bootstrap_timeout{60000};

/// A bootstrap over a duplicate of `comm` (the caller keeps `comm`; MPI must stay initialised while the
/// bootstrap lives). Every rank of `comm` calls it; creation (two collectives) is bounded by `timeout`.
result<std::shared_ptr<bootstrap>> make_mpi_bootstrap(MPI_Comm comm, std::chrono::milliseconds timeout,
                                                      const bootstrap_options& options = {});
/// As above, bounded by default_mpi_bootstrap_timeout.
result<std::shared_ptr<bootstrap>> make_mpi_bootstrap(MPI_Comm comm, const bootstrap_options& options = {});

}  // namespace pvmm
