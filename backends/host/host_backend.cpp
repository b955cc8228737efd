// The host backend: the whole contract on Linux host memory.
//   physical memory = sealed memfd, reservation = PROT_NONE anonymous mapping, map = MAP_FIXED|MAP_SHARED of
//   the memfd at an offset, access = mprotect, export = dup of the memfd, import = an fd.
// Device 0 is the CPU. The allocation's properties travel in the memfd's name, so an importer in another
// process reads back what the exporter asked for.
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <linux/mempolicy.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "backend.hpp"
#include "state.hpp"

namespace pvmm::detail::backend {
namespace {

constexpr std::size_t huge_page = std::size_t{2} << 20;

std::size_t page_size() {
  static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

error unsupported(const char* feature) {
  return make_error(errc::not_supported, {}, {},
                    fmt::format("the host backend's device 0 (the CPU) does not support {}", feature),
                    "build with PVMM_BACKEND=cuda on NVIDIA GPUs");
}

std::string encode_name(const allocation_properties& p) {
  return fmt::format("pvmm-{}{}-x{}", "dhn"[static_cast<int>(p.location.type)], p.location.id,
                     static_cast<unsigned>(p.exportable));
}

/// Applies a NUMA binding to the memfd's shared policy (through a short-lived mapping of it).
status bind_to_node(int fd, std::size_t size, int node) {
  void* p = ::mmap(nullptr, size, PROT_NONE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return errno_error(errc::out_of_memory, "mmap", errno, "binding memory to a NUMA node");
  unsigned long mask[16] = {};
  mask[node / (8 * sizeof(unsigned long))] |= 1UL << (node % (8 * sizeof(unsigned long)));
  long rc = ::syscall(SYS_mbind, p, size, MPOL_BIND, mask, sizeof(mask) * 8, 0);
  int err = errno;
  ::munmap(p, size);
  if (rc != 0)
    return errno_error(errc::system_error, "mbind", err, fmt::format("binding memory to NUMA node {}", node));
  return {};
}

/// Physical memory the machine can still provide: free RAM, reclaimable cache and free swap.
std::size_t providable_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (!f) return std::numeric_limits<std::size_t>::max();  // cannot tell: let fallocate decide
  std::size_t available = 0, swap_free = 0;
  char key[64];
  unsigned long long kib = 0;
  while (std::fscanf(f, "%63s %llu kB\n", key, &kib) == 2) {
    if (std::strcmp(key, "MemAvailable:") == 0) available = static_cast<std::size_t>(kib) << 10;
    if (std::strcmp(key, "SwapFree:") == 0) swap_free = static_cast<std::size_t>(kib) << 10;
  }
  std::fclose(f);
  return available + swap_free;
}

/// Commits the memfd's pages now, as a GPU commits device memory at cuMemCreate: a size the machine cannot
/// provide fails here with out_of_memory instead of a SIGBUS or the OOM killer at first touch later. Sizes
/// beyond what is available are refused before fallocate, which would otherwise push the machine into
/// reclaim. Cost: the kernel zeroes every page here instead of at first touch (README "Reliability").
status commit(int fd, std::size_t size) {
  const std::size_t providable = providable_bytes();
  if (size > providable)
    return make_error(
        errc::out_of_memory, {}, {},
        fmt::format("{:#x} bytes requested, the host can provide {:#x} (MemAvailable + SwapFree)", size, providable));
  if (::fallocate(fd, 0, 0, static_cast<off_t>(size)) != 0) {
    int err = errno;
    return errno_error(err == ENOSPC || err == ENOMEM ? errc::out_of_memory : errc::system_error, "fallocate", err,
                       "committing host memory");
  }
  return {};
}

}  // namespace

backend_info info() {
  backend_info b;
  b.name = "host";
  b.runtime_version = fmt::format("glibc {}", gnu_get_libc_version());
  utsname u{};
  if (::uname(&u) == 0) b.driver_version = fmt::format("Linux {}", u.release);
  b.available = true;
  return b;
}

result<int> device_count() { return 1; }

result<device_info> device(int ordinal) {
  if (ordinal != 0) return make_error(errc::invalid_device, {}, {}, "the host backend has only device 0");
  device_info d;
  d.ordinal = 0;
  d.name = "host CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) d.name = fmt::format("host CPU ({})", line.substr(colon + 2));
      break;
    }
  }
  auto& c = d.capabilities;
  c.virtual_memory = true;
  c.posix_fd_handles = true;
  c.host_location = true;
  c.host_numa_location = numa_node_exists(0);
  c.map_at_physical_offset = true;
  c.host_numa_id = numa_node_exists(0) ? 0 : -1;
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

result<granularity> allocation_granularity(const allocation_properties&) {
  // Locations were validated by the neutral layer; host memory has the same granularity everywhere.
  return granularity{page_size(), huge_page};
}

result<std::size_t> reservation_granularity() { return page_size(); }

result<native_handle> create(const allocation_properties& p, std::size_t size) {
  if (contains(p.exportable, handle_types::fabric)) return unsupported("fabric handles");
  int fd = ::memfd_create(encode_name(p).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return errno_error(errc::system_error, "memfd_create", errno);
  auto fail = [&](errc code, const char* call) {
    int err = errno;
    ::close(fd);
    return errno_error(code, call, err);
  };
  if (size > static_cast<std::size_t>(std::numeric_limits<off_t>::max())) {
    ::close(fd);
    return make_error(errc::out_of_memory, {}, {}, fmt::format("{:#x} bytes exceed the largest file size", size));
  }
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) return fail(errc::out_of_memory, "ftruncate");
  // The size is fixed for life, like device memory: importers can trust it.
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return fail(errc::system_error, "fcntl(F_ADD_SEALS)");
  if (p.location.type == location::kind::host_numa) {
    if (auto ok = bind_to_node(fd, size, p.location.id); !ok) {
      ::close(fd);
      return std::move(ok).error();
    }
  }
  if (auto ok = commit(fd, size); !ok) {
    ::close(fd);
    return std::move(ok).error();
  }
  return static_cast<native_handle>(fd);
}

status release(native_handle handle) {
  if (::close(static_cast<int>(handle)) != 0) return errno_error(errc::invalid_handle, "close", errno);
  return {};
}

result<allocation_properties> properties(native_handle handle) {
  char link[128];
  ssize_t n = ::readlink(fmt::format("/proc/self/fd/{}", handle).c_str(), link, sizeof(link) - 1);
  if (n < 0) return errno_error(errc::invalid_handle, "readlink(/proc/self/fd)", errno);
  link[n] = '\0';
  char kind = 0;
  int id = 0;
  unsigned exportable = 0;
  if (std::sscanf(link, "/memfd:pvmm-%c%d-x%u", &kind, &id, &exportable) != 3)
    return make_error(errc::invalid_handle, {}, {}, fmt::format("fd {} is not pvmm host memory ({})", handle, link));
  // The name came from another process: accept only what create() could have written.
  const bool known_location =
      (kind == 'd' && id == 0) || (kind == 'h' && id == 0) || (kind == 'n' && numa_node_exists(id));
  if (!known_location)
    return make_error(
        errc::invalid_handle, {}, {},
        fmt::format("fd {} names location '{}{}', which does not exist on this host ({})", handle, kind, id, link));
  if ((exportable & ~static_cast<unsigned>(handle_types::posix_fd | handle_types::fabric)) != 0)
    return make_error(errc::invalid_handle, {}, {},
                      fmt::format("fd {} names unknown handle type bits {:#x} ({})", handle, exportable, link));
  allocation_properties p;
  p.location = kind == 'h' ? location::host() : kind == 'n' ? location::host_numa(id) : location::device(id);
  p.exportable = static_cast<handle_types>(exportable);
  return p;
}

bool set_access_spans_mappings() noexcept { return true; }

result<void*> reserve(std::size_t size, std::size_t alignment, const void* hint) {
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  const std::size_t extra = alignment > page_size() && !hint ? alignment : 0;
  const auto span = checked_add(size, extra);  // the neutral layer checked it too; a backend never trusts a sum
  if (!span)
    return make_error(errc::out_of_memory, {}, {},
                      fmt::format("size {:#x} plus alignment {:#x} exceeds the address space", size, extra));
  void* p = ::mmap(const_cast<void*>(hint), *span, PROT_NONE, flags, -1, 0);
  if (p == MAP_FAILED) return errno_error(errc::out_of_memory, "mmap", errno, "reserving address space");
  if (extra) {  // trim to the requested alignment
    auto base = reinterpret_cast<std::uintptr_t>(p);
    auto aligned = (base + alignment - 1) & ~(std::uintptr_t{alignment} - 1);
    if (aligned > base) ::munmap(p, aligned - base);
    std::size_t tail = base + *span - (aligned + size);
    if (tail) ::munmap(reinterpret_cast<void*>(aligned + size), tail);
    p = reinterpret_cast<void*>(aligned);
  }
  return p;
}

status free_reservation(void* address, std::size_t size) {
  if (::munmap(address, size) != 0) return errno_error(errc::invalid_argument, "munmap", errno);
  return {};
}

status map(void* address, std::size_t size, native_handle handle, std::size_t offset) {
  void* p =
      ::mmap(address, size, PROT_NONE, MAP_SHARED | MAP_FIXED, static_cast<int>(handle), static_cast<off_t>(offset));
  if (p == MAP_FAILED) return errno_error(errc::out_of_memory, "mmap(MAP_FIXED|MAP_SHARED)", errno);
  return {};
}

status unmap(void* address, std::size_t size) {
  // Put the reservation back in place: the range stays reserved, inaccessible.
  void* p = ::mmap(address, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) return errno_error(errc::system_error, "mmap(PROT_NONE, MAP_FIXED)", errno);
  return {};
}

status set_access(void* address, std::size_t size, const access_descriptor* grants, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    if (grants[i].location != location::device(0))
      return make_error(errc::invalid_location, {}, {},
                        fmt::format("the host backend grants access to device 0 (the CPU) only, not to {}",
                                    describe(grants[i].location)));
  }
  const access a = grants[count - 1].access;
  int prot = a == access::read_write ? PROT_READ | PROT_WRITE : a == access::read ? PROT_READ : PROT_NONE;
  if (::mprotect(address, size, prot) != 0) return errno_error(errc::system_error, "mprotect", errno);
  return {};
}

