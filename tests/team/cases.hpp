// The team cases every bootstrap adapter runs (threads in-process, endpoints and store in exec'd processes, mpi
// under mpirun). Each body runs on one rank and returns what failed on that rank (empty: passed).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <pvmm/bootstrap.hpp>

namespace pvmm_team_test {

struct case_params {
  std::string name;        // "window", "sizes", "grow", "late", "mismatch", "version", "cycles", "nodes", "multicast",
                           // "killed-<step 0..5>"
  int cycles = 100;        // for "cycles"
  int ranks_per_node = 0;  // for "nodes": the simulated node size (0: one node)
  bool one_rank_per_process = false;       // process-wide checks (fds, live objects) are this rank's alone
  bool adapter_names_missing_rank = true;  // false for MPI: a collective that never completes cannot say who
};

/// What failed on this rank, one line each.
struct verdict {
  std::vector<std::string> failures;
  void check(bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
  }
  std::string text() const;
};

/// Runs case `p.name` on this rank. A rank that must stay away ("late") returns at once.
verdict run_case(const case_params& p, std::shared_ptr<pvmm::bootstrap> ranks);

/// The team memory cases (mem_cases.cpp: "mem-from", "mem-from-refused", "mem-heap", "mem-split"...): false when
/// `p.name` is none of them.
bool run_mem_case(verdict& v, const case_params& p, std::shared_ptr<pvmm::bootstrap> ranks);

/// The signal cases (signal_cases.cpp: "sig-data", "sig-silent", "sig-absent", "sig-bad", "sig-deadline",
/// "sig-killed"): false when `p.name` is none of them.
bool run_signal_case(verdict& v, const case_params& p, std::shared_ptr<pvmm::bootstrap> ranks);

/// The signal cases of issue 48 (signal_guard_cases.cpp: "sig-forger", "sig-clear", "sig-abort-queued"): false when
/// `p.name` is none of them.
bool run_signal_guard_case(verdict& v, const case_params& p, std::shared_ptr<pvmm::bootstrap> ranks);

/// The driver path's own cases (signal_driver_cases.cpp: "sig-path-mismatch", "sig-path-abort"): false when
/// `p.name` is none of them.
bool run_signal_driver_case(verdict& v, const case_params& p, std::shared_ptr<pvmm::bootstrap> ranks);

/// "killed-<step>": the rank that dies, and the last step (dying_bootstrap in cases.cpp says what each is).
int killed_victim(const std::string& name, int size);
/// The rank that case `name` kills with SIGKILL ("killed-<step>", "sig-killed"), or -1 where none dies.
int dying_rank(const std::string& name, int size);
inline constexpr int last_kill_step = 5;

/// The cases, for the suites that list them.
const std::vector<std::string>& case_names();

/// Why teams cannot run here (no backend or no device), or empty.
std::string no_device_reason();

/// Uses every device once in this process (a stream, an allocation mapped and granted), the first time it is called.
/// A driver keeps what it sets up at a device's first use (measured on 2 H200s under HIP's NVIDIA platform: 38 fds
/// and its threads for device 1) for the process's life: call it before a leak check takes its baseline, so that a
/// case whose ranks use another device does not count the driver's set-up as its leak.
void use_every_device_once();

}  // namespace pvmm_team_test
