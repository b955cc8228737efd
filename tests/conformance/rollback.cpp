// Invariant 1: composite operations roll back completely when any step fails. Every backend call of the
// operation is made to fail in turn (pvmm::testing fault injection); each time, nothing may remain.
#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {

/// Fails the 1st, 2nd, ... backend call of `operation` until it succeeds; after every failure the live
/// objects and fds must be exactly as before. Returns how many failure points were exercised.
template <class Operation>
std::size_t sweep_failures(Operation operation) {
  for (std::size_t n = 1; n < 64; ++n) {
    const auto live = query_live_objects();
    const auto fd_count = open_fd_count();
    testing::fail_nth_backend_call(n);
    bool ok = operation();
    testing::fail_nth_backend_call(0);
    if (ok) return n - 1;
    CHECK_MESSAGE(query_live_objects() == live, "failure at backend call " << n << " leaked pvmm objects");
    CHECK_MESSAGE(open_fd_count() == fd_count, "failure at backend call " << n << " leaked fds");
  }
  FAIL("the operation never succeeded");
  return 0;
}

}  // namespace

TEST_SUITE("rollback") {
  PVMM_CASE("create + reserve + map + grant rolls back at every failure point") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    const auto props = default_properties();
    auto points = sweep_failures([&] {
      auto memory = physical_allocation::create(props, g);
      if (!memory) {
        CHECK(memory.error().native_name == "PVMM_INJECTED_FAILURE");
        return false;
      }
      auto range = address_reservation::reserve(g);
      if (!range) return false;
      auto p = range->map_and_grant(0, *memory, 0, g, {rw()});
      if (!p) {
        CHECK(range->mapping_count() == 0);  // map_and_grant undid its map
        return false;
      }
      write_words(*p, pattern(g, 50));
      return read_words(*p, g) == pattern(g, 50);
    });
    CHECK(points >= 4);
  }

  PVMM_CASE("import + map + grant rolls back at every failure point") {
    PVMM_REQUIRE_DEVICE();
    if (!caps().posix_fd_handles) return;
    const std::size_t g = granule();
    auto memory = physical_allocation::create(default_properties(), g).value();
    auto fd = memory.export_posix_fd().value();
    auto points = sweep_failures([&] {
      auto imported = physical_allocation::import_posix_fd(fd.get(), g);
      if (!imported) return false;
      auto range = address_reservation::reserve(g);
      if (!range) return false;
      return range->map_and_grant(0, *imported, 0, g, {rw()}).has_value();
    });
    CHECK(points >= 3);
  }

  PVMM_CASE("a failed unmap leaves the mapping recorded, and the destructor still cleans up") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(default_properties(), g).value();
    auto range = address_reservation::reserve(g).value();
    range.map_and_grant(0, memory, 0, g, {rw()}).value();
    testing::fail_nth_backend_call(1);
    auto r = range.unmap(0, g);
    testing::fail_nth_backend_call(0);
    CHECK(r.code() == errc::backend_error);
    CHECK(range.mapping_count() == 1);  // the table stays true to what is mapped
    PVMM_CHECK_OK(range.unmap(0, g));
  }

}  // TEST_SUITE
