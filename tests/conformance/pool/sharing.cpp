// Pools shared between processes: a pool and a pointer exported to an exec'd child that reads the parent's data,
// writes its own and frees first; the importer's rules; every bad input with its error.
#include <cstring>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace std::chrono_literals;

namespace {

memory_pool exportable_pool() {
  pool_properties p;
  p.exportable = handle_types::posix_fd;
  auto pool = memory_pool::create(p);
  PVMM_REQUIRE_VALUE(pool);
  return std::move(*pool);
}
}  // namespace

#define PVMM_REQUIRE_POOL_IPC() PVMM_REQUIRE_CAPABILITY(caps().pools.ipc_posix_fd, "pool sharing as POSIX fd")

TEST_SUITE("pool") {
  PVMM_CASE("a pool and a pointer shared with an exec'd process: both see the other's data, the importer frees first") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_POOL_IPC();
    auto pool = exportable_pool();
    auto decoy = exportable_pool();  // the child must refuse a pointer imported into it
    CHECK(pool.id() != pool_id{});
    CHECK(pool.id() != decoy.id());
    auto s = stream::create(0).value();
    const std::size_t size = 3 * mib + 4096;
    auto memory = pool.allocate(size, s).value();
    const auto words = pattern(size, 61);
    PVMM_CHECK_OK(s.copy_async(memory.data(), words.data(), size));
    PVMM_CHECK_OK(s.synchronize());  // the allocation is complete before the importer uses it
    auto [sock, pid] = spawn_child({"pool-import", "0", "61", "62"});
    PVMM_CHECK_OK(ipc::send_pool(sock, pool.export_posix_fd().value()));
    PVMM_CHECK_OK(ipc::send_pool(sock, decoy.export_posix_fd().value()));
    const auto record = memory.export_pointer().value();
    CHECK(record.size == size);
    CHECK(record.pool == pool.id());
    PVMM_CHECK_OK(ipc::send_fds(sock, nullptr, 0, &record, sizeof record));
    auto verdict = ipc::receive_fds(sock, 0, 4096, 120s).value();
    CHECK(std::string(verdict.payload.begin(), verdict.payload.end()) == "ok");
    CHECK(wait_child(pid) == 0);
    ::close(sock);
    CHECK(read_back(s, memory.data(), size) == pattern(size, 62));
    PVMM_CHECK_OK(memory.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
  }

  PVMM_CASE("pool sharing refuses what cannot be shared, each with its error") {
    PVMM_REQUIRE_POOLS();
    auto plain = memory_pool::create({}).value();
    auto s = stream::create(0).value();
    auto memory = plain.allocate(4096, s).value();
    CHECK(plain.id() == pool_id{});
    PVMM_CHECK_ERRC(plain.export_posix_fd(), errc::handle_type_not_requested);
    PVMM_CHECK_ERRC(memory.export_pointer(), errc::handle_type_not_requested);
    PVMM_CHECK_ERRC(memory_pool::default_pool(0).value().export_posix_fd(), errc::handle_type_not_requested);
    PVMM_CHECK_ERRC(plain.import_pointer(pool_pointer_export{}, s), errc::invalid_argument);  // not imported
    pool_properties fabric;
    fabric.exportable = handle_types::fabric;
    PVMM_CHECK_ERRC(memory_pool::create(fabric), errc::not_supported);
    pool_properties host;
    host.location = location::host();
    host.exportable = handle_types::posix_fd;
    PVMM_CHECK_ERRC(memory_pool::create(host), errc::not_supported);
    PVMM_CHECK_ERRC(memory_pool::import_posix_fd(pool_export{}, 0), errc::invalid_handle);  // no fd
    pool_export no_id;
    no_id.fd = owned_fd(::dup(0));
    PVMM_CHECK_ERRC(memory_pool::import_posix_fd(no_id, 0), errc::invalid_handle);  // no identity
    PVMM_CHECK_ERRC(memory_pool::import_posix_fd(no_id, 99), errc::invalid_device);
    PVMM_CHECK_OK(memory.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    if (caps().pools.ipc_posix_fd) {
      auto pool = exportable_pool();
      auto p = pool.allocate_async(mib, s).value();
      PVMM_CHECK_OK(s.synchronize());  // exported once the host has seen the allocation complete
      PVMM_CHECK_ERRC(pool.export_pointer(p), errc::invalid_argument);  // the pool has not been exported yet
      auto shared = pool.export_posix_fd().value();
      PVMM_CHECK_ERRC(pool.export_pointer(static_cast<char*>(p) + 256), errc::invalid_argument);  // not an allocation
      PVMM_CHECK_OK(pool.export_pointer(p));
      PVMM_CHECK_OK(pool.free_async(p, s));
      PVMM_CHECK_ERRC(pool.export_pointer(p), errc::invalid_argument);  // freed
      PVMM_CHECK_OK(s.synchronize());
    }
  }

  PVMM_CASE("receive_pool refuses a message that is not a pool, and closes what came with it") {
    socket_pair pair;
    const auto before = open_fd_count();
    const char text[] = "not a pool";
    const int fd = 0;
    PVMM_CHECK_OK(ipc::send_fds(pair.a, &fd, 1, text, sizeof text));
    PVMM_CHECK_ERRC(ipc::receive_pool(pair.b, 1s), errc::protocol_error);
    PVMM_CHECK_OK(ipc::send_fds(pair.a, nullptr, 0, text, sizeof text));
    PVMM_CHECK_ERRC(ipc::receive_pool(pair.b, 1s), errc::protocol_error);  // no fd
    CHECK(open_fd_count() == before);
    PVMM_CHECK_ERRC(ipc::send_pool(pair.a, pool_export{}), errc::invalid_handle);
  }

  PVMM_CASE("host backend: a stale pointer export is refused") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_HOST_BACKEND("the GPU drivers cannot see a stale export (the caller's rule there)");
    auto pool = exportable_pool();
    auto s = stream::create(0).value();
    auto imported = memory_pool::import_posix_fd(pool.export_posix_fd().value(), 0).value();  // one process suffices
    auto memory = pool.allocate(mib, s).value();
    PVMM_CHECK_ERRC(memory.export_pointer(), errc::invalid_argument);  // the host has not seen it complete yet
    const auto words = pattern(mib, 5);
    PVMM_CHECK_OK(s.copy_async(memory.data(), words.data(), mib));
    PVMM_CHECK_OK(s.synchronize());
    const auto record = memory.export_pointer().value();
    auto held = imported.import_pointer(record, s).value();
    CHECK(held.data() != memory.data());  // the importer's own mapping of the same memory
    std::vector<std::uint32_t> seen(words.size());
    PVMM_CHECK_OK(s.copy_async(seen.data(), held.data(), mib));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(seen == words);
    PVMM_CHECK_OK(held.free_async(s));  // the importer frees first (the caller's rule: nothing refuses the exporter)
    PVMM_CHECK_OK(s.synchronize());
    PVMM_CHECK_OK(memory.free_async(s));
    PVMM_CHECK_ERRC(imported.import_pointer(record, s), errc::invalid_handle);  // freed since: stale
    auto again = pool.allocate(mib, s).value();                                 // the same block, a new life
    PVMM_CHECK_ERRC(imported.import_pointer(record, s), errc::invalid_handle);
    auto forged = record;
    forged.data[0] ^= 0xff;
    PVMM_CHECK_ERRC(imported.import_pointer(forged, s), errc::invalid_handle);
    PVMM_CHECK_OK(again.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
  }
}  // TEST_SUITE
