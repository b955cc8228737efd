// address_reservation's access control: set_access (a claim slot on the granted mappings, or busy marks, while the
// backend grants) and query_access. The marks: claim_marks.hpp and docs/design.md, "Claim marks".
//
// Hot layout: address_reservation::set_access (and its lambdas) are listed by mangled name in
// cmake/hot_layout.ld; a rename or a new signature drops one out of it (ctest -R hot_layout says so).
#include <algorithm>
#include <cstddef>
#include <mutex>

#include <fmt/format.h>

#include <pvmm/reservation.hpp>

#include "backend/vmm.hpp"
#include "core/address_registry.hpp"
#include "core/describe.hpp"
#include "core/device.hpp"
#include "core/short_list.hpp"
#include "vmm/reservation_checks.hpp"

namespace pvmm {
namespace detail {
namespace {

struct span {
  std::size_t offset;
  std::size_t size;
};
using span_list = short_list<span, 4>;  // a call usually touches one mapping

/// Host grants (to host() or host_numa(n)) are a capability: memory on the host can be granted to the host
/// where host memory exists at all; device memory only where the device says so; a multicast object never.
status check_host_access(const short_list<const allocation_state*, 4>& memories, const operation& op) {
  for (const allocation_state* m : memories) {
    if (m->what == allocation_state::kind::multicast)
      return op.fail(errc::not_supported, "the host cannot be granted access to a multicast object's mapping");
    const location where = m->properties.location;
    if (where.type != location::kind::device) continue;
    PVMM_TRY_ASSIGN(c, device_capabilities(where.id));
    if (!c.vmm.host_access_to_device_memory)
      return op.fail(errc::not_supported,
                     fmt::format("the host cannot be granted access to memory on device {}", where.id),
                     "create the memory at location::host() or host_numa(n) for the host to access it "
                     "(capabilities.vmm.host_access_to_device_memory)");
  }
  return {};
}

}  // namespace
}  // namespace detail

using detail::call_backend;

status address_reservation::set_access(std::size_t offset, std::size_t size, access_list list) {
  const access_descriptor* grants = list.data();
  const std::size_t count = list.size();
  auto args = [&] { return fmt::format("offset={:#x}, size={:#x}, grants={}", offset, size, count); };
  const detail::operation op{"pvmm::address_reservation::set_access", args};
  if (!state_) return detail::released_reservation(op);
  if (grants == nullptr || count == 0) return op.fail(errc::invalid_argument, "no access grants given");
  for (std::size_t i = 0; i < count; ++i) {
    const auto& g = grants[i];
    if (g.location.type != location::kind::device && g.location.type != location::kind::host &&
        g.location.type != location::kind::host_numa)
      return op.fail(errc::invalid_location, fmt::format("grant {} has an unknown location kind", i));
    PVMM_TRY(detail::check_location(g.location, op));
    if (g.access != access::none && g.access != access::read && g.access != access::read_write)
      return op.fail(errc::invalid_argument,
                     fmt::format("grant {} has an unknown access value {}", i, static_cast<int>(g.access)));
    for (std::size_t j = 0; j < i; ++j)
      if (grants[j].location == g.location)
        return op.fail(errc::invalid_argument,
                       fmt::format("grants {} and {} both name {}", j, i, detail::describe(g.location)));
  }
  const bool to_host = std::any_of(grants, grants + count, [](const access_descriptor& g) {
    return g.location.type != location::kind::device && g.access != access::none;
  });
  // The claim covers exactly the adjacent mappings that make up [offset, offset + size) (whole_mappings), and keeps
  // them in the table until it is released: the release finds them again from `offset`, with no list of them.
  detail::span_list pieces;  // one driver call per mapping where the backend needs it (HIP), else none: the range
  detail::short_list<const detail::allocation_state*, 4> memories;  // for the host-access check
  const bool one_call = detail::backend::traits.set_access_spans_mappings;
  std::size_t slot = 0;        // where the first claimed mapping is in the table, unless another thread moved it
  std::size_t grant_slot = 0;  // the claim's grant slot (1-based); 0: busy marks, released under the lock
  auto release_claim = [&] {
    if (grant_slot != 0) {  // one store: no other thread changes the mappings a claim slot holds
      detail::give_back_claim_slot(*state_, grant_slot);
      return;
    }
    std::lock_guard<detail::spin_lock> guard(state_->lock);
    detail::release_claimed_range(*state_, offset, size, slot);
  };
  {
    std::lock_guard<detail::spin_lock> guard(state_->lock);
    detail::mapping_span range;
    PVMM_TRY(detail::whole_mappings(*state_, offset, size, op, range));
    PVMM_TRY(detail::check_claimable(*state_, range.first, range.last, op));
    slot = state_->mappings.index_of(range.first);
    grant_slot = detail::claim_for_grant(*state_, offset, size, range.first, range.last, slot);
    if (!one_call || to_host)
      for (auto it = range.first; it != range.last; ++it) {
        if (!one_call) pieces.push_back({it->first, it->second.size});
        if (to_host) memories.push_back(it->second.memory.get());  // kept alive by the claimed mapping
      }
  }
  if (auto ok = memories.size() == 0 ? status{} : detail::check_host_access(memories, op); !ok) {
    release_claim();
    return std::move(ok).error();
  }
  auto grant = [&](std::size_t off, std::size_t sz) {
    return call_backend("set_access", [&] {
      return detail::backend::set_access(static_cast<char*>(state_->address) + off, sz, grants, count);
    });
  };
  status outcome;
  if (one_call) {
    outcome = grant(offset, size);
  } else {
    for (auto [off, sz] : pieces)
      if (outcome = grant(off, sz); !outcome) break;
  }
  release_claim();
  if (!outcome) return op.wrap(std::move(outcome).error());
  return {};
}

result<access> query_access(location where, const void* address) {
  auto args = [&] { return fmt::format("location={}, address={}", detail::describe(where), address); };
  const detail::operation op{"pvmm::query_access", args};
  PVMM_TRY(detail::check_location(where, op));
  PVMM_TRY(detail::address_registry::find_mapped(address, op));
  return op.step("get_access", [&] { return detail::backend::get_access(where, address); });
}

}  // namespace pvmm
