// One collective step of a symmetric window (create or grow): every rank's new chunk described in one allgather,
// node-local chunks sent as POSIX fds over the team's endpoints in a ring, remote ones imported from fabric bytes.
//
// The fd ring: in round k each rank connects to the rank k places after it on its node, sends its fd and closes
// the connection, then takes the next connection that arrives, imports and maps it and closes the fd. So a process
// holds the team's listener, its own exported fd, one connection and one received fd at a time, whatever N is
// (issue 26: the fd count per process stays bounded as N grows; NCCL exports lazily for the same reason).
//
// Nothing a peer sends is trusted: every record is checked against the slot it grows, every message and every
// import against the record its rank allgathered. A rank that fails anywhere still runs the whole ring (its
// messages carry the failure and no fd) and the step ends in an agreement, so every rank returns the same
// outcome at once. A failed step is undone (this step's chunks unmapped), so the window stays as it was.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <pvmm/device.hpp>

#include <fmt/format.h>

#include "team/bootstrap_common.hpp"
#include "team/no_throw.hpp"
#include "team/team_exchange.hpp"
#include "team/window_state.hpp"

namespace pvmm::detail {

namespace {

// The local ordinal of `owner`'s device, when this process sees it (-1: unknown here).
int local_ordinal_of(const team_state& t, int owner) {
  const member_record& m = t.records[owner];
  if (m.pid == t.records[t.rank()].pid) return m.device;
  if (m.identifier[0] == 0) return t.members[owner].node == t.members[t.rank()].node ? m.device : -1;
  const int count = device_count().value_or(0);
  for (int d = 0; d < count; ++d)
    if (auto info = query_device(d);
        info && std::strncmp(info->identifier.c_str(), m.identifier, sizeof m.identifier) == 0)
      return d;
  return -1;
}

// The grants for rank `owner`'s memory: every access device that can reach it (all of them where its device is
// not visible here: the driver decides then).
std::vector<access_descriptor> grants_for(const team_state& t, int owner) {
  std::vector<access_descriptor> out;
  const int memory = local_ordinal_of(t, owner);
  for (int d : t.options.access_devices)
    if (memory < 0 || d == memory || can_access_peer(d, memory).value_or(false))
      out.push_back({location::device(d), access::read_write});
  return out;
}

// Maps `chunk` for rank `owner` at `offset` in its slot; a failure marks the peer unmapped (its earlier chunks
// unmapped too) rather than failing the window. After an abort nothing new is mapped.
void map_peer_chunk(window_state& w, int owner, physical_allocation chunk, std::size_t offset) {
  const auto grants = grants_for(*w.team, owner);
  const std::lock_guard<std::mutex> hold(w.map_lock);
  window_slot& slot = w.slots[owner];
  if (slot.given_up) return;
  slot.chunks.reserve(slot.chunks.size() + 1);  // before mapping: a chunk mapped is always listed (undo finds it)
  std::string why;
  if (w.team->aborted.load(std::memory_order_acquire))
    why = aborted_reason(w.rank());
  else if (grants.empty())
    why = fmt::format("no local device can reach rank {}'s device", owner);
  else if (auto ok = w.range.map_and_grant(owner * w.stride + offset, chunk, grants); !ok)
    why = ok.error().message();
  if (why.empty()) {
    slot.chunks.push_back(std::move(chunk));
    slot.mapped = true;
    return;
  }
  w.give_up_locked(owner, std::move(why));
}

// Rank `r`'s record against its slot here: it grows the slot from where it ends, by whole units, within the
// stride. Checked on every rank alike, so every rank fails alike.
status check_record(const window_state& w, int r, const chunk_record& c, const operation& op) {
  if (c.offset != w.slots[r].size)
    return op.fail(errc::team_mismatch,
                   fmt::format("rank {} grows from {:#x}, its slot here holds {:#x}", r, c.offset, w.slots[r].size));
  if (c.size > w.stride - c.offset || c.size % w.team->slot_unit != 0 || (c.has_fabric != 0 && c.size == 0) ||
      !std::memchr(c.no_fabric, 0, sizeof c.no_fabric))
    return op.fail(errc::protocol_error,
                   fmt::format("rank {}'s chunk record is malformed: {:#x} bytes at {:#x} in a slot of {:#x} bytes "
                               "(unit {:#x}), fabric handle {}",
                               r, c.size, c.offset, w.stride, w.team->slot_unit, c.has_fabric));
  return {};
}

// Imports one node-local peer's fd, checked against its record: its real size is what the record says.
void import_peer_fd(window_state& w, int r, const chunk_record& c, int fd, std::optional<error>& failed,
                    const operation& op) {
  auto imported = physical_allocation::import_posix_fd(fd, c.size);
  if (imported && imported->size() == c.size) return map_peer_chunk(w, r, std::move(*imported), c.offset);
  if (imported || imported.code() == errc::invalid_argument)  // not the memory its record describes
    failed = op.fail(errc::protocol_error, fmt::format("rank {}'s memory is not the {:#x} bytes its record says: {}", r,
                                                       c.size, imported ? "another size" : imported.error().message()));
  else
    w.give_up(r, imported.error().message());
}

// Takes one node-local peer's message and checks it against that rank's record; imports and maps its chunk
// unless this rank already failed (then the message is only drained). Returns the rank it came from, or the
// transport's failure (no more messages can be taken then).
result<int> receive_chunk(window_state& w, std::uint32_t step, const std::vector<int>& waiting,
                          const std::vector<chunk_record>& all, std::optional<error>& failed, deadline until,
                          const operation& op) {
  PVMM_TRY_ASSIGN(got, receive_message(*w.team, step, waiting, "memory", until, op));
  const team_message& m = got.header;
  const chunk_record& c = all[m.rank];
  if (m.failed != 0 || failed) return m.rank;  // the sender's failure travels in the agreement
  if (m.offset != c.offset || m.size != c.size || got.fd.valid() != (c.size > 0))
    failed = op.fail(errc::protocol_error,
                     fmt::format("rank {} sent {:#x} bytes at {:#x} ({}), its record says {:#x} bytes at {:#x}", m.rank,
                                 m.size, m.offset, got.fd.valid() ? "with an fd" : "no fd", c.size, c.offset));
  else if (got.fd.valid())
    import_peer_fd(w, m.rank, c, got.fd.get(), failed, op);
  return m.rank;  // the received fd closes here: the import holds its own reference
}

// The fd ring among this node's ranks. A rank that fails (here or before) still sends every peer its message,
// carrying its errc and no fd, and drains what it is sent: no peer waits for it until the deadline.
void run_fd_ring(window_state& w, std::uint32_t step, const std::vector<chunk_record>& all,
                 std::optional<error>& failed, deadline until, const operation& op) {
  team_state& t = *w.team;
  const int me = t.rank();
  const std::vector<int> node = t.node_ranks();
  const int count = static_cast<int>(node.size());
  const int index = static_cast<int>(std::find(node.begin(), node.end(), me) - node.begin());
  if (count < 2) return;
  owned_fd exported;
  if (!failed && all[me].size > 0) {
    if (auto fd = w.slots[me].chunks.back().export_posix_fd())
      exported = std::move(*fd);
    else
      failed = op.wrap(std::move(fd).error());
  }
  std::vector<int> waiting;
  for (int r : node)
    if (r != me) waiting.push_back(r);
  bool receiving = true;
  for (int k = 1; k < count; ++k) {
    team_message m;
    m.step = step;
    m.offset = all[me].offset;
    m.size = failed ? 0 : all[me].size;
    m.failed = failed ? static_cast<std::int32_t>(failed->code) : 0;
    const int fd = !failed && exported.valid() ? exported.get() : -1;
    if (auto sent = send_message(t, node[(index + k) % count], m, fd, until, op); !sent && !failed)
      failed = std::move(sent).error();
    if (!receiving) continue;
    auto from = receive_chunk(w, step, waiting, all, failed, until, op);
    if (from) {
      waiting.erase(std::find(waiting.begin(), waiting.end(), *from));
      continue;
    }
    if (!failed) failed = std::move(from).error();
    receiving = false;  // the transport failed: the agreement ends the step
  }
}  // this rank's exported fd closes here: every node-local peer holds its import

// Peers on other nodes: fabric handles, where both sides have them.
void import_remote(window_state& w, const std::vector<chunk_record>& all) {
  const team_state& t = *w.team;
  const int me = t.rank();
  for (int r = 0; r < t.size(); ++r) {
    if (t.members[r].node == t.members[me].node || all[r].size == 0) continue;
    if (!all[r].has_fabric) {
      w.give_up(r, fmt::format("rank {} is on node {} and its memory has no fabric handle ({} backend{})", r,
                               t.members[r].node, t.records[r].backend,
                               t.records[r].fabric ? "; its device exports none to this team" : ": no fabric handles"));
      continue;
    }
    auto imported = physical_allocation::import_fabric(all[r].fabric, all[r].size);
    if (!imported)
      w.give_up(r, imported.error().message());
    else
      map_peer_chunk(w, r, std::move(*imported), all[r].offset);
  }
}

// This rank's record, its own chunk exported as a fabric handle where it can be and mapped in its own slot.
chunk_record prepare_mine(window_state& w, physical_allocation& mine, std::size_t offset, std::size_t size,
                          std::optional<error>& failed) {
  chunk_record record;
  record.offset = offset;
  record.size = failed ? 0 : size;
  if (record.size > 0 && (w.handles & handle_types::fabric) != handle_types::none) {
    if (auto f = mine.export_fabric()) {
      record.fabric = *f;
      record.has_fabric = 1;
    } else
      w.fabric_refused = f.error().message();
  }
  std::strncpy(record.no_fabric, w.fabric_refused.c_str(), sizeof record.no_fabric - 1);
  if (record.size > 0) {
    const auto grants = grants_for(*w.team, w.rank());
    const std::lock_guard<std::mutex> hold(w.map_lock);
    if (auto ok = w.range.map_and_grant(w.rank() * w.stride + offset, mine, grants); !ok)
      failed = ok.error();
    else {
      w.slots[w.rank()].chunks.push_back(std::move(mine));
      w.slots[w.rank()].mapped = true;
    }
  }
  return record;
}

// The fds the ring needs at once (exported fd, outgoing connection, accepted connection, received fd, its import),
// found free before the step's allgather: a rank that cannot send would leave its peers waiting for its message
// until their deadline, so its shortage travels in its record instead and every rank fails at once naming it.
constexpr int ring_fds = 5;
std::optional<error> probe_ring_fds(const team_state& t, const operation& op) {
  if (t.node_ranks().size() < 2) return std::nullopt;
  int fds[ring_fds];
  int opened = 0, err = 0;
  for (; opened < ring_fds; ++opened)
    if ((fds[opened] = ::eventfd(0, EFD_CLOEXEC)) < 0) {
      err = errno;
      break;
    }
  for (int i = 0; i < opened; ++i) ::close(fds[i]);
  if (opened == ring_fds || !is_fd_exhaustion(err)) return std::nullopt;
  return op.wrap(fd_exhaustion_error(
      "eventfd", err, fmt::format("rank {} needs {} free fds for the window's fd ring", t.rank(), ring_fds)));
}

// Connections a failed step left on the listener (a rank that stopped taking messages): every peer sent what it
// would before the agreement, so none is still on its way.
void drain_listener(team_state& t) {
  if (!t.listener.valid()) return;
  while (t.listener.accept(std::chrono::milliseconds(0))) {
  }
}

}  // namespace

status exchange_chunks(window_state& w, physical_allocation mine, std::size_t offset, std::size_t chunk_size,
                       const error* failed_before, deadline until, const operation& op) {
  team_state& t = *w.team;
  const int me = t.rank();
  const step_guard one_at_a_time(w);
  if (!one_at_a_time.entered())
    return op.fail(errc::busy, fmt::format("rank {}: a step of this window is in progress on another thread", me));
  PVMM_TRY(check_aborted(t, op));
  const std::uint32_t step = t.next_step++;
  std::optional<error> failed;
  if (failed_before) failed = *failed_before;
  if (!failed) failed = probe_ring_fds(t, op);
  const std::vector<std::size_t> kept = w.chunk_counts();
  const chunk_record record = prepare_mine(w, mine, offset, chunk_size, failed);
  // Under no_throw, so a step memory ran out in is undone like any failed one.
  auto outcome = no_throw<status>(op.name(), [&]() -> status {
    bool exchanged = false;
    auto gathered = all_gather(*t.ranks, step, record, failed, "allgather chunks", until, op, &exchanged);
    if (!gathered && !exchanged) return std::move(gathered).error();  // the bootstrap failed: it tells the peers
    // A failure seen here alone (records its bootstrap handed it wrong) still goes through the ring and the
    // agreement, so every rank fails at once naming this one.
    std::vector<chunk_record> all;
    if (gathered) {
      all = std::move(*gathered);
    } else {
      if (!failed) failed = std::move(gathered).error();
      all.assign(static_cast<std::size_t>(t.size()), chunk_record{});
      all[static_cast<std::size_t>(me)] = record;
    }
    for (int r = 0; r < t.size() && !failed; ++r)
      if (auto ok = check_record(w, r, all[r], op); !ok) failed = std::move(ok).error();
    run_fd_ring(w, step, all, failed, until, op);
    if (!failed) import_remote(w, all);
    // Every rank has imported before any returns (an exporter may then drop what it no longer needs), and every
    // rank returns the same outcome.
    if (auto agreed = agree(t, step, failed, "chunks mapped", until, op); !agreed) {
      drain_listener(t);
      return agreed;
    }
    for (int r = 0; r < t.size(); ++r) w.slots[r].size = all[r].offset + all[r].size;
    return {};
  });
  if (!outcome) w.undo_step(kept);
  return outcome;
}

status reserve_range(window_state& w, deadline until, const operation& op) {
  auto range = address_reservation::reserve(w.stride * w.slots.size());
  if (!range) {
    const auto e = op.wrap(std::move(range).error());
    auto announced = exchange_chunks(w, physical_allocation(), 0, 0, &e, until, op);
    return std::move(announced).error();
  }
  w.range = std::move(*range);
  return {};
}

}  // namespace pvmm::detail
