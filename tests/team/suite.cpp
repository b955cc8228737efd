// The team cases under every adapter: threads (in this process, with the in-memory store too) and endpoints and
// store (exec'd rank processes). N = 1, 2, 4, 8; MPI runs the same cases under mpirun (tests/CMakeLists.txt).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <doctest/doctest.h>
#include <pvmm/device.hpp>
#include <pvmm/diagnostics.hpp>
#include <pvmm/team.hpp>

#include "cases.hpp"
#include "open_fds.hpp"
#include "thread_ranks.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using pvmm_team_test::case_params;

void run_threads(const case_params& p, std::vector<std::shared_ptr<pvmm::bootstrap>> ranks);

// The driver opens files the first time a process exports and imports memory (13 to 33 fds on CUDA 13.0) and keeps
// them: one 8-rank window first, once per process, so the baseline below holds only what a case leaves.
bool warm_up_once() {
  static const bool done = [] {
    pvmm_team_test::use_every_device_once();
    case_params p;
    p.name = "window";
    if (auto ranks = pvmm::make_thread_bootstraps(8)) run_threads(p, std::move(*ranks));
    return true;
  }();
  return done;
}

// Nothing a case leaves behind (pvmm_team_rules::leak_check), counted after the warm-up.
struct team_leak_check {
  bool warmed_up = warm_up_once();
  pvmm_team_rules::leak_check leaks;
};

bool applies(const std::string& name, int n) {
  if (name.rfind("killed-", 0) == 0) return n == 2 || n == 4;
  if (name == "fd-short") return n >= 2;
  if (name == "ring-aborted") return n == 2 || n == 4;
  if (name.rfind("mem-", 0) == 0) return n == 2 || n == 4;  // mem_cases.cpp: kept quick
  if (name.rfind("sig-", 0) == 0) return n == 2 || n == 4;  // signal_cases.cpp
  return n >= 2 || (name != "late" && name != "mismatch" && name != "version" && name != "aborted");
}

// Runs `p` on `ranks`, one thread each.
void run_threads(const case_params& p, std::vector<std::shared_ptr<pvmm::bootstrap>> ranks) {
  std::vector<pvmm_team_test::verdict> verdicts(ranks.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < ranks.size(); ++r)
    threads.emplace_back([&, r] { verdicts[r] = pvmm_team_test::run_case(p, ranks[r]); });
  for (auto& t : threads) t.join();
  for (const auto& v : verdicts) CHECK_MESSAGE(v.failures.empty(), v.text());
}

void threads_adapter(const case_params& p, int n, bool store) {
  std::vector<int> nodes;
  for (int r = 0; r < n && p.ranks_per_node > 0; ++r) nodes.push_back(r / p.ranks_per_node);
  if (!store) {
    auto ranks = pvmm::make_thread_bootstraps(n, nodes);
    REQUIRE(ranks);
    return run_threads(p, std::move(*ranks));
  }
  // The store adapter over an in-process store: ranks made concurrently (making one is collective).
  auto kv = pvmm::make_memory_store();
  std::vector<std::shared_ptr<pvmm::bootstrap>> ranks(n);
  std::vector<std::thread> makers;
  for (int r = 0; r < n; ++r)
    makers.emplace_back([&, r] {
      pvmm::bootstrap_options o;
      if (p.ranks_per_node > 0) o.node = r / p.ranks_per_node;
      if (auto b = pvmm::make_store_bootstrap(kv, "t", r, n, 20s, o)) ranks[r] = *b;
    });
  for (auto& t : makers) t.join();
  for (const auto& b : ranks) REQUIRE(b);
  run_threads(p, std::move(ranks));
}

// Runs `p` in n exec'd rank processes meeting at `meeting`; each must exit 0 within the limit.
void process_adapter(const std::string& adapter, const case_params& p, int n, const std::string& meeting) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> args{PVMM_TEAM_RANK,
                                  adapter,
                                  p.name,
                                  std::to_string(r),
                                  std::to_string(n),
                                  meeting,
                                  std::to_string(p.ranks_per_node)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    REQUIRE(::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
    pids.push_back(pid);
  }
  const auto limit = std::chrono::steady_clock::now() + 60s;
  for (std::size_t r = 0; r < pids.size(); ++r) {
    int status = 0;
    while (::waitpid(pids[r], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > limit) {  // never hang the suite: kill what is left
        for (pid_t q : pids) ::kill(q, SIGKILL);
        ::waitpid(pids[r], &status, 0);
        FAIL("rank " << r << " did not finish within 60 s");
      }
      std::this_thread::sleep_for(5ms);
    }
    if (static_cast<int>(r) == pvmm_team_test::dying_rank(p.name, n))
      CHECK_MESSAGE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL), "rank " << r << " was to die of SIGKILL");
    else
      CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), "rank " << r << " of " << n << " failed");
  }
}

