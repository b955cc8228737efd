// pvmm-info: what the configured backend and its devices support; --check runs a self-check of each feature;
// --json prints the same as one JSON object for scripts.
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "info.hpp"

namespace {

using namespace pvmm_info;

int usage(bool asked) {
  fmt::print(
      "usage: pvmm-info [--check] [--json]\n  prints the backend and each device's capabilities;\n"
      "  --check also runs a self-check of every feature and exits non-zero on a failure;\n"
      "  --json prints one JSON object (backend, device_count, devices, and self_check with --check)\n");
  return asked ? 0 : 2;
}

/// What the checks say when there is nothing to check: refused devices fail, no device is not supported.
std::vector<check_result> no_device_results(const pvmm::backend_info& b, const std::string& reason) {
  if (b.refused_devices > 0)
    return {{"devices",
             {outcome::fail, fmt::format("{} device(s) present, all refused by the backend: {}", b.refused_devices,
                                         b.unavailable_reason)}}};
  return {{"devices", {outcome::not_supported, "no device here: " + reason}}};
}

int print_json(const pvmm::backend_info& b, int count, const std::string& reason, bool check) {
  std::string out = fmt::format("{{\"backend\": {}, \"device_count\": {}, \"devices\": {}", backend_json(b), count,
                                devices_json(count));
  int rc = 0;
  if (check) {
    auto results = count > 0 ? self_check() : no_device_results(b, reason);
    for (auto& r : results) rc |= r.result.what == outcome::fail;
    out += fmt::format(", \"self_check\": {}", self_check_json(results));
  }
  fmt::print("{}}}\n", out);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 3 && args[0] == "--serve-import") return serve_import(std::stoi(args[1]), std::stoull(args[2]));
  if (args.size() == 2 && args[0] == "--serve-pool-import") return serve_pool_import(std::stoi(args[1]));
  bool check = false, json = false;
  for (auto& a : args) {
    if (a == "--check")
      check = true;
    else if (a == "--json")
      json = true;
    else
      return usage(a == "--help" || a == "-h");
  }
  auto b = pvmm::query_backend();
  auto count = pvmm::device_count();
  // Refused devices: GPUs are here but the backend will not use them, so a check that passed would prove nothing.
  const int usable = b.refused_devices > 0 || !b.available || !count ? 0 : *count;
  const std::string reason = !b.unavailable_reason.empty() ? b.unavailable_reason
                             : count                       ? std::string("no device")
                                                           : count.error().message();
  if (json) return print_json(b, usable, reason, check);

  fmt::print("pvmm {} backend\n", b.name);
  fmt::print("  runtime: {}\n  driver:  {}\n", b.runtime_version.empty() ? "-" : b.runtime_version,
             b.driver_version.empty() ? "-" : b.driver_version);
  if (b.refused_devices > 0) {
    fmt::print("  devices: 0 usable of {} present ({})\n", b.refused_devices, b.unavailable_reason);
    if (check) fmt::print("self-check: FAIL: {} device(s) present, all refused by the backend\n", b.refused_devices);
    return check ? 1 : 0;
  }
  if (usable == 0) {
    fmt::print("  devices: 0 ({})\n", reason);
    if (check) fmt::print("self-check: 0 passed, 0 failed, all not supported (no device here)\n");
    return 0;
  }
  fmt::print("  devices: {}\n", usable);
  print_devices(usable);
  return check ? print_self_check(self_check()) : 0;
}
