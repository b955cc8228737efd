// Strangers at a team's endpoints, for endpoint_strangers.cpp: the endpoints a process listens on as a stranger
// finds them, and processes that connect to one as another user, silently, or sending garbage.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <cstddef>
#include <cstring>

#include <functional>
#include <map>
#include <string>

namespace stranger_test {

/// The team endpoints process `pid` listens on (abstract "@pvmm-team-..." names in /proc/net/unix whose socket is
/// one of that process's fds): name -> that fd.
std::map<std::string, int> team_endpoints_of(const std::string& pid = "self");

enum class stranger { other_user, silent, garbage };

/// A process that connects to abstract endpoint `name` as `kind` says and stays until killed; its pid, once it is
/// connected (-1 when it could not connect).
pid_t start_stranger(const std::string& name, stranger kind);

/// The address of abstract endpoint `name` (a NUL, then the name; no terminator) and its length.
struct abstract_address {
  sockaddr_un address{};
  socklen_t length = 0;
  explicit abstract_address(const std::string& name) {
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path + 1, name.data(), name.size());
    length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  }
  const sockaddr* get() const noexcept { return reinterpret_cast<const sockaddr*>(&address); }
};

/// Forks a child that runs child(fd) and never returns from it, `fd` the write end of a pipe on which it reports
/// `size` bytes; the parent reads them into `word`. The child's pid; `told`: whether its bytes came.
pid_t fork_reporting(const std::function<void(int)>& child, void* word, std::size_t size, bool& told);

/// Kills and reaps a stranger.
void stop(pid_t pid);

}  // namespace stranger_test
