// Running out of fds (invariant 19): with the fd table full, every pvmm call that opens an fd (export, import,
// receive, listen, connect) fails with system_error naming "out of file descriptors", the count open and
// RLIMIT_NOFILE, never out_of_memory; nothing is lost, and the same call succeeds once an fd is free.
#include <unistd.h>

#include <chrono>
#include <string>

#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace std::chrono_literals;

namespace {

/// A call's outcome without what it returned (an fd it returned is closed at once): results are kept, and asserted
/// only once the fd table is restored, because doctest's message scopes (INFO, CHECK_MESSAGE) make UBSan check
/// memory through a pipe, which a full table refuses.
template <class R>
status outcome(const R& r) {
  return r ? status{} : status(r.error());
}

/// Asserts the one fd-exhaustion error: system_error, EMFILE, the words a user greps for, and the hint.
void check_out_of_fds(const status& r, const char* what) {
  INFO(what);
  REQUIRE_MESSAGE(!r.has_value(), "succeeded with the fd table full");
  CHECK_MESSAGE(r.code() == errc::system_error, r.error().message());
  CHECK(r.error().native_name == "EMFILE");
  CHECK_MESSAGE(r.error().detail.find("out of file descriptors") != std::string::npos, r.error().message());
  CHECK_MESSAGE(r.error().detail.find("RLIMIT_NOFILE soft limit") != std::string::npos, r.error().message());
  CHECK_MESSAGE(r.error().detail.find(" open") != std::string::npos, r.error().message());
  CHECK_MESSAGE(r.error().hint.find("ulimit -n") != std::string::npos, r.error().message());
}

std::string unique(const char* what) { return "pvmm-test-" + std::to_string(::getpid()) + "-" + what; }

/// One granule of device 0 memory, exportable as a POSIX fd.
physical_allocation exportable_memory() { return physical_allocation::create(granule(), default_properties()).value(); }

memory_pool exportable_pool() {
  pool_properties p;
  p.exportable = handle_types::posix_fd;
  return memory_pool::create(p).value();
}

}  // namespace

