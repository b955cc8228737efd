// pvmm/team_device.hpp - a symmetric window as kernels see it: peers' memory, signal pads, put/wait-signal and a
// barrier, every wait bounded. C++17; compiles under nvcc, hipcc and a plain host compiler (where the same
// functions run in host code: the host backend's streams run them, and CI tests kernels' logic that way).
//
// Get a view from symmetric_window::view() (the window made with window_options::signal_channels > 0) and pass it
// to a kernel by value. Signals are monotonic 64-bit counters that are never reset (NCCL's and MSCCL++'s epochs,
// not PyTorch's 0/1 slots, whose reset races a peer's next signal: pytorch/pytorch#196546):
// - rank r's pad holds inbox[channel][src]: rank src adds 1 to it (system-scope release RMW) for each signal;
// - rank r keeps, in its owner-only block (a device allocation no peer maps), expected[channel][src]: how many
//   signals from src it has consumed. wait(src, channel) spins (acquire loads) until inbox - expected >= 1 (wrap-safe),
//   then expected += 1. A wait that times out consumes its epoch too, so a signal that comes late for step k is counted
//   for step k, and step k+1 still needs its own: a late signal never satisfies a later step.
// Contract: every signal is matched by exactly one wait on the same (peer, channel); channels separate concurrent
// users (different streams, blocks); one thread at a time waits on a given (src, channel) of a rank; the host
// API's put_signal / wait_signal / barrier and device code use the same counters, so mixing them on one channel is
// fine as long as the counts match.
// Memory model: signal() makes the signaller's earlier writes (to its own slot or a peer's) visible to a waiter whose
// acquire load sees the signal: a system-scope release RMW pairs with a system-scope acquire load (a fence_system
// before it where the platform's RMW carries no release order). Data written with plain stores before signal()
// and read after wait() is therefore ordered, across processes and devices.
// Timeouts: every wait takes a timeout in nanoseconds (0 is not "forever": pvmm has no unbounded device wait); a
// barrier's timeout bounds the whole call, however many peers are silent. On
// expiry the wait records {rank, channel, seen, expected} in this rank's error record (owner-only; the first failure
// wins), and returns false; it never traps (a trap kills the context: PyTorch's test ends in os._exit). The host
// reads the record with symmetric_window::signal_status() (errc::timeout naming the rank and channel) and clears it
// with clear_signal_status().
// Abort: every wait also looks at the host's abort words (window_view::abort_word, page-locked host memory) with
// its clock; team::abort() raises the first, so a wait in progress ends at its next look, recording peer_lost naming
// the aborting rank (signal_error::aborted_by), and the context stays usable. A node-local peer's process exit
// raises that peer's word: it ends the waits for that peer (and barriers, which wait for every peer) only.
// Beyond epochs: signal(to, channel, signal_kind::set or add, value) and wait_value(from, channel, compare, value,
// timeout) read a counter by value (a flag, a step number) without consuming epochs; use them and the epoch waits
// on different channels. Every call has a form scoped to a warp or a block (thread_scope, warp_scope, block_scope):
// one thread acts for the group.
// Progress: a wait needs the waited-for rank's kernel to run. Separate processes sharing a GPU are time-sliced, and
// separate GPUs run independently; two ranks in one process on one device share a context, whose kernels on
// different streams are not guaranteed to run at the same time (the host API refuses such waits on GPUs:
// symmetric_window::barrier). Waits in one kernel between its blocks need them all resident (a cooperative launch).
// Clocks: NVIDIA %globaltimer (ns); AMD wall_clock64() at view.wall_clock_khz (hipDeviceAttributeWallClockRate,
// filled by the host); host code std::chrono::steady_clock.
#pragma once

#include <cstdint>

#include <pvmm/detail/device_primitives.hpp>

