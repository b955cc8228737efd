// pvmm/pvmm.hpp - everything.
//
// Threading contract (each header's "Threading:" paragraph says the details for its types): every free function
// may be called from any thread. Every owner — physical_allocation, address_reservation, multicast_object,
// growable_buffer, owned_fd, memory_pool, pool_allocation, managed_allocation, pinned_allocation,
// host_registration, stream and event — is used like any C++ object: its const members concurrently, release(),
// moving and destruction never while another thread uses it. Beyond that: address_reservation allows concurrent
// map/unmap/set_access on different mappings; memory_pool allows concurrent allocate/free, caching_allocator and
// pinned_pool concurrent allocate/deallocate/trim/stats; stream and event calls (stream_ref included) may come from
// several threads at once. Concurrent misuse of one object is reported (errc::busy) where pvmm can see it, never a
// corrupted process.
//
// Calls that block (wait for a device, a peer, a socket or a deadline; bindings release the GIL around exactly
// these, docs/design.md "Bindings"): stream_ref/stream synchronize, stream::release and its destructor, event
// synchronize, pool_allocation's destructor (it synchronizes the pool's own stream), growable_buffer::resize and
// create (many driver calls), send_fds/receive_fds/receive_exactly/check_peer (ipc.hpp), every endpoint call
// (endpoint.hpp), import_buffer, memory_pool import/export over a socket, every bootstrap call (bootstrap.hpp,
// bootstrap_mpi.hpp), team::create and every team/window collective (team.hpp, team_multicast.hpp). The rest return
// after driver calls that do not wait for other work.
//
// One timeout rule, on every face (C: pvmm/pvmm.h; Python: the stub): a timeout is std::chrono::milliseconds (C and
// Python: int64 milliseconds). 0 expires now (try once, do not wait); ipc::wait_forever (milliseconds::max(); C:
// PVMM_WAIT_FOREVER = -1; Python: pvmm.WAIT_FOREVER = -1) waits without deadline; any other negative value is
// errc::invalid_argument naming the parameter. Defaults live in the signatures (default arguments, options structs'
// initialisers), never in a special value. Signalling waits take (channel, stream, timeout) in that order.
#pragma once

#include <pvmm/allocation.hpp>
#include <pvmm/caching_allocator.hpp>
#include <pvmm/descriptor.hpp>
#include <pvmm/device.hpp>
#include <pvmm/diagnostics.hpp>
#include <pvmm/dmabuf.hpp>
#include <pvmm/endpoint.hpp>
#include <pvmm/error.hpp>
#include <pvmm/growable_arena.hpp>
#include <pvmm/growable_buffer.hpp>
#include <pvmm/ipc.hpp>
#include <pvmm/managed.hpp>
#include <pvmm/memory_pool.hpp>
#include <pvmm/multicast.hpp>
#include <pvmm/owned_fd.hpp>
#include <pvmm/pinned.hpp>
#include <pvmm/pinned_pool.hpp>
#include <pvmm/pointer.hpp>
#include <pvmm/reservation.hpp>
#include <pvmm/sleeping_allocator.hpp>
#include <pvmm/snapshot.hpp>
#include <pvmm/stream.hpp>
#include <pvmm/types.hpp>
