// The bootstrap contract (pvmm/bootstrap.hpp), one body per adapter: threads, endpoints (ranks as threads of this
// process), the in-process store, and an adapter written here the way a user would (as MSCCL++'s bootstrap_tests
// runs one body per adapter). Then what only some adapters have: strangers at the endpoints root, bounds on ranks
// and deadlines, memory running out.
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

#include "sanitized.hpp"

using namespace std::chrono_literals;
using pvmm::errc;
using group = std::vector<std::shared_ptr<pvmm::bootstrap>>;

namespace {

// An adapter as a user writes one: over a key-value store, with the base's standard texts.
class user_bootstrap final : public pvmm::bootstrap {
 public:
  user_bootstrap(pvmm::key_value_store s, int rank, int size) : s_(std::move(s)), rank_(rank), size_(size) {}
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  int node() const noexcept override { return 0; }
  int local_rank() const noexcept override { return rank_; }
  int local_size() const noexcept override { return size_; }

 private:
  pvmm::status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t id,
                            pvmm::deadline until) override {
    const auto* in = static_cast<const std::uint8_t*>(mine);
    if (auto ok = s_.set("c/" + std::to_string(id) + "/" + std::to_string(rank_), {in, in + bytes}); !ok) return ok;
    for (int r = 0; r < size_; ++r) {
      auto v = wait("c/" + std::to_string(id) + "/" + std::to_string(r), until);
      if (!v && v.code() == errc::timeout) return did_not_arrive({r}, id);
      if (!v) return std::move(v).error();
      if (v->size() != bytes) return gave_bytes(r, v->size(), id, rank_, bytes);
      if (bytes > 0) std::memcpy(static_cast<std::uint8_t*>(all) + r * bytes, v->data(), bytes);
    }
    return aborted();
  }
  pvmm::status do_send(int peer, int tag, const void* data, std::size_t bytes, pvmm::deadline) override {
    const auto* in = static_cast<const std::uint8_t*>(data);
    return s_.set(p2p(rank_, peer, tag, sent_[{peer, tag}]++), {in, in + bytes});
  }
  pvmm::status do_receive(int peer, int tag, void* data, std::size_t bytes, pvmm::deadline until) override {
    auto v = wait(p2p(peer, rank_, tag, received_[{peer, tag}]), until);
    if (!v) return std::move(v).error();
    if (v->size() != bytes) {
      pvmm::error e;
      e.code = errc::team_mismatch;
      e.detail = "rank " + std::to_string(peer) + " sent " + std::to_string(v->size()) + " bytes";
      return e;
    }
    ++received_[{peer, tag}];
    if (bytes > 0) std::memcpy(data, v->data(), bytes);
    return {};
  }
  void do_abort() noexcept override {
    try {
      (void)s_.set("abort", {static_cast<std::uint8_t>(rank_)});
    } catch (...) {
    }
  }
  pvmm::status aborted() {
    if (auto a = s_.get("abort", std::chrono::steady_clock::now()); a && a->size() == 1) return aborted_by((*a)[0]);
    return {};
  }
  pvmm::result<std::vector<std::uint8_t>> wait(const std::string& key, pvmm::deadline until) {
    for (;;) {
      auto slice = std::min(until, pvmm::deadline_in(20ms));
      auto v = s_.get(key, slice);
      if (v || v.code() != errc::timeout || slice == until) return v;
      if (auto a = aborted(); !a) return std::move(a).error();
    }
  }
  static std::string p2p(int from, int to, int tag, std::uint64_t n) {
    return "p/" + std::to_string(from) + "/" + std::to_string(to) + "/" + std::to_string(tag) + "/" + std::to_string(n);
  }
  pvmm::key_value_store s_;
  int rank_, size_;
  std::map<std::pair<int, int>, std::uint64_t> sent_, received_;
};

const char* const adapters[] = {"threads", "endpoints", "store", "user"};

