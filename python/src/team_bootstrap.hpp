// Bootstraps over Python objects: a store (set/get, optionally check or wait) and an allgather callable. pvmm calls
// them without holding any of its locks; each call takes the GIL (docs/design.md "Bindings").
#pragma once

#include <memory>

#include <pvmm/bootstrap.hpp>

#include "blocking.hpp"
#include "common.hpp"

namespace pvmm_py {

/// pvmm's key_value_store over a Python object with set(key, bytes) and get(key), and check(keys) -> bool (polled
/// until the deadline, GIL released in between) or else wait(keys, timedelta): torch.distributed.Store has all. A
/// set raising, or get raising anything but an Exception (KeyboardInterrupt), keeps the exception in `errors` (to be
/// raised as itself) and stops pvmm at once; get raising an Exception is the key not arriving in time.
pvmm::key_value_store python_store(nb::object store, std::shared_ptr<callback_errors> errors);

/// A bootstrap whose allgather is a Python callable: fn(bytes) -> list of `size` bytes objects (or their
/// concatenation), every rank calling it in the same order. mpi4py: `lambda b: comm.allgather(b)`.
std::shared_ptr<pvmm::bootstrap> python_allgather_bootstrap(nb::object fn, int rank, int size, int node, int local_rank,
                                                            int local_size, std::shared_ptr<callback_errors> errors);

}  // namespace pvmm_py
