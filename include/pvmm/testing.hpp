// pvmm/testing.hpp - fault injection for testing code built on pvmm (rollback paths, error handling).
#pragma once

#include <cstddef>

namespace pvmm::testing {

/// Makes the n-th backend call from now (1 = the next one) fail with errc::backend_error and native name
/// "PVMM_INJECTED_FAILURE". 0 disarms. Process-wide; meant for tests, not for production.
void fail_nth_backend_call(std::size_t n) noexcept;

/// Backend calls made since counting began (to size a fault-injection sweep, or to check that a refusal made
/// none): the first call of this function or of fail_nth_backend_call begins it, so a process that never
/// calls them pays nothing per backend call. Compare two readings.
std::size_t backend_call_count() noexcept;

}  // namespace pvmm::testing

#include <pvmm/error.hpp>

namespace pvmm::testing {

/// Copies host bytes into mapped memory through `device` (host backend: memcpy; GPU: a synchronous copy run
/// by that device, so it needs access). device < 0: the first device that has access. Both ranges are checked first
/// (as stream_ref::copy_async's): the mapped side must be mapped and granted to `device` (read_write here, read for
/// copy_from_mapping), possibly across reservations that follow each other; the host side must be mapped in this
/// process. not_mapped, not_permitted, out_of_range or invalid_argument (NULL) otherwise, before any copy.
status copy_to_mapping(void* destination, const void* source, std::size_t size, int device = -1);
/// Copies mapped memory into host bytes through `device` (read access suffices).
status copy_from_mapping(void* destination, const void* source, std::size_t size, int device = -1);
/// True when a write at `address` by device 0 faults (probed in a child process on the host backend);
/// errc::not_supported where a probe would poison the device context.
result<bool> write_faults(void* address);

}  // namespace pvmm::testing
