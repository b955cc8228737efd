// Hardening round 3 (issue 23): sharing cases, each pinning a defect an attacker found.
#include <poll.h>

#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace std::chrono_literals;

TEST_SUITE("sharing") {
  PVMM_CASE("send_fds sends at once when the socket has room, though AF_UNIX does not report POLLOUT") {
    socket_pair pair;
    int sndbuf = 0;
    socklen_t len = sizeof sndbuf;
    REQUIRE(::getsockopt(pair.a, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) == 0);
    // Over a quarter of the send buffer queued (no POLLOUT), well under all of it (a send is accepted).
    std::vector<unsigned char> big(static_cast<std::size_t>(sndbuf) / 2);
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<unsigned char>(i * 7);
    REQUIRE(::send(pair.a, big.data(), big.size(), MSG_DONTWAIT) == static_cast<ssize_t>(big.size()));
    pollfd p{pair.a, POLLOUT, 0};
    REQUIRE_MESSAGE(::poll(&p, 1, 0) == 0, "the kernel reports POLLOUT: the case's premise does not hold");

    int pipe_fds[2];
    REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
    const char small[4] = {'p', 'v', 'm', 'm'};
    PVMM_CHECK_OK(ipc::send_fds(pair.a, &pipe_fds[0], 1, small, sizeof small, 200ms));
    ::close(pipe_fds[0]);

    auto first = ipc::receive_fds(pair.b, 0, big.size(), 1s);
    REQUIRE_MESSAGE(first.has_value(), first.error().message());
    CHECK(first->payload == big);
    auto second = ipc::receive_fds(pair.b, 1, sizeof small, 1s);
    REQUIRE_MESSAGE(second.has_value(), second.error().message());
    CHECK(std::string(second->payload.begin(), second->payload.end()) == "pvmm");
    REQUIRE(second->fds.size() == 1);
    // The fd that arrived is the pipe's read end: what goes in the write end comes out of it.
    REQUIRE(::write(pipe_fds[1], "x", 1) == 1);
    char c = 0;
    CHECK(::read(second->fds[0].get(), &c, 1) == 1);
    CHECK(c == 'x');
    ::close(pipe_fds[1]);
  }

  PVMM_CASE("send_fds on a socket with no room still times out at its deadline") {
    socket_pair pair;
    // Fill the socket until the kernel refuses (the peer's queue or the send buffer).
    std::vector<unsigned char> chunk(4096, 0xab);
    while (::send(pair.a, chunk.data(), chunk.size(), MSG_DONTWAIT) > 0) {
    }
    REQUIRE((errno == EAGAIN || errno == EWOULDBLOCK));
    const auto start = std::chrono::steady_clock::now();
    const char small[4] = {};
    auto r = ipc::send_fds(pair.a, nullptr, 0, small, sizeof small, 100ms);
    const auto took = std::chrono::steady_clock::now() - start;
    PVMM_CHECK_ERRC(r, errc::timeout);
    CHECK(took >= 100ms);
    CHECK(took < 2s);
    // Polling once (timeout 0) answers at once.
    PVMM_CHECK_ERRC(ipc::send_fds(pair.a, nullptr, 0, small, sizeof small, 0ms), errc::timeout);
  }

  PVMM_CASE("an inner operation's error keeps its own arguments, the outer operation is added as context") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd export");
    auto memory = physical_allocation::create(granule(), default_properties()).value();
    std::vector<physical_allocation> chunks;
    chunks.push_back(std::move(memory));
    auto run = [&] { return export_buffer(chunks, handle_types::posix_fd).has_value(); };
    // The last backend call of export_buffer is physical_allocation::properties, which has no arguments.
    const std::size_t calls = backend_calls_of(run);
    REQUIRE(calls >= 2);
    pvmm::testing::fail_nth_backend_call(calls);
    auto r = export_buffer(chunks, handle_types::posix_fd);
    pvmm::testing::fail_nth_backend_call(0);
    REQUIRE_FALSE(r.has_value());
    const auto& e = r.error();
    CHECK(e.operation == "pvmm::physical_allocation::properties");
    CHECK(e.arguments == "");
    CHECK(e.message() ==
          "pvmm::physical_allocation::properties(): backend_error: fault injected into backend call properties "
          "(in pvmm::export_buffer(chunks=1, kind=1)) [PVMM_INJECTED_FAILURE = -1]");
  }
  PVMM_CASE("owned_fd::release closes now and reports, detach hands the fd over unclosed") {
    int pipe_fds[2];
    REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
    owned_fd read_end(pipe_fds[0]);
    owned_fd write_end(pipe_fds[1]);
    PVMM_CHECK_OK(read_end.release());
    CHECK_FALSE(read_end.valid());
    CHECK(::fcntl(pipe_fds[0], F_GETFD) == -1);  // closed by release, not later
    PVMM_CHECK_ERRC(read_end.release(), errc::already_released);

    const int raw = write_end.detach();
    CHECK(raw == pipe_fds[1]);
    CHECK_FALSE(write_end.valid());
    PVMM_CHECK_ERRC(write_end.release(), errc::already_released);
    CHECK(::fcntl(raw, F_GETFD) != -1);  // still open: the caller owns it now
    CHECK(::close(raw) == 0);
  }

  PVMM_CASE("owned_fd::release reports close's error and is empty afterwards") {
    owned_fd not_open(1 << 30);  // above any RLIMIT_NOFILE: close answers EBADF
    auto done = not_open.release();
    PVMM_CHECK_ERRC(done, errc::invalid_handle);
    if (!done) CHECK(done.error().native_name == "EBADF");
    CHECK_FALSE(not_open.valid());  // freed either way: closing again could close someone else's fd
  }

}  // TEST_SUITE
