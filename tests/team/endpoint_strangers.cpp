// The team's endpoints against strangers, ranks in different pid namespaces, and one device shared by processes
// (issue 34: items 5, 6, 10, 14, 17). The suite, or one rank of the processes it starts:
//   pvmm_team_endpoints --rank <meeting endpoint> <rank> <size> <pause before the window, ms>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <pvmm/diagnostics.hpp>
#include <pvmm/team.hpp>

#include "cases.hpp"
#include "open_fds.hpp"
#include "strangers.hpp"
#include "thread_ranks.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using namespace stranger_test;

// One rank's team and window: every member on this node shares its device (one device here), the window forms
// within its timeout and maps every peer. What failed, one line each (empty: passed).
std::string team_and_window(const std::shared_ptr<pvmm::bootstrap>& b, std::chrono::milliseconds timeout,
                            std::chrono::milliseconds pause = {}) {
  const std::string me = "rank " + std::to_string(b->rank()) + ": ";
  auto t = pvmm::team::create(b);
  if (!t) return me + "team: " + t.error().message() + "\n";
  std::this_thread::sleep_for(pause);  // strangers connect meanwhile
  std::string failures;
  for (const auto& m : t->members())
    if (!m.same_device)
      failures += me + "rank " + std::to_string(m.rank) + " (pid " + std::to_string(m.pid) +
                  ") on this node and device is not same_device\n";
  pvmm::window_options o;
  o.size = 2u << 20;
  o.timeout = timeout;
  auto w = pvmm::symmetric_window::create(*t, o);
  if (!w) return failures + me + "window: " + w.error().message() + "\n";
  for (int r = 0; r < w->size(); ++r)
    if (!w->mapped(r)) failures += me + "rank " + std::to_string(r) + " unmapped: " + w->unmapped_reason(r) + "\n";
  return failures;
}

int rank_process(const std::string& meeting, int rank, int size, std::chrono::milliseconds pause) {
  auto b = pvmm::make_endpoint_bootstrap(meeting, rank, size, 20s);
  if (!b) {
    std::fprintf(stderr, "rank %d: bootstrap: %s\n", rank, b.error().message().c_str());
    return 1;
  }
  const std::string failures = team_and_window(*b, 10s, pause);
  std::fprintf(stderr, "%s", failures.c_str());
  b->reset();
  return failures.empty() ? 0 : 1;
}

using pvmm_team_rules::leak_check;

using pvmm_team_rules::skip;

std::string unique_name(const std::string& what) {
  static int serial = 0;
  return "pvmm-test-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
}

using pvmm_team_rules::thread_team_of_two;

// Two thread ranks make a team; a stranger of `kind` connects to each rank's endpoint first; then the window.
void window_with_strangers(stranger kind) {
  leak_check leaks;
  auto teams = thread_team_of_two();
  std::vector<std::thread> threads;
  const auto names = team_endpoints_of();
  REQUIRE(names.size() == 2);
  std::vector<pid_t> strangers;
  for (const auto& name : names) strangers.push_back(start_stranger(name.first, kind));
  for (pid_t s : strangers) REQUIRE(s > 0);
  std::vector<std::string> outcome(2);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      pvmm::window_options o;
      o.size = 2u << 20;
      o.timeout = 5s;  // a silent stranger served until the deadline shows as a timeout
      auto w = pvmm::symmetric_window::create(teams[r], o);
      if (!w)
        outcome[r] = w.error().message();
      else if (!w->mapped(1 - r))
        outcome[r] = "peer unmapped: " + w->unmapped_reason(1 - r);
    });
  for (auto& t : threads) t.join();
  const auto took = std::chrono::steady_clock::now() - start;
  for (pid_t s : strangers) stop(s);
  for (int r = 0; r < 2; ++r) CHECK_MESSAGE(outcome[r].empty(), "rank " << r << ": " << outcome[r]);
  CHECK_MESSAGE(took < 3s,
                "the window took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
  for (auto& t : teams) CHECK(t.release().has_value());
}