namespace pvmm {

/// The first signal wait that failed on this rank (in its owner-only block; the host reads it with
/// signal_status()).
struct signal_error {
  std::uint32_t failed = 0;  ///< 0: no wait failed
  std::int32_t rank = -1;    ///< the peer waited for
  std::int32_t channel = -1;
  /// 0: the wait timed out; else the abort word that ended it: r + 1 when rank r aborted its team, with exited_bit
  /// when this rank's host saw rank r's process exit.
  std::uint32_t aborted_by = 0;
  std::uint64_t seen = 0;      ///< the inbox counter when it failed
  std::uint64_t expected = 0;  ///< the count an epoch wait needed; a value wait's operand

  static constexpr std::uint32_t exited_bit = 0x80000000u;
};

/// How a signal changes the counter it targets: add to it (the epoch waits' counting), or set it (a flag or a
/// step number, read by value waits).
enum class signal_kind : std::uint32_t { add = 0, set = 1 };
/// How a value wait compares the counter with its operand. ge and gt are wrap-safe (the difference's sign, as
/// NCCL's tests): a counter that wrapped past 2^64 still compares as later.
enum class compare : std::uint32_t { eq = 0, ne = 1, ge = 2, gt = 3 };

/// Who takes part in a call (NCCL's thread-group scopes): one thread, one warp (every lane, full warps), or one
/// block (every thread). In a warp- or block-scoped call every thread of the group calls with the same arguments;
/// one thread signals or waits for the group; a signal comes after the group's earlier writes, and the group's
/// later reads come after the wait; every thread returns the group's result. On the host the group is the thread.
struct thread_scope {};
struct warp_scope {};
struct block_scope {};

namespace detail {
struct signal_release;

/// Whether a counter reading satisfies a value wait.
PVMM_HOST_DEVICE inline bool compare_holds(std::uint64_t seen, compare c, std::uint64_t value) {
  const auto ahead = static_cast<std::int64_t>(seen - value);
  switch (c) {
    case compare::eq:
      return seen == value;
    case compare::ne:
      return seen != value;
    case compare::ge:
      return ahead >= 0;
    case compare::gt:
      return ahead > 0;
  }
  return false;
}

}  // namespace detail

/// A symmetric window as a kernel sees it. Trivially copyable: pass it by value. Built by symmetric_window::view().
/// Two kinds of memory, kept apart (docs/design.md, "peer-writable vs owner-only memory"): the pads, which every
/// peer maps read-write and which hold only inbox counters, and this rank's owner-only block (`own`), a device
/// allocation no peer maps, which holds every pointer, count and record this rank reads: the expected counters,
/// the error record and the peer pointer table.
struct window_view {
  char* base = nullptr;              ///< the flat reservation: rank r's data at base + r * stride
  std::uint64_t stride = 0;          ///< bytes between data slots
  void* const* peers = nullptr;      ///< device-resident table in `own`: peer(r), nullptr where r is unmapped
  char* pad_base = nullptr;          ///< the pads' flat reservation: rank r's pad at pad_base + r * pad_stride
  std::uint64_t pad_stride = 0;      ///< bytes between pads
  std::uint64_t* own = nullptr;      ///< this rank's owner-only block (own_bytes(); never mapped by a peer)
  std::int32_t rank = 0;             ///< this rank
  std::int32_t size = 0;             ///< ranks
  std::int32_t channels = 0;         ///< signal channels per rank pair
  std::uint32_t wall_clock_khz = 0;  ///< AMD's wall clock rate (hipDeviceAttributeWallClockRate); unused elsewhere
  /// The host's abort words (page-locked host memory this device reads; nullptr: none): abort_word[0] is r + 1 once
  /// rank r aborted this rank's team; abort_word[1 + r] is nonzero once this rank's host saw rank r's process exit
  /// (a node-local peer). Every wait looks at the first and at its own peer's with its clock, and ends at once,
  /// recording which (signal_error::aborted_by): a peer that exits after its part is done ends no wait for another.
  const std::uint32_t* abort_word = nullptr;

  /// Rank r's data as mapped here (the table's entry where there is one: nullptr for an unmapped peer).
  PVMM_HOST_DEVICE void* peer(int r) const {
    if (peers != nullptr) return peers[r];
    return base + static_cast<std::uint64_t>(r) * stride;
  }
  PVMM_HOST_DEVICE void* local() const { return peer(rank); }

