// Hot layout: backend::reserve, free_reservation, map, unmap and set_access are listed by mangled name in
// cmake/hot_layout.ld; a rename or a new signature drops one out of the layout (the CTest tools/hot_layout says so).
//
// Host backend, feature "vmm": physical memory = sealed memfd (committed at create), reservation = PROT_NONE
// anonymous mapping, map = MAP_FIXED|MAP_SHARED of the memfd at an offset, access = mprotect.
#include <fcntl.h>
#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

#include "backend/process_maps.hpp"
#include "backend/vmm.hpp"
#include "core/checked_math.hpp"
#include "core/host_meminfo.hpp"
#include "core/propagate.hpp"
#include "host.hpp"

namespace pvmm::detail::backend {
namespace {

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
  const auto m = detail::read_host_meminfo();
  return m ? m->available + m->swap_free : std::numeric_limits<std::size_t>::max();  // cannot tell: fallocate decides
}

/// Commits the memfd's pages now, as a GPU commits device memory at cuMemCreate: a size the machine cannot
/// provide fails here with out_of_memory instead of a SIGBUS or the OOM killer at first touch later. Sizes
/// beyond what is available are refused before fallocate, which would otherwise push the machine into
/// reclaim. Cost: the kernel zeroes every page here instead of at first touch (README "Reliability").
status commit(int fd, std::size_t size) {
  const std::size_t providable = providable_bytes();
  if (size > providable)
    return make_error(
        errc::out_of_memory,
        fmt::format("{:#x} bytes requested, the host can provide {:#x} (MemAvailable + SwapFree)", size, providable));
  if (::fallocate(fd, 0, 0, static_cast<off_t>(size)) != 0) {
    int err = errno;
    return errno_error(err == ENOSPC || err == ENOMEM ? errc::out_of_memory : errc::system_error, "fallocate", err,
                       "committing host memory");
  }
  return {};
}

int fd_of(allocation_handle h) { return static_cast<int>(h.value); }

}  // namespace

result<capabilities::vmm_features> vmm_capabilities(int) {
  capabilities::vmm_features c;
  c.supported = true;
  c.host_location = true;
  c.host_numa_location = numa_node_exists(0);
  c.map_at_physical_offset = true;
  c.map_part_of_allocation = true;
  c.host_access_to_device_memory = true;  // the device is the CPU: all its memory is host memory
  c.host_numa_id = numa_node_exists(0) ? 0 : -1;
  return c;
}

result<allocation_handle> create(const allocation_properties& p, std::size_t size) {
  int fd = ::memfd_create(host::encode_name(p).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return errno_error(errc::system_error, "memfd_create", errno);
  auto fail = [&](errc code, const char* call) {
    int err = errno;
    ::close(fd);
    return errno_error(code, call, err);
  };
  if (size > static_cast<std::size_t>(std::numeric_limits<off_t>::max())) {
    ::close(fd);
    return make_error(errc::out_of_memory, fmt::format("{:#x} bytes exceed the largest file size", size));
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
  return allocation_handle{static_cast<std::uint64_t>(fd)};
}

status release(allocation_handle handle) {
  if (::close(fd_of(handle)) != 0) return errno_error(errc::invalid_handle, "close", errno);
  return {};
}

result<allocation_properties> properties(allocation_handle handle) { return host::decode_properties(fd_of(handle)); }

result<void*> reserve(std::size_t size, std::size_t alignment, const void* hint) {
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  const std::size_t extra = alignment > host::page_size() && !hint ? alignment : 0;
  const auto span = checked_add(size, extra);  // the neutral layer checked it too; a backend never trusts a sum
  if (!span)
    return make_error(errc::out_of_memory,
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

status map(void* address, std::size_t size, allocation_handle handle, std::size_t offset) {
  void* p = ::mmap(address, size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd_of(handle), static_cast<off_t>(offset));
  if (p == MAP_FAILED) return errno_error(errc::out_of_memory, "mmap(MAP_FIXED|MAP_SHARED)", errno);
  return {};
}

status unmap(void* address, std::size_t size) {
  // Put the reservation back in place: the range stays reserved, inaccessible.
  void* p = ::mmap(address, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) return errno_error(errc::system_error, "mmap(PROT_NONE, MAP_FIXED)", errno);
  return {};
}

// The one processor of this backend is both device 0 and the host: grants to device(0), host() and host_numa(n)
// all give it access, and the most permissive of them applies.
status set_access(void* address, std::size_t size, const access_descriptor* grants, std::size_t count) {
  access a = access::none;
  for (std::size_t i = 0; i < count; ++i) a = std::max(a, grants[i].access);
  int prot = a == access::read_write ? PROT_READ | PROT_WRITE : a == access::read ? PROT_READ : PROT_NONE;
  if (::mprotect(address, size, prot) != 0) return errno_error(errc::system_error, "mprotect", errno);
  return {};
}

result<access> get_access(location, const void* address) {
  // The kernel's own record of the protection, not pvmm's (a full fd table is reported as such, not "not mapped").
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  result<access> found = make_error(errc::not_mapped, "the kernel has no mapping at the address");
  PVMM_TRY(for_each_mapping(a, a + 1, [&](std::uintptr_t, std::uintptr_t, const char* perms) {
    found = perms[1] == 'w' ? access::read_write : perms[0] == 'r' ? access::read : access::none;
    return false;
  }));
  return found;
}

}  // namespace pvmm::detail::backend
