// pvmm/team.hpp - teams: N ranks (processes or threads, on one node or many), each mapping every peer's memory.
//
// A team is made collectively from a bootstrap (pvmm/bootstrap.hpp) and this rank's device. It learns, in one
// allgather, who its members are: node, process, device, backend, and checks they agree. A symmetric_window is
// memory every rank contributes and every rank maps: rank r's contribution sits at base() + r * stride() in one
// flat reservation (as NVSHMEM's heap and NCCL's windows), and peer(r) gives the same address (a pointer table,
// as torch's SymmetricMemory and MSCCL++ keep).
//
// How memory travels (docs/design.md, "Teams"):
// - within a node, POSIX fds over pvmm's fd transport, exported at the step that sends them and closed as soon as
//   the peer took its reference: each process holds O(1) fds at any moment whatever N is (the team's listener,
//   one connection, one fd in flight), never one per peer;
// - across nodes, fabric handles travel as bytes in the bootstrap's allgather where the backend has them;
// - a peer that cannot be reached (another node without fabric handles, a grant the driver refuses) is reported
//   per peer (mapped(r) is false, unmapped_reason(r) says why); the window still serves the others.
// Several ranks on one device are first-class: each maps the others' memory like any peer's.
// A node's ranks may live in different pid namespaces (containers of one pod): a rank's team endpoint serves only
// its peers (known by pid within one pid namespace, else by a secret shared at create); another process's
// connection to it is dropped and costs the step nothing.
//
// Every collective step (create, grow) is bounded by the caller's timeout; a rank that does not arrive makes
// the others fail with errc::timeout naming it, a rank that failed locally makes them fail with the error it
// reported (naming the rank), and mismatched options are errc::team_mismatch on every rank. Destruction and
// release() are local: they unmap and give back this rank's references and never wait for peers (peers keep
// the memory they mapped alive through their own mappings). Memory running out in any team call is
// errc::out_of_memory, never an exception, and the same errc on every rank (docs/design.md invariant 33). A
// negative timeout on one rank is errc::invalid_argument naming it on every rank (that rank takes part under the
// default 30 s bound so its refusal travels).
//
// abort() gives up from any thread: the step in progress on this rank returns errc::peer_lost within 100 ms,
// every later step fails at once, and the other ranks see peer_lost naming this rank at their step in progress or
// next one (the bootstrap's abort; a node-local peer waiting in a step's fd ring is also sent an abort message on
// the team's endpoint, so it returns within 100 ms too). Then every window and multicast object of the team unmaps the
// peers' memory and lets go of its imports (NCCL kept them after an abort: NVIDIA/nccl#1968), so a dead peer's memory
// is freed once no one maps it: peer(r) is nullptr for every other rank, unmapped_reason(r) says the team was aborted,
// and a team multicast's address() is nullptr. This rank's own slot stays mapped and readable, and so do the
// signal pads (they hold only counters; signal work queued before the abort runs on them and expires). Like every
// unmap, this is not ordered with work in flight (design.md, invariant 4): a thread or kernel still reading a peer's
// slot faults, so stop them first when the process goes on. abort() waits for nothing but a step in progress on this
// rank, which ends within 100 ms; it never waits for peers.
//
// Threading: a team and its windows are used by one thread at a time (collectives are ordered per rank), except
// team::abort(), which any thread may call, also while another runs a step; the accessors of a window (base,
// peer, mapped, unmapped_reason, ...) may be read from any thread while no release runs, also while a grow or
// abort() runs (a peer given up keeps its first unmapped_reason).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <pvmm/bootstrap.hpp>
#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>
#include <pvmm/stream.hpp>
#include <pvmm/team_device.hpp>
#include <pvmm/types.hpp>

