// Shared by the caching allocator's cases (caching*.cpp): round trips, a host-function flag, the allocator made with
// the options the cases vary.
#pragma once

#include <atomic>
#include <vector>

#include <pvmm/caching_allocator.hpp>

#include "any_allocator.hpp"
#include "memory_kinds.hpp"

namespace caching_test {

#define PVMM_REQUIRE_CACHING()                                                             \
  do {                                                                                     \
    PVMM_REQUIRE_DEVICE();                                                                 \
    PVMM_REQUIRE_CAPABILITY(pvmm_test::caps().vmm.supported, "virtual memory management"); \
  } while (0)

/// Writes a pattern made from `seed` into `size` bytes at `p` in `s`'s order, reads it back and compares.
inline void round_trip(void* p, std::size_t size, pvmm::stream_ref s, unsigned seed) {
  std::vector<unsigned char> out(size), in(size, 0);
  for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<unsigned char>((i * 131 + seed) & 0xff);
  PVMM_CHECK_OK(s.copy_async(p, out.data(), size));
  PVMM_CHECK_OK(s.copy_async(in.data(), p, size));
  PVMM_CHECK_OK(s.synchronize());
  CHECK(in == out);
}

inline void set_flag(void* p) { static_cast<std::atomic<bool>*>(p)->store(true); }

/// slack_percent 0: a miss cuts chunks out of cached blocks before creating any (the stitching cases).
inline pvmm::caching_allocator make(bool wait = true, std::size_t max_reserved = 0, unsigned slack_percent = 8,
                                    bool grow_in_place = true) {
  pvmm::caching_options o;
  o.grow_in_place = grow_in_place;
  o.wait_for_pending_frees = wait;
  o.max_reserved = max_reserved;
  o.slack_percent = slack_percent;
  return pvmm::caching_allocator::create(o).value();
}

}  // namespace caching_test
