// A list of trivially copyable items that keeps its first N in place and spills to the heap only beyond
// them. Per-call lists of mappings usually hold one to a few items, and a heap allocation (or a polymorphic
// memory resource's virtual calls) for them measurably cost time next to sub-microsecond driver calls
// (pvmm-own-cost).
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

namespace pvmm::detail {

template <class T, std::size_t N>
class short_list {
  static_assert(std::is_trivially_copyable_v<T>, "items are copied as bytes");

 public:
  void push_back(const T& item) {
    if (count_ < N)
      local_[count_] = item;
    else
      spilled_.push_back(item);
    ++count_;
  }
  std::size_t size() const noexcept { return count_; }
  const T& operator[](std::size_t i) const noexcept { return i < N ? local_[i] : spilled_[i - N]; }

  class iterator {
   public:
    iterator(const short_list* list, std::size_t i) noexcept : list_(list), i_(i) {}
    const T& operator*() const noexcept { return (*list_)[i_]; }
    iterator& operator++() noexcept { return ++i_, *this; }
    bool operator!=(const iterator& other) const noexcept { return i_ != other.i_; }

   private:
    const short_list* list_;
    std::size_t i_;
  };
  iterator begin() const noexcept { return {this, 0}; }
  iterator end() const noexcept { return {this, count_}; }

 private:
  T local_[N];
  std::vector<T> spilled_;
  std::size_t count_ = 0;
};

}  // namespace pvmm::detail
