// What a team holds: its bootstrap, what it learnt of every rank, and the listener its node-local peers send fds
// to. Shared by the team owner and its windows (a window keeps its team's state alive).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <pvmm/endpoint.hpp>
#include <pvmm/team.hpp>

namespace pvmm::detail {

/// Every rank's identity as allgathered at team creation (fixed layout; the bytes travel between processes).
struct member_record {
  static constexpr std::uint32_t magic_value = 0x4d545650;  // "PVTM"
  static constexpr std::uint32_t version_value = 1;
  std::uint32_t magic = magic_value;
  std::uint32_t version = version_value;
  std::int32_t rank = 0;
  std::int32_t size = 0;
  std::int32_t node = 0;
  std::int32_t device = 0;
  std::int64_t pid = 0;
  std::uint64_t team_id = 0;  // rank 0's is the team's
  char backend[16] = {};
  char identifier[64] = {};                   // the device's PCI id (empty on the host backend)
  std::uint64_t granularity = 0;              // of its window memory (device memory, exportable)
  std::uint64_t reservation_granularity = 0;  // of its address reservations
  std::uint8_t posix_fd = 0;
  std::uint8_t fabric = 0;
  std::uint8_t reserved[2] = {};
  std::int32_t failed = 0;  // the errc of this rank's local failure (0: none); its other fields are then unset
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
  ipc::listener listener;       // node-local peers send this rank their fds here (only with node-local peers)
  std::uint32_t next_step = 0;  // every window create/grow is one step, the same on every rank

  int rank() const noexcept { return ranks->rank(); }
  int size() const noexcept { return ranks->size(); }
  /// The endpoint name rank `r` listens on.
  std::string endpoint_of(int r) const;
  /// The ranks on this rank's node, in rank order (this rank included).
  std::vector<int> node_ranks() const;
};

}  // namespace pvmm::detail