std::string unique_name(const std::string& what) {
  static int serial = 0;
  return "pvmm-test-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
}

std::string scratch_directory() {
  std::string templ = (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + std::string("/pvmm-store-XXXXXX");
  REQUIRE(::mkdtemp(templ.data()) != nullptr);
  return templ;
}

void for_each_size(const std::string& adapter_name, const std::string& name, int ranks_per_node,
                   const std::function<void(const case_params&, int)>& run) {
  if (const auto why = pvmm_team_test::no_device_reason(); !why.empty()) {
    std::printf("[pvmm-skip] %s\n", why.c_str());
    std::fflush(stdout);
    return;
  }
  for (int n : {1, 2, 4, 8}) {
    if (!applies(name, n)) continue;
    case_params p;
    p.name = name;
    // A GPU backend spends about 2 s a cycle on the ranks' exports, imports and maps (the four sizes took 190 s on an
    // H200): 12 cycles there still show a 2 MiB-a-cycle leak past the 16 MiB slack, and fds and live objects are
    // counted exactly; the host backend's cycles are cheap and keep their count.
    const bool host = pvmm::query_backend().name == "host";
    p.cycles = host ? (n <= 4 ? 100 : 25) : (n <= 4 ? 12 : 6);
    p.ranks_per_node = ranks_per_node;
    CAPTURE(adapter_name);
    CAPTURE(name);
    CAPTURE(n);
    team_leak_check leaks;
    run(p, n);
  }
}

void endpoint_processes(const case_params& p, int n) { process_adapter("endpoints", p, n, unique_name("endpoint")); }

void directory_store_processes(const case_params& p, int n) {
  const auto dir = scratch_directory();
  process_adapter("store", p, n, dir);
  std::error_code ignored;  // a leftover scratch directory is not the case's failure
  std::filesystem::remove_all(dir, ignored);
}

void killed_at_each_step(const std::string& adapter, void (*run)(const case_params&, int)) {
  for (int step = 0; step <= pvmm_team_test::last_kill_step; ++step)
    for_each_size(adapter, "killed-" + std::to_string(step), 0, run);
}

}  // namespace

// One case of the lists below: the case `name` on every size for_each_size runs, under `adapter` (threads,
// stores, endpoints) run by `body`.
#define PVMM_TEAM_CASE(adapter, title, name, extra, body) \
  TEST_CASE(adapter ": " title) { for_each_size(adapter, name, extra, body); }

#define PVMM_TEAM_CASES(adapter, body)                                                                                 \
  PVMM_TEAM_CASE(adapter, "every rank maps every peer's slot, data read back two ways", "window", 0, body)             \
  PVMM_TEAM_CASE(adapter, "per-rank sizes", "sizes", 0, body)                                                          \
  PVMM_TEAM_CASE(adapter, "a window grows collectively", "grow", 0, body)                                              \
  PVMM_TEAM_CASE(adapter, "a rank that never arrives is named by every other within the deadline", "late", 0, body)    \
  PVMM_TEAM_CASE(adapter, "mismatched window options are team_mismatch on every rank", "mismatch", 0, body)            \
  PVMM_TEAM_CASE(adapter, "a rank speaking another team protocol is team_mismatch on every rank", "version", 0, body)  \
  PVMM_TEAM_CASE(adapter, "create/destroy cycles leave fds and live objects unchanged", "cycles", 0, body)             \
  PVMM_TEAM_CASE(adapter, "simulated nodes: cross-node peers take the fabric path or are reported per peer", "nodes",  \
                 2, body)                                                                                              \
  PVMM_TEAM_CASE(adapter, "multicast over a team, or not_supported on every rank naming who lacks it", "multicast", 0, \
                 body)                                                                                                 \
  PVMM_TEAM_CASE(adapter, "team::abort unmaps the peers' slots at once, and every peer hears peer_lost", "aborted", 0, \
                 body)

