// Reservations in the process-wide range registry (core/range_registry.hpp), by address. Process-wide because
// addresses are: retain(address) and query_access(address) must find a mapping without the reservation's owner.
// The registry's shard lock guards the index only; a lookup then takes the found reservation's own lock, so
// operations on unrelated reservations never wait for each other. Adding and removing allocate nothing in the
// steady state (range_registry.cpp says how).
#pragma once

#include <memory>

#include "core/operation.hpp"
#include "core/ownership.hpp"

namespace pvmm::detail::address_registry {

/// Enters a reservation (its address and size set). False when the index could not grow (out of memory).
bool add(reservation_state* reservation);
void remove(reservation_state* reservation);

/// The mappings the backend made in every reservation (query_live_objects).
std::size_t count_mappings() noexcept;

/// The allocation mapped at `address` (anywhere inside a mapping), or errc::not_mapped.
result<std::shared_ptr<allocation_state>> find_mapped(const void* address, const operation& op);

}  // namespace pvmm::detail::address_registry
