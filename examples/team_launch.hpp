// How the team examples start their ranks: one binary, three launchers, the same rank body.
//   --threads N                 N ranks as threads of this process (make_thread_bootstraps); on one GPU their
//                               stream-ordered waits are refused (one context: pvmm/team.hpp), so use --spawn
//   --spawn N                   N copies of this program, each started with --endpoints (one command runs all)
//   --endpoints NAME RANK SIZE  one rank of SIZE node-local processes meeting at endpoint NAME
//   --mpi                       rank and size from mpirun (only in the *_mpi build, PVMM_EXAMPLE_WITH_MPI)
// A rank body returns its exit status (0: its answer was right). A rank that fails aborts its bootstrap, so the
// others stop at their next collective (errc::peer_lost) instead of waiting for their deadline.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <pvmm/pvmm.hpp>
#include <pvmm/team.hpp>
#ifdef PVMM_EXAMPLE_WITH_MPI
#include <mpi.h>

#include <pvmm/bootstrap_mpi.hpp>
#endif

extern char** environ;

namespace team_example {

using rank_body = std::function<int(std::shared_ptr<pvmm::bootstrap>)>;
constexpr std::chrono::seconds collective_timeout{30};

/// True when every rank's slot of `window` is mapped here; otherwise prints the first that is not, and why.
inline bool all_mapped(const char* name, const pvmm::symmetric_window& window) {
  for (int r = 0; r < window.size(); ++r)
    if (!window.mapped(r)) {
      std::printf("%s: rank %d: FAIL: rank %d is not mapped: %s\n", name, window.rank(), r,
                  window.unmapped_reason(r).c_str());
      return false;
    }
  return true;
}

/// The team's device for this rank: ranks share the node's devices round-robin (several ranks on one GPU work).
inline pvmm::team_options options_for(const pvmm::bootstrap& ranks) {
  pvmm::team_options o;
  const int devices = pvmm::device_count().value_or(1);
  o.device = ranks.local_rank() % (devices > 0 ? devices : 1);
  o.timeout = collective_timeout;
  return o;
}

/// Runs `body` on one rank; a thrown pvmm::exception (from .value()) is a failure like a wrong answer.
inline int run_rank(const char* name, const rank_body& body, std::shared_ptr<pvmm::bootstrap> ranks) {
  int status = 1;
  try {
    status = body(ranks);
  } catch (const pvmm::exception& e) {
    std::printf("%s: rank %d: FAIL: %s\n", name, ranks->rank(), e.what());
  }
  if (status != 0) ranks->abort();
  return status;
}

inline int run_threads(const char* name, const rank_body& body, int n) {
  auto ranks = pvmm::make_thread_bootstraps(n).value();
  std::vector<int> status(n, 1);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { status[r] = run_rank(name, body, ranks[r]); });
  for (auto& t : threads) t.join();
  for (int s : status)
    if (s != 0) return 1;
  return 0;
}

/// Starts n copies of this program as endpoint ranks and waits for them (killing them all after 60 s).
inline int run_spawned(const char* name, int n) {
  const std::string meeting = std::string("pvmm-example-") + name + "-" + std::to_string(::getpid());
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> args{"/proc/self/exe", "--endpoints", meeting, std::to_string(r), std::to_string(n)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
      std::printf("%s: FAIL: could not start rank %d\n", name, r);
      for (pid_t p : pids) ::kill(p, SIGKILL), ::waitpid(p, nullptr, 0);
      return 1;
    }
    pids.push_back(pid);
  }
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int failed = 0;
  for (int r = 0; r < n; ++r) {
    int status = 0;
    while (::waitpid(pids[r], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > limit) {  // never hang: the ranks had their deadlines long ago
        std::printf("%s: FAIL: rank %d still running after 60 s\n", name, r);
        for (pid_t p : pids) ::kill(p, SIGKILL);
        ::waitpid(pids[r], &status, 0);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  if (failed) std::printf("%s: FAIL: %d of %d processes failed\n", name, failed, n);
  return failed ? 1 : 0;
}

inline int usage(const char* name) {
#ifdef PVMM_EXAMPLE_WITH_MPI
  const char* mpi = " | --mpi";
#else
  const char* mpi = "";
#endif
  std::printf("usage: %s --threads N | --spawn N | --endpoints NAME RANK SIZE%s\n", name, mpi);
  return 2;
}

/// The examples' main: checks for a device, picks the launcher from the arguments, runs `body` on every rank.
inline int launch(const char* name, int argc, char** argv, const rank_body& body) {
  const auto backend = pvmm::query_backend();
  if (!backend.available || pvmm::device_count().value_or(0) == 0) {
    std::printf("%s: [pvmm-skip] no device (%s)\n", name, backend.unavailable_reason.c_str());
    return 0;
  }
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 2 && args[0] == "--threads") return run_threads(name, body, std::stoi(args[1]));
  if (args.size() == 2 && args[0] == "--spawn") return run_spawned(name, std::stoi(args[1]));
  if (args.size() == 4 && args[0] == "--endpoints") {
    auto ranks = pvmm::make_endpoint_bootstrap(args[1], std::stoi(args[2]), std::stoi(args[3]), collective_timeout);
    if (!ranks) {
      std::printf("%s: rank %s: FAIL: %s\n", name, args[2].c_str(), ranks.error().message().c_str());
      return 1;
    }
    return run_rank(name, body, std::move(*ranks));
  }
#ifdef PVMM_EXAMPLE_WITH_MPI
  if (args.size() == 1 && args[0] == "--mpi") {
    MPI_Init(&argc, &argv);
    int status = 1;
    if (auto ranks = pvmm::make_mpi_bootstrap(MPI_COMM_WORLD))
      status = run_rank(name, body, std::move(*ranks));
    else
      std::printf("%s: FAIL: %s\n", name, ranks.error().message().c_str());
    // After a failed collective MPI may have one in flight: end the job rather than finalize (bootstrap_mpi.hpp).
    if (status != 0) MPI_Abort(MPI_COMM_WORLD, status);
    MPI_Finalize();
    return status;
  }
#endif
  return usage(name);
}

}  // namespace team_example
