// Shared "any allocator" bodies (as RMM instantiates its memory-resource tests per resource): one body per
// behaviour every memory kind must have, instantiated per kind by an adapter in the kind's folder (vmm/, pool/,
// managed/, pinned/ any_allocator.cpp). A kind is a memory resource the body makes once its leak check has begun and
// keeps for the case (a pool and its stream, say); blocks and views go before it:
//   struct kind {
//     static constexpr const char* name;
//     static std::string unavailable();            // why it cannot run here, or empty
//     static std::size_t unit();                   // the bodies allocate multiples of this
//     static bool whole_units_only();              // a size off unit() is refused (unaligned); else rounded up
//     static pvmm::errc impossible_size_error();   // what SIZE_MAX bytes is refused with
//     static pvmm::errc released_again_error();    // what a second release answers (already_released for owners)
//     using block = ...;                           // move-only owner of one allocation
//     pvmm::result<block> allocate(std::size_t size);
//     static void* address(const block& b);
//     void write(void* at, const std::vector<std::uint32_t>& words);  // one way in (a block's or view's address)
//     std::vector<std::uint32_t> read(const void* at, std::size_t bytes);  // ... and another way out
//     pvmm::status release(block& b);              // gives the memory back now
//     static bool shareable();                     // exported and imported back within the process
//     static pvmm::errc unshareable_error();       // what share() is refused with where !shareable()
//     using view = ...;                            // owner of the imported view
//     pvmm::result<view> share(const block& b);
//     static void* view_address(const view& v);
//   };
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace pvmm_test::any_allocator {

/// Copies `words` to `at` in `on`'s order and waits (CHECK, not REQUIRE: the bodies call it from threads too).
inline void stream_write(const pvmm::stream& on, void* at, const std::vector<std::uint32_t>& words) {
  PVMM_CHECK_OK(on.copy_async(at, words.data(), words.size() * sizeof(std::uint32_t)));
  PVMM_CHECK_OK(on.synchronize());
}
inline std::vector<std::uint32_t> stream_read(const pvmm::stream& on, const void* at, std::size_t bytes) {
  std::vector<std::uint32_t> words(bytes / sizeof(std::uint32_t));
  PVMM_CHECK_OK(on.copy_async(words.data(), at, words.size() * sizeof(std::uint32_t)));
  PVMM_CHECK_OK(on.synchronize());
  return words;
}

/// A raw pointer `Owner` handed out, held by a small owner the test writes (as an allocator adaptor would):
/// Owner::give_back(data) frees it. `owned` is false once freed: `data` stays, so that a second free names the same
/// pointer.
template <class Owner>
struct raw_block {
  Owner* from = nullptr;
  void* data = nullptr;
  bool owned = false;
  raw_block(Owner* f, void* d) : from(f), data(d), owned(true) {}
  raw_block(raw_block&& other) noexcept : from(other.from), data(other.data), owned(other.owned) {
    other.owned = false;
  }
  raw_block& operator=(raw_block&&) = delete;
  ~raw_block() {
    if (owned) (void)from->give_back(data);
  }
  /// The block over what `from` allocated, or its failure.
  static pvmm::result<raw_block> of(Owner* from, pvmm::result<void*> allocated) {
    if (!allocated) return std::move(allocated).error();
    return raw_block(from, *allocated);
  }
  /// Frees it now (owned no longer once that succeeded).
  pvmm::status release() {
    auto done = from->give_back(data);
    if (done) owned = false;
    return done;
  }
};

#define PVMM_ANY_ALLOCATOR_PRELUDE(Kind)                                                               \
  pvmm_test::leak_check leaks_;                                                                        \
  PVMM_SKIP_UNLESS(Kind::unavailable().empty(), std::string(Kind::name) + ": " + Kind::unavailable()); \
  Kind kind_;

/// The part of a kind shared by memory the host reaches through its own pointer (managed, pinned, registered):
/// written by the host, read back in a stream's order; never shareable by address (retain finds no VMM mapping
/// there: not_mapped).
struct host_visible_memory {
  pvmm::stream on = pvmm::stream::create(0).value();
  static std::size_t unit() { return std::size_t{64} << 10; }
  static bool whole_units_only() { return false; }
  static pvmm::errc released_again_error() { return pvmm::errc::already_released; }
  static bool shareable() { return false; }
  static pvmm::errc unshareable_error() { return pvmm::errc::not_mapped; }
  using view = pvmm::physical_allocation;
  static void* view_address(const view&) { return nullptr; }
  static pvmm::result<view> share_address(const void* address) { return pvmm::physical_allocation::retain(address); }
  void write(void* at, const std::vector<std::uint32_t>& words) {
    std::memcpy(at, words.data(), words.size() * sizeof(std::uint32_t));
  }
  std::vector<std::uint32_t> read(const void* at, std::size_t bytes) const { return stream_read(on, at, bytes); }
};

inline bool overlap(const void* a, std::size_t na, const void* b, std::size_t nb) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + nb && y < x + na;
}