std::string unique_name(const std::string& what) {
  static std::atomic<int> n{0};
  return "pvmm-bootstrap-test-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

// Runs f(rank) on one thread per rank.
void on_every_rank(int n, const std::function<void(int)>& f) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(f, r);
  for (auto& t : threads) t.join();
}

// A group of `n` ranks; endpoints meet at `name` (a fresh one when empty); the stores are fresh (keys are never
// reused).
group make_group(const std::string& adapter, int n, std::string name = {}) {
  if (adapter == "threads") return pvmm::make_thread_bootstraps(n).value();
  group g(n);
  std::mutex m;
  if (name.empty()) name = unique_name("group");
  auto store = pvmm::make_memory_store();
  on_every_rank(n, [&](int r) {
    std::shared_ptr<pvmm::bootstrap> b;
    if (adapter == "endpoints") b = pvmm::make_endpoint_bootstrap(name, r, n, 10s).value();
    if (adapter == "store") b = pvmm::make_store_bootstrap(store, name, r, n, 10s).value();
    if (adapter == "user") b = std::make_shared<user_bootstrap>(store, r, n);
    std::lock_guard<std::mutex> lock(m);
    g[r] = b;
  });
  return g;
}

std::string text(const pvmm::status& s) { return s ? "success" : s.error().message(); }
bool names(const pvmm::status& s, const std::string& what) {
  return !s && s.error().message().find(what) != std::string::npos;
}

// Ranks 0 .. count - 1 failed with `code`, naming `named`; each within 3 s where `took` is given.
void expect_failed(const std::vector<pvmm::status>& got, int count, errc code, const std::string& named,
                   const std::vector<std::chrono::steady_clock::duration>& took = {}) {
  for (int r = 0; r < count; ++r) {
    CAPTURE(r);
    CHECK_MESSAGE(got[r].code() == code, text(got[r]));
    CHECK_MESSAGE(names(got[r], named), text(got[r]));
    if (!took.empty()) CHECK(took[r] < 3s);
  }
}

}  // namespace

TEST_CASE("contract: allgather delivers in rank order, for odd sizes") {
  for (const char* a : adapters) {
    CAPTURE(a);
    auto g = make_group(a, 3);
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{40001}}) {
      CAPTURE(bytes);
      std::vector<std::string> bad(3);
      on_every_rank(3, [&](int r) {
        std::vector<std::uint8_t> mine(bytes), all(3 * bytes + 1, 0xee);
        for (std::size_t i = 0; i < bytes; ++i) mine[i] = static_cast<std::uint8_t>(r * 31 + i);
        auto ok = g[r]->allgather(mine.data(), bytes, all.data(), pvmm::deadline_in(10s));
        if (!ok) bad[r] = text(ok);
        for (std::size_t q = 0; q < 3 && ok; ++q)
          for (std::size_t i = 0; i < bytes; ++i)
            if (all[q * bytes + i] != static_cast<std::uint8_t>(q * 31 + i)) bad[r] = "wrong byte";
        if (all[3 * bytes] != 0xee) bad[r] = "wrote past the end";
      });
      for (auto& b : bad) CHECK_MESSAGE(b.empty(), b);
    }
  }
}

TEST_CASE("contract: barrier returns only once every rank arrived") {
  for (const char* a : adapters) {
    CAPTURE(a);
    auto g = make_group(a, 3);
    std::vector<std::chrono::steady_clock::duration> took(3);
    std::vector<std::string> bad(3);
    on_every_rank(3, [&](int r) {
      const auto start = std::chrono::steady_clock::now();
      if (r == 2) std::this_thread::sleep_for(300ms);
      auto ok = g[r]->barrier(pvmm::deadline_in(10s));
      took[r] = std::chrono::steady_clock::now() - start;
      if (!ok) bad[r] = text(ok);
    });
    for (int r = 0; r < 3; ++r) {
      CHECK_MESSAGE(bad[r].empty(), bad[r]);
      CHECK(took[r] >= 280ms);
    }
  }
}

