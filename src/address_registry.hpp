// The process-wide registry of live reservations by base address. Process-wide because addresses are:
// retain(address) and query_access(address) must find a mapping without the reservation's owner (and pools
// and managed ranges will register here too). Its lock guards the index only; a lookup then takes the found
// reservation's own lock, so operations on unrelated reservations never wait for each other.
#pragma once

#include <memory>

#include "operation.hpp"
#include "ownership.hpp"

namespace pvmm::detail::address_registry {

void add(reservation_state* reservation);
void remove(reservation_state* reservation);

/// Whether `address` lies in a live reservation (mapped or not).
bool contains(const void* address);

/// The allocation mapped at `address` (anywhere inside a mapping), or errc::not_mapped.
result<std::shared_ptr<allocation_state>> find_mapped(const void* address, const operation& op);

}  // namespace pvmm::detail::address_registry
