// The team's watch on its node-local peers' processes (peer_watch.hpp).
#include "team/peer_watch.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace pvmm::detail {

struct peer_watch::shared {
  std::atomic<bool> stop{false};
  int wake = -1;                            // an eventfd the destructor writes
  std::vector<std::pair<int, int>> pidfds;  // (rank, pidfd) of the peers not yet seen to exit
  std::function<void(int)> on_exit;

  ~shared() {
    for (const auto& [rank, fd] : pidfds) ::close(fd);
    if (wake >= 0) ::close(wake);
  }
};

namespace {

void watch(const std::shared_ptr<peer_watch::shared>& s) noexcept {
  std::vector<pollfd> fds;
  while (!s->stop.load(std::memory_order_acquire) && !s->pidfds.empty()) {
    try {
      fds.assign(1, pollfd{s->wake, POLLIN, 0});
      for (const auto& [rank, fd] : s->pidfds) fds.push_back(pollfd{fd, POLLIN, 0});
    } catch (...) {  // no memory for the list: stop watching (the waits keep their deadlines)
      return;
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents != 0) return;  // the owner is going
    for (std::size_t i = fds.size(); i-- > 1;) {
      if (fds[i].revents == 0) continue;
      const int rank = s->pidfds[i - 1].first;
      ::close(s->pidfds[i - 1].second);
      s->pidfds.erase(s->pidfds.begin() + static_cast<std::ptrdiff_t>(i - 1));
      try {
        s->on_exit(rank);
      } catch (...) {  // a report that could not be made: the waits keep their deadlines
      }
      // on_exit may have ended the owner (it let go of the last reference to the team): look at nothing of it.
      if (s->stop.load(std::memory_order_acquire)) return;
    }
  }
}

}  // namespace

std::unique_ptr<peer_watch> peer_watch::start(const std::vector<std::pair<int, std::int64_t>>& peers,
                                              std::function<void(int)> on_exit) noexcept {
  try {
    if (peers.empty()) return nullptr;
    auto s = std::make_shared<shared>();
    s->on_exit = std::move(on_exit);
    for (const auto& [rank, pid] : peers) {
      const int fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
      if (fd >= 0) s->pidfds.emplace_back(rank, fd);
    }
    if (s->pidfds.empty()) return nullptr;  // no pidfds here (Linux < 5.3), or every peer gone already
    s->wake = ::eventfd(0, EFD_CLOEXEC);
    if (s->wake < 0) return nullptr;
    std::unique_ptr<peer_watch> w(new peer_watch(s));
    w->thread_ = std::thread([s] { watch(s); });
    return w;
  } catch (...) {  // memory or a thread could not be had: nothing is watched
    return nullptr;
  }
}

peer_watch::~peer_watch() {
  s_->stop.store(true, std::memory_order_release);
  const std::uint64_t one = 1;
  (void)!::write(s_->wake, &one, sizeof one);
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id())
    thread_.detach();  // on_exit let go of the team: the thread ends once it returns, touching only `s`
  else
    thread_.join();
}

}  // namespace pvmm::detail
