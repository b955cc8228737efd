/* pvmm/pvmm.h - the C interface (C11, also compiles as C++): a stable ABI over the C++ library for the runtimes
 * written in C (UCX, Open MPI, libfabric, OpenSHMEM, NIXL). Its parts live in pvmm/c/ by area; this header includes
 * them all.
 *
 * Conventions (every entry point):
 * - returns pvmm_status: pvmm_status_ok (0) or a code equal to the C++ pvmm::errc value (both come from
 *   PVMM_ERRC_LIST in pvmm/errc_list.h); results go through out-parameters, written only on success;
 * - a failure also fills this thread's last-error record (pvmm_last_error_*): the whole message, the operation, the
 *   arguments, the detail (naming the argument that was wrong), the native error and a hint; a success leaves it as
 *   it was;
 * - never throws, never aborts: a C++ exception is caught and reported as a status (std::bad_alloc, and a byte count
 *   no memory could hold, are pvmm_status_out_of_memory; that path allocates nothing);
 * - pointers are checked against what pvmm knows before anything is done or enqueued: a NULL required pointer is
 *   pvmm_status_invalid_argument naming it; a copy's ranges must lie in mapped, accessible memory
 *   (pvmm_copy_async, pvmm_copy_to_mapping, pvmm_copy_from_mapping);
 * - handles are small values ({0} is the null handle) naming entries of a registry with generation counters: a null
 *   or foreign handle, or one of another type, is pvmm_status_invalid_handle; a released (freed or double-freed)
 *   one is pvmm_status_already_released; each with a message saying which, never a crash;
 * - every options struct starts with `struct_size`, and PVMM_INIT(type) gives its defaults (0 is not special: a
 *   field's default is whatever PVMM_INIT puts there). Fields are only ever appended: a library reads any
 *   struct_size from the struct's first published size up to its own (the prefix a caller was compiled with; the
 *   rest takes the defaults) and writes an output struct only as far as its struct_size; any other size is
 *   pvmm_status_version_mismatch. pvmm_bootstrap_ops likewise.
 * - one timeout rule: a timeout is int64_t milliseconds; 0 expires now (try once, do not wait); PVMM_WAIT_FOREVER
 *   (-1) waits without deadline; any other negative value is pvmm_status_invalid_argument naming the parameter.
 *   Defaults live in PVMM_INIT (options structs), never in a special value. (The bootstrap's callbacks and calls
 *   take absolute CLOCK_MONOTONIC deadlines in nanoseconds instead: pvmm_monotonic_ns, INT64_MAX never.)
 * - signalling waits take (channel, stream, timeout) in that order, as in C++ and Python.
 *
 * Threading: as the C++ owners (a handle is one owner): different handles from any thread; the last-error record is
 * per thread. Releasing a handle while another thread uses it is safe by construction: the release kills the handle
 * and the owner is torn down when the last call inside it ends, so the other call finishes on the object it had
 * looked up (its answer is the object's, never a torn one), or sees pvmm_status_already_released.
 */
#ifndef PVMM_PVMM_H
#define PVMM_PVMM_H

/* The parts, by area (each includes what it needs; this header gives everything). */
#include <pvmm/c/alloc.h>
#include <pvmm/c/buffers.h>
#include <pvmm/c/common.h>
#include <pvmm/c/devices.h>
#include <pvmm/c/pinned.h>
#include <pvmm/c/pointer.h>
#include <pvmm/c/snapshot.h>
#include <pvmm/c/streams.h>
#include <pvmm/c/team.h>
#include <pvmm/c/transport.h>
#include <pvmm/c/vmm.h>

#endif /* PVMM_PVMM_H */