  // Layouts (the host side's pad_bytes() / own_bytes() agree). A rank's pad, peer-writable: inbox[channels][size],
  // then stream_inbox[channels][size]. Its owner-only block: expected[channels][size], one signal_error, then the
  // pointer table (size entries).
  PVMM_HOST_DEVICE std::uint64_t* inbox(int owner, int channel, int src) const {
    return reinterpret_cast<std::uint64_t*>(pad_base + static_cast<std::uint64_t>(owner) * pad_stride) +
           static_cast<std::uint64_t>(channel) * size + src;
  }
  /// The driver path's counter (window_options::stream_signals = driver: the host API's put_signal writes how many
  /// signals rank `src` has sent `owner` on `channel`, and the driver's stream wait compares it). Device code uses
  /// inbox(); the two never mix.
  PVMM_HOST_DEVICE std::uint64_t* stream_inbox(int owner, int channel, int src) const {
    return inbox(owner, channel, src) + static_cast<std::uint64_t>(channels) * size;
  }
  PVMM_HOST_DEVICE std::uint64_t* expected(int channel, int src) const {
    return own + static_cast<std::uint64_t>(channel) * size + src;
  }
  PVMM_HOST_DEVICE signal_error* error() const {
    return reinterpret_cast<signal_error*>(own + static_cast<std::uint64_t>(channels) * size);
  }
  /// Bytes of one rank's pad (peer-writable: the inbox and stream-inbox counters) for `channels` channels and
  /// `ranks` ranks.
  static constexpr std::uint64_t pad_bytes(int channels, int ranks) {
    return 16 * static_cast<std::uint64_t>(channels) * static_cast<std::uint64_t>(ranks);
  }
  /// Where the pointer table starts in the owner-only block, and the block's bytes.
  static constexpr std::uint64_t table_offset(int channels, int ranks) {
    return 8 * static_cast<std::uint64_t>(channels) * static_cast<std::uint64_t>(ranks) + sizeof(signal_error);
  }
  static constexpr std::uint64_t own_bytes(int channels, int ranks) {
    return table_offset(channels, ranks) + sizeof(void*) * static_cast<std::uint64_t>(ranks);
  }

  /// Signals rank `to` on `channel`: the writes this thread made before are visible to `to` once its wait sees it.
  PVMM_HOST_DEVICE void signal(int to, int channel) const { detail::signal_add_release(inbox(to, channel, rank)); }
  /// Adds `value` to, or sets to `value`, this rank's counter in `to`'s inbox on `channel`, with release order. A set
  /// counter is for value waits (wait_value); epoch waits on the same (peer, channel) count adds only.
  PVMM_HOST_DEVICE void signal(int to, int channel, signal_kind kind, std::uint64_t value) const {
    if (kind == signal_kind::set)
      detail::signal_store_release(inbox(to, channel, rank), value);
    else
      detail::signal_add_release(inbox(to, channel, rank), value);
  }
  /// The group's signal (thread_scope, warp_scope, block_scope): after every thread of the group wrote.
  template <class Scope>
  PVMM_HOST_DEVICE void signal(Scope, int to, int channel, signal_kind kind = signal_kind::add,
                               std::uint64_t value = 1) const {
    detail::group<Scope>::sync();
    if (detail::group<Scope>::leader()) {
      fence_for_group();
      signal(to, channel, kind, value);
    }
  }

  /// The counter rank `from` keeps in this rank's inbox on `channel` (an acquire load).
  PVMM_HOST_DEVICE std::uint64_t read_signal(int from, int channel) const {
    return detail::signal_load_acquire(inbox(rank, channel, from));
  }