TEST_SUITE("sharing") {
  PVMM_CASE(
      "fd table full: export, import, receive, listen and connect say 'out of file descriptors', one fd "
      "freed, they work again and nothing was lost") {
    PVMM_REQUIRE_DEVICE();
    // On an H100 (driver 580) a pool export that met the full table left the driver failing later pool exports
    // (CUDA_ERROR_OPERATING_SYSTEM) and crashing in cuMemPoolDestroy: pvmm now refuses before calling it (fd_step).
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    auto memory = exportable_memory();
    const std::size_t g = memory.size();
    auto range = address_reservation::reserve(g).value();
    void* p = range.map_and_grant(0, memory, 0, g, {rw()}).value();
    write_words(p, pattern(g, 41));
    auto exported = memory.export_posix_fd().value();
    socket_pair pair;
    const int sent = exported.get();
    PVMM_CHECK_OK(ipc::send_fds(pair.a, &sent, 1, "one", 3));  // queued: received with the table full, then not
    auto server = ipc::listener::listen(unique("fd-budget-server")).value();
    const std::string path = ipc::runtime_directory().value() + "/" + unique("fd-budget");
    const bool pools = caps().pools.ipc_posix_fd;
    memory_pool pool = pools ? exportable_pool() : memory_pool{};
    status exported_full, imported_full, pool_full, received_full, path_full, abstract_full, connect_full;
    status exported_again, path_again, pool_again;
    result<ipc::received> again = ipc::received{};
    std::chrono::steady_clock::duration connect_took{};
    std::size_t fds_again = 0;
    bool imported_needs_fd = query_backend().name == "host";
    {
      full_fd_table full;
      exported_full = outcome(memory.export_posix_fd());
      // The host backend's import holds an fd of its own; a driver's may need none, and then it succeeds.
      imported_full = outcome(physical_allocation::import_posix_fd(exported.get(), g));
      if (pools) pool_full = outcome(pool.export_posix_fd());
      received_full = outcome(ipc::receive_fds(pair.b, 1, 64, 0ms));
      path_full = outcome(ipc::listener::listen(path));
      abstract_full = outcome(ipc::listener::listen(unique("fd-budget")));
      const auto start = std::chrono::steady_clock::now();
      connect_full = outcome(ipc::connect(server.name(), 5s));
      connect_took = std::chrono::steady_clock::now() - start;

      ::close(full.filler.back());  // one fd free: each call works again
      full.filler.pop_back();
      again = ipc::receive_fds(pair.b, 1, 64, 0ms);  // the message waited in the queue
      if (again) {
        fds_again = again->fds.size();
        again->fds.clear();  // its fd closed: the slot is free again
      }
      exported_again = outcome(memory.export_posix_fd());
      path_again = outcome(ipc::listener::listen(path));
    }
    // A driver's pool export opens more fds than the one it returns (CUDA 13.0: one free fd was not enough, and the
    // failure was said as fd exhaustion): it is tried again with the table released.
    if (pools) pool_again = outcome(pool.export_posix_fd());
    check_out_of_fds(exported_full, "export");
    if (imported_needs_fd || !imported_full) check_out_of_fds(imported_full, "import");
    if (pools) check_out_of_fds(pool_full, "pool export");
    check_out_of_fds(received_full, "receive");
    check_out_of_fds(path_full, "listen on a path");
    check_out_of_fds(abstract_full, "listen on an abstract name");
    check_out_of_fds(connect_full, "connect");
    CHECK(connect_took < 1s);  // at once, not at its deadline
    PVMM_REQUIRE_VALUE(again);
    CHECK(std::string(again->payload.begin(), again->payload.end()) == "one");
    CHECK(fds_again == 1);
    PVMM_CHECK_OK(exported_again);
    PVMM_CHECK_OK(path_again);
    PVMM_CHECK_OK(pool_again);
    CHECK(read_words(p, g) == pattern(g, 41));  // the exporter's memory is intact
    CHECK(::access(path.c_str(), F_OK) != 0);   // the listener removed its socket file
  }

  PVMM_CASE(
      "with the fd table full an export or import is refused as fd exhaustion before the backend is called, with "
      "fds to spare a backend failure stays the backend's") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    auto memory = exportable_memory();
    // A driver answers OUT_OF_MEMORY or INVALID_VALUE when it cannot open an fd: the injected failure stands for it.
    pvmm::testing::fail_nth_backend_call(1);
    auto spare = memory.export_posix_fd();
    pvmm::testing::fail_nth_backend_call(0);
    PVMM_CHECK_ERRC(spare, errc::backend_error);
    auto exported = memory.export_posix_fd().value();
    result<owned_fd> full_export = owned_fd{};
    result<physical_allocation> full_import = physical_allocation{};
    std::size_t calls = 0;
    {
      full_fd_table full;
      const std::size_t before = pvmm::testing::backend_call_count();
      full_export = memory.export_posix_fd();
      full_import = physical_allocation::import_posix_fd(exported.get(), memory.size());
      calls = pvmm::testing::backend_call_count() - before;
    }
    check_out_of_fds(outcome(full_export), "export with the table full");
    check_out_of_fds(outcome(full_import), "import with the table full");
    CHECK_MESSAGE(calls == 0, "the backend was called with the fd table full");
    CHECK(full_export.error().operation == "pvmm::physical_allocation::export_posix_fd");
    CHECK(full_export.error().detail.find("refused before calling the backend") != std::string::npos);
  }

  PVMM_CASE(
      "fd exhaustion reads the same from a backend's own system call (errno_error): EMFILE is never "
      "out_of_memory") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_HOST_BACKEND("memfd_create is the host backend's allocation");
    result<physical_allocation> created = physical_allocation{};
    {
      full_fd_table full;
      created = physical_allocation::create(granule(), default_properties());
    }
    check_out_of_fds(outcome(created), "create (memfd_create)");
  }
}  // TEST_SUITE
