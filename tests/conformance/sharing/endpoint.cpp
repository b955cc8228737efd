// Named endpoints: listen / accept / connect in the abstract Unix namespace, with peer checks and timeouts.
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace std::chrono_literals;

namespace {
/// A name no other run of the suite uses at the same time.
std::string unique_name(const char* what) { return "pvmm-test-" + std::to_string(::getpid()) + "-" + what; }
}  // namespace

TEST_SUITE("endpoint") {
  PVMM_CASE("connect, accept, send fds both ways, each side sees the other's credentials") {
    auto server = ipc::listener::listen(unique_name("pair")).value();
    auto client = ipc::connect(server.name()).value();  // queued until accepted
    auto accepted = server.accept().value();
    CHECK(client.peer().value().pid == ::getpid());
    CHECK(accepted.peer().value().uid == ::geteuid());
    int p[2];
    REQUIRE(::pipe(p) == 0);
    PVMM_CHECK_OK(client.send(&p[1], 1, "to server", 9));
    auto got = accepted.receive_exactly(1, 64).value();
    CHECK(std::string(got.payload.begin(), got.payload.end()) == "to server");
    CHECK(::write(got.fds[0].get(), "y", 1) == 1);
    char c = 0;
    CHECK(::read(p[0], &c, 1) == 1);
    CHECK(c == 'y');
    PVMM_CHECK_OK(accepted.send(got.fds, "back", 4));
    CHECK(client.receive_exactly(1, 64).value().fds.size() == 1);
    ::close(p[0]);
    ::close(p[1]);
  }

  PVMM_CASE("a name has one listener at a time and is free again when it closes") {
    const std::string name = unique_name("taken");
    {
      auto first = ipc::listener::listen(name).value();
      PVMM_CHECK_ERRC(ipc::listener::listen(name), errc::address_unavailable);
    }
    PVMM_CHECK_OK(ipc::listener::listen(name));
  }

  PVMM_CASE("connect waits for a listener that starts later, and times out when none does") {
    const std::string name = unique_name("late");
    std::optional<result<ipc::connection>> early;
    std::thread connector([&] { early = ipc::connect(name, 10s); });
    std::this_thread::sleep_for(100ms);
    auto server = ipc::listener::listen(name).value();
    auto accepted = server.accept(10s);
    connector.join();
    REQUIRE(early.has_value());
    PVMM_CHECK_OK(*early);
    PVMM_CHECK_OK(accepted);

    const auto start = std::chrono::steady_clock::now();
    auto none = ipc::connect(unique_name("nobody"), 60ms);
    PVMM_CHECK_ERRC(none, errc::timeout);
    CHECK(std::chrono::steady_clock::now() - start >= 60ms);
    auto idle = ipc::listener::listen(unique_name("idle")).value();
    PVMM_CHECK_ERRC(idle.accept(20ms), errc::timeout);
  }

  PVMM_CASE("abort from another thread ends a waiting receive at once, the peer sees it closed, later calls fail") {
    auto server = ipc::listener::listen(unique_name("abort")).value();
    auto client = ipc::connect(server.name()).value();
    auto accepted = server.accept().value();
    std::thread aborter([&] {
      std::this_thread::sleep_for(100ms);
      client.abort();
    });
    const auto start = std::chrono::steady_clock::now();
    auto waited = client.receive(0, 64, 10s);
    aborter.join();
    CHECK(std::chrono::steady_clock::now() - start < 2s);
    PVMM_CHECK_ERRC(waited, errc::peer_lost);
    CHECK(waited.error().message().find("aborted") != std::string::npos);
    CHECK(client.aborted());
    auto peer_side = accepted.receive(0, 64, 10s);  // EOF at once, not at its deadline
    PVMM_CHECK_ERRC(peer_side, errc::peer_lost);
    CHECK(std::chrono::steady_clock::now() - start < 2s);
    PVMM_CHECK_ERRC(client.send(nullptr, 0, "x", 1), errc::peer_lost);
    PVMM_CHECK_ERRC(client.receive_exactly(0, 64, 0ms), errc::peer_lost);
    client.abort();  // again: nothing more
    ipc::connection moved(std::move(client));
    CHECK(moved.aborted());
    PVMM_CHECK_ERRC(moved.receive(0, 64, 0ms), errc::peer_lost);
  }

  PVMM_CASE("abort ends a listener's waiting accept at once, and connects to its name are refused afterwards") {
    auto server = ipc::listener::listen(unique_name("abort-listener")).value();
    std::thread aborter([&] {
      std::this_thread::sleep_for(100ms);
      server.abort();
    });
    const auto start = std::chrono::steady_clock::now();
    auto waited = server.accept(10s);
    aborter.join();
    CHECK(std::chrono::steady_clock::now() - start < 2s);
    PVMM_CHECK_ERRC(waited, errc::peer_lost);
    CHECK(waited.error().message().find("aborted") != std::string::npos);
    PVMM_CHECK_ERRC(ipc::connect(server.name(), 100ms), errc::timeout);
    PVMM_CHECK_ERRC(server.accept(0ms), errc::peer_lost);
  }

  PVMM_CASE("peer rules: either side refuses a peer that does not satisfy its rule") {
    auto server = ipc::listener::listen(unique_name("rules")).value();
    ipc::peer_rule other_user;
    other_user.uid = ::geteuid() + 1;
    PVMM_CHECK_ERRC(ipc::connect(server.name(), 1s, other_user), errc::peer_rejected);
    (void)server.accept(1s);  // the refused client's queued connection
    auto client = ipc::connect(server.name()).value();
    ipc::peer_rule other_process;
    other_process.pid = ::getpid() + 1;
    auto refused = server.accept(1s, other_process);
    PVMM_CHECK_ERRC(refused, errc::peer_rejected);
    CHECK(refused.error().message().find("pid") != std::string::npos);
  }

  PVMM_CASE("bad names and timeouts are refused before any socket is made") {
    PVMM_CHECK_ERRC(ipc::listener::listen(""), errc::invalid_argument);
    PVMM_CHECK_ERRC(ipc::listener::listen(std::string(ipc::max_endpoint_name + 1, 'n')), errc::invalid_argument);
    PVMM_CHECK_ERRC(ipc::listener::listen(std::string("a\0b", 3)), errc::invalid_argument);
    PVMM_CHECK_ERRC(ipc::listener::listen(unique_name("backlog"), 0), errc::invalid_argument);
    PVMM_CHECK_ERRC(ipc::connect(unique_name("neg"), -1ms), errc::invalid_argument);
    PVMM_CHECK_OK(
        ipc::listener::listen(std::string(ipc::max_endpoint_name - 8, 'm') + std::to_string(::getpid() % 100000000)));
    PVMM_CHECK_ERRC(ipc::listener().accept(), errc::already_released);
  }

  PVMM_CASE("an exec'd process connects by name and imports a buffer, the exporter sees what it wrote") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    const std::size_t g = granule();
    auto range = address_reservation::reserve(2 * g).value();
    std::vector<physical_allocation> chunks;
    for (int i = 0; i < 2; ++i) {
      chunks.push_back(physical_allocation::create(g, default_properties()).value());
      range.map(i * g, chunks.back()).value();
    }
    range.set_access(0, 2 * g, {rw()}).value();
    write_words(range.address(), pattern(2 * g, 93));
    auto server = ipc::listener::listen(unique_name("child")).value();
    auto [unused, pid] = spawn_child({"endpoint-import", server.name(), "0", "93", "94"});
    ::close(unused);
    auto child = server.accept(60s).value();
    CHECK(child.peer().value().pid == pid);
    auto exported = export_buffer(chunks, handle_types::posix_fd).value();
    auto bytes = exported.descriptor.serialize();
    PVMM_CHECK_OK(child.send(exported.fds, bytes.data(), bytes.size()));
    exported.fds.clear();
    auto verdict = child.receive(0, 4096, 120s).value();
    CHECK(std::string(verdict.payload.begin(), verdict.payload.end()) == "ok");
    CHECK(wait_child(pid) == 0);
    CHECK(read_words(range.address(), 2 * g) == pattern(2 * g, 94));
  }
}  // TEST_SUITE
