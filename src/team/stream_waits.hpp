// The driver path of a window's stream-ordered signals (window_options::stream_signals = driver; issue 51 item 1).
// put_signal is the driver's 64-bit stream write of how many signals this rank has sent the peer on the channel,
// into the peer's stream inbox (team_device.hpp); wait_signal is the driver's stream wait until this rank's stream
// inbox holds the count it expects; a barrier is both, for every peer. The driver's waits cost no GPU time while
// they wait (the stream's front end holds them; no kernel spins), so processes that time-share a GPU pay no time
// slice for them. They have no deadline of their own, so a watchdog thread keeps every wait's: at its deadline, at
// a team abort, or when the waited-for peer's process exits, it enqueues the release where no stream of the
// caller's can hold it up (backend/team_signal.hpp, enqueue_release; team_device.hpp, signal_release: the failure
// recorded as a spin's expiry, then the counter raised to the target). What the host counts (sent, expected) lives here, in this rank's host memory, where no peer writes.
// Each enqueue ends with a stream write of a ticket into page-locked host memory (one word per stream), which says
// when the stream has passed it: until then the entry holds the window (its pads stay mapped).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <pvmm/pinned.hpp>
#include <pvmm/stream.hpp>
#include <pvmm/team_device.hpp>

#include "core/deferred_release.hpp"
#include "core/operation.hpp"

namespace pvmm::detail {

class stream_waits final : deferred_source {
 public:
  using clock = std::chrono::steady_clock;

  /// For a window of `ranks` ranks and `channels` channels on `device`; `abort_words` (host memory, 1 + ranks
  /// words: team_device.hpp's abort_word) is what the watchdog reads for aborts and peers' exits.
  static result<std::unique_ptr<stream_waits>> create(int device, int channels, int ranks,
                                                      const std::uint32_t* abort_words, const operation& op);
  ~stream_waits();
  stream_waits(const stream_waits&) = delete;
  stream_waits& operator=(const stream_waits&) = delete;

  /// Enqueues `what` (put, wait or barrier; checked by the caller) on `s`. `keep` (the window) is held until the
  /// stream has passed it. A wait's deadline is `timeout` from now.
  status enqueue(const window_view& view, signal_op what, int peer, int channel, stream_ref s,
                 std::chrono::milliseconds timeout, std::shared_ptr<const void> keep, const operation& op);
  /// The abort words changed (team::abort, a peer's exit): the watchdog looks at once.
  void wake() noexcept;
  /// release_deferred: the entries whose streams have passed them hand their window to the deferred list.
  void collect() noexcept override;

 private:
  struct target {
    int rank = 0;
    std::uint64_t value = 0;
    bool released = false;
  };
  struct entry {
    std::size_t slot = 0;
    std::uint64_t ticket = 0;
    bool observable = true;  // its ticket write was enqueued (else it retires at its deadline)
    clock::time_point deadline = clock::time_point::max();
    int channel = 0;
    std::vector<target> targets;  // the counts waited for (none for a put)
    std::shared_ptr<const void> keep;
  };
  struct stream_slot {
    std::uintptr_t stream = 0;
    std::size_t pending = 0;  // entries of this slot not retired
  };

  stream_waits(int device, int ranks, const std::uint32_t* abort_words) noexcept;
  result<std::size_t> slot_of(stream_ref s, const operation& op);
  status start_watchdog(const operation& op);
  void retire_locked() noexcept;
  void release_locked(entry& e, int only_rank, std::uint32_t aborted_by) noexcept;
  void watch() noexcept;
  std::uint64_t& sent(int channel, int rank) { return sent_[static_cast<std::size_t>(channel * ranks_ + rank)]; }
  std::uint64_t& expected(int channel, int rank) {
    return expected_[static_cast<std::size_t>(channel * ranks_ + rank)];
  }

  const int device_, ranks_;
  const std::uint32_t* const abort_words_;
  pinned_allocation done_memory_;  // one ticket word per stream slot, written by the streams
  std::uint64_t* done_on_device_ = nullptr;
  std::mutex lock_;  // guards everything below; held around driver calls, never around user code
  std::condition_variable woken_;
  std::vector<std::uint64_t> sent_, expected_;
  std::vector<stream_slot> slots_;
  std::vector<entry> pending_;
  std::uint64_t tickets_ = 0;
  window_view view_{};  // the latest enqueue's (the releases' view)
  std::thread watchdog_;
  bool stop_ = false;
  bool started_ = false;
  bool released_any_ = false;  // a release was enqueued: the destructor waits for the releases to finish
};

}  // namespace pvmm::detail
