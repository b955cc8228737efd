// Running out of file descriptors, said as such (invariant 19): one text for EMFILE and ENFILE (how many fds are
// open, the RLIMIT_NOFILE limits, what holds fds in pvmm), and the probe that finds fd exhaustion behind a driver's
// generic failure (a driver that cannot open an fd may answer OUT_OF_MEMORY or INVALID_VALUE; ROCm's
// one-fd-per-allocation ran out at 1,024 and said "out of memory").
#pragma once

#include <string>

#include <pvmm/error.hpp>

namespace pvmm::detail {

/// EMFILE (this process's RLIMIT_NOFILE) or ENFILE (the system's fs.file-max).
bool is_fd_exhaustion(int err) noexcept;

/// Whether this process can open one more fd now: 0 when it can, else the errno that refused (EMFILE, ENFILE). It
/// opens and closes one fd (eventfd, about a microsecond): before a backend call that opens fds (fd_step), and on
/// failure paths.
int probe_fd_exhaustion() noexcept;

/// errc::system_error for `call` failing with fd exhaustion `err`: "out of file descriptors: N open, RLIMIT_NOFILE
/// soft limit M (hard H)", the errno's name, and a hint (raise the limit; pvmm's fd budget per operation).
[[gnu::cold]] error fd_exhaustion_error(const char* call, int err, const std::string& context = {});

/// A backend's failure of a call that opens an fd (export, import), reported as fd exhaustion when this process is
/// out of fds now, whatever the backend said (its words stay in the detail); unchanged otherwise.
[[gnu::cold]] error blame_fd_exhaustion(const char* call, error e);

}  // namespace pvmm::detail