namespace pvmm {

namespace detail {
struct team_state;
struct window_state;
struct window_access;
}  // namespace detail

class physical_allocation;
class growable_buffer;

/// What the team knows of one rank.
struct team_member {
  int rank = 0;
  int node = 0;        ///< 0 .. node_count() - 1, numbered by lowest rank
  int local_rank = 0;  ///< index among the ranks of its node
  std::int64_t pid = 0;
  int device = 0;            ///< its device ordinal, in its own process's numbering
  bool same_device = false;  ///< on this node and the same physical device as this rank (threads or processes)
};

struct team_options {
  int device = 0;  ///< this rank's device: its window memory lives there
  /// Local devices granted access to every slot this rank maps (empty: {device}). Each gets access where it can
  /// reach the memory (can_access_peer); a device that cannot is left out, not an error.
  std::vector<int> access_devices;
  std::chrono::milliseconds timeout{30000};  ///< bounds team creation
};

/// A team of ranks. Move-only; owns nothing global (its listener and the bootstrap reference only).
class team : detail::move_only {
 public:
  /// Collective: every rank calls it with its own options.
  static result<team> create(std::shared_ptr<bootstrap> ranks, const team_options& options = {});

  team() noexcept = default;  ///< empty (the private constructor below hides the implicit one)

  /// Gives the team's local resources back now (listener, bootstrap reference); errc::already_released when empty.
  status release() noexcept;
  /// Gives up, from any thread (see above): this rank's steps fail with errc::peer_lost from now on, and so do
  /// the other ranks'; the peers' memory is unmapped in every window. The team (and its windows, with their own
  /// slots) stays valid until released. Calling it again does nothing more. No effect on an empty team.
  void abort() noexcept;
  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  int rank() const noexcept;
  int size() const noexcept;
  int device() const noexcept;
  int node_count() const noexcept;
  const std::vector<team_member>& members() const noexcept;
  bool same_node(int peer) const noexcept;
  bootstrap& ranks() const noexcept;

  /// A split's color for a rank that joins no sub-team (any negative color says the same).
  static constexpr int no_color = -1;
  /// The parent bootstrap's tags from here on (to 32047, below MPI's least MPI_TAG_UB) carry sub-teams'
  /// collectives: a caller's own send/receive on a team's bootstrap keeps below it while sub-teams are alive.
  static constexpr int split_tag_first = 30000;
  /// Collective over this team (MPI_Comm_split, NVSHMEM's team_split_strided): the ranks that pass the same color
  /// >= 0 form a sub-team, ranked by (key, rank in this team); a rank passing a negative color (no_color) gets an
  /// empty team. No new rendezvous: the sub-team's bootstrap runs over this team's (its allgathers as tagged
  /// send/receive through the sub-team's rank 0, one tag per split, see split_tag_first; threads, endpoints, store
  /// and mpi adapters all have them), under the caller's timeout, and is a bootstrap like any (ranks() of the
  /// sub-team; windows, heaps and further splits work over it, nested at most 8 deep). The sub-team has this
  /// team's options (device, access devices). Aborting either gives up on both (they share one transport); a
  /// member that is lost or late makes the others fail within the timeout as any team step. The sub-team keeps
  /// this team's bootstrap alive, not the team itself. The sub-team's bootstrap's send/receive are this team's
  /// bootstrap's, to the parent rank with the same tag (one tag space: keep a caller's tags below split_tag_first).
  /// Errors: the colors' allgather as every team step (timeout, peer_lost, team_mismatch naming the rank); then
  /// team::create's over the sub-team.
  result<team> split(int color, int key, std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));

 private:
  friend class symmetric_window;
  explicit team(std::shared_ptr<detail::team_state> state) noexcept;
  std::shared_ptr<detail::team_state> state_;
};

/// How a window's stream-ordered put_signal, wait_signal and barrier run (the host API; kernels always use
/// pvmm/team_device.hpp's functions). Measured in docs/performance.md ("Stream-ordered signals: kernel or driver").
enum class stream_signal_path : int {
  /// A one-thread kernel running team_device.hpp's bounded spin per call. Its counters are the ones device code
  /// uses, so host calls and kernels may share a channel; it can be captured in a graph. A spinning kernel holds
  /// the GPU: processes that time-share a GPU pay a time slice (milliseconds) per wait.
  kernel = 0,
  /// The driver's stream memory operations (cuStreamWriteValue64 / cuStreamWaitValue64): a wait costs no GPU time
  /// while it waits, so processes sharing a GPU pay microseconds, not a time slice. The driver's waits have no
  /// deadline, so a watchdog thread of this window keeps each one's (timed, as the kernel path's, from when the
  /// stream reaches the wait; looked at every 10 ms): at its deadline, at team::abort or when the
  /// waited-for peer's process exits, it releases the wait and records the failure as the kernel path does
  /// (signal_status: the same timeout and peer_lost errors). Its counters are the host API's own (the pad's
  /// stream inbox): a channel used this way is not also used by device code, and a rank's puts to one peer on one
  /// channel come from one stream (each writes a count fixed when enqueued); not capturable in a graph
  /// (not_supported: the counts are fixed when enqueued). Every call holds the window until its stream has passed
  /// it, seen by the next pvmm call or the watchdog. The first such window of a process makes a context of pvmm's own
  /// on the device for the releases (a stream wait blocks its hardware queue, which other streams of the caller's
  /// context may share), which costs device memory and up to a second once.
  driver = 1,
};

