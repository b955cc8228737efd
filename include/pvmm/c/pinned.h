/* pvmm/c/pinned.h - pinned (page-locked) host memory, registered host memory and managed memory (part of pvmm/pvmm.h,
 * C11; include <pvmm/pvmm.h> for everything). */
#ifndef PVMM_C_PINNED_H
#define PVMM_C_PINNED_H

#include <pvmm/c/devices.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- pinned and managed memory --------------------------------------------------------------------------------- */

typedef struct pvmm_pinned_options {
  size_t struct_size;
  int portable;       /**< PVMM_INIT: 1 */
  int mapped;         /**< PVMM_INIT: 1 */
  int write_combined; /**< PVMM_INIT: 0 */
} pvmm_pinned_options;
#define PVMM_C_DEFAULTS_pvmm_pinned_options(F) F(portable, 1) F(mapped, 1)

/** `options` may be NULL (PVMM_INIT(pvmm_pinned_options)'s defaults). */
PVMM_C_API pvmm_status pvmm_pinned_create(size_t size, const pvmm_pinned_options* options,
                                          pvmm_pinned* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_pinned_release(pvmm_pinned memory) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_pinned_data(pvmm_pinned memory, void** data, size_t* size) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_register_host_memory(void* pointer, size_t size,
                                                 const pvmm_pinned_options* options) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_unregister_host_memory(void* pointer) PVMM_C_NOEXCEPT;

typedef enum pvmm_attach_mode { pvmm_attach_global = 0, pvmm_attach_host = 1, pvmm_attach_single = 2 } pvmm_attach_mode;
PVMM_C_API pvmm_status pvmm_managed_create(size_t size, int attach_mode, pvmm_managed* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_managed_release(pvmm_managed memory) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_managed_data(pvmm_managed memory, void** data, size_t* size) PVMM_C_NOEXCEPT;

/** Advice about a managed range (pvmm::advice, cuMemAdvise); the set_/unset_ pairs undo each other. */
typedef enum pvmm_advice {
  pvmm_advice_set_read_mostly = 0,
  pvmm_advice_unset_read_mostly = 1,
  pvmm_advice_set_preferred_location = 2,
  pvmm_advice_unset_preferred_location = 3,
  pvmm_advice_set_accessed_by = 4,
  pvmm_advice_unset_accessed_by = 5
} pvmm_advice;
/** `where` is NULL for the read-mostly advice and unset_preferred_location, a processor for the others. */
PVMM_C_API pvmm_status pvmm_managed_advise(const void* pointer, size_t size, int advice,
                                           const pvmm_location* where) PVMM_C_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PVMM_C_PINNED_H */