result<access> get_access(location where, const void* address) {
  if (where != location::device(0))
    return make_error(errc::invalid_location, {}, {},
                      fmt::format("the host backend has access rights for device 0 only, not {}", describe(where)));
  // Read the kernel's own record of the protection, not pvmm's. Opening the file can fail (a full fd table):
  // that is reported as what it is, never as "not mapped".
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps) return errno_error(errc::system_error, "fopen(/proc/self/maps)", errno, "reading the page protection");
  auto a = reinterpret_cast<std::uintptr_t>(address);
  char line[8192];  // longer lines (long paths) only split a path, never a range
  result<access> found = make_error(errc::not_mapped, {}, {}, "the kernel has no mapping at the address");
  while (std::fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3) continue;
    if (a < lo || a >= hi) continue;
    found = perms[1] == 'w' ? access::read_write : perms[0] == 'r' ? access::read : access::none;
    break;
  }
  std::fclose(maps);
  return found;
}

result<int> export_posix_fd(native_handle handle) {
  int fd = ::fcntl(static_cast<int>(handle), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return errno_error(errc::system_error, "fcntl(F_DUPFD_CLOEXEC)", errno);
  return fd;
}

result<fabric_handle> export_fabric(native_handle) { return unsupported("fabric handles"); }

result<native_handle> import_posix_fd(int fd, std::size_t size) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return errno_error(errc::invalid_handle, "fcntl(F_GET_SEALS)", errno,
                       fmt::format("fd {} is not a memory fd exported by pvmm", fd));
  }
  // Invariant 12: a peer that kept the right to truncate the file could SIGBUS this process at its next
  // access to the mapping; pvmm's exports are sealed against both shrinking and growing.
  constexpr int required = F_SEAL_SHRINK | F_SEAL_GROW;
  if ((seals & required) != required)
    return make_error(errc::invalid_handle, {}, {},
                      fmt::format("fd {} is not sealed against {} (seals {:#x}); its owner could truncate it and "
                                  "crash this process at its next access",
                                  fd,
                                  (seals & F_SEAL_SHRINK) == 0 && (seals & F_SEAL_GROW) == 0 ? "shrinking and growing"
                                  : (seals & F_SEAL_SHRINK) == 0                             ? "shrinking"
                                                                                             : "growing",
                                  seals),
                      "import only fds exported by pvmm (memfds sealed with F_SEAL_SHRINK | F_SEAL_GROW)");
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_error(errc::invalid_handle, "fstat", errno);
  if (static_cast<std::size_t>(st.st_size) != size)
    return make_error(errc::invalid_argument, {}, {},
                      fmt::format("size {:#x} differs from the exported allocation's size {:#x}", size,
                                  static_cast<std::size_t>(st.st_size)));
  int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return errno_error(errc::system_error, "fcntl(F_DUPFD_CLOEXEC)", errno);
  if (auto p = properties(static_cast<native_handle>(own)); !p) {
    ::close(own);
    return std::move(p).error();
  }
  return static_cast<native_handle>(own);
}

