// Shared pieces of the conformance suite: the case macro (under the leak check, leak_check.hpp), skipping without a
// device, error assertions, and small helpers. Backend-neutral: nothing here names a backend.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <pvmm/pvmm.hpp>
#include <pvmm/testing.hpp>

#include "data.hpp"
#include "leak_check.hpp"
#include "open_fds.hpp"

namespace doctest {
template <>
struct StringMaker<pvmm::location> {
  static String convert(const pvmm::location& l) {
    const char* kinds[] = {"device", "host", "host_numa"};
    return (std::string(kinds[static_cast<int>(l.type)]) + "(" + std::to_string(l.id) + ")").c_str();
  }
};
template <>
struct StringMaker<std::optional<pvmm::location>> {
  static String convert(const std::optional<pvmm::location>& l) {
    return l ? StringMaker<pvmm::location>::convert(*l) : String("none");
  }
};
}  // namespace doctest

extern char** environ;

namespace pvmm_test {

/// Prints the skip marker CTest recognises (SKIP_REGULAR_EXPRESSION) and a reason.
inline void report_skip(const std::string& reason) {
  std::printf("[pvmm-skip] %s: %s\n",
              doctest::getContextOptions()->currentTest ? doctest::getContextOptions()->currentTest->m_name : "case",
              reason.c_str());
  std::fflush(stdout);
}

/// A connected AF_UNIX socket pair, closed at scope exit.
struct socket_pair {
  int a = -1, b = -1;
  explicit socket_pair(int type = SOCK_SEQPACKET) {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv) == 0);
    a = sv[0], b = sv[1];
  }
  socket_pair(const socket_pair&) = delete;
  socket_pair& operator=(const socket_pair&) = delete;
  ~socket_pair() {
    ::close(a);
    ::close(b);
  }
};

/// Fills the fd table (RLIMIT_NOFILE lowered to just above the fds open now) for one scope, then gives
/// everything back: what a process with no fds left sees.
struct full_fd_table {
  rlimit saved{};
  std::vector<int> filler;
  full_fd_table() {
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
    rlimit low = saved;
    low.rlim_cur = open_fd_count() + 8;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
    for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
    REQUIRE(errno == EMFILE);
  }
  full_fd_table(const full_fd_table&) = delete;
  full_fd_table& operator=(const full_fd_table&) = delete;
  ~full_fd_table() {
    for (int fd : filler) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &saved);
  }
};

/// The properties the suite allocates with: device 0, exportable as POSIX fd where the device can.
inline pvmm::allocation_properties default_properties(int device = 0) {
  pvmm::allocation_properties p;
  p.location = pvmm::location::device(device);
  auto d = pvmm::query_device(device);
  if (d && d->capabilities.sharing.posix_fd) p.exportable = pvmm::handle_types::posix_fd;
  return p;
}

inline std::size_t granule(int device = 0) {
  return pvmm::query_granularity(default_properties(device)).value().minimum;
}

/// A growable_buffer of device 0 memory in granule chunks, read-write for it, room reserved for `chunks_reserved`
/// chunks (0: the library's default).
inline pvmm::growable_options granule_chunks(std::size_t chunks_reserved) {
  pvmm::growable_options o;
  o.properties = default_properties();
  o.access = {{pvmm::location::device(0), pvmm::access::read_write}};
  o.chunk_size = granule();
  o.reserve_size = chunks_reserved * o.chunk_size;
  return o;
}

inline pvmm::capabilities caps(int device = 0) { return pvmm::query_device(device).value().capabilities; }

inline pvmm::access_descriptor rw(int device = 0) { return {pvmm::location::device(device), pvmm::access::read_write}; }
inline pvmm::access_descriptor ro(int device = 0) { return {pvmm::location::device(device), pvmm::access::read}; }

/// Fails the 1st, 2nd, ... backend call of `operation` until it succeeds; after every failure the live
/// objects and fds must be exactly as before. Returns how many failure points were exercised: a composite
/// that hid a failed step would succeed early, so callers compare this with the calls a clean run makes.
template <class Operation>
inline std::size_t sweep_failures(Operation operation) {
  for (std::size_t n = 1; n < 64; ++n) {
    const auto live = pvmm::query_live_objects();
    const auto fd_count = open_fd_count();
    pvmm::testing::fail_nth_backend_call(n);
    bool ok = operation();
    pvmm::testing::fail_nth_backend_call(0);
    if (ok) return n - 1;
    CHECK_MESSAGE(pvmm::query_live_objects() == live, "failure at backend call " << n << " leaked pvmm objects");
    CHECK_MESSAGE(open_fd_count() == fd_count, "failure at backend call " << n << " leaked fds");
  }
  FAIL("the operation never succeeded");
  return 0;
}

