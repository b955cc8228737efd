// caching_allocator's public members: create, stats, size_of (include/pvmm/caching_allocator.hpp); the moves, the
// destructor, trim, reset_peaks and release are the allocator shell's (allocator_shell.hpp); allocate and deallocate
// are with the free lists (caching_free_lists.cpp).
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include <pvmm/device.hpp>

#include "alloc/allocator_shell.hpp"
#include "alloc/caching_state.hpp"
#include "core/device.hpp"
#include "stream/stream_checks.hpp"

namespace pvmm {

PVMM_ALLOCATOR_SHELL(caching_allocator, give_back_everything)

int caching_allocator::device() const noexcept { return state_ ? state_->options.device : -1; }
std::size_t caching_allocator::chunk_size() const noexcept { return state_ ? state_->chunk : 0; }

result<caching_allocator> caching_allocator::create(const caching_options& options) {
  auto args = [&] {
    return fmt::format("device={}, chunk_size={:#x}, max_reserved={:#x}", options.device, options.chunk_size,
                       options.max_reserved);
  };
  const detail::operation op{"pvmm::caching_allocator::create", args};
  if (auto ok = detail::check_location(location::device(options.device), op); !ok) return std::move(ok).error();
  auto caps = detail::device_capabilities(options.device);
  if (!caps) return op.wrap(std::move(caps).error());
  if (!caps->vmm.supported)
    return op.fail(errc::not_supported, "the device has no virtual memory management, which this allocator is built on",
                   "use pvmm::memory_pool for stream-ordered allocation on this device");
  allocation_properties p;
  p.location = location::device(options.device);
  auto g = detail::cached_granularity(p);
  if (!g) return op.wrap(std::move(g).error());
  auto unit = detail::reservation_unit();
  if (!unit) return op.wrap(std::move(unit).error());
  // The default: the recommended granularity, at least 4 MiB. A stitch grants access in one call over its range, but
  // the driver's grant costs per mapping it covers (about 28 us a chunk on an H100, whatever its size up to 4 MiB;
  // pvmm-bench traces --trace-chunk): 4 MiB chunks halve the mappings of 2 MiB ones; 8 MiB took the lognormal
  // cross-stream trace past 1.10 reserved/live (docs/performance.md, "Allocation traces").
  constexpr std::size_t default_chunk_floor = std::size_t{4} << 20;
  const std::size_t step = g->recommended ? g->recommended : g->minimum;  // a driver reporting no recommendation
  const std::size_t floor_chunk = step ? (default_chunk_floor + step - 1) / step * step : default_chunk_floor;
  std::size_t chunk = options.chunk_size ? options.chunk_size : std::max(floor_chunk, *unit);
  if (chunk % g->minimum != 0 || chunk % *unit != 0 || chunk % detail::caching::min_block != 0)
    return op.fail(errc::unaligned,
                   fmt::format("chunk_size is not a multiple of the granularity {:#x} and the reservation unit {:#x}",
                               g->minimum, *unit));
  auto s = std::make_unique<state>();
  s->options = options;
  s->chunk = chunk;
  s->grant = access_descriptor{location::device(options.device), access::read_write};
  s->listed.enter(s.get());
  return caching_allocator(std::move(s));
}

caching_stats caching_allocator::stats() const noexcept {
  if (!state_) return {};
  std::lock_guard<std::mutex> hold(state_->lock);
  caching_stats out = state_->st;
  out.cached_blocks = state_->cached_blocks();
  out.ghost_bytes = std::uint64_t{state_->ghost_chunks} * state_->chunk;
  return out;
}

std::size_t caching_allocator::size_of(const void* pointer) const noexcept {
  if (!state_) return 0;
  std::lock_guard<std::mutex> hold(state_->lock);
  auto it = state_->live.find(const_cast<void*>(pointer));
  return it == state_->live.end() ? 0 : it->second->requested;
}

}  // namespace pvmm
