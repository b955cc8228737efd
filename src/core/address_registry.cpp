// The address registry: which live reservation holds an address, answered without a tree, and without a lock
// that every reserve and free in the process must take.
//
// Layout. A reservation of `size` bytes at `base` gets the level k = max(16, ceil(log2(size))) and is entered
// once, under the key (k, base >> k). A range of at most 2^k bytes ends in the aligned block of 2^k bytes it
// starts in or in the next one, so an address a is looked up by probing (k, a >> k) and (k, (a >> k) - 1) for
// each level in use; ranges never overlap, so a handful of candidates match at most. Reserving and freeing are
// the frequent operations and lookups the rare ones, so the second probe is the lookup's.
// The keys live in 64 shards, each a probe_table under its own lock: adding or removing a reservation touches
// one shard picked by hash, so unrelated reservations rarely meet on a lock, and nothing is allocated except
// when a shard's table doubles.
#include "core/address_registry.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>

#include "core/probe_table.hpp"
#include "core/spin_lock.hpp"

namespace pvmm::detail::address_registry {
namespace {

constexpr unsigned min_level = 16;  // below 64 KiB every size shares one level: fewer levels to probe
constexpr unsigned shard_bits = 6;
constexpr std::size_t shard_count = std::size_t{1} << shard_bits;

// Trivially destructible on purpose (no destructor runs at exit): an owner with static storage may free its
// reservation after this file's statics would otherwise have been destroyed.
struct alignas(64) shard {
  spin_lock lock;
  probe_table<reservation_state*> entries;
};

// Process-wide because addresses are (see the header).
shard shards[shard_count];
std::atomic<std::uint64_t> levels_in_use{0};  // bit k: some reservation is entered at level k; never cleared

std::uintptr_t as_int(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

unsigned level_of(std::size_t size) {
  const unsigned k = size <= 1 ? 0u : static_cast<unsigned>(64 - __builtin_clzll(size - 1));
  return k < min_level ? min_level : k;
}

/// Never zero (the level is at least 16), as probe_table needs.
std::uint64_t key_of(unsigned level, std::uintptr_t address) { return (std::uint64_t{address} >> level << 6) | level; }

shard& shard_of(std::uint64_t key) { return shards[(key * 0x9E3779B97F4A7C15ull) >> (64 - shard_bits)]; }

bool insert(std::uint64_t key, reservation_state* r) {
  shard& s = shard_of(key);
  std::lock_guard<spin_lock> guard(s.lock);
  return s.entries.insert(key, r);
}

void erase(std::uint64_t key, const reservation_state* r) {
  shard& s = shard_of(key);
  std::lock_guard<spin_lock> guard(s.lock);
  if (auto* e = s.entries.find(key, [r](const reservation_state* v) { return v == r; })) s.entries.erase(e);
}

/// Calls `found(r)` with the shard's lock held for the live reservation containing `address`, and returns its
/// result; returns `missing` when no reservation contains it.
template <class R, class F>
R look_up(const void* address, R missing, F&& found) {
  const std::uintptr_t a = as_int(address);
  auto contains_a = [a](const reservation_state* r) { return a - as_int(r->address) < r->size; };
  for (std::uint64_t levels = levels_in_use.load(std::memory_order_acquire); levels; levels &= levels - 1) {
    const auto level = static_cast<unsigned>(__builtin_ctzll(levels));
    const std::uint64_t block = std::uint64_t{a} >> level;
    for (std::uint64_t start : {block, block - 1}) {  // the block a range containing `a` starts in
      if (start > block) break;                       // no block before the first
      const std::uint64_t key = key_of(level, start << level);
      shard& s = shard_of(key);
      std::lock_guard<spin_lock> guard(s.lock);  // keeps the found reservation from being freed meanwhile
      if (auto* e = s.entries.find(key, contains_a)) return found(*e->value);
    }
  }
  return missing;
}

}  // namespace

bool add(reservation_state* r) {
  const unsigned level = level_of(r->size);
  const std::uint64_t bit = std::uint64_t{1} << level;
  if (!(levels_in_use.load(std::memory_order_relaxed) & bit)) levels_in_use.fetch_or(bit, std::memory_order_release);
  return insert(key_of(level, as_int(r->address)), r);
}

void remove(reservation_state* r) { erase(key_of(level_of(r->size), as_int(r->address)), r); }

result<std::shared_ptr<allocation_state>> find_mapped(const void* address, const operation& op) {
  using found_type = result<std::shared_ptr<allocation_state>>;
  std::optional<found_type> found = look_up(address, std::optional<found_type>{}, [&](reservation_state& r) {
    const std::size_t offset = as_int(address) - as_int(r.address);
    std::lock_guard<spin_lock> mappings_guard(r.lock);
    auto m = r.mappings.upper_bound(offset);
    if (m == r.mappings.begin() || offset >= std::prev(m)->first + std::prev(m)->second.size)
      return std::optional<found_type>(op.fail(errc::not_mapped, "the address is reserved but not mapped"));
    return std::optional<found_type>(std::prev(m)->second.memory);
  });
  if (!found) return op.fail(errc::not_mapped, "no pvmm mapping contains the address");
  return std::move(*found);
}

bool contains(const void* address) {
  return look_up(address, false, [](const reservation_state&) { return true; });
}

}  // namespace pvmm::detail::address_registry
