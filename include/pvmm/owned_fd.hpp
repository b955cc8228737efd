// pvmm/owned_fd.hpp - an owned POSIX file descriptor (exported, received or taken from a process), closed exactly once.
#pragma once

namespace pvmm {

/// Owns one file descriptor (an exported allocation, or one received from a peer). Move-only; the
/// destructor closes it. release() hands the descriptor to the caller, who then closes it.
class owned_fd {
 public:
  owned_fd() noexcept = default;
  explicit owned_fd(int fd) noexcept : fd_(fd) {}
  owned_fd(owned_fd&& other) noexcept : fd_(other.release()) {}
  owned_fd& operator=(owned_fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  owned_fd(const owned_fd&) = delete;
  owned_fd& operator=(const owned_fd&) = delete;
  ~owned_fd() { reset(); }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }
  /// Gives up ownership without closing.
  int release() noexcept {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  /// Closes the descriptor now (no-op when empty).
  void reset() noexcept;

 private:
  int fd_ = -1;
};

}  // namespace pvmm
