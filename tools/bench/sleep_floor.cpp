// pvmm-bench sleep, its first rows: what page-locking `bytes` of fresh host memory costs, the floor of a first sleep
// that offloads to page-locked memory. Three ways, each timed on fresh memory, in the same run as the bus:
//   the driver's page-locked allocation (pinned_allocation::create);
//   4 KiB pages faulted in by one thread, then registered (host_registration);
//   2 MiB pages (MADV_HUGEPAGE, 2 MiB-aligned) faulted in by 8 threads, then registered: what the pinned policy
//   does (src/alloc/sleep_host_pages.cpp, on up to 8 threads), chosen from these rows (H200 host, 8 GiB: 4.08 s,
//   2.73 s, 0.98 s).
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace bench {
namespace {

constexpr std::size_t huge_page = std::size_t{2} << 20;
constexpr double gib = 1024.0 * 1024.0 * 1024.0;

void fault_in(unsigned char* p, std::size_t n) {
  if (::madvise(p, n, MADV_POPULATE_WRITE) == 0) return;
  for (std::size_t at = 0; at < n; at += 4096) reinterpret_cast<volatile unsigned char*>(p)[at] = 0;
}

/// Fresh anonymous memory of `bytes` (a multiple of 2 MiB), 2 MiB-aligned, faulted in on `threads` threads.
/// `raw` and `mapped`: what to unmap.
unsigned char* fresh(std::size_t bytes, bool huge, unsigned threads, void*& raw, std::size_t& mapped) {
  mapped = bytes + huge_page;
  raw = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  check(raw != MAP_FAILED, "mmap (fresh host memory)");
  auto* p =
      reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(raw) + huge_page - 1) & ~(huge_page - 1));
  (void)::madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  const std::size_t share = (bytes / threads + huge_page - 1) / huge_page * huge_page;
  std::vector<std::thread> helpers;
  for (std::size_t at = share; at < bytes; at += share)
    helpers.emplace_back(fault_in, p + at, std::min(share, bytes - at));
  fault_in(p, std::min(share, bytes));
  for (auto& t : helpers) t.join();
  return p;
}

/// This process's anonymous memory on transparent huge pages now, bytes (/proc/self/smaps_rollup; 0 unknown): the
/// kernel may ignore MADV_HUGEPAGE (THP "never", no free huge page), and the row says what it got.
std::size_t huge_bytes() {
  std::FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (!f) return 0;
  char line[256];
  std::size_t kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "AnonHugePages: %zu kB", &kib) == 1) break;
  std::fclose(f);
  return kib << 10;
}

void row(const char* what, std::size_t bytes, double fault_s, double lock_s) {
  const double all = fault_s + lock_s;
  fmt::print("    {:<68} {:7.3f} s {:6.1f} GiB/s   (faulting in {:.3f} s, page-locking {:.3f} s)\n", what, all,
             static_cast<double>(bytes) / gib / all, fault_s, lock_s);
}

}  // namespace

void sleep_floor(std::size_t bytes) {
  bytes = (bytes + huge_page - 1) / huge_page * huge_page;
  fmt::print("  page-locking {:.2f} GiB of fresh host memory (the floor of a first sleep to page-locked memory):\n",
             static_cast<double>(bytes) / gib);
  pvmm::pinned_options o;
  o.mapped = false;  // as the sleeping allocator's copies
  {
    const auto t = clock_type::now();
    auto p = pvmm::pinned_allocation::create(bytes, o);
    check(p.has_value(), "pinned_allocation::create (floor)");
    row("pinned_allocation::create", bytes, 0, seconds_since(t));
  }
  for (const bool huge : {false, true}) {
    const unsigned threads = huge ? 8 : 1;
    std::size_t mapped = 0;
    void* raw = nullptr;
    const std::size_t huge_before = huge_bytes();
    auto t = clock_type::now();
    unsigned char* p = fresh(bytes, huge, threads, raw, mapped);
    const double fault_s = seconds_since(t);
    const std::size_t huge_after = huge_bytes();
    const std::size_t on_huge = huge_after > huge_before ? huge_after - huge_before : 0;
    t = clock_type::now();
    auto r = pvmm::host_registration::create(p, bytes, o);
    const double lock_s = seconds_since(t);
    if (!r) {
      fmt::print("    {} pages: host_registration::create failed: {}\n", huge ? "2 MiB" : "4 KiB", r.error().message());
    } else {
      row(huge ? "2 MiB pages, 8 threads fault in, host_registration (pinned policy)"
               : "4 KiB pages, 1 thread faults in, host_registration",
          bytes, fault_s, lock_s);
      fmt::print("      of which on 2 MiB pages: {:.2f} GiB\n", static_cast<double>(on_huge) / gib);
      check(r->release().has_value(), "host_registration::release (floor)");
    }
    ::munmap(raw, mapped);
  }
}

}  // namespace bench
