// Hardening round 3 (issue 23): pinned cases, each pinning a defect an attacker found.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {
const std::size_t page = page_size();

/// Locked memory of this process in kB, as the kernel counts it (VmLck in /proc/self/status).
long locked_kb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmLck:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

}  // namespace

/// Cases that read the kernel's count of locked pages: the host backend's locks are the program's own mlocks.
#define PVMM_REQUIRE_HOST_LOCKS()                                                                       \
  do {                                                                                                  \
    PVMM_REQUIRE_REGISTRATION();                                                                        \
    PVMM_REQUIRE_HOST_BACKEND(                                                                          \
        "reads VmLck: only the host backend locks pages with the process's own mlock (GPU drivers pin " \
        "through their kernel module)");                                                                \
    PVMM_SKIP_UNLESS(locked_kb() >= 0, "the kernel reports no VmLck in /proc/self/status");             \
  } while (0)

TEST_SUITE("pinned") {
  PVMM_CASE("registering memory where nothing is mapped, or mapped PROT_NONE, is invalid_argument saying so") {
    PVMM_REQUIRE_REGISTRATION();
    program_pages mine(3);
    REQUIRE(::munmap(mine.data + page, page) == 0);  // a hole in the middle
    auto hole = register_host_memory(mine.data + page, page);
    PVMM_CHECK_ERRC(hole, errc::invalid_argument);
    if (!hole) CHECK(hole.error().detail.find("no memory is mapped") != std::string::npos);
    PVMM_CHECK_ERRC(register_host_memory(mine.data, 3 * page), errc::invalid_argument);  // across the hole
    PVMM_CHECK_ERRC(host_registration::create(mine.data + page + 16, 64), errc::invalid_argument);
    program_pages reservation(2, PROT_NONE);
    auto none = register_host_memory(reservation.data, reservation.size);
    PVMM_CHECK_ERRC(none, errc::invalid_argument);
    if (!none) CHECK(none.error().detail.find("PROT_NONE") != std::string::npos);
    PVMM_CHECK_ERRC(unregister_host_memory(mine.data), errc::not_registered);  // nothing was recorded
    PVMM_CHECK_OK(register_host_memory(mine.data, page));                      // the mapped page registers
    PVMM_CHECK_OK(unregister_host_memory(mine.data));
  }

  PVMM_CASE("a registration refused for a hole leaves no page locked and nothing recorded") {
    PVMM_REQUIRE_HOST_LOCKS();
    program_pages mine(2);
    REQUIRE(::munmap(mine.data + page, page) == 0);  // mapped first, then the hole: mlock would lock the first
    const long before = locked_kb();
    PVMM_CHECK_ERRC(register_host_memory(mine.data, 2 * page), errc::invalid_argument);
    CHECK(locked_kb() == before);
    PVMM_CHECK_ERRC(unregister_host_memory(mine.data), errc::not_registered);
  }

  PVMM_CASE("unregistering one of two registrations that share a page keeps the shared page locked") {
    PVMM_REQUIRE_HOST_LOCKS();
    const long kb = static_cast<long>(page / 1024);
    program_pages mine(3);
    const long before = locked_kb();
    char* split = mine.data + page + 100;                                                         // inside page 1
    PVMM_CHECK_OK(register_host_memory(mine.data, static_cast<std::size_t>(split - mine.data)));  // pages 0-1
    {
      auto second = host_registration::create(split, static_cast<std::size_t>(mine.data + 3 * page - split));
      REQUIRE(second.has_value());  // pages 1-2
      CHECK(locked_kb() == before + 3 * kb);
      PVMM_CHECK_OK(unregister_host_memory(mine.data));
      CHECK(locked_kb() == before + 2 * kb);  // page 1 is still the second registration's
    }
    CHECK(locked_kb() == before);

    // A registration inside a pinned allocation is refused (a pinned allocation counts as registered memory), and
    // the refusal leaves the allocation locked.
    auto pinned = pinned_allocation::create(2 * page).value();
    const long with_pinned = locked_kb();
    PVMM_CHECK_ERRC(register_host_memory(static_cast<char*>(pinned.data()) + 8, page), errc::already_registered);
    CHECK(locked_kb() == with_pinned);
    PVMM_CHECK_OK(pinned.release());
    CHECK(locked_kb() == before);
  }

  PVMM_CASE("memory unmapped before unregistering: the unregister succeeds and forgets the range") {
    PVMM_REQUIRE_REGISTRATION();
    program_pages mine(4);
    char* p = mine.data;
    const long before = locked_kb();
    PVMM_CHECK_OK(register_host_memory(p, 4 * page));
    REQUIRE(::munmap(p + 2 * page, 2 * page) == 0);  // half of it: the lock went with the mapping
    PVMM_CHECK_OK(unregister_host_memory(p));
    if (host_backend()) CHECK(locked_kb() == before);  // the half still mapped is unlocked too
    PVMM_CHECK_ERRC(unregister_host_memory(p), errc::not_registered);
    // New memory at the same address registers.
    void* again =
        ::mmap(p + 2 * page, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    REQUIRE(again == static_cast<void*>(p + 2 * page));
    {
      auto registration = host_registration::create(p, 4 * page);
      PVMM_CHECK_OK(registration);
      REQUIRE(::munmap(p, 4 * page) == 0);  // all of it, before the owner unregisters
      mine.size = 0;                        // gone: its destructor must not unmap what may come there next
    }
    if (host_backend()) CHECK(locked_kb() == before);
    PVMM_CHECK_ERRC(unregister_host_memory(p), errc::not_registered);  // the owner forgot it
  }

  PVMM_CASE("a page-locked allocation larger than the machine's memory is refused before the backend is called") {
    PVMM_REQUIRE_PINNED();
    // On CUDA (driver 580) a refused cuMemHostAlloc of SIZE_MAX made the driver give back its reserve, which the next
    // stream-heavy step took again: 2 MiB seen as a device memory leak (tools/probes/device_memory_kept.cpp).
    const std::size_t calls = testing::backend_call_count();
    auto refused = pinned_allocation::create(std::numeric_limits<std::size_t>::max());
    PVMM_CHECK_ERRC(refused, errc::out_of_memory);
    CHECK(testing::backend_call_count() == calls);
    if (!refused) CHECK(refused.error().detail.find("page-locked memory stays resident") != std::string::npos);
    auto fits = pinned_allocation::create(2 * page);  // what fits still goes to the backend
    PVMM_CHECK_OK(fits);
    CHECK(testing::backend_call_count() > calls);
  }

  PVMM_CASE("an explicit release that fails keeps the pinned owner, teardown is never fault-injected") {
    PVMM_REQUIRE_REGISTRATION();
    // pinned_allocation: a failed release keeps it whole; the retry frees it.
    auto memory = pinned_allocation::create(2 * page).value();
    void* p = memory.data();
    check_failed_release_keeps(memory);
    std::memset(p, 0x3c, memory.size());
    PVMM_CHECK_OK(memory.release());

    // host_registration: a failed release keeps the owner and the registration; the retry unregisters.
    program_pages mine(2);
    auto registration = host_registration::create(mine.data, 2 * page).value();
    check_failed_release_keeps(registration);
    CHECK(registration.data() == static_cast<void*>(mine.data));
    PVMM_CHECK_ERRC(register_host_memory(mine.data, page), errc::already_registered);  // still registered
    PVMM_CHECK_OK(registration.release());
    PVMM_CHECK_ERRC(unregister_host_memory(mine.data), errc::not_registered);

    // Destructors and move-assignment: no backend call counted, the armed failure untouched, everything given back.
    const void* freed =
        check_teardown_not_injected([&] { return pinned_allocation::create(page).value(); },
                                    [&] { return host_registration::create(mine.data, 2 * page).value(); })
            .second;
    if (host_backend()) CHECK_FALSE(kernel_maps(freed));
    PVMM_CHECK_OK(register_host_memory(mine.data, 2 * page));  // the destroyed owner unregistered it
    PVMM_CHECK_OK(unregister_host_memory(mine.data));
  }
}  // TEST_SUITE
