// Page-locked memory, one contract on every backend (issue "pools, managed and pinned memory hold one contract"): a
// pinned allocation counts as registered memory, so registering any of it is already_registered before any driver
// call (CUDA's driver said invalid_value, the host backend locked it again), the message naming what is there.
#include <sys/mman.h>

#include <cstdio>
#include <cstring>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {

/// [data, +size) as the errors write a range.
std::string range_text(const void* data, std::size_t size) {
  char buffer[96];
  std::snprintf(buffer, sizeof buffer, "[%p, +%#zx)", data, size);
  return buffer;
}

/// Registers and, where that succeeded (the defect), unregisters again so that nothing outlives the case.
status register_once(void* pointer, std::size_t size) {
  auto done = register_host_memory(pointer, size);
  if (done) (void)unregister_host_memory(pointer);
  return done;
}
}  // namespace

TEST_SUITE("pinned") {
  PVMM_CASE("registering a pinned allocation, or part of it, is already_registered naming the pinned allocation") {
    PVMM_REQUIRE_REGISTRATION();
    auto memory = pinned_allocation::create(mib).value();
    auto* p = static_cast<char*>(memory.data());
    auto whole = register_once(p, mib);
    PVMM_CHECK_ERRC(whole, errc::already_registered);
    if (!whole) {
      CHECK(whole.error().detail.find("pinned allocation") != std::string::npos);
      CHECK(whole.error().detail.find(range_text(p, mib)) != std::string::npos);
    }
    PVMM_CHECK_ERRC(register_once(p + 4096, 8192), errc::already_registered);  // inside it
    PVMM_CHECK_ERRC(register_once(p + 100, 10), errc::already_registered);     // a few bytes of it
    PVMM_CHECK_ERRC(register_once(p + mib - 1, 1), errc::already_registered);  // its last byte
    PVMM_CHECK_ERRC(host_registration::create(p, mib), errc::already_registered);
    PVMM_CHECK_ERRC(unregister_host_memory(p), errc::not_registered);  // nothing was recorded
    // The allocation is untouched by the refusals: it still copies in stream order.
    const auto words = pattern(mib, 12);
    std::memcpy(p, words.data(), mib);
    auto s = stream::create(0).value();
    CHECK(read_back(s, p, mib) == words);
  }

  PVMM_CASE("an overlap with a registration is already_registered naming the registration and its range") {
    PVMM_REQUIRE_REGISTRATION();
    void* mine = ::mmap(nullptr, 2 * mib, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(mine != MAP_FAILED);
    auto* p = static_cast<char*>(mine);
    {
      auto held = host_registration::create(p, mib).value();
      auto again = register_once(p + mib - 4096, 2 * 4096);  // across its end
      PVMM_CHECK_ERRC(again, errc::already_registered);
      if (!again) {
        CHECK(again.error().detail.find("registration") != std::string::npos);
        CHECK(again.error().detail.find(range_text(p, mib)) != std::string::npos);
      }
    }
    ::munmap(mine, 2 * mib);
  }
}  // TEST_SUITE
