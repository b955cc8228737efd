// The address registry: base address -> reservation, under its own lock.
#include "address_registry.hpp"

#include <cstdint>
#include <map>
#include <mutex>

namespace pvmm::detail::address_registry {
namespace {
std::mutex index_lock;
std::map<std::uintptr_t, reservation_state*> index;  // many entries, inserted anywhere: a tree

std::uintptr_t key(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
}  // namespace

void add(reservation_state* r) {
  std::lock_guard<std::mutex> guard(index_lock);
  index.emplace(key(r->address), r);
}

void remove(reservation_state* r) {
  std::lock_guard<std::mutex> guard(index_lock);
  index.erase(key(r->address));
}

result<std::shared_ptr<allocation_state>> find_mapped(const void* address, const operation& op) {
  std::lock_guard<std::mutex> guard(index_lock);  // keeps the reservation from being freed meanwhile
  auto it = index.upper_bound(key(address));
  if (it == index.begin()) return op.fail(errc::not_mapped, "no pvmm mapping contains the address");
  --it;
  reservation_state* r = it->second;
  const std::size_t offset = key(address) - it->first;
  if (offset >= r->size) return op.fail(errc::not_mapped, "no pvmm mapping contains the address");
  std::lock_guard<std::mutex> mappings_guard(r->lock);
  auto m = r->mappings.upper_bound(offset);
  if (m == r->mappings.begin() || offset >= std::prev(m)->first + std::prev(m)->second.size)
    return op.fail(errc::not_mapped, "the address is reserved but not mapped");
  return std::prev(m)->second.memory;
}

bool contains(const void* address) {
  std::lock_guard<std::mutex> guard(index_lock);
  auto it = index.upper_bound(key(address));
  if (it == index.begin()) return false;
  --it;
  return key(address) - it->first < it->second->size;
}

}  // namespace pvmm::detail::address_registry
