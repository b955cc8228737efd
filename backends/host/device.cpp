// Host backend, feature "device": one device, the CPU; host RAM; page granularity.
#include <gnu/libc-version.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "backend/device.hpp"
#include "host.hpp"

namespace pvmm::detail::backend {

const backend_traits traits{"host", /*set_access_spans_mappings=*/true, /*copy_stages_pageable=*/true,
                            "the host backend's managed memory is ordinary memory: always supported"};

backend_info info() {
  backend_info b;
  b.name = traits.name;
  b.runtime_version = fmt::format("glibc {}", gnu_get_libc_version());
  utsname u{};
  if (::uname(&u) == 0) b.driver_version = fmt::format("Linux {}", u.release);
  b.available = true;
  return b;
}

result<int> device_count() { return 1; }

namespace {
// The host device's identity, the same in every process of one boot (as a GPU's PCI id is the same in every
// process of one machine), so team members on one node know they share it: "host-<boot id>-<ordinal>". Empty
// where the boot id is unreadable (then only ranks of one process count as one device).
std::string host_identifier(int ordinal) {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  if (!std::getline(in, boot) || boot.empty()) return {};
  return fmt::format("host-{}-{}", boot, ordinal);
}
}  // namespace

result<device_info> device(int ordinal) {
  device_info d;
  d.ordinal = ordinal;
  d.name = "host CPU";
  d.identifier = host_identifier(ordinal);
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) d.name = fmt::format("host CPU ({})", line.substr(colon + 2));
      break;
    }
  }
  struct sysinfo si {};
  if (::sysinfo(&si) == 0) d.total_memory = static_cast<std::size_t>(si.totalram) * si.mem_unit;
  return d;
}

result<memory_info> memory(int) {
  struct sysinfo si {};
  if (::sysinfo(&si) != 0) return errno_error(errc::system_error, "sysinfo", errno);
  return memory_info{static_cast<std::size_t>(si.freeram) * si.mem_unit,
                     static_cast<std::size_t>(si.totalram) * si.mem_unit, true};
}

result<bool> can_access_peer(int, int) { return false; }  // one device: never asked (device == peer)

result<granularity> allocation_granularity(const allocation_properties&) {
  // Host memory has the same granularity at every location: pages, with huge pages the fast multiple.
  return granularity{host::page_size(), std::size_t{2} << 20};
}

}  // namespace pvmm::detail::backend
