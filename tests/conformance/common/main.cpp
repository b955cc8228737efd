// The suite's entry point: doctest runs the cases; then the whole process is checked for device memory it did not
// give back (each case checks its own; this catches what outlives cases, such as pools or streams kept in statics).
#define DOCTEST_CONFIG_IMPLEMENT
#include <chrono>
#include <cstdio>
#include <thread>

#include "support.hpp"

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit() || !pvmm_test::no_device_reason().empty()) return rc;
  const std::size_t baseline = pvmm_test::leak_check::process_baseline_device_free();
  if (baseline == 0) return rc;  // no case ran, or the device's memory is the system's (not measurable)
  std::size_t now = pvmm_test::leak_check::free_device_memory();
  for (int i = 0; i < 40 && now < baseline; ++i) {  // drivers give some memory back late
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    now = pvmm_test::leak_check::free_device_memory();
  }
  if (now < baseline) {
    std::printf(
        "[pvmm] device memory not given back by the end of the process: %zu bytes less free than after the "
        "warm-up\n",
        baseline - now);
    return rc == 0 ? 1 : rc;
  }
  // What the driver kept at each first use (device 0), measured by the warm-up: memory no pvmm object holds.
  const auto& steps = pvmm_test::leak_check::first_use();
  for (std::size_t i = 1; i < steps.size(); ++i)
    std::printf("[pvmm] first use, kept by the driver: %-55s %+.1f MiB\n", steps[i].first,
                (static_cast<double>(steps[i - 1].second) - static_cast<double>(steps[i].second)) / (1 << 20));
  std::printf("[pvmm] device memory at exit: all given back (%zu bytes free, %zu after the warm-up)\n", now, baseline);
  return rc;
}
