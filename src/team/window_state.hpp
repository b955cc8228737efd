// A symmetric window's state: the flat reservation, and per rank the chunks mapped in its slot (this rank's own
// allocations, or its imports of a peer's) or why the peer is not mapped.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/allocation.hpp>
#include <pvmm/pinned.hpp>
#include <pvmm/reservation.hpp>

#include "core/operation.hpp"
#include "observe/observe.hpp"
#include "team/stream_waits.hpp"
#include "team/team_state.hpp"

namespace pvmm::detail {

// What each rank asks of a new window: its own size, and the max_size it passed (0: none).
struct window_request {
  std::uint64_t size = 0;
  std::uint64_t max_size = 0;
  std::uint64_t signal_channels = 0;  // window_options::signal_channels: the same on every rank
  std::uint64_t stream_signals = 0;   // window_options::stream_signals: the same on every rank
};

// What each rank contributes to a window over its own memory (create_from; fixed layout, a size unlike
// window_request's, so a rank calling create beside one calling create_from fails the allgather with
// team_mismatch on every rank).
struct from_request {
  std::uint64_t size = 0;             // the memory's bytes, all chunks
  std::uint64_t max_size = 0;         // as window_options::max_size
  std::uint64_t chunks = 0;           // how many chunk steps this rank needs
  std::uint64_t signal_channels = 0;  // window_options::signal_channels: the same on every rank
  std::uint64_t stream_signals = 0;   // window_options::stream_signals: the same on every rank
};

// What each rank says of its new chunk (fixed layout; travels in the step's all_gather).
struct chunk_record {
  std::uint64_t offset = 0;  // where the chunk goes in the rank's slot
  std::uint64_t size = 0;    // 0: the rank adds nothing this step
  std::int32_t has_fabric = 0;
  std::int32_t reserved = 0;
  fabric_handle fabric;
  char no_fabric[192] = {};  // why the rank's chunk has no fabric handle (empty: it has one, or never had)
};

struct window_slot {
  std::size_t size = 0;                     // bytes the rank contributes now
  std::vector<physical_allocation> chunks;  // mapped back to back from the slot's start
  std::atomic<bool> mapped{false};          // read by the accessors on any thread while abort() may clear it
  bool given_up = false;  // a chunk could not be mapped: the peer stays unmapped (no half-mapped slot)
  std::string reason;     // why not mapped (guarded by map_lock; a given-up slot keeps its first)
};

/// A window's signals (window_options::signal_channels > 0). Two kinds of memory, never mixed (docs/design.md,
/// invariant "peer-writable vs owner-only memory"): the pads, a second window every peer maps read-write, hold only
/// the inbox counters peers add to; the owner-only block, a device allocation of this rank's that is never
/// exported, holds everything this rank reads as its own (expected counters, error record, pointer table).
struct window_signals {
  symmetric_window pads;           // rank r's inbox at pads.base() + r * pads.stride()
  physical_allocation own_memory;  // the owner-only block's memory (exportable as nothing)
  address_reservation own_range;   // where it is mapped, for this rank's device only (released before the memory)
  // The abort words: page-locked host memory the device reads (team_device.hpp): the team's abort, then one per
  // rank whose process exited.
  pinned_allocation abort_memory;
  std::size_t abort_words = 0;
  const std::uint32_t* abort_on_device = nullptr;  // where the team's device reads them
  int channels = 0;
  std::uint32_t wall_clock_khz = 0;
  std::array<int, 2> same_context_ranks{-1, -1};  // the first two ranks in one process on one device (-1: none)
  // The driver path (window_options::stream_signals = driver), else null. Last: destroyed first, it waits for the
  // releases it enqueued, which touch the pads and the owner-only block.
  std::unique_ptr<stream_waits> driver;

  std::uint64_t* own() const noexcept { return static_cast<std::uint64_t*>(own_range.address()); }
  /// Raises the abort word (team_device.hpp: r + 1 when rank r aborted, with signal_error::exited_bit when its
  /// process exited): every device wait of this window ends within its next look. The first raise wins.
  void raise_abort(int rank, bool exited = false) noexcept;
};

struct window_state final : peer_mappings {
  std::shared_ptr<team_state> team;
  // Locks (pvmm never calls user code while holding one): map_lock guards the slots' chunk lists and mappings,
  // held only around one map or unmap, by a step and by abort's unmapping. A step is never a lock: `in_step` marks
  // one in progress (a second at once is busy), so abort() never waits on a bootstrap call.
  std::mutex map_lock;
  std::atomic<bool> in_step{false};
  address_reservation range;
  std::size_t stride = 0;
  std::size_t max_size = 0;
  std::size_t granularity = 0;  // this rank's allocation granularity
  handle_types handles = handle_types::none;
  std::string fabric_refused;  // why this rank's memory has no fabric handle though the device has them
  std::vector<window_slot> slots;
  std::unique_ptr<window_signals> signals;  // set once at create, before the window is returned
  std::atomic<bool> signals_ready{false};   // `signals` is set: the peer watch's thread may read it
  // Set on a window that serves as another's signal pads: abort() leaves its peers mapped (they hold only counters,
  // and stream-ordered work already queued may still add to them; the data window's peers are unmapped).
  std::atomic<bool> keep_peers_on_abort{false};
  observe::scoped_label label;  // names `range` in memory snapshots (after it: cleared first)