// Two thread ranks make a team, then a same-user process takes rank 1's endpoint name (its listener closed under
// it, as when a rank's process is gone and another took the name): rank 0 sends it nothing and fails naming rank 1.
void window_with_squatter() {
  leak_check leaks;
  auto teams = thread_team_of_two();
  std::vector<std::thread> threads;
  const auto names = team_endpoints_of();
  REQUIRE(names.size() == 2);
  const auto& [name, listener_fd] = *names.rbegin();  // rank 1's
  // Its listener goes (the fd number stays the team's, now a socket that listens on nothing): the name is free.
  const int unbound = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  REQUIRE(unbound >= 0);
  REQUIRE(::dup2(unbound, listener_fd) == listener_fd);
  ::close(unbound);
  const abstract_address at(name);
  int report[2];
  REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  const pid_t squatter = ::fork();
  REQUIRE(squatter >= 0);
  if (squatter == 0) {  // listens on the name; reports the bytes the first connection brought (-1: it failed)
    ::close(report[0]);
    long got = -1;
    const int s = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (s >= 0 && ::bind(s, at.get(), at.length) == 0 && ::listen(s, 8) == 0 &&
        ::write(report[1], &got, sizeof got) == sizeof got) {
      const int c = ::accept(s, nullptr, nullptr);
      char buffer[4096];
      pollfd p{c, POLLIN, 0};
      got = c >= 0 && ::poll(&p, 1, 3000) == 1 ? static_cast<long>(::recv(c, buffer, sizeof buffer, 0)) : -1;
    }
    if (::write(report[1], &got, sizeof got) != sizeof got) ::_exit(2);
    for (;;) ::pause();
  }
  ::close(report[1]);
  long listening = 0, got = -1;
  REQUIRE(::read(report[0], &listening, sizeof listening) == sizeof listening);
  std::vector<pvmm::error> errors(2);
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      pvmm::window_options o;
      o.size = 2u << 20;
      o.timeout = 3s;
      if (auto w = pvmm::symmetric_window::create(teams[r], o); !w) errors[r] = w.error();
    });
  for (auto& t : threads) t.join();
  pollfd p{report[0], POLLIN, 0};
  const bool told = ::poll(&p, 1, 5000) == 1 && ::read(report[0], &got, sizeof got) == sizeof got;
  ::close(report[0]);
  stop(squatter);
  CHECK_MESSAGE((told && got <= 0), "the process on rank 1's endpoint name received " << got << " bytes");
  CHECK_MESSAGE(errors[0].code == pvmm::errc::peer_rejected, errors[0].message());
  CHECK_MESSAGE(errors[0].message().find("rank 1 (pid " + std::to_string(::getpid()) + ")") != std::string::npos,
                errors[0].message());
  for (auto& t : teams) CHECK(t.release().has_value());
}

std::string self_path() {
  char path[4096] = {};
  REQUIRE(::readlink("/proc/self/exe", path, sizeof path - 1) > 0);
  return path;
}

std::vector<std::string> rank_arguments(const std::string& meeting, int rank, int size,
                                        std::chrono::milliseconds pause) {
  return {self_path(), "--rank", meeting, std::to_string(rank), std::to_string(size), std::to_string(pause.count())};
}

std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

pid_t spawn_rank(const std::string& meeting, int rank, int size, std::chrono::milliseconds pause = {}) {
  auto args = rank_arguments(meeting, rank, size, pause);
  auto argv = argv_of(args);
  pid_t pid = 0;
  REQUIRE(::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
  return pid;
}

// Waits for every rank process (60 s at most, then kills them all); each must exit 0.
void expect_ranks_pass(const std::vector<pid_t>& pids) {
  const auto limit = std::chrono::steady_clock::now() + 60s;
  for (std::size_t r = 0; r < pids.size(); ++r) {
    int status = 0;
    while (::waitpid(pids[r], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > limit) {
        for (pid_t q : pids) ::kill(q, SIGKILL);
        ::waitpid(pids[r], &status, 0);
        FAIL("rank " << r << " did not finish within 60 s");
      }
      std::this_thread::sleep_for(5ms);
    }
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), "rank " << r << " failed (its stderr above)");
  }
}

