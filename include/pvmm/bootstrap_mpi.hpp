// pvmm/bootstrap_mpi.hpp - a bootstrap over an MPI communicator (library pvmm::mpi, built where MPI is found).
// This is how a team spans machines: on the job's existing launcher (mpirun, srun), not a home-made one.
// - node(): ranks sharing memory (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), or options.node to simulate nodes;
// - allgather and barrier are MPI's non-blocking collectives, tested until the deadline (errc::timeout then;
//   MPI does not say which rank is missing, so the error cannot name it); the byte count is checked first
//   (errc::team_mismatch) so a mismatch is an error, not MPI's undefined truncation;
// - abort() breaks this rank's bootstrap only: MPI has no way to tell the others short of MPI_Abort, which
//   would end the job; they see errc::timeout at their deadline. After a timeout the communicator has a
//   collective in flight: end the job (or MPI_Abort) rather than MPI_Finalize, which would wait for it.
// Threading: as pvmm/bootstrap.hpp; MPI must be initialised with at least MPI_THREAD_SERIALIZED if several
// threads use bootstraps.
#pragma once

#include <mpi.h>

#include <memory>

#include <pvmm/bootstrap.hpp>

namespace pvmm {

/// A bootstrap over a duplicate of `comm` (the caller keeps `comm`; MPI must stay initialised while the
/// bootstrap lives).
result<std::shared_ptr<bootstrap>> make_mpi_bootstrap(MPI_Comm comm, const bootstrap_options& options = {});

}  // namespace pvmm