  int rank() const noexcept { return team->rank(); }
  /// Rank `owner`'s slot unmapped here and its chunks let go, for good: `why` is its unmapped_reason from now on.
  /// The one way a peer becomes unmapped (unreachable, a chunk that would not map, abort).
  void give_up(int owner, std::string why) noexcept;
  void give_up_locked(int owner, std::string why) noexcept;  ///< give_up with map_lock held
  /// How many chunks each slot holds now (what a failed step returns to).
  std::vector<std::size_t> chunk_counts();
  /// A failed step undone: every slot's chunks past `kept` unmapped and let go (a slot left empty is unmapped).
  void undo_step(const std::vector<std::size_t>& kept) noexcept;
  /// abort(): every peer's slot given up; this rank's own slot stays.
  void unmap_peers(const std::string& why) noexcept override;
  /// The peer watch saw rank `rank`'s process exit: the abort word ends the device waits at once.
  void peer_exited(int rank) noexcept override {
    if (signals_ready.load(std::memory_order_acquire)) signals->raise_abort(rank, true);
  }
};

/// The neutral layer's view of a window's state (the heap's allgathers, its grow unit).
struct window_access {
  static window_state* of(const symmetric_window& w) noexcept { return w.state_.get(); }
};

/// Marks one step of `w` in progress for its lifetime; entered() is false when another thread's step is.
class step_guard {
 public:
  explicit step_guard(window_state& w) noexcept : w_(w), entered_(!w.in_step.exchange(true)) {}
  ~step_guard() {
    if (entered_) w_.in_step.store(false);
  }
  step_guard(const step_guard&) = delete;
  step_guard& operator=(const step_guard&) = delete;
  bool entered() const noexcept { return entered_; }

 private:
  window_state& w_;
  bool entered_;
};

/// The largest signal_channels a window takes (its pad holds 16 * channels * ranks bytes).
constexpr int max_signal_channels = 1024;
/// Collective, the last step of create: every rank's pad made, its owner-only block made, both zeroed and the
/// pointer table written, then one agreement, so no rank returns (and signals) before every pad is zero; nothing
/// after that agreement can fail. The channels were agreed before.
status attach_signals(const team& members, window_state& w, int channels, stream_signal_path path, deadline until,
                      const operation& op);
/// Why this rank cannot take `path` for a window with `channels` signal channels (invalid value, or the backend
/// lacks the driver's stream memory operations), or nothing: checked before the window's first exchange.
std::optional<error> signal_path_refusal(int rank, int device, int channels, stream_signal_path path,
                                         const operation& op);
/// Every rank's stream_signals (window_request or from_request records) is rank 0's, else team_mismatch naming both.
template <class Records>
status check_same_path(const Records& all, const operation& op) {
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r].stream_signals != all[0].stream_signals)
      return op.fail(errc::team_mismatch,
                     fmt::format("rank {} asked for stream_signals {}, rank 0 for {} (0: kernel, 1: driver)", r,
                                 all[r].stream_signals, all[0].stream_signals));
  return {};
}
/// Rewrites this rank's device-resident pointer table from the slots (after a grow), then agrees: every rank
/// returns the same outcome (a copy that failed on one rank fails the step on every rank).
status refresh_pointer_table(window_state& w, deadline until, const operation& op);

/// The stride every rank's window agrees on, from every rank's request (the same checks on every rank).
result<std::size_t> stride_of(const std::vector<window_request>& all, std::size_t unit, const operation& op);

/// The first step of window create: every rank's size and max_size allgathered; the stride they agree on (the
/// max_size every rank passed, or the largest size any rank asked for where none passed one), rounded up.
/// `exchanged` as all_gather's: set once the sizes' allgather itself succeeded.
result<std::size_t> agree_max_size(window_state& w, const window_options& options, deadline until, const operation& op,
                                   bool* exchanged = nullptr);

/// One collective step of a window: every rank adds one chunk (this rank's is `mine`, maybe empty when its size
/// does not change) at `offset` in its slot, and every rank maps every reachable peer's new chunk. Peers that
/// cannot be reached are recorded in their slot; failures of the step itself (a rank missing or failed) are
/// returned, the same on every rank. `failed` (or null) is this rank's local failure: it still takes part, so
/// every rank fails at once naming it.
status exchange_chunks(window_state& w, physical_allocation mine, std::size_t offset, std::size_t chunk_size,
                       const error* failed, deadline until, const operation& op);

/// Reserves the window's flat range (stride x ranks) into `w.range`. A rank that cannot still takes part in the
/// first chunk exchange, announcing its failure, so every other rank fails at once naming it; it returns its own
/// error (or the step's, if the step failed before). stride_of bounded stride x ranks.
status reserve_range(window_state& w, deadline until, const operation& op);

}  // namespace pvmm::detail