  /// Waits until rank `from`'s counter on `channel` compares true with `value` (`c`), at most `timeout_ns`; consumes
  /// no epoch (the counter is read, never counted). False on expiry or abort (recorded in error()).
  PVMM_HOST_DEVICE bool wait_value(int from, int channel, compare c, std::uint64_t value,
                                   std::uint64_t timeout_ns) const {
    return spin(from, channel, c, value, detail::signal_clock_ns(wall_clock_khz), timeout_ns);
  }
  template <class Scope>
  PVMM_HOST_DEVICE bool wait_value(Scope, int from, int channel, compare c, std::uint64_t value,
                                   std::uint64_t timeout_ns) const {
    bool ok = true;
    if (detail::group<Scope>::leader()) ok = wait_value(from, channel, c, value, timeout_ns);
    return detail::group<Scope>::all(ok);
  }

  /// Waits for the next signal from rank `from` on `channel`, at most `timeout_ns`. False on expiry (recorded in
  /// error(); the epoch is consumed either way).
  PVMM_HOST_DEVICE bool wait(int from, int channel, std::uint64_t timeout_ns) const {
    return wait_since(from, channel, detail::signal_clock_ns(wall_clock_khz), timeout_ns);
  }

  /// The group's wait: one thread waits, then every thread of the group returns its result.
  template <class Scope>
  PVMM_HOST_DEVICE bool wait(Scope, int from, int channel, std::uint64_t timeout_ns) const {
    bool ok = true;
    if (detail::group<Scope>::leader()) ok = wait(from, channel, timeout_ns);
    return detail::group<Scope>::all(ok);
  }

  /// Every rank signals every other on `channel`, then waits for each; false when any wait expired. One deadline
  /// bounds the whole call (`timeout_ns` from its start, however many peers are silent); once it has passed, each
  /// remaining wait still looks once and consumes its epoch. Called by one thread per rank per channel at a time.
  PVMM_HOST_DEVICE bool barrier(int channel, std::uint64_t timeout_ns) const {
    const std::uint64_t start = detail::signal_clock_ns(wall_clock_khz);
    for (int r = 0; r < size; ++r)
      if (r != rank) signal(r, channel);
    bool ok = true;
    for (int r = 0; r < size; ++r)
      if (r != rank && !wait_since(r, channel, start, timeout_ns)) ok = false;
    return ok;
  }
  /// The group's barrier: after every thread of the group wrote, one thread runs the barrier for it.
  template <class Scope>
  PVMM_HOST_DEVICE bool barrier(Scope, int channel, std::uint64_t timeout_ns) const {
    detail::group<Scope>::sync();
    bool ok = true;
    if (detail::group<Scope>::leader()) {
      fence_for_group();
      ok = barrier(channel, timeout_ns);
    }
    return detail::group<Scope>::all(ok);
  }

 private:
  // wait(), with its deadline `timeout_ns` after `start` (a signal_clock_ns reading): the next epoch claimed, then
  // awaited.
  PVMM_HOST_DEVICE bool wait_since(int from, int channel, std::uint64_t start, std::uint64_t timeout_ns) const {
    std::uint64_t* const consumed = expected(channel, from);
    const std::uint64_t target = *consumed + 1;
    *consumed = target;
    return spin(from, channel, compare::ge, target, start, timeout_ns);
  }

  // Spins until the counter compares true. The clock and the abort word are read, and host code yields its core,
  // once every 64 loads: host ranks (the host backend's stream threads) may share few cores.
  PVMM_HOST_DEVICE bool spin(int from, int channel, compare c, std::uint64_t value, std::uint64_t start,
                             std::uint64_t timeout_ns) const {
    const std::uint64_t* const counter = inbox(rank, channel, from);
    for (std::uint32_t loads = 1;; ++loads) {
      const std::uint64_t seen = detail::signal_load_acquire(counter);
      if (detail::compare_holds(seen, c, value)) return true;
      if (loads % 64 != 0) continue;
#if !defined(PVMM_DEVICE_CUDA) && !defined(PVMM_DEVICE_HIP)
      std::this_thread::yield();
#endif
      const std::uint32_t aborted = ended_by(from);
      if (aborted != 0 || detail::signal_clock_ns(wall_clock_khz) - start >= timeout_ns) {
        // A signal written before the abort (a peer that signalled, then exited) or just before the deadline still
        // counts: one last look at the counter, ordered after the abort words' and the clock's.
        detail::fence_system();
        const std::uint64_t last = detail::signal_load_acquire(counter);
        if (detail::compare_holds(last, c, value)) return true;
        record_failure(from, channel, aborted, last, value);
        return false;
      }
    }
  }