/// Backend calls `operation` makes when nothing fails, warm: a first run fills pvmm's caches (granularities,
/// capabilities), which a fault sweep's runs never need again.
template <class Operation>
inline std::size_t backend_calls_of(Operation operation) {
  REQUIRE(operation());
  const std::size_t before = pvmm::testing::backend_call_count();
  REQUIRE(operation());
  return pvmm::testing::backend_call_count() - before;
}

#ifdef PVMM_CONFORMANCE_CHILD

/// Runs the child program with one end of a socket pair; returns the parent's end and the child's pid.
inline std::pair<int, pid_t> spawn_child(const std::vector<std::string>& args) {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
  // The child's end must survive exec: duplicate it without close-on-exec.
  int child_end = ::fcntl(sv[1], F_DUPFD, 0);
  REQUIRE(child_end >= 0);
  ::close(sv[1]);
  std::vector<std::string> argv_s{PVMM_CONFORMANCE_CHILD, std::to_string(child_end)};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  ::close(child_end);
  REQUIRE_MESSAGE(rc == 0, "posix_spawn failed: " << std::strerror(rc));
  return {sv[0], pid};
}

inline int wait_child(pid_t pid) {
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#endif

}  // namespace pvmm_test

/// Asserts that `expr` failed with exactly `expected`, showing the full error otherwise.
#define PVMM_CHECK_ERRC(expr, expected)                                                        \
  do {                                                                                         \
    auto&& pvmm_r_ = (expr);                                                                   \
    CHECK_MESSAGE(pvmm_r_.code() == (expected),                                                \
                  (pvmm_r_.has_value() ? std::string("succeeded") : pvmm_r_.error().message()) \
                      << " (expected " << std::string(pvmm::to_string(expected)) << ")");      \
  } while (0)

/// Requires that result `r` (a variable) holds a value, showing its error otherwise (only then is error() read).
#define PVMM_REQUIRE_VALUE(r) REQUIRE_MESSAGE((r), ((r) ? std::string() : (r).error().message()))

/// Asserts success, showing the error otherwise.
#define PVMM_CHECK_OK(expr)                                                                                \
  do {                                                                                                     \
    auto&& pvmm_r_ = (expr);                                                                               \
    CHECK_MESSAGE(pvmm_r_.has_value(), (pvmm_r_.has_value() ? std::string() : pvmm_r_.error().message())); \
  } while (0)

namespace pvmm_test {
/// Releases `owner`, then checks that releasing it again is already_released.
template <class Owner>
void check_release_twice(Owner& owner) {
  PVMM_CHECK_OK(owner.release());
  PVMM_CHECK_ERRC(owner.release(), pvmm::errc::already_released);
}
}  // namespace pvmm_test

/// A conformance case: runs under the leak check, and reports itself skipped where no device can run it.
#define PVMM_CASE(name) TEST_CASE_FIXTURE(pvmm_test::leak_check, name)
#define PVMM_REQUIRE_DEVICES(n)                                                                \
  do {                                                                                         \
    auto reason_ = pvmm_test::no_device_reason();                                              \
    if (reason_.empty() && pvmm::device_count().value() < (n))                                 \
      reason_ = "needs " #n " devices, found " + std::to_string(pvmm::device_count().value()); \
    if (!reason_.empty()) {                                                                    \
      pvmm_test::report_skip(reason_);                                                         \
      return;                                                                                  \
    }                                                                                          \
  } while (0)
#define PVMM_REQUIRE_DEVICE() PVMM_REQUIRE_DEVICES(1)
/// Reports the case skipped with `reason` ("[pvmm-skip] case: reason") and returns when `condition` is false: the one
/// way a case that cannot run here says so (never a silent return). `reason` is evaluated only when it skips.
#define PVMM_SKIP_UNLESS(condition, reason) \
  do {                                      \
    if (!(condition)) {                     \
      pvmm_test::report_skip(reason);       \
      return;                               \
    }                                       \
  } while (0)
/// Reports the case skipped, naming the capability, when `has` is false.
#define PVMM_REQUIRE_CAPABILITY(has, what) PVMM_SKIP_UNLESS(has, std::string("the device lacks ") + (what))
/// Reports the case skipped unless the configured backend is the host backend (cases about its own machinery, or
/// about what the drivers were not measured doing): `why` says which.
#define PVMM_REQUIRE_HOST_BACKEND(why) \
  PVMM_SKIP_UNLESS(pvmm::query_backend().name == "host", std::string("host backend only: ") + (why))
