// Shared "any allocator" bodies (as RMM's mr_ref tests): one body per behaviour every memory kind must have,
// instantiated per kind with an adapter. A kind (VMM today; pools, managed and pinned memory next) provides:
//   struct kind {
//     static constexpr const char* name;
//     static std::string unavailable();                         // why it cannot run here, or empty
//     static std::size_t unit();                                // sizes must be multiples of this
//     using block = ...;                                        // move-only owner of one allocation
//     static pvmm::result<block> allocate(std::size_t size);    // usable by the host helpers at once
//     static void* address(const block& b);
//     static pvmm::status free(block& b);
//     static bool shareable();                                  // export / import through an fd
//     static pvmm::result<pvmm::owned_fd> export_fd(const block& b);
//     static pvmm::result<block> import_fd(int fd, std::size_t size);
//   };
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "support.hpp"

namespace pvmm_test::any_allocator {

#define PVMM_ANY_ALLOCATOR_PRELUDE(Kind)                           \
  pvmm_test::leak_check leaks_;                                    \
  if (auto why_ = Kind::unavailable(); !why_.empty()) {            \
    pvmm_test::report_skip(std::string(Kind::name) + ": " + why_); \
    return;                                                        \
  }

/// Data written into an allocation reads back the same; freeing succeeds once, then says already_released.
template <class Kind>
void allocate_write_read_free() {
  PVMM_ANY_ALLOCATOR_PRELUDE(Kind)
  const std::size_t size = 3 * Kind::unit();
  auto b = Kind::allocate(size);
  REQUIRE_MESSAGE(b, b.error().message());
  write_words(Kind::address(*b), pattern(size, 11));
  CHECK(read_words(Kind::address(*b), size) == pattern(size, 11));
  PVMM_CHECK_OK(Kind::free(*b));
  PVMM_CHECK_ERRC(Kind::free(*b), pvmm::errc::already_released);
}

/// Size 0, a size off the unit and one that cannot be rounded are refused with their exact codes.
template <class Kind>
void bad_sizes() {
  PVMM_ANY_ALLOCATOR_PRELUDE(Kind)
  PVMM_CHECK_ERRC(Kind::allocate(0), pvmm::errc::invalid_size);
  if (Kind::unit() > 1) PVMM_CHECK_ERRC(Kind::allocate(Kind::unit() + 1), pvmm::errc::unaligned);
  PVMM_CHECK_ERRC(Kind::allocate(std::numeric_limits<std::size_t>::max()), pvmm::errc::out_of_memory);
}

/// Many allocations at once are distinct, each keeps its own data, and all go without a trace (leak check).
template <class Kind>
void many_distinct() {
  PVMM_ANY_ALLOCATOR_PRELUDE(Kind)
  std::vector<typename Kind::block> blocks;
  for (std::uint32_t i = 0; i < 16; ++i) {
    auto b = Kind::allocate(Kind::unit());
    REQUIRE_MESSAGE(b, b.error().message());
    write_words(Kind::address(*b), pattern(Kind::unit(), i));
    blocks.push_back(std::move(*b));
  }
  for (std::uint32_t i = 0; i < blocks.size(); ++i)
    CHECK(read_words(Kind::address(blocks[i]), Kind::unit()) == pattern(Kind::unit(), i));
}

/// Exported and imported in the same process: both views see the same bytes (or not_supported is asserted).
template <class Kind>
void share_in_process() {
  PVMM_ANY_ALLOCATOR_PRELUDE(Kind)
  const std::size_t size = Kind::unit();
  auto b = Kind::allocate(size);
  REQUIRE_MESSAGE(b, b.error().message());
  auto fd = Kind::export_fd(*b);
  if (!Kind::shareable()) {
    CHECK(fd.code() != pvmm::errc{});
    return;
  }
  REQUIRE_MESSAGE(fd, fd.error().message());
  auto imported = Kind::import_fd(fd->get(), size);
  REQUIRE_MESSAGE(imported, imported.error().message());
  write_words(Kind::address(*b), pattern(size, 5));
  CHECK(read_words(Kind::address(*imported), size) == pattern(size, 5));
}

}  // namespace pvmm_test::any_allocator

/// Registers every shared body for one kind.
#define PVMM_ANY_ALLOCATOR_CASES(Kind)                                                              \
  TEST_CASE("any allocator: " #Kind ": written data reads back; free once") {                       \
    pvmm_test::any_allocator::allocate_write_read_free<Kind>();                                     \
  }                                                                                                 \
  TEST_CASE("any allocator: " #Kind ": bad sizes") { pvmm_test::any_allocator::bad_sizes<Kind>(); } \
  TEST_CASE("any allocator: " #Kind ": many distinct allocations") {                                \
    pvmm_test::any_allocator::many_distinct<Kind>();                                                \
  }                                                                                                 \
  TEST_CASE("any allocator: " #Kind ": shared in process") { pvmm_test::any_allocator::share_in_process<Kind>(); }
