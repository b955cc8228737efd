// The hip backend refuses runtimes whose VMM does not work (before ROCm 6.1 on AMD; before CUDA 10.2 on HIP's
// NVIDIA platform), naming the runtime and the versions found and needed.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include <pvmm/pvmm.hpp>

TEST_CASE("an old or absent HIP runtime is refused with the versions named, and nothing runs on it") {
  auto b = pvmm::query_backend();
  CHECK(b.name == "hip");
  if (b.available) {
    std::printf("[pvmm-skip] a working HIP runtime is present: %s\n", b.runtime_version.c_str());
    return;
  }
  CHECK(pvmm::device_count().value() == 0);
  auto r = pvmm::physical_allocation::create(4096, {});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.code() == b.unavailable_code);
  if (b.unavailable_code == pvmm::errc::runtime_too_old) {
    // runtime_version starts with the runtime as found: "HIP 5.2 runtime on ROCm ..." or "CUDA 9.0 runtime on ...".
    const std::string found = b.runtime_version.substr(0, b.runtime_version.find(" runtime"));
    CHECK(b.unavailable_reason.find(found) != std::string::npos);
    const bool cuda = found.rfind("CUDA", 0) == 0;
    CHECK(b.unavailable_reason.find(cuda ? "CUDA 10.2" : "ROCm 6.1") != std::string::npos);
  }
  auto range = pvmm::address_reservation::reserve(4096);
  CHECK(range.code() == b.unavailable_code);  // the stubbed hipMemAddressReserve is never called
}
