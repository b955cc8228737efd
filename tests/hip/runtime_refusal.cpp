// The hip backend refuses runtimes whose VMM is a stub (before ROCm 6.1), naming the version found and needed.
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
  auto r = pvmm::physical_allocation::create({}, 4096);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.code() == b.unavailable_code);
  if (b.unavailable_code == pvmm::errc::runtime_too_old) {
    CHECK(b.unavailable_reason.find("6.1") != std::string::npos);
    CHECK(b.unavailable_reason.find(b.runtime_version.substr(12, 3)) != std::string::npos);  // "HIP runtime X.Y"
  }
  auto range = pvmm::address_reservation::reserve(4096);
  CHECK(range.code() == b.unavailable_code);  // the stubbed hipMemAddressReserve is never called
}
