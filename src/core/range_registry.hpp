// The range registry: every (base, size) range of memory pvmm made, by address - reservations, pool allocations,
// managed allocations, pinned allocations and registered host ranges - so that "what is this address" has one
// answer (query_pointer, copy_async's staging, the registration overlap rule, managed range checks, a raw pool
// pointer's pool). Process-wide because addresses are: a pointer is looked up without its owner.
//
// Locking: 64 shards, each a flat probe table under a spin lock (range_registry.cpp says how ranges are keyed).
// Not a shared_mutex: adding and removing are the frequent operations (every pool allocate and free, every
// reserve), lookups the rarer ones, and a reader count is one cache line every thread writes; a shard's lock is
// held for a few dozen instructions, never across a backend call, and unrelated ranges rarely share a shard.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include <pvmm/pointer.hpp>

namespace pvmm::detail {
struct reservation_state;
struct pool_state;
}  // namespace pvmm::detail

namespace pvmm::detail::range_registry {

/// One range. Trivially copyable: entries move by copying bytes.
struct range {
  const void* base = nullptr;
  std::size_t size = 0;
  memory_kind kind = memory_kind::none;
  int device = -1;
  /// Tells ranges apart that could share a base: the reservation_state or pool_state that holds the range; null
  /// for managed, pinned and registered memory.
  const void* owner = nullptr;
  /// Pool allocations: 0 held by a pool_allocation, 1 by the caller as a raw pointer. 0 for the other kinds.
  std::uint8_t holder = 0;
  attach_mode attach = attach_mode::global;  ///< managed
  pinned_options options{};                  ///< pinned, registered

  const unsigned char* begin() const noexcept { return static_cast<const unsigned char*>(base); }
  const unsigned char* end() const noexcept { return begin() + size; }
};

/// Enters a range (size > 0). False when the index could not grow (out of memory); nothing changed then.
bool add(const range& r) noexcept;
/// As add, reading `watch` into `watched` under the lock of the range's shard once it is entered (count_and_mark).
bool add(const range& r, const std::atomic<bool>& watch, bool& watched) noexcept;

enum class removal { removed, absent, held_otherwise };
/// Removes the range of `kind` and `owner` (any owner when null) starting at `base` whose holder is `holder`.
/// held_otherwise: such a range is live with another holder (it stays). `out` gets the removed range.
/// `size`, when the caller knows it (nonzero), says which size level to probe first: the range is found in one
/// probe instead of one per level in use below its own (every other level is probed still when it is not there).
removal remove(const void* base, memory_kind kind, const void* owner, std::uint8_t holder, range* out = nullptr,
               std::size_t size = 0) noexcept;
/// As remove, reading `watch` into `watched` under the lock of the shard the range is removed from (count_and_mark).
removal remove(const void* base, memory_kind kind, const void* owner, std::uint8_t holder, range* out, std::size_t size,
               const std::atomic<bool>& watch, bool& watched) noexcept;

/// Counts the ranges of `kind`, `owner` and `holder` with every shard's lock held at once, and sets `*mark` before
/// the locks are given back when there is one. An add or remove that reads `mark` as its `watch` (under its
/// shard's lock) thus either came before the count (and read false) or after it (and read true): a count kept
/// from here on by the adds and removes that read true stays exact, with no counter touched while none is set.
/// A scan of every range: for rare events (a pool's owner going while raw allocations are live).
std::size_t count_and_mark(memory_kind kind, const void* owner, std::uint8_t holder, std::atomic<bool>& mark) noexcept;

/// The range of `kind` and `owner` (any owner when null) that starts at `base`.
std::optional<range> find_start(const void* base, memory_kind kind, const void* owner = nullptr) noexcept;
/// Overwrites the range that starts at r.base with r's kind and owner (a managed allocation's attach mode).
bool update(const range& r) noexcept;

/// The range that contains `address`, or nothing.
std::optional<range> find(const void* address) noexcept;
/// A range that overlaps [begin, begin + size) (size > 0, no wrap), the lowest-based when several do.
std::optional<range> find_overlapping(const void* begin, std::size_t size) noexcept;

/// How many ranges of `kind` are entered (each shard counts its own under its lock: no counter of its own to write
/// on every add and remove).
std::size_t count(memory_kind kind) noexcept;
/// Calls fn(range, context) for every range of `kind`, each while its shard's lock is held (fn must not call a
/// backend nor enter the registry). For the rare whole-process queries (diagnostics).
void for_each(memory_kind kind, void (*fn)(const range&, void*), void* context) noexcept;

/// Calls visit(range, context) for the range containing `address` while that range cannot leave the registry (its
/// shard's lock is held: visit must not call a backend nor enter the registry); returns whether one was found.
bool visit(const void* address, void (*visit)(const range&, void*), void* context) noexcept;
/// The same with any callable.
template <class F>
bool visit(const void* address, F&& f) noexcept {
  return visit(
      address, [](const range& r, void* c) { (*static_cast<std::remove_reference_t<F>*>(c))(r); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

}  // namespace pvmm::detail::range_registry
