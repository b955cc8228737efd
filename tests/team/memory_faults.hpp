// The allocation-failure sweep of the team tests (memory_faults.cpp replaces operator new; memory_faults_team.cpp
// sweeps every team call on two ranks with it).
#pragma once

#include <functional>
#include <string>

#include <pvmm/error.hpp>

namespace pvmm_fault_test {

/// What one armed call returned.
struct outcome {
  bool threw = false;
  bool fired = false;
  bool ok = false;
  pvmm::errc code = pvmm::errc::backend_error;
};

/// A made-up failure: the data came back wrong.
pvmm::status wrong();
/// Runs `call` with the N-th allocation of this thread failing.
outcome armed(long n, const std::function<pvmm::status()>& call);
/// Sweeps N for one entry point (see memory_faults.cpp): every outcome success, out_of_memory or `also`; nothing
/// left behind; ends at the first N the call does not reach.
void sweep(const std::string& what, const std::function<outcome(long)>& round,
           pvmm::errc also = pvmm::errc::out_of_memory);

}  // namespace pvmm_fault_test
