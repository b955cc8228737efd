// Invariant 1: composite operations roll back completely when any step fails. Every backend call of the
// operation is made to fail in turn (pvmm::testing fault injection); each time, nothing may remain.
#include "buffers.hpp"

using namespace pvmm;
using namespace pvmm_test;

TEST_SUITE("rollback") {
  PVMM_CASE("create + reserve + map + grant rolls back at every failure point") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    const auto props = default_properties();
    auto points = sweep_failures([&] {
      auto memory = physical_allocation::create(g, props);
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
    MESSAGE("failure points swept: " << points);
  }

  PVMM_CASE("import + map + grant rolls back at every failure point") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    const std::size_t g = granule();
    auto memory = physical_allocation::create(g, default_properties()).value();
    auto fd = memory.export_posix_fd().value();
    auto points = sweep_failures([&] {
      auto imported = physical_allocation::import_posix_fd(fd.get(), g);
      if (!imported) return false;
      auto range = address_reservation::reserve(g);
      if (!range) return false;
      return range->map_and_grant(0, *imported, 0, g, {rw()}).has_value();
    });
    CHECK(points >= 3);
    MESSAGE("failure points swept: " << points);
  }

  PVMM_CASE("a failed unmap leaves the mapping recorded, and the destructor still cleans up") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(g, default_properties()).value();
    auto range = address_reservation::reserve(g).value();
    range.map_and_grant(0, memory, 0, g, {rw()}).value();
    testing::fail_nth_backend_call(1);
    auto r = range.unmap(0, g);
    testing::fail_nth_backend_call(0);
    CHECK(r.code() == errc::backend_error);
    CHECK(range.mapping_count() == 1);  // the table stays true to what is mapped
    PVMM_CHECK_OK(range.unmap(0, g));
  }

  PVMM_CASE("an unmap or grant of several mappings failing part-way releases its claim on those left") {
    // The claim of a range is released by walking the range again (no list of its mappings is kept): what is left
    // mapped after a failure must be free for the next call, not busy.
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(g, default_properties()).value();
    auto range = address_reservation::reserve(3 * g).value();
    const std::size_t live = query_live_objects().mappings;
    for (std::size_t i = 0; i < 3; ++i) range.map(i * g, memory, 0, g).value();
    CHECK(query_live_objects().mappings == live + 3);  // each map's claim slot, taken again by the next, says made
    PVMM_CHECK_ERRC(range.map(2 * g, memory, 0, g), errc::overlapping_mapping);
    testing::fail_nth_backend_call(1);
    PVMM_CHECK_ERRC(range.set_access(0, 3 * g, {rw()}), errc::backend_error);
    testing::fail_nth_backend_call(0);
    PVMM_CHECK_OK(range.set_access(0, 3 * g, {rw()}));  // not busy
    testing::fail_nth_backend_call(2);                  // the first mapping is unmapped, the second fails
    PVMM_CHECK_ERRC(range.unmap(0, 3 * g), errc::backend_error);
    testing::fail_nth_backend_call(0);
    CHECK(range.mapping_count() == 2);
    CHECK(query_live_objects().mappings == live + 2);
    testing::fail_nth_backend_call(1);  // a failed map leaves nothing recorded, and its slot free
    PVMM_CHECK_ERRC(range.map(0, memory, 0, g), errc::backend_error);
    testing::fail_nth_backend_call(0);
    CHECK(range.mapping_count() == 2);
    CHECK(query_live_objects().mappings == live + 2);
    PVMM_CHECK_OK(range.set_access(g, 2 * g, {rw()}));  // the two left are not busy
    PVMM_CHECK_OK(range.unmap(g, 2 * g));
    CHECK(range.mapping_count() == 0);
  }

  PVMM_CASE("a growable_buffer shrink rolls back at every failure point: no hole, data intact, later shrinks work") {
    PVMM_REQUIRE_DEVICE();
    growable_options o = granule_chunks(8);
    const std::size_t c = o.chunk_size;
    auto shrink_calls = [&] {
      auto b = growable_buffer::create(o).value();
      b.resize(4 * c).value();
      b.resize(c).value();  // warm: pvmm's caches are filled
      b.resize(4 * c).value();
      const std::size_t before = testing::backend_call_count();
      b.resize(c).value();
      return testing::backend_call_count() - before;
    }();
    auto buffer = growable_buffer::create(o).value();
    buffer.resize(4 * c).value();
    write_words(buffer.data(), pattern(4 * c, 77));
    auto points = sweep_failures([&] {
      auto r = buffer.resize(c);
      if (r) return true;
      CHECK(r.error().native_name == "PVMM_INJECTED_FAILURE");
      REQUIRE(buffer.size() == 4 * c);  // rolled back: every chunk still mapped
      CHECK(read_words(buffer.data(), 4 * c) == pattern(4 * c, 77));
      return false;
    });
    CHECK(points == shrink_calls);
    MESSAGE("failure points swept: " << points);
    CHECK(points >= 3);
    CHECK(buffer.size() == c);
    CHECK(read_words(buffer.data(), c) == pattern(c, 77));
    PVMM_CHECK_OK(buffer.resize(0));
    CHECK(buffer.size() == 0);
  }

  PVMM_CASE("export_buffer fails at every failure point, hiding none, and leaks nothing") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    const auto chunks = granule_allocations(3);
    const auto calls = backend_calls_of([&] { return export_buffer(chunks, handle_types::posix_fd).has_value(); });
    auto points = sweep_failures([&] {
      auto r = export_buffer(chunks, handle_types::posix_fd);
      if (!r) CHECK(r.error().native_name == "PVMM_INJECTED_FAILURE");
      return r.has_value();
    });
    CHECK(points == calls);
    MESSAGE("failure points swept: " << points);
  }

  PVMM_CASE("import_buffer rolls back at every failure point and never blames the peer for a local failure") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    const auto chunks = granule_allocations(3);
    auto out = export_buffer(chunks, handle_types::posix_fd).value();
    const auto fds = raw_fds(out.fds);
    auto import = [&] { return import_buffer(out.descriptor, fds.data(), fds.size(), {rw()}); };
    const auto calls = backend_calls_of([&] { return import().has_value(); });
    auto points = sweep_failures([&] {
      auto r = import();
      if (!r) {
        CHECK_MESSAGE(r.code() == errc::backend_error, r.error().message());
        CHECK(r.error().native_name == "PVMM_INJECTED_FAILURE");
      }
      return r.has_value();
    });
    CHECK(points == calls);
    MESSAGE("failure points swept: " << points);
  }
}  // TEST_SUITE
