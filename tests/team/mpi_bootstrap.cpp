// The MPI adapter's own cases, one process per rank under mpirun:
//   pvmm_mpi_bootstrap unusable   refused before MPI_Init, with MPI_COMM_NULL, and after MPI_Finalize; the
//                                 process goes on each time (MPI's default handler would end the job)
//   pvmm_mpi_bootstrap late       2 ranks: rank 1 arrives 6 s late; rank 0 (1 s timeout) returns timeout in about
//                                 1 s, and rank 1 (2 s timeout) returns too, with an error, instead of hanging
//   pvmm_mpi_bootstrap aborted    2 ranks: rank 0's allgather, which rank 1 never joins, ends with peer_lost
//                                 soon after another thread aborts the bootstrap, not at its deadline
// Each rank prints what failed and exits 1, or exits 0.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <pvmm/bootstrap_mpi.hpp>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

int failures = 0;
int my_rank = -1;

void check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", my_rank, what.c_str());
  ++failures;
}

std::string text(const pvmm::result<std::shared_ptr<pvmm::bootstrap>>& r) {
  return r ? std::string("a bootstrap") : r.error().message();
}

void expect_refused(const pvmm::result<std::shared_ptr<pvmm::bootstrap>>& r, const std::string& needle,
                    const char* when) {
  check(!r && r.code() == pvmm::errc::invalid_argument,
        std::string(when) + ": expected invalid_argument, got " + text(r));
  check(!r || r.error().message().find(needle) != std::string::npos,
        std::string(when) + ": the message does not say \"" + needle + "\": " + text(r));
}

void unusable(int argc, char** argv) {
  expect_refused(pvmm::make_mpi_bootstrap(MPI_COMM_WORLD), "not initialised", "before MPI_Init");
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  expect_refused(pvmm::make_mpi_bootstrap(MPI_COMM_NULL), "MPI_COMM_NULL", "MPI_COMM_NULL");
  {  // the process is still fine afterwards (the bootstrap is freed before MPI_Finalize)
    auto good = pvmm::make_mpi_bootstrap(MPI_COMM_WORLD);
    check(good.has_value(), "MPI_COMM_WORLD after MPI_COMM_NULL: " + text(good));
  }
  MPI_Finalize();
  expect_refused(pvmm::make_mpi_bootstrap(MPI_COMM_WORLD), "finalized", "after MPI_Finalize");
}

void late(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  if (my_rank == 1) std::this_thread::sleep_for(6s);
  const auto start = clock_type::now();
  auto b = pvmm::make_mpi_bootstrap(MPI_COMM_WORLD, my_rank == 0 ? 1s : 2s);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - start);
  std::printf("rank %d: make_mpi_bootstrap returned after %lld ms: %s\n", my_rank, static_cast<long long>(took.count()),
              text(b).c_str());
  check(!b && b.code() == pvmm::errc::timeout, "expected timeout, got " + text(b));
  check(took >= 900ms && took < 4s, "returned after " + std::to_string(took.count()) + " ms");
  if (!b) check(b.error().message().find("of 2 ranks") != std::string::npos, "the message does not count the ranks");
  MPI_Barrier(MPI_COMM_WORLD);  // both verdicts are in
  MPI_Finalize();
}

void aborted(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  {
    auto b = pvmm::make_mpi_bootstrap(MPI_COMM_WORLD, 20s);
    check(b.has_value(), "make_mpi_bootstrap: " + text(b));
    if (b && my_rank == 0) {  // rank 1 never comes; another thread aborts rank 0's bootstrap
      std::thread aborter([&] {
        std::this_thread::sleep_for(300ms);
        (*b)->abort();
      });
      const auto start = clock_type::now();
      int mine = 0, all[2] = {};
      auto r = (*b)->allgather(&mine, sizeof mine, all, pvmm::deadline_in(30s));
      const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - start);
      aborter.join();
      check(!r && r.code() == pvmm::errc::peer_lost, "the aborted allgather: " + (r ? "ok" : r.error().message()));
      check(took < 3s, "the aborted allgather returned after " + std::to_string(took.count()) + " ms");
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "unusable") {
    unusable(argc, argv);
  } else if (mode == "late") {
    late(argc, argv);
  } else if (mode == "aborted") {
    aborted(argc, argv);
  } else {
    std::fprintf(stderr, "usage: %s unusable|late|aborted\n", argv[0]);
    return 2;
  }
  std::printf("[pvmm-mpi] rank %d %s: %s\n", my_rank, mode.c_str(), failures ? "failed" : "ok");
  std::fflush(stdout);
  std::fflush(stderr);
  return failures ? 1 : 0;
}