result<native_handle> import_fabric(const fabric_handle&, std::size_t) { return unsupported("fabric handles"); }

result<granularity> multicast_granularity(const multicast_request&) { return unsupported("multicast objects"); }
result<native_handle> multicast_create(const multicast_request&) { return unsupported("multicast objects"); }
status multicast_add_device(native_handle, int) { return unsupported("multicast objects"); }
status multicast_bind(native_handle, std::size_t, native_handle, std::size_t, std::size_t) {
  return unsupported("multicast objects");
}
status multicast_unbind(native_handle, int, std::size_t, std::size_t) { return unsupported("multicast objects"); }

status copy_to_mapping(void* destination, const void* source, std::size_t size, int device) {
  if (device > 0) return make_error(errc::invalid_device, {}, {}, "the host backend has only device 0");
  std::memcpy(destination, source, size);
  return {};
}

status copy_from_mapping(void* destination, const void* source, std::size_t size, int device) {
  if (device > 0) return make_error(errc::invalid_device, {}, {}, "the host backend has only device 0");
  std::memcpy(destination, source, size);
  return {};
}

result<bool> write_faults(void* address) {
  // Probe in a child so a fault ends the child, not the caller.
  pid_t pid = ::fork();
  if (pid < 0) return errno_error(errc::system_error, "fork", errno);
  if (pid == 0) {
    ::signal(SIGSEGV, SIG_DFL);
    ::signal(SIGBUS, SIG_DFL);
    *static_cast<volatile unsigned char*>(address) = 0xA5;
    ::_exit(0);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) return errno_error(errc::system_error, "waitpid", errno);
  }
  return WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS);
}

}  // namespace pvmm::detail::backend
