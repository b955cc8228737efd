// Bad input to export, import and the fd transport: each case asserts the exact portable error and that nothing
// leaked (no fd left open: the case's leak check).
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

TEST_SUITE("bad input") {
  // ---- export / import ----
  PVMM_CASE("export_posix_fd: not requested at creation") {
    PVMM_REQUIRE_DEVICE();
    allocation_properties p = default_properties();
    p.exportable = handle_types::none;
    auto memory = physical_allocation::create(granule(), p).value();
    PVMM_CHECK_ERRC(memory.export_posix_fd(), errc::handle_type_not_requested);
  }
  PVMM_CASE("export_fabric: not requested at creation") {
    PVMM_REQUIRE_DEVICE();
    auto memory = physical_allocation::create(granule(), default_properties()).value();
    PVMM_CHECK_ERRC(memory.export_fabric(), errc::handle_type_not_requested);
  }
  PVMM_CASE("export_posix_fd: from a released allocation") {
    PVMM_REQUIRE_DEVICE();
    auto memory = physical_allocation::create(granule(), default_properties()).value();
    PVMM_CHECK_OK(memory.release());
    PVMM_CHECK_ERRC(memory.export_posix_fd(), errc::already_released);
  }
  PVMM_CASE("import_posix_fd: a closed fd") {
    PVMM_REQUIRE_DEVICE();
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    PVMM_CHECK_ERRC(physical_allocation::import_posix_fd(pipe_fds[0], granule()), errc::invalid_handle);
  }
  PVMM_CASE("import_posix_fd: a negative fd") {
    PVMM_REQUIRE_DEVICE();
    PVMM_CHECK_ERRC(physical_allocation::import_posix_fd(-1, granule()), errc::invalid_handle);
  }
  PVMM_CASE("import_posix_fd: a pipe, not memory") {
    PVMM_REQUIRE_DEVICE();
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    PVMM_CHECK_ERRC(physical_allocation::import_posix_fd(pipe_fds[0], granule()), errc::invalid_handle);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
  }
  PVMM_CASE("import_posix_fd: a regular file, not memory") {
    PVMM_REQUIRE_DEVICE();
    std::FILE* f = std::tmpfile();
    REQUIRE(f != nullptr);
    PVMM_CHECK_ERRC(physical_allocation::import_posix_fd(::fileno(f), granule()), errc::invalid_handle);
    std::fclose(f);
  }
  PVMM_CASE("import_posix_fd: zero size") {
    PVMM_REQUIRE_DEVICE();
    auto memory = physical_allocation::create(granule(), default_properties()).value();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    auto fd = memory.export_posix_fd().value();
    PVMM_CHECK_ERRC(physical_allocation::import_posix_fd(fd.get(), 0), errc::invalid_size);
  }
  PVMM_CASE("import_fabric: a handle nobody exported") {
    PVMM_REQUIRE_DEVICE();
    fabric_handle garbage;
    garbage.bytes.fill(0xA5);
    auto r = physical_allocation::import_fabric(garbage, granule());
    if (!caps().sharing.fabric) {
      PVMM_CHECK_ERRC(r, errc::not_supported);
    } else {
      CHECK_MESSAGE((r.code() == errc::invalid_handle || r.code() == errc::not_permitted),
                    (r ? std::string("succeeded") : r.error().message()));
    }
  }

  // ---- fd transport ----
  PVMM_CASE("receive_fds: times out when the peer sends nothing") {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    PVMM_CHECK_ERRC(ipc::receive_fds(sv[0], 1, 16, std::chrono::milliseconds(50)), errc::timeout);
    ::close(sv[0]);
    ::close(sv[1]);
  }
  PVMM_CASE("receive_fds: the peer closed the connection") {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    ::close(sv[1]);
    PVMM_CHECK_ERRC(ipc::receive_fds(sv[0], 1, 16, std::chrono::milliseconds(1000)), errc::peer_lost);
    ::close(sv[0]);
  }
  PVMM_CASE("send_fds: a null fd array") {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    PVMM_CHECK_ERRC(ipc::send_fds(sv[0], nullptr, 2, "x", 1), errc::invalid_argument);
    ::close(sv[0]);
    ::close(sv[1]);
  }
}  // TEST_SUITE
