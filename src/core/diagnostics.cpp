// pvmm/diagnostics.hpp: the live-object counters.
#include <pvmm/diagnostics.hpp>

#include "core/ownership.hpp"

namespace pvmm {
namespace detail {
std::atomic<std::size_t> live_allocations{0};
std::atomic<std::size_t> live_reservations{0};
std::atomic<std::size_t> live_mappings{0};
std::atomic<std::size_t> live_streams{0};
std::atomic<std::size_t> live_events{0};
std::atomic<std::size_t> live_pools{0};
std::atomic<std::size_t> live_pool_allocations{0};
std::atomic<std::size_t> live_managed{0};
std::atomic<std::size_t> live_pinned{0};
std::atomic<std::size_t> live_registrations{0};
}  // namespace detail

live_objects query_live_objects() noexcept {
  return {detail::live_allocations.load(),      detail::live_reservations.load(), detail::live_mappings.load(),
          detail::live_streams.load(),          detail::live_events.load(),       detail::live_pools.load(),
          detail::live_pool_allocations.load(), detail::live_managed.load(),      detail::live_pinned.load(),
          detail::live_registrations.load()};
}
}  // namespace pvmm
