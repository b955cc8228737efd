// Path-name endpoints: the per-user runtime directory, binding a socket file (removing a stale one only when it is
// this user's socket and nobody listens), and removing it again only if it is still the file bound.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <cstdint>
#include <string>
#include <string_view>

#include <pvmm/error.hpp>

#include "core/operation.hpp"

namespace pvmm::ipc::path {

/// A socket file's identity: its device and inode numbers.
struct file_identity {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
};

/// Binds `socket` to path `name` (its address in `address`, `length`). A socket file there that belongs to this user
/// and on which nobody listens (connect is refused) is removed first; anything else is refused with the error
/// listener::listen documents. Returns the identity of the file bound.
result<file_identity> bind(int socket, std::string_view name, const sockaddr_un& address, socklen_t length,
                           const detail::operation& op);

/// Removes the socket file at `name` if it is still the one `bound` names: a file another listener bound since is
/// never removed.
void remove(const std::string& name, file_identity bound) noexcept;

}  // namespace pvmm::ipc::path

namespace pvmm::ipc::probe {
/// One connect attempt that does not wait: true when nothing listens on `name` (refused, or no socket file), false
/// when a listener is there (its backlog full or not) or the attempt could not tell. For a peer whose listener
/// existed once: it has gone.
bool nobody_listens(std::string_view name) noexcept;
}  // namespace pvmm::ipc::probe
