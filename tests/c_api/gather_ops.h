/* The smallest C bootstrap (pvmm_bootstrap_ops) the C tests make by hand: `size` ranks on one node, this one rank 0,
 * an allgather of the test's own and an abort that does nothing (barrier, send and receive left to pvmm's
 * defaults). A test sets what it tries on top (another version, abort_status, a rank). C11 and C++. */
#ifndef PVMM_C_TEST_GATHER_OPS_H
#define PVMM_C_TEST_GATHER_OPS_H

#include <pvmm/pvmm.h>

static inline void gather_ops_abort_nothing(void* context) { (void)context; }

static inline pvmm_bootstrap_ops gather_ops(int size,
                                            int (*allgather)(void* context, const void* mine, size_t bytes, void* all,
                                                             uint64_t collective, int64_t deadline_ns),
                                            void* context) {
  pvmm_bootstrap_ops ops = PVMM_INIT(pvmm_bootstrap_ops);
  ops.context = context;
  ops.local_size = ops.size = size; /* one node */
  ops.allgather = allgather;
  ops.abort = gather_ops_abort_nothing;
  return ops;
}

#endif /* PVMM_C_TEST_GATHER_OPS_H */
