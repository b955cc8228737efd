// An open-addressing table of (nonzero 64-bit key, value) entries: linear probing, backward-shift deletion,
// capacity a power of two at most half full. One allocation per doubling and none per entry, and an entry is
// one probe away in the common case: a std::map or std::unordered_map node per entry measurably cost time
// next to sub-microsecond driver calls (pvmm-own-cost). Keys may repeat (a multimap); lookups and erasure
// take a predicate on the value to tell equal keys apart. Not synchronised: the owner locks.
// Trivially destructible storage is left to the owner: release() frees it (a static table may skip that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

namespace pvmm::detail {

template <class Value>
class probe_table {
  static_assert(std::is_trivially_copyable_v<Value>, "entries move by copying bytes");

 public:
  struct entry {
    std::uint64_t key;  // 0: an empty slot
    Value value;
  };

  std::size_t size() const noexcept { return used_; }

  /// Adds an entry (key != 0). False when memory ran out; the table is unchanged then. Inline with the growth
  /// out of line: every add to the range registry runs it.
  [[gnu::always_inline]] bool insert(std::uint64_t key, const Value& value) noexcept {
    if ((used_ + 1) * 2 > capacity() && !grow()) return false;
    place({key, value});
    return true;
  }

  /// The first entry with `key` whose value satisfies `match`, or null.
  template <class Match>
  entry* find(std::uint64_t key, Match&& match) const noexcept {
    if (!slots_) return nullptr;
    for (std::size_t i = home(key); slots_[i].key; i = next(i))
      if (slots_[i].key == key && match(slots_[i].value)) return &slots_[i];
    return nullptr;
  }

  /// Calls fn(entry) for every entry, in slot order (the rare full scan: a query no key narrows).
  template <class Fn>
  void for_each(Fn&& fn) const noexcept {
    for (std::size_t i = 0; i < capacity(); ++i)
      if (slots_[i].key) fn(slots_[i]);
  }

  /// Removes the entry `find` returned (non-null).
  void erase(entry* found) noexcept {
    std::size_t hole = static_cast<std::size_t>(found - slots_);
    // Pull each later entry of the probe run into the hole unless its home lies cyclically in (hole, j],
    // where it could no longer be found from its home.
    for (std::size_t j = next(hole); slots_[j].key; j = next(j)) {
      const std::size_t h = home(slots_[j].key);
      if (hole <= j ? (hole < h && h <= j) : (hole < h || h <= j)) continue;
      slots_[hole] = slots_[j];
      hole = j;
    }
    slots_[hole].key = 0;
    --used_;
  }

  /// Frees the storage; the table is empty afterwards.
  void release() noexcept {
    std::free(slots_);
    slots_ = nullptr, bits_ = 0, used_ = 0;
  }

 private:
  std::size_t capacity() const noexcept { return slots_ ? std::size_t{1} << bits_ : 0; }
  std::size_t next(std::size_t i) const noexcept { return (i + 1) & (capacity() - 1); }
  /// Fibonacci hashing; the multiplier differs from any a caller uses to pick among tables.
  std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0xD6E8FEB86659FD93ull) >> (64 - bits_));
  }
  void place(const entry& e) noexcept {
    std::size_t i = home(e.key);
    while (slots_[i].key) i = next(i);
    slots_[i] = e;
    ++used_;
  }
  [[gnu::noinline, gnu::cold]] bool grow() noexcept {
    const unsigned bits = slots_ ? bits_ + 1 : 4;
    auto* fresh = static_cast<entry*>(std::calloc(std::size_t{1} << bits, sizeof(entry)));
    if (!fresh) return false;
    entry* old = slots_;
    const std::size_t old_capacity = capacity();
    slots_ = fresh, bits_ = bits, used_ = 0;
    for (std::size_t i = 0; i < old_capacity; ++i)
      if (old[i].key) place(old[i]);
    std::free(old);
    return true;
  }

  entry* slots_ = nullptr;
  unsigned bits_ = 0;
  std::size_t used_ = 0;
};

}  // namespace pvmm::detail
