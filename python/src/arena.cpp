#include "arena.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "common.hpp"

namespace pvmm_py {

namespace {
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
}  // namespace

growable_arena::growable_arena(int device, pvmm::growable_buffer buffer) noexcept
    : device_(device), buffer_(std::move(buffer)) {
  counters_.reserved_bytes = buffer_.capacity();
}

pvmm::result<std::unique_ptr<growable_arena>> growable_arena::create(int device, std::size_t reserve_size,
                                                                     std::size_t chunk_size) {
  if (reserve_size == 0) {
    auto info = pvmm::query_device(device);
    if (!info) return std::move(info).error();
    reserve_size = info->total_memory;
  }
  pvmm::growable_options o;
  o.properties.location = pvmm::location::device(device);
  o.access = {{pvmm::location::device(device), pvmm::access::read_write}};
  o.chunk_size = chunk_size;
  o.reserve_size = reserve_size;
  auto buffer = pvmm::growable_buffer::create(o);
  if (!buffer) return std::move(buffer).error();
  return std::unique_ptr<growable_arena>(new growable_arena(device, std::move(buffer).value()));
}

pvmm::status growable_arena::map_to(std::size_t size) {
  const std::size_t before = buffer_.size();
  auto out = buffer_.resize(size);
  if (!out) return std::move(out).error();
  if (out->moved)  // cannot happen within the reservation; live allocations would have changed address
    return make_error(pvmm::errc::backend_error, "pvmm.GrowableArena", "the arena's buffer moved");
  if (buffer_.size() > before) ++counters_.grows;
  if (buffer_.size() < before) ++counters_.shrinks;
  counters_.mapped_bytes = buffer_.size();
  counters_.peak_mapped_bytes = std::max(counters_.peak_mapped_bytes, counters_.mapped_bytes);
  return {};
}

pvmm::result<void*> growable_arena::allocate(std::size_t size) {
  if (size == 0) return make_error(pvmm::errc::invalid_size, "pvmm.GrowableArena.allocate", "size is zero");
  if (size > buffer_.capacity())
    return make_error(pvmm::errc::out_of_memory, "pvmm.GrowableArena.allocate",
                      std::to_string(size) + " bytes exceed the arena's reservation of " +
                          std::to_string(buffer_.capacity()) + " bytes (reserve_size=)");
  const std::size_t bytes = round_up(size, alignment);
  std::lock_guard<std::mutex> guard(lock_);
  // Best fit among the freed blocks below the top (the smallest that holds `bytes`), else at the top.
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->second >= bytes && (best == free_.end() || it->second < best->second)) best = it;
  std::size_t offset = top_;
  if (best != free_.end()) {
    offset = best->first;
    const std::size_t left = best->second - bytes;
    free_.erase(best);
    if (left) free_.emplace(offset + bytes, left);
  } else {
    if (bytes > buffer_.capacity() - top_)
      return make_error(pvmm::errc::out_of_memory, "pvmm.GrowableArena.allocate",
                        "the arena's reservation of " + std::to_string(buffer_.capacity()) + " bytes is full (" +
                            std::to_string(counters_.allocated_bytes) + " bytes allocated, " + std::to_string(bytes) +
                            " more asked): create it with a larger reserve_size");
    if (top_ + bytes > buffer_.size()) {
      if (auto ok = map_to(top_ + bytes); !ok) return std::move(ok).error();
    }
    top_ += bytes;
  }
  live_.emplace(offset, bytes);
  ++counters_.allocations;
  counters_.allocated_bytes += bytes;
  return static_cast<void*>(static_cast<unsigned char*>(buffer_.data()) + offset);
}

pvmm::status growable_arena::free(void* address) {
  std::lock_guard<std::mutex> guard(lock_);
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  const auto base = reinterpret_cast<std::uintptr_t>(buffer_.data());
  auto it = at >= base ? live_.find(at - base) : live_.end();
  if (it == live_.end())
    return make_error(pvmm::errc::invalid_argument, "pvmm.GrowableArena.free",
                      "the address is not an allocation of this arena (freed already, or another's)");
  std::size_t offset = it->first;
  std::size_t bytes = it->second;
  live_.erase(it);
  --counters_.allocations;
  counters_.allocated_bytes -= bytes;
  // Coalesce with the free neighbours on both sides.
  auto next = free_.find(offset + bytes);
  if (next != free_.end()) {
    bytes += next->second;
    free_.erase(next);
  }
  auto prev = free_.lower_bound(offset);
  if (prev != free_.begin() && std::prev(prev)->first + std::prev(prev)->second == offset) {
    --prev;
    offset = prev->first;
    bytes += prev->second;
    free_.erase(prev);
  }
  if (offset + bytes != top_) {
    free_.emplace(offset, bytes);
    return {};
  }
  top_ = offset;  // the highest block went: give back the chunks nothing reaches any more
  const std::size_t keep = round_up(top_, buffer_.chunk_size());
  if (keep < buffer_.size()) return map_to(keep);
  return {};
}

growable_arena::stats growable_arena::statistics() const {
  std::lock_guard<std::mutex> guard(lock_);
  return counters_;
}

std::size_t growable_arena::size_of(void* address) const {
  std::lock_guard<std::mutex> guard(lock_);
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  const auto base = reinterpret_cast<std::uintptr_t>(buffer_.data());
  auto it = at >= base ? live_.find(at - base) : live_.end();
  return it == live_.end() ? 0 : it->second;
}

}  // namespace pvmm_py