// Issue 35's memory cases (mem_cases.cpp).
#define PVMM_TEAM_MEM_CASES(adapter, body)                                                                            \
  PVMM_TEAM_CASE(adapter, "create_from maps the caller's memory (an allocation, a growable buffer) for every peer",   \
                 "mem-from", 0, body)                                                                                 \
  PVMM_TEAM_CASE(adapter, "create_from with memory one rank cannot share fails on every rank naming it",              \
                 "mem-from-refused", 0, body)                                                                         \
  PVMM_TEAM_CASE(adapter, "a symmetric heap: same offsets, reuse, growth, mismatch on every rank", "mem-heap", 0,     \
                 body)                                                                                                \
  PVMM_TEAM_CASE(adapter, "team::split into odd and even ranks, windows and a heap on the sub-teams", "mem-split", 0, \
                 body)                                                                                                \
  PVMM_TEAM_CASE(adapter, "a sub-team whose rank 0 gives up: its members return within their deadline",               \
                 "mem-split-lost", 0, body)                                                                           \
  PVMM_TEAM_CASE(adapter, "a rank gone before a split: every other returns within its deadline naming it",            \
                 "mem-split-dead", 0, body)

#define PVMM_TEAM_SIGNAL_CASES(adapter, body)                                                                        \
  PVMM_TEAM_CASE(adapter, "put/wait-signal order data across ranks, and barriers, on a stream", "sig-data", 0, body) \
  PVMM_TEAM_CASE(adapter, "a silent rank's waiters time out naming it, and a late signal never ends a later wait",   \
                 "sig-silent", 0, body)                                                                              \
  PVMM_TEAM_CASE(adapter, "a rank absent from a barrier: every other returns within its bound naming it",            \
                 "sig-absent", 0, body)                                                                              \
  PVMM_TEAM_CASE(adapter, "signal calls refuse bad peers, channels, timeouts and streams, and channels must agree",  \
                 "sig-bad", 0, body)                                                                                 \
  PVMM_TEAM_CASE(adapter, "a barrier no other rank joins ends at its one deadline, not one per silent peer",         \
                 "sig-deadline", 0, body)                                                                            \
  PVMM_TEAM_CASE(adapter, "a peer forging every word of a rank's pad changes no pointer, count or error it reads",   \
                 "sig-forger", 0, body)                                                                              \
  PVMM_TEAM_CASE(adapter, "clear_signal_status reads and clears the error record, and later barriers report afresh", \
                 "sig-clear", 0, body)

// The driver path (window_options::stream_signals = driver): the shared signal cases on it, and its own.
#define PVMM_TEAM_DRIVER_CASES(adapter, body)                                                                          \
  PVMM_TEAM_CASE(adapter, "driver path: put/wait-signal order data across ranks, and barriers", "sig-data:driver", 0,  \
                 body)                                                                                                 \
  PVMM_TEAM_CASE(adapter, "driver path: a silent rank's waiters time out naming it, a late signal ends no later wait", \
                 "sig-silent:driver", 0, body)                                                                         \
  PVMM_TEAM_CASE(adapter, "driver path: a barrier no other rank joins ends at its one deadline",                       \
                 "sig-deadline:driver", 0, body)                                                                       \
  PVMM_TEAM_CASE(adapter, "driver path: a peer forging every word of a rank's pad changes nothing it reads",           \
                 "sig-forger:driver", 0, body)                                                                         \
  PVMM_TEAM_CASE(adapter, "driver path: clear_signal_status, and later barriers report afresh", "sig-clear:driver", 0, \
                 body)                                                                                                 \
  PVMM_TEAM_CASE(adapter, "the signal path is agreed: a rank asking another is team_mismatch on every rank",           \
                 "sig-path-mismatch", 0, body)                                                                         \
  PVMM_TEAM_CASE(adapter, "driver path: team::abort releases a wait at once, peer_lost naming the aborting rank",      \
                 "sig-path-abort", 0, body)                                                                            \
  PVMM_TEAM_CASE(adapter, "driver path: a forged count behind in wrap-safe order holds no wait past its deadline",     \
                 "sig-path-forged", 0, body)

