// The bootstrap adapters beyond the contract: bounds on ranks, strangers at the endpoints root, point-to-point
// limits, errors naming ranks, memory running out.
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <pvmm/bootstrap.hpp>
#include <pvmm/endpoint.hpp>
#include <pvmm/ipc.hpp>

#include <doctest/doctest.h>

#include "bootstrap_support.hpp"
#include "sanitized.hpp"

using namespace bootstrap_test;

TEST_CASE("rank counts are bounded by bootstrap::max_ranks, and a large group is made quickly") {
  CHECK(pvmm::make_thread_bootstraps(INT_MAX).code() == errc::invalid_argument);
  CHECK(pvmm::make_thread_bootstraps(pvmm::bootstrap::max_ranks + 1).code() == errc::invalid_argument);
  CHECK(pvmm::make_endpoint_bootstrap(unique_name("big"), 0, INT_MAX, 0ms).code() == errc::invalid_argument);
  CHECK(pvmm::make_store_bootstrap(pvmm::make_memory_store(), "big", 0, INT_MAX, 0ms).code() == errc::invalid_argument);
  const auto start = std::chrono::steady_clock::now();
  auto g = pvmm::make_thread_bootstraps(pvmm::bootstrap::max_ranks);
  REQUIRE(g);
  CHECK((*g)[pvmm::bootstrap::max_ranks - 1]->local_rank() == pvmm::bootstrap::max_ranks - 1);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
}

namespace {

// Forks a process that connects to endpoint `name` and does `act` with the socket (nothing, garbage, a forged
// hello), as user `uid` when not -1; it lives `lifetime`. Called before this process starts threads.
pid_t stranger(const std::string& name, int uid, const std::function<void(int)>& act) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (uid >= 0 && (::setgid(static_cast<gid_t>(uid)) != 0 || ::setuid(static_cast<uid_t>(uid)) != 0)) ::_exit(3);
  std::this_thread::sleep_for(100ms);
  // A raw connect: the listener's check is what is tested, not the client's.
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  for (int i = 0; i < 100; ++i) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, name.data(), name.size());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a),
                  static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())) == 0)
      break;
    std::this_thread::sleep_for(20ms);
  }
  act(fd);
  std::this_thread::sleep_for(3s);
  ::_exit(0);
}

struct forged_header {  // the endpoints adapter's header layout
  std::uint32_t magic = 0x54425650, what = 1;
  std::uint64_t sequence = 0, total = 0;
  std::int32_t rank = 1, size = 2, node = 0, pid = 0, code = 0, aborted = 0;
};

}  // namespace

TEST_CASE("endpoints: strangers at the root are dropped and the real ranks still meet") {
  const std::string name = unique_name("strangers");
  std::vector<pid_t> children;
  children.push_back(stranger(name, -1, [](int) {}));  // silent
  children.push_back(stranger(name, -1, [](int fd) { (void)!::write(fd, "garbage!", 8); }));
  children.push_back(stranger(name, -1, [](int fd) {
    forged_header h;
    h.total = std::uint64_t{1} << 32;  // a hello carries no bytes
    (void)!::write(fd, &h, sizeof h);
  }));
  if (::geteuid() == 0)
    children.push_back(stranger(name, 65534, [](int) {}));  // another user
  else
    MESSAGE("[pvmm-skip] the other-user stranger needs root");
  const auto start = std::chrono::steady_clock::now();
  std::vector<pvmm::result<std::shared_ptr<pvmm::bootstrap>>> made(2, pvmm::error{});
  on_every_rank(2, [&](int r) {
    if (r == 1) std::this_thread::sleep_for(500ms);  // after the strangers
    made[r] = pvmm::make_endpoint_bootstrap(name, r, 2, 10s);
  });
  for (auto& m : made) REQUIRE_MESSAGE(m, m.error().message());
  CHECK(std::chrono::steady_clock::now() - start < 4s);
  pvmm::status done[2];
  on_every_rank(2, [&](int r) { done[r] = (*made[r])->barrier(pvmm::deadline_in(5s)); });
  CHECK_MESSAGE(done[0], text(done[0]));
  CHECK_MESSAGE(done[1], text(done[1]));
  for (pid_t c : children) {
    ::kill(c, SIGKILL);
    ::waitpid(c, nullptr, 0);
  }
}

TEST_CASE("endpoints: a rank whose point-to-point listener failed still sends, and its receive says why it fails") {
  // Another listener holds rank 1's point-to-point name while the group forms. Before, rank 1's send failed with
  // its own listener's error.
  const std::string name = unique_name("p2p-taken");
  auto squatter = pvmm::ipc::listener::listen(name + "#p2p-1");
  REQUIRE(squatter);
  auto g = make_group("endpoints", 2, name);
  const std::uint64_t sent = 0x1234567890abcdefull;
  std::uint64_t got = 0;
  pvmm::status receive_back;
  on_every_rank(2, [&](int r) {
    if (r == 1) {
      auto ok = g[1]->send(0, 5, &sent, sizeof sent, pvmm::deadline_in(10s));
      CHECK_MESSAGE(ok, text(ok));
    } else {
      auto ok = g[0]->receive(1, 5, &got, sizeof got, pvmm::deadline_in(10s));
      CHECK_MESSAGE(ok, text(ok));
    }
  });
  CHECK(got == sent);
  const auto start = std::chrono::steady_clock::now();
  receive_back = g[1]->receive(0, 5, &got, sizeof got, pvmm::deadline_in(10s));
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  CHECK_MESSAGE(receive_back.code() == errc::address_unavailable, text(receive_back));
  g[0]->abort();
  g[1]->abort();
}

