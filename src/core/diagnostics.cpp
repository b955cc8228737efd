// pvmm/diagnostics.hpp: the live-object counters.
#include <pvmm/diagnostics.hpp>

#include "core/address_registry.hpp"
#include "core/deferred_release.hpp"
#include "core/ownership.hpp"
#include "core/range_registry.hpp"

namespace pvmm {
namespace detail {
std::atomic<std::size_t> live_allocations{0};
std::atomic<std::size_t> live_streams{0};
std::atomic<std::size_t> live_events{0};
std::atomic<std::size_t> live_pools{0};
std::atomic<std::size_t> unfreed_pool_allocations{0};
std::atomic<std::size_t> live_managed{0};
std::atomic<std::size_t> live_pinned{0};
std::atomic<std::size_t> live_registrations{0};
}  // namespace detail

live_objects query_live_objects() noexcept {
  detail::release_deferred();  // what finished stream work held is counted only while something else holds it
  using detail::range_registry::count;
  return {detail::live_allocations.load(),
          count(memory_kind::device),
          detail::address_registry::count_mappings(),
          detail::live_streams.load(),
          detail::live_events.load(),
          detail::live_pools.load(),
          count(memory_kind::pool) + detail::unfreed_pool_allocations.load(),
          detail::live_managed.load(),
          detail::live_pinned.load(),
          detail::live_registrations.load()};
}
}  // namespace pvmm
