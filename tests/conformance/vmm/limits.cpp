// Sizes at the edges (invariant 11): every sum and round-up near SIZE_MAX is refused with an error that says
// so, never wrapped into a "successful" reservation, allocation or resize; memory the device cannot provide
// is refused at create, as a GPU refuses it.
#include <cstdint>
#include <limits>

#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {
constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();

/// A reservation-granularity multiple: the neutral layer's unit (the largest minimum granularity).
std::size_t reservation_unit() {
  std::size_t unit = 0;
  for (int d = 0; d < device_count().value(); ++d) unit = std::max(unit, granule(d));
  return unit;
}
}  // namespace

TEST_SUITE("limits") {
  PVMM_CASE("reserve: size + alignment past SIZE_MAX is out_of_memory, not a wrapped 16 EiB range") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t unit = reservation_unit();
    const std::size_t huge = size_max - unit + 1;  // a multiple of the (power-of-two) unit
    PVMM_CHECK_ERRC(address_reservation::reserve(huge, 2 * unit), errc::out_of_memory);
    PVMM_CHECK_ERRC(address_reservation::reserve(huge, std::size_t{1} << 40), errc::out_of_memory);
    PVMM_CHECK_ERRC(address_reservation::reserve(size_max - 2 * unit + 1, 4 * unit), errc::out_of_memory);
    // A size that cannot even be rounded up to the unit says so, with no bogus "round up to" hint.
    auto r = address_reservation::reserve(size_max);
    PVMM_CHECK_ERRC(r, errc::out_of_memory);
    if (!r) CHECK(r.error().hint.find("round up") == std::string::npos);
  }

  PVMM_CASE("create: a size that cannot be rounded, and more memory than the device has, are out_of_memory") {
    PVMM_REQUIRE_DEVICE();
    const auto props = default_properties();
    PVMM_CHECK_ERRC(physical_allocation::create(size_max, props), errc::out_of_memory);
    // Refused at create on every backend (the host commits its memory), never at first touch.
    const std::size_t g = granule();
    const std::size_t total = query_device(0).value().total_memory;
    const std::size_t beyond = std::min<std::size_t>(std::size_t{64} << 40, total * 4) / g * g;
    REQUIRE(beyond > total);
    PVMM_CHECK_ERRC(physical_allocation::create(beyond, props), errc::out_of_memory);
  }

  PVMM_CASE("map: offsets and sizes whose sums wrap are out_of_range") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(g, default_properties()).value();
    auto range = address_reservation::reserve(2 * g).value();
    const std::size_t wrap = size_max - g + 1;
    PVMM_CHECK_ERRC(range.map(g, memory, 0, wrap), errc::out_of_range);
    PVMM_CHECK_ERRC(range.map(wrap, memory, 0, g), errc::out_of_range);
    PVMM_CHECK_ERRC(range.map(0, memory, wrap, g), errc::out_of_range);
    PVMM_CHECK_ERRC(range.unmap(g, wrap), errc::out_of_range);
    PVMM_CHECK_ERRC(range.set_access(wrap, 2 * g, {rw()}), errc::out_of_range);
    CHECK(range.mapping_count() == 0);
  }

  PVMM_CASE("growable_buffer: resize past SIZE_MAX is out_of_memory and keeps every byte") {
    PVMM_REQUIRE_DEVICE();
    growable_options o = granule_chunks(4);
    auto buffer = growable_buffer::create(o).value();
    buffer.resize(2 * o.chunk_size).value();
    write_words(buffer.data(), pattern(2 * o.chunk_size, 9));
    for (std::size_t n : {size_max, size_max - o.chunk_size + 2}) {  // both round up past SIZE_MAX
      PVMM_CHECK_ERRC(buffer.resize(n), errc::out_of_memory);
      CHECK(buffer.size() == 2 * o.chunk_size);
    }
    CHECK(read_words(buffer.data(), 2 * o.chunk_size) == pattern(2 * o.chunk_size, 9));
  }

  PVMM_CASE("growable_buffer::create: huge reserve or chunk sizes and unknown devices are refused at create") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    growable_options o;
    o.properties = default_properties();
    o.access = {rw()};
    o.chunk_size = g;
    o.reserve_size = size_max;
    PVMM_CHECK_ERRC(growable_buffer::create(o), errc::out_of_memory);
    o.reserve_size = 0;  // the default, rounded up to a chunk that cannot be rounded to
    o.chunk_size = size_max - g + 1;
    PVMM_CHECK_ERRC(growable_buffer::create(o), errc::out_of_memory);
    o.chunk_size = g;
    o.reserve_size = 4 * g;
    o.access = {{location::device(-1), access::read_write}};
    PVMM_CHECK_ERRC(growable_buffer::create(o), errc::invalid_device);
    o.access = {{location::device(device_count().value()), access::read_write}};
    PVMM_CHECK_ERRC(growable_buffer::create(o), errc::invalid_device);
    o.access = {rw(), {location::device(0), access::none}};
    PVMM_CHECK_ERRC(growable_buffer::create(o), errc::invalid_argument);
  }

  PVMM_CASE("testing copies of zero bytes accept null pointers and do nothing") {
    PVMM_REQUIRE_DEVICE();
    PVMM_CHECK_OK(testing::copy_to_mapping(nullptr, nullptr, 0));
    PVMM_CHECK_OK(testing::copy_from_mapping(nullptr, nullptr, 0));
  }
}  // TEST_SUITE
