// The leak check every conformance case runs under (PVMM_CASE, support.hpp): afterwards fds, pvmm objects, kernel
// mappings and device memory are back where the case found them. Backend-neutral: nothing here names a backend.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <pvmm/pvmm.hpp>

#include "open_fds.hpp"

namespace pvmm_test {

/// Mappings of pvmm host memory the kernel still holds (host backend; 0 elsewhere).
inline std::size_t kernel_pvmm_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);)
    if (line.find("/memfd:pvmm-") != std::string::npos) ++n;
  return n;
}

/// Why this process cannot run device cases, or empty when it can.
inline std::string no_device_reason() {
  auto backend = pvmm::query_backend();
  if (!backend.available) return backend.unavailable_reason;
  auto count = pvmm::device_count();
  if (!count) return count.error().message();
  if (*count == 0) return "no device";
  return {};
}

/// Every case runs under this: afterwards fds, pvmm objects, kernel mappings and device memory are back.
struct leak_check {
  // Driver start-up opens files and creates contexts once per process: do it before the first snapshot, once.
  bool warmed_up = warm_up_once();
  std::size_t baseline_fds = open_fd_count();
  pvmm::live_objects baseline_live = pvmm::query_live_objects();
  std::size_t baseline_kernel_mappings = kernel_pvmm_mappings();
  std::size_t baseline_device_free = free_device_memory();

