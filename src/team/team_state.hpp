// What a team holds: its bootstrap, what it learnt of every rank, and the listener its node-local peers send fds
// to. Shared by the team owner and its windows (a window keeps its team's state alive).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <pvmm/endpoint.hpp>
#include <pvmm/team.hpp>

#include "core/operation.hpp"
#include "team/peer_watch.hpp"

namespace pvmm::detail {

/// Every rank's identity as allgathered at team creation (fixed layout; the bytes travel between processes).
struct member_record {
  static constexpr std::uint32_t magic_value = 0x4d545650;  // "PVTM"
  static constexpr std::uint32_t version_value = 3;         // 3: the failure travels in the step envelope; a secret
  std::uint32_t magic = magic_value;
  std::uint32_t version = version_value;
  std::int32_t rank = 0;
  std::int32_t size = 0;
  std::int32_t node = 0;
  std::int32_t device = 0;
  std::int64_t pid = 0;
  std::uint64_t team_id = 0;  // rank 0's is the team's
  char backend[16] = {};
  char identifier[64] = {};                   // the device's PCI id (host backend: boot id and ordinal)
  std::uint64_t granularity = 0;              // of its window memory (device memory, exportable)
  std::uint64_t reservation_granularity = 0;  // of its address reservations
  std::uint8_t posix_fd = 0;
  std::uint8_t fabric = 0;
  std::uint8_t reserved[6] = {};
  std::uint64_t pid_namespace = 0;  // the inode of its /proc/self/ns/pid: pids mean the same where these match
  std::uint64_t secret[2] = {};     // random; its ring messages carry it (known where its pid means nothing here)
};

/// What team::abort() reaches from any thread: a window or multicast object made over the team, which unmaps
/// its peers' memory at once (not ordered with work in flight, as every unmap) and keeps its own.
struct peer_mappings {
  virtual ~peer_mappings() = default;
  /// Unmaps and lets go of every peer's memory mapped here; `why` is what the accessors say of it afterwards.
  virtual void unmap_peers(const std::string& why) noexcept = 0;
  /// Rank `rank`'s process exited (the team's peer watch): device waits on it end now (a window's abort word).
  virtual void peer_exited(int) noexcept {}
};

struct team_state {
  std::shared_ptr<bootstrap> ranks;
  team_options options;
  std::vector<team_member> members;
  std::vector<member_record> records;
  std::uint64_t id = 0;
  int node_count = 0;
  std::size_t slot_unit = 0;                  // the largest granularity of any rank: strides are multiples of it
  handle_types handles = handle_types::none;  // what this rank's window memory is exportable as
  ipc::listener listener;            // node-local peers send this rank their fds here (only with node-local peers)
  std::uint32_t next_step = 1;       // every collective step after creation (step 0), the same on every rank
  std::uint32_t splits = 0;          // team::split calls so far, the same on every rank (a sub-team's tag)
  std::atomic<bool> aborted{false};  // team::abort() from any thread: every wait looks at it between slices
  std::mutex mappings_lock;          // guards `mappings`: abort() reads it on any thread
  std::vector<std::weak_ptr<peer_mappings>> mappings;  // the live windows and multicast objects of this team
  // Last, so that it goes first: its thread reports into the members above until it is joined.
  std::mutex watch_lock;              // guards `watch` and `watch_tried`
  bool watch_tried = false;           // watch_peers() ran (at most once a team)
  std::unique_ptr<peer_watch> watch;  // the node-local peers' processes, once a window has signal pads

  int rank() const noexcept { return ranks->rank(); }
  int size() const noexcept { return ranks->size(); }
  /// The endpoint name rank `r` listens on.
  std::string endpoint_of(int r) const;
  /// The ranks on this rank's node, in rank order (this rank included).
  std::vector<int> node_ranks() const;
  /// Whether ranks `a` and `b` use the same physical device (on one node).
  bool same_device(int a, int b) const;
  /// Whether ranks `a` and `b` are one process (one node, one pid namespace, one pid).
  bool same_process(int a, int b) const;
  /// Those of `candidates` whose process this one can see (another process, same node and pid namespace) and
  /// that have exited (all of them: a rank that failed and left is named beside the one that died first); empty
  /// when none has (or none can be seen). Opens and closes at most one fd at a time.
  std::vector<int> exited(const std::vector<int>& candidates) const;
  /// Registers a window or multicast object for abort(); one made after an abort has its peers unmapped at once.
  void adopt(const std::shared_ptr<peer_mappings>& m);
  /// abort(): unmaps the peers' memory in every live window and multicast object of this team.
  void unmap_peers() noexcept;
  /// Starts the peer watch (peer_watch.hpp) unless it ran already: each node-local peer process that exits is
  /// reported to every live window and multicast object (peer_exited). Best effort; never fails the caller.
  void watch_peers() noexcept;
};

/// What travels between node-local ranks over the team's endpoints, with at most one fd (fixed layout).
struct team_message {
  static constexpr std::uint32_t magic_value = 0x47545650;  // "PVTG"
  /// The step of the message team::abort() sends every node-local peer: taken in any step's ring as the sender's
  /// abort (peer_lost naming it), so a rank waiting there hears of it at once.
  static constexpr std::uint32_t abort_step = 0xffffffffu;
  std::uint32_t magic = magic_value;
  std::uint32_t step = 0;
  std::uint64_t team_id = 0;
  std::int32_t rank = 0;
  std::int32_t has_fd = 0;
  std::int32_t failed = 0;  // the sender's errc when it has nothing to send because it failed (0: none)
  std::int32_t reserved = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint64_t secret[2] = {};  // the sender's member_record::secret
};
struct received_message {
  team_message header;
  owned_fd fd;  // when header.has_fd
};

/// What an aborted team's steps and unmapped peers say: "rank 3 aborted its team (team::abort)".
std::string aborted_reason(int rank);
/// errc::peer_lost when this rank's team was aborted (team::abort), else success.
status check_aborted(const team_state& t, const operation& op);
/// Connects to rank `to`'s listener (its pid checked where it means the same here) and sends `m` (its team, rank,
/// secret and fd flag filled in) with `fd` (-1: none). Errors name rank `to` and its pid.
status send_message(const team_state& t, int to, team_message m, int fd, deadline until, const operation& op);
/// team::abort(): tells every node-local peer's listener that this rank aborted (a message of abort_step), each
/// with one connect attempt that does not wait (a peer whose backlog is full hears it from the bootstrap instead).
void tell_abort(const team_state& t) noexcept;
/// Takes the next message of step `step` from one of `waiting` (`what` names it in errors), checked: the team
/// and step, a rank still awaited, the sender's pid (in this pid namespace) and secret, the fd it announced. A
/// connection that is no rank's (another user's, another process's, silent, or without the sender's secret) is
/// dropped and the wait goes on; a timeout then also says how many were dropped. A node-local rank's abort message
/// is errc::peer_lost naming it, in any step; so is this rank's own abort, seen between slices of every wait.
result<received_message> receive_message(team_state& t, std::uint32_t step, const std::vector<int>& waiting,
                                         const char* what, deadline until, const operation& op);
/// Ends a collective step: every rank's local outcome (`mine`, empty when it succeeded) allgathered, so every
/// rank returns the same failure naming the lowest failed rank, or success on all.
status agree(team_state& t, std::uint32_t step, const std::optional<error>& mine, const char* what, deadline until,
             const operation& op);

}  // namespace pvmm::detail