TEST_CASE("endpoints: a first send waiting for the peer's point-to-point listener hears an abort at once") {
  // Rank 1's point-to-point name was taken while the group formed, then let go: nothing listens there, and rank 0's
  // first send to rank 1 waits for a listener. Rank 1 aborts: before, rank 0 waited out its deadline in connect.
  const std::string name = unique_name("p2p-gone");
  auto squatter = pvmm::ipc::listener::listen(name + "#p2p-1");
  REQUIRE(squatter);
  auto g = make_group("endpoints", 2, name);
  *squatter = pvmm::ipc::listener();
  std::thread aborter([&] {
    std::this_thread::sleep_for(300ms);
    g[1]->abort();
  });
  const std::uint32_t value = 7;
  const auto start = std::chrono::steady_clock::now();
  auto got = g[0]->send(1, 1, &value, sizeof value, pvmm::deadline_in(20s));
  const auto took = std::chrono::steady_clock::now() - start;
  aborter.join();
  CHECK_MESSAGE(got.code() == errc::peer_lost, text(got));
  CHECK_MESSAGE(names(got, "rank 1 aborted"), text(got));
  CHECK(took < 3s);
}

TEST_CASE("endpoints: errors name the rank they concern, with its pid") {
  // A root that times out waiting for rank 2: rank 1 hears that rank 2 is missing, from rank 0 named with its pid.
  const std::string name = unique_name("blame");
  pvmm::result<std::shared_ptr<pvmm::bootstrap>> made[2] = {pvmm::error{}, pvmm::error{}};
  on_every_rank(2, [&](int r) { made[r] = pvmm::make_endpoint_bootstrap(name, r, 3, 700ms); });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK_MESSAGE(made[r].code() == errc::timeout, made[r].error().message());
    CHECK_MESSAGE(made[r].error().message().find("rank 2 did not connect") != std::string::npos,
                  made[r].error().message());
    CHECK_MESSAGE(made[r].error().message().find("(pid 0)") == std::string::npos, made[r].error().message());
  }
}

// Sanitizers' allocators report running out of memory themselves (and stop the process) instead of throwing.
TEST_CASE("memory running out in a bootstrap call is out_of_memory, not an exception (under RLIMIT_AS)") {
  if (pvmm_test::sanitized) {
    MESSAGE("[pvmm-skip] a sanitizer's allocator stops the process when memory runs out");
    return;
  }
  const pid_t child = ::fork();
  if (child == 0) {
    constexpr std::size_t bytes = 512u << 20;
    void* mine = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void* all = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    auto g = pvmm::make_thread_bootstraps(1);
    if (mine == MAP_FAILED || all == MAP_FAILED || !g) ::_exit(2);
    std::ifstream status("/proc/self/status");
    std::string line;
    long kib = 0;
    while (std::getline(status, line))
      if (line.rfind("VmSize:", 0) == 0) kib = std::stol(line.substr(7));
    const rlimit limit{static_cast<rlim_t>(kib + 64 * 1024) * 1024, static_cast<rlim_t>(kib + 64 * 1024) * 1024};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(3);
    auto got = (*g)[0]->allgather(mine, bytes, all, pvmm::deadline_in(5s));
    ::_exit(got.code() == errc::out_of_memory ? 0 : 1);
  }
  int wstatus = 0;
  REQUIRE(::waitpid(child, &wstatus, 0) == child);
  CHECK_MESSAGE(WIFEXITED(wstatus), "the child died by signal " << WTERMSIG(wstatus));
  if (WIFEXITED(wstatus)) CHECK(WEXITSTATUS(wstatus) == 0);
}

TEST_CASE("endpoints: messages kept for later tags are bounded in count and overhead, not only payload bytes") {
  // Issue 48 item 6: 0-byte messages on distinct tags counted nothing, so a peer could grow the receiver without
  // bound. Rank 1 sends 0-byte messages on tags 1, 2, ...; rank 0 waits on tag 0 and keeps them, until the bound.
  auto g = make_group("endpoints", 2);
  pvmm::status received;
  const auto start = std::chrono::steady_clock::now();
  std::thread receiver([&] {
    char x = 0;
    received = g[0]->receive(1, 0, &x, 1, pvmm::deadline_in(20s));
  });
  int sent = 0;
  for (int tag = 1; tag <= 20000; ++tag, ++sent)
    if (!g[1]->send(0, tag, nullptr, 0, pvmm::deadline_in(20s))) break;
  receiver.join();
  CHECK_MESSAGE(received.code() == errc::protocol_error, text(received));
  CHECK_MESSAGE(names(received, "messages for tags not yet received"), text(received));
  CHECK(sent < 20000);
  CHECK(std::chrono::steady_clock::now() - start < 15s);
}
