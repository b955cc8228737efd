// Hardening round 3 (issue 23): managed cases, each pinning a defect an attacker found.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <optional>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {
constexpr std::size_t gib = std::size_t{1} << 30;

/// Mappings the kernel holds of at least `size` bytes.
std::size_t mappings_of_at_least(std::size_t size) {
  std::ifstream maps("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && hi - lo >= size) ++n;
  }
  return n;
}

/// Resident bytes of this process (/proc/self/statm).
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t total = 0, resident = 0;
  statm >> total >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}
}  // namespace

#define PVMM_REQUIRE_MANAGED_HOST(why)                                   \
  do {                                                                   \
    PVMM_REQUIRE_DEVICE();                                               \
    PVMM_REQUIRE_CAPABILITY(caps().managed.supported, "managed memory"); \
    PVMM_REQUIRE_HOST_BACKEND(why);                                      \
  } while (0)

TEST_SUITE("managed") {
  PVMM_CASE("a 64 TiB managed allocation is made or refused as out_of_memory, never leaving its mapping behind") {
    PVMM_REQUIRE_MANAGED_HOST("asks for 64 TiB of managed memory: only the host backend reserves it lazily");
    const std::size_t size = std::size_t{64} << 40;
    const std::size_t before = mappings_of_at_least(size);
    std::optional<result<managed_allocation>> made;
    CHECK_NOTHROW(made.emplace(managed_allocation::create(size)));
    if (made && made->has_value()) {
      auto& memory = made->value();
      CHECK(memory.size() == size);
      char* p = static_cast<char*>(memory.data());
      PVMM_CHECK_OK(advise(p + size / 2, 4096, advice::set_read_mostly));
      CHECK(query_range(p + size / 2, 4096).value().read_mostly);
      CHECK_FALSE(query_range(p, size).value().read_mostly);
      PVMM_CHECK_OK(memory.release());
    } else if (made) {
      PVMM_CHECK_ERRC(*made, errc::out_of_memory);
    }
    made.reset();
    CHECK_MESSAGE(mappings_of_at_least(size) == before, "a mapping of 64 TiB was left behind");
  }

  PVMM_CASE("an untouched 16 GiB managed allocation costs far less resident memory than a record per page") {
    PVMM_REQUIRE_MANAGED_HOST("asks for 16 GiB of managed memory: only the host backend reserves it lazily");
    const std::size_t size = 16 * gib;
    const std::size_t before = resident_bytes();
    auto memory = managed_allocation::create(size).value();
    char* p = static_cast<char*>(memory.data());
    // A few distinct ranges of advice cost a few records, not a record per page.
    PVMM_CHECK_OK(advise(p + gib, 4096, advice::set_read_mostly));
    PVMM_CHECK_OK(advise(p + 2 * gib, 8 * gib, advice::set_accessed_by, location::host()));
    CHECK(query_range(p + gib, 4096).value().read_mostly);
    CHECK_FALSE(query_range(p, size).value().read_mostly);
    CHECK(query_range(p + 3 * gib, gib).value().accessed_by == std::vector<location>{location::host()});
    const std::size_t grown = resident_bytes() - std::min(resident_bytes(), before);
    CHECK_MESSAGE(grown < 8 * mib, "resident memory grew by " << grown << " bytes for an untouched allocation");
  }

  PVMM_CASE("query_range aggregates per page over runs of advice that were split and merged again") {
    PVMM_REQUIRE_MANAGED(64);
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    auto memory = managed_allocation::create(8 * page).value();
    char* p = static_cast<char*>(memory.data());
    PVMM_CHECK_OK(advise(p, 4 * page, advice::set_read_mostly));
    PVMM_CHECK_OK(advise(p + 4 * page, 4 * page, advice::set_read_mostly));
    CHECK(query_range(p, 8 * page).value().read_mostly);  // two runs, equal again: every page is read-mostly
    PVMM_CHECK_OK(advise(p + 3 * page, page, advice::unset_read_mostly));
    CHECK_FALSE(query_range(p, 8 * page).value().read_mostly);
    CHECK(query_range(p, 3 * page).value().read_mostly);
    CHECK(query_range(p + 4 * page, 4 * page).value().read_mostly);
    CHECK_FALSE(query_range(p + 3 * page + 1, 1).value().read_mostly);  // a byte reads its page
    PVMM_CHECK_OK(advise(p + page, 6 * page, advice::set_preferred_location, location::device(0)));
    CHECK(query_range(p + page, 6 * page).value().preferred_location == location::device(0));
    CHECK_FALSE(query_range(p, 2 * page).value().preferred_location.has_value());  // the first page has none
    PVMM_CHECK_OK(advise(p, 8 * page, advice::set_preferred_location, location::device(0)));
    CHECK(query_range(p, 8 * page).value().preferred_location == location::device(0));
    PVMM_CHECK_OK(advise(p + 3 * page, page, advice::set_read_mostly));
    CHECK(query_range(p, 8 * page).value().read_mostly);
  }

  PVMM_CASE("an explicit release that fails keeps the managed owner, teardown is never fault-injected") {
    PVMM_REQUIRE_MANAGED(64);
    auto memory = managed_allocation::create(mib).value();
    void* p = memory.data();
    check_failed_release_keeps(memory);  // still owning: the memory is still there, and still managed memory
    CHECK(memory.size() == mib);
    std::memset(p, 0x5a, mib);
    PVMM_CHECK_OK(advise(p, mib, advice::set_read_mostly));
    CHECK(query_range(p, mib).value().read_mostly);
    PVMM_CHECK_OK(memory.release());  // the retry
    CHECK_FALSE(memory.valid());

    // Move-assignment and the destructor free without a fault-injectable step: the armed failure stays armed,
    // no backend call is counted, and the memory is gone.
    auto [destroyed, replaced] =
        check_teardown_not_injected([] { return managed_allocation::create(mib).value(); }, [] { return 0; });
    if (host_backend()) {
      CHECK_FALSE(kernel_maps(destroyed));
      CHECK_FALSE(kernel_maps(replaced));
    }
  }
}  // TEST_SUITE
