// The driver path of a window's stream-ordered signals (window_options::stream_signals = driver; issue 51 item 1).
// put_signal is the driver's 64-bit stream write of how many signals this rank has sent the peer on the channel,
// into the peer's stream inbox (team_device.hpp); wait_signal is the driver's stream wait until this rank's stream
// inbox holds the count it expects; a barrier is both, for every peer. The driver's waits cost no GPU time while
// they wait (the stream's front end holds them; no kernel spins), so processes that time-share a GPU pay no time
// slice for them. They have no deadline of their own, so a watchdog thread keeps every wait's: from when the stream
// reaches it (a "reached" ticket written before the waits) to its timeout, at a team abort, or when the waited-for
// peer's process exits, it enqueues the release where no stream of the caller's can hold it up
// (backend/team_signal.hpp, enqueue_release; team_device.hpp, signal_release: the failure recorded as a spin's
// expiry, then the counter raised to the target), again every 10 ms until the stream has passed (a slow peer's late,
// lower write may lower the counter again). What the host counts (sent, expected) lives here, in this rank's host
// memory, where no peer writes. Each enqueue ends with a "passed" ticket write into a page-locked word of its own
// (never shared by two streams or entries): until the watchdog or a caller's pvmm call sees it, the entry holds the
// window (its pads stay mapped).
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
  /// stream has passed it. A wait's deadline is `timeout` after the stream reaches it.
  status enqueue(const window_view& view, signal_op what, int peer, int channel, stream_ref s,
                 std::chrono::milliseconds timeout, std::shared_ptr<const void> keep, const operation& op);
  /// The abort words changed (team::abort, a peer's exit): the watchdog looks at once.
  void wake() noexcept;
  /// release_deferred: the entries whose streams have passed them hand their window to the deferred list.
  void collect() noexcept override;

 private:
  static constexpr std::uint32_t no_word = 0xffffffffu;
  struct target {
    int rank = 0;
    std::uint64_t value = 0;
    bool released = false;
    std::uint32_t aborted_by = 0;  // what its release recorded (repeated as it was)
  };
  struct entry {
    std::uint32_t passed = no_word;   // its ticket word, written after everything of it
    std::uint32_t reached = no_word;  // a waiting entry's word written before its waits
    std::uint64_t ticket = 0;
    bool observable = true;  // its passed ticket was enqueued (else it retires once its targets are released)
    bool armed = false;      // its deadline runs (the stream reached it, or that cannot be seen)
    clock::time_point deadline = clock::time_point::max();
    clock::time_point last_release{};
    std::chrono::milliseconds timeout{0};
    int channel = 0;
    std::vector<target> targets;  // the counts waited for (none for a put)
    std::shared_ptr<const void> keep;
  };

  stream_waits(int device, int ranks, const std::uint32_t* abort_words) noexcept;
  status start_watchdog(const operation& op);
  bool seen(std::uint32_t word, std::uint64_t ticket) const noexcept;
  void retire_locked() noexcept;
  /// Marks `e`'s targets (only `only_rank`'s where >= 0) released, then sends every released target's release.
  /// (These may throw where an error's text cannot be built: watch() catches it and looks again soon.)
  void release_locked(entry& e, int only_rank, std::uint32_t aborted_by, clock::time_point now);
  void send_releases_locked(entry& e, clock::time_point now);
  clock::time_point look_locked(clock::time_point now);
  void watch() noexcept;
  std::uint64_t& sent(int channel, int rank) { return sent_[static_cast<std::size_t>(channel * ranks_ + rank)]; }
  std::uint64_t& expected(int channel, int rank) {
    return expected_[static_cast<std::size_t>(channel * ranks_ + rank)];
  }

  const int device_, ranks_;
  const std::uint32_t* const abort_words_;
  pinned_allocation words_memory_;  // ticket words, each written by one entry's stream (free_words_ lists them)
  std::uint64_t* words_on_device_ = nullptr;
  // enqueue_lock_ serialises enqueues and guards the counts; it is held across the driver calls on the caller's
  // stream (which block while its launch queue is full). lock_ guards the rest and is never held across those
  // calls, so the watchdog can always release the wait a blocked enqueue sits behind. Order: enqueue_lock_, lock_.
  std::mutex enqueue_lock_;
  std::vector<std::uint64_t> sent_, expected_;
  std::mutex lock_;
  std::condition_variable woken_;
  std::vector<std::uint32_t> free_words_;
  std::vector<entry> pending_;
  std::uint64_t tickets_ = 0;
  window_view view_{};                                         // the latest enqueue's (the releases' view)
  clock::time_point planned_wake_ = clock::time_point::max();  // when the watchdog looks next (max: when woken)
  std::thread watchdog_;
  bool stop_ = false;
  bool started_ = false;
  bool released_any_ = false;  // a release was enqueued: the destructor waits for the releases to finish
};

}  // namespace pvmm::detail
