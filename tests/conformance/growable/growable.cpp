// growable_buffer: growth in place, growth into the adjacent range, moving without copying, shrinking,
// and complete rollback at every failure point.
#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {

/// Takes the addresses right after the buffer (if something else has not already), so it cannot grow in place.
/// Returns the blocking reservation (empty when the addresses were taken already).
address_reservation block_tail(const growable_buffer& buffer) {
  auto r = address_reservation::reserve(buffer.chunk_size(), 0, static_cast<char*>(buffer.data()) + buffer.capacity());
  if (!r) {
    REQUIRE_MESSAGE(r.code() == errc::address_unavailable, r.error().message());
    return {};
  }
  return std::move(*r);
}

/// Whether the addresses right after the buffer are free (probed with a reservation given back at once).
bool tail_is_free(const growable_buffer& buffer) {
  auto r = address_reservation::reserve(buffer.chunk_size(), 0, static_cast<char*>(buffer.data()) + buffer.capacity());
  return r.has_value();
}
}  // namespace

TEST_SUITE("growable buffer") {
  PVMM_CASE("grows in place: old data stays, only new chunks are created, the address does not change") {
    PVMM_REQUIRE_DEVICE();
    auto buffer = growable_buffer::create(granule_chunks(8)).value();
    const std::size_t c = buffer.chunk_size();
    auto first = buffer.resize(c).value();
    CHECK(first.chunks_added == 1);
    CHECK_FALSE(first.moved);
    write_words(buffer.data(), pattern(c, 80));
    void* at = buffer.data();
    const auto live = query_live_objects();
    auto more = buffer.resize(3 * c + 1).value();  // rounds up to 4 chunks
    CHECK(more.chunks_added == 3);
    CHECK(buffer.size() == 4 * c);
    CHECK(buffer.data() == at);
    CHECK(query_live_objects().allocations == live.allocations + 3);
    CHECK(read_words(at, c) == pattern(c, 80));
    CHECK(query_access(location::device(0), static_cast<char*>(at) + 3 * c).value() == access::read_write);
    write_words(static_cast<char*>(at) + c, pattern(3 * c, 81));
    CHECK(read_words(static_cast<char*>(at) + c, 3 * c) == pattern(3 * c, 81));
  }

  PVMM_CASE("when the adjacent addresses are taken it moves, remapping the same chunks: data intact, no copy") {
    PVMM_REQUIRE_DEVICE();
    auto buffer = growable_buffer::create(granule_chunks(2)).value();
    const std::size_t c = buffer.chunk_size();
    buffer.resize(2 * c).value();
    write_words(buffer.data(), pattern(2 * c, 82));
    void* old_address = buffer.data();
    std::vector<allocation_handle> handles;
    for (auto& chunk : buffer.chunks()) handles.push_back(chunk.native_handle());
    auto blocker = block_tail(buffer);
    auto outcome = buffer.resize(3 * c).value();
    CHECK(outcome.moved);
    CHECK(buffer.data() != old_address);
    CHECK(outcome.address == buffer.data());
    CHECK(buffer.reservation_count() == 1);
    for (std::size_t i = 0; i < handles.size(); ++i) CHECK(buffer.chunks()[i].native_handle() == handles[i]);
    CHECK(read_words(buffer.data(), 2 * c) == pattern(2 * c, 82));
    write_words(static_cast<char*>(buffer.data()) + 2 * c, pattern(c, 83));
    CHECK(read_words(static_cast<char*>(buffer.data()) + 2 * c, c) == pattern(c, 83));
  }

  PVMM_CASE("when the adjacent addresses are free it extends into them, both reservations are freed at the end") {
    PVMM_REQUIRE_DEVICE();
    const auto live = query_live_objects();
    {
      auto buffer = growable_buffer::create(granule_chunks(1)).value();
      const std::size_t c = buffer.chunk_size();
      buffer.resize(c).value();
      write_words(buffer.data(), pattern(c, 84));
      auto outcome = buffer.resize(2 * c).value();
      if (!outcome.moved) CHECK(buffer.reservation_count() == 2);  // invariant 5: it owns two ranges now
      CHECK(read_words(buffer.data(), c) == pattern(c, 84));
      write_words(buffer.data(), pattern(2 * c, 85));  // one write across the two reservations
      CHECK(read_words(buffer.data(), 2 * c) == pattern(2 * c, 85));
    }
    CHECK(query_live_objects() == live);
  }

  PVMM_CASE("grown in place across two reservations: one copy spans both, and stops at the second's end") {
    PVMM_REQUIRE_DEVICE();
    // The addresses right after a new buffer are free on GPU drivers (they reserve upwards) and taken on Linux
    // (mmap places downwards, right below the last range): a range reserved first, given back once the buffer
    // lies right below it, leaves them free on both.
    auto above = address_reservation::reserve(4 * granule()).value();
    auto buffer = growable_buffer::create(granule_chunks(1)).value();
    const std::size_t c = buffer.chunk_size();
    buffer.resize(c).value();
    if (static_cast<char*>(buffer.data()) + buffer.capacity() == above.address()) PVMM_CHECK_OK(above.release());
    PVMM_SKIP_UNLESS(tail_is_free(buffer), "the addresses after the buffer are taken: it would move");
    auto outcome = buffer.resize(2 * c).value();
    PVMM_SKIP_UNLESS(!outcome.moved, "the buffer moved: its addresses were taken meanwhile");
    REQUIRE(buffer.reservation_count() == 2);
    char* const at = static_cast<char*>(buffer.data());
    write_words(at, pattern(2 * c, 88));  // [at, at + 2c): the first reservation's chunk and the second's
    CHECK(read_words(at, 2 * c) == pattern(2 * c, 88));
    write_words(at + c / 2, pattern(c, 89));  // from the middle of one into the middle of the other
    CHECK(read_words(at + c / 2, c) == pattern(c, 89));
    std::vector<std::uint32_t> words(c / 2);  // past the second reservation's end: out_of_range, nothing copied
    PVMM_CHECK_ERRC(testing::copy_to_mapping(at + buffer.capacity() - c / 4, words.data(), c / 2), errc::out_of_range);
  }

  PVMM_CASE("shrinking unmaps and releases the tail chunks") {
    PVMM_REQUIRE_DEVICE();
    auto buffer = growable_buffer::create(granule_chunks(8)).value();
    const std::size_t c = buffer.chunk_size();
    buffer.resize(4 * c).value();
    write_words(buffer.data(), pattern(c, 86));
    const auto live = query_live_objects();
    auto outcome = buffer.resize(c).value();
    CHECK(outcome.chunks_removed == 3);
    CHECK(query_live_objects().allocations == live.allocations - 3);
    CHECK(query_live_objects().mappings == live.mappings - 3);
    CHECK(read_words(buffer.data(), c) == pattern(c, 86));
    PVMM_CHECK_ERRC(query_access(location::device(0), static_cast<char*>(buffer.data()) + c), errc::not_mapped);
  }

  PVMM_CASE("a failed resize rolls back completely, at every failure point, in place and when moving") {
    PVMM_REQUIRE_DEVICE();
    for (bool blocked : {false, true}) {
      auto buffer = growable_buffer::create(granule_chunks(2)).value();
      const std::size_t c = buffer.chunk_size();
      buffer.resize(2 * c).value();
      write_words(buffer.data(), pattern(2 * c, 87));
      address_reservation blocker;
      if (blocked) blocker = block_tail(buffer);
      const bool expect_move = blocked || !tail_is_free(buffer);
      for (std::size_t n = 1; n < 64; ++n) {
        const auto live = query_live_objects();
        void* at = buffer.data();
        testing::fail_nth_backend_call(n);
        auto r = buffer.resize(4 * c);
        testing::fail_nth_backend_call(0);
        if (r) {
          CHECK(r->moved == expect_move);
          MESSAGE("failure points swept (" << std::string(expect_move ? "moving" : "in place") << "): " << n - 1);
          break;
        }
        CHECK_MESSAGE(query_live_objects() == live, "failure at call " << n << " leaked");
        CHECK(buffer.size() == 2 * c);
        CHECK(buffer.data() == at);
        CHECK(buffer.reservation_count() == 1);
        CHECK(read_words(buffer.data(), 2 * c) == pattern(2 * c, 87));
      }
      CHECK(buffer.size() == 4 * c);
      CHECK(read_words(buffer.data(), 2 * c) == pattern(2 * c, 87));
    }
  }

  PVMM_CASE("bad input: no device to grant, and a chunk size off the granularity") {
    PVMM_REQUIRE_DEVICE();
    growable_options o = granule_chunks(2);
    o.access.clear();
    PVMM_CHECK_ERRC(growable_buffer::create(o), errc::invalid_argument);
    o = granule_chunks(2);
    o.chunk_size = granule() + 1;
    PVMM_CHECK_ERRC(growable_buffer::create(o), errc::unaligned);
    growable_buffer empty;
    PVMM_CHECK_ERRC(empty.resize(1), errc::already_released);
  }

  PVMM_CASE("release gives every chunk and range back now, twice is already_released") {
    PVMM_REQUIRE_DEVICE();
    auto buffer = growable_buffer::create(granule_chunks(2)).value();
    const std::size_t c = buffer.chunk_size();
    buffer.resize(3 * c).value();  // past the first range: two reservations, three chunks
    write_words(buffer.data(), pattern(3 * c, 70));
    void* const address = buffer.data();
    const std::size_t capacity = buffer.capacity();
    CHECK(buffer.valid());
    PVMM_CHECK_OK(buffer.release());
    CHECK_FALSE(buffer);
    CHECK(buffer.data() == nullptr);
    CHECK(buffer.size() == 0);
    // The addresses are free again (and the leak check sees no chunk left): they can be reserved at once.
    PVMM_CHECK_OK(address_reservation::reserve(capacity, 0, address));
    PVMM_CHECK_ERRC(buffer.release(), errc::already_released);
    PVMM_CHECK_ERRC(buffer.resize(c), errc::already_released);
  }

}  // TEST_SUITE
