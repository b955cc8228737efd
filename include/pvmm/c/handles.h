/* pvmm/c/handles.h - the one list of the C interface's handle kinds (part of pvmm/pvmm.h). Each entry generates the
 * handle type `pvmm_<name>` ({0} is the null handle), and the library takes the kind tag (the handle's top byte) and
 * the name in its errors from the same list (src/c_api/common.hpp): a kind is added here and nowhere else. */
#ifndef PVMM_C_HANDLES_H
#define PVMM_C_HANDLES_H

#include <stdint.h>

/* X(name, tag, what): tags are part of the ABI (a handle's value holds its tag): never renumbered, only appended. */
#define PVMM_C_HANDLE_LIST(X)                                                                         \
  X(allocation, 1, "physical memory (pvmm::physical_allocation)")                                     \
  X(reservation, 2, "a range of virtual addresses (pvmm::address_reservation)")                       \
  X(growable, 3, "pvmm::growable_buffer")                                                             \
  X(pinned, 4, "page-locked host memory pvmm allocated (pvmm::pinned_allocation)")                    \
  X(managed, 5, "pvmm::managed_allocation")                                                           \
  X(bootstrap, 6, "std::shared_ptr<pvmm::bootstrap>")                                                 \
  X(team, 7, "pvmm::team")                                                                            \
  X(window, 8, "pvmm::symmetric_window")                                                              \
  X(stream, 9, "pvmm::stream (one pvmm created)")                                                     \
  X(event, 10, "pvmm::event")                                                                         \
  X(pool, 11, "pvmm::memory_pool")                                                                    \
  X(listener, 12, "pvmm::ipc::listener: a named endpoint of the fd transport")                        \
  X(connection, 13, "pvmm::ipc::connection")                                                          \
  X(imported, 14, "pvmm::imported_buffer: a multi-chunk buffer rebuilt from a descriptor")            \
  X(pool_allocation, 15, "pvmm::pool_allocation: an allocation imported from another process's pool") \
  X(caching, 16, "pvmm::caching_allocator")                                                           \
  X(arena, 17, "pvmm::growable_arena")                                                                \
  X(sleeping, 18, "pvmm::sleeping_allocator")

#define PVMM_C_HANDLE_TYPEDEF(name, tag, what) \
  typedef struct pvmm_##name {                 \
    uint64_t id;                               \
  } pvmm_##name;
PVMM_C_HANDLE_LIST(PVMM_C_HANDLE_TYPEDEF)
#undef PVMM_C_HANDLE_TYPEDEF

#endif /* PVMM_C_HANDLES_H */
