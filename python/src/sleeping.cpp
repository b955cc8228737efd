#include "sleeping.hpp"

#include "common.hpp"

#include <algorithm>
#include <utility>

namespace pvmm_py {

sleeping_allocator::sleeping_allocator(int device, pvmm::stream s, std::size_t granularity) noexcept
    : device_(device), stream_(std::move(s)), granularity_(granularity) {}

sleeping_allocator::~sleeping_allocator() {
  (void)stream_.synchronize();
  std::lock_guard<std::mutex> guard(lock_);
  entries_.clear();  // each entry's mapping goes with its reservation, then its memory
}

pvmm::result<sleeping_allocator*> sleeping_allocator::create(int device) {
  pvmm::allocation_properties props;
  props.location = pvmm::location::device(device);
  auto g = pvmm::query_granularity(props);
  if (!g) return std::move(g).error();
  auto s = pvmm::stream::create(device);
  if (!s) return std::move(s).error();
  return new sleeping_allocator(device, std::move(s).value(), std::max<std::size_t>(g->minimum, 1));
}

pvmm::status sleeping_allocator::map_new(entry& e) const {
  pvmm::allocation_properties props;
  props.location = pvmm::location::device(device_);
  auto memory = pvmm::physical_allocation::create(e.size, props);
  if (!memory) return std::move(memory).error();
  const pvmm::access_descriptor grant{pvmm::location::device(device_), pvmm::access::read_write};
  auto mapped = e.range.map_and_grant(0, *memory, {grant});
  if (!mapped) return std::move(mapped).error();
  e.memory = std::move(memory).value();
  return {};
}

pvmm::result<void*> sleeping_allocator::allocate(std::size_t size, const std::string& tag) {
  if (size == 0) return make_error(pvmm::errc::invalid_size, "pvmm.SleepingAllocator.allocate", "size is zero");
  entry e;
  e.tag = tag;
  e.size = (size + granularity_ - 1) / granularity_ * granularity_;
  auto range = pvmm::address_reservation::reserve(e.size);
  if (!range) return std::move(range).error();
  e.range = std::move(range).value();
  if (auto ok = map_new(e); !ok) return std::move(ok).error();
  void* address = e.range.address();
  std::lock_guard<std::mutex> guard(lock_);
  entries_.emplace(reinterpret_cast<std::uintptr_t>(address), std::move(e));
  return address;
}

pvmm::status sleeping_allocator::free(void* address) {
  std::lock_guard<std::mutex> guard(lock_);
  auto it = entries_.find(reinterpret_cast<std::uintptr_t>(address));
  if (it == entries_.end())
    return make_error(pvmm::errc::invalid_argument, "pvmm.SleepingAllocator.free",
                      "the address is not an allocation of this allocator (freed already, or another's)");
  entries_.erase(it);
  return {};
}

bool sleeping_allocator::selected(const entry& e, const std::vector<std::string>& tags) {
  return tags.empty() || std::find(tags.begin(), tags.end(), e.tag) != tags.end();
}

pvmm::status sleeping_allocator::sleep(const std::vector<std::string>& tags, bool offload) {
  std::lock_guard<std::mutex> guard(lock_);
  if (auto ok = stream_.synchronize(); !ok) return ok;
  for (auto& [address, e] : entries_) {
    if (e.asleep || !selected(e, tags)) continue;
    if (offload) {
      auto copy = pvmm::pinned_allocation::create(e.size);
      if (!copy) return std::move(copy).error();
      if (auto ok = stream_.copy_async(copy->data(), e.range.address(), e.size); !ok) return ok;
      if (auto ok = stream_.synchronize(); !ok) return ok;
      e.copy = std::move(copy).value();
    }
    if (auto ok = e.range.unmap(0, e.size); !ok) return ok;
    if (auto ok = e.memory.release(); !ok) return ok;
    e.asleep = true;
  }
  return {};
}

pvmm::status sleeping_allocator::wake(const std::vector<std::string>& tags) {
  std::lock_guard<std::mutex> guard(lock_);
  for (auto& [address, e] : entries_) {
    if (!e.asleep || !selected(e, tags)) continue;
    if (auto ok = map_new(e); !ok) return ok;
    e.asleep = false;
    if (e.copy.valid()) {
      if (auto ok = stream_.copy_async(e.range.address(), e.copy.data(), e.size); !ok) return ok;
      if (auto ok = stream_.synchronize(); !ok) return ok;
      (void)e.copy.release();
    }
  }
  return {};
}

sleeping_allocator::stats sleeping_allocator::statistics(const std::optional<std::string>& tag) const {
  std::lock_guard<std::mutex> guard(lock_);
  stats s;
  for (const auto& [address, e] : entries_) {
    if (tag && e.tag != *tag) continue;
    ++s.allocations;
    s.reserved_bytes += e.size;
    if (e.asleep) {
      ++s.asleep;
      if (e.copy.valid()) s.offloaded_bytes += e.size;
    } else {
      s.resident_bytes += e.size;
    }
  }
  return s;
}

std::optional<std::string> sleeping_allocator::tag_of(void* address) const {
  std::lock_guard<std::mutex> guard(lock_);
  auto it = entries_.find(reinterpret_cast<std::uintptr_t>(address));
  if (it == entries_.end()) return std::nullopt;
  return it->second.tag;
}

std::size_t sleeping_allocator::size_of(void* address) const {
  std::lock_guard<std::mutex> guard(lock_);
  auto it = entries_.find(reinterpret_cast<std::uintptr_t>(address));
  return it == entries_.end() ? 0 : it->second.size;
}

}  // namespace pvmm_py
