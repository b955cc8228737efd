// pvmm/exported_fd.hpp - an owned POSIX file descriptor, closed exactly once.
#pragma once

namespace pvmm {

/// Owns one file descriptor (an exported allocation, or one received from a peer). Move-only; the
/// destructor closes it. release() hands the descriptor to the caller, who then closes it.
class exported_fd {
 public:
  exported_fd() noexcept = default;
  explicit exported_fd(int fd) noexcept : fd_(fd) {}
  exported_fd(exported_fd&& other) noexcept : fd_(other.release()) {}
  exported_fd& operator=(exported_fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  exported_fd(const exported_fd&) = delete;
  exported_fd& operator=(const exported_fd&) = delete;
  ~exported_fd() { reset(); }

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
