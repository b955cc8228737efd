// What the machine's memory can still give (/proc/meminfo), for sizes refused before the kernel would answer them
// with the OOM killer: the host backend's commits (MemAvailable + SwapFree) and page-locked host copies
// (MemAvailable alone: locked pages cannot be swapped out).
#pragma once

#include <cstddef>
#include <optional>

namespace pvmm::detail {

struct host_meminfo {
  std::size_t available = 0;  ///< MemAvailable: free RAM and what reclaim can free
  std::size_t swap_free = 0;  ///< SwapFree
};

/// nullopt when /proc/meminfo cannot be read (then the caller lets the system call decide).
std::optional<host_meminfo> read_host_meminfo() noexcept;

}  // namespace pvmm::detail
