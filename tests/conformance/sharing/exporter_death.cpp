// Exporter death (issue 27): an importer's memory outlives the process that exported it. An exec'd child exports
// physical memory and a pool pointer, sends them and is killed (SIGKILL) once the parent has imported them; the
// parent's mappings still read the child's data, take writes, and are released cleanly. The contract is in
// allocation.hpp and memory_pool.hpp; on the GPU drivers it is measured by tools/probes/exporter_death.cpp.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstring>

#include "child_lifecycle.hpp"
#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace std::chrono_literals;

TEST_SUITE("sharing") {
  PVMM_CASE(
      "exporter killed after the import: the importer's mapping and pool pointer keep the data, take writes "
      "and release cleanly") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    // What the drivers do is measured on a GPU by tools/probes/exporter_death; the suite pins the host backend's.
    PVMM_REQUIRE_HOST_BACKEND("the drivers' behaviour is measured by tools/probes/exporter_death");
    auto [sock, pid] = spawn_child({"export-and-die", "0"});
    auto message = ipc::receive_fds(sock, 2, sizeof(exporter_death_record), 60s);
    PVMM_REQUIRE_VALUE(message);
    exporter_death_record record;
    REQUIRE(message->payload.size() == sizeof record);
    std::memcpy(&record, message->payload.data(), sizeof record);
    REQUIRE(message->fds.size() == (record.has_pool ? 2u : 1u));
    const std::size_t size = record.memory_size;

    auto memory = physical_allocation::import_posix_fd(message->fds[0].get(), size).value();
    auto range = address_reservation::reserve(size).value();
    void* p = range.map_and_grant(0, memory, 0, size, {rw()}).value();
    auto s = stream::create(0).value();
    memory_pool pool;
    pool_allocation block;
    if (record.has_pool) {
      pool = memory_pool::import_posix_fd(pool_export{std::move(message->fds[1]), record.pool}, 0).value();
      block = pool.import_pointer(record.pointer, s).value();
    }
    message->fds.clear();  // only the imports hold the memory now

    PVMM_CHECK_OK(ipc::send_fds(sock, nullptr, 0, "die", 3));
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
    ::close(sock);

    CHECK(read_words(p, size) == pattern(size, exporter_death_seed));  // readable, data intact
    write_words(p, pattern(size, 7));
    CHECK(read_words(p, size) == pattern(size, 7));  // writable
    PVMM_CHECK_OK(range.unmap(0, size));
    PVMM_CHECK_OK(memory.release());
    if (record.has_pool) {
      const std::size_t bytes = exporter_death_pool_bytes;
      REQUIRE(block.size() == bytes);
      std::vector<std::uint32_t> seen(bytes / sizeof(std::uint32_t));
      PVMM_CHECK_OK(s.copy_async(seen.data(), block.data(), bytes));
      PVMM_CHECK_OK(s.synchronize());
      CHECK(seen == pattern(bytes, exporter_death_seed + 1));
      const auto mine = pattern(bytes, 8);
      PVMM_CHECK_OK(s.copy_async(block.data(), mine.data(), bytes));
      PVMM_CHECK_OK(s.copy_async(seen.data(), block.data(), bytes));
      PVMM_CHECK_OK(s.synchronize());
      CHECK(seen == mine);
      PVMM_CHECK_OK(block.free_async(s));  // the importer frees; no exporter is left to free after it
      PVMM_CHECK_OK(s.synchronize());
      PVMM_CHECK_OK(pool.release());
    } else {
      MESSAGE("the device cannot share pools: the pool pointer half is not exercised");
    }
  }
}  // TEST_SUITE