TEST_SUITE("team") {
  PVMM_TEAM_DRIVER_CASES("threads", [](const case_params& p, int n) { threads_adapter(p, n, false); })
  PVMM_TEAM_DRIVER_CASES("endpoints", endpoint_processes)
  TEST_CASE("endpoints: driver path: a rank killed while the others wait at a barrier: each returns naming it") {
    for_each_size("endpoints", "sig-killed:driver", 0, endpoint_processes);
  }
  TEST_CASE("endpoints: driver path: team::abort and release while a barrier is queued: nothing faults") {
    for_each_size("endpoints", "sig-abort-queued:driver", 0, endpoint_processes);
  }
  PVMM_TEAM_SIGNAL_CASES("threads", [](const case_params& p, int n) { threads_adapter(p, n, false); })
  PVMM_TEAM_SIGNAL_CASES("store (in-process)", [](const case_params& p, int n) { threads_adapter(p, n, true); })
  PVMM_TEAM_SIGNAL_CASES("endpoints", endpoint_processes)
  PVMM_TEAM_SIGNAL_CASES("store (directory)", directory_store_processes)
  PVMM_TEAM_CASES("threads", [](const case_params& p, int n) { threads_adapter(p, n, false); })
  PVMM_TEAM_CASES("store (in-process)", [](const case_params& p, int n) { threads_adapter(p, n, true); })
  PVMM_TEAM_CASES("endpoints", endpoint_processes)
  PVMM_TEAM_CASES("store (directory)", directory_store_processes)
  PVMM_TEAM_MEM_CASES("threads", [](const case_params& p, int n) { threads_adapter(p, n, false); })
  PVMM_TEAM_MEM_CASES("store (in-process)", [](const case_params& p, int n) { threads_adapter(p, n, true); })
  PVMM_TEAM_MEM_CASES("endpoints", endpoint_processes)
  PVMM_TEAM_MEM_CASES("store (directory)", directory_store_processes)
  TEST_CASE("endpoints: a rank killed at each team step: every survivor returns within its deadline naming it") {
    killed_at_each_step("endpoints", endpoint_processes);
  }
  TEST_CASE("endpoints: a rank killed while the others wait at a stream-ordered barrier: each returns naming it") {
    for_each_size("endpoints", "sig-killed", 0, endpoint_processes);
  }
  TEST_CASE("endpoints: team::abort and release while a barrier is queued: the queued work holds what it touches") {
    for_each_size("endpoints", "sig-abort-queued", 0, endpoint_processes);
  }
  TEST_CASE("store (directory): a rank killed while the others wait at a stream-ordered barrier: each names it") {
    for_each_size("store (directory)", "sig-killed", 0, directory_store_processes);
  }
  TEST_CASE("endpoints: a rank whose reservation fails in create or create_from: every rank fails naming it") {
    for_each_size("endpoints", "mem-reserve-refused", 0, endpoint_processes);
  }
  TEST_CASE("endpoints: a rank out of fds at window create: every rank fails at once naming it") {
    for_each_size("endpoints", "fd-short", 0, endpoint_processes);
  }
  TEST_CASE("threads: team::abort reaches a peer waiting in the fd ring at once (peer_lost naming the rank)") {
    for_each_size("threads", "ring-aborted", 0, [](const case_params& p, int n) { threads_adapter(p, n, false); });
  }
  TEST_CASE("endpoints: team::abort reaches a peer waiting in the fd ring at once (peer_lost naming the rank)") {
    for_each_size("endpoints", "ring-aborted", 0, endpoint_processes);
  }
  TEST_CASE("store (directory): a rank killed at each team step: every survivor returns within its deadline") {
    killed_at_each_step("store (directory)", directory_store_processes);
  }
}

TEST_CASE("team::abort from another thread ends the step in progress with peer_lost, and the peers' steps too") {
  if (pvmm_team_rules::skip()) return;
  team_leak_check leaks;
  auto teams = pvmm_team_rules::thread_team_of_two();
  pvmm::window_options o;
  o.size = 2u << 20;
  o.timeout = 10s;
  // Rank 0 starts a window alone (rank 1 is not there yet) and waits; another thread aborts its team.
  std::thread aborter([&] {
    std::this_thread::sleep_for(200ms);
    teams[0].abort();
  });
  auto start = std::chrono::steady_clock::now();
  auto w0 = pvmm::symmetric_window::create(teams[0], o);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  aborter.join();
  REQUIRE_FALSE(w0);
  CHECK(w0.code() == pvmm::errc::peer_lost);
  // Rank 1 arrives late: it fails at once, naming the rank that aborted.
  start = std::chrono::steady_clock::now();
  auto w1 = pvmm::symmetric_window::create(teams[1], o);
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  REQUIRE_FALSE(w1);
  CHECK(w1.code() == pvmm::errc::peer_lost);
  CHECK_MESSAGE(w1.error().message().find("rank 0") != std::string::npos, w1.error().message());
  // Later steps on the aborted team fail at once; releasing still works.
  CHECK(pvmm::symmetric_window::create(teams[0], o).code() == pvmm::errc::peer_lost);
  CHECK(teams[0].release().has_value());
  CHECK(teams[1].release().has_value());
}
