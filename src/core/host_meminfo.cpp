// /proc/meminfo's MemAvailable and SwapFree (core/host_meminfo.hpp).
#include "core/host_meminfo.hpp"

#include <cstdio>
#include <cstring>

namespace pvmm::detail {

std::optional<host_meminfo> read_host_meminfo() noexcept {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (!f) return std::nullopt;
  host_meminfo m;
  char key[64];
  unsigned long long kib = 0;
  while (std::fscanf(f, "%63s %llu kB\n", key, &kib) == 2) {
    if (std::strcmp(key, "MemAvailable:") == 0) m.available = static_cast<std::size_t>(kib) << 10;
    if (std::strcmp(key, "SwapFree:") == 0) m.swap_free = static_cast<std::size_t>(kib) << 10;
  }
  std::fclose(f);
  return m;
}

}  // namespace pvmm::detail
