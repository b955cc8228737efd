// pvmm-bench traces: what the replay (traces_replay.cpp) and the allocators under test (traces.cpp) share.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <pvmm/pvmm.hpp>

namespace bench {

/// One allocator under test.
struct side {
  std::string name;
  std::function<void*(std::size_t, const pvmm::stream&)> alloc;
  std::function<void(void*, const pvmm::stream&)> free;
  std::function<std::uint64_t()> peak_reserved;
  /// What the side did since start_counting, per alloc+free over `pairs` (empty where it cannot say).
  std::function<std::string(double pairs)> calls = [](double) { return std::string(); };
  std::function<void()> start_counting = [] {};
};

/// The allocators under test, fresh (traces.cpp): the raw driver pool, pvmm's memory_pool and caching_allocator,
/// PyTorch's and RMM's where found at configure time.
std::vector<side> make_sides(pvmm::stream* streams);

}  // namespace bench