// Starts rank `rank` as pid 1 of a new pid namespace (one network namespace still): the pid of the process that
// waits for it, or -1 with `why` set where this process may not make pid namespaces.
pid_t spawn_rank_in_pid_namespace(const std::string& meeting, int rank, int size, std::chrono::milliseconds pause,
                                  std::string& why) {
  auto args = rank_arguments(meeting, rank, size, pause);
  auto argv = argv_of(args);
  int err = 0;
  bool told = false;
  const pid_t pid = stranger_test::fork_reporting(
      [&](int report) {
        // A mount namespace too, with its own /proc, as a container has: in a pid namespace that still sees the
        // parent's /proc, CUDA's cuInit fails (CUDA_ERROR_OPERATING_SYSTEM, measured on an H100, driver 580).
        int failed = ::unshare(CLONE_NEWPID | CLONE_NEWNS) == 0 ? 0 : errno;
        const pid_t child = failed == 0 ? ::fork() : -1;
        if (child == 0) {
          (void)::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);  // nothing leaks to the parent's mounts
          (void)::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
          ::execv(argv[0], argv.data());
        }
        if (child == 0) ::_exit(127);
        if (failed == 0 && child < 0) failed = errno;
        if (::write(report, &failed, sizeof failed) != sizeof failed) ::_exit(126);
        ::close(report);
        int status = 0;
        if (child < 0 || ::waitpid(child, &status, 0) != child) ::_exit(125);
        ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 124);
      },
      &err, sizeof err, told);
  if (told && err == 0) return pid;
  why = std::string("unshare(CLONE_NEWPID | CLONE_NEWNS) or the fork after it failed: ") +
        (told ? std::strerror(err) : "no word");
  int status = 0;
  ::waitpid(pid, &status, 0);
  return -1;
}

}  // namespace

TEST_SUITE("team endpoints") {
  TEST_CASE("another user's connection to a team endpoint is dropped: the window forms at once") {
    if (skip()) return;
    if (::geteuid() != 0) {
      std::printf("[pvmm-skip] only root can make a process of another user (uid 65534) here\n");
      return;
    }
    window_with_strangers(stranger::other_user);
  }
  TEST_CASE("a silent same-user connection from no rank's process is dropped: the window forms at once") {
    if (skip()) return;
    window_with_strangers(stranger::silent);
  }
  TEST_CASE("a same-user process that is no rank sending bytes to a team endpoint is dropped") {
    if (skip()) return;
    window_with_strangers(stranger::garbage);
  }
  TEST_CASE("a same-user process on a rank's endpoint name is sent nothing: the sender fails naming that rank") {
    if (skip()) return;
    window_with_squatter();
  }
  TEST_CASE("threads of one process: every member is same_device and the window forms") {
    if (skip()) return;
    leak_check leaks;
    pvmm_team_rules::every_thread_rank_passes(
        2, [](const std::shared_ptr<pvmm::bootstrap>& b, int) { return team_and_window(b, 10s); });
  }
  TEST_CASE("processes on one device: every member is same_device and the window forms") {
    if (skip()) return;
    const auto meeting = unique_name("same-device");
    expect_ranks_pass({spawn_rank(meeting, 0, 2), spawn_rank(meeting, 1, 2)});
  }
  TEST_CASE("a rank in another pid namespace (one network namespace) makes a window with this one") {
    if (skip()) return;
    const auto meeting = unique_name("pid-namespace");
    std::string why;
    const pid_t apart = spawn_rank_in_pid_namespace(meeting, 1, 2, {}, why);
    if (apart < 0) {
      std::printf("[pvmm-skip] %s\n", why.c_str());
      return;
    }
    expect_ranks_pass({spawn_rank(meeting, 0, 2), apart});
  }
  TEST_CASE(
      "with a rank in another pid namespace, strangers at a team endpoint are dropped (the rank's secret tells)") {
    if (skip()) return;
    const auto meeting = unique_name("pid-namespace-strangers");
    std::string why;
    const auto pause = 2000ms;  // between the team and the window: the strangers connect meanwhile
    const pid_t apart = spawn_rank_in_pid_namespace(meeting, 1, 2, pause, why);
    if (apart < 0) {
      std::printf("[pvmm-skip] %s\n", why.c_str());
      return;
    }
    const pid_t rank0 = spawn_rank(meeting, 0, 2, pause);
    std::map<std::string, int> names;
    for (int tries = 0; tries < 1000 && names.empty(); ++tries, std::this_thread::sleep_for(5ms))
      names = team_endpoints_of(std::to_string(rank0));
    std::vector<pid_t> strangers;
    if (names.size() == 1)  // a pid from no rank: rank 0 cannot tell it from rank 1's but by its message
      for (auto kind : {stranger::garbage, stranger::silent})
        strangers.push_back(start_stranger(names.begin()->first, kind));
    expect_ranks_pass({rank0, apart});
    for (pid_t s : strangers)
      if (s > 0) stop(s);
    CHECK_MESSAGE(names.size() == 1, "rank 0's team endpoint was not found");
    CHECK(std::count(strangers.begin(), strangers.end(), -1) == 0);
  }
}

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--rank")
    return rank_process(argv[2], std::stoi(argv[3]), std::stoi(argv[4]), std::chrono::milliseconds(std::stoi(argv[5])));
  doctest::Context context(argc, argv);
  return context.run();
}
