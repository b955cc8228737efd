// pvmm/diagnostics.hpp - counts of live pvmm objects, for leak checks in tests and long-running services.
#pragma once

#include <cstddef>

namespace pvmm {

struct live_objects {
  std::size_t allocations = 0;       ///< physical allocations and multicast objects still referenced
  std::size_t reservations = 0;      ///< reserved ranges not yet freed
  std::size_t mappings = 0;          ///< mappings not yet unmapped
  std::size_t streams = 0;           ///< streams pvmm created and has not destroyed
  std::size_t events = 0;            ///< events pvmm created and has not destroyed
  std::size_t pools = 0;             ///< memory pools (owned or default) still referenced
  std::size_t pool_allocations = 0;  ///< pool allocations not yet freed
  std::size_t managed = 0;           ///< managed allocations not yet freed
  std::size_t pinned = 0;            ///< page-locked allocations not yet freed
  std::size_t registrations = 0;     ///< registered host ranges not yet unregistered
  friend bool operator==(const live_objects& a, const live_objects& b) noexcept {
    return a.allocations == b.allocations && a.reservations == b.reservations && a.mappings == b.mappings &&
           a.streams == b.streams && a.events == b.events && a.pools == b.pools &&
           a.pool_allocations == b.pool_allocations && a.managed == b.managed && a.pinned == b.pinned &&
           a.registrations == b.registrations;
  }
};

/// What this process holds through pvmm right now. Reservations, mappings and pool allocations are counted from
/// pvmm's records of them (a pass over every reservation), so the hot paths keep no counter: meant for leak
/// checks, not for a loop.
live_objects query_live_objects() noexcept;

}  // namespace pvmm