TEST_CASE("contract: mismatched sizes are team_mismatch naming the rank, and the bootstrap stays broken") {
  for (const char* a : adapters) {
    CAPTURE(a);
    auto g = make_group(a, 3);
    std::vector<pvmm::status> first(3), later(3);
    on_every_rank(3, [&](int r) {
      const std::size_t bytes = r == 1 ? 5 : 4;
      std::vector<std::uint8_t> mine(bytes), all(3 * bytes);
      first[r] = g[r]->allgather(mine.data(), bytes, all.data(), pvmm::deadline_in(10s));
      later[r] = g[r]->barrier(pvmm::deadline_in(10s));
    });
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK_MESSAGE(first[r].code() == errc::team_mismatch, text(first[r]));
      CHECK_MESSAGE(names(first[r], "rank 1 gave 5"), text(first[r]));
      CHECK_MESSAGE(later[r].code() == first[r].code(), text(later[r]));
    }
  }
}

TEST_CASE("contract: a missing rank is timeout naming it, within the deadline") {
  for (const char* a : adapters) {
    CAPTURE(a);
    auto g = make_group(a, 3);
    std::vector<pvmm::status> got(3);
    std::vector<std::chrono::steady_clock::duration> took(3);
    on_every_rank(2, [&](int r) {
      const auto start = std::chrono::steady_clock::now();
      got[r] = g[r]->barrier(pvmm::deadline_in(500ms));
      took[r] = std::chrono::steady_clock::now() - start;
    });
    expect_failed(got, 2, errc::timeout, "rank 2", took);
  }
}

TEST_CASE("contract: an abort is peer_lost naming the aborting rank on every waiting rank, within a slice") {
  for (const char* a : adapters) {
    CAPTURE(a);
    auto g = make_group(a, 3);
    std::vector<pvmm::status> got(3);
    std::vector<std::chrono::steady_clock::duration> took(3);
    on_every_rank(3, [&](int r) {
      const auto start = std::chrono::steady_clock::now();
      if (r == 1) {
        std::this_thread::sleep_for(200ms);
        g[r]->abort();
        got[r] = g[r]->barrier(pvmm::deadline_in(20s));
      } else {
        got[r] = g[r]->barrier(pvmm::deadline_in(20s));
      }
      took[r] = std::chrono::steady_clock::now() - start;
    });
    expect_failed(got, 3, errc::peer_lost, "rank 1 aborted", took);
  }
}

TEST_CASE("contract: a rank that aborts inside a collective fails it on every rank") {
  for (const char* a : adapters) {
    CAPTURE(a);
    auto g = make_group(a, 2);
    std::vector<pvmm::status> got(2);
    on_every_rank(2, [&](int r) {
      if (r == 1) {
        std::thread aborter([&] {
          std::this_thread::sleep_for(100ms);
          g[1]->abort();
        });
        got[r] = g[r]->barrier(pvmm::deadline_in(20s));
        aborter.join();
      } else {
        std::this_thread::sleep_for(400ms);  // arrives after rank 1 gave up
        got[r] = g[r]->barrier(pvmm::deadline_in(20s));
      }
    });
    expect_failed(got, 2, errc::peer_lost, "rank 1 aborted");
  }
}

TEST_CASE("contract: an abort reaches the ranks waiting in receive, within a slice") {
  for (const char* a : adapters) {
    CAPTURE(a);
    auto g = make_group(a, 3);
    std::vector<pvmm::status> got(3);
    std::vector<std::chrono::steady_clock::duration> took(3);
    on_every_rank(3, [&](int r) {
      const auto start = std::chrono::steady_clock::now();
      char x = 0;
      if (r == 2) {
        std::this_thread::sleep_for(300ms);
        g[2]->abort();
      } else {
        got[r] = g[r]->receive(1 - r, 0, &x, 1, pvmm::deadline_in(20s));  // 0 and 1 wait for each other
      }
      took[r] = std::chrono::steady_clock::now() - start;
    });
    expect_failed(got, 2, errc::peer_lost, "rank 2 aborted", took);
  }
}

