// Bootstraps over Python objects: a store (set/get, optionally check or wait) and an allgather callable. pvmm calls
// them without holding any of its locks; each call takes the GIL (docs/design.md "Bindings").
#pragma once

#include <memory>

#include <pvmm/bootstrap.hpp>

#include "common.hpp"

namespace pvmm_py {

/// pvmm's key_value_store over a Python object with set(key, bytes) and get(key), and check(keys) -> bool (polled
/// until the deadline, GIL released in between) or else wait(keys, timedelta): torch.distributed.Store has all.
pvmm::key_value_store python_store(nb::object store);

/// A bootstrap whose allgather is a Python callable: fn(bytes) -> list of `size` bytes objects (or their
/// concatenation), every rank calling it in the same order. mpi4py: `lambda b: comm.allgather(b)`.
std::shared_ptr<pvmm::bootstrap> python_allgather_bootstrap(nb::object fn, int rank, int size, int node, int local_rank,
                                                            int local_size);

}  // namespace pvmm_py