  static bool warm_up_once() {
    static const bool done = [] {
      warm_up();
      process_baseline_device_free() = free_device_memory();
      return true;
    }();
    return done;
  }
  /// Device 0's free memory right after the warm-up: what the process must have again when it ends (main.cpp).
  static std::size_t& process_baseline_device_free() {
    static std::size_t bytes = 0;
    return bytes;
  }
  /// Device 0's free memory after each first use of the warm-up: what the driver keeps per feature (main.cpp prints
  /// it), so device memory a process does not get back can be told apart from memory pvmm holds.
  static std::vector<std::pair<const char*, std::size_t>>& first_use() {
    static std::vector<std::pair<const char*, std::size_t>> steps;
    return steps;
  }
  static void warm_up() {
    if (no_device_reason().empty())
      for (int d = 0; d < pvmm::device_count().value(); ++d) {
        auto note = [d](const char* step) {
          if (d == 0) first_use().emplace_back(step, free_device_memory());
        };
        (void)pvmm::query_memory(d);
        note("context");
        (void)pvmm::memory_pool::default_pool(d);  // lives for the whole process, as the drivers' do
        // A context's first stream, event and pageable async copies (each way) take device memory the driver keeps for
        // the process: do one of each on a small mapping.
        if (auto s = pvmm::stream::create(d)) {
          auto e = pvmm::event::create(d);
          pvmm::allocation_properties p;
          p.location = pvmm::location::device(d);
          auto g = pvmm::query_granularity(p);
          auto memory =
              g ? pvmm::physical_allocation::create(g->minimum, p) : pvmm::result<pvmm::physical_allocation>(g.error());
          auto unit = pvmm::reservation_granularity();
          auto range =
              unit ? pvmm::address_reservation::reserve(*unit) : pvmm::result<pvmm::address_reservation>(unit.error());
          if (memory && range) {
            if (auto at = range->map_and_grant(0, *memory, {{pvmm::location::device(d), pvmm::access::read_write}})) {
              std::vector<unsigned char> staging(memory->size());  // pageable, both ways, of a whole granule
              (void)s->copy_async(*at, staging.data(), staging.size());
              (void)s->copy_async(staging.data(), *at, staging.size());
              if (e) (void)e->record(*s);
              (void)s->synchronize();
              note("stream, event, pageable copies");
              // A process's first pool allocation copied across streams after an event takes device memory the
              // driver keeps (2 MiB, seen with one GPU visible).
              if (auto pool = pvmm::memory_pool::create([&] {
                    pvmm::pool_properties pp;
                    pp.location = pvmm::location::device(d);
                    return pp;
                  }())) {
                auto other = pvmm::stream::create(d);
                if (auto block = pool->allocate(staging.size() + 4096, *s); block && other && e) {
                  (void)s->copy_async(block->data(), staging.data(), staging.size());
                  (void)e->record(*s);
                  (void)other->wait(*e);
                  (void)other->copy_async(staging.data(), block->data(), staging.size());
                  (void)block->free_async(*other);
                  (void)other->synchronize();
                }
              }
              note("a pool allocation used across streams (pool destroyed)");
              // The caching allocator's random case (three streams, 8-byte pageable copies at odd offsets on each)
              // left 2 MiB the driver keeps after a warm-up of two streams (H200, CUDA and HIP on NVIDIA); with
              // this step it passes. tools/probes/device_memory_kept saw streams alive at once keep 2 MiB at 8,
              // none at 3 or 4 in a fresh process: which step the driver keeps it for is not pinned down.
              {
                std::vector<pvmm::result<pvmm::stream>> several;
                for (int i = 0; i < 4; ++i) several.push_back(pvmm::stream::create(d));
                std::uint64_t word = 0x0123456789abcdefULL;
                int i = 0;
                for (auto& one : several)
                  if (one) {
                    auto* odd = static_cast<unsigned char*>(*at) + 512 * ++i + 13;
                    (void)one->copy_async(odd, &word, sizeof word);
                    (void)one->copy_async(&word, odd, sizeof word);
                    (void)one->synchronize();
                  }
              }
              note("four streams alive at once, small copies at odd offsets");
              // A process's first managed memory on a device reserves device memory the driver keeps.
              auto caps = pvmm::query_device(d);
              if (caps && caps->capabilities.managed.concurrent_access)
                if (auto managed = pvmm::managed_allocation::create(std::size_t{2} << 20)) {
                  (void)pvmm::prefetch_async(managed->data(), managed->size(), pvmm::location::device(d), *s);
                  (void)pvmm::prefetch_async(managed->data(), managed->size(), pvmm::location::host(), *s);
                  (void)s->synchronize();
                }
              note("managed memory prefetched both ways (freed)");
              (void)s->synchronize();
              (void)range->unmap(0, memory->size());
            }
          }
        }
        note("every warm-up object gone");
      }
  }
  static std::size_t free_device_memory() {
    if (!no_device_reason().empty()) return 0;
    auto m = pvmm::query_memory(0);
    return m && !m->shared_with_system ? m->free : 0;
  }
  ~leak_check() {
    auto now = pvmm::query_live_objects();
    CHECK_MESSAGE(open_fd_count() == baseline_fds, "file descriptors leaked");
    CHECK_MESSAGE(now.allocations == baseline_live.allocations, "physical allocations leaked");
    CHECK_MESSAGE(now.reservations == baseline_live.reservations, "address reservations leaked");
    CHECK_MESSAGE(now.mappings == baseline_live.mappings, "mappings leaked");
    CHECK_MESSAGE(now.streams == baseline_live.streams, "streams leaked");
    CHECK_MESSAGE(now.events == baseline_live.events, "events leaked");
    CHECK_MESSAGE(now.pools == baseline_live.pools, "memory pools leaked");
    CHECK_MESSAGE(now.pool_allocations == baseline_live.pool_allocations, "pool allocations leaked");
    CHECK_MESSAGE(now.managed == baseline_live.managed, "managed allocations leaked");
    CHECK_MESSAGE(now.pinned == baseline_live.pinned, "pinned allocations leaked");
    CHECK_MESSAGE(now.registrations == baseline_live.registrations, "host registrations leaked");
    CHECK_MESSAGE(kernel_pvmm_mappings() == baseline_kernel_mappings, "kernel mappings of pvmm memory leaked");
    // Drivers give some memory back late (managed pages, freed pool memory): wait for it, briefly. A case leaked
    // when the device has less free memory than when it began; more is what earlier cases gave back late.
    auto free_now = free_device_memory();
    for (int i = 0; i < 40 && free_now < baseline_device_free; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      free_now = free_device_memory();
    }
    CHECK_MESSAGE(free_now >= baseline_device_free,
                  "device memory leaked: " << (baseline_device_free - free_now) << " bytes");
  }
};

}  // namespace pvmm_test