  // The error record's first failure (a benign race between two channels' waiters: the first wins).
  PVMM_HOST_DEVICE void record_failure(int from, int channel, std::uint32_t aborted, std::uint64_t seen,
                                       std::uint64_t value) const {
    signal_error* e = error();
    if (e->failed != 0) return;
    e->rank = from;
    e->channel = channel;
    e->aborted_by = aborted;
    e->seen = seen;
    e->expected = value;
    e->failed = 1;
  }
  friend struct detail::signal_release;

  // What ends a wait for rank `from` early: its team aborted (abort_word[0]: the aborting rank + 1), or `from`'s
  // process exited (abort_word[1 + from]: from + 1 with signal_error::exited_bit); 0 while neither.
  PVMM_HOST_DEVICE std::uint32_t ended_by(int from) const {
    if (abort_word == nullptr) return 0;
    if (const std::uint32_t aborted = detail::abort_word_load(abort_word)) return aborted;
    if (detail::abort_word_load(abort_word + 1 + from) != 0)
      return (static_cast<std::uint32_t>(from) + 1) | signal_error::exited_bit;
    return 0;
  }

  // A group's signal publishes every thread's writes: the leader's system-scope fence after the group's barrier
  // makes them part of its release (NCCL's pattern: __syncthreads, then thread 0's fence and release store).
  PVMM_HOST_DEVICE static void fence_for_group() {
#if defined(PVMM_DEVICE_CUDA) || defined(PVMM_DEVICE_HIP)
    __threadfence_system();
#endif
  }
};

namespace detail {
/// The stream-ordered operations the host API enqueues (symmetric_window::put_signal / wait_signal / barrier), and
/// the driver path's release of a stream wait at its deadline or abort (src/team/stream_waits.cpp).
enum class signal_op : std::uint32_t { put = 0, wait = 1, barrier = 2, release = 3 };

/// The driver path's deadline: the host's watchdog raises rank `from`'s stream counter on `channel` in this rank's
/// pad to `target` (signal_raise: a peer's later count is kept, and its late write of `target` changes
/// nothing, so a late signal never satisfies a later step), which releases the driver's stream wait. A counter
/// below `target` is the wait's failure, recorded first as a spin's (`aborted_by` as signal_error's).
struct signal_release {
  PVMM_HOST_DEVICE static bool run(const window_view& v, int from, int channel, std::uint64_t target,
                                   std::uint32_t aborted_by) {
    std::uint64_t* const counter = v.stream_inbox(v.rank, channel, from);
    const std::uint64_t seen = signal_load_acquire(counter);
    if (compare_holds(seen, compare::ge, target)) return true;
    // Recorded before the stream is let go: the host that synchronises the stream then reads the failure.
    v.record_failure(from, channel, aborted_by, seen, target);
    fence_system();
    (void)signal_raise(counter, target);
    return false;
  }
};

/// Runs one of them: the one dispatch shared by the signal kernel (signal_kernels.cu) and the host backend's host
/// function. An expiry is in the view's error record, and false. `value` and `aborted_by` are a release's.
PVMM_HOST_DEVICE inline bool run_signal_op(const window_view& view, signal_op op, int peer, int channel,
                                           std::uint64_t timeout_ns, std::uint64_t value = 0,
                                           std::uint32_t aborted_by = 0) {
  switch (op) {
    case signal_op::release:
      return signal_release::run(view, peer, channel, value, aborted_by);
    case signal_op::put:
      view.signal(peer, channel);
      return true;
    case signal_op::wait:
      return view.wait(peer, channel, timeout_ns);
    case signal_op::barrier:
      return view.barrier(channel, timeout_ns);
  }
  return false;
}
}  // namespace detail

}  // namespace pvmm
