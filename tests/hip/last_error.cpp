// A runtime error pvmm consumed (reported as its own error, or read as an answer) is cleared from the runtime's
// last error: otherwise the caller's next hipGetLastError (cudaGetLastError on HIP's NVIDIA platform), after
// their own kernel launch, reads it and blames the kernel.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <hip/hip_runtime_api.h>

#include <cstdio>
#include <limits>
#include <string>

#include <pvmm/pvmm.hpp>

namespace {

// Where HIP cannot initialise (no device), hipGetLastError itself answers an error every time: nothing to see.
std::string why_last_error_unreadable() {
  (void)hipGetLastError();
  const hipError_t again = hipGetLastError();
  return again == hipSuccess ? std::string()
                             : std::string("hipGetLastError answers ") + hipGetErrorName(again) +
                                   " even right after it was read (the runtime cannot initialise)";
}

}  // namespace

TEST_CASE("probing the runtime leaves its last error at success") {
  if (const auto why = why_last_error_unreadable(); !why.empty()) {
    std::printf("[pvmm-skip] %s\n", why.c_str());
    return;
  }
  // The process's first pvmm call probes the runtime (device count, versions).
  const auto backend = pvmm::query_backend();
  CHECK(hipGetLastError() == hipSuccess);
  if (backend.available) return;
  CHECK(pvmm::physical_allocation::create(4096, {}).code() == backend.unavailable_code);
  CHECK(hipGetLastError() == hipSuccess);
}

TEST_CASE("after an allocation the runtime refused and pvmm reported, the runtime's last error is success") {
  const auto backend = pvmm::query_backend();
  std::string why = why_last_error_unreadable();
  if (why.empty() && !backend.available) why = "no usable GPU: " + backend.unavailable_reason;
  if (!why.empty()) {
    std::printf("[pvmm-skip] %s\n", why.c_str());
    return;
  }
  constexpr std::size_t too_much = std::size_t{1} << 50;  // 1 PiB: every runtime refuses it
  SUBCASE("a pool allocation (hipMallocFromPoolAsync)") {
    auto pool = pvmm::memory_pool::default_pool(0);
    if (!pool) {
      std::printf("[pvmm-skip] no default pool: %s\n", pool.error().message().c_str());
      return;
    }
    auto s = pvmm::stream::create(0).value();
    auto r = pool->allocate(std::numeric_limits<std::size_t>::max() / 2 + 1, s);
    CHECK(r.code() == pvmm::errc::out_of_memory);
    CHECK(hipGetLastError() == hipSuccess);
    r = pool->allocate(too_much, s);
    CHECK(r.code() == pvmm::errc::out_of_memory);
    CHECK(hipGetLastError() == hipSuccess);
  }
  SUBCASE("a managed allocation (hipMallocManaged)") {
    auto r = pvmm::managed_allocation::create(too_much);
    CHECK_FALSE(r.has_value());
    CHECK(hipGetLastError() == hipSuccess);
  }
  SUBCASE("physical memory (hipMemCreate)") {
    const std::size_t granularity = pvmm::query_granularity({}).value().minimum;
    auto r = pvmm::physical_allocation::create(too_much / granularity * granularity, {});
    CHECK(r.code() == pvmm::errc::out_of_memory);
    CHECK(hipGetLastError() == hipSuccess);
  }
}