TEST_CASE("contract: an abort from another thread ends this rank's receive at once, before any message came") {
  // Rank 0 waits for a message rank 1 never sends; another thread of rank 0 aborts. On endpoints the receive waited
  // for rank 1's first point-to-point connection on a listener abort() did not wake: the whole deadline.
  for (const char* a : adapters) {
    CAPTURE(a);
    auto g = make_group(a, 2);
    std::uint32_t value = 0;
    const auto start = std::chrono::steady_clock::now();
    std::thread aborter([&] {
      std::this_thread::sleep_for(200ms);
      g[0]->abort();
    });
    auto got = g[0]->receive(1, 7, &value, sizeof value, pvmm::deadline_in(20s));
    aborter.join();
    CHECK_MESSAGE(got.code() == errc::peer_lost, text(got));
    CHECK_MESSAGE(names(got, "rank 0 aborted"), text(got));
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    g[1]->abort();
  }
}

TEST_CASE("contract: a group can be made again, and runs many rounds") {
  for (const char* a : adapters) {
    CAPTURE(a);
    const std::string name = unique_name("again");  // the same endpoint name both times
    for (int again = 0; again < 2; ++again) {
      auto g = make_group(a, 3, name);
      std::vector<std::string> bad(3);
      on_every_rank(3, [&](int r) {
        for (std::uint64_t round = 0; round < 200 && bad[r].empty(); ++round) {
          const std::uint64_t mine = round * 1000 + static_cast<std::uint64_t>(r);
          std::uint64_t all[3] = {};
          auto ok = round % 3 == 2 ? g[r]->barrier(pvmm::deadline_in(10s))
                                   : g[r]->allgather(&mine, sizeof mine, all, pvmm::deadline_in(10s));
          if (!ok) bad[r] = text(ok);
          for (std::uint64_t q = 0; q < 3 && ok && round % 3 != 2; ++q)
            if (all[q] != round * 1000 + q) bad[r] = "round " + std::to_string(round) + " is wrong";
        }
      });
      for (auto& b : bad) CHECK_MESSAGE(b.empty(), b);
    }
  }
}

TEST_CASE("contract: two ranks each send 8 MiB to the other, then receive: no deadlock, the bytes arrive") {
  // On endpoints a send larger than the socket buffer waited for the peer to read, and the peer was sending too:
  // both waited out the deadline.
  constexpr std::size_t words = (8u << 20) / sizeof(std::uint32_t);
  for (const char* a : adapters) {
    CAPTURE(a);
    auto g = make_group(a, 2);
    std::vector<std::string> bad(2);
    const auto start = std::chrono::steady_clock::now();
    on_every_rank(2, [&](int r) {
      std::vector<std::uint32_t> out(words), in(words);
      for (std::size_t i = 0; i < words; ++i) out[i] = static_cast<std::uint32_t>(i * 2 + static_cast<unsigned>(r));
      auto sent = g[r]->send(1 - r, 3, out.data(), out.size() * sizeof out[0], pvmm::deadline_in(20s));
      if (!sent) return void(bad[r] = "send: " + text(sent));
      auto got = g[r]->receive(1 - r, 3, in.data(), in.size() * sizeof in[0], pvmm::deadline_in(20s));
      if (!got) return void(bad[r] = "receive: " + text(got));
      for (std::size_t i = 0; i < words; ++i)
        if (in[i] != static_cast<std::uint32_t>(i * 2 + static_cast<unsigned>(1 - r)))
          return void(bad[r] = "word " + std::to_string(i) + " is wrong");
    });
    for (auto& b : bad) CHECK_MESSAGE(b.empty(), b);
    CHECK(std::chrono::steady_clock::now() - start < 10s);
  }
}

