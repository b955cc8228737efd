// One collective step of a symmetric window (create or grow): every rank's new chunk described in one allgather,
// node-local chunks sent as POSIX fds over the team's endpoints in a ring, remote ones imported from fabric bytes.
//
// The fd ring: in round k each rank connects to the rank k places after it on its node, sends its fd and closes
// the connection, then takes the next connection that arrives, imports and maps it and closes the fd. So a process
// holds the team's listener, its own exported fd, one connection and one received fd at a time, whatever N is
// (issue 26: the fd count per process stays bounded as N grows; NCCL exports lazily for the same reason).
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <pvmm/device.hpp>

#include <fmt/format.h>

#include "team/bootstrap_common.hpp"
#include "team/window_state.hpp"

namespace pvmm::detail {
namespace {

struct chunk_record {
  static constexpr std::uint32_t magic_value = 0x43575650;  // "PVWC"
  std::uint32_t magic = magic_value;
  std::uint32_t step = 0;
  std::int32_t failed = 0;  // the errc of this rank's local failure, 0 when none
  std::int32_t has_fabric = 0;
  std::uint64_t offset = 0;  // where the chunk goes in the rank's slot
  std::uint64_t size = 0;    // 0: the rank adds nothing this step
  std::uint64_t max_size = 0;
  fabric_handle fabric;
  char failure[192] = {};
  char no_fabric[192] = {};  // why the rank's chunk has no fabric handle (empty: it has one, or never had)
};

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
// unmapped too) rather than failing the window.
void map_peer_chunk(window_state& w, int owner, physical_allocation chunk, std::size_t offset) {
  window_slot& slot = w.slots[owner];
  if (slot.given_up) return;
  const auto grants = grants_for(*w.team, owner);
  std::string why;
  if (grants.empty())
    why = fmt::format("no local device can reach rank {}'s device", owner);
  else if (auto ok = w.range.map_and_grant(owner * w.stride + offset, chunk, grants); !ok)
    why = ok.error().message();
  if (why.empty()) {
    slot.chunks.push_back(std::move(chunk));
    slot.mapped = true;
    return;
  }
  w.give_up(owner, std::move(why));
}

// Takes one node-local peer's chunk, imports and maps it; returns the rank it came from.
result<int> receive_chunk(window_state& w, std::uint32_t step, const std::vector<int>& waiting, deadline until,
                          const operation& op) {
  PVMM_TRY_ASSIGN(got, receive_message(*w.team, step, waiting, "memory", until, op));
  const team_message& m = got.header;
  if (got.fd.valid()) {
    auto imported = physical_allocation::import_posix_fd(got.fd.get(), m.size);
    if (!imported)
      w.give_up(m.rank, imported.error().message());
    else
      map_peer_chunk(w, m.rank, std::move(*imported), m.offset);
  }  // the received fd closes here: the import holds its own reference
  return m.rank;
}

}  // namespace

status exchange_chunks(window_state& w, physical_allocation mine, std::size_t offset, std::size_t chunk_size,
                       const error* failed, deadline until, const operation& op) {
  const std::lock_guard<std::mutex> hold(w.step_lock);
  team_state& t = *w.team;
  const int me = t.rank();
  const int n = t.size();
  const std::uint32_t step = t.next_step++;
  PVMM_TRY(check_aborted(t, op));
  chunk_record record;
  record.step = step;
  record.offset = offset;
  record.max_size = w.max_size;
  auto fail_locally = [&](const error& e) {
    record.failed = static_cast<std::int32_t>(e.code);
    std::strncpy(record.failure, e.message().c_str(), sizeof record.failure - 1);
  };
  if (failed) {
    fail_locally(*failed);
    chunk_size = 0;
  }
  record.size = chunk_size;
  if (chunk_size > 0 && (w.handles & handle_types::fabric) != handle_types::none) {
    if (auto f = mine.export_fabric()) {
      record.fabric = *f;
      record.has_fabric = 1;
    } else
      w.fabric_refused = f.error().message();
  }
  std::strncpy(record.no_fabric, w.fabric_refused.c_str(), sizeof record.no_fabric - 1);
  if (chunk_size > 0) {
    const auto grants = grants_for(t, me);
    if (auto ok = w.range.map_and_grant(me * w.stride + offset, mine, grants); !ok) fail_locally(ok.error());
  }
  std::vector<chunk_record> all(n);
  PVMM_TRY(op.step("allgather chunks", [&] { return t.ranks->allgather(&record, sizeof record, all.data(), until); }));
  for (int r = 0; r < n; ++r) {
    if (all[r].magic != chunk_record::magic_value || all[r].step != step)
      return op.fail(errc::team_mismatch,
                     fmt::format("rank {} is at window step {}, this rank at {}", r, all[r].step, step));
    if (all[r].failed != 0 && r == me) return failed ? *failed : op.fail(peer_errc(all[r].failed), record.failure);
    if (all[r].failed != 0)
      return op.fail(peer_errc(all[r].failed),
                     fmt::format("rank {} failed: {}", r,
                                 std::string(all[r].failure, strnlen(all[r].failure, sizeof all[r].failure))));
    if (all[r].max_size != w.max_size)
      return op.fail(
          errc::team_mismatch,
          fmt::format("rank {} asked for max_size {:#x}, rank {} for {:#x}", r, all[r].max_size, me, w.max_size),
          "every rank passes the same max_size (the slots' stride)");
    if (all[r].offset != w.slots[r].size)
      return op.fail(errc::team_mismatch, fmt::format("rank {} grows from {:#x}, its slot here holds {:#x}", r,
                                                      all[r].offset, w.slots[r].size));
  }
  if (chunk_size > 0) {
    w.slots[me].chunks.push_back(std::move(mine));
    w.slots[me].mapped = true;
  }
  // Node-local peers: the fd ring.
  const std::vector<int> node = t.node_ranks();
  const int count = static_cast<int>(node.size());
  const int index = static_cast<int>(std::find(node.begin(), node.end(), me) - node.begin());
  if (count > 1) {
    owned_fd exported;
    if (chunk_size > 0) {
      auto fd = w.slots[me].chunks.back().export_posix_fd();
      if (!fd) return op.wrap(std::move(fd).error());
      exported = std::move(*fd);
    }
    std::vector<int> waiting;
    for (int r : node)
      if (r != me) waiting.push_back(r);
    team_message m;
    m.step = step;
    m.offset = offset;
    m.size = chunk_size;
    for (int k = 1; k < count; ++k) {
      PVMM_TRY(send_message(t, node[(index + k) % count], m, exported.valid() ? exported.get() : -1, until, op));
      PVMM_TRY_ASSIGN(from, receive_chunk(w, step, waiting, until, op));
      waiting.erase(std::find(waiting.begin(), waiting.end(), from));
    }
  }  // this rank's exported fd closes here: every node-local peer holds its import
  // Peers on other nodes: fabric handles, where both sides have them.
  for (int r = 0; r < n; ++r) {
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
  for (int r = 0; r < n; ++r) w.slots[r].size = all[r].offset + all[r].size;
  // Every rank has imported before any returns: an exporter may then drop what it no longer needs.
  return op.step("barrier after mapping", [&] { return t.ranks->barrier(until); });
}

}  // namespace pvmm::detail
