/* pvmm/c/buffers.h - growable buffers and descriptors (a multi-chunk buffer shared as bytes plus fds) (part of
 * pvmm/pvmm.h, C11; include <pvmm/pvmm.h> for everything). */
#ifndef PVMM_C_BUFFERS_H
#define PVMM_C_BUFFERS_H

#include <pvmm/c/devices.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- growable buffers ------------------------------------------------------------------------------------------ */

typedef struct pvmm_growable_options {
  size_t struct_size;
  pvmm_allocation_properties properties; /**< its own struct_size is checked too */
  const pvmm_access_descriptor* access;  /**< at least one grant */
  size_t access_count;
  size_t chunk_size;   /**< 0: the library's default */
  size_t reserve_size; /**< 0: the library's default */
} pvmm_growable_options;
#define PVMM_C_DEFAULTS_pvmm_growable_options(F) F(properties.struct_size, sizeof(pvmm_allocation_properties))

PVMM_C_API pvmm_status pvmm_growable_create(const pvmm_growable_options* options, pvmm_growable* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_growable_release(pvmm_growable buffer) PVMM_C_NOEXCEPT;
/** Grows (or shrinks) to `size`; *moved (may be NULL) is 1 when the data moved to a new address. */
PVMM_C_API pvmm_status pvmm_growable_resize(pvmm_growable buffer, size_t size, int* moved) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_growable_data(pvmm_growable buffer, void** data, size_t* size) PVMM_C_NOEXCEPT;

/* ---- descriptors: a multi-chunk buffer exported as bytes plus fds, rebuilt contiguous by the importer ---------- */

/** Exports every chunk of `buffer` (kind pvmm_handle_posix_fd or pvmm_handle_fabric) as a serialized descriptor of
 * *length bytes and *fd_count fds (the caller's: send them, then close them). Where `capacity` or `fd_capacity` is
 * too small: pvmm_status_out_of_range, *length and *fd_count say what is needed, and no fd is left open. */
PVMM_C_API pvmm_status pvmm_growable_export(pvmm_growable buffer, unsigned kind, uint8_t* bytes, size_t capacity,
                                            size_t* length, int* fds, size_t fd_capacity,
                                            size_t* fd_count) PVMM_C_NOEXCEPT;
/** Rebuilds a buffer from a descriptor's bytes and its fds (borrowed), mapped contiguously with `grants`. Nothing
 * in the bytes is trusted (pvmm_status_protocol_error for malformed ones). */
PVMM_C_API pvmm_status pvmm_import_buffer(const uint8_t* bytes, size_t length, const int* fds, size_t fd_count,
                                          const pvmm_access_descriptor* grants, size_t grant_count,
                                          pvmm_imported* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_imported_data(pvmm_imported buffer, void** data, size_t* size) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_imported_release(pvmm_imported buffer) PVMM_C_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PVMM_C_BUFFERS_H */
