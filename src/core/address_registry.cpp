// Hot layout: address_registry::add and ::remove are listed by mangled name in cmake/hot_layout.ld; a rename or a new
// signature drops one out of the layout (the CTest tools/hot_layout says so).
//
// The address registry: reservations in the range registry (range_registry.hpp), and the lookups VMM needs from
// it. The range's owner is the reservation_state, which a lookup may use only while the registry holds the range.
#include "core/address_registry.hpp"

#include <mutex>
#include <optional>

#include "core/range_registry.hpp"
#include "core/spin_lock.hpp"
#include "observe/observe.hpp"

namespace pvmm::detail::address_registry {

bool add(reservation_state* r) {
  range_registry::range entry;
  entry.base = r->address;
  entry.size = r->size;
  entry.kind = memory_kind::device;
  entry.owner = r;
  return range_registry::add(entry);  // a tail call: the history's segment_alloc is recorded by reserve
}

void remove(reservation_state* r) {
  observe::record(observe::action::segment_free, r->address, r->size);
  (void)range_registry::remove(r->address, memory_kind::device, r, 0, nullptr, r->size);
}

std::size_t count_mappings() noexcept {
  std::size_t n = 0;
  range_registry::for_each(
      memory_kind::device,
      [](const range_registry::range& entry, void* total) {
        // The registry's lock keeps the reservation from being freed meanwhile.
        auto& r = *static_cast<reservation_state*>(const_cast<void*>(entry.owner));
        std::lock_guard<spin_lock> mappings_guard(r.lock);
        for (const auto& m : r.mappings) *static_cast<std::size_t*>(total) += r.made(m.second) ? 1 : 0;
      },
      &n);
  return n;
}

result<std::shared_ptr<allocation_state>> find_mapped(const void* address, const operation& op) {
  using found_type = result<std::shared_ptr<allocation_state>>;
  std::optional<found_type> found;
  range_registry::visit(address, [&](const range_registry::range& entry) {
    if (entry.kind != memory_kind::device) return;
    // The registry's lock keeps the reservation from being freed meanwhile.
    auto& r = *static_cast<reservation_state*>(const_cast<void*>(entry.owner));
    const std::size_t offset =
        static_cast<std::size_t>(static_cast<const char*>(address) - static_cast<const char*>(entry.base));
    std::lock_guard<spin_lock> mappings_guard(r.lock);
    auto m = r.mappings.upper_bound(offset);
    if (m == r.mappings.begin() || offset >= std::prev(m)->first + std::prev(m)->second.size)
      found.emplace(op.fail(errc::not_mapped, "the address is reserved but not mapped"));
    else
      found.emplace(std::prev(m)->second.memory);
  });
  if (!found) return op.fail(errc::not_mapped, "no pvmm mapping contains the address");
  return std::move(*found);
}

}  // namespace pvmm::detail::address_registry
