// Leaks across cycles of pool IPC (issue 27): 100 times a pool is created, exported to an exec'd child that imports
// it and a pointer in it, both sides see the other's data, the importer frees first, then the exporter, and the pool
// is destroyed. Afterwards fds, live objects and the kernel's mappings of pvmm memory are as before, on both sides,
// and (on a GPU) the device's free memory.
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "device_memory.hpp"
#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace std::chrono_literals;

namespace {

/// Bytes of pvmm host memory (memfds named pvmm-*) this process maps (0 on the GPU backends).
std::size_t mapped_pvmm_bytes() {
  std::ifstream maps("/proc/self/maps");
  std::size_t bytes = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:pvmm-") == std::string::npos) continue;
    std::istringstream range(line);
    unsigned long long begin = 0, end = 0;
    char dash = 0;
    range >> std::hex >> begin >> dash >> end;
    bytes += end - begin;
  }
  return bytes;
}

}  // namespace

TEST_SUITE("pool") {
  PVMM_CASE(
      "100 cycles of pool IPC with an exec'd importer leave fds, live objects, mapped and device memory as they were") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().pools.ipc_posix_fd, "pool sharing as POSIX fd");
    constexpr int cycles = 100;
    const std::size_t size = 64 * 1024;
    auto s = stream::create(0).value();
    auto [sock, pid] = spawn_child({"pool-cycles", "0", std::to_string(cycles)});
    const auto live = query_live_objects();
    const std::size_t fds = open_fd_count();
    const std::size_t mapped = mapped_pvmm_bytes();
    std::optional<std::size_t> device_free;  // after the first cycle: the child's context is made by then (~0.5 GiB)
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < cycles; ++i) {
      CAPTURE(i);
      pool_properties p;
      p.exportable = handle_types::posix_fd;
      auto pool = memory_pool::create(p).value();
      PVMM_CHECK_OK(ipc::send_pool(sock, pool.export_posix_fd().value()));
      auto memory = pool.allocate(size, s).value();
      const auto words = pattern(size, static_cast<std::uint32_t>(i));
      PVMM_CHECK_OK(s.copy_async(memory.data(), words.data(), size));
      PVMM_CHECK_OK(s.synchronize());
      const auto record = memory.export_pointer().value();
      PVMM_CHECK_OK(ipc::send_fds(sock, nullptr, 0, &record, sizeof record));
      auto done = ipc::receive_fds(sock, 0, 4096, 60s).value();
      REQUIRE(std::string(done.payload.begin(), done.payload.end()) == "cycle done");
      std::vector<std::uint32_t> back(words.size());
      PVMM_CHECK_OK(s.copy_async(back.data(), memory.data(), size));
      PVMM_CHECK_OK(s.synchronize());
      CHECK(back == pattern(size, static_cast<std::uint32_t>(1000 + i)));
      PVMM_CHECK_OK(memory.free_async(s));  // after the importer's free
      PVMM_CHECK_OK(s.synchronize());
      PVMM_CHECK_OK(pool.release());
      if (i == 0) device_free = device_free_bytes(0);
    }
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(open_fd_count() == fds);
    CHECK(query_live_objects() == live);
    CHECK(mapped_pvmm_bytes() == mapped);
    const auto lost = device_memory_lost(device_free, device_free_bytes(0));
    CHECK_MESSAGE(lost.empty(), lost);
    auto verdict = ipc::receive_fds(sock, 0, 4096, 60s).value();  // the importer's own count
    CHECK(std::string(verdict.payload.begin(), verdict.payload.end()) == "ok");
    ::close(sock);
    CHECK(wait_child(pid) == 0);
    MESSAGE(cycles << " cycles in " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
  }
}  // TEST_SUITE
