/* pvmm/errc_list.h - every portable error code once: X(name, value, meaning). Pure preprocessor, so both the C++
 * interface (pvmm/error.hpp: enum class pvmm::errc, to_string) and the C interface (pvmm/pvmm.h: pvmm_status) are
 * generated from this one list. Values are stable (they may be stored or sent). */
#ifndef PVMM_ERRC_LIST_H
#define PVMM_ERRC_LIST_H

#define PVMM_ERRC_LIST(X)                                                                                     \
  X(invalid_argument, 1, "an argument is malformed (null pointer, empty list, ...)")                          \
  X(invalid_size, 2, "a size is zero")                                                                        \
  X(unaligned, 3, "a size or offset is not a multiple of the granularity that applies")                       \
  X(invalid_alignment, 4, "an alignment is not a power of two or not a multiple of the granularity")          \
  X(invalid_device, 5, "the device ordinal does not exist")                                                   \
  X(invalid_location, 6, "the location kind or id is not valid for this operation")                           \
  X(out_of_range, 7, "a range falls outside its reservation, allocation or multicast object")                 \
  X(overlapping_mapping, 8, "the target range already holds a mapping")                                       \
  X(partial_mapping, 9, "the range cuts through a mapping; pvmm works on whole mappings")                     \
  X(not_mapped, 10, "the range (or address) is not covered by mappings")                                      \
  X(busy, 11, "the object has dependants, or another thread is changing it")                                  \
  X(already_released, 12, "the owner was released or moved from")                                             \
  X(invalid_handle, 13, "a handle or fd does not name memory pvmm can import")                                \
  X(handle_type_not_requested, 14, "export of a handle type the allocation was not created for")              \
  X(not_supported, 15, "the backend or device lacks the capability")                                          \
  X(not_permitted, 16, "the system refuses (for example: fabric handles without an IMEX channel)")            \
  X(address_unavailable, 17, "a fixed-address hint was not honoured; the range was given back")               \
  X(out_of_memory, 18, "physical memory or address space is exhausted, or a size exceeds what can exist")     \
  X(backend_unavailable, 19, "no driver, no runtime, or no device")                                           \
  X(runtime_too_old, 20, "the runtime is older than the version whose VMM works")                             \
  X(timeout, 21, "a transfer did not complete in time")                                                       \
  X(peer_rejected, 22, "the peer's credentials did not satisfy the caller's rule")                            \
  X(protocol_error, 23, "a message or descriptor from a peer is malformed, truncated or inconsistent")        \
  X(system_error, 24, "an operating-system call failed (native_name holds the errno name)")                   \
  X(backend_error, 25, "the backend failed in a way with no portable meaning (see native_name)")              \
  X(already_registered, 26, "host memory in the range is page-locked (registered) already")                   \
  X(not_registered, 27, "the address does not start a registered host range")                                 \
  X(peer_lost, 28, "a peer (process or rank) exited, closed its end or aborted before the step completed")    \
  X(team_mismatch, 29, "the ranks of a team disagree: size, rank, backend, version or window options differ") \
  X(version_mismatch, 30, "a C caller's structure (options, bootstrap table) has a version or size pvmm does not know")

#endif /* PVMM_ERRC_LIST_H */
