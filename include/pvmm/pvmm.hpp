// pvmm/pvmm.hpp - everything.
//
// Threading contract (each header says the details for its types): every free function may be called from
// any thread; owners (physical_allocation, address_reservation, multicast_object, growable_buffer,
// owned_fd) are used like any C++ object — their const members concurrently, never moved or destroyed
// while in use — and address_reservation also allows concurrent map/unmap/set_access on different mappings.
// Concurrent misuse of one object is reported (errc::busy), never a corrupted process.
#pragma once

#include <pvmm/allocation.hpp>
#include <pvmm/descriptor.hpp>
#include <pvmm/device.hpp>
#include <pvmm/diagnostics.hpp>
#include <pvmm/endpoint.hpp>
#include <pvmm/error.hpp>
#include <pvmm/growable_buffer.hpp>
#include <pvmm/ipc.hpp>
#include <pvmm/managed.hpp>
#include <pvmm/memory_pool.hpp>
#include <pvmm/multicast.hpp>
#include <pvmm/owned_fd.hpp>
#include <pvmm/pinned.hpp>
#include <pvmm/pointer.hpp>
#include <pvmm/reservation.hpp>
#include <pvmm/stream.hpp>
#include <pvmm/types.hpp>
