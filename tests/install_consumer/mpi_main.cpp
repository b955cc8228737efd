// Uses the installed pvmm::mpi under mpirun: a bootstrap over MPI_COMM_WORLD gathers every rank's number.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include <pvmm/bootstrap_mpi.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 1;
  {
    auto b = pvmm::make_mpi_bootstrap(MPI_COMM_WORLD, std::chrono::seconds(20));
    if (!b) {
      std::printf("FAIL: %s\n", b.error().message().c_str());
    } else {
      const int mine = (*b)->rank();
      std::vector<int> all(static_cast<std::size_t>((*b)->size()));
      auto gathered = (*b)->allgather(&mine, sizeof mine, all.data(), pvmm::deadline_in(std::chrono::seconds(20)));
      status = 0;
      for (int r = 0; r < (*b)->size(); ++r) status |= gathered && all[static_cast<std::size_t>(r)] == r ? 0 : 1;
      std::printf("pvmm mpi consumer rank %d of %d: %s\n", mine, (*b)->size(), status ? "FAIL" : "ok");
    }
  }
  MPI_Finalize();
  return status;
}