/// Data written into an allocation reads back the same; releasing succeeds once, then answers released_again_error.
template <class Kind>
void allocate_write_read_release() {
  PVMM_ANY_ALLOCATOR_PRELUDE(Kind)
  const std::size_t size = 3 * Kind::unit();
  auto b = kind_.allocate(size);
  PVMM_REQUIRE_VALUE(b);
  kind_.write(Kind::address(*b), pattern(size, 11));
  CHECK(kind_.read(Kind::address(*b), size) == pattern(size, 11));
  PVMM_CHECK_OK(kind_.release(*b));
  PVMM_CHECK_ERRC(kind_.release(*b), Kind::released_again_error());
}

/// Size 0 and SIZE_MAX are refused with their exact codes; a size off the unit is refused (unaligned) by kinds that
/// take whole units only, and by the others rounded up, every byte asked for usable.
template <class Kind>
void bad_sizes() {
  PVMM_ANY_ALLOCATOR_PRELUDE(Kind)
  PVMM_CHECK_ERRC(kind_.allocate(0), pvmm::errc::invalid_size);
  PVMM_CHECK_ERRC(kind_.allocate(std::numeric_limits<std::size_t>::max()), Kind::impossible_size_error());
  const std::size_t odd = Kind::unit() + sizeof(std::uint32_t);
  auto b = kind_.allocate(odd);
  if (Kind::whole_units_only()) {
    PVMM_CHECK_ERRC(b, pvmm::errc::unaligned);
    return;
  }
  PVMM_REQUIRE_VALUE(b);
  kind_.write(Kind::address(*b), pattern(odd, 3));
  CHECK(kind_.read(Kind::address(*b), odd) == pattern(odd, 3));
}

/// Many allocations at once do not overlap, each keeps its own data, and all go without a trace (leak check).
template <class Kind>
void many_distinct() {
  PVMM_ANY_ALLOCATOR_PRELUDE(Kind)
  const std::size_t size = Kind::unit();
  std::vector<typename Kind::block> blocks;
  for (std::uint32_t i = 0; i < 16; ++i) {
    auto b = kind_.allocate(size);
    PVMM_REQUIRE_VALUE(b);
    for (const auto& other : blocks) CHECK_FALSE(overlap(Kind::address(*b), size, Kind::address(other), size));
    kind_.write(Kind::address(*b), pattern(size, i));
    blocks.push_back(std::move(*b));
  }
  for (std::uint32_t i = 0; i < blocks.size(); ++i)
    CHECK(kind_.read(Kind::address(blocks[i]), size) == pattern(size, i));
}

/// Exported and imported back in the same process: each side reads what the other wrote (or the exact refusal).
/// The view goes first (declared last), as an importer frees before the exporter.
template <class Kind>
void share_in_process() {
  PVMM_ANY_ALLOCATOR_PRELUDE(Kind)
  const std::size_t size = Kind::unit();
  auto b = kind_.allocate(size);
  PVMM_REQUIRE_VALUE(b);
  kind_.write(Kind::address(*b), pattern(size, 5));
  auto imported = kind_.share(*b);
  if (!Kind::shareable()) {
    PVMM_CHECK_ERRC(imported, Kind::unshareable_error());
    return;
  }
  PVMM_REQUIRE_VALUE(imported);
  void* seen = Kind::view_address(*imported);
  CHECK(seen != nullptr);
  CHECK(kind_.read(seen, size) == pattern(size, 5));
  kind_.write(seen, pattern(size, 6));
  CHECK(kind_.read(Kind::address(*b), size) == pattern(size, 6));
}

