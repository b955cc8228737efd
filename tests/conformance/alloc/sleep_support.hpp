// Shared by the sleeping allocator's cases: patterns written into allocations and checked after a wake.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <pvmm/sleeping_allocator.hpp>
#include <pvmm/testing.hpp>

#include "support.hpp"

#define PVMM_REQUIRE_SLEEPING()                                                            \
  do {                                                                                     \
    PVMM_REQUIRE_DEVICE();                                                                 \
    PVMM_REQUIRE_CAPABILITY(pvmm_test::caps().vmm.supported, "virtual memory management"); \
  } while (0)

namespace sleep_test {

inline std::vector<unsigned char> sleep_bytes(std::size_t size, unsigned seed) {
  std::vector<unsigned char> out(size);
  for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<unsigned char>((i * 131 + seed * 7 + (i >> 12)) & 0xff);
  return out;
}
inline void sleep_fill(void* p, std::size_t size, unsigned seed) {
  auto bytes = sleep_bytes(size, seed);
  PVMM_CHECK_OK(pvmm::testing::copy_to_mapping(p, bytes.data(), size));
}
inline bool sleep_holds(const void* p, std::size_t size, unsigned seed) {
  std::vector<unsigned char> in(size);
  if (!pvmm::testing::copy_from_mapping(in.data(), p, size)) return false;
  return in == sleep_bytes(size, seed);
}
/// Each block {address, seed} of `a` still holds what sleep_fill wrote with that seed (after the cycles a case
/// ran); then it is given back.
inline void check_and_free(pvmm::sleeping_allocator& a, std::initializer_list<std::pair<void*, unsigned>> blocks) {
  for (const auto& [p, seed] : blocks) {
    CHECK(sleep_holds(p, a.size_of(p), seed));
    PVMM_CHECK_OK(a.deallocate(p));
  }
}
/// Small slots, so that a few granules already take several trips through the ring.
inline pvmm::sleeping_options small_ring() {
  pvmm::sleeping_options o;
  o.staging_slots = 3;
  o.staging_slot_bytes = std::size_t{64} << 10;
  o.copy_streams = 2;
  return o;
}
/// A sleeping allocator over `options` whose tag `tag` sleeps under `policy` (its host copy retained where
/// `retain_host_copy`).
inline pvmm::sleeping_allocator with_tag_policy(const std::string& tag, pvmm::sleep_policy policy,
                                                const pvmm::sleeping_options& options = small_ring(),
                                                bool retain_host_copy = false) {
  auto a = pvmm::sleeping_allocator::create(options).value();
  pvmm::tag_policy p;
  p.policy = policy;
  p.retain_host_copy = retain_host_copy;
  PVMM_CHECK_OK(a.set_policy(tag, p));
  return a;
}

}  // namespace sleep_test
