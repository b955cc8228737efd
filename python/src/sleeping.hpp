// A sleeping allocator (vLLM's sleep mode on pvmm, every backend): tagged allocations, each its own reservation
// and physical allocation. sleep(tags, offload) copies the tagged allocations to pinned host memory (or discards
// them), unmaps and releases their physical memory, keeping every virtual address reserved; wake(tags) maps new
// physical memory at the same addresses and copies the contents back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <pvmm/pvmm.hpp>

namespace pvmm_py {

class sleeping_allocator {
 public:
  struct stats {
    std::size_t allocations = 0;
    std::size_t reserved_bytes = 0;   ///< virtual address space held (asleep or not)
    std::size_t resident_bytes = 0;   ///< physical memory mapped now
    std::size_t offloaded_bytes = 0;  ///< pinned host copies held while asleep
    std::size_t asleep = 0;           ///< allocations asleep
  };

  static pvmm::result<sleeping_allocator*> create(int device);
  ~sleeping_allocator();

  /// A new allocation of at least `size` bytes tagged `tag`; its address stays the same across sleep and wake.
  pvmm::result<void*> allocate(std::size_t size, const std::string& tag);
  /// Frees an allocation (asleep or awake).
  pvmm::status free(void* address);
  /// Sleeps every awake allocation whose tag is in `tags` (all when empty). Blocks (copies, synchronizes).
  pvmm::status sleep(const std::vector<std::string>& tags, bool offload);
  /// Wakes every sleeping allocation whose tag is in `tags` (all when empty). Blocks.
  pvmm::status wake(const std::vector<std::string>& tags);
  stats statistics(const std::optional<std::string>& tag = std::nullopt) const;
  /// The tag of the allocation at `address`, or none.
  std::optional<std::string> tag_of(void* address) const;
  std::size_t size_of(void* address) const;
  int device() const noexcept { return device_; }

 private:
  struct entry {
    std::string tag;
    std::size_t size = 0;  // mapped bytes (a granularity multiple)
    pvmm::address_reservation range;
    pvmm::physical_allocation memory;  // empty while asleep
    pvmm::pinned_allocation copy;      // the offloaded contents while asleep
    bool asleep = false;
  };
  explicit sleeping_allocator(int device, pvmm::stream s, std::size_t granularity) noexcept;
  static bool selected(const entry& e, const std::vector<std::string>& tags);
  pvmm::status map_new(entry& e) const;

  int device_;
  pvmm::stream stream_;
  std::size_t granularity_;
  mutable std::mutex lock_;  // guards entries_; held across driver calls only, never while calling user code
  std::map<std::uintptr_t, entry> entries_;
};

}  // namespace pvmm_py