/// Released twice: the second release answers released_again_error, and the owner's destructor after an explicit
/// release does nothing (the memory allocated next, perhaps at the same address, keeps its data and is still owned).
template <class Kind>
void release_twice() {
  PVMM_ANY_ALLOCATOR_PRELUDE(Kind)
  const std::size_t size = Kind::unit();
  auto next = [&] {
    auto first = kind_.allocate(size);
    PVMM_REQUIRE_VALUE(first);
    kind_.write(Kind::address(*first), pattern(size, 1));
    PVMM_CHECK_OK(kind_.release(*first));
    PVMM_CHECK_ERRC(kind_.release(*first), Kind::released_again_error());
    auto second = kind_.allocate(size);
    PVMM_REQUIRE_VALUE(second);
    kind_.write(Kind::address(*second), pattern(size, 2));
    const auto live = pvmm::query_live_objects();
    return std::make_pair(std::move(*second), live);  // `first` is destroyed here, released already
  }();
  CHECK(pvmm::query_live_objects() == next.second);
  CHECK(kind_.read(Kind::address(next.first), size) == pattern(size, 2));
  PVMM_CHECK_OK(kind_.release(next.first));
}

/// Threads allocate, write, read back and release at once on one resource: every thread reads its own data back,
/// and nothing is left (leak check).
template <class Kind>
void concurrent_threads() {
  PVMM_ANY_ALLOCATOR_PRELUDE(Kind)
  constexpr std::uint32_t threads = 4, rounds = 12;
  std::atomic<int> failures{0};
  std::mutex first_lock;
  std::string first_failure;
  auto fail = [&](const std::string& what) {
    ++failures;
    std::lock_guard<std::mutex> guard(first_lock);
    if (first_failure.empty()) first_failure = what;
  };
  std::vector<std::thread> workers;
  for (std::uint32_t t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (std::uint32_t i = 0; i < rounds; ++i) {
        const std::size_t size = Kind::unit() * (1 + (t + i) % 3);
        auto b = kind_.allocate(size);
        if (!b) return fail("allocate: " + b.error().message());
        const auto words = pattern(size, t * 1000 + i);
        kind_.write(Kind::address(*b), words);
        if (kind_.read(Kind::address(*b), size) != words) fail("thread " + std::to_string(t) + " read other data back");
        if (auto done = kind_.release(*b); !done) fail("release: " + done.error().message());
      }
    });
  for (auto& w : workers) w.join();
  CHECK_MESSAGE(failures == 0, failures.load() << " failures, the first: " << first_failure);
}

}  // namespace pvmm_test::any_allocator

/// Registers every shared body for one kind.
#define PVMM_ANY_ALLOCATOR_CASES(Kind)                                                                             \
  TEST_CASE("any allocator: " #Kind ": written data reads back, release once") {                                   \
    pvmm_test::any_allocator::allocate_write_read_release<Kind>();                                                 \
  }                                                                                                                \
  TEST_CASE("any allocator: " #Kind ": bad sizes") { pvmm_test::any_allocator::bad_sizes<Kind>(); }                \
  TEST_CASE("any allocator: " #Kind ": many distinct allocations") {                                               \
    pvmm_test::any_allocator::many_distinct<Kind>();                                                               \
  }                                                                                                                \
  TEST_CASE("any allocator: " #Kind ": shared in process") { pvmm_test::any_allocator::share_in_process<Kind>(); } \
  TEST_CASE("any allocator: " #Kind ": released twice, the destructor after release does nothing") {               \
    pvmm_test::any_allocator::release_twice<Kind>();                                                               \
  }                                                                                                                \
  TEST_CASE("any allocator: " #Kind ": threads allocate, write, read and release at once") {                       \
    pvmm_test::any_allocator::concurrent_threads<Kind>();                                                          \
  }
