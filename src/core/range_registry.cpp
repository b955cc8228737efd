// Hot layout: range_registry::add and ::remove, and levels_in_use, are listed by mangled name in cmake/hot_layout.ld; a
// rename or a new signature drops one out of the layout (the CTest tools/hot_layout says so).
//
// The range registry: which range pvmm made holds an address, answered without a tree, and without a lock that
// every reserve, pool allocate and free in the process must take.
//
// Layout. A range of `size` bytes at `base` gets the level k = max(16, ceil(log2(size))) and is entered once,
// under the key (k, base >> k). A range of at most 2^k bytes ends in the aligned block of 2^k bytes it starts in
// or in the next one, so an address a is looked up by probing (k, a >> k) and (k, (a >> k) - 1) for each level in
// use; a range starting at b is found by probing (k, b >> k) for each level. Adding and removing are the frequent
// operations and lookups the rare ones. The keys live in 64 shards, each a probe_table under its own lock: adding
// or removing a range touches one shard picked by hash, and nothing is allocated except when a shard's table
// doubles.
#include "core/range_registry.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>

#include "core/probe_table.hpp"
#include "core/spin_lock.hpp"

namespace pvmm::detail::range_registry {
namespace {

constexpr unsigned min_level = 16;  // below 64 KiB every size shares one level: fewer levels to probe
constexpr unsigned shard_bits = 6;
constexpr std::size_t shard_count = std::size_t{1} << shard_bits;
/// Past this many probes an overlap query scans every entry instead (a registration of gigabytes).
constexpr std::uint64_t max_overlap_probes = 4096;

// Trivially destructible on purpose (no destructor runs at exit): an owner with static storage may give its range
// back after this file's statics would otherwise have been destroyed.
constexpr std::size_t kind_count = static_cast<std::size_t>(memory_kind::registered) + 1;
// One cache line: the lock, the table's header and the per-kind counts an add or remove updates under the lock.
struct alignas(64) shard {
  spin_lock lock;
  probe_table<range> entries;
  std::uint32_t ranges_of[kind_count];  // entries by kind (query_live_objects' reservations and pool allocations)
};
static_assert(sizeof(shard) == 64, "a shard is one cache line");

// Process-wide because addresses are (see the header).
shard shards[shard_count];
std::atomic<std::uint64_t> levels_in_use{0};  // bit k: some range is entered at level k; never cleared

std::uintptr_t as_int(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

unsigned level_of(std::size_t size) {
  const unsigned k = size <= 1 ? 0u : static_cast<unsigned>(64 - __builtin_clzll(size - 1));
  return k < min_level ? min_level : k;
}

/// Never zero (the level is at least 16), as probe_table needs.
std::uint64_t key_of(unsigned level, std::uint64_t block) { return (block << 6) | level; }

shard& shard_of(std::uint64_t key) { return shards[(key * 0x9E3779B97F4A7C15ull) >> (64 - shard_bits)]; }

/// Calls fn(level) for every level in use, lowest first.
template <class F>
void for_each_level(F&& fn) {
  for (std::uint64_t levels = levels_in_use.load(std::memory_order_acquire); levels; levels &= levels - 1)
    fn(static_cast<unsigned>(__builtin_ctzll(levels)));
}

bool same_start(const range& r, const void* base, memory_kind kind, const void* owner) {
  return r.base == base && r.kind == kind && (owner == nullptr || r.owner == owner);
}

/// Runs at(shard, entry) under the shard's lock for the first entry at `level` starting at `base` that satisfies
/// `match`; returns whether one did.
template <class Match, class At>
[[gnu::always_inline]] inline bool at_start_on(unsigned level, const void* base, Match&& match, At&& at) {
  const std::uint64_t key = key_of(level, std::uint64_t{as_int(base)} >> level);
  shard& s = shard_of(key);
  std::lock_guard<spin_lock> guard(s.lock);
  auto* e = s.entries.find(key, match);
  if (e) at(s, e);
  return e != nullptr;
}

/// As at_start_on, trying `first_level` first (when nonzero) and then every level in use, lowest first.
template <class Match, class At>
[[gnu::always_inline]] inline bool at_start(const void* base, Match&& match, At&& at, unsigned first_level = 0) {
  if (first_level && at_start_on(first_level, base, match, at)) return true;
  bool found = false;
  for_each_level([&](unsigned level) {
    if (!found && level != first_level) found = at_start_on(level, base, match, at);
  });
  return found;
}

}  // namespace

namespace {

// add and remove, with `under_lock` run under the shard's lock once the range is entered or removed (a watched
// flag's read, or nothing: the plain forms pay no test for it).
template <class UnderLock>
[[gnu::always_inline]] inline bool add_then(const range& r, UnderLock&& under_lock) {
  const unsigned level = level_of(r.size);
  const std::uint64_t bit = std::uint64_t{1} << level;
  if (!(levels_in_use.load(std::memory_order_relaxed) & bit)) levels_in_use.fetch_or(bit, std::memory_order_release);
  const std::uint64_t key = key_of(level, std::uint64_t{as_int(r.base)} >> level);
  shard& s = shard_of(key);
  std::lock_guard<spin_lock> guard(s.lock);
  if (!s.entries.insert(key, r)) return false;
  ++s.ranges_of[static_cast<std::size_t>(r.kind)];
  under_lock();
  return true;
}

template <class UnderLock>
[[gnu::always_inline]] inline removal remove_then(const void* base, memory_kind kind, const void* owner,
                                                  std::uint8_t holder, range* out, std::size_t size,
                                                  UnderLock&& under_lock) {
  removal result = removal::absent;
  auto match = [&](const range& r) { return same_start(r, base, kind, owner); };
  at_start(
      base, match,
      [&](shard& s, probe_table<range>::entry* e) {
        if (e->value.holder != holder) {
          result = removal::held_otherwise;
          return;
        }
        if (out) *out = e->value;
        --s.ranges_of[static_cast<std::size_t>(kind)];
        s.entries.erase(e);
        under_lock();
        result = removal::removed;
      },
      size ? level_of(size) : 0);
  return result;
}

}  // namespace

bool add(const range& r) noexcept {
  return add_then(r, [] {});
}
// Cold: only a raw pointer put back after a failed free comes here; the plain add keeps the table's insert inline.
[[gnu::cold]] bool add(const range& r, const std::atomic<bool>& watch, bool& watched) noexcept {
  // Relaxed: ordered by the shard's lock (count_and_mark).
  return add_then(r, [&] { watched = watch.load(std::memory_order_relaxed); });
}

removal remove(const void* base, memory_kind kind, const void* owner, std::uint8_t holder, range* out,
               std::size_t size) noexcept {
  return remove_then(base, kind, owner, holder, out, size, [] {});
}
removal remove(const void* base, memory_kind kind, const void* owner, std::uint8_t holder, range* out, std::size_t size,
               const std::atomic<bool>& watch, bool& watched) noexcept {
  return remove_then(base, kind, owner, holder, out, size, [&] { watched = watch.load(std::memory_order_relaxed); });
}

std::optional<range> find_start(const void* base, memory_kind kind, const void* owner) noexcept {
  std::optional<range> found;
  auto match = [&](const range& r) { return same_start(r, base, kind, owner); };
  at_start(base, match, [&](shard&, probe_table<range>::entry* e) { found = e->value; });
  return found;
}

bool update(const range& r) noexcept {
  auto match = [&](const range& v) { return same_start(v, r.base, r.kind, r.owner) && v.size == r.size; };
  return at_start(r.base, match, [&](shard&, probe_table<range>::entry* e) { e->value = r; });
}

std::size_t count(memory_kind kind) noexcept {
  std::size_t n = 0;
  for (shard& s : shards) {
    std::lock_guard<spin_lock> guard(s.lock);
    n += s.ranges_of[static_cast<std::size_t>(kind)];
  }
  return n;
}

std::size_t count_and_mark(memory_kind kind, const void* owner, std::uint8_t holder, std::atomic<bool>& mark) noexcept {
  // In shard order, as no other path holds two shard locks: no deadlock.
  for (shard& s : shards) s.lock.lock();
  std::size_t n = 0;
  for (shard& s : shards) {
    if (s.ranges_of[static_cast<std::size_t>(kind)] == 0) continue;
    s.entries.for_each([&](const probe_table<range>::entry& e) {
      n += e.value.kind == kind && e.value.owner == owner && e.value.holder == holder;
    });
  }
  if (n != 0) mark.store(true, std::memory_order_relaxed);  // published by the unlocks below
  for (shard& s : shards) s.lock.unlock();
  return n;
}

void for_each(memory_kind kind, void (*fn)(const range&, void*), void* context) noexcept {
  for (shard& s : shards) {
    std::lock_guard<spin_lock> guard(s.lock);
    if (s.ranges_of[static_cast<std::size_t>(kind)] == 0) continue;
    s.entries.for_each([&](const probe_table<range>::entry& e) {
      if (e.value.kind == kind) fn(e.value, context);
    });
  }
}

bool visit(const void* address, void (*fn)(const range&, void*), void* context) noexcept {
  const std::uintptr_t a = as_int(address);
  auto contains_a = [a](const range& r) { return a - as_int(r.base) < r.size; };
  bool found = false;
  for_each_level([&](unsigned level) {
    const std::uint64_t block = std::uint64_t{a} >> level;
    for (std::uint64_t start : {block, block - 1}) {  // the block a range containing `a` starts in
      if (found || start > block) return;             // found, or no block before the first
      const std::uint64_t key = key_of(level, start);
      shard& s = shard_of(key);
      std::lock_guard<spin_lock> guard(s.lock);  // keeps the found range in the registry meanwhile
      if (auto* e = s.entries.find(key, contains_a)) {
        fn(e->value, context);
        found = true;
      }
    }
  });
  return found;
}

std::optional<range> find(const void* address) noexcept {
  std::optional<range> found;
  visit(address, [&](const range& r) { found = r; });
  return found;
}

std::optional<range> find_overlapping(const void* begin, std::size_t size) noexcept {
  const std::uintptr_t lo = as_int(begin), last = lo + (size - 1);
  std::optional<range> lowest;
  auto consider = [&](const range& r) {
    const bool overlaps = as_int(r.base) <= last && lo < as_int(r.base) + r.size;  // ranges never wrap
    if (overlaps && (!lowest || r.base < lowest->base)) lowest = r;
  };
  // Probing every block the range touches costs (size / 2^k) probes per level: far below the cost of page-locking
  // those pages, but a scan of every entry is cheaper past a few thousand.
  std::uint64_t probes = 0;
  for_each_level([&](unsigned level) { probes += ((last >> level) - (lo >> level)) + 2; });
  if (probes > max_overlap_probes) {
    for (shard& s : shards) {
      std::lock_guard<spin_lock> guard(s.lock);
      s.entries.for_each([&](const probe_table<range>::entry& e) { consider(e.value); });
    }
    return lowest;
  }
  for_each_level([&](unsigned level) {
    const std::uint64_t first = std::uint64_t{lo} >> level, end = std::uint64_t{last} >> level;
    for (std::uint64_t block = first == 0 ? 0 : first - 1; block <= end; ++block) {
      const std::uint64_t key = key_of(level, block);
      shard& s = shard_of(key);
      std::lock_guard<spin_lock> guard(s.lock);
      // Equal keys sit in one probe run: visit each of them.
      s.entries.find(key, [&](const range& r) { return consider(r), false; });
    }
  });
  return lowest;
}

}  // namespace pvmm::detail::range_registry
