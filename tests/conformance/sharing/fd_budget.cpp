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

/// Asserts the one fd-exhaustion error: system_error, EMFILE, the words a user greps for, and the hint.
template <class R>
void check_out_of_fds(const R& r, const char* what) {
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
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    const std::size_t g = granule();
    auto memory = physical_allocation::create(g, default_properties()).value();
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
    {
      full_fd_table full;
      check_out_of_fds(memory.export_posix_fd(), "export");
      // The host backend's import holds an fd of its own; a driver's may need none, and then it succeeds.
      auto imported = physical_allocation::import_posix_fd(exported.get(), g);
      if (query_backend().name == "host" || !imported) check_out_of_fds(imported, "import");
      if (pools) check_out_of_fds(pool.export_posix_fd(), "pool export");
      check_out_of_fds(ipc::receive_fds(pair.b, 1, 64, 0ms), "receive");
      check_out_of_fds(ipc::listener::listen(path), "listen on a path");
      check_out_of_fds(ipc::listener::listen(unique("fd-budget")), "listen on an abstract name");
      const auto start = std::chrono::steady_clock::now();
      check_out_of_fds(ipc::connect(server.name(), 5s), "connect");
      CHECK(std::chrono::steady_clock::now() - start < 1s);  // at once, not at its deadline

      ::close(full.filler.back());  // one fd free: each call works again
      full.filler.pop_back();
      {
        auto again = ipc::receive_fds(pair.b, 1, 64, 0ms);  // the message waited in the queue
        PVMM_REQUIRE_VALUE(again);
        CHECK(std::string(again->payload.begin(), again->payload.end()) == "one");
        CHECK(again->fds.size() == 1);
      }
      PVMM_CHECK_OK(memory.export_posix_fd());
      PVMM_CHECK_OK(ipc::listener::listen(path));
      if (pools) PVMM_CHECK_OK(pool.export_posix_fd());
    }
    CHECK(read_words(p, g) == pattern(g, 41));  // the exporter's memory is intact
    CHECK(::access(path.c_str(), F_OK) != 0);   // the listener removed its socket file
  }

  PVMM_CASE(
      "a backend failure while the process is out of fds is reported as fd exhaustion, with the backend's "
      "words, with fds to spare it stays the backend's") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    const std::size_t g = granule();
    auto memory = physical_allocation::create(g, default_properties()).value();
    // A driver answers OUT_OF_MEMORY or INVALID_VALUE when it cannot open an fd: the injected failure stands for it.
    pvmm::testing::fail_nth_backend_call(1);
    auto spare = memory.export_posix_fd();
    pvmm::testing::fail_nth_backend_call(0);
    PVMM_CHECK_ERRC(spare, errc::backend_error);
    result<owned_fd> full_table = owned_fd{};
    {
      full_fd_table full;
      pvmm::testing::fail_nth_backend_call(1);
      full_table = memory.export_posix_fd();
      pvmm::testing::fail_nth_backend_call(0);
    }
    check_out_of_fds(full_table, "export failed by the backend with the table full");
    CHECK(full_table.error().detail.find("PVMM_INJECTED_FAILURE") != std::string::npos);
    CHECK(full_table.error().operation == "pvmm::physical_allocation::export_posix_fd");
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
    check_out_of_fds(created, "create (memfd_create)");
  }
}  // TEST_SUITE
