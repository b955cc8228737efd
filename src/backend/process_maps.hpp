// The kernel's own record of this process's mappings (/proc/self/maps), for the few checks that must know what is
// mapped whatever the program did behind pvmm's back (registering host memory, unlocking what is still mapped).
// Linux, like every pvmm backend. Shared by the neutral layer and the host backend.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>

#include "backend/error_helpers.hpp"

namespace pvmm::detail {

/// Whether a mapping with these permissions can be touched at all (false for PROT_NONE).
inline bool accessible(const char* perms) { return perms[0] == 'r' || perms[1] == 'w' || perms[2] == 'x'; }

/// Calls visit(lo, hi, perms) for each mapping overlapping [begin, end), in address order; `perms` is the kernel's
/// "rwxp" field (see accessible()). Stops early when visit returns false. A file that cannot be opened (a full fd
/// table) is system_error with its errno, never "not mapped".
template <class Visit>
status for_each_mapping(std::uintptr_t begin, std::uintptr_t end, Visit visit) {
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps) return errno_error(errc::system_error, "fopen(/proc/self/maps)", errno, "reading which memory is mapped");
  char line[8192];  // longer lines (long paths) only split a path, never a range
  while (std::fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3) continue;
    if (hi <= begin) continue;
    if (lo >= end) break;
    if (!visit(static_cast<std::uintptr_t>(lo), static_cast<std::uintptr_t>(hi), static_cast<const char*>(perms)))
      break;
  }
  std::fclose(maps);
  return {};
}

}  // namespace pvmm::detail
