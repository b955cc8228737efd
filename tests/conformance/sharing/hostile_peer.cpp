// What arrives from another process is trusted in nothing (invariant 12): more fds than asked for, credentials
// messages, longer messages, stream sockets, odd timeouts, fds that are not sealed memory. And local failures
// are reported as local, never blamed on the peer.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <limits>
#include <thread>

#include "posix_fd_export.hpp"

using namespace pvmm;
using namespace pvmm_test;
using std::chrono::milliseconds;

namespace {
/// Sends `count` fds of /dev/null and `payload` straight through the kernel, as any peer could.
void raw_send(int socket, std::size_t count, const std::string& payload) {
  std::vector<int> fds;
  for (std::size_t i = 0; i < count; ++i) fds.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  iovec iov{const_cast<char*>(payload.data()), payload.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * count));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * count);
  }
  REQUIRE(::sendmsg(socket, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(payload.size()));
  for (int fd : fds) ::close(fd);
}

/// A memfd like the ones pvmm exports, with the given seals (none: a peer keeps the right to truncate it).
int memfd_with_seals(std::size_t size, int seals, const char* name = "pvmm-d0-x1") {
  int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(size)) == 0);
  if (seals) REQUIRE(::fcntl(fd, F_ADD_SEALS, seals) == 0);
  return fd;
}
}  // namespace

