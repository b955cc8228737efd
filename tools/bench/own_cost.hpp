// pvmm-own-cost's measuring kit: an operation measured through pvmm and straight through the fake driver's table,
// in interleaved rounds, reported as the nanoseconds pvmm adds (warm, and with caches evicted before every call).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "bench.hpp"
#include "fake_driver.hpp"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define OWN_COST_COLLECT() CALLGRIND_TOGGLE_COLLECT  // --count: only the timed parts' instructions are counted
#else
#define OWN_COST_COLLECT() ((void)0)
#endif

namespace own_cost {

/// One operation measured: `pvmm_op(n)` and `raw_op(n)` each do n operations and return the nanoseconds the
/// timed part took (set-up and teardown outside the clock).
struct measured {
  std::string name;
  std::function<double(int)> pvmm_op, raw_op;
};

/// One operation measured with cold caches: before every single call, untimed, more memory than the core's L2
/// holds is streamed through, as a real driver call's own work does between two pvmm calls. Each side's
/// `setup(n)` and `teardown()` run untimed around the n timed `op(i)` calls.
struct measured_cold {
  std::string name;
  std::function<void(int)> pvmm_setup;
  std::function<void(int)> pvmm_op;
  std::function<void()> pvmm_teardown;
  std::function<void(int)> raw_setup;
  std::function<void(int)> raw_op;
  std::function<void()> raw_teardown;
};

/// Operations per round (64 live objects, as pvmm-bench's overhead rounds hold; the command line may change it).
extern int per_round;
/// Rounds per warm row: many short rounds keep the median steady (the command line may change it, e.g. to profile
/// one row for seconds; the cold table is left out then).
extern int rounds;
/// --count: timed() parts switch callgrind's collection on around their calls (tools/cost-guard.py).
extern bool counting;
/// The driver calls the last timed() part made, per entry (report prints them).
extern std::array<std::uint64_t, pvmm::cuda::fake::entry_count> timed_calls;

inline double ns_since(bench::clock_type::time_point t) { return bench::seconds_since(t) * 1e9; }

/// Runs `f`, returning the nanoseconds it took and noting the driver calls it made in timed_calls.
template <class F>
double timed(F&& f) {
  const auto before = pvmm::cuda::fake::calls;
  const auto t0 = bench::clock_type::now();
  if (counting) OWN_COST_COLLECT();
  f();
  if (counting) OWN_COST_COLLECT();
  const double ns = ns_since(t0);
  for (std::size_t i = 0; i < timed_calls.size(); ++i) timed_calls[i] = pvmm::cuda::fake::calls[i] - before[i];
  return ns;
}

/// Prints one row: pvmm's and the raw ns per operation, the median added ns with its IQR, the driver calls.
void report(const measured& m);
/// Prints one row of the cold-cache table.
void report_cold(const measured_cold& m);
/// Prints what an uncontended lock round trip (exchange, then a release store: pvmm's spin_lock) and an atomic add
/// cost on this host, warm: the unit prices of the locked instructions left on the measured paths.
void report_lock_costs();
/// Prints what one cache miss and one cache-and-TLB miss cost here after the same stream (a chain of dependent
/// loads): the unit prices of the line and page counts tools/own-cost-lines.py gives.
void report_miss_costs();
/// Whether the calls can be marked for a memory trace (running under valgrind, its header found at build time).
bool lines_marked();
/// Marks the loaded objects' address ranges in valgrind's log (tools/own-cost-lines.sh reads them).
void mark_objects();
/// Runs each side of one cold row a few calls, each call between two marks in valgrind's log, for
/// tools/own-cost-lines.sh: it counts the distinct cache lines and pages each marked call touched (lackey's trace).
void mark_cold(const measured_cold& m);
/// Counts instructions per operation of each warm row under callgrind (tools/cost-guard.py reads the dumps): a few
/// uncounted rounds first, then `count_rounds` rounds of each side, each dumped as "<row>|<side>|<n>".
void count_warm(const measured& m);
/// Whether this runs under callgrind with its header found at build time.
bool counts_instructions();
/// The MiB streamed through before each cold call.
std::size_t evicted_mib();

}  // namespace own_cost
