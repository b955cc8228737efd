// A thread that watches the processes of a team's node-local peers (pidfds, which turn readable when a process
// exits) and reports each exit once, at once: a team with signal pads raises its windows' abort words with it, so
// device waits for a dead peer end within milliseconds of its death instead of at their deadline (issue 51 item 2).
// Started at most once per team, when its first window with signal pads is made, and only where there is a peer
// to watch (another process on this node whose pid means the same here). Best effort: where pidfds or a thread
// cannot be had, nothing is watched and the waits keep their deadlines.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

namespace pvmm::detail {

class peer_watch {
 public:
  /// Watches `peers` (rank, pid); `on_exit(rank)` runs on the watching thread, once per rank that exits, never
  /// after this object's destructor has returned (it may run this destructor itself: the thread then lets go of
  /// itself). Null where nothing could be watched.
  static std::unique_ptr<peer_watch> start(const std::vector<std::pair<int, std::int64_t>>& peers,
                                           std::function<void(int)> on_exit) noexcept;
  ~peer_watch();
  peer_watch(const peer_watch&) = delete;
  peer_watch& operator=(const peer_watch&) = delete;

  struct shared;  // what the thread keeps: the fds, the callback, the stop flag

 private:
  explicit peer_watch(std::shared_ptr<shared> s) noexcept : s_(std::move(s)) {}
  std::shared_ptr<shared> s_;
  std::thread thread_;
};

}  // namespace pvmm::detail
