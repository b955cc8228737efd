// Endpoint names where users run (invariant 21): path names beside abstract ones; a peer in another network
// namespace cannot reach an abstract name (and is told why) but reaches a path name; stale socket files are removed
// only when they are this user's and nobody listens; anything else at the path is never touched.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace std::chrono_literals;

namespace {

std::string unique(const char* what) { return "pvmm-test-" + std::to_string(::getpid()) + "-" + what; }
std::string in_runtime_directory(const char* what) { return ipc::runtime_directory().value() + "/" + unique(what); }

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

/// A socket file at `path` whose process is gone: bound, never listened on, closed (what a killed listener leaves).
void leave_stale_socket_file(const std::string& path) {
  const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  REQUIRE(s >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  REQUIRE(::bind(s, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  ::close(s);
}

/// Sends the read end of a pipe that holds `text` (the fd is the sender's no more once sent: both ends are closed).
void send_pipe_holding(const ipc::connection& to, const std::string& text) {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  REQUIRE(::write(p[1], text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  PVMM_CHECK_OK(to.send(&p[0], 1, "pipe", 4));
  ::close(p[0]);
  ::close(p[1]);
}

std::string received_text(const ipc::received& m) { return std::string(m.payload.begin(), m.payload.end()); }

}  // namespace

TEST_SUITE("endpoint") {
  PVMM_CASE("a path-name endpoint: fds travel as over an abstract name, the listener removes its file when it goes") {
    const std::string path = in_runtime_directory("path");
    CHECK(ipc::is_path_name(path));
    CHECK_FALSE(ipc::is_path_name("pvmm-abstract"));
    {
      auto server = ipc::listener::listen(path).value();
      CHECK(server.name() == path);
      struct stat st {};
      REQUIRE(::lstat(path.c_str(), &st) == 0);
      CHECK(S_ISSOCK(st.st_mode));
      auto client = ipc::connect(path, 1s).value();
      auto accepted = server.accept(1s).value();
      send_pipe_holding(client, "through a path");
      auto got = accepted.receive_exactly(1, 64).value();
      char text[32] = {};
      CHECK(::read(got.fds[0].get(), text, sizeof text) == 14);
      CHECK(std::string(text) == "through a path");
      auto moved = std::move(server);  // the file goes with the listener that owns it, not with a moved-from one
      CHECK(exists(path));
    }
    CHECK_FALSE(exists(path));
  }

  PVMM_CASE(
      "path names: a live listener's path is address_unavailable naming its pid, a stale file of ours is "
      "replaced, a file that is not a socket, or not ours, is refused and left") {
    const std::string path = in_runtime_directory("owned");
    {
      auto first = ipc::listener::listen(path).value();
      auto second = ipc::listener::listen(path);
      PVMM_CHECK_ERRC(second, errc::address_unavailable);
      CHECK(second.error().detail.find(path) != std::string::npos);
      CHECK(second.error().detail.find("pid " + std::to_string(::getpid())) != std::string::npos);
      (void)first.accept(0ms);  // the probe's connection, closed at once
    }
    leave_stale_socket_file(path);
    REQUIRE(exists(path));
    PVMM_CHECK_ERRC(ipc::connect(path, 50ms), errc::timeout);  // a stale file: refused until the deadline
    {
      auto taken_over = ipc::listener::listen(path);
      PVMM_CHECK_OK(taken_over);
      PVMM_CHECK_OK(ipc::connect(path, 1s));
    }
    // A regular file is never removed.
    {
      std::FILE* f = std::fopen(path.c_str(), "w");
      REQUIRE(f);
      std::fclose(f);
    }
    auto regular = ipc::listener::listen(path);
    PVMM_CHECK_ERRC(regular, errc::invalid_argument);
    CHECK(regular.error().detail.find("regular file") != std::string::npos);
    CHECK(exists(path));
    REQUIRE(::unlink(path.c_str()) == 0);
    // Another user's stale socket file is never removed.
    leave_stale_socket_file(path);
    if (::geteuid() == 0) {
      REQUIRE(::lchown(path.c_str(), 65534, 65534) == 0);
      auto foreign = ipc::listener::listen(path);
      PVMM_CHECK_ERRC(foreign, errc::not_permitted);
      CHECK(foreign.error().detail.find("uid 65534") != std::string::npos);
      CHECK(exists(path));
    } else {
      MESSAGE("not root: cannot give a socket file to another user; the foreign-owner refusal is not exercised");
    }
    ::unlink(path.c_str());
  }

  PVMM_CASE("path names: bad paths and directories are refused with their errors") {
    PVMM_CHECK_ERRC(ipc::listener::listen("/" + std::string(ipc::max_endpoint_name, 'p')), errc::invalid_argument);
    auto missing = ipc::listener::listen("/nonexistent-pvmm-dir/" + unique("x"));
    PVMM_CHECK_ERRC(missing, errc::system_error);
    CHECK(missing.error().native_name == "ENOENT");
    CHECK(missing.error().hint.find("runtime_directory") != std::string::npos);
    auto none = ipc::connect("/nonexistent-pvmm-dir/" + unique("y"), 30ms);
    PVMM_CHECK_ERRC(none, errc::timeout);
    CHECK(none.error().detail.find("no socket file") != std::string::npos);
    // runtime_directory: $XDG_RUNTIME_DIR when set, checked to be ours and closed to others.
    const std::string dir = "/tmp/" + unique("xdg");
    REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
    const char* saved = std::getenv("XDG_RUNTIME_DIR");
    const std::string restore = saved ? saved : "";
    ::setenv("XDG_RUNTIME_DIR", dir.c_str(), 1);
    auto open_to_others = ipc::runtime_directory();
    REQUIRE(::chmod(dir.c_str(), 0700) == 0);
    auto closed = ipc::runtime_directory();
    saved ? ::setenv("XDG_RUNTIME_DIR", restore.c_str(), 1) : ::unsetenv("XDG_RUNTIME_DIR");
    ::rmdir(dir.c_str());
    PVMM_CHECK_ERRC(open_to_others, errc::not_permitted);
    CHECK(open_to_others.error().detail.find("755") != std::string::npos);
    PVMM_REQUIRE_VALUE(closed);
    CHECK(*closed == dir);
  }

  PVMM_CASE(
      "another network namespace: an abstract name is unreachable and its timeout says why, a path name "
      "carries an fd and its data") {
    const std::string abstract = unique("netns");
    const std::string path = in_runtime_directory("netns");
    auto hidden = ipc::listener::listen(abstract).value();
    auto server = ipc::listener::listen(path).value();
    auto [sock, pid] = spawn_child({"netns-connect", abstract, path});
    auto first = ipc::receive_fds(sock, 0, 4096, 60s);
    PVMM_REQUIRE_VALUE(first);
    const std::string said = received_text(*first);
    const bool skipped = said.rfind("skip: ", 0) == 0;
    if (skipped) {
      ::close(sock);
      wait_child(pid);
    }
    PVMM_SKIP_UNLESS(!skipped, said.substr(6));
    REQUIRE_MESSAGE(said == "ready", said);
    PVMM_CHECK_ERRC(hidden.accept(0ms), errc::timeout);  // nothing reached the abstract name
    auto child = server.accept(10s).value();
    CHECK(child.peer().value().pid == pid);
    send_pipe_holding(child, "across namespaces");
    auto back = child.receive(0, 4096, 10s);
    PVMM_REQUIRE_VALUE(back);
    CHECK(received_text(*back) == "read: across namespaces");
    auto verdict = ipc::receive_fds(sock, 0, 4096, 10s).value();
    CHECK(received_text(verdict) == "ok");
    ::close(sock);
    CHECK(wait_child(pid) == 0);
  }
}  // TEST_SUITE
