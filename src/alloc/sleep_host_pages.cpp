// The pinned policy's host memory: fresh anonymous memory on 2 MiB pages where the kernel gives them, faulted in on
// several threads, then registered with the driver. A first sleep's cost is page-locking fresh memory, and this is
// the fastest way measured (pvmm-bench sleep's floor rows, H200 host, 8 GiB): the driver's page-locked allocation
// 4.08 s, 4 KiB pages faulted in by one thread then registered 2.73 s, this 0.98 s. The kernel zeroes 2 MiB pages
// on every faulting core at once, and the driver pins 512 times fewer pages.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "alloc/sleeping_state.hpp"
#include "core/host_meminfo.hpp"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels refuse it and the pages are touched instead
#endif

namespace pvmm::detail::sleeping {
namespace {

constexpr std::size_t huge_page = std::size_t{2} << 20;
constexpr std::size_t share_floor = std::size_t{256} << 20;  // a thread is worth starting for this much
// 8 GiB on a 16-core H200 host: 0.85 s on 8 threads, 1.63 s on 16 (the memory bus, not the cores, limits).
constexpr unsigned most_threads = 8;

/// A refusal (no memory) leaves the pages to the registration, which faults them in itself: the size was checked
/// against MemAvailable before (lock_fresh_pages), as the kernel answers a fault it cannot serve with the OOM killer.
void fault_in(unsigned char* p, std::size_t n) noexcept {
  if (::madvise(p, n, MADV_POPULATE_WRITE) == 0 || errno != EINVAL) return;
  for (std::size_t at = 0; at < n; at += 4096) reinterpret_cast<volatile unsigned char*>(p)[at] = 0;
}

/// Faults [p, p + n) in on up to most_threads threads (this one among them). A thread that cannot start leaves its
/// share to this one: the result is the same, only slower.
void fault_in_parallel(unsigned char* p, std::size_t n) noexcept {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const auto by_size = static_cast<unsigned>(std::max<std::size_t>(1, n / share_floor));
  const unsigned threads = std::min({cores, most_threads, by_size});
  const std::size_t share = (n / threads + huge_page - 1) / huge_page * huge_page;
  std::vector<std::thread> helpers;
  std::size_t started_to = std::min(share, n);  // the shares before this have a thread (or are this one's)
  try {
    helpers.reserve(threads);
    for (; started_to < n; started_to += share)
      helpers.emplace_back(fault_in, p + started_to, std::min(share, n - started_to));
  } catch (...) {  // std::system_error (no thread) or bad_alloc: this thread faults the rest in
  }
  fault_in(p, std::min(share, n));
  if (started_to < n) fault_in(p + started_to, n - started_to);
  for (auto& t : helpers) t.join();
}

}  // namespace

status host_store::lock_fresh_pages(std::size_t size, const operation& op) {
  if (size > static_cast<std::size_t>(-1) - 2 * huge_page)
    return op.fail(errc::out_of_memory,
                   fmt::format("{:#x} bytes of host memory for the copies exceed the address space", size));
  // Below a huge page, whole base pages: a small tag's copy does not lock 2 MiB against RLIMIT_MEMLOCK.
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::size_t unit = size >= huge_page ? huge_page : page > 0 ? static_cast<std::size_t>(page) : 4096;
  const std::size_t rounded = (size + unit - 1) / unit * unit;
  if (const auto m = detail::read_host_meminfo(); m && rounded > m->available)
    return op.fail(errc::out_of_memory,
                   fmt::format("{:#x} bytes of host memory to page-lock, the host has {:#x} available (MemAvailable)",
                               rounded, m->available),
                   "free host memory, or choose the offload_pageable or offload_file policy for the tag");
  const std::size_t length = rounded + (unit == huge_page ? huge_page : 0);  // room to align the start
  void* raw = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);  // counted
  if (raw == MAP_FAILED)
    return op.fail(errc::out_of_memory, fmt::format("mapping {} bytes of host memory for the copies failed: {}", length,
                                                    std::strerror(errno)));
  mapped_base = raw;
  mapped_length = length;
  auto* p = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(raw) + unit - 1) &
                                             ~(std::uintptr_t{unit} - 1));
  if (unit == huge_page) (void)::madvise(p, rounded, MADV_HUGEPAGE);  // a hint: THP off leaves 4 KiB pages
  fault_in_parallel(p, rounded);
  pinned_options o;
  o.mapped = false;  // the device reaches it by copies, never by pointer
  auto r = host_registration::create(p, rounded, o);
  if (!r) return op.wrap(std::move(r).error());
  registration = std::move(r).value();
  locked = p;
  return {};
}

void host_store::unlock_pages() noexcept {
  { host_registration gone = std::move(registration); }  // unregistered (teardown's path) before the memory goes
  if (mapped_base) ::munmap(mapped_base, mapped_length);
  mapped_base = nullptr, locked = nullptr;
}

}  // namespace pvmm::detail::sleeping