struct window_options {
  std::size_t size = 0;  ///< bytes this rank contributes (> 0; rounded up to the granularity; may differ per rank)
  /// Room each slot keeps for grow(): the same on every rank that passes one; 0 means the largest size any rank
  /// asks for (agreed in create, so per-rank sizes alone work; a rank above another's max_size is team_mismatch).
  std::size_t max_size = 0;
  std::chrono::milliseconds timeout{30000};  ///< bounds the collective create
  /// Signal channels (pvmm/team_device.hpp): > 0 gives every rank a signal pad of that many channels per peer, in a
  /// second flat reservation beside the data (so peer(r) keeps its layout), zeroed on every rank before create
  /// returns anywhere (no signal can land before the zeroing), and a device-resident pointer table. The same on
  /// every rank (else team_mismatch). 0 (the default): no pad, one collective step and one granule less per rank.
  int signal_channels = 0;
  /// How put_signal, wait_signal and barrier run (above): the same on every rank (else team_mismatch); `driver`
  /// needs a backend with the driver's stream memory operations (else not_supported on every rank). No effect
  /// without signal channels.
  stream_signal_path stream_signals = stream_signal_path::kernel;
};

/// Memory every rank contributes and maps. Move-only.
class symmetric_window : detail::move_only {
 public:
  /// Collective over `members`: every rank calls it, in the same order as its other collectives.
  static result<symmetric_window> create(const team& members, const window_options& options);

  /// Collective, as create, but this rank's slot is memory the caller made (NCCL's ncclCommWindowRegister,
  /// MSCCL++'s registerMemory): a physical allocation, or a growable buffer's chunks (its size() now, mapped back
  /// to back). No copy: the window maps that memory and holds its own reference (as a mapping does); the caller
  /// keeps ownership and may release its owner at once. options.size is 0 or the memory's size; max_size as in
  /// create (0: the largest size any rank contributes). Memory that cannot be shared is refused on this rank before
  /// any exchange, and every rank fails at once naming it: empty memory (invalid_argument), another device's or
  /// host memory (invalid_argument: it must be on the team's device()), not exportable as the team needs
  /// (handle_type_not_requested: posix_fd when a peer is on this node, fabric when one is on another node and the
  /// device has fabric handles), a size or chunk not a multiple of every rank's granularity (invalid_size). A rank
  /// calling create while another calls create_from is team_mismatch on every rank.
  /// A later resize of the growable buffer does not change the window: it keeps (and keeps alive) the chunks it
  /// mapped, and new chunks are not in it (make a new window). grow() works on such a window: the slot grows past
  /// the caller's memory with memory the window allocates.
  static result<symmetric_window> create_from(const team& members, const physical_allocation& memory,
                                              const window_options& options = {});
  static result<symmetric_window> create_from(const team& members, const growable_buffer& memory,
                                              const window_options& options = {});

  symmetric_window() noexcept = default;  ///< empty (the private constructor below hides the implicit one)

