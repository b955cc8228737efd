// pvmm/owned_fd.hpp - an owned POSIX file descriptor (exported, received or taken from a process), closed exactly once.
//
// Threading: like an int, one owned_fd may be read (get, valid) from several threads at once; release, detach,
// reset, moving and destruction may not overlap any other use of the same owned_fd.
#pragma once

#include <pvmm/error.hpp>

namespace pvmm {

/// Owns one file descriptor (an exported allocation, or one received from a peer). Move-only; the
/// destructor closes it. release() closes it now and reports; detach() hands it to the caller unclosed.
class owned_fd {
 public:
  owned_fd() noexcept = default;
  explicit owned_fd(int fd) noexcept : fd_(fd) {}
  owned_fd(owned_fd&& other) noexcept : fd_(other.detach()) {}
  owned_fd& operator=(owned_fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.detach();
    }
    return *this;
  }
  owned_fd(const owned_fd&) = delete;
  owned_fd& operator=(const owned_fd&) = delete;
  ~owned_fd() { reset(); }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }
  /// Closes the descriptor now and reports close's error (errc::invalid_handle for a descriptor that was not
  /// open, errc::system_error otherwise). The owner is empty afterwards either way: Linux frees the descriptor
  /// even when close fails, so closing it again could close another thread's new descriptor.
  /// errc::already_released when empty.
  status release() noexcept;
  /// Gives up ownership without closing: the caller closes what it returns (-1 when empty).
  int detach() noexcept {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  /// Closes the descriptor now, ignoring errors (no-op when empty).
  void reset() noexcept;

 private:
  int fd_ = -1;
};

}  // namespace pvmm
