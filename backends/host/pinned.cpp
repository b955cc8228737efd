// Host backend, feature "pinned": page-locked memory is mlock'd memory. Device 0 is the CPU, so the device pointer
// is the host pointer. A lock the system refuses (RLIMIT_MEMLOCK without CAP_IPC_LOCK) is out_of_memory with a hint.
// The kernel keeps one lock bit per page, not a count, while registrations need not be page-aligned: two of them
// may share a page. So pvmm unlocks only the pages no other holder (registration or pinned allocation) covers,
// and unlocks what a failed lock locked.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/pinned.hpp"
#include "backend/process_maps.hpp"
#include "host.hpp"

namespace pvmm::detail::backend {
using namespace host;

namespace {
constexpr const char* memlock_hint =
    "the locked-memory limit (RLIMIT_MEMLOCK: ulimit -l, systemd's LimitMEMLOCK) is reached; raise it, or run with "
    "CAP_IPC_LOCK";

/// Locked byte ranges [start, end) by start, one map per family: ranges within a family never overlap (pinned
/// allocations are separate mappings; the neutral layer refuses overlapping registrations), so the holders of a
/// page are found next to it. Process-wide because page locks are; `table_lock` also keeps each lock or unlock and
/// its record together, so a page shared by two threads' registrations is never unlocked under the other.
std::mutex table_lock;
std::map<std::uintptr_t, std::uintptr_t> registrations, allocations;

std::uintptr_t page_down(std::uintptr_t a) { return a / page_size() * page_size(); }
std::uintptr_t page_up(std::uintptr_t a) { return (a + page_size() - 1) / page_size() * page_size(); }

/// Adds the page spans, clipped to [begin, end), of `family`'s ranges touching it.
void add_held(const std::map<std::uintptr_t, std::uintptr_t>& family, std::uintptr_t begin, std::uintptr_t end,
              std::vector<std::pair<std::uintptr_t, std::uintptr_t>>& held) {
  auto it = family.upper_bound(begin);
  if (it != family.begin()) --it;  // the one before may reach into the first page
  for (; it != family.end() && page_down(it->first) < end; ++it) {
    const auto lo = std::max(page_down(it->first), begin), hi = std::min(page_up(it->second), end);
    if (lo < hi) held.emplace_back(lo, hi);
  }
}

/// munlock over [lo, hi); where part of it is no longer mapped (the program unmapped it, which dropped its lock),
/// unlocks the parts that still are.
status unlock_mapped(std::uintptr_t lo, std::uintptr_t hi) {
  if (::syscall(SYS_munlock, lo, hi - lo) == 0) return {};
  if (errno != ENOMEM) return errno_error(errc::system_error, "munlock", errno);
  status failed;
  auto read = for_each_mapping(lo, hi, [&](std::uintptr_t a, std::uintptr_t b, const char*) {
    a = std::max(a, lo), b = std::min(b, hi);
    if (::syscall(SYS_munlock, a, b - a) != 0) failed = errno_error(errc::system_error, "munlock", errno);
    return true;
  });
  if (!read) return read;
  return failed;
}

/// Unlocks the pages under [pointer, pointer + size) that no recorded holder covers. Call under `table_lock`.
status unlock_unheld(const void* pointer, std::size_t size) {
  const auto begin = page_down(reinterpret_cast<std::uintptr_t>(pointer));
  const auto end = page_up(reinterpret_cast<std::uintptr_t>(pointer) + size);
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> held;
  add_held(registrations, begin, end, held);
  add_held(allocations, begin, end, held);
  std::sort(held.begin(), held.end());
  status outcome;
  std::uintptr_t at = begin;
  for (auto [lo, hi] : held) {
    if (lo > at)
      if (auto done = unlock_mapped(at, lo); !done && outcome) outcome = std::move(done);
    at = std::max(at, hi);
  }
  if (at < end)
    if (auto done = unlock_mapped(at, end); !done && outcome) outcome = std::move(done);
  return outcome;
}

/// mlock over whole pages; the error names the limit when the kernel refused for it. The system call is made
/// directly: the sanitizers' runtimes intercept mlock and ignore it, which would make the lock (and its refusal)
/// vanish in the sanitizer builds.
status lock(void* pointer, std::size_t size) {
  if (::syscall(SYS_mlock, pointer, size) == 0) return {};
  const int err = errno;
  if (err == ENOMEM || err == EAGAIN || err == EPERM) {
    auto e = errno_error(errc::out_of_memory, "mlock", err, "page-locking host memory");
    e.hint = memlock_hint;
    return e;
  }
  return errno_error(errc::system_error, "mlock", err);
}
}  // namespace

result<capabilities::host_memory_features> host_memory_capabilities(int) {
  capabilities::host_memory_features f;
  f.pinned = true;
  f.registration = true;
  f.mapped = true;
  f.device_pointer_is_host_pointer = true;  // the device is the CPU
  return f;
}

result<void*> allocate_pinned(std::size_t size, const pinned_options&) {  // write_combined means nothing to a CPU
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return errno_error(errc::out_of_memory, "mmap", errno);
  auto locked = lock(p, size);
  if (locked) try {
      const auto at = reinterpret_cast<std::uintptr_t>(p);
      std::lock_guard<std::mutex> guard(table_lock);
      allocations.emplace(at, at + size);
    } catch (...) {
      ::munmap(p, size);
      throw;
    }
  if (!locked) {
    ::munmap(p, size);  // unlocks what was locked, too
    return std::move(locked).error();
  }
  return p;
}

status free_pinned(void* pointer, std::size_t size) {
  {
    std::lock_guard<std::mutex> guard(table_lock);
    allocations.erase(reinterpret_cast<std::uintptr_t>(pointer));
  }
  if (::munmap(pointer, size) != 0) return errno_error(errc::invalid_argument, "munmap", errno);  // unlocks too
  return {};
}

status register_host(void* pointer, std::size_t size, const pinned_options&) {
  const auto at = reinterpret_cast<std::uintptr_t>(pointer);
  std::lock_guard<std::mutex> guard(table_lock);
  auto locked = lock(reinterpret_cast<void*>(page_down(at)), page_up(at + size) - page_down(at));
  if (locked) try {
      registrations.emplace(at, at + size);
      return {};
    } catch (...) {
      (void)unlock_unheld(pointer, size);
      throw;
    }
  (void)unlock_unheld(pointer, size);  // a refused lock may have locked the pages before the failure
  return locked;
}

status unregister_host(void* pointer, std::size_t size) {
  std::lock_guard<std::mutex> guard(table_lock);
  auto it = registrations.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (it == registrations.end())
    return make_error(errc::not_registered, fmt::format("the host backend has no registration at {}", pointer));
  auto record = registrations.extract(it);
  auto unlocked = unlock_unheld(pointer, size);
  if (!unlocked) registrations.insert(std::move(record));  // still held: a retry unlocks again
  return unlocked;
}

result<void*> host_device_pointer(void* pointer, int) { return pointer; }

}  // namespace pvmm::detail::backend
