// One rank of a team case, as its own process (exec'd fresh, so it may use the GPU):
//   pvmm_team_rank <adapter> <case> <rank> <size> <meeting point> [ranks-per-node]
//   adapter: endpoints (meeting point: an endpoint name) or store (a directory the ranks share as a key-value
//   store, as torch's FileStore) or mpi (rank and size from MPI_COMM_WORLD; pass 0 0)
// Prints what failed and exits 1, or exits 0.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "cases.hpp"
#ifdef PVMM_TEAM_WITH_MPI
#include <mpi.h>

#include <pvmm/bootstrap_mpi.hpp>
#endif

namespace {

using namespace std::chrono_literals;

pvmm::error make_error(pvmm::errc code, std::string detail) {
  pvmm::error e;
  e.code = code;
  e.operation = "pvmm_team_rank";
  e.detail = std::move(detail);
  return e;
}

// A directory as a key-value store: a key is a file, written whole then renamed into place.
pvmm::key_value_store directory_store(const std::string& dir) {
  pvmm::key_value_store s;
  auto file = [dir](const std::string& key) {
    std::string name = key;
    for (char& c : name)
      if (c == '/') c = '_';
    return dir + "/" + name;
  };
  s.set = [file](const std::string& key, const std::vector<std::uint8_t>& value) -> pvmm::status {
    const std::string path = file(key), temporary = path + ".tmp" + std::to_string(::getpid());
    std::ofstream(temporary, std::ios::binary)
        .write(reinterpret_cast<const char*>(value.data()), static_cast<std::streamsize>(value.size()));
    if (std::rename(temporary.c_str(), path.c_str()) != 0)
      return make_error(pvmm::errc::system_error, "rename failed for " + key);
    return {};
  };
  s.get = [file](const std::string& key, pvmm::deadline until) -> pvmm::result<std::vector<std::uint8_t>> {
    for (;;) {
      std::ifstream in(file(key), std::ios::binary);
      if (in) return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), {});
      if (std::chrono::steady_clock::now() >= until)
        return make_error(pvmm::errc::timeout, key + " was not set before the deadline");
      std::this_thread::sleep_for(2ms);
    }
  };
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s adapter case rank size meeting-point [ranks-per-node]\n", argv[0]);
    return 2;
  }
  const std::string adapter = argv[1];
  pvmm_team_test::case_params p;
  p.name = argv[2];
  int rank = std::stoi(argv[3]), size = std::stoi(argv[4]);
  const std::string meeting = argv[5];
  p.ranks_per_node = argc > 6 ? std::stoi(argv[6]) : 0;
  p.one_rank_per_process = true;
  pvmm::bootstrap_options o;
  pvmm::result<std::shared_ptr<pvmm::bootstrap>> b = make_error(pvmm::errc::invalid_argument, "no adapter " + adapter);
#ifdef PVMM_TEAM_WITH_MPI
  if (adapter == "mpi") {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    p.adapter_names_missing_rank = false;
    if (p.ranks_per_node > 0) o.node = rank / p.ranks_per_node;
    b = pvmm::make_mpi_bootstrap(MPI_COMM_WORLD, o);
  }
#endif
  if (p.ranks_per_node > 0) o.node = rank / p.ranks_per_node;
  if (adapter == "endpoints") b = pvmm::make_endpoint_bootstrap(meeting, rank, size, 20s, o);
  if (adapter == "store") b = pvmm::make_store_bootstrap(directory_store(meeting), "team", rank, size, 20s, o);
  int status = 0;
  if (const auto why = pvmm_team_test::no_device_reason(); !why.empty()) {
    std::printf("[pvmm-skip] %s\n", why.c_str());  // every rank says it, so mpirun's output has it
  } else if (!b) {
    std::fprintf(stderr, "rank %d: bootstrap: %s\n", rank, b.error().message().c_str());
    status = 1;
  } else {
    const auto v = pvmm_team_test::run_case(p, *b);
    if (!v.failures.empty()) std::fprintf(stderr, "%s", v.text().c_str());
    status = v.failures.empty() ? 0 : 1;
    b->reset();
  }
#ifdef PVMM_TEAM_WITH_MPI
  if (adapter == "mpi" && pvmm_team_test::dying_rank(p.name, size) >= 0) {
    // A survivor's verdict, for tests/team/mpi_killed.cmake: MPI_Finalize with a dead rank may never return, and
    // mpirun's own status then says only that a rank died, so each survivor reports and leaves without it.
    // The survivors leave together (mpirun stops the others once one leaves without MPI_Finalize): each marks
    // the meeting directory and waits, bounded, for the others' marks.
    std::printf("[pvmm-team] survivor rank %d: %s\n", rank, status == 0 ? "ok" : "failed");
    std::fflush(stdout);
    std::fflush(stderr);
    std::ofstream(meeting + "/done-" + std::to_string(rank)).put('1');
    for (int waited = 0; waited < 2000; ++waited) {
      int marks = 0;
      for (int r = 0; r < size; ++r) marks += ::access((meeting + "/done-" + std::to_string(r)).c_str(), F_OK) == 0;
      if (marks >= size - 1) break;
      std::this_thread::sleep_for(10ms);
    }
    ::_exit(status);
  }
  if (adapter == "mpi") MPI_Finalize();
#endif
  return status;
}