TEST_CASE("contract: send and receive match tags, keep other tags for later, and check sizes") {
  for (const char* a : adapters) {
    CAPTURE(a);
    auto g = make_group(a, 3);
    std::vector<std::string> bad(3);
    const std::vector<std::uint8_t> big(100000, 0x5a);
    on_every_rank(3, [&](int r) {
      const auto until = pvmm::deadline_in(10s);
      auto need = [&](const pvmm::status& s) {
        if (!s && bad[r].empty()) bad[r] = text(s);
      };
      if (r == 0) {
        need(g[0]->send(1, 5, "a12", 3, until));
        need(g[0]->send(1, 7, "bb", 2, until));
        need(g[0]->send(1, 5, "c", 1, until));
      }
      if (r == 2) {
        need(g[2]->send(1, 0, big.data(), big.size(), until));
        char x[2] = {};
        need(g[2]->receive(1, 1, x, 2, until));
        if (std::string(x, 2) != "hi") bad[2] = "rank 2 got the wrong bytes from rank 1";
      }
      if (r == 1) {
        char bb[2] = {}, a3[3] = {}, c[1] = {};
        need(g[1]->receive(0, 7, bb, 2, until));
        need(g[1]->receive(0, 5, a3, 3, until));
        need(g[1]->receive(0, 5, c, 1, until));
        if (std::string(bb, 2) != "bb" || std::string(a3, 3) != "a12" || c[0] != 'c') bad[1] = "tags mixed up";
        std::vector<std::uint8_t> got(big.size());
        need(g[1]->receive(2, 0, got.data(), got.size(), until));
        if (got != big) bad[1] = "the big message is wrong";
        need(g[1]->send(2, 1, "hi", 2, until));
      }
    });
    for (auto& b : bad) CHECK_MESSAGE(b.empty(), b);
    // A receive of the wrong size is team_mismatch naming the sender.
    pvmm::status wrong;
    on_every_rank(2, [&](int r) {
      char x[8] = {};
      if (r == 0) (void)g[0]->send(1, 3, x, 4, pvmm::deadline_in(10s));
      if (r == 1) wrong = g[1]->receive(0, 3, x, 8, pvmm::deadline_in(10s));
    });
    CHECK_MESSAGE(wrong.code() == errc::team_mismatch, text(wrong));
    CHECK_MESSAGE(names(wrong, "rank 0 sent 4 bytes"), text(wrong));
    char x = 0;
    CHECK(g[1]->send(1, 0, &x, 1, pvmm::deadline_in(1s)).code() != errc{});
    CHECK(g[2]->send(0, -1, &x, 1, pvmm::deadline_in(1s)).code() == errc::invalid_argument);
    CHECK(g[2]->send(7, 0, &x, 1, pvmm::deadline_in(1s)).code() == errc::invalid_argument);
  }
}

TEST_CASE("deadline_in saturates: wait_forever, 300 years and milliseconds::max never wait out") {
  const auto now = std::chrono::steady_clock::now();
  CHECK(pvmm::deadline_in(pvmm::ipc::wait_forever) == pvmm::deadline::max());
  CHECK(pvmm::deadline_in(std::chrono::milliseconds::max()) == pvmm::deadline::max());
  const auto years300 = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::hours(24 * 365 * 300));
  CHECK(pvmm::deadline_in(years300) > now + std::chrono::hours(24 * 365 * 200));
  const auto negative = pvmm::deadline_in(-5ms);
  CHECK(negative <= std::chrono::steady_clock::now());
  // A collective bounded by such a deadline waits, not fails at once: the missing rank is seen by its abort.
  auto g = pvmm::make_thread_bootstraps(2).value();
  pvmm::status got;
  std::thread waiter([&] { got = g[0]->barrier(pvmm::deadline_in(years300)); });
  std::this_thread::sleep_for(100ms);
  g[1]->abort();
  waiter.join();
  CHECK_MESSAGE(got.code() == errc::peer_lost, text(got));
}

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
