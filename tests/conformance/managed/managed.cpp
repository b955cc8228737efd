// Managed memory: data written on the host read through a device-ordered copy and back; advice round trips and their
// aggregation over part of a range; prefetch read back as the last prefetch location; attach; every bad input with
// its error. Sizes are a few MiB, far below any device's free memory (a larger managed request can hang a GPU).
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {

bool has(const std::vector<location>& v, location l) { return std::find(v.begin(), v.end(), l) != v.end(); }
}  // namespace

TEST_SUITE("managed") {
  PVMM_CASE(
      "managed memory written on the host is read in stream order, and written in stream order is read on the host") {
    PVMM_REQUIRE_MANAGED(256);
    const std::size_t size = 4 * mib;
    auto memory = managed_allocation::create(size).value();
    CHECK(memory.size() == size);
    auto s = stream::create(0).value();
    const auto words = pattern(size, 31);
    std::memcpy(memory.data(), words.data(), size);  // the host writes through the pointer itself
    if (caps().managed.concurrent_access) PVMM_CHECK_OK(prefetch_async(memory.data(), size, location::device(0), s));
    CHECK(read_back(s, memory.data(), size) == words);
    const auto other = pattern(size, 32);
    PVMM_CHECK_OK(s.copy_async(memory.data(), other.data(), size));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(std::memcmp(memory.data(), other.data(), size) == 0);  // and reads it the same way
  }

  PVMM_CASE("advice round trips, and a range attribute is what all of its pages share") {
    PVMM_REQUIRE_MANAGED(256);
    const std::size_t half = 4 * mib;
    auto memory = managed_allocation::create(2 * half).value();
    char* p = static_cast<char*>(memory.data());
    auto whole = query_range(p, 2 * half).value();
    CHECK_FALSE(whole.read_mostly);
    CHECK_FALSE(whole.preferred_location.has_value());
    CHECK(whole.accessed_by.empty());

    PVMM_CHECK_OK(advise(p, half, advice::set_read_mostly));
    CHECK(query_range(p, half).value().read_mostly);
    CHECK_FALSE(query_range(p, 2 * half).value().read_mostly);  // half of it is not
    PVMM_CHECK_OK(advise(p, half, advice::unset_read_mostly));
    CHECK_FALSE(query_range(p, half).value().read_mostly);

    PVMM_CHECK_OK(advise(p, half, advice::set_preferred_location, location::device(0)));
    PVMM_CHECK_OK(advise(p + half, half, advice::set_preferred_location, location::host()));
    CHECK(query_range(p, half).value().preferred_location == location::device(0));
    CHECK(query_range(p + half, half).value().preferred_location == location::host());
    CHECK_FALSE(query_range(p, 2 * half).value().preferred_location.has_value());  // the halves differ
    PVMM_CHECK_OK(advise(p, 2 * half, advice::unset_preferred_location));
    CHECK_FALSE(query_range(p, half).value().preferred_location.has_value());

    PVMM_CHECK_OK(advise(p, 2 * half, advice::set_accessed_by, location::device(0)));
    PVMM_CHECK_OK(advise(p, half, advice::set_accessed_by, location::host()));
    auto all = query_range(p, 2 * half).value();
    CHECK(has(all.accessed_by, location::device(0)));
    CHECK_FALSE(has(all.accessed_by, location::host()));  // only half of the range
    CHECK(has(query_range(p, half).value().accessed_by, location::host()));
    PVMM_CHECK_OK(advise(p, 2 * half, advice::unset_accessed_by, location::device(0)));
    PVMM_CHECK_OK(advise(p, half, advice::unset_accessed_by, location::host()));
    CHECK(query_range(p, 2 * half).value().accessed_by.empty());
  }

  PVMM_CASE("a host NUMA node: accepted as preferred location (read back as none), read back as prefetch target") {
    PVMM_REQUIRE_MANAGED(256);
    PVMM_REQUIRE_CAPABILITY(caps().managed.host_numa_locations && caps().managed.location_attributes,
                            "host NUMA locations for managed memory (CUDA 13.0 driver)");
    auto memory = managed_allocation::create(2 * mib).value();
    auto s = stream::create(0).value();
    PVMM_CHECK_OK(advise(memory.data(), memory.size(), advice::set_preferred_location, location::host_numa(0)));
    CHECK_FALSE(query_range(memory.data(), memory.size()).value().preferred_location.has_value());  // as CUDA reports
    PVMM_CHECK_OK(prefetch_async(memory.data(), memory.size(), location::host_numa(0), s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(query_range(memory.data(), memory.size()).value().last_prefetch_location == location::host_numa(0));
    PVMM_CHECK_ERRC(advise(memory.data(), memory.size(), advice::set_preferred_location, location::host_numa(4096)),
                    errc::invalid_location);
  }

  PVMM_CASE("a prefetch reads back as the last prefetch location of the pages it moved") {
    PVMM_REQUIRE_MANAGED(256);
    PVMM_REQUIRE_CAPABILITY(caps().managed.concurrent_access, "prefetch of managed memory to a device");
    const std::size_t half = 4 * mib;
    auto memory = managed_allocation::create(2 * half).value();
    char* p = static_cast<char*>(memory.data());
    auto s = stream::create(0).value();
    PVMM_CHECK_OK(prefetch_async(p, half, location::device(0), s));
    PVMM_CHECK_OK(prefetch_async(p + half, half, location::host(), s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(query_range(p, half).value().last_prefetch_location == location::device(0));
    CHECK(query_range(p + half, half).value().last_prefetch_location == location::host());
    CHECK_FALSE(query_range(p, 2 * half).value().last_prefetch_location.has_value());
  }

  PVMM_CASE("attach: a host-attached allocation attached to one stream, then to all") {
    PVMM_REQUIRE_MANAGED(256);
    auto memory = managed_allocation::create(mib, attach_mode::host).value();
    auto s = stream::create(0).value();
    check_attach_to_stream_then_global(memory, s, 3);
  }

  PVMM_CASE("managed memory: every bad input, with its error, before the driver") {
    PVMM_REQUIRE_MANAGED(256);
    PVMM_CHECK_ERRC(managed_allocation::create(0), errc::invalid_size);
    PVMM_CHECK_ERRC(managed_allocation::create(mib, attach_mode::single), errc::invalid_argument);
    auto memory = managed_allocation::create(mib).value();
    auto s = stream::create(0).value();
    std::vector<char> ordinary(mib);
    char* p = static_cast<char*>(memory.data());
    PVMM_CHECK_ERRC(advise(ordinary.data(), 4096, advice::set_read_mostly), errc::invalid_argument);
    PVMM_CHECK_ERRC(advise(nullptr, 4096, advice::set_read_mostly), errc::invalid_argument);
    PVMM_CHECK_ERRC(advise(p, 0, advice::set_read_mostly), errc::invalid_size);
    PVMM_CHECK_ERRC(advise(p + 4096, mib, advice::set_read_mostly), errc::out_of_range);
    PVMM_CHECK_ERRC(advise(p, mib, advice::set_preferred_location, location::device(99)), errc::invalid_device);
    PVMM_CHECK_ERRC(advise(p, mib, advice::set_accessed_by, location::host_numa(4096)), errc::invalid_location);
    PVMM_CHECK_ERRC(advise(p, mib, static_cast<advice>(77)), errc::invalid_argument);
    // Advice about a processor names it: there is no default device.
    for (advice what : {advice::set_preferred_location, advice::set_accessed_by, advice::unset_accessed_by}) {
      const auto e = advise(p, mib, what);
      PVMM_CHECK_ERRC(e, errc::invalid_argument);
      CHECK(e.error().message().find("none was given") != std::string::npos);
    }
    PVMM_CHECK_ERRC(prefetch_async(p, mib, location::host(), stream_ref{}), errc::invalid_argument);
    PVMM_CHECK_ERRC(prefetch_async(p, mib, location::device(99), s), errc::invalid_device);
    PVMM_CHECK_ERRC(prefetch_async(ordinary.data(), mib, location::host(), s), errc::invalid_argument);
    PVMM_CHECK_ERRC(query_range(p, 2 * mib), errc::out_of_range);
    PVMM_CHECK_ERRC(attach_async(p, mib, static_cast<attach_mode>(9), s), errc::invalid_argument);
    check_release_twice(memory);
    PVMM_CHECK_ERRC(query_range(p, mib), errc::invalid_argument);  // freed: no longer managed memory
  }
}  // TEST_SUITE
