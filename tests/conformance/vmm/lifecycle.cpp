// The portable semantics of create / reserve / map / grant / unmap / release, with real data.
#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

TEST_SUITE("lifecycle") {
  PVMM_CASE("full lifecycle: create, reserve, map, grant, write, read back, unmap, release") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(2 * g, default_properties()).value();
    CHECK(memory.size() == 2 * g);
    auto range = address_reservation::reserve(2 * g).value();
    CHECK(range.size() == 2 * g);
    void* p = range.map(0, memory, 0, 2 * g).value();
    CHECK(p == range.address());
    CHECK(query_access(location::device(0), p).value() == access::none);  // invariant 6: no access until granted
    PVMM_CHECK_OK(range.set_access(0, 2 * g, {rw()}));
    CHECK(query_access(location::device(0), p).value() == access::read_write);
    auto words = pattern(2 * g, 1);
    write_words(p, words);
    CHECK(read_words(p, 2 * g) == words);
    PVMM_CHECK_OK(range.unmap(0, 2 * g));
    CHECK(range.mapping_count() == 0);
    PVMM_CHECK_OK(memory.release());
    PVMM_CHECK_OK(range.release());
    CHECK_FALSE(range.valid());
  }

  PVMM_CASE("several allocations back to back under one grant, data crossing their boundaries") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    constexpr int chunks = 4;
    auto range = address_reservation::reserve(chunks * g).value();
    std::vector<physical_allocation> memory;
    for (int i = 0; i < chunks; ++i) {
      memory.push_back(physical_allocation::create(g, default_properties()).value());
      range.map(i * g, memory.back(), 0, g).value();
    }
    PVMM_CHECK_OK(range.set_access(0, chunks * g, {rw()}));  // one grant over all four mappings
    auto words = pattern(chunks * g, 2);
    write_words(range.address(), words);  // one write spanning every boundary
    CHECK(read_words(range.address(), chunks * g) == words);
    // A read straddling the boundary between chunk 1 and 2.
    auto straddle = read_words(range.at(2 * g - 64), 128);
    CHECK(straddle == std::vector<std::uint32_t>(words.begin() + (2 * g - 64) / 4, words.begin() + (2 * g + 64) / 4));
    // Each chunk holds its own part: map chunk 2 alone elsewhere and compare.
    auto other = address_reservation::reserve(g).value();
    other.map_and_grant(0, memory[2], 0, g, {rw()}).value();
    CHECK(read_words(other.address(), g) ==
          std::vector<std::uint32_t>(words.begin() + 2 * g / 4, words.begin() + 3 * g / 4));
  }

  PVMM_CASE("one allocation mapped at two addresses: written through one, read through the other") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(g, default_properties()).value();
    auto a = address_reservation::reserve(g).value();
    auto b = address_reservation::reserve(g).value();
    void* pa = a.map_and_grant(0, memory, 0, g, {rw()}).value();
    void* pb = b.map_and_grant(0, memory, 0, g, {rw()}).value();
    CHECK(pa != pb);
    auto words = pattern(g, 3);
    write_words(pa, words);
    CHECK(read_words(pb, g) == words);
    auto again = pattern(g, 4);
    write_words(pb, again);
    CHECK(read_words(pa, g) == again);
  }

  PVMM_CASE("an address remapped to another allocation sees the new data and needs a new grant") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto first = physical_allocation::create(g, default_properties()).value();
    auto second = physical_allocation::create(g, default_properties()).value();
    auto range = address_reservation::reserve(g).value();
    void* p = range.map_and_grant(0, first, 0, g, {rw()}).value();
    write_words(p, pattern(g, 5));
    PVMM_CHECK_OK(range.unmap(0, g));
    void* q = range.map(0, second, 0, g).value();
    CHECK(q == p);
    CHECK(query_access(location::device(0), q).value() == access::none);  // the old grant is gone
    PVMM_CHECK_OK(range.set_access(0, g, {rw()}));
    write_words(q, pattern(g, 6));
    CHECK(read_words(q, g) == pattern(g, 6));
    // The first allocation still holds its own data.
    auto view = address_reservation::reserve(g).value();
    CHECK(read_words(view.map_and_grant(0, first, 0, g, {rw()}).value(), g) == pattern(g, 5));
  }

  PVMM_CASE("releasing an allocation while it is mapped keeps the mapping valid until it is unmapped") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    const auto before = query_live_objects();
    auto memory = physical_allocation::create(g, default_properties()).value();
    auto range = address_reservation::reserve(g).value();
    void* p = range.map_and_grant(0, memory, 0, g, {rw()}).value();
    write_words(p, pattern(g, 7));
    PVMM_CHECK_OK(memory.release());
    CHECK_FALSE(memory.valid());
    CHECK(query_live_objects().allocations == before.allocations + 1);  // kept alive by the mapping
    CHECK(read_words(p, g) == pattern(g, 7));
    PVMM_CHECK_OK(range.unmap(0, g));
    CHECK(query_live_objects().allocations == before.allocations);  // gone with the mapping
  }

  PVMM_CASE("a mapped range grows in place at the tail of its reservation") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto range = address_reservation::reserve(8 * g).value();
    std::vector<physical_allocation> chunks;
    chunks.push_back(physical_allocation::create(g, default_properties()).value());
    range.map_and_grant(0, chunks[0], 0, g, {rw()}).value();
    write_words(range.address(), pattern(g, 8));
    void* base = range.address();
    for (std::size_t mapped = g; mapped < 4 * g; mapped += g) {
      chunks.push_back(physical_allocation::create(g, default_properties()).value());
      range.map_and_grant(mapped, chunks.back(), 0, g, {rw()}).value();  // grant the new chunk only
    }
    CHECK(range.address() == base);
    CHECK(read_words(base, g) == pattern(g, 8));  // old data untouched
    auto tail = pattern(3 * g, 9);
    write_words(range.at(g), tail);
    CHECK(read_words(range.at(g), 3 * g) == tail);
    CHECK(range.mapping_count() == 4);
    PVMM_CHECK_OK(range.unmap(0, 4 * g));  // one call over four whole mappings
    CHECK(range.mapping_count() == 0);
  }

  PVMM_CASE("growing past a reservation: a fixed-address reservation right after it, or a verified refusal") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto first = address_reservation::reserve(g).value();
    auto tail = address_reservation::reserve(g, 0, first.at(g));
    if (tail) {
      CHECK(tail->address() == first.at(g));  // invariant 8: the hint was honoured exactly
    } else {
      CHECK(tail.code() == errc::address_unavailable);  // the range that landed elsewhere was given back
    }
  }

  PVMM_CASE("access transitions: none -> read -> read_write -> read -> none") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(g, default_properties()).value();
    auto range = address_reservation::reserve(g).value();
    void* p = range.map(0, memory, 0, g).value();
    auto now = [&] { return query_access(location::device(0), p).value(); };
    CHECK(now() == access::none);
    PVMM_CHECK_OK(range.set_access(0, g, {rw()}));
    CHECK(now() == access::read_write);
    write_words(p, pattern(g, 10));
    PVMM_CHECK_OK(range.set_access(0, g, {ro()}));
    CHECK(now() == access::read);
    CHECK(read_words(p, g) == pattern(g, 10));  // still readable
    auto faults = testing::write_faults(p);
    if (faults) {
      CHECK_MESSAGE(*faults, "a write through a read-only mapping was not rejected");
    } else {
      CHECK(faults.code() == errc::not_supported);
    }
    CHECK(read_words(p, g) == pattern(g, 10));  // and nothing was written
    PVMM_CHECK_OK(range.set_access(0, g, {rw()}));
    CHECK(now() == access::read_write);
    auto writable = testing::write_faults(p);
    if (writable) CHECK_FALSE(*writable);
    PVMM_CHECK_OK(range.set_access(0, g, {{location::device(0), access::none}}));
    CHECK(now() == access::none);
  }

  PVMM_CASE("properties are read back from the allocation") {
    PVMM_REQUIRE_DEVICE();
    auto props = default_properties();
    auto memory = physical_allocation::create(granule(), props).value();
    auto back = memory.properties().value();
    CHECK(back.location == props.location);
    CHECK(back.exportable == props.exportable);
    CHECK(memory.native_handle() != allocation_handle{});
  }

  PVMM_CASE("retain from a mapped address adds exactly one reference, released once") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    const auto before = query_live_objects();
    auto memory = physical_allocation::create(2 * g, default_properties()).value();
    auto range = address_reservation::reserve(2 * g).value();
    void* p = range.map_and_grant(0, memory, 0, 2 * g, {rw()}).value();
    write_words(p, pattern(2 * g, 11));
    auto retained = physical_allocation::retain(range.at(g + 128)).value();  // any address inside the mapping
    CHECK(retained.size() == 2 * g);
    CHECK(retained.native_handle() == memory.native_handle());  // the same physical memory
    CHECK(query_live_objects().allocations == before.allocations + 1);
    PVMM_CHECK_OK(memory.release());
    PVMM_CHECK_OK(range.unmap(0, 2 * g));
    // The retained reference alone keeps the memory: map it again and find the data.
    void* q = range.map_and_grant(0, retained, 0, 2 * g, {rw()}).value();
    CHECK(read_words(q, 2 * g) == pattern(2 * g, 11));
    PVMM_CHECK_OK(range.unmap(0, 2 * g));
    PVMM_CHECK_OK(retained.release());
    CHECK(query_live_objects().allocations == before.allocations);
  }

  PVMM_CASE("a mapping from a nonzero physical offset, where the device can") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(2 * g, default_properties()).value();
    auto whole = address_reservation::reserve(2 * g).value();
    whole.map_and_grant(0, memory, 0, 2 * g, {rw()}).value();
    write_words(whole.address(), pattern(2 * g, 12));
    auto part = address_reservation::reserve(g).value();
    auto p = part.map(0, memory, g, g);
    if (!caps().vmm.map_at_physical_offset) {
      CHECK(p.code() == errc::not_supported);
      return;
    }
    PVMM_REQUIRE_VALUE(p);
    PVMM_CHECK_OK(part.set_access(0, g, {rw()}));
    auto all = pattern(2 * g, 12);
    CHECK(read_words(*p, g) == std::vector<std::uint32_t>(all.begin() + g / 4, all.end()));
  }

  PVMM_CASE("the destructors tear everything down in the right order, whatever the declaration order") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    const auto before = query_live_objects();
    {
      address_reservation range;
      physical_allocation memory;
      range = address_reservation::reserve(2 * g).value();
      memory = physical_allocation::create(g, default_properties()).value();
      range.map_and_grant(0, memory, 0, g, {rw()}).value();
      range.map_and_grant(g, memory, 0, g, {rw()}).value();
      // memory is destroyed first (declared last), the reservation then unmaps both and frees the range.
    }
    CHECK(query_live_objects() == before);
    {
      physical_allocation memory = physical_allocation::create(g, default_properties()).value();
      address_reservation range = address_reservation::reserve(g).value();
      range.map_and_grant(0, memory, 0, g, {rw()}).value();
      address_reservation moved = std::move(range);  // moved-from owners release nothing
      CHECK_FALSE(range.valid());
      CHECK(moved.mapping_count() == 1);
    }
    CHECK(query_live_objects() == before);
  }

  PVMM_CASE("reservations honour a requested alignment") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    const std::size_t alignment = 16 * g;
    auto range = address_reservation::reserve(g, alignment).value();
    CHECK(reinterpret_cast<std::uintptr_t>(range.address()) % alignment == 0);
  }

}  // TEST_SUITE
