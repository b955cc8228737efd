// A GPU driver initialised in a process does not work in a child that process forks (CUDA answers
// CUDA_ERROR_NOT_INITIALIZED there, HIP on NVIDIA an initialisation error): a GPU backend notes when it initialised
// its driver, and every failed driver call in a forked child says so, as one error on every backend.
#pragma once

#include <pvmm/error.hpp>

namespace pvmm::detail {

/// A GPU backend, once its driver or runtime is initialised: from then on a forked child is known (pthread_atfork).
void note_driver_initialised() noexcept;

/// In a child forked after note_driver_initialised (in this process or an ancestor): `e` becomes
/// backend_unavailable, its hint naming the fork and what to do instead; elsewhere `e` is left as it is.
void explain_fork(error& e) noexcept;

}  // namespace pvmm::detail