  /// Unmaps every slot and gives this rank's references back now (local: never waits for peers).
  status release() noexcept;
  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  /// Collective: every rank grows its slot to `new_size` bytes (rounded up; at most max_size, not below size()).
  status grow(std::size_t new_size, std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));

  void* base() const noexcept;          ///< the flat reservation: rank r at base() + r * stride()
  std::size_t stride() const noexcept;  ///< bytes between slots (max_size rounded up to every rank's granularity)
  int rank() const noexcept;
  int size() const noexcept;                     ///< ranks
  std::size_t size_of(int rank) const noexcept;  ///< bytes rank `rank` contributes now
  void* local() const noexcept { return peer(rank()); }
  /// Where rank `rank`'s memory is mapped here, or nullptr when it is not (see unmapped_reason).
  void* peer(int rank) const noexcept;
  bool mapped(int rank) const noexcept { return peer(rank) != nullptr; }
  /// Why rank `rank` is not mapped here (empty when it is).
  std::string unmapped_reason(int rank) const;
  /// peer(r) for every rank, in rank order.
  std::vector<void*> pointer_table() const;

  // ---- Signals (the window made with window_options::signal_channels > 0; else invalid_argument) ----
  // Stream-ordered: each call enqueues on `on` (a stream of this rank's team device) and returns; the work runs
  // when the stream reaches it (window_options::stream_signals: on the kernel path, host backend: a host function;
  // cuda and hip on HIP's NVIDIA platform: a one-thread kernel of the embedded PTX signal module; on the driver path,
  // the driver's stream write and wait; hip on AMD: not_supported, which needs a code object per gfx target).
  // A wait that expires on the stream records it and lets the stream go on: signal_status() reports it. Every wait
  // is bounded by its timeout (a dead peer never holds a stream, or a GPU, forever), and ends at once when this
  // rank's team aborts or a node-local peer's process exits (the abort word, team_device.hpp); bad peers, channels
  // or timeouts are refused before anything is enqueued. On the kernel path the device functions of
  // pvmm/team_device.hpp use the same counters (view()). Queued work holds the window until it has run; a window (or
  // team) released meanwhile is given back on a caller's thread after that: at the next enqueue, release or
  // query_live_objects(). Ranks sharing a process and a device (thread ranks on one GPU): on the GPU backends,
  // wait_signal and barrier are not_supported on every rank of such a window, naming two such ranks (checked before the
  // arguments). CUDA does not guarantee that kernels on different streams of one context run at the same time, and a
  // waiting kernel can keep its sibling from starting until the wait expires. The host backend's streams are threads,
  // so it allows them. Processes sharing a GPU are time-sliced, which runs each one's kernels: to share a GPU, run one
  // process per rank.

  /// The window as kernels see it: pass by value (pvmm/team_device.hpp). peers points at device_pointer_table().
  result<window_view> view() const;
  /// The table of peer(r) for every rank in the team device's memory (in this rank's owner-only block, which no
  /// peer maps; nullptr for an unmapped peer), rewritten at create and after every grow; stays valid while the
  /// window lives.
  result<void* const*> device_pointer_table() const;
  /// Enqueues: signal rank `peer` on `channel` (the stream's earlier work is visible to its matching wait).
  status put_signal(int peer, int channel, stream_ref on) const;
  /// Enqueues: wait for the next signal from `peer` on `channel`, at most `timeout` once the stream reaches it.
  status wait_signal(int peer, int channel, stream_ref on, std::chrono::milliseconds timeout) const;
  /// Enqueues: signal every peer on `channel`, then wait for each; one deadline bounds the whole barrier (`timeout`
  /// from when the stream reaches it, however many peers are silent or dead). The argument order of every
  /// signalling wait: channel, stream, timeout.
  status barrier(int channel, stream_ref on, std::chrono::milliseconds timeout) const;
  /// errc::timeout naming the rank and channel of the first wait that expired on this rank (stream-ordered or in a
  /// kernel) since the window was made or clear_signal_status() last ran (errc::peer_lost naming the rank where an
  /// abort or a peer's exit ended it), else success. Reads the error record (in
  /// this rank's owner-only memory: no peer can write it): synchronise the streams that wait first. Blocks (a copy
  /// on the device).
  status signal_status() const;
  /// signal_status(), then the record cleared: a later expiry is reported again, so the host can tell whether the
  /// barriers after a mark succeeded. Call it while no wait of this rank runs (after synchronising the streams that
  /// wait): an expiry recorded between the read and the clear would be lost.
  status clear_signal_status() const;

 private:
  friend class team_multicast;
  friend struct detail::window_access;  // the heap's view of the window's state
  static result<symmetric_window> create_over(const team& members,
                                              const std::vector<const physical_allocation*>& memory,
                                              const window_options& options, const char* what);
  explicit symmetric_window(std::shared_ptr<detail::window_state> state) noexcept;
  std::shared_ptr<detail::window_state> state_;  // shared only so the owner needs no complete type to be destroyed
};

}  // namespace pvmm
