// Strangers at a team's endpoints (strangers.hpp).
#include "strangers.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

namespace stranger_test {

using namespace std::chrono_literals;

// The team endpoints process `pid` listens on, found as a stranger finds them: abstract names in /proc/net/unix
// ("@pvmm-team-<id>-<rank>"), here only those whose socket is one of that process's fds: name -> that fd.
std::map<std::string, int> team_endpoints_of(const std::string& pid) {
  std::map<std::string, int> sockets;  // "socket:[inode]" -> the fd of the process that holds it
  for (int fd = 0; fd < 4096; ++fd) {
    char link[64] = {};
    const std::string path = "/proc/" + pid + "/fd/" + std::to_string(fd);
    if (::readlink(path.c_str(), link, sizeof link - 1) > 0) sockets.emplace(link, fd);
  }
  std::map<std::string, int> out;
  std::ifstream table("/proc/net/unix");
  for (std::string line; std::getline(table, line);) {
    const auto at = line.find("@pvmm-team-");
    if (at == std::string::npos) continue;
    // Num RefCount Protocol Flags Type St Inode Path: the inode is the seventh field. An accepted connection's
    // socket carries its listener's name too: only a listening one (St 01, unconnected) counts.
    std::size_t pos = 0;
    std::vector<std::string> fields;
    for (int field = 0; field < 7; ++field, pos = line.find_first_not_of(' ', line.find(' ', pos)))
      fields.push_back(line.substr(pos, line.find(' ', pos) - pos));
    const auto held = sockets.find("socket:[" + fields[6] + "]");
    if (held != sockets.end() && fields[5] == "01") out.emplace(line.substr(at + 1), held->second);
  }
  return out;
}

// A process that connects to abstract endpoint `name` as `kind` says and stays until killed; its pid, once it
// is connected (-1 when it could not connect).
pid_t start_stranger(const std::string& name, stranger kind) {
  const abstract_address at(name);
  char one = 0;
  bool connected = false;
  const pid_t pid = fork_reporting(
      [&](int ready) {
        if (kind == stranger::other_user && (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
                                             ::setresuid(65534, 65534, 65534) != 0))
          ::_exit(3);
        const int s = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
        if (s < 0 || ::connect(s, at.get(), at.length) != 0) ::_exit(4);
        const char junk[24] = "no team message at all";
        if (kind == stranger::garbage && ::send(s, junk, sizeof junk, MSG_NOSIGNAL) != sizeof junk) ::_exit(5);
        const char connected_word = 1;
        if (::write(ready, &connected_word, 1) != 1) ::_exit(6);
        for (;;) ::pause();
      },
      &one, 1, connected);
  if (connected) return pid;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return -1;
}

pid_t fork_reporting(const std::function<void(int)>& child, void* word, std::size_t size, bool& told) {
  int report[2];
  REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(report[0]);
    child(report[1]);
    ::_exit(127);
  }
  ::close(report[1]);
  told = ::read(report[0], word, size) == static_cast<ssize_t>(size);
  ::close(report[0]);
  return pid;
}

void stop(pid_t pid) {
  int status = 0;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
}

}  // namespace stranger_test
