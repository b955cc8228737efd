// Hot layout: allocation_state::map_at is listed by mangled name in cmake/hot_layout.ld; a rename or a new signature
// drops one out of the layout (the CTest tools/hot_layout says so).
//
// Teardown along the ownership graph: each handle released once, each range unmapped then freed exactly.
#include "core/ownership.hpp"

#include "backend/multicast.hpp"
#include "backend/vmm.hpp"
#include "core/address_registry.hpp"

namespace pvmm::detail {

allocation_state::~allocation_state() {
  (void)release_handle();  // a destructor cannot report; release() is the checked path
  --live_allocations;
}

status allocation_state::release_handle() {
  if (released) return {};
  released = true;
  return what == kind::memory ? backend::release(memory_handle()) : backend::multicast_release(multicast());
}

status allocation_state::map_at(void* address, std::size_t mapped_size, std::size_t offset) const {
  return what == kind::memory ? backend::map(address, mapped_size, memory_handle(), offset)
                              : backend::multicast_map(address, mapped_size, multicast(), offset);
}

status reservation_state::free_range() {
  if (freed) return {};
  freed = true;
  address_registry::remove(this);
  return backend::free_reservation(address, size);  // teardown: never fault-injected
}

status reservation_state::unmap_all() {
  status first_failure;
  flat_map<std::size_t, mapping_record> doomed;
  {
    std::lock_guard<spin_lock> guard(lock);
    if (mappings.empty()) return first_failure;  // keeps the table's storage for the state's next use (recycling)
    doomed.swap(mappings);
  }
  for (auto& [offset, m] : doomed) {
    auto ok = backend::unmap(static_cast<char*>(address) + offset, m.size);  // teardown: never fault-injected
    if (!ok && first_failure) first_failure = std::move(ok);
  }
  doomed.clear();  // the memories go, outside the lock; the storage comes back for the state's next use
  std::lock_guard<spin_lock> guard(lock);
  if (mappings.empty()) mappings.swap(doomed);
  return first_failure;
}

}  // namespace pvmm::detail
