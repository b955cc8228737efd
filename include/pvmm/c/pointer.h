/* pvmm/c/pointer.h - what an address is (query_pointer) (part of pvmm/pvmm.h, C11; include <pvmm/pvmm.h> for
 * everything). */
#ifndef PVMM_C_POINTER_H
#define PVMM_C_POINTER_H

#include <pvmm/c/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- what is this address ------------------------------------------------------------------------------------- */

typedef enum pvmm_memory_kind {
  pvmm_memory_none = 0,
  pvmm_memory_device = 1,
  pvmm_memory_pool = 2,
  pvmm_memory_managed = 3,
  pvmm_memory_pinned = 4,
  pvmm_memory_registered = 5
} pvmm_memory_kind;

typedef struct pvmm_pointer_attributes {
  size_t struct_size;
  int kind; /**< pvmm_memory_kind */
  void* base;
  size_t size;
  int device; /**< -1 for host memory and where nothing is mapped */
  int device_accessible_from_host;
  int mapped;
} pvmm_pointer_attributes;
#define PVMM_C_DEFAULTS_pvmm_pointer_attributes(F)

/** What UCX's detect_memory_type and Open MPI's check_addr ask. Memory pvmm did not make is pvmm_memory_none. */
PVMM_C_API pvmm_status pvmm_query_pointer(const void* pointer, pvmm_pointer_attributes* attributes) PVMM_C_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PVMM_C_POINTER_H */
