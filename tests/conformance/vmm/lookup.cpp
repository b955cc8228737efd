// Address lookups (retain, query_access) against many live reservations: every byte of a live range is found,
// nothing outside one is, and freeing ranges in any order forgets exactly those (the registry's deletion
// must keep every other entry reachable).
#include <algorithm>
#include <random>

#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {
const char* const reserved_unmapped = "the address is reserved but not mapped";
const char* const unknown = "no pvmm mapping contains the address";

/// What query_access says about an address no mapping covers: which of the two not_mapped details it gave.
std::string lookup_detail(const void* address) {
  auto a = query_access(location::device(0), address);
  REQUIRE_FALSE(a);
  REQUIRE(a.error().code == errc::not_mapped);
  return a.error().detail;
}
}  // namespace

TEST_SUITE("vmm") {
  PVMM_CASE("lookups find every byte of 1,200 live reservations of mixed sizes, and forget each one freed") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = reservation_granularity().value();
    const std::size_t sizes[] = {1, 2, 3, 7, 16, 33};  // in granules: several levels, ranges straddling blocks
    std::vector<address_reservation> ranges;
    for (int i = 0; i < 1200; ++i) ranges.push_back(address_reservation::reserve(sizes[i % 6] * g).value());
    auto edges = [](const address_reservation& r) {
      return std::vector<const char*>{r.at<char>(0), r.at<char>(r.size() / 2), r.at<char>(r.size() - 1)};
    };
    for (const auto& r : ranges)
      for (const char* p : edges(r)) REQUIRE(lookup_detail(p) == reserved_unmapped);

    // A mapping inside one of them is found through the same index, from its first byte to its last.
    auto memory = physical_allocation::create(granule(), default_properties()).value();
    address_reservation& host = ranges[5];  // 33 granules
    host.map(host.size() - memory.size(), memory).value();
    CHECK(physical_allocation::retain(host.at<char>(host.size() - 1)).value().size() == memory.size());
    CHECK(physical_allocation::retain(host.at<char>(host.size() - memory.size())).value().size() == memory.size());
    CHECK(lookup_detail(host.at<char>(0)) == reserved_unmapped);
    host.unmap(host.size() - memory.size(), memory.size()).value();

    // Free a shuffled half; the rest stay found, the freed are gone (unless the driver reused the range).
    std::mt19937 shuffle(20261122);
    std::vector<std::size_t> order(ranges.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), shuffle);
    std::vector<std::vector<const char*>> freed;
    for (std::size_t k = 0; k < order.size() / 2; ++k) {
      freed.push_back(edges(ranges[order[k]]));
      ranges[order[k]].release().value();
    }
    for (const auto& r : ranges)
      if (r)
        for (const char* p : edges(r)) REQUIRE(lookup_detail(p) == reserved_unmapped);
    for (const auto& e : freed)
      for (const char* p : e) {
        const bool reused = std::any_of(ranges.begin(), ranges.end(), [&](const address_reservation& r) {
          return r && p >= r.at<char>(0) && p < r.at<char>(r.size());
        });
        REQUIRE(lookup_detail(p) == (reused ? reserved_unmapped : unknown));
      }
    ranges.clear();
    for (const auto& e : freed) CHECK(lookup_detail(e[0]) == unknown);
  }
}
