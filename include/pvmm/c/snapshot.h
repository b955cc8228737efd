/* pvmm/c/snapshot.h - a snapshot of everything pvmm holds, as PyTorch's memory visualizer reads it (the C side of
 * pvmm/snapshot.hpp: the schema, what it contains and the history ring are described there) (part of pvmm/pvmm.h,
 * C11; include <pvmm/pvmm.h> for everything). */
#ifndef PVMM_C_SNAPSHOT_H
#define PVMM_C_SNAPSHOT_H

#include <pvmm/c/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Writes a snapshot of this process's pvmm memory to `path` (created or truncated) as a pickle that
 * `python -m torch.cuda._memory_viz segment_plot|trace_plot` and pytorch.org/memory_viz read.
 * pvmm_status_invalid_argument for a null or empty path; pvmm_status_system_error when the file cannot be written. */
PVMM_C_API pvmm_status pvmm_dump_snapshot(const char* path) PVMM_C_NOEXCEPT;

/** The same pickle in memory: *data gets a buffer of *size bytes the caller gives back with pvmm_snapshot_free.
 * pvmm_status_invalid_argument for a null out-parameter. */
PVMM_C_API pvmm_status pvmm_snapshot_pickle(void** data, size_t* size) PVMM_C_NOEXCEPT;
/** Gives back a buffer pvmm_snapshot_pickle returned; null is ignored. */
PVMM_C_API void pvmm_snapshot_free(void* data) PVMM_C_NOEXCEPT;

/** Keeps the last `max_entries` allocate/free events from now on (0 turns recording off: the default). Off, each
 * recording site costs one relaxed load. pvmm_status_invalid_argument above 1 << 24. */
PVMM_C_API pvmm_status pvmm_record_memory_history(size_t max_entries) PVMM_C_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PVMM_C_SNAPSHOT_H */