TEST_SUITE("hostile peer") {
  PVMM_CASE("receive_fds never returns more fds than max_fds, whatever the peer sends") {
    socket_pair s;
    for (std::size_t max_fds : {0u, 1u, 3u}) {
      const std::size_t before = open_fd_count();
      raw_send(s.a, max_fds + 1, "x");
      PVMM_CHECK_ERRC(ipc::receive_fds(s.b, max_fds, 16, milliseconds(1000)), errc::protocol_error);
      CHECK_MESSAGE(open_fd_count() == before, "fds of a rejected message stayed open (max_fds " << max_fds << ")");
    }
    raw_send(s.a, 3, "x");
    auto exact = ipc::receive_fds(s.b, 3, 16, milliseconds(1000));
    PVMM_REQUIRE_VALUE(exact);
    CHECK(exact->fds.size() == 3);
  }

  PVMM_CASE("fds arrive on a socket with SO_PASSCRED set (the credentials message does not crowd them out)") {
    socket_pair s;
    int on = 1;
    REQUIRE(::setsockopt(s.b, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) == 0);
    raw_send(s.a, 2, "creds");
    auto got = ipc::receive_fds(s.b, 2, 16, milliseconds(1000));
    PVMM_REQUIRE_VALUE(got);
    CHECK(got->fds.size() == 2);
    CHECK(std::string(got->payload.begin(), got->payload.end()) == "creds");
  }

  PVMM_CASE("a message longer than max_payload is refused whole, and the next message arrives intact") {
    socket_pair s;
    raw_send(s.a, 1, std::string(100, 'L'));
    raw_send(s.a, 0, "next");
    PVMM_CHECK_ERRC(ipc::receive_fds(s.b, 1, 10, milliseconds(1000)), errc::protocol_error);
    auto next = ipc::receive_fds(s.b, 1, 10, milliseconds(1000));
    PVMM_REQUIRE_VALUE(next);
    CHECK(std::string(next->payload.begin(), next->payload.end()) == "next");
  }

  PVMM_CASE("stream sockets are refused (no message boundaries), datagram sockets work") {
    socket_pair stream(SOCK_STREAM);
    PVMM_CHECK_ERRC(ipc::send_fds(stream.a, nullptr, 0, "x", 1), errc::invalid_argument);
    raw_send(stream.a, 1, "x");
    PVMM_CHECK_ERRC(ipc::receive_fds(stream.b, 1, 16, milliseconds(1000)), errc::invalid_argument);
    socket_pair dgram(SOCK_DGRAM);
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    PVMM_CHECK_OK(ipc::send_fds(dgram.a, &fd, 1, "d", 1));
    ::close(fd);
    auto got = ipc::receive_fds(dgram.b, 1, 16, milliseconds(1000));
    PVMM_REQUIRE_VALUE(got);
    CHECK(got->fds.size() == 1);
  }

  PVMM_CASE("limits at SIZE_MAX are safe: the buffer is sized by what arrived") {
    socket_pair s;
    constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();
    raw_send(s.a, 2, "hello");
    auto got = ipc::receive_fds(s.b, size_max, size_max, milliseconds(1000));
    PVMM_REQUIRE_VALUE(got);
    CHECK(got->fds.size() == 2);
    CHECK(got->payload.size() == 5);
  }

  PVMM_CASE("timeouts: negative is invalid_argument, 2^31 ms, 2^32 ms and wait_forever all wait") {
    socket_pair s;
    PVMM_CHECK_ERRC(ipc::receive_fds(s.b, 0, 16, milliseconds(-1)), errc::invalid_argument);
    PVMM_CHECK_ERRC(ipc::send_fds(s.a, nullptr, 0, "x", 1, milliseconds(-5)), errc::invalid_argument);
    for (auto timeout : {milliseconds(std::int64_t{1} << 31), milliseconds(std::int64_t{1} << 32), ipc::wait_forever}) {
      std::thread late([&] {
        std::this_thread::sleep_for(milliseconds(50));
        raw_send(s.a, 0, "late");
      });
      auto got = ipc::receive_fds(s.b, 0, 16, timeout);
      late.join();
      CHECK_MESSAGE(got.has_value(), (got ? std::string() : got.error().message())
                                         << " (timeout " << timeout.count() << ")");
    }
    PVMM_CHECK_ERRC(ipc::receive_fds(s.b, 0, 16, milliseconds(0)), errc::timeout);
  }

  PVMM_CASE("fds that are not sealed memory are refused at import, directly and through import_buffer") {
    PVMM_REQUIRE_DEVICE();
    if (!posix_fd_exports_or_refused()) return;
    const std::size_t g = granule();
    int pipe_fds[2];
    REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
    const int unsealed = memfd_with_seals(g, 0);
    const int shrink_only = memfd_with_seals(g, F_SEAL_SHRINK);
    const int grow_only = memfd_with_seals(g, F_SEAL_GROW);
    // Sealed, but naming places that do not exist here: a NUMA node and a device the host does not have.
    const int no_such_node = memfd_with_seals(g, F_SEAL_SHRINK | F_SEAL_GROW, "pvmm-n999-x1");
    const int no_such_device = memfd_with_seals(g, F_SEAL_SHRINK | F_SEAL_GROW, "pvmm-d7-x1");
    for (int fd : {unsealed, shrink_only, grow_only, pipe_fds[0], no_such_node, no_such_device}) {
      PVMM_CHECK_ERRC(physical_allocation::import_posix_fd(fd, g), errc::invalid_handle);
      buffer_descriptor d;
      d.size = g;
      d.chunks = {chunk_descriptor{0, g, 0, {}}};
      PVMM_CHECK_ERRC(import_buffer(d, &fd, 1, {rw()}), errc::protocol_error);
    }
    // The importer would die of SIGBUS at its next access had the unsealed memfd been accepted.
    REQUIRE(::ftruncate(unsealed, 0) == 0);
    for (int fd : {unsealed, shrink_only, grow_only, pipe_fds[0], pipe_fds[1], no_such_node, no_such_device})
      ::close(fd);
  }

  PVMM_CASE("query_access with a full fd table answers from a real source or reports EMFILE, never not_mapped") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(g, default_properties()).value();
    auto range = address_reservation::reserve(g).value();
    void* p = range.map_and_grant(0, memory, 0, g, {rw()}).value();
    result<pvmm::access> a = pvmm::access::none;
    {
      full_fd_table full;
      a = query_access(location::device(0), p);
    }
    if (a) {
      CHECK(*a == pvmm::access::read_write);
    } else {
      CHECK_MESSAGE(a.code() == errc::system_error, a.error().message());
      CHECK(a.error().native_name == "EMFILE");
    }
  }

  PVMM_CASE("import_buffer: a local failure keeps its own code, fabric where the backend lacks it is not_supported") {
    PVMM_REQUIRE_DEVICE();
    // Without them export_buffer is asserted not_supported elsewhere.
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    const std::size_t g = granule();
    PVMM_CHECK_ERRC(export_buffer(std::vector<physical_allocation>{}, handle_types::posix_fd), errc::invalid_argument);
    std::vector<physical_allocation> chunks;
    chunks.push_back(physical_allocation::create(g, default_properties()).value());
    auto out = export_buffer(chunks, handle_types::posix_fd).value();
    const int fd = out.fds[0].get();
    result<imported_buffer> imported = imported_buffer{};
    {
      full_fd_table full;
      imported = import_buffer(out.descriptor, &fd, 1, {rw()});
    }
    if (!imported) {
      CHECK_MESSAGE(imported.code() != errc::protocol_error,
                    "a full fd table was blamed on the peer: " << imported.error().message());
      CHECK(imported.error().native_name == "EMFILE");
    }
    buffer_descriptor fabric;
    fabric.kind = handle_types::fabric;
    fabric.size = g;
    fabric.chunks = {chunk_descriptor{0, g, 0, {}}};
    auto f = import_buffer(fabric, nullptr, 0, {rw()});
    if (!caps().sharing.fabric) {
      PVMM_CHECK_ERRC(f, errc::not_supported);
    } else {  // a zeroed handle: garbage from the peer, or no IMEX channel here
      CHECK_MESSAGE((f.code() == errc::protocol_error || f.code() == errc::not_permitted),
                    (f ? std::string("succeeded") : f.error().message()));
    }
  }
}  // TEST_SUITE
