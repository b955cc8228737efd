// A sorted vector with the parts of std::map's interface the neutral layer uses. A reservation's mapping
// table is small and mostly appended at the end (growth at the tail); a vector avoids a heap allocation per
// map, which measurably cost time next to sub-microsecond driver calls.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace pvmm::detail {

template <class Key, class Value>
class flat_map {
 public:
  using value_type = std::pair<Key, Value>;
  using iterator = typename std::vector<value_type>::iterator;
  using const_iterator = typename std::vector<value_type>::const_iterator;

  iterator begin() noexcept { return items_.begin(); }
  iterator end() noexcept { return items_.end(); }
  const_iterator begin() const noexcept { return items_.begin(); }
  const_iterator end() const noexcept { return items_.end(); }
  std::size_t size() const noexcept { return items_.size(); }
  bool empty() const noexcept { return items_.empty(); }
  void swap(flat_map& other) noexcept { items_.swap(other.items_); }
  std::size_t capacity() const noexcept { return items_.capacity(); }
  /// Empties the map; its storage is kept for reuse.
  void clear() noexcept { items_.clear(); }

  iterator lower_bound(const Key& k) {
    return std::lower_bound(items_.begin(), items_.end(), k,
                            [](const value_type& v, const Key& x) { return v.first < x; });
  }
  iterator upper_bound(const Key& k) {
    return std::upper_bound(items_.begin(), items_.end(), k,
                            [](const Key& x, const value_type& v) { return x < v.first; });
  }
  iterator find(const Key& k) {
    auto it = lower_bound(k);
    return it != items_.end() && it->first == k ? it : items_.end();
  }
  /// As find, trying position `hint` first: where the key was when last seen, still there unless a key before it
  /// was inserted or erased since (a mapping found again after its backend call, the common case: no search).
  iterator find(const Key& k, std::size_t hint) {
    if (hint < items_.size() && items_[hint].first == k) return items_.begin() + static_cast<std::ptrdiff_t>(hint);
    return find(k);
  }
  /// As lower_bound, trying position `hint` first (as find with a hint).
  iterator lower_bound(const Key& k, std::size_t hint) {
    if (hint < items_.size() && items_[hint].first == k) return items_.begin() + static_cast<std::ptrdiff_t>(hint);
    return lower_bound(k);
  }
  std::size_t index_of(const_iterator it) const noexcept { return static_cast<std::size_t>(it - items_.begin()); }
  /// Inserts at `hint`, which must be lower_bound(k) for a key not present.
  iterator emplace_hint(iterator hint, Key k, Value v) { return items_.emplace(hint, std::move(k), std::move(v)); }
  iterator erase(iterator it) { return items_.erase(it); }
  void erase(const Key& k) {
    if (auto it = find(k); it != items_.end()) items_.erase(it);
  }

 private:
  std::vector<value_type> items_;
};

}  // namespace pvmm::detail
